"""What went wrong with a file of the state dir, as one :class:`~console.errors.StateError`.

The state dir holds SQLite files (``jobs.sqlite3``, ``alerts.sqlite3``, ``notify.sqlite3``)
and the log archives (``logs/<job>/node<R>.log``). A damaged, locked, read-only or misplaced
file, or a full filesystem, is a normal event for the person at the terminal: it is said as
``<file>: <what is wrong>`` with the fix, never as a ``sqlite3`` or ``OSError`` traceback.

SQLite's result codes (https://www.sqlite.org/rescode.html) name the failure; an I/O error on
a filesystem with no space left (SQLite reports a failed ``-shm`` allocation as
``SQLITE_IOERR_SHMSIZE``, not ``SQLITE_FULL``) is said as the full disk it is.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from console.errors import StateError, StateProblem

#: How long a SQLite file of the state dir waits for another process's lock (s): every
#: transaction gpuconsole opens is short (milliseconds), so a lock held longer than this is
#: held by a process that is stuck or not gpuconsole's (a ``sqlite3`` shell).
LOCK_WAIT_S = 5.0

#: Below this many free bytes a filesystem counts as full (SQLite and the archive need room
#: for a page or a batch, not for one byte).
FULL_BELOW = 1 << 20

_SQLITE_PRIMARY: dict[int, StateProblem] = {
    5: "locked",  # SQLITE_BUSY
    6: "locked",  # SQLITE_LOCKED
    8: "read-only",  # SQLITE_READONLY
    11: "damaged",  # SQLITE_CORRUPT
    13: "full",  # SQLITE_FULL
    26: "damaged",  # SQLITE_NOTADB
}


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer can still use on the filesystem of ``path`` (its nearest
    existing folder), or ``None`` when it cannot be told."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _read_only_fs(path: Path) -> bool:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _full_fix(path: Path) -> str:
    return (
        f"free space on the filesystem of {path.parent} (`df -h {path.parent}`), or set "
        "GPUCONSOLE_STATE_DIR to a folder on another one"
    )


def _problem_of_sqlite(e: sqlite3.Error) -> StateProblem | None:
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        if (code & 0xFF) == 10:  # SQLITE_IOERR
            return "io"
        if (code & 0xFF) == 14:  # SQLITE_CANTOPEN: a folder, permissions, a read-only dir
            return None
        return _SQLITE_PRIMARY.get(code & 0xFF)
    text = str(e).lower()
    for needle, kind in (
        ("locked", "locked"),
        ("readonly", "read-only"),
        ("not a database", "damaged"),
        ("malformed", "damaged"),
        ("full", "full"),
        ("disk i/o", "io"),
    ):
        if needle in text:
            return kind  # type: ignore[return-value]
    return None


def db_error(e: sqlite3.Error, path: Path, *, what: str, if_lost: str) -> StateError:
    """The :class:`StateError` for a SQLite failure on the state file ``path``.

    Args:
        e: what :mod:`sqlite3` raised.
        path: the database file.
        what: the file's role in messages (``job store``, ``alert store``).
        if_lost: what moving the file aside costs (for the fix of a damaged file).
    """
    kind = _problem_of_sqlite(e)
    detail = str(e)
    aside = f"move it aside (`mv {path} {path}.damaged`): {if_lost}"
    if kind is None:  # cannot open: say why
        if path.is_dir():
            return StateError(str(path), "directory", f"is a directory, not a {what}", aside)
        kind = "read-only" if _read_only_fs(path) or not os.access(path.parent, os.W_OK) else "io"
    if kind == "io" and (free := free_bytes(path)) is not None and free < FULL_BELOW:
        kind = "full"  # a failed -shm or page allocation on a full filesystem
    if kind == "damaged":
        return StateError(str(path), kind, f"damaged, not a readable {what} ({detail})", aside)
    if kind == "locked":
        return StateError(
            str(path),
            kind,
            f"locked by another process for {LOCK_WAIT_S:.0f} s (another gpuconsole, or a "
            f"sqlite3 shell, holds it)",
            f"let that command finish; `fuser -v {path}` shows which process holds it",
        )
    if kind == "full":
        return StateError(str(path), kind, "no space left on its filesystem", _full_fix(path))
    if kind == "read-only":
        why = "its filesystem is mounted read-only" if _read_only_fs(path) else "read-only"
        return StateError(
            str(path),
            kind,
            f"cannot be written: {why} ({detail})",
            "make the state dir writable, or set GPUCONSOLE_STATE_DIR to a writable folder",
        )
    return StateError(
        str(path),
        "io",
        f"cannot be read or written ({detail})",
        f"check the disk (`dmesg`); if the file is damaged, {aside}",
    )


def file_error(e: OSError, path: Path, *, what: str, if_lost: str) -> StateError:
    """The :class:`StateError` for an ``OSError`` on the state file ``path`` (a log archive).

    Args:
        e: what the file operation raised.
        path: the file.
        what: the file's role in messages (``log archive``).
        if_lost: what moving the file aside costs.
    """
    reason = e.strerror or str(e)
    aside = f"move it aside (`mv {path} {path}.damaged`): {if_lost}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StateError(str(path), "full", "no space left on its filesystem", _full_fix(path))
    if isinstance(e, IsADirectoryError) or e.errno == errno.EISDIR:
        return StateError(str(path), "directory", f"is a directory, not a {what}", aside)
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StateError(
            str(path),
            "read-only",
            f"cannot be written: {reason}",
            "make the state dir writable, or set GPUCONSOLE_STATE_DIR to a writable folder",
        )
    if isinstance(e, NotADirectoryError):
        return StateError(
            str(path),
            "damaged",
            f"a file stands where its folder should be ({reason})",
            f"move {path.parent} aside",
        )
    return StateError(
        str(path), "io", f"cannot be read or written ({reason})", "check the disk (`dmesg`)"
    )
