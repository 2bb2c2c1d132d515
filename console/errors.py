"""Console-side errors; all derive from :class:`remote.errors.GpuConsoleError`."""

from __future__ import annotations

from typing import Literal

from remote.errors import (
    AuthenticationFailed,
    GpuConsoleError,
    HostKeyRefused,
    TransportError,
)

__all__ = [
    "ConfigError",
    "GpuConsoleError",
    "JobError",
    "JobNameInUse",
    "JobNotFound",
    "PlanError",
    "StateError",
    "UsageError",
    "host_reason",
]


class ConfigError(GpuConsoleError):
    """A profile or job spec is invalid.

    The message starts with ``file:line:`` when the place is known, and names the field.
    """

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        what = f"{field}: " if field else ""
        super().__init__(f"{where}{what}{message}", hint)
        self.detail = message
        self.path = path
        self.line = line
        self.field = field


class PlanError(GpuConsoleError):
    """A valid spec cannot run on this fleet (unknown host, too few GPUs, ...)."""


class JobError(GpuConsoleError):
    """A job operation failed."""


class JobNotFound(JobError):
    """No job matches the id or name given."""


class JobNameInUse(JobError):
    """A job with this name is already running."""


class StateError(GpuConsoleError):
    """A file of the state dir (``jobs.sqlite3``, ``alerts.sqlite3``, ``notify.sqlite3``, a
    log archive) cannot be read or written: damaged, locked by another process, read-only, a
    directory, or its filesystem is full. The message starts with the file; exit status 1.

    Attributes:
        path: the file.
        kind: what is wrong (:data:`StateProblem`).
    """

    def __init__(
        self, path: str, kind: StateProblem, message: str, hint: str | None = None
    ) -> None:
        super().__init__(f"{path}: {message}", hint)
        self.path = path
        self.kind = kind


StateProblem = Literal["damaged", "locked", "read-only", "directory", "full", "io"]
"""What is wrong with a state file: ``damaged`` (not a database, corrupt pages, unreadable
records), ``locked`` (another process holds its lock), ``read-only`` (mount or permissions),
``directory`` (a folder where the file should be), ``full`` (no space left on its
filesystem), ``io`` (any other I/O failure)."""


class UsageError(GpuConsoleError):
    """A flag or argument names something that does not exist (``--node 9``): bad input,
    exit status 2. The message starts with the flag."""


def host_reason(e: GpuConsoleError, *, named: bool = True) -> str:
    """Why a host could not be asked, as one line for a listing or a fleet row.

    ``named=False`` drops the ``host NAME:`` a :class:`~remote.errors.TransportError` starts
    with (the row or line already names the host). An untrusted host key (unknown, changed or
    revoked) or a refused login carries its fix (an unknown key: ``ssh-keyscan ...`` or
    ``accept_new_host_keys``; a changed one: verify the new key, remove the old line; the key
    or user to check), which a person cannot guess from the reason alone.
    """
    text = e.detail if not named and isinstance(e, TransportError) else e.message
    if isinstance(e, (HostKeyRefused, AuthenticationFailed)) and e.hint:
        text += f"; fix: {e.hint}"
    return text
