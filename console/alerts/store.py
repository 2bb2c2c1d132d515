"""Alert state on disk: firing alerts, acknowledgements, silences and a history of every
transition, in ``<state dir>/alerts.sqlite3`` (next to ``jobs.sqlite3``; a file of its own so
the job store's schema and migrations stay untouched).

A restarted ``watch`` reads the firing alerts back, so an alert that already fired (and was
notified) is not fired again while its condition holds; acknowledgements and silences
survive too. Another process (``gpuconsole alerts ack KEY`` while ``watch`` runs) may write
acks and silences here: the live engine reads them back before every evaluation.

The schema is versioned with ``PRAGMA user_version`` like the job store (:data:`MIGRATIONS`,
applied step by step in one transaction; a newer file is refused). Times are Unix seconds.
Thread-safe: one connection under a lock; loop code calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import fnmatch
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from console.alerts.model import RULE_IDS, Alert, AlertChanged, DetailValue, RuleId, Severity
from console.dbschema import migrate_schema
from console.jobs.store import state_dir
from remote.errors import GpuConsoleError

__all__ = ["HISTORY_KEEP", "MIGRATIONS", "Ack", "AlertStore", "Silence", "alert_from_json",
           "alert_to_json"]

#: ``MIGRATIONS[v]`` takes the file from version ``v - 1`` to ``v``; append, never edit.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE alerts (key TEXT PRIMARY KEY, alert_json TEXT NOT NULL, "
        "fired_at REAL NOT NULL, updated_at REAL NOT NULL)",
        "CREATE TABLE acks (key TEXT NOT NULL, fired_at REAL NOT NULL, acked_at REAL NOT NULL, "
        "by TEXT, PRIMARY KEY (key, fired_at))",
        "CREATE TABLE silences (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, rule TEXT, "
        "host TEXT, job TEXT, until REAL NOT NULL, created_at REAL NOT NULL, by TEXT, "
        "comment TEXT)",
        "CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, "
        "change TEXT NOT NULL, key TEXT NOT NULL, alert_json TEXT NOT NULL)",
        "CREATE INDEX history_at ON history (at)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)

#: History rows kept (the oldest are dropped beyond this).
HISTORY_KEEP = 10_000
#: Expired silences are forgotten this long after they ended (s).
SILENCE_KEEP_S = 86_400.0


@dataclass(frozen=True)
class Ack:
    """Someone acknowledged one firing of an alert: it keeps firing, without re-notification.

    Attributes:
        key: the alert's key.
        fired_at: the firing it acknowledges (a later firing of the same key is new).
        acked_at: when (Unix s).
        by: who, if said.
    """

    key: str
    fired_at: float
    acked_at: float
    by: str | None = None


@dataclass(frozen=True)
class Silence:
    """Notifications of matching alerts suppressed until ``until``.

    Each of ``key``, ``rule``, ``host`` and ``job`` is a shell glob (``fnmatch``, case
    sensitive) the alert's field must match; ``None`` matches anything. At least one is set.

    Attributes:
        id: the store's id (0 before it is stored).
        until: Unix s.
        created_at: Unix s.
    """

    id: int
    until: float
    created_at: float
    key: str | None = None
    rule: str | None = None
    host: str | None = None
    job: str | None = None
    by: str | None = None
    comment: str | None = None

    def active(self, now: float) -> bool:
        """Whether it holds at ``now``."""
        return now < self.until

    def matches(self, alert: Alert) -> bool:
        """Whether it covers ``alert``."""
        for pattern, value in ((self.key, alert.key), (self.rule, alert.rule),
                               (self.host, alert.host), (self.job, alert.job)):
            if pattern is None:
                continue
            if value is None or not fnmatch.fnmatchcase(value, pattern):
                return False
        return True

    def describe(self) -> str:
        """``#3 rule=gpu_* host=a until 2026-12-01 10:00:00``-like text (UTC seconds kept raw
        for the faces to format)."""
        parts = [f"{k}={v}" for k, v in (("key", self.key), ("rule", self.rule),
                                          ("host", self.host), ("job", self.job)) if v]
        return f"#{self.id} " + " ".join(parts)


def controlled(alert: Alert, ack: Ack | None, silences: Iterable[Silence], now: float) -> Alert:
    """``alert`` with its acknowledgement and silence at ``now`` applied: ``acked_at`` from
    ``ack`` when it acknowledges this firing, ``silenced_until`` the latest end of the active
    silences that match it (``None`` when none does)."""
    acked = alert.acked_at
    if acked is None and ack is not None and ack.fired_at == alert.fired_at:
        acked = ack.acked_at
    ends = [s.until for s in silences if s.active(now) and s.matches(alert)]
    until = max(ends) if ends else None
    if acked == alert.acked_at and until == alert.silenced_until:
        return alert
    return replace(alert, acked_at=acked, silenced_until=until)


def alert_to_json(alert: Alert) -> str:
    """An alert as one JSON object (its dataclass fields)."""
    d = {f.name: getattr(alert, f.name) for f in fields(alert)}
    d["details"] = dict(alert.details)
    return json.dumps(d, sort_keys=True)


def alert_from_json(text: str) -> Alert:
    """The inverse of :func:`alert_to_json`.

    Raises:
        ValueError: not an alert (unknown rule or severity, missing fields).
    """
    d: dict[str, Any] = json.loads(text)
    if d.get("rule") not in RULE_IDS or d.get("severity") not in ("critical", "warning", "info"):
        raise ValueError(f"not an alert record: rule {d.get('rule')!r}")
    details: Mapping[str, DetailValue] = MappingProxyType(dict(d.pop("details", {}) or {}))
    d["rule"] = cast(RuleId, d["rule"])
    d["severity"] = cast(Severity, d["severity"])
    return Alert(**d, details=details)


class AlertStore:
    """``alerts.sqlite3`` (see the module docstring).

    Args:
        root: the state dir (default: the job store's, ``$GPUCONSOLE_STATE_DIR``...).

    Raises:
        GpuConsoleError: the file was written by a newer gpuconsole, or cannot be opened or
            migrated.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir()
        self.path = self.root / "alerts.sqlite3"
        self._lock = threading.RLock()
        try:
            self.db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        except sqlite3.Error as e:
            raise GpuConsoleError(f"cannot open {self.path}: {e}",
                                  "set GPUCONSOLE_STATE_DIR to a writable folder") from e
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self._migrate()
        except BaseException:
            self.db.close()
            raise

    def _migrate(self) -> None:
        migrate_schema(self.db, self.path, MIGRATIONS, what="alert store",
                       if_lost="firing alerts then fire again")

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self.db.close()

    # -- alerts ------------------------------------------------------------------------------

    def firing(self) -> list[Alert]:
        """The alerts that fired and have not resolved (as last published), oldest first.
        Rows that cannot be read (written by another version) are skipped."""
        with self._lock:
            rows = self.db.execute("SELECT alert_json FROM alerts ORDER BY fired_at").fetchall()
        out = []
        for r in rows:
            try:
                out.append(alert_from_json(r["alert_json"]))
            except (ValueError, TypeError):
                continue
        return out

    def record(self, changes: Iterable[AlertChanged]) -> None:
        """Write transitions: firing alerts are upserted (``resolved`` deletes the row and its
        acks), every change is appended to the history (bounded to :data:`HISTORY_KEEP`)."""
        changes = list(changes)
        if not changes:
            return
        with self._lock, self.db:
            for c in changes:
                a = c.alert
                text = alert_to_json(a)
                if c.change == "resolved":
                    self.db.execute("DELETE FROM alerts WHERE key=?", (a.key,))
                    self.db.execute("DELETE FROM acks WHERE key=?", (a.key,))
                else:
                    self.db.execute(
                        "INSERT OR REPLACE INTO alerts (key, alert_json, fired_at, updated_at) "
                        "VALUES (?,?,?,?)", (a.key, text, a.fired_at, c.at))
                self.db.execute(
                    "INSERT INTO history (at, change, key, alert_json) VALUES (?,?,?,?)",
                    (c.at, c.change, a.key, text))
            self.db.execute(
                "DELETE FROM history WHERE id <= (SELECT MAX(id) FROM history) - ?",
                (HISTORY_KEEP,))

    def history(self, limit: int = 100) -> list[AlertChanged]:
        """The latest ``limit`` transitions, newest first."""
        with self._lock:
            rows = self.db.execute(
                "SELECT at, change, alert_json FROM history ORDER BY id DESC LIMIT ?",
                (limit,)).fetchall()
        out = []
        for r in rows:
            try:
                out.append(AlertChanged(alert_from_json(r["alert_json"]), r["change"], r["at"]))
            except (ValueError, TypeError):
                continue
        return out

    # -- acks and silences -------------------------------------------------------------------

    def acknowledge(self, key: str, at: float, by: str | None = None) -> Ack:
        """Acknowledge the current firing of ``key``.

        Raises:
            KeyError: no firing alert has that key.
        """
        with self._lock, self.db:
            row = self.db.execute("SELECT fired_at FROM alerts WHERE key=?", (key,)).fetchone()
            if row is None:
                raise KeyError(key)
            ack = Ack(key, float(row["fired_at"]), at, by)
            self.db.execute("INSERT OR IGNORE INTO acks (key, fired_at, acked_at, by) "
                            "VALUES (?,?,?,?)", (ack.key, ack.fired_at, ack.acked_at, ack.by))
            got = self.db.execute("SELECT * FROM acks WHERE key=? AND fired_at=?",
                                  (key, ack.fired_at)).fetchone()
        return Ack(got["key"], got["fired_at"], got["acked_at"], got["by"])

    def acks(self) -> list[Ack]:
        """Every stored acknowledgement (of alerts still firing)."""
        with self._lock:
            rows = self.db.execute("SELECT * FROM acks").fetchall()
        return [Ack(r["key"], r["fired_at"], r["acked_at"], r["by"]) for r in rows]

    def add_silence(self, silence: Silence) -> Silence:
        """Store a silence; returns it with its id.

        Raises:
            ValueError: no matcher given, or ``until`` not after ``created_at``.
        """
        if not any((silence.key, silence.rule, silence.host, silence.job)):
            raise ValueError("a silence needs a key, rule, host or job pattern")
        if not silence.until > silence.created_at:
            raise ValueError("a silence must end after it starts")
        with self._lock, self.db:
            cur = self.db.execute(
                "INSERT INTO silences (key, rule, host, job, until, created_at, by, comment) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (silence.key, silence.rule, silence.host, silence.job, silence.until,
                 silence.created_at, silence.by, silence.comment))
            new_id = cur.lastrowid
        assert new_id is not None
        return Silence(**{**asdict(silence), "id": new_id})

    def remove_silence(self, silence_id: int) -> bool:
        """Delete a silence; ``False`` if there was none with that id."""
        with self._lock, self.db:
            cur = self.db.execute("DELETE FROM silences WHERE id=?", (silence_id,))
        return cur.rowcount > 0

    def silences(self, now: float | None = None) -> list[Silence]:
        """Stored silences (those that ended more than a day before ``now`` are deleted)."""
        with self._lock, self.db:
            if now is not None:
                self.db.execute("DELETE FROM silences WHERE until < ?", (now - SILENCE_KEEP_S,))
            rows = self.db.execute("SELECT * FROM silences ORDER BY id").fetchall()
        return [Silence(id=r["id"], until=r["until"], created_at=r["created_at"], key=r["key"],
                        rule=r["rule"], host=r["host"], job=r["job"], by=r["by"],
                        comment=r["comment"]) for r in rows]

    def firing_now(self, now: float) -> list[Alert]:
        """The firing alerts with the stored acks and silences applied at ``now`` (what a
        watcher would show; correct also while none runs)."""
        acks, silences = self.controls(now)
        by_key = {a.key: a for a in acks}
        return [controlled(a, by_key.get(a.key), silences, now) for a in self.firing()]

    def controls(self, now: float) -> tuple[list[Ack], list[Silence]]:
        """Acks and silences, read together (what the engine re-reads every round)."""
        return self.acks(), self.silences(now)
