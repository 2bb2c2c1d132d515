"""Jittered exponential backoff between retries, for every retry loop of gpuconsole: log
follows (``remote/logs.py``), the fleet monitor's telemetry streams
(``console/fleet/monitor.py``) and ``watch``'s notification deliveries
(``console/watch/notify.py``).

Each delay is the current step times a random factor in ``[1 - jitter, 1 + jitter]`` (so many
hosts or URLs failing at once do not retry in lockstep); the step starts at ``first`` and
doubles after each delay, up to ``cap``; :meth:`Backoff.reset` starts it over once the
operation works again.
"""

from __future__ import annotations

import asyncio
import random


class Backoff:
    """The delays (s) of one retry loop.

    Args:
        first: the first step (s); 0 retries at once.
        cap: the longest step (s), also when below ``first``; the delay can be up to
            ``cap * (1 + jitter)``.
        jitter: the spread of the random factor around 1, between 0 and 1.
    """

    def __init__(self, first: float, cap: float, *, jitter: float = 0.5) -> None:
        if not 0 <= jitter <= 1 or first < 0 or cap < 0:
            raise ValueError(
                f"Backoff({first}, {cap}, jitter={jitter}): need first >= 0, "
                "cap >= 0 and 0 <= jitter <= 1"
            )
        self.first = min(first, cap)
        self.cap = cap
        self.jitter = jitter
        self.step = self.first

    def next(self) -> float:
        """The next delay (s), jittered; the step then doubles (at most ``cap``)."""
        delay = self.step * (1 - self.jitter + 2 * self.jitter * random.random())
        self.step = min(self.step * 2, self.cap)
        return delay

    def reset(self) -> None:
        """Start over from ``first``: the operation worked."""
        self.step = self.first

    async def sleep(self) -> None:
        """Wait the next delay on the running loop."""
        await asyncio.sleep(self.next())
