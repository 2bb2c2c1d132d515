"""``gpuconsole watch`` as a user runs it: the metrics endpoint over a replayed H200 trace read
with a real HTTP client, and host_unreachable over the real test hosts (sshd of host b
stopped and restarted) printed as JSON lines and paged through Apprise to a local receiver
exactly once, across restarts of watch."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import CLI, REPO, wait_for

TRACE = REPO / "tests" / "data" / "traces" / "h200-load.jsonl"
TESTHOSTS = Path(os.environ.get("GPUCONSOLE_TESTHOSTS_DIR", "/var/tmp/gpuconsole-testhosts"))


@dataclass
class Watch:
    """A running ``gpuconsole watch`` with its stdout and stderr lines collected."""

    proc: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))

    def metrics_url(self) -> str:
        def found() -> str | None:
            for ln in self.err:
                m = re.match(r"^metrics: (http://\S+)$", ln)
                if m:
                    return m.group(1)
            return None

        url: str = wait_for(found, timeout=60)
        return url

    def alerts(self) -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in list(self.out)]

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait(timeout=10)


def start(cli: CLI, watches: list[Watch], *args: str) -> Watch:
    w = Watch(cli.popen("watch", *args))
    watches.append(w)
    return w


def fetch(url: str) -> str:
    """The endpoint's text through curl (a real client), else urllib."""
    if shutil.which("curl"):
        res = subprocess.run(
            ["curl", "-sS", "--max-time", "10", url], capture_output=True, text=True, timeout=20
        )
        assert res.returncode == 0, res.stderr
        return res.stdout
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_metrics_endpoint_serves_a_replayed_trace(cli: CLI, watches: list[Watch]) -> None:
    with open(TRACE, encoding="utf-8") as f:
        last = [json.loads(ln) for ln in f if ln.strip()][-1]
    host = last["host"]["hostname"]  # a bare agent trace is named by its hostname
    w = start(cli, watches, "--replay", str(TRACE), "--speed", "0", "--metrics-port", "0")
    url = w.metrics_url()
    assert url.startswith("http://127.0.0.1:")  # loopback unless --metrics-addr says so
    wait_for(lambda: any(ln.startswith("replay finished: 25 samples") for ln in w.err))
    got = series(fetch(url))
    for g in last["gpus"]:

        def value(name: str, g: dict[str, Any] = g) -> float:
            (v,) = [v for lb, v in got[name] if lb["gpu"] == str(g["index"])]
            return v

        (labels,) = [lb for lb, _ in got["DCGM_FI_DEV_GPU_UTIL"] if lb["gpu"] == str(g["index"])]
        assert labels["Hostname"] == host and labels["UUID"] == g["uuid"]
        assert labels["device"] == f"nvidia{g['index']}" and labels["modelName"] == g["name"]
        assert value("DCGM_FI_DEV_GPU_UTIL") == g["util_gpu_pct"]
        assert value("DCGM_FI_DEV_FB_USED") == g["mem_used_mib"]
        assert value("DCGM_FI_DEV_POWER_USAGE") == g["power_w"]
        assert value("DCGM_FI_DEV_GPU_TEMP") == g["temp_c"]
        assert value("DCGM_FI_DEV_SM_CLOCK") == g["sm_clock_mhz"]
        assert value("DCGM_FI_PROF_SM_ACTIVE") == g["gpm"]["sm_activity_pct"] / 100
    assert [v for lb, v in got["gpuconsole_host_up"] if lb["Hostname"] == host] == [1.0]
    assert w.stop() == 0
    assert w.out == []  # no alert on a healthy trace


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    posts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server.server_address[1]}/gpuconsole"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            holder[0].posts.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(server))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield holder[0]
    server.shutdown()
    server.server_close()


def host_up(w: Watch, url: str, host: str) -> float | None:
    got = series(fetch(url))
    vals = [v for lb, v in got.get("gpuconsole_host_up", []) if lb["Hostname"] == host]
    return vals[0] if vals else None


def stop_sshd(host: str) -> None:
    """Stop host's sshd and cut its established sessions (the monitor's connection)."""
    master = int((TESTHOSTS / host / "sshd.pid").read_text().split()[0])
    children = subprocess.run(
        ["pgrep", "-P", str(master)], capture_output=True, text=True
    ).stdout.split()
    os.kill(master, signal.SIGTERM)
    for pid in children:
        os.kill(int(pid), signal.SIGKILL)


def restart_sshd() -> None:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "testhosts" / "up")],
        check=True,
        capture_output=True,
        timeout=120,
    )


def alerting_profile(cli: CLI, notify: str) -> Path:
    """The test profile with short alert delays and the receiver as its notify: URL."""
    data = yaml.safe_load(cli.profile.read_text())
    # only the host rule: jobs that other tests (or people) left failed on the shared test
    # hosts would page too
    data["alerts"] = {
        "interval_s": 0.5,
        "jobs_refresh_s": 30,
        "host_unreachable": {"for_s": 2},
        **{
            rule: {"enabled": False}
            for rule in ("job_failed", "job_hung", "straggler", "gpus_idle")
        },
    }
    data["notify"] = [notify]
    path = cli.tmp / "alerting.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_host_unreachable_fires_resolves_and_pages_once_across_restarts(
    cli: CLI, watches: list[Watch], receiver: Receiver
) -> None:
    profile = alerting_profile(cli, receiver.url)

    def start_watch() -> Watch:
        w = Watch(
            subprocess.Popen(
                cli.argv(
                    "watch", "--json", "--interval", "0.5", "--metrics-port", "0", profile=profile
                ),
                env=cli.env(),
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        watches.append(w)
        return w

    def transitions(w: Watch, change: str) -> list[dict[str, Any]]:
        return [
            e
            for e in w.alerts()
            if e["change"] == change and e["alert"]["rule"] == "host_unreachable"
        ]

    w1 = start_watch()
    url = w1.metrics_url()
    wait_for(lambda: host_up(w1, url, "a") == 1 and host_up(w1, url, "b") == 1, timeout=90)
    try:
        stop_sshd("b")
        (ev,) = wait_for(lambda: transitions(w1, "fired"), timeout=90)
        assert ev["alert"]["host"] == "b" and ev["alert"]["key"] == "host_unreachable/b"
        assert ev["alert"]["severity"] == "critical"
        wait_for(lambda: len(receiver.posts) == 1, timeout=60)
        assert receiver.posts[0]["title"] == "[CRITICAL] host_unreachable b"
        assert host_up(w1, url, "b") == 0 and host_up(w1, url, "a") == 1
        # ALERTS on the endpoint while it fires
        alerts = series(fetch(url))["ALERTS"]
        assert [
            lb["Hostname"]
            for lb, v in alerts
            if lb["alertname"] == "host_unreachable" and lb["alertstate"] == "firing" and v == 1
        ] == ["b"]
        assert w1.stop() == 0
        # a restart while b is still down: the alert is carried over (said on stderr, on
        # the endpoint), neither printed as a new transition nor paged again
        w2 = start_watch()
        wait_for(
            lambda: any(
                ln.startswith("still firing since") and "host_unreachable/b" in ln for ln in w2.err
            ),
            timeout=60,
        )
        url2 = w2.metrics_url()
        wait_for(lambda: host_up(w2, url2, "b") == 0, timeout=60)
        assert any(lb["Hostname"] == "b" for lb, _ in series(fetch(url2))["ALERTS"])
        time.sleep(3)  # several evaluation rounds with b down
        assert transitions(w2, "fired") == [] and len(receiver.posts) == 1
    finally:
        restart_sshd()
    wait_for(lambda: transitions(w2, "resolved"), timeout=120)
    wait_for(lambda: len(receiver.posts) == 2, timeout=60)
    assert receiver.posts[1]["title"] == "[RESOLVED] host_unreachable b"
    assert w2.stop() == 0
    # a third run with every host up pages nothing and prints nothing
    w3 = start_watch()
    url3 = w3.metrics_url()
    wait_for(lambda: host_up(w3, url3, "a") == 1 and host_up(w3, url3, "b") == 1, timeout=90)
    time.sleep(3)
    assert w3.out == [] and len(receiver.posts) == 2
    assert w3.stop() == 0
    for w in (w1, w2, w3):
        assert not any("Traceback" in ln for ln in w.err), w.err
        assert not any("/gpuconsole" in ln for ln in w.err), w.err  # the URL is redacted


def test_closed_stdout_ends_watch_with_exit_0(cli: CLI, watches: list[Watch]) -> None:
    """stdout's reader goes away (a pipe into `head` that exited) while watch has nothing to
    print: watch notices within its stdout check and ends with exit 0, as `top` does."""
    proc = cli.popen("watch", "--json", "--replay", str(TRACE), "--speed", "0")
    w = Watch.__new__(Watch)  # only for the fixture's cleanup
    w.proc, w.out, w.err = proc, [], []
    watches.append(w)
    time.sleep(3)
    assert proc.poll() is None
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
