"""Whether a job's launch is still in flight: the launcher token recorded with a job and the
staleness rule for containers that were created but never started.

Kept apart from :mod:`console.jobs.launch` (which re-exports these names) so that reading job
states (``ps``, :mod:`console.jobs.status`) does not import the launch path: the plan, the
job-spec models and the Docker plan (CLI start-up, issue 11).
"""

from __future__ import annotations

import os
import socket

__all__ = ["LAUNCH_STALE_S", "launch_in_flight", "launcher_alive", "launcher_token"]

LAUNCH_STALE_S = 120.0
"""A container still ``created`` this long after its creation, whose launcher cannot be asked
(another machine, an adopted job), belongs to an interrupted launch (s). Creating and starting
every container of a job takes seconds; image pulls and workdir syncs happen before."""


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), so a
    reused pid is not taken for the launcher; ``None`` where there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def launcher_token() -> str:
    """This process as a job's launcher: ``<hostname> <pid> <start ticks or ->``."""
    pid = os.getpid()
    return f"{socket.gethostname()} {pid} {_start_ticks(pid) or '-'}"


def launcher_alive(token: str) -> bool | None:
    """Whether the process named by :func:`launcher_token` still runs: ``None`` when it ran on
    another machine (it cannot be asked from here)."""
    parts = token.split()
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, pid, ticks = parts[0], int(parts[1]), parts[2]
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user
    return ticks == "-" or _start_ticks(pid) in (ticks, None)


def launch_in_flight(launcher: str | None, created_s: float | None, now: float) -> bool:
    """Whether a job's launch may still be creating or starting its containers.

    Args:
        launcher: the job record's launcher (``None``: finished, or not launched from this
            store).
        created_s: when its oldest never-started container was created (Unix s), else when
            the job was submitted.
        now: Unix seconds.

    The launcher's process decides when it can be asked (same machine); else a container
    that is still ``created`` after :data:`LAUNCH_STALE_S` counts as abandoned.
    """
    if launcher is not None:
        alive = launcher_alive(launcher)
        if alive is not None:
            return alive
    return created_s is not None and now - created_s < LAUNCH_STALE_S
