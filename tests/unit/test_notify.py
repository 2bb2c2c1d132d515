"""Notifications: a real Apprise ``json://`` delivery to a local HTTP receiver, exactly one POST
per alert transition also across a restart of the notifier (the ledger), a retry after a
failed attempt, pending deliveries resumed, a never-blocking submit, and URL secrets never in
what is printed or logged."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.alerts.model import Alert, AlertChanged
from console.errors import ConfigError
from console.watch.notify import (
    Delivery,
    Ledger,
    Message,
    Notifier,
    check_urls,
    message_for,
    redact_url,
    url_id,
)


@dataclass
class Receiver:
    """A local HTTP server that records every POST; answers 500 to the first ``fail``."""

    server: ThreadingHTTPServer
    posts: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    fail: int = 0

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = holder[0]
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            rec.paths.append(self.path)
            if rec.fail > 0:
                rec.fail -= 1
                self.send_response(500)
                self.end_headers()
                return
            rec.posts.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(server))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield holder[0]
    server.shutdown()
    server.server_close()


def fired(key_host: str = "b", fired_at: float = 1000.0) -> AlertChanged:
    a = Alert(
        f"host_unreachable/{key_host}",
        "host_unreachable",
        "critical",
        f"host {key_host} unreachable for 60 s: connection refused",
        host=key_host,
        since=fired_at - 60,
        fired_at=fired_at,
        details={"for_s": 60.0},
    )
    return AlertChanged(a, "fired", fired_at)


def resolved(ev: AlertChanged, at: float) -> AlertChanged:
    import dataclasses

    return AlertChanged(dataclasses.replace(ev.alert, resolved_at=at), "resolved", at)


def wait_until(pred: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {pred}")


def run_notifier(url: str, ledger: Ledger, events: list[AlertChanged], **kw: Any) -> list[Delivery]:
    """One notifier lifetime (a ``watch`` run): start, submit, drain, close."""
    got: list[Delivery] = []
    n = Notifier([url], ledger, report=got.append, **kw)
    n.start()
    for ev in events:
        n.submit(ev)
    n.close(drain_s=20.0)
    return got


def test_one_post_per_transition_across_restarts(receiver: Receiver, tmp_path: Path) -> None:
    url = f"json://127.0.0.1:{receiver.port}/hook"
    ledger = Ledger(tmp_path / "notify.sqlite3")
    ev = fired()
    run_notifier(url, ledger, [ev, ev])  # the same transition twice in one run
    assert len(receiver.posts) == 1
    post = receiver.posts[0]
    assert post["title"] == "[CRITICAL] host_unreachable b"
    assert "host b unreachable for 60 s" in post["message"] and post["type"] == "failure"
    assert receiver.paths == ["/hook"]
    # a restart while the alert still fires: the engine re-fires it, maybe with a new
    # fired_at; nothing is paged again
    again = run_notifier(url, ledger, [ev, fired(fired_at=1300.0)])
    assert len(receiver.posts) == 1
    assert [d.outcome for d in again] == ["duplicate", "duplicate"]
    # the resolve is paged once, also when repeated after another restart
    run_notifier(url, ledger, [resolved(ev, 1500.0)])
    run_notifier(url, ledger, [resolved(ev, 1500.0), resolved(ev, 1600.0)])
    assert [p["title"] for p in receiver.posts] == [
        "[CRITICAL] host_unreachable b",
        "[RESOLVED] host_unreachable b",
    ]
    assert receiver.posts[1]["type"] == "success"
    # the same alert firing again later is a new page
    run_notifier(url, ledger, [fired(fired_at=5000.0)])
    assert len(receiver.posts) == 3
    states = [(r[2], r[4]) for r in ledger.rows()]
    assert states == [("fired", "sent"), ("resolved", "sent"), ("fired", "sent")]


def test_a_failed_attempt_is_retried(receiver: Receiver, tmp_path: Path) -> None:
    receiver.fail = 1
    url = f"json://127.0.0.1:{receiver.port}/hook"
    ledger = Ledger(tmp_path / "n.sqlite3")
    got = run_notifier(url, ledger, [fired()], backoff_s=0.05)
    assert len(receiver.paths) == 2  # one refused, one accepted
    assert len(receiver.posts) == 1
    assert [d.outcome for d in got] == ["retrying", "sent"]
    assert got[1].attempts == 2
    assert [r[4:] for r in ledger.rows()] == [("sent", 2)]


def test_gives_up_after_the_attempts_and_says_so(receiver: Receiver, tmp_path: Path) -> None:
    receiver.fail = 10
    url = f"json://127.0.0.1:{receiver.port}/hook"
    got = run_notifier(url, Ledger(tmp_path / "n.sqlite3"), [fired()], attempts=3, backoff_s=0.01)
    assert len(receiver.paths) == 3 and not receiver.posts
    assert [d.outcome for d in got] == ["retrying", "retrying", "failed"]


def test_pending_delivery_of_a_killed_run_is_resent(receiver: Receiver, tmp_path: Path) -> None:
    url = f"json://127.0.0.1:{receiver.port}/hook"
    ledger = Ledger(tmp_path / "n.sqlite3")
    con = ledger.connect()
    m = message_for(fired())
    assert Ledger.claim(con, url_id(url), m, time.time())  # claimed, then the run died
    con.close()
    run_notifier(url, ledger, [])
    assert len(receiver.posts) == 1 and receiver.posts[0]["title"] == m.title
    run_notifier(url, ledger, [fired()])
    assert len(receiver.posts) == 1


def test_submit_never_waits_for_a_slow_service(tmp_path: Path) -> None:
    release = threading.Event()
    sent: list[str] = []

    def slow(url: str, m: Message) -> bool:
        release.wait(10)
        sent.append(m.key)
        return True

    n = Notifier(
        ["json://127.0.0.1:9/x", "json://127.0.0.1:10/y"], Ledger(tmp_path / "n.sqlite3"), send=slow
    )
    n.start()
    t0 = time.monotonic()
    for i in range(50):
        n.submit(fired(key_host=f"h{i}"))
    assert time.monotonic() - t0 < 0.5
    release.set()
    n.close(drain_s=20.0)
    assert len(sent) == 100  # both URLs got all of them


def test_silenced_fire_and_other_changes_are_not_paged(tmp_path: Path) -> None:
    sent: list[Message] = []

    def send(url: str, m: Message) -> bool:
        sent.append(m)
        return True

    n = Notifier(["json://127.0.0.1:9/x"], Ledger(tmp_path / "n.sqlite3"), send=send)
    n.start()
    ev = fired()
    import dataclasses

    silenced = dataclasses.replace(ev.alert, silenced_until=ev.at + 3600)
    n.submit(AlertChanged(silenced, "fired", ev.at))
    n.submit(AlertChanged(ev.alert, "acknowledged", ev.at + 5))
    n.close()
    assert sent == []


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        (
            "json://user:s3cretpw@127.0.0.1:8080/hook/T0KEN123",
            "json://***@127.0.0.1:8080/***",
            ["s3cretpw", "T0KEN123", "user"],
        ),
        (
            "tgram://123456789:ABCdefGHIjkl/987654",
            "tgram://***",
            ["ABCdefGHIjkl", "987654", "123456789"],
        ),
        (
            "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general",
            "slack://***/***",
            ["TIiajkdnlazkcOXrIdevi7FQ", "A1BRTD4JD", "T1JJ3T3L2"],
        ),
        ("mailto://ops:pa55word@example.org", "mailto://***@example.org", ["pa55word", "ops"]),
        ("json://hooks.example.org", "json://hooks.example.org", []),
    ],
)
def test_redacted_urls_hide_their_secrets(url: str, shown: str, hidden: list[str]) -> None:
    assert redact_url(url) == shown
    for h in hidden:
        assert h not in redact_url(url)


def test_apprise_log_never_shows_the_secrets(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Apprise logs the POST URL (debug) and the refused response (warning); the notifier's
    filter (installed by ``start``) leaves no password, user or path token in them."""
    receiver.fail = 10
    url = f"json://alice:s3cretpw@127.0.0.1:{receiver.port}/hook/T0KEN123"
    with caplog.at_level(logging.DEBUG):
        run_notifier(url, Ledger(tmp_path / "n.sqlite3"), [fired()], attempts=2, backoff_s=0.01)
    text = caplog.text + "".join(str(r.msg) for r in caplog.records)
    assert "JSON POST URL" in text and "Failed to send JSON" in text  # Apprise did log
    for secret in ("s3cretpw", "T0KEN123", "alice"):
        assert secret not in text


def test_unknown_scheme_is_refused_without_showing_the_url() -> None:
    with pytest.raises(ConfigError) as e:
        check_urls(["nosuchservice://tok3nvalue/xyz"])
    assert "tok3nvalue" not in e.value.message and "nosuchservice://" in e.value.message
