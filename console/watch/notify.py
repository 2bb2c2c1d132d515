"""Alert notifications through Apprise: each transition (fired, resolved) delivered once to
every ``notify:`` URL, with retries, off the event loop, remembered across restarts.

Delivery (per URL, one worker thread each, so a slow or dead service never delays another
and never the loop):

1. :meth:`Notifier.submit` (on the loop) only queues the transition.
2. The URL's worker claims it in the ledger (``<state dir>/notify.sqlite3``) as ``pending``
   under ``(url id, alert key, change, fired_at)`` before the first attempt, unless the
   ledger says it was already delivered or is a repeat (below); then sends it through
   Apprise, retrying after 1, 2, 4, 8... s (capped at :attr:`Notifier.max_backoff_s`) up to
   :attr:`Notifier.attempts` attempts, and marks it ``sent`` (or ``failed``).
3. A worker starting up first re-sends the ``pending`` transitions of its URL that a previous
   run left (killed mid-delivery), at most a day old.

So a restart of ``watch`` does not page again: a transition already in the ledger is skipped,
and so is a ``fired`` of an alert whose last paged transition was ``fired`` (the alert kept
firing across the restart, even if the engine stamps a new ``fired_at``), and a ``resolved``
of an alert that was never paged or whose resolve was. The one window left: a process killed
after the service accepted a message but before ``sent`` was written re-sends it once
(at-least-once there, never silently lost).

Secrets: Apprise URLs carry tokens and passwords (``tgram://<bot token>/<chat>``,
``json://user:pass@host/path``). They are never printed or logged: :func:`redact_url` is the
only form shown, the ledger keys a URL by a SHA-256 prefix, and :class:`SecretFilter` masks
the URL's secret parts in anything Apprise itself logs.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from console.alerts.model import Alert, AlertChanged
from console.dbschema import migrate_schema
from console.errors import ConfigError
from console.statefiles import LOCK_WAIT_S, db_error
from remote.backoff import Backoff

__all__ = [
    "Delivery",
    "Ledger",
    "Message",
    "Notifier",
    "SecretFilter",
    "apprise_sender",
    "message_for",
    "redact_url",
    "url_id",
]

log = logging.getLogger("gpuconsole.notify")

#: Changes that are paged; acknowledgements and silences are not.
PAGED_CHANGES = ("fired", "resolved")
#: Pending deliveries older than this (s) are not re-sent after a restart.
RESUME_MAX_AGE_S = 86400.0

NotifyType = Literal["info", "success", "warning", "failure"]
Sender = Callable[[str, "Message"], bool]
"""Sends one message to one URL; ``True`` when the service accepted it (may raise)."""

_HOSTLIKE = re.compile(r"^(localhost|[0-9.]+|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)$")


def url_id(url: str) -> str:
    """A URL's ledger id: 16 hex of its SHA-256 (the URL itself is never stored)."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def redact_url(url: str) -> str:
    """A notification URL as it may be shown: scheme, host and port when the host is a network
    address, everything else masked.

    ``json://user:pw@127.0.0.1:8080/hook/T0KEN`` -> ``json://***@127.0.0.1:8080/***``;
    ``tgram://123456:ABCdef/987`` -> ``tgram://***/***`` (the "host" of many Apprise schemes
    is a token: none of it is shown); text that is not a URL -> ``(not a URL)``.
    """
    if "://" not in url:
        return "(not a URL)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{url.split(':', 1)[0]}://***" if "://" in url else "***"
    scheme = parts.scheme or "?"
    netloc = parts.netloc.rsplit("@", 1)[-1]  # as written (hostname would lowercase it)
    host = netloc.rsplit(":", 1)[0] if port is not None else netloc
    if _HOSTLIKE.match(host) and not re.fullmatch(r"[0-9]{6,}", host):
        shown = netloc
    else:
        shown = "***" if host else ""
    user = "***@" if "@" in parts.netloc else ""
    rest = "/***" if (parts.path.strip("/") or parts.query or parts.fragment) else ""
    return f"{scheme}://{user}{shown}{rest}"


def _secret_parts(url: str) -> list[str]:
    """Substrings of ``url`` that :func:`redact_url` hides (longest first), at least 3
    characters, for :class:`SecretFilter`."""
    shown = redact_url(url)
    pieces = set(re.split(r"[/:@?&=#,;+]+", url.split("://", 1)[-1]))
    secret = {p for p in pieces if len(p) >= 3 and p not in shown}
    return sorted(secret | {url}, key=len, reverse=True)


class SecretFilter(logging.Filter):
    """Masks the secret parts of notification URLs in log records (Apprise's own logger
    writes hosts, paths and response bodies at various levels).

    Args:
        urls: the URLs whose secrets must not appear.
    """

    def __init__(self, urls: Iterable[str]) -> None:
        super().__init__()
        parts: set[str] = set()
        for u in urls:
            parts.update(_secret_parts(u))
        self._parts = sorted(parts, key=len, reverse=True)

    def mask(self, text: str) -> str:
        """``text`` with every secret part replaced by ``***``."""
        for p in self._parts:
            if p in text:
                text = text.replace(p, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message with the secrets masked (always keeps it)."""
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record: drop its arguments, keep the template
            msg = str(record.msg)
        masked = self.mask(msg)
        if masked != msg or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
        return True


@dataclass(frozen=True)
class Message:
    """One notification.

    Attributes:
        key: the alert's key.
        change: ``fired`` or ``resolved``.
        fired_at: the alert's ``fired_at`` (Unix s): with key and change, the transition's id.
        title: the title line.
        body: the text.
        notify_type: Apprise's type (``failure`` for critical, ``warning``, ``info``,
            ``success`` for a resolve).
    """

    key: str
    change: str
    fired_at: float
    title: str
    body: str
    notify_type: NotifyType


_SEVERITY_TYPE: dict[str, NotifyType] = {
    "critical": "failure",
    "warning": "warning",
    "info": "info",
}


def _clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def message_for(event: AlertChanged) -> Message:
    """The notification of a transition: ``[CRITICAL] host_unreachable a`` /
    ``[RESOLVED] ...`` with the summary, the times and the details."""
    a: Alert = event.alert
    where = " ".join(
        x
        for x in (
            a.host,
            None if a.gpu is None else f"gpu{a.gpu}",
            None if a.job is None else f"job {a.job}",
        )
        if x
    )
    if event.change == "resolved":
        title = f"[RESOLVED] {a.rule} {where}".rstrip()
        ntype: NotifyType = "success"
    else:
        title = f"[{a.severity.upper()}] {a.rule} {where}".rstrip()
        ntype = _SEVERITY_TYPE[a.severity]
    lines = [a.summary, "", f"since: {_clock(a.since)}", f"fired: {_clock(a.fired_at)}"]
    if a.resolved_at is not None:
        lines.append(f"resolved: {_clock(a.resolved_at)}")
    lines += [f"{k}: {v}" for k, v in a.details.items() if v is not None]
    lines.append(f"alert: {a.key}")
    return Message(a.key, event.change, a.fired_at, title, "\n".join(lines), ntype)


@dataclass(frozen=True)
class Delivery:
    """What happened to one message at one URL (for the face to say).

    Attributes:
        url: the URL, redacted.
        message: the message.
        outcome: ``sent``, ``failed`` (every attempt failed), ``duplicate`` (already
            delivered or a repeat of a paged transition: skipped), ``retrying`` (an attempt
            failed, another follows).
        attempts: attempts made so far.
        error: the last failure, redacted.
    """

    url: str
    message: Message
    outcome: Literal["sent", "failed", "duplicate", "retrying"]
    attempts: int
    error: str | None = None


class Ledger:
    """The delivery ledger (SQLite): one connection per thread that uses it.

    Args:
        path: the database file (created).
    """

    #: ``MIGRATIONS[v]`` takes the file from version ``v - 1`` to ``v``; append, never edit.
    MIGRATIONS: dict[int, tuple[str, ...]] = {
        1: (
            """CREATE TABLE IF NOT EXISTS deliveries (
            url_id TEXT NOT NULL, key TEXT NOT NULL, change TEXT NOT NULL,
            fired_at REAL NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
            title TEXT NOT NULL, body TEXT NOT NULL, notify_type TEXT NOT NULL,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, error TEXT,
            PRIMARY KEY (url_id, key, change, fired_at))""",
        ),
    }

    #: What moving a damaged ledger aside costs (the fix of its errors).
    IF_LOST = "alerts still firing may be paged once more"

    def __init__(self, path: Path) -> None:
        """Open (create, migrate) the ledger at ``path``.

        Raises:
            StateError: it cannot be opened (damaged, locked, read-only, a full disk...).
        """
        self.path = path
        try:
            con = self.connect()
            try:
                migrate_schema(
                    con, path, self.MIGRATIONS, what="notification ledger", if_lost=self.IF_LOST
                )
            finally:
                con.close()
        except sqlite3.Error as e:
            raise db_error(e, path, what="notification ledger", if_lost=self.IF_LOST) from e

    def connect(self) -> sqlite3.Connection:
        """A connection for the calling thread (WAL, waits up to
        :data:`~console.statefiles.LOCK_WAIT_S` for a lock)."""
        con = sqlite3.connect(self.path, timeout=LOCK_WAIT_S, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            con.close()
            raise
        return con

    @staticmethod
    def claim(con: sqlite3.Connection, uid: str, m: Message, now: float) -> bool:
        """Record ``m`` as pending for a URL unless it is a duplicate (see the module
        docstring); ``True`` when it was claimed and must be sent."""
        con.execute("BEGIN IMMEDIATE")
        try:
            if con.execute(
                "SELECT 1 FROM deliveries WHERE url_id=? AND key=? AND change=? AND fired_at=?",
                (uid, m.key, m.change, m.fired_at),
            ).fetchone():
                con.execute("COMMIT")
                return False
            last = con.execute(
                "SELECT change FROM deliveries WHERE url_id=? AND key=? AND "
                "state IN ('pending', 'sent') ORDER BY created_at DESC, rowid "
                "DESC LIMIT 1",
                (uid, m.key),
            ).fetchone()
            last_change = last[0] if last else None
            if (m.change == "fired" and last_change == "fired") or (
                m.change == "resolved" and last_change != "fired"
            ):
                con.execute("COMMIT")
                return False
            con.execute(
                "INSERT INTO deliveries (url_id, key, change, fired_at, state, title, "
                "body, notify_type, created_at, updated_at) VALUES "
                "(?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
                (uid, m.key, m.change, m.fired_at, m.title, m.body, m.notify_type, now, now),
            )
            con.execute("COMMIT")
            return True
        except BaseException:
            con.execute("ROLLBACK")
            raise

    @staticmethod
    def mark(
        con: sqlite3.Connection,
        uid: str,
        m: Message,
        state: str,
        attempts: int,
        error: str | None,
        now: float,
    ) -> None:
        """Set a claimed delivery's state (``pending`` while retrying, ``sent``,
        ``failed``)."""
        con.execute(
            "UPDATE deliveries SET state=?, attempts=?, error=?, updated_at=? WHERE "
            "url_id=? AND key=? AND change=? AND fired_at=?",
            (state, attempts, error, now, uid, m.key, m.change, m.fired_at),
        )

    @staticmethod
    def pending(con: sqlite3.Connection, uid: str, now: float) -> list[Message]:
        """A URL's deliveries left pending by an earlier run, oldest first (older than
        :data:`RESUME_MAX_AGE_S` are marked ``expired`` instead)."""
        con.execute(
            "UPDATE deliveries SET state='expired', updated_at=? WHERE url_id=? AND "
            "state='pending' AND created_at < ?",
            (now, uid, now - RESUME_MAX_AGE_S),
        )
        rows = con.execute(
            "SELECT key, change, fired_at, title, body, notify_type FROM "
            "deliveries WHERE url_id=? AND state='pending' ORDER BY created_at, "
            "rowid",
            (uid,),
        ).fetchall()
        return [Message(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def rows(self) -> list[tuple[str, str, str, float, str, int]]:
        """Every delivery as ``(url_id, key, change, fired_at, state, attempts)`` (tests,
        diagnostics)."""
        con = self.connect()
        try:
            return [
                tuple(r)
                for r in con.execute(
                    "SELECT url_id, key, change, fired_at, state, attempts FROM deliveries "
                    "ORDER BY created_at, rowid"
                )
            ]
        finally:
            con.close()


def apprise_sender() -> Sender:
    """A :data:`Sender` through Apprise (one ``Apprise`` object per URL, made on first use).

    Raises (from the sender): nothing; a failure is ``False`` (Apprise logs why)."""
    import apprise

    objs: dict[str, apprise.Apprise] = {}
    lock = threading.Lock()

    def send(url: str, m: Message) -> bool:
        with lock:
            ap = objs.get(url)
            if ap is None:
                ap = objs[url] = apprise.Apprise()
                ap.add(url)
        return bool(ap.notify(body=m.body, title=m.title, notify_type=m.notify_type))

    return send


def check_urls(
    urls: Sequence[str],
    where: Callable[[int], tuple[str, str | None, int | None]] = lambda i: (
        f"notify[{i}]",
        None,
        None,
    ),
) -> None:
    """Refuse URLs Apprise does not understand.

    Args:
        urls: the URLs, in order.
        where: for URL ``i``: the field to name, the file and its line (``None``: unknown).

    Apprise's own log says a rejected URL in full; it is silenced while checking, so no
    token reaches the terminal.

    Raises:
        ConfigError: one names the field (and file:line), the URL redacted, and the fix.
    """
    import apprise

    apprise_log = logging.getLogger("apprise")
    was_disabled, apprise_log.disabled = apprise_log.disabled, True
    try:
        for i, u in enumerate(urls):
            if apprise.Apprise.instantiate(u) is None:
                field, path, line = where(i)
                raise ConfigError(
                    f"Apprise does not understand the URL {redact_url(u)}",
                    "write it as the Apprise wiki shows for the service (e.g. "
                    "json://host:port/path, tgram://token/chat, slack://...)",
                    path=path,
                    line=line,
                    field=field,
                )
    finally:
        apprise_log.disabled = was_disabled


class Notifier:
    """Delivers alert transitions to URLs (see the module docstring).

    Args:
        urls: Apprise URLs.
        ledger: the delivery ledger.
        send: sends one message to one URL (default: Apprise).
        report: called with each :class:`Delivery`, on the URL's worker thread.
        attempts: tries per message (at least 1).
        backoff_s: the first retry's delay (s); it doubles, with +-20 % jitter.
        max_backoff_s: the longest delay between tries (s).
    """

    def __init__(
        self,
        urls: Sequence[str],
        ledger: Ledger,
        *,
        send: Sender | None = None,
        report: Callable[[Delivery], None] | None = None,
        attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.urls = list(dict.fromkeys(urls))
        self.ledger = ledger
        self.send = send or apprise_sender()
        self.report = report or (lambda d: None)
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._stop = threading.Event()
        self._queues: list[queue.Queue[Message | None]] = []
        self._threads: list[threading.Thread] = []
        self.filter = SecretFilter(self.urls)
        self._filtered: list[logging.Logger] = []

    def start(self) -> None:
        """Start one worker per URL and mask the URLs' secrets in Apprise's log."""
        for name in ("apprise", "gpuconsole"):
            lg = logging.getLogger(name)
            lg.addFilter(self.filter)
            self._filtered.append(lg)
        for handler in logging.getLogger().handlers:
            handler.addFilter(self.filter)
        for i, url in enumerate(self.urls):
            q: queue.Queue[Message | None] = queue.Queue()
            t = threading.Thread(
                target=self._worker, args=(url, q), daemon=True, name=f"gpuconsole-notify-{i}"
            )
            self._queues.append(q)
            self._threads.append(t)
            t.start()

    def submit(self, event: AlertChanged) -> None:
        """Queue a transition for every URL (``fired``/``resolved`` only; a ``fired`` alert
        that is silenced is not paged). Never blocks."""
        if event.change not in PAGED_CHANGES:
            return
        if event.change == "fired" and event.alert.silenced(event.at):
            return
        m = message_for(event)
        for q in self._queues:
            q.put(m)

    def close(self, drain_s: float = 5.0) -> None:
        """Let the workers finish what is queued for up to ``drain_s`` s, then stop them
        (what is left stays pending in the ledger for the next run)."""
        for q in self._queues:
            q.put(None)
        deadline = time.monotonic() + drain_s
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        self._stop.set()
        for t in self._threads:
            t.join(2.0)
        for lg in self._filtered:
            lg.removeFilter(self.filter)
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self.filter)
        self._filtered.clear()

    # -- worker -----------------------------------------------------------------------------

    def _worker(self, url: str, q: queue.Queue[Message | None]) -> None:
        uid = url_id(url)
        shown = redact_url(url)
        try:
            con = self.ledger.connect()
        except sqlite3.Error as e:
            log.error("notify %s: cannot open the ledger %s: %s", shown, self.ledger.path, e)
            return
        try:
            for m in Ledger.pending(con, uid, time.time()):
                if self._stop.is_set():
                    return
                self._deliver(con, url, uid, shown, m)
            while not self._stop.is_set():
                item = q.get()
                if item is None:
                    return
                try:
                    claimed = Ledger.claim(con, uid, item, time.time())
                except sqlite3.Error as e:
                    log.error("notify %s: ledger: %s; sending without a record", shown, e)
                    claimed = True
                if not claimed:
                    self._say(Delivery(shown, item, "duplicate", 0))
                    continue
                self._deliver(con, url, uid, shown, item)
        finally:
            con.close()

    def _deliver(self, con: sqlite3.Connection, url: str, uid: str, shown: str, m: Message) -> None:
        backoff = Backoff(self.backoff_s, self.max_backoff_s, jitter=0.2)
        error: str | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                ok = self.send(url, m)
                error = None if ok else "the service did not accept it"
            except Exception as e:  # an Apprise plugin bug must not end the worker
                ok = False
                error = self.filter.mask(f"{type(e).__name__}: {e}")
            if ok:
                self._mark(con, uid, m, "sent", attempt, None)
                self._say(Delivery(shown, m, "sent", attempt))
                return
            if attempt == self.attempts:
                break
            self._mark(con, uid, m, "pending", attempt, error)
            self._say(Delivery(shown, m, "retrying", attempt, error))
            if self._stop.wait(backoff.next()):
                return  # stopping: stays pending for the next run
        self._mark(con, uid, m, "failed", self.attempts, error)
        self._say(Delivery(shown, m, "failed", self.attempts, error))

    @staticmethod
    def _mark(
        con: sqlite3.Connection, uid: str, m: Message, state: str, attempts: int, error: str | None
    ) -> None:
        try:
            Ledger.mark(con, uid, m, state, attempts, error, time.time())
        except sqlite3.Error as e:
            log.error("notify: ledger: cannot record %s of %s: %s", state, m.key, e)

    def _say(self, d: Delivery) -> None:
        try:
            self.report(d)
        except Exception:
            log.exception("notify: the delivery report failed")
