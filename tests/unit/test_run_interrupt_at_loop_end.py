"""Ctrl-C while ``asyncio.run`` ends the loop (console/cli/base.py ``run``).

``asyncio.run`` closes its runner with ``loop.run_until_complete(loop.shutdown_asyncgens())``:
a Ctrl-C between the making of that coroutine and its first step leaves it never awaited,
and Python warns about it when it is collected, after ``interrupted`` was said (seen in
tests/unit/test_interrupt.py's SIGINT sweep: ``RuntimeWarning: coroutine
'BaseEventLoop.shutdown_asyncgens' was never awaited``). Here the interrupt is put exactly
there, so the case is reproduced every time.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

from console.cli import base
from console.entry import INTERRUPTED_EXIT


def test_ctrl_c_as_the_loop_shuts_down_its_async_generators(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = asyncio.BaseEventLoop.run_until_complete
    cut: list[str] = []

    def run_until_complete(self: asyncio.BaseEventLoop, future: Any) -> Any:
        name = getattr(future, "__qualname__", "")
        if name == "BaseEventLoop.shutdown_asyncgens":  # made, never started
            cut.append(name)
            raise KeyboardInterrupt
        return real(self, future)

    monkeypatch.setattr(asyncio.BaseEventLoop, "run_until_complete", run_until_complete)

    async def command() -> int:
        await asyncio.sleep(0)
        return 0

    code: object = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            base.run(command())
        except SystemExit as e:  # its traceback (and the coroutine it holds) freed after this
            code = e.code
        gc.collect()
    assert cut == ["BaseEventLoop.shutdown_asyncgens"]
    assert code == INTERRUPTED_EXIT
    assert [str(w.message) for w in caught] == []
    assert capsys.readouterr().err == "interrupted\n"
