"""A host that stops answering in the middle of a follow, for real: host a's sshd is reached
through a :class:`~tests.integration.proxies.BlackHoleProxy` that goes silent (nothing
forwarded, nothing closed) while ``logs --follow`` runs (issue 20, 1.10).

The follow notices it from the SSH keepalives (``remote.ssh.KEEPALIVE_DEAD_S`` after the last
data), says ``the host stopped answering, last data N s ago`` on stderr, reconnects once the
path carries bytes again and resumes from its cursor: every line once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remote.ssh import KEEPALIVE_DEAD_S
from tests.integration.conftest import CLI, REPO, wait_for
from tests.integration.proxies import BlackHoleProxy, known_hosts_line

TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")


@pytest.fixture
def black_holed_a(cli: CLI, tmp_path: Path) -> Iterator[tuple[Path, BlackHoleProxy]]:
    """A profile whose host ``a`` is host a's sshd through a BlackHoleProxy."""
    proxy = BlackHoleProxy(("127.0.0.11", 22))
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
    data["connect_timeout"] = 5  # reconnects into the silent path give up sooner
    path = tmp_path / "black-holed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield path, proxy
    finally:
        proxy.close()


def test_a_follow_says_the_host_stopped_answering_and_resumes(
    cli: CLI, black_holed_a: tuple[Path, BlackHoleProxy]
) -> None:
    profile, proxy = black_holed_a
    spec = cli.spec(
        "blackhole",
        args=[
            "--steps",
            "120",
            "--out",
            "/out",
            "--workers",
            "0",
            "--step-sleep",
            "0.5",
            "--ckpt-every",
            "0",
        ],
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
    said: list[str] = []

    def read(stream: object, into: list[str]) -> None:
        for ln in stream:  # type: ignore[attr-defined]
            into.append(ln.rstrip("\n"))

    readers = [
        threading.Thread(target=read, args=(proc.stdout, got), daemon=True),
        threading.Thread(target=read, args=(proc.stderr, said), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        wait_for(lambda: any("step 5/120" in ln for ln in got), timeout=120)
        proxy.silence()
        lost = wait_for(
            lambda: [ln for ln in said if "log stream lost" in ln], timeout=KEEPALIVE_DEAD_S + 40
        )
        proxy.resume()
        wait_for(lambda: any("log stream resumed" in ln for ln in said), timeout=120)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    for t in readers:
        t.join(timeout=10)
    assert proc.returncode == 0, "\n".join(said)
    assert not any("Traceback" in ln for ln in said), said
    assert len(lost) == 1, said
    m = re.fullmatch(
        r"n0 on a: log stream lost \(the host stopped answering, last data "
        r"(\d+) s ago\); reconnecting",
        lost[0],
    )
    assert m is not None, lost
    assert KEEPALIVE_DEAD_S <= int(m.group(1)) <= KEEPALIVE_DEAD_S + 10, lost
    assert [ln for ln in said if "log stream" in ln] == [lost[0], "n0 on a: log stream resumed"]
    steps = [ln for ln in got if re.search(r"step \d+/120 loss", ln)]
    assert len(steps) == 240 and len(set(steps)) == 240  # none lost or repeated


@pytest.mark.parametrize("command", [["ps"], ["logs", "no-such-job"]])
def test_ctrl_c_while_a_host_is_still_connecting_ends_at_once(
    cli: CLI, black_holed_a: tuple[Path, BlackHoleProxy], command: list[str]
) -> None:
    """A host that accepts the TCP connection and never speaks SSH: Ctrl-C during its
    connect (a 30 s connect_timeout) ends the command with `interrupted` (130) at once, not
    when the connect gives up."""
    profile, proxy = black_holed_a
    data = yaml.safe_load(profile.read_text())
    data["connect_timeout"] = 30
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    proxy.silence()
    proc = subprocess.Popen(
        cli.argv(*command, profile=profile),
        env=cli.env(),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(3)  # connecting to a, silently
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.rstrip().endswith("interrupted"), err
    assert took < 10, took  # the connect timeout (30 s) would be waited out
