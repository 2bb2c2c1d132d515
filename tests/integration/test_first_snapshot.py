"""`top --once` on a terminal: the hosts that answered are drawn while a late one is named as
pending, and the command returns once the late host answered (issue 11 part 2).

Host ``late`` is host a's real sshd reached through a :class:`DelayingProxy` that holds
everything the server says until the test releases it: the host is reachable but slow, as a
loaded or far host is. ``top --once`` runs on a pseudo-terminal (it draws frames only there).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import CLI, REPO
from tests.integration.proxies import DelayingProxy, known_hosts_line

TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")
CLEAR = "\x1b[H\x1b[2J"


@pytest.fixture
def late_host(cli: CLI, tmp_path: Path) -> Iterator[tuple[Path, DelayingProxy]]:
    """A profile with hosts a, b and ``late`` (host a's sshd behind a DelayingProxy)."""
    proxy = DelayingProxy(("127.0.0.11", 22))
    data = yaml.safe_load(cli.profile.read_text())
    kh = tmp_path / "known_hosts"
    kh.write_text(Path(data["known_hosts"]).read_text() + known_hosts_line(proxy))
    data["hosts"]["late"] = {
        "hostname": "127.0.0.1",
        "port": proxy.port,
        "user": "root",
        "identity_file": str(TESTHOSTS / "id_ed25519"),
    }
    data["known_hosts"] = str(kh)
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield path, proxy
    finally:
        proxy.close()


def read_until(fd: int, buf: list[str], done: Callable[[str], bool], timeout: float) -> bool:
    """Read the terminal into ``buf`` until ``done(text)`` is true or ``timeout`` s pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if done("".join(buf)):
            return True
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                return done("".join(buf))
            if not chunk:
                break
            buf.append(chunk.decode("utf-8", "replace"))
    return done("".join(buf))


def row(frame: str, host: str) -> str:
    return next((ln for ln in frame.splitlines() if ln.split(" ", 1)[0] == host), "")


def test_top_once_draws_answered_hosts_and_names_the_late_one(
    cli: CLI, late_host: tuple[Path, DelayingProxy]
) -> None:
    profile, proxy = late_host
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cli.argv("top", "--once", "--timeout", "120", profile=profile),
        env=cli.env(),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(slave)
    buf: list[str] = []
    try:

        def pending_frame(text: str) -> bool:
            frames = text.split(CLEAR)
            return any(
                "waiting for 1 of 3 hosts: late" in f
                and "no_driver" in row(f, "a")
                and "no_driver" in row(f, "b")
                for f in frames
            )

        # a and b answered and are drawn; late is pending, named with its step
        assert read_until(master, buf, pending_frame, 90), "".join(buf)[-3000:]
        frame = next(f for f in "".join(buf).split(CLEAR) if pending_frame(f))
        assert "connecting" in row(frame, "late")
        assert proc.poll() is None  # still waiting for late (--timeout 120)
        proxy.release()
        assert proc.wait(timeout=90) == 0, proc.stderr.read() if proc.stderr else ""
        read_until(master, buf, lambda _t: False, 1.0)  # what is left on the terminal
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    final = "".join(buf).split(CLEAR)[-1]
    assert "waiting for" not in final
    for host in ("a", "b", "late"):
        assert "no_driver" in row(final, host), final
