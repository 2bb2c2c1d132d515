"""Streaming commands and one-shot fleet reads against the real test hosts: a closed stdout
ends them (exit 0, no traceback, never a host failure), hosts that give nothing are named
with their state (exit 1), and a followed log says on stderr when its SSH connection drops
and when it resumes.

Hosts that do not answer are real sockets: a port with nothing listening (refused: ``down``)
and a listener that never speaks SSH (``connecting`` until the timeout). The SSH cut goes
through a TCP proxy this test owns in front of host a's sshd, so only this test's
connections drop (other runs share the test hosts).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import CLI, REPO, wait_for
from tests.integration.proxies import CuttableProxy, StallServer, known_hosts_line

TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")


def free_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (no SSH banner)."""
    srv = StallServer()
    try:
        yield srv.port
    finally:
        srv.close()


def write_profile(tmp: Path, base: Path, extra: dict[str, Any], **top: Any) -> Path:
    data = yaml.safe_load(base.read_text())
    data["hosts"].update(extra)
    data.update(top)
    path = tmp / "streams.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def unanswered(port: int) -> dict[str, Any]:
    return {
        "hostname": "127.0.0.1",
        "port": port,
        "user": "root",
        "identity_file": str(TESTHOSTS / "id_ed25519"),
    }


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


def test_top_json_into_head_exits_0_with_one_line(cli: CLI) -> None:
    gc = subprocess.Popen(
        cli.argv("top", "--json"),
        env=cli.env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert gc.stdout is not None
    head = subprocess.Popen(["head", "-n", "1"], stdin=gc.stdout, stdout=subprocess.PIPE)
    gc.stdout.close()  # head holds the only reading end: when it exits, the pipe is closed
    out, _ = head.communicate(timeout=120)
    try:
        _, err = gc.communicate(timeout=60)
    finally:
        if gc.poll() is None:
            gc.kill()
    stderr = err.decode()
    assert gc.returncode == 0, stderr
    lines = out.decode().splitlines()
    assert len(lines) == 1
    first = json.loads(lines[0])
    assert first["host"] in ("a", "b") and first["sample"]["schema"] == 1
    no_traceback(stderr)
    assert "down" not in stderr  # the closed pipe never counted as a host failure


def test_top_once_names_hosts_that_gave_nothing(
    cli: CLI, tmp_path: Path, silent_listener: int
) -> None:
    refused = free_port()
    profile = write_profile(
        tmp_path,
        cli.profile,
        {"c": unanswered(refused), "d": unanswered(silent_listener)},
        connect_timeout=120,
    )
    res = cli.run("top", "--once", "--json", "--timeout", "20", profile=profile, timeout=120)
    assert res.returncode == 1, res.stderr
    no_traceback(res.stderr)
    # what came is printed: a and b answered, c is down, d never got past connecting
    hosts = {h["name"]: h for h in json.loads(res.stdout)["hosts"]}
    assert hosts["a"]["status"] == "ok" and hosts["b"]["status"] == "ok"
    assert hosts["c"]["status"] == "down" and hosts["c"]["sample"] is None
    assert hosts["d"]["status"] == "connecting" and hosts["d"]["sample"] is None
    err = res.stderr.splitlines()
    assert f"host c: down: cannot connect to 127.0.0.1:{refused}: connection refused" in err
    assert "host d: still connecting after 20 s" in err
    assert "error: 2 of 4 hosts gave no sample within 20 s: c, d" in err


def test_gpus_exits_1_when_a_host_gave_nothing(cli: CLI, tmp_path: Path) -> None:
    refused = free_port()
    profile = write_profile(tmp_path, cli.profile, {"c": unanswered(refused)})
    res = cli.run("gpus", "--hosts", "a,c", profile=profile, timeout=120)
    assert res.returncode == 1, res.stderr
    no_traceback(res.stderr)
    assert res.stdout.splitlines()[0].startswith("HOST")
    assert "host c: down: cannot connect to 127.0.0.1" in res.stderr
    assert "error: 1 of 2 hosts gave no sample: c (down)" in res.stderr
    assert "host a" not in res.stderr


@pytest.fixture
def proxied_a(cli: CLI, tmp_path: Path) -> Iterator[tuple[Path, CuttableProxy]]:
    """A profile whose host ``a`` is host a's sshd reached through a CuttableProxy."""
    proxy = CuttableProxy(("127.0.0.11", 22))
    kh = tmp_path / "known_hosts"
    kh.write_text(known_hosts_line(proxy))
    a = {
        "hostname": "127.0.0.1",
        "port": proxy.port,
        "user": "root",
        "identity_file": str(TESTHOSTS / "id_ed25519"),
    }
    data = yaml.safe_load(cli.profile.read_text())
    data["hosts"] = {"a": a}
    data["known_hosts"] = str(kh)
    path = tmp_path / "proxied.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield path, proxy
    finally:
        proxy.close()


def test_followed_log_says_when_it_reconnects(
    cli: CLI, proxied_a: tuple[Path, CuttableProxy]
) -> None:
    profile, proxy = proxied_a
    spec = cli.spec(
        "recon", args=["--steps", "30", "--out", "/out", "--workers", "0", "--step-sleep", "0.2"]
    )
    sub = cli.run("submit", str(spec), profile=profile)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    proc = subprocess.Popen(
        cli.argv("logs", job_id, "--follow", profile=profile),
        env=cli.env(),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    got: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for ln in proc.stdout:
            got.append(ln.rstrip("\n"))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        wait_for(lambda: any("step 5/30" in ln for ln in got), timeout=120)
        assert proxy.cut() >= 1
        proc.wait(timeout=180)  # stdout is the reader's; stderr is small, read after
    finally:
        if proc.poll() is None:
            proc.kill()
    t.join(timeout=10)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    no_traceback(err)
    lost = [ln for ln in err.splitlines() if "log stream lost" in ln]
    resumed = [ln for ln in err.splitlines() if "log stream resumed" in ln]
    assert len(lost) == 1 and lost[0].startswith("n0 on a: log stream lost (")
    assert lost[0].endswith("); reconnecting")
    assert resumed == ["n0 on a: log stream resumed"]
    assert err.index(lost[0]) < err.index(resumed[0])
    # stdout carries the log only, all of it
    assert not any("log stream" in ln for ln in got)
    steps = [ln for ln in got if "step " in ln and "/30" in ln]
    assert len(steps) == 60  # 30 steps x 2 ranks, none lost or repeated across the cut


def test_logs_follow_into_head_exits_0_and_the_job_keeps_running(cli: CLI) -> None:
    # a quiet job: after the first lines nothing comes for seconds, so only the watch on
    # stdout can notice that head is gone
    spec = cli.spec(
        "quiet", args=["--steps", "1000", "--out", "/out", "--workers", "0", "--step-sleep", "5"]
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    wait_for(lambda: "step 1/1000" in cli.run("logs", job_id).stdout, timeout=120)
    gc = subprocess.Popen(
        cli.argv("logs", job_id, "--follow"),
        env=cli.env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert gc.stdout is not None
    head = subprocess.Popen(["head", "-n", "1"], stdin=gc.stdout, stdout=subprocess.PIPE)
    gc.stdout.close()
    out, _ = head.communicate(timeout=120)
    try:
        _, err = gc.communicate(timeout=60)
    finally:
        if gc.poll() is None:
            gc.kill()
    assert gc.returncode == 0, err.decode()
    no_traceback(err.decode())
    assert len(out.decode().splitlines()) == 1
    ps = json.loads(cli.run("ps", "--json").stdout)
    (job,) = [j for j in ps if j["id"] == job_id]
    assert job["state"] == "running"
    stop = cli.run("stop", job_id, "--grace", "1")
    assert stop.returncode == 0, stop.stderr
