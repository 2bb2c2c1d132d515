"""Gang teardown on the hosts, with no console running: real sshd hosts a and b, real dockerd,
real torchrun (gloo) under the supervisor of remote/agent/gang.py.

Each job is submitted without ``--follow``; after that no gpuconsole process runs. Every
look at the containers goes over ``ssh <host> docker ...`` (the hosts' own docker CLI), never
through gpuconsole. The surviving ranks sleep 600 s inside their first step (``--step-sleep``,
after the first all-reduce), so without a teardown they would only meet the dead peer at the
second step's all-reduce, 600 s later (gloo's collective timeout is 30 min on top).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import CLI, wait_for

KEY = Path("/var/tmp/gpuconsole-testhosts/id_ed25519")
KNOWN = Path("/var/tmp/gpuconsole-testhosts/known_hosts")
HOSTS = {"a": "127.0.0.11", "b": "127.0.0.12"}
TEARDOWN_EXIT = 75  # remote.gang.TEARDOWN_EXIT_CODE; the hosts' view, spelled out

# a worker of the given global rank, killed with SIGKILL (as the OOM killer would)
KILL_RANK = """
import os, signal, sys
want = b"RANK=" + sys.argv[1].encode()
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        if want in env:
            os.kill(int(p), signal.SIGKILL)
            print(p)
"""


def ssh_raw(host: str, *argv: str, input: bytes | None = None) -> bytes:
    """Run ``argv`` on a test host over plain OpenSSH (quoted for its shell, stderr merged
    into stdout); its output as bytes."""
    res = subprocess.run(
        [
            "ssh",
            "-i",
            str(KEY),
            "-o",
            f"UserKnownHostsFile={KNOWN}",
            "-o",
            "BatchMode=yes",
            f"root@{HOSTS[host]}",
            shlex.join(argv) + " 2>&1",
        ],
        input=input,
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout
    return res.stdout


def ssh(host: str, *argv: str, input: str | None = None) -> str:
    """Run ``argv`` on a test host over plain OpenSSH; its stdout."""
    out = ssh_raw(host, *argv, input=None if input is None else input.encode())
    return out.decode(errors="replace")


def state(host: str, name: str) -> dict[str, object]:
    """``docker inspect`` of one container on its host: Status, ExitCode, FinishedAt."""
    return dict(json.loads(ssh(host, "docker", "inspect", "-f", "{{json .State}}", name)))


def logs(host: str, name: str) -> str:
    return ssh(host, "docker", "logs", name)


def marker(host: str, name: str) -> dict[str, object]:
    """The supervisor's outcome file, copied out of the exited container (a tar stream)."""
    raw = ssh_raw(host, "docker", "cp", f"{name}:/tmp/gpuconsole-gang.json", "-")
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        f = tf.extractfile(tf.getmembers()[0])
        assert f is not None
        return dict(json.loads(f.read()))


def ended_in(mins: list[str]) -> float:
    """Seconds between two RFC 3339 FinishedAt values (ns precision cut to us)."""
    from datetime import datetime

    def t(s: str) -> float:
        head, _, frac = s.rstrip("Z").partition(".")
        return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))

    return t(mins[1]) - t(mins[0])


def own_profile(cli: CLI) -> Path:
    """The test profile with its hosts renamed ``gang-a``/``gang-b`` (same sshd): a console
    of another test that adopts every job of hosts ``a`` and ``b`` leaves these jobs alone."""
    data = yaml.safe_load(cli.profile.read_text())
    data["hosts"] = {f"gang-{k}": v for k, v in data["hosts"].items()}
    path = cli.tmp / "gang-profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def submit(cli: CLI, name: str) -> str:
    """Submit the 2-node job (no --follow); its id. No gpuconsole process runs after this."""
    spec = cli.spec(
        name,
        nodes=["gang-a", "gang-b"],
        args=["--steps", "1000", "--out", "/tmp/out", "--workers", "0", "--step-sleep", "600"],
    )
    res = cli.run("submit", str(spec), profile=own_profile(cli))
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split()[0]


@pytest.mark.parametrize(
    ("failing_host", "failing_node", "rank", "torn_host", "torn_node"),
    [("b", 1, "3", "a", 0), ("a", 0, "0", "b", 1)],
    ids=["node1-fails", "node0-fails-store-stays"],
)
def test_failed_worker_tears_down_the_other_node_without_a_console(
    cli: CLI,
    failing_host: str,
    failing_node: int,
    rank: str,
    torn_host: str,
    torn_node: int,
) -> None:
    job_id = submit(cli, f"gang{failing_node}")
    failing = f"gpuconsole-{job_id}-n{failing_node}"
    torn = f"gpuconsole-{job_id}-n{torn_node}"
    # every rank past init_process_group (startup lines), then inside the 600 s first step
    wait_for(
        lambda: (
            "rank 3/4" in logs("b", f"gpuconsole-{job_id}-n1")
            and "rank 0/4" in logs("a", f"gpuconsole-{job_id}-n0")
        ),
        timeout=120,
    )
    killed = ssh(
        failing_host, "docker", "exec", "-i", failing, "python3", "-", rank, input=KILL_RANK
    )
    assert killed.strip(), "no worker with that rank"

    wait_for(
        lambda: (
            state(torn_host, torn)["Status"] == "exited"
            and state(failing_host, failing)["Status"] == "exited"
        ),
        timeout=120,
    )
    s_fail, s_torn = state(failing_host, failing), state(torn_host, torn)
    assert s_fail["ExitCode"] == 1  # torchrun's own code: its worker died
    assert s_torn["ExitCode"] == TEARDOWN_EXIT
    # the torn-down node never finished its first step: it ended inside the 600 s sleep,
    # long before its next collective could have told it
    torn_log = logs(torn_host, torn)
    assert "step 1/1000" not in torn_log
    assert f"node {failing_node} failed (exit code 1): stopping node {torn_node}" in torn_log
    assert ended_in([str(s_fail["FinishedAt"]), str(s_torn["FinishedAt"])]) < 60
    assert marker(failing_host, failing) == {
        "node": failing_node,
        "outcome": "first_failure",
        "torchrun_exit": 1,
        "exit_status": 1,
        "cause": None,
    }
    assert marker(torn_host, torn)["cause"] == {
        "node": failing_node,
        "exit_code": 1,
        "kind": "failed",
    }


def test_node0_container_killed_tears_down_node1(cli: CLI) -> None:
    """Node 0 gone as a whole (its supervisor and the store with it): node 1 ends by itself,
    counted as a teardown caused by the lost store."""
    job_id = submit(cli, "gangkill0")
    n0, n1 = f"gpuconsole-{job_id}-n0", f"gpuconsole-{job_id}-n1"
    wait_for(lambda: "rank 3/4" in logs("b", n1) and "rank 0/4" in logs("a", n0), timeout=120)
    ssh("a", "docker", "kill", n0)
    wait_for(lambda: state("b", n1)["Status"] == "exited", timeout=120)
    assert state("a", n0)["ExitCode"] == 137
    s1 = state("b", n1)
    assert s1["ExitCode"] == TEARDOWN_EXIT
    assert "step 1/1000" not in logs("b", n1)
    assert marker("b", n1)["cause"] == {"node": 0, "exit_code": None, "kind": "store_lost"}


def test_a_stopped_gang_reports_every_node_stopped_with_143(cli: CLI) -> None:
    """`gpuconsole stop` of a running 2-node job SIGTERMs both containers at once: each node
    is `stopped` with exit 143 (128 + SIGTERM, as a shell reports it), whichever supervisor
    recorded its stop first; none reports the teardown code 75 (which means "ended because
    another node did"), and torchrun's own code after the signal stays in the marker and the
    node's last log line."""
    job_id = submit(cli, "gangstop")
    n0, n1 = f"gpuconsole-{job_id}-n0", f"gpuconsole-{job_id}-n1"
    wait_for(lambda: "rank 3/4" in logs("b", n1) and "rank 0/4" in logs("a", n0), timeout=120)
    res = cli.run("stop", job_id, profile=own_profile(cli))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"job {job_id} stopped (n0 stopped, n1 stopped)" in res.stderr
    assert [state(h, c)["ExitCode"] for h, c in (("a", n0), ("b", n1))] == [143, 143]
    m0, m1 = marker("a", n0), marker("b", n1)
    assert (m0["outcome"], m0["exit_status"], m1["outcome"], m1["exit_status"]) == (
        "stopped",
        143,
        "stopped",
        143,
    )
    # torchrun's own code, kept: 1 (its SignalException), or 143 when a second SIGTERM
    # (the supervisor's teardown and docker stop's) ended it inside its handler
    assert {m0["torchrun_exit"], m1["torchrun_exit"]} <= {1, 143}
    # one of them recorded its stop first; the other names it as the cause it also saw
    first, second = (m0, m1) if m1["cause"] else (m1, m0)
    assert first["cause"] is None
    assert second["cause"] == {
        "node": first["node"],
        "exit_code": first["torchrun_exit"],
        "kind": "stopped",
    }
    for (host, name), m in ((("a", n0), m0), (("b", n1), m1)):
        assert (
            f"stopped by SIGTERM (torchrun exited {m['torchrun_exit']}; exit status 143)"
            in logs(host, name)
        )
    ps = cli.run("ps", "--json", profile=own_profile(cli))
    job = next(j for j in json.loads(ps.stdout) if j["id"] == job_id)
    assert (job["state"], job["exit_code"]) == ("stopped", 143)
    assert [(n["state"], n["exit_code"]) for n in job["nodes"]] == [("stopped", 143)] * 2
