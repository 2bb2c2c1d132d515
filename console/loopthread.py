"""An asyncio event loop in a thread of its own, for work that must not share the caller's loop.

The console's log intake runs here (:meth:`console.service.Service.start_follow` with
``thread=True``): SSH decryption, the Docker log stream's parsing, rank tagging and archiving
of thousands of lines a second would otherwise queue every key press and repaint of the
Textual app behind them. Objects bound to a loop (asyncssh connections, tasks) created on
this loop stay on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger("gpuconsole.loopthread")

T = TypeVar("T")


class LoopThread:
    """A daemon thread running an asyncio event loop, started on first use.

    Args:
        name: the thread's name (shows in ``py-spy`` and thread dumps).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The thread's loop (starting the thread if needed)."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                try:
                    loop.run_forever()
                finally:
                    _finish(loop)

            self._thread = threading.Thread(target=main, name=self.name, daemon=True)
            self._thread.start()
            started.wait()
            self._loop = loop
        return self._loop

    @property
    def running(self) -> bool:
        """Whether the thread was started and has not been stopped."""
        return self._thread is not None and self._thread.is_alive()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this thread's loop and await its result from the calling loop.

        Cancelling the caller cancels ``coro`` and waits until it has ended (its ``finally``
        blocks ran), so its connections are closed when this returns.

        Raises:
            whatever ``coro`` raises.
        """
        loop = self.loop
        caller = asyncio.get_running_loop()
        done: asyncio.Future[T] = caller.create_future()
        box: list[asyncio.Task[T]] = []

        def copy(task: asyncio.Task[T]) -> None:
            if done.done():
                return
            if task.cancelled():
                done.cancel()
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())

        def start() -> None:
            task = loop.create_task(coro)
            task.add_done_callback(lambda t: _call_soon(caller, copy, t))
            box.append(task)

        loop.call_soon_threadsafe(start)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # start() ran first: call_soon_threadsafe keeps order
            loop.call_soon_threadsafe(lambda: box[0].cancel())
            with contextlib.suppress(BaseException):
                await done
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop (pending tasks are cancelled and awaited) and join the thread.
        Blocking: call it from a worker thread when a loop is running."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("thread %s did not stop within %.0f s", self.name, timeout)
        self._loop = None
        self._thread = None


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's loop is closed
        loop.call_soon_threadsafe(fn, *args)


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on ``loop``, let it unwind, close the loop."""
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
