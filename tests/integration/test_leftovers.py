"""Leftovers of consoles that die, and synced workdirs of removed jobs: real sshd hosts, real
dockerd, real `gpuconsole` processes SIGKILLed mid-way.

Each test runs the CLI with a private ``TMPDIR`` (its forwarded-socket folders and workdir
staging copies land there) and a profile whose hosts are renamed ``lo-a``/``lo-b`` (same
sshd), so consoles of other tests never adopt these jobs. The hosts' state is read over
plain ``ssh <host> ...``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remote.transport import workdir_digest
from tests.integration.conftest import CLI, EXAMPLES, wait_for
from tests.integration.test_engine_relay import own_sock as own_sock  # a fixture
from tests.integration.test_engine_relay import relay_pids

KEY = Path("/var/tmp/gpuconsole-testhosts/id_ed25519")
KNOWN = Path("/var/tmp/gpuconsole-testhosts/known_hosts")
HOSTS = {"a": "127.0.0.11", "b": "127.0.0.12"}


def ssh(host: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on a test host over plain OpenSSH."""
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(KEY),
            "-o",
            f"UserKnownHostsFile={KNOWN}",
            "-o",
            "BatchMode=yes",
            f"root@{HOSTS[host]}",
            shlex.join(argv),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def host_workdirs(host: str) -> list[str]:
    """Names in the host's ``~/.cache/gpuconsole/workdirs`` (staging folders included)."""
    res = ssh(host, "ls", "-a", os.path.expanduser("~/.cache/gpuconsole/workdirs"))
    return [n for n in res.stdout.split() if n not in (".", "..")]


def has_workdir(host: str, digest: str) -> bool:
    return digest[:16] in host_workdirs(host)


@pytest.fixture
def lo(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CLI, Path, Path]]:
    """(cli, its profile with hosts lo-a/lo-b, its private TMPDIR: short, as a unix socket
    path in it must fit in 108 bytes)."""
    tmpdir = Path(tempfile.mkdtemp(prefix="lo-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    data = yaml.safe_load(cli.profile.read_text())
    data["hosts"] = {f"lo-{k}": v for k, v in data["hosts"].items()}
    profile = cli.tmp / "lo-profile.yaml"
    profile.write_text(yaml.safe_dump(data))
    yield cli, profile, tmpdir
    shutil.rmtree(tmpdir, ignore_errors=True)


def workdir(cli: CLI, name: str, big_mib: int = 0) -> Path:
    """A workdir of its own (train_ddp.py + a file naming the test, so its content hash is
    unique), with ``big_mib`` MiB of random data to make the copy take a while."""
    d = cli.tmp / f"wd-{name}"
    d.mkdir()
    shutil.copy(EXAMPLES / "train_ddp.py", d / "train_ddp.py")
    (d / "owner.txt").write_text(f"{name} {os.getpid()} {cli.tmp}\n")
    if big_mib:
        with open(d / "big.bin", "wb") as f:
            for _ in range(big_mib):
                f.write(os.urandom(1 << 20))
    return d


def spec(cli: CLI, name: str, wd: Path, *args: str) -> Path:
    return cli.spec(
        name, nodes=["lo-a"], workdir=str(wd), args=["--out", "/tmp/out", "--workers", "0", *args]
    )


def submit_slow(cli: CLI, profile: Path, folder: str, name: str) -> str:
    """Submit a job of 100 one-second steps from a workdir of its own; its id."""
    wd = workdir(cli, folder)
    res = cli.run(
        "submit",
        str(spec(cli, name, wd, "--steps", "100", "--step-sleep", "1")),
        profile=profile,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.split()[0]


def popen(cli: CLI, profile: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli.argv(*args, profile=profile),
        env=cli.env(),
        cwd=cli.tmp,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def mine(tmpdir: Path, pid: int, kind: str) -> list[Path]:
    return [p for p in tmpdir.iterdir() if p.name.startswith(f"gpuconsole-{pid}-{kind}")]


def test_sigkilled_watch_leaves_socket_dirs_the_next_run_removes(
    lo: tuple[CLI, Path, Path],
) -> None:
    cli, profile, tmpdir = lo
    job_id = submit_slow(cli, profile, "follow", "lofollow")
    # `watch` reconciles the job through the engine's API: the forwarded Docker socket (a
    # log follow reads an SSH channel of its own and forwards nothing)
    watcher = popen(cli, profile, "watch", "--json", "--interval", "1")
    try:
        socks = wait_for(
            lambda: [
                d for d in mine(tmpdir, watcher.pid, "sock-lo-a") if (d / "docker.sock").exists()
            ],
            timeout=120,
            interval=0.2,
        )
        assert len(socks) == 1
    finally:
        watcher.send_signal(signal.SIGKILL)
        watcher.wait()
    assert socks[0].exists()  # nothing removed it: the process had no chance
    res = cli.run("ps", profile=profile)
    assert res.returncode == 0, res.stderr
    assert not socks[0].exists()
    assert cli.run("rm", "--force", job_id, profile=profile).returncode == 0


def test_sigkilled_logs_follow_leaves_no_relay_on_the_host(
    lo: tuple[CLI, Path, Path], own_sock: str
) -> None:
    """A console SIGKILLed while it follows a log: its SSH connection closes with the
    process, and the engine relay that served the follow on the host exits with it."""
    cli, profile, _ = lo
    data = yaml.safe_load(profile.read_text())
    data["hosts"]["lo-a"]["docker_socket"] = own_sock  # its relays are found by this path
    profile.write_text(yaml.safe_dump(data))
    job_id = submit_slow(cli, profile, "relay", "lorelay")
    follower = popen(cli, profile, "logs", job_id, "--follow")
    try:
        relays = wait_for(lambda: relay_pids(own_sock), timeout=120, interval=0.2)
        assert len(relays) == 1
    finally:
        follower.send_signal(signal.SIGKILL)
        follower.wait()
    wait_for(lambda: relay_pids(own_sock) == [], timeout=30, interval=0.1)
    assert cli.run("rm", "--force", job_id, profile=profile).returncode == 0


def test_sigkilled_submit_mid_sync_is_swept_by_the_next_sync(lo: tuple[CLI, Path, Path]) -> None:
    cli, profile, tmpdir = lo
    wd = workdir(cli, "midsync", big_mib=300)
    digest = workdir_digest(wd)
    path = spec(cli, "losync", wd, "--steps", "1")
    sub = popen(cli, profile, "submit", str(path))
    try:
        staging = re.compile(rf"^\.{digest[:16]}\.[\w-]+\.{sub.pid}\.[0-9a-f]+\.tmp$")
        left = wait_for(
            lambda: [n for n in host_workdirs("a") if staging.match(n)], timeout=120, interval=0
        )
    finally:
        sub.send_signal(signal.SIGKILL)
        sub.wait()
    assert left[0] in host_workdirs("a")  # the interrupted copy, under its staging name
    assert not has_workdir("a", digest)
    assert len(mine(tmpdir, sub.pid, "workdir")) == 1  # the local staging copy

    res = cli.run("submit", str(path), profile=profile)
    assert res.returncode == 0, res.stderr
    names = host_workdirs("a")
    assert left[0] not in names
    assert digest[:16] in names
    assert mine(tmpdir, sub.pid, "workdir") == []
    assert [p.name for p in tmpdir.iterdir() if "-workdir-" in p.name] == []


def test_rm_collects_the_synced_workdir_unless_another_job_uses_it(
    lo: tuple[CLI, Path, Path],
) -> None:
    cli, profile, _ = lo
    wd = workdir(cli, "shared")
    digest = workdir_digest(wd)
    ids = []
    for name in ("loshare1", "loshare2"):
        res = cli.run("submit", str(spec(cli, name, wd, "--steps", "1")), profile=profile)
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.split()[0])
    assert has_workdir("a", digest)
    for job_id in ids:  # both ended; `rm` refuses running jobs
        assert cli.run("logs", "-f", job_id, profile=profile).returncode == 0

    assert cli.run("rm", ids[0], profile=profile).returncode == 0
    assert has_workdir("a", digest)  # the second job's container still mounts it
    assert cli.run("rm", ids[1], profile=profile).returncode == 0
    assert not has_workdir("a", digest)
