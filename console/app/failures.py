"""Worker failures, said in one place: :func:`reported` and the app's ``report_failure``.

A worker body decorated with :func:`reported` (under ``@work``) never fails its worker: what
it raises is handed to :meth:`console.app.host.AppHost.report_failure` of its node's app,
which says it (a :class:`~remote.errors.GpuConsoleError` with its fix; anything else, a bug,
logged with its traceback and said in one line: it never ends the console). What a worker
handles itself (the submit modal's errors, a notebook that cannot start) never gets there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from textual.dom import DOMNode

from console.app.host import host

__all__ = ["reported"]

P = ParamSpec("P")
N = TypeVar("N", bound=DOMNode)

WorkerBody = Callable[Concatenate[N, P], Coroutine[Any, Any, None]]


def reported(title: str) -> Callable[[WorkerBody[N, P]], WorkerBody[N, P]]:
    """A worker body whose failure is said under ``title`` (the notification's) by the app
    (see the module docstring); cancellation passes through."""

    def wrap(body: WorkerBody[N, P]) -> WorkerBody[N, P]:
        async def run(node: N, /, *args: P.args, **kwargs: P.kwargs) -> None:
            try:
                await body(node, *args, **kwargs)
            except Exception as e:
                host(node.app).report_failure(e, title)

        functools.update_wrapper(run, body)  # its name: the worker's
        return run

    return wrap
