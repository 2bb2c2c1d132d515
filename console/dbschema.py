"""Versioned SQLite schemas for the local state files (``jobs.sqlite3``, ``alerts.sqlite3``,
``notify.sqlite3``): ``PRAGMA user_version`` and numbered migration steps."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from remote.errors import GpuConsoleError

__all__ = ["migrate_schema"]


def migrate_schema(
    db: sqlite3.Connection,
    path: Path,
    migrations: Mapping[int, Sequence[str]],
    *,
    what: str,
    if_lost: str,
) -> int:
    """Bring ``db`` to version ``max(migrations)``, one step at a time, all in one
    ``BEGIN IMMEDIATE`` transaction (two processes opening an old file at once migrate it
    once; a failed step leaves it as it was). Returns the version now.

    Args:
        db: the open connection (its isolation level is restored afterwards).
        path: the file, for messages.
        migrations: ``migrations[v]`` takes the file from version ``v - 1`` to ``v``
            (append, never edit).
        what: the store's name in messages (``job store``, ``alert store``).
        if_lost: what moving the file aside costs, for the fix of a failed step.

    Raises:
        GpuConsoleError: the file's version is newer than this code knows (written by a
            newer gpuconsole), or a step failed (naming the file and the step).
    """
    target = max(migrations)
    old_isolation = db.isolation_level
    db.isolation_level = None  # explicit transaction control below
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > target:
                raise GpuConsoleError(
                    f"{path}: written by a newer gpuconsole ({what} schema {version}; this "
                    f"one reads up to {target})",
                    "upgrade gpuconsole, or set GPUCONSOLE_STATE_DIR to another folder",
                )
            for v in range(version + 1, target + 1):
                try:
                    for statement in migrations[v]:
                        db.execute(statement)
                except sqlite3.Error as e:
                    raise GpuConsoleError(
                        f"{path}: cannot migrate the {what} to schema {v}: {e}",
                        f"move the file aside ({if_lost}) and report this",
                    ) from e
                db.execute(f"PRAGMA user_version = {v:d}")
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # the error said already matters more
                db.execute("ROLLBACK")
            raise
    finally:
        db.isolation_level = old_isolation
    return target
