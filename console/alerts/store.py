"""Alert state on disk: firing alerts, acknowledgements, silences and a history of every
transition, in ``<state dir>/alerts.sqlite3`` (next to ``jobs.sqlite3``; a file of its own so
the job store's schema and migrations stay untouched).

A restarted ``watch`` reads the firing alerts back, so an alert that already fired (and was
notified) is not fired again while its condition holds; acknowledgements and silences
survive too. Another process (``gpuconsole alerts ack KEY`` while ``watch`` runs) may write
acks and silences here: the live engine reads them back before every evaluation.

Alerts belong to a profile: the one whose rules raised them (the profile of the ``watch`` or
the app that evaluated them), whose host or job is their subject. Every row of the alerts,
acks and history tables carries that profile's name, and a store opened for a profile
(``AlertStore(profile="lab")``, what ``watch``, the app and ``gpuconsole alerts`` do) reads,
acknowledges, resolves and silences that profile's alerts only: another profile's are never
shown, kept firing or resolved by it. Silences are the profile's too; a silence with no
profile (``''``, from files of schema 1) covers every profile. Rows of schema 1 have no
profile (``''``): a profile adopts such an alert, its acks and its history when its subject is
one of the profile's hosts or jobs (:meth:`AlertStore.adopt`, :func:`profile_store`); the rest
stay as they were, for the profile that owns them. A store opened without a profile is the
view of every profile (for tools and tests); what it records has no profile.

The schema is versioned with ``PRAGMA user_version`` like the job store (:data:`MIGRATIONS`,
applied step by step in one transaction; a newer file is refused). Times are Unix seconds.
Thread-safe: one connection under a lock; loop code calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from console.alerts.model import RULE_IDS, Alert, AlertChanged, DetailValue, RuleId, Severity
from console.dbschema import migrate_schema
from console.errors import StateError
from console.jobs.store import Store, state_dir
from console.statefiles import LOCK_WAIT_S, db_error

__all__ = [
    "HISTORY_KEEP",
    "MIGRATIONS",
    "Ack",
    "AlertStore",
    "Silence",
    "alert_from_json",
    "alert_to_json",
    "profile_store",
]

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
    # alerts belong to a profile ('' : recorded before they did, see AlertStore.adopt)
    2: (
        "CREATE TABLE alerts2 (profile TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, "
        "alert_json TEXT NOT NULL, fired_at REAL NOT NULL, updated_at REAL NOT NULL, "
        "PRIMARY KEY (profile, key))",
        "INSERT INTO alerts2 (key, alert_json, fired_at, updated_at) "
        "SELECT key, alert_json, fired_at, updated_at FROM alerts",
        "DROP TABLE alerts",
        "ALTER TABLE alerts2 RENAME TO alerts",
        "CREATE TABLE acks2 (profile TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, "
        "fired_at REAL NOT NULL, acked_at REAL NOT NULL, by TEXT, "
        "PRIMARY KEY (profile, key, fired_at))",
        "INSERT INTO acks2 (key, fired_at, acked_at, by) "
        "SELECT key, fired_at, acked_at, by FROM acks",
        "DROP TABLE acks",
        "ALTER TABLE acks2 RENAME TO acks",
        "ALTER TABLE silences ADD COLUMN profile TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE history ADD COLUMN profile TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX history_profile ON history (profile, id)",
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
        profile: the profile of the alert (``''``: none, from schema 1).
    """

    key: str
    fired_at: float
    acked_at: float
    by: str | None = None
    profile: str = ""


@dataclass(frozen=True)
class Silence:
    """Notifications of matching alerts suppressed until ``until``.

    Each of ``key``, ``rule``, ``host`` and ``job`` is a shell glob (``fnmatch``, case
    sensitive) the alert's field must match; ``None`` matches anything. At least one is set.

    Attributes:
        id: the store's id (0 before it is stored).
        until: Unix s.
        created_at: Unix s.
        profile: the profile whose alerts it covers, as stored (``''``: every profile's).
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
    profile: str = ""

    def active(self, now: float) -> bool:
        """Whether it holds at ``now``."""
        return now < self.until

    def matches(self, alert: Alert) -> bool:
        """Whether it covers ``alert``."""
        for pattern, value in (
            (self.key, alert.key),
            (self.rule, alert.rule),
            (self.host, alert.host),
            (self.job, alert.job),
        ):
            if pattern is None:
                continue
            if value is None or not fnmatch.fnmatchcase(value, pattern):
                return False
        return True

    def describe(self) -> str:
        """``#3 rule=gpu_* host=a until 2026-12-01 10:00:00``-like text (UTC seconds kept raw
        for the faces to format)."""
        parts = [
            f"{k}={v}"
            for k, v in (
                ("key", self.key),
                ("rule", self.rule),
                ("host", self.host),
                ("job", self.job),
            )
            if v
        ]
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


#: SQL: whether a row's ``alert_json`` has one of the hosts (``:hosts``, a JSON list) or jobs
#: (``:jobs``) as its subject (a job's alert: its job; else its host). Not JSON: it has not.
_OWNED = (
    "CASE WHEN NOT json_valid(alert_json) THEN 0 "
    "WHEN json_extract(alert_json, '$.job') IS NOT NULL "
    "THEN json_extract(alert_json, '$.job') IN (SELECT value FROM json_each(:jobs)) "
    "ELSE json_extract(alert_json, '$.host') IN (SELECT value FROM json_each(:hosts)) END"
)


#: What moving a damaged alert store aside costs (the fix of its errors).
IF_LOST = "alerts still firing then fire again; acks and silences are forgotten"


class AlertStore:
    """``alerts.sqlite3`` (see the module docstring).

    Args:
        root: the state dir (default: the job store's, ``$GPUCONSOLE_STATE_DIR``...).
        profile: the profile whose alerts, acks, silences and history it reads and writes
            (its name); ``None``: every profile's are read, and what it writes has no profile
            (``''``; a silence with none covers every profile).

    Raises:
        GpuConsoleError: the file was written by a newer gpuconsole, or cannot be opened or
            migrated.
    """

    def __init__(self, root: Path | None = None, *, profile: str | None = None) -> None:
        self.root = root or state_dir()
        self.path = self.root / "alerts.sqlite3"
        self.profile = profile
        self._lock = threading.RLock()
        try:
            self.db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._db_error(e) from e
        self.db.row_factory = sqlite3.Row
        try:
            with self._using():
                self.db.execute("PRAGMA journal_mode=WAL")
                self._migrate()
        except BaseException:
            self.db.close()
            raise

    def _db_error(self, e: sqlite3.Error) -> StateError:
        return db_error(e, self.path, what="alert store", if_lost=IF_LOST)

    @contextlib.contextmanager
    def _using(self) -> Iterator[None]:
        """Hold the store's lock (the connection is shared by threads); a SQLite failure
        comes out as the :class:`~console.errors.StateError` that says it."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as e:
                raise self._db_error(e) from e

    def _migrate(self) -> None:
        migrate_schema(self.db, self.path, MIGRATIONS, what="alert store", if_lost=IF_LOST)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self.db.close()

    @property
    def _written(self) -> str:
        """The profile column of the rows this store writes."""
        return self.profile or ""

    def _scope(self, *, shared: bool = False) -> tuple[str, tuple[str, ...]]:
        """The SQL condition on ``profile`` of the rows this store reads, and its parameters
        (``shared``: also the rows of no profile, as silences of schema 1 are)."""
        if self.profile is None:
            return "1", ()
        if shared:
            return "profile IN (?, '')", (self.profile,)
        return "profile=?", (self.profile,)

    # -- alerts ------------------------------------------------------------------------------

    def _firing_rows(self) -> list[tuple[str, Alert]]:
        cond, args = self._scope()
        with self._using():
            rows = self.db.execute(
                f"SELECT profile, alert_json FROM alerts WHERE {cond} ORDER BY fired_at", args
            ).fetchall()
        out = []
        for r in rows:
            try:
                out.append((str(r["profile"]), alert_from_json(r["alert_json"])))
            except (ValueError, TypeError):
                continue
        return out

    def firing(self) -> list[Alert]:
        """The profile's alerts that fired and have not resolved (as last published), oldest
        first. Rows that cannot be read (written by another version) are skipped."""
        return [a for _, a in self._firing_rows()]

    def record(self, changes: Iterable[AlertChanged]) -> None:
        """Write the profile's transitions: firing alerts are upserted (``resolved`` deletes
        the row and its acks), every change is appended to the history (bounded to
        :data:`HISTORY_KEEP`)."""
        changes = list(changes)
        if not changes:
            return
        profile = self._written
        with self._using(), self.db:
            for c in changes:
                a = c.alert
                text = alert_to_json(a)
                if c.change == "resolved":
                    self.db.execute(
                        "DELETE FROM alerts WHERE profile=? AND key=?", (profile, a.key)
                    )
                    self.db.execute("DELETE FROM acks WHERE profile=? AND key=?", (profile, a.key))
                else:
                    self.db.execute(
                        "INSERT OR REPLACE INTO alerts (profile, key, alert_json, fired_at, "
                        "updated_at) VALUES (?,?,?,?,?)",
                        (profile, a.key, text, a.fired_at, c.at),
                    )
                self.db.execute(
                    "INSERT INTO history (profile, at, change, key, alert_json) VALUES (?,?,?,?,?)",
                    (profile, c.at, c.change, a.key, text),
                )
            self.db.execute(
                "DELETE FROM history WHERE id <= (SELECT MAX(id) FROM history) - ?", (HISTORY_KEEP,)
            )

    def history(self, limit: int = 100) -> list[AlertChanged]:
        """The profile's latest ``limit`` transitions, newest first."""
        cond, args = self._scope()
        with self._using():
            rows = self.db.execute(
                f"SELECT at, change, alert_json FROM history WHERE {cond} ORDER BY id DESC LIMIT ?",
                (*args, limit),
            ).fetchall()
        out = []
        for r in rows:
            try:
                out.append(AlertChanged(alert_from_json(r["alert_json"]), r["change"], r["at"]))
            except (ValueError, TypeError):
                continue
        return out

    def unowned(self) -> bool:
        """Whether the file holds alerts or history of no profile (from schema 1)."""
        with self._using():
            row = self.db.execute(
                "SELECT EXISTS (SELECT 1 FROM alerts WHERE profile='') "
                "OR EXISTS (SELECT 1 FROM history WHERE profile='')"
            ).fetchone()
        return bool(row[0])

    def adopt(self, hosts: Iterable[str], jobs: Iterable[str]) -> list[str]:
        """Make the alerts of no profile whose subject is one of ``hosts`` or ``jobs`` (the
        profile's host names and its jobs' names) this profile's, with their acks and
        history; the others stay as they are. Returns the keys of the firing alerts adopted
        (a row the profile already has a newer one of is dropped instead).

        Raises:
            ValueError: the store was opened without a profile.
        """
        if self.profile is None:
            raise ValueError("adopting alerts needs the store of a profile")
        params = {
            "profile": self.profile,
            "hosts": json.dumps(sorted(set(hosts))),
            "jobs": json.dumps(sorted(set(jobs))),
        }
        with self._using(), self.db:
            keys = [
                str(r["key"])
                for r in self.db.execute(
                    f"SELECT key FROM alerts WHERE profile='' AND {_OWNED}", params
                )
            ]
            for key in keys:
                one = {"profile": self.profile, "key": key}
                if self.db.execute(
                    "SELECT 1 FROM alerts WHERE profile=:profile AND key=:key", one
                ).fetchone():
                    self.db.execute("DELETE FROM alerts WHERE profile='' AND key=:key", one)
                else:
                    self.db.execute(
                        "UPDATE alerts SET profile=:profile WHERE profile='' AND key=:key", one
                    )
                self.db.execute(
                    "UPDATE OR IGNORE acks SET profile=:profile WHERE profile='' AND key=:key", one
                )
                self.db.execute("DELETE FROM acks WHERE profile='' AND key=:key", one)
            self.db.execute(
                f"UPDATE history SET profile=:profile WHERE profile='' AND {_OWNED}", params
            )
        return keys

    # -- acks and silences -------------------------------------------------------------------

    def acknowledge(self, key: str, at: float, by: str | None = None) -> Ack:
        """Acknowledge the current firing of the profile's alert ``key`` (a store of every
        profile: of each profile's alert of that key).

        Raises:
            KeyError: no firing alert has that key.
        """
        cond, args = self._scope()
        with self._using(), self.db:
            rows = self.db.execute(
                f"SELECT profile, fired_at FROM alerts WHERE key=? AND {cond}", (key, *args)
            ).fetchall()
            if not rows:
                raise KeyError(key)
            for row in rows:
                self.db.execute(
                    "INSERT OR IGNORE INTO acks (profile, key, fired_at, acked_at, by) "
                    "VALUES (?,?,?,?,?)",
                    (row["profile"], key, row["fired_at"], at, by),
                )
            got = self.db.execute(
                "SELECT * FROM acks WHERE profile=? AND key=? AND fired_at=?",
                (rows[0]["profile"], key, rows[0]["fired_at"]),
            ).fetchone()
        return _ack(got)

    def acks(self) -> list[Ack]:
        """The profile's stored acknowledgements (of alerts still firing)."""
        cond, args = self._scope()
        with self._using():
            rows = self.db.execute(f"SELECT * FROM acks WHERE {cond}", args).fetchall()
        return [_ack(r) for r in rows]

    def add_silence(self, silence: Silence) -> Silence:
        """Store a silence of the profile (its ``profile`` is the store's); returns it with
        its id.

        Raises:
            ValueError: no matcher given, or ``until`` not after ``created_at``.
        """
        if not any((silence.key, silence.rule, silence.host, silence.job)):
            raise ValueError("a silence needs a key, rule, host or job pattern")
        if not silence.until > silence.created_at:
            raise ValueError("a silence must end after it starts")
        with self._using(), self.db:
            cur = self.db.execute(
                "INSERT INTO silences (profile, key, rule, host, job, until, created_at, by, "
                "comment) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    self._written,
                    silence.key,
                    silence.rule,
                    silence.host,
                    silence.job,
                    silence.until,
                    silence.created_at,
                    silence.by,
                    silence.comment,
                ),
            )
            new_id = cur.lastrowid
        assert new_id is not None
        return replace(silence, id=new_id, profile=self._written)

    def remove_silence(self, silence_id: int) -> bool:
        """Delete a silence of the profile (or of every profile); ``False`` if there was
        none with that id."""
        cond, args = self._scope(shared=True)
        with self._using(), self.db:
            cur = self.db.execute(
                f"DELETE FROM silences WHERE id=? AND {cond}", (silence_id, *args)
            )
        return cur.rowcount > 0

    def silences(self, now: float | None = None) -> list[Silence]:
        """The silences of the profile and of every profile (those that ended more than a
        day before ``now`` are deleted, whoever's they were)."""
        cond, args = self._scope(shared=True)
        with self._using(), self.db:
            if now is not None:
                self.db.execute("DELETE FROM silences WHERE until < ?", (now - SILENCE_KEEP_S,))
            rows = self.db.execute(
                f"SELECT * FROM silences WHERE {cond} ORDER BY id", args
            ).fetchall()
        return [
            Silence(
                id=r["id"],
                until=r["until"],
                created_at=r["created_at"],
                key=r["key"],
                rule=r["rule"],
                host=r["host"],
                job=r["job"],
                by=r["by"],
                comment=r["comment"],
                profile=r["profile"],
            )
            for r in rows
        ]

    def firing_now(self, now: float) -> list[Alert]:
        """The profile's firing alerts with its acks and silences applied at ``now`` (what a
        watcher would show; correct also while none runs)."""
        acks, silences = self.controls(now)
        by_key = {(a.profile, a.key): a for a in acks}
        return [
            controlled(
                a, by_key.get((p, a.key)), [s for s in silences if s.profile in ("", p)], now
            )
            for p, a in self._firing_rows()
        ]

    def controls(self, now: float) -> tuple[list[Ack], list[Silence]]:
        """The profile's acks and silences, read together (what the engine re-reads every
        round)."""
        return self.acks(), self.silences(now)


def _ack(row: sqlite3.Row) -> Ack:
    return Ack(row["key"], row["fired_at"], row["acked_at"], row["by"], row["profile"])


def profile_store(profile: str, hosts: Iterable[str], root: Path | None = None) -> AlertStore:
    """The alert store of ``profile`` (its name; ``hosts``: its host names), having adopted
    the alerts of no profile that are its own (:meth:`AlertStore.adopt`; its jobs' names are
    read from the job store only when there are such alerts).

    Raises:
        GpuConsoleError: the alert store (or then the job store) cannot be opened.
    """
    store = AlertStore(root, profile=profile)
    try:
        if store.unowned():
            jobs = Store(store.root)
            try:
                names = {j.name for j in jobs.jobs(include_removed=True) if j.profile == profile}
            finally:
                jobs.close()
            store.adopt(hosts, names)
    except BaseException:
        store.close()
        raise
    return store
