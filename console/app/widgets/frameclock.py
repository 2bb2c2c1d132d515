"""When the log panes repaint: a frame rate that gives way to keys and to a flood.

Repainting the tiled log panes is the app's largest cost while jobs log fast (Textual lays out
and styles every visible row again when a pane scrolls: tens of milliseconds for 8 panes on a
busy 2-core machine, docs/benchmarks.md). So the panes repaint together, one frame at a time,
and :class:`FrameClock` decides when the next frame may run:

- at most every :data:`FRAME_MIN_S` (10 frames a second when lines trickle in);
- no more often than keeps the frames' own CPU time (measured on the UI thread, from the
  panes' sync to the end of the screen update that drew them) under :data:`FRAME_BUDGET` of a
  core: a flood lengthens the interval, up to :data:`FRAME_MAX_S`, so frames are skipped,
  never queued, and the newest line is still on screen within that time;
- not within :data:`KEY_QUIET_S` after a key, so the screen update that shows what the key
  did carries no log repaint with it (input before output), unless the frame is already
  :data:`FRAME_MAX_S` overdue (a held key never freezes the panes).

Pure arithmetic on times the caller passes in (no Textual), so it is tested without a screen.
"""

from __future__ import annotations

FRAME_MIN_S = 0.1
"""Shortest time between two frames (s)."""

FRAME_MAX_S = 0.4
"""Longest time between two frames while lines come (s)."""

FRAME_BUDGET = 0.08
"""Share of one core the frames may take: the interval is a frame's cost over this."""

KEY_QUIET_S = 0.06
"""After a key, frames wait this long (s)."""

_SMOOTH = 0.5
"""Weight of the newest frame's cost in the running estimate (one slow frame, a GC pass,
does not halve the frame rate on its own)."""


class FrameClock:
    """The next frame's time, from the last frame's start and cost and the last key.

    Times are ``time.monotonic()`` seconds; costs are CPU seconds of the UI thread.

    Attributes:
        interval: the current time between two frames (s), in ``[min_s, max_s]``.
        cost: the running estimate of one frame's cost (CPU s).
        frames: frames started so far.
    """

    def __init__(
        self,
        *,
        min_s: float = FRAME_MIN_S,
        max_s: float = FRAME_MAX_S,
        budget: float = FRAME_BUDGET,
        quiet_s: float = KEY_QUIET_S,
    ) -> None:
        self.min_s, self.max_s, self.budget, self.quiet_s = min_s, max_s, budget, quiet_s
        self.interval = min_s
        self.cost = 0.0
        self.frames = 0
        self._last_start = float("-inf")
        self._quiet_until = float("-inf")

    def delay(self, now: float, wanted_since: float) -> float:
        """Seconds from ``now`` until a frame wanted since ``wanted_since`` (when the first
        line it would show arrived) may start; 0: now."""
        due = self._last_start + self.interval
        if self._quiet_until > due and self._quiet_until - wanted_since < self.max_s:
            due = self._quiet_until
        return max(0.0, due - now)

    def hold(self, now: float) -> float:
        """Seconds the running frame's next pane waits at ``now``: what is left of the quiet
        after a key, unless the frame started :attr:`max_s` or more ago; 0: go on."""
        if now - self._last_start >= self.max_s:
            return 0.0
        return max(0.0, self._quiet_until - now)

    def key(self, now: float) -> None:
        """A key arrived at ``now``."""
        self._quiet_until = now + self.quiet_s

    def started(self, now: float) -> None:
        """A frame started at ``now``."""
        self._last_start = now
        self.frames += 1

    def painted(self, cost_s: float) -> None:
        """The last frame is on screen; drawing it cost ``cost_s`` CPU seconds of the UI
        thread."""
        self.cost = cost_s if self.frames <= 1 else _SMOOTH * cost_s + (1 - _SMOOTH) * self.cost
        self.interval = min(self.max_s, max(self.min_s, self.cost / self.budget))
