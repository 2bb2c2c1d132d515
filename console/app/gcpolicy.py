"""The app's cyclic-GC policy: keep the collector's pauses short under a busy log stream.

CPython's cyclic GC walks every container object of the generation it collects. The app's log
lines are kept as untracked tuples (:mod:`console.jobs.logbuffer`), but Textual allocates some
100,000 short-lived containers a second while it repaints 8 panes, and a full (generation 2)
pass over the whole heap stalled the event loop for 150-250 ms (docs/benchmarks.md). So:

- what exists once the first screen is up (modules, classes, widgets) is frozen
  (``gc.freeze``, as the Python docs advise for objects that live as long as the process);
- the thresholds are raised (collections every 5,000 net allocations instead of 700);
- after each full pass the survivors are frozen too, so the next full pass only walks what
  was allocated since (tens of milliseconds instead of hundreds);
- cyclic garbage among frozen objects is not collected until :meth:`GcPolicy.sweep`, which
  the app runs at natural pauses (a log screen closing) and at least every
  :data:`SWEEP_INTERVAL_S`, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

SWEEP_INTERVAL_S = 600.0
"""Longest time between two sweeps (unfreeze, full collection, freeze again)."""

THRESHOLDS = (5_000, 10, 10)
"""``gc.set_threshold`` while the app runs (CPython's default: 700, 10, 10)."""


class GcPolicy:
    """Installs and undoes the policy of the module docstring for one running app.

    Call :meth:`start` on the app's event loop once its first screen is up, :meth:`sweep` at
    pauses, :meth:`stop` at exit (restores the thresholds, unfreezes, removes the callback).
    """

    def __init__(self) -> None:
        self._defaults = gc.get_threshold()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._freeze_pending = False
        self._last_sweep = 0.0
        self.freezes = 0
        """Full passes whose survivors were frozen since :meth:`start`."""
        self.sweeps = 0
        """Sweeps run since :meth:`start`."""

    def start(self) -> None:
        """Freeze the startup heap, raise the thresholds, freeze after each full pass."""
        self._loop = asyncio.get_running_loop()
        gc.collect()
        gc.freeze()
        self._last_sweep = time.monotonic()
        gc.set_threshold(*THRESHOLDS)
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def sweep(self) -> None:
        """Collect the cyclic garbage among frozen objects (one full pass over the heap:
        about 0.1-0.3 s), then freeze the survivors again. Nothing before :meth:`start` or
        after :meth:`stop`."""
        if self._loop is None:
            return
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.sweeps += 1
        self._last_sweep = time.monotonic()

    def stop(self) -> None:
        """Undo everything :meth:`start` did."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        gc.set_threshold(*self._defaults)
        gc.unfreeze()
        self._loop = None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # runs inside the collector, on whichever thread allocated: only schedule work
        if phase != "stop" or info.get("generation") != 2 or self._freeze_pending:
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        self._freeze_pending = True
        try:
            loop.call_soon_threadsafe(self._after_full_pass)
        except RuntimeError:  # the loop closed meanwhile
            self._freeze_pending = False

    def _after_full_pass(self) -> None:
        self._freeze_pending = False
        if self._loop is None:
            return
        if time.monotonic() - self._last_sweep >= SWEEP_INTERVAL_S:
            self.sweep()
            return
        gc.freeze()
        self.freezes += 1
