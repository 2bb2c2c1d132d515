"""Job lifecycle over real sshd + dockerd + torchrun: an interrupted launch, a stop in the first
second, ``rm --force`` of a running job, and bad stop/logs flags.

The interrupted launch is real: a real ``gpuconsole submit`` process is SIGKILLed between
creating its containers and starting them. To land the kill there every time, the submit
runs the CLI's own ``main`` with ``Engine.start`` replaced by a wait that first writes a marker
file (``_BLOCKED_SUBMIT``, test-side only); the launch calls ``start`` only after every
``create`` returned, so the marker means: all containers created, none started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import yaml

from tests.integration.conftest import CLI, REPO, job_containers, wait_for

_BLOCKED_SUBMIT = """
import asyncio, os, pathlib, sys
import remote.docker

marker = pathlib.Path(os.environ["GPUCONSOLE_TEST_MARKER"])

async def start_blocked(self, container_id):
    marker.write_text(container_id)
    await asyncio.Event().wait()  # never returns: the test kills this process here

remote.docker.Engine.start = start_blocked
from console.cli import main
sys.argv = ["gpuconsole", *sys.argv[1:]]
main()
"""


def ps_json(cli: CLI, *args: str) -> list[dict[str, Any]]:
    res = cli.run("ps", "--json", *args)
    assert res.returncode == 0, res.stderr
    return list(json.loads(res.stdout))


def the_job(cli: CLI, job_id: str, *args: str) -> dict[str, Any]:
    jobs = [j for j in ps_json(cli, *args) if j["id"] == job_id]
    assert len(jobs) == 1, jobs
    return jobs[0]


def submit_killed_between_create_and_start(cli: CLI, spec: Path) -> str:
    """Run a real submit, SIGKILL it once every container is created and none started;
    returns the job id (from the containers' labels)."""
    marker = cli.tmp / "start-called"
    env = cli.env()
    env["GPUCONSOLE_TEST_MARKER"] = str(marker)
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED_SUBMIT, "-p", str(cli.profile), "submit", str(spec)],
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(marker.exists, timeout=180)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return str(yaml.safe_load(spec.read_text())["name"])


def test_interrupted_launch_is_failed_then_stopped_removed_and_resubmitted(
    cli: CLI, engine: docker.DockerClient
) -> None:
    spec = cli.spec(
        "halfmade", nodes=["a", "b"], args=["--steps", "2", "--out", "/out", "--workers", "0"]
    )
    name = submit_killed_between_create_and_start(cli, spec)
    cs = job_containers(engine, job_name=name)
    assert sorted((c.labels["io.gpuconsole.node-rank"], c.status) for c in cs) == [
        ("0", "created"),
        ("1", "created"),
    ]
    job_id = cs[0].labels["io.gpuconsole.job-id"]

    job = the_job(cli, job_id)
    assert job["state"] == "failed"
    assert job["exit_code"] is None
    assert [(n["node_rank"], n["state"]) for n in job["nodes"]] == [(0, "created"), (1, "created")]
    assert job["failure"]["reason"] == (
        "launch interrupted: containers created but never started on a (n0), b (n1)"
    )
    assert f"gpuconsole rm {job_id}" in job["failure"]["fix"]
    table = cli.run("ps").stdout
    row = next(ln for ln in table.splitlines() if ln.startswith(job_id))
    assert row.split()[1:3] == ["train", "failed"]
    assert "n0@a:created n1@b:created" in row
    assert "launch interrupted: containers created but never started" in row

    # the name is refused while those containers exist, saying why and what to do
    again = cli.run("submit", str(spec))
    assert again.returncode == 1
    assert "created but never started" in again.stderr
    assert f"gpuconsole rm {job_id}" in again.stderr

    stop = cli.run("stop", job_id, "--grace", "60")
    assert stop.returncode == 0, stop.stderr
    assert f"job {job_id} stopped" in stop.stderr
    assert job_containers(engine, job_id=job_id) == []
    job = the_job(cli, job_id)
    assert job["state"] == "stopped"
    assert [n["state"] for n in job["nodes"]] == ["stopped", "stopped"]
    assert job["failure"]["reason"].startswith("launch interrupted")
    assert cli.run("stop", job_id).stderr.strip() == f"job {job_id} is not running (stopped)"

    rm = cli.run("rm", job_id)
    assert rm.returncode == 0, rm.stderr
    assert the_job(cli, job_id, "--all")["state"] == "removed"

    res = cli.run("submit", str(spec), "--follow")
    assert res.returncode == 0, res.stdout + res.stderr
    new_id = next(j["id"] for j in ps_json(cli) if j["name"] == name)
    assert new_id != job_id
    assert the_job(cli, new_id)["state"] == "succeeded"


def test_interrupted_launch_rm_without_force(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("halfrm", args=["--steps", "1", "--out", "/out", "--workers", "0"])
    name = submit_killed_between_create_and_start(cli, spec)
    (c,) = job_containers(engine, job_name=name)
    job_id = c.labels["io.gpuconsole.job-id"]
    rm = cli.run("rm", job_id)  # nothing runs: no --force needed
    assert rm.returncode == 0, rm.stderr
    assert job_containers(engine, job_id=job_id) == []
    job = the_job(cli, job_id, "--all")
    assert job["state"] == "removed"
    assert job["final_state"] == "failed"
    assert job["failure"]["reason"] == (
        "launch interrupted: containers created but never started on a (n0)"
    )
    res = cli.run("submit", str(spec), "--follow")
    assert res.returncode == 0, res.stdout + res.stderr


def test_stop_right_after_submit_takes_seconds_not_the_grace(
    cli: CLI, engine: docker.DockerClient
) -> None:
    spec = cli.spec(
        "quickstop",
        args=["--steps", "1000", "--out", "/out", "--workers", "0", "--step-sleep", "0.2"],
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    t0 = time.monotonic()
    stop = cli.run("stop", job_id, "--grace", "60")
    took = time.monotonic() - t0
    assert stop.returncode == 0, stop.stderr
    assert took < 10, f"stop took {took:.1f} s of a 60 s grace"
    (c,) = job_containers(engine, job_id=job_id)
    c.reload()
    assert c.attrs["HostConfig"]["Init"] is True
    assert c.status == "exited"
    # SIGTERM reached torchrun: it was not SIGKILLed at the end of the grace period
    assert c.attrs["State"]["ExitCode"] != 137
    assert stop.stderr.count("stopped by the user (SIGTERM)") == 1, stop.stderr
    job = the_job(cli, job_id)
    assert job["state"] == "stopped"
    assert job["failure"] is None
    assert job["summary"] == "stopped by the user (SIGTERM)"
    row = next(ln for ln in cli.run("ps").stdout.splitlines() if ln.startswith(job_id))
    assert row.split()[1:3] == ["train", "stopped"]
    assert row.endswith("stopped by the user (SIGTERM)")
    assert "SignalException" not in cli.run("describe", job_id).stdout


def test_rm_force_of_a_running_job_and_bad_flags(
    cli: CLI, engine: docker.DockerClient, tmp_path: Path
) -> None:
    spec = cli.spec(
        "rmforce",
        args=["--steps", "1000", "--out", "/out", "--workers", "0", "--step-sleep", "0.2"],
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    wait_for(lambda: "step 1/1000" in cli.run("logs", job_id).stdout, timeout=90)

    for bad in ("inf", "nan", "-1"):
        res = cli.run("stop", job_id, "--grace", bad)
        # click's usage error: it names the flag and the range a value must be in
        assert res.returncode == 2, (bad, res.stderr)
        assert "Invalid value for '--grace'" in res.stderr, res.stderr
        assert "0<=x<=3600" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    logs9 = cli.run("logs", job_id, "--node", "9")
    assert logs9.returncode == 2
    assert logs9.stderr.startswith(f"error: --node 9: job {job_id} has no node 9")

    # a profile whose stop_grace is not finite is refused, naming the file and the field
    bad_profile = yaml.safe_load(cli.profile.read_text())
    bad_profile.setdefault("defaults", {})["stop_grace"] = float("inf")
    bad_path = tmp_path / "bad-grace.yaml"
    bad_path.write_text(yaml.safe_dump(bad_profile))
    res = cli.run("stop", job_id, profile=bad_path)
    assert res.returncode == 2, res.stderr
    assert str(bad_path) in res.stderr and "stop_grace" in res.stderr
    assert the_job(cli, job_id)["state"] == "running"  # nothing was stopped by any of it

    rm = cli.run("rm", "--force", job_id)
    assert rm.returncode == 0, rm.stderr
    assert job_containers(engine, job_id=job_id) == []
    assert job_id not in {j["id"] for j in ps_json(cli)}
    job = the_job(cli, job_id, "--all")
    assert job["state"] == "removed"
    assert job["final_state"] == "stopped"
    assert [n["state"] for n in job["nodes"]] == ["stopped"]
    row = next(ln for ln in cli.run("ps", "-a").stdout.splitlines() if ln.startswith(job_id))
    assert row.split()[1:3] == ["train", "removed"]
    # its logs were archived before the container went
    assert "step 1/1000" in cli.run("logs", job_id).stdout
    assert os.path.exists(cli.state_dir / "logs" / job_id / "node0.log")


def test_a_stopped_job_reads_as_stopped_from_a_fresh_state_dir(cli: CLI) -> None:
    """``stop`` leaves no flag on the host: a console that lost its state (or a teammate's)
    reads the job back from the containers and their logs. A job ended by SIGTERM is stopped,
    one node or a gang, not failed."""
    one = cli.spec("stopone", args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out"])
    two = cli.spec(
        "stoptwo",
        nodes=["a", "b"],
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    ids = []
    for spec in (one, two):
        res = cli.run("submit", str(spec))
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.strip())
    for job_id in ids:
        wait_for(lambda j=job_id: "step 2/400" in cli.run("logs", j).stdout, timeout=120)
        assert cli.run("stop", job_id, "--grace", "10").returncode == 0
    fresh = CLI(cli.profile, cli.tmp / "fresh-state", cli.tmp)
    for job_id, nodes in zip(ids, (1, 2)):
        job = the_job(fresh, job_id)
        assert (job["state"], job["exit_code"]) == ("stopped", 143), job
        assert [n["state"] for n in job["nodes"]] == ["stopped"] * nodes
        assert not job.get("failure"), job["failure"]
        # and again, from the record the first look kept
        job = the_job(fresh, job_id)
        assert (job["state"], job["exit_code"]) == ("stopped", 143), job
        assert cli.run("rm", job_id).returncode == 0
