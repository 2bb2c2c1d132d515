"""The Slurm backend end to end: ``gpuconsole`` with a Slurm profile on the real test cluster
of ``scripts/lib/ensure-slurm`` (Slurm 22.05, partition ``debug``, nodes ``node1`` and
``node2`` on this machine), its login host being test host ``a`` reached over SSH.

Jobs run the real ``scripts/examples/train_ddp.py`` (or a small script written here) under
srun + torchrun on the nodes' own Python (the cluster's venv with torch 2.13 CPU). Every
test gives the profile a job folder of its own (``slurm.job_dir`` under its tmp dir), so
``ps`` adopts only its own jobs, and cancels whatever it left in Slurm.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import CLI, EXAMPLES

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"
SLURM_ENV = Path("/var/tmp/gpuconsole-slurm/env")
SECRET_VAR = "GC_SLURM_TEST_SECRET"
#: A small job: prints the SHA-256 of $TOKEN (proves the secret arrived without showing
#: it), then sleeps SLEEP s between lines so a test can find it running.
SECRET_SCRIPT = """\
import hashlib, os, sys, time
rank = os.environ["RANK"]
print(f"token-sha256 {hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest()}", flush=True)
for i in range(int(sys.argv[1])):
    print(f"tick {i} rank {rank}", flush=True)
    time.sleep(1)
"""


def _slurm_env() -> dict[str, str]:
    env = dict(os.environ)
    for line in SLURM_ENV.read_text().splitlines():
        m = re.match(r"export (\w+)=(.*)$", line)
        if m:
            env[m.group(1)] = m.group(2).strip('"')
    return env


def slurm(*argv: str) -> str:
    """A Slurm client command on this machine (the cluster's controller); its stdout."""
    done = subprocess.run(
        argv, env=_slurm_env(), capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout + done.stderr


@pytest.fixture
def slurm_cli(tmp_path: Path, test_profile: Path) -> Iterator[CLI]:
    """A CLI whose profile is a Slurm profile: login host = the test profile's host ``a``."""
    if not SLURM_ENV.is_file():
        pytest.fail(f"{SLURM_ENV} missing: run scripts/lib/ensure-slurm (scripts/test does)")
    base = yaml.safe_load(test_profile.read_text())
    jobs = tmp_path / "jobs"
    profile = {
        "scheduler": "slurm",
        "known_hosts": base["known_hosts"],
        "hosts": {"a": base["hosts"]["a"]},
        "slurm": {
            "login_host": "a",
            "partition": "debug",
            "python": VENV_PYTHON,
            "time_limit": "10",
            "job_dir": str(jobs),
        },
        "defaults": {"env": {"TOKEN": f"${{{SECRET_VAR}}}", "PLAIN": "plain-value"}},
    }
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    os.environ[SECRET_VAR] = f"s3cret-{os.getpid()}-{time.time_ns()}"
    yield CLI(path, tmp_path / "state", tmp_path)
    for record in jobs.glob("*/job.json"):  # cancel what the test left in Slurm
        slurm("scancel", json.loads(record.read_text())["slurm_id"])


def spec(cli: CLI, name: str, *extra: str, **fields: Any) -> Path:
    data: dict[str, Any] = {
        "name": name,
        "nodes": 2,
        "gpus_per_node": 0,
        "nproc_per_node": 1,
        "workdir": str(EXAMPLES),
        "script": "train_ddp.py",
        "args": ["--steps", "6", "--workers", "0", "--out", str(cli.tmp / "out" / name), *extra],
    }
    data.update(fields)
    path = cli.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def secret_spec(cli: CLI, name: str, seconds: int) -> Path:
    wd = cli.tmp / "wd"
    wd.mkdir(exist_ok=True)
    (wd / "secret_job.py").write_text(SECRET_SCRIPT)
    return spec(cli, name, workdir=str(wd), script="secret_job.py", args=[str(seconds)])


def ps(cli: CLI) -> str:
    r = cli.run("ps", "--all")
    assert r.returncode == 0, r.stderr
    return r.stdout


def job_dir(cli: CLI, job_id: str) -> Path:
    return cli.tmp / "jobs" / job_id


def slurm_id(cli: CLI, job_id: str) -> str:
    return str(json.loads((job_dir(cli, job_id) / "job.json").read_text())["slurm_id"])


def wait_state(cli: CLI, job_id: str, state: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = ps(cli)
        row = next((ln for ln in out.splitlines() if ln.startswith(job_id)), "")
        if re.search(rf"\s{state}(?=\s|$)", row):
            return out
        assert time.monotonic() < deadline, f"{job_id} not {state}: {out}"
        time.sleep(1)


def test_dry_run_prints_the_sbatch_script_and_submits_nothing(slurm_cli: CLI) -> None:
    r = slurm_cli.run("submit", "--dry-run", str(spec(slurm_cli, "slurm-dry")))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    job_id = re.search(r"^#SBATCH --job-name=(slurm-dry-[0-9a-f]{6})$", r.stdout, re.M)
    assert job_id, r.stdout
    jid = job_id.group(1)
    for want in (
        f"#SBATCH --comment=gpuconsole:{jid}",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=10",
        "#SBATCH --partition=debug",
        f"#SBATCH --output={job_dir(slurm_cli, jid)}/batch.out",
    ):
        assert want in lines, (want, r.stdout)
    assert not any(ln.startswith("#SBATCH --gpus-per-node") for ln in lines)  # CPU job
    text = r.stdout
    assert "srun --kill-on-bad-exit=1" in text
    assert f"{VENV_PYTHON} -m torch.distributed.run" in text
    assert "--rdzv-backend c10d" in text and '"$addr:$port"' in text
    assert "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'" in text
    assert "PLAIN TOKEN (secret)" in text  # names only
    assert os.environ[SECRET_VAR] not in text and "plain-value" not in text
    assert not job_dir(slurm_cli, jid).exists()
    assert jid not in slurm("squeue", "-h", "-o", "%j")


def test_two_nodes_follow_tags_both_ranks_and_keeps_the_secret_off_the_record(
    slurm_cli: CLI,
) -> None:
    t0 = time.monotonic()
    r = slurm_cli.run("submit", "--follow", str(secret_spec(slurm_cli, "slurm-ok", 2)))
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    tags = set(re.findall(r"^\[(n[01] r[01])\] tick 1 rank ([01])$", r.stdout, re.M))
    # each node ran one worker; torchrun's rendezvous picks which rank each node gets
    assert {t[0][:2] for t in tags} == {"n0", "n1"} and {t[1] for t in tags} == {"0", "1"}, r.stdout
    assert all(t[0][-1] == t[1] for t in tags), tags  # the tag's rank is the worker's RANK
    digest = hashlib.sha256(os.environ[SECRET_VAR].encode()).hexdigest()
    assert len(re.findall(rf"token-sha256 {digest}$", r.stdout, re.M)) == 2, r.stdout
    job_id = re.search(r"submitted (slurm-ok-[0-9a-f]{6})", r.stderr).group(1)  # type: ignore[union-attr]
    assert f"job {job_id} succeeded" in r.stderr
    d = job_dir(slurm_cli, job_id)
    assert os.environ[SECRET_VAR] not in (d / "job.sbatch").read_text()
    assert os.environ[SECRET_VAR] not in (d / "job.json").read_text()
    assert (d / "env").stat().st_mode & 0o777 == 0o600
    sid = slurm_id(slurm_cli, job_id)
    shown = slurm("scontrol", "show", "job", "-d", sid)
    assert f"JobName={job_id}" in shown and os.environ[SECRET_VAR] not in shown
    # the logs again, read from the archive and the files (nothing repeated)
    logs = slurm_cli.run("logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert len(re.findall(r"token-sha256", logs.stdout)) == 2, logs.stdout
    print(f"two-node job submitted, followed and ended in {took:.1f} s")


def test_a_failing_rank_is_diagnosed_with_slurms_cancellation_as_a_consequence(
    slurm_cli: CLI,
) -> None:
    r = slurm_cli.run(
        "submit",
        "--follow",
        str(spec(slurm_cli, "slurm-fail", "--fail-rank", "1", "--fail-step", "3")),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    job_id = re.search(r"submitted (slurm-fail-[0-9a-f]{6})", r.stderr).group(1)  # type: ignore[union-attr]
    out = wait_state(slurm_cli, job_id, r"failed\(\d+\)")
    row = next(ln for ln in out.splitlines() if ln.startswith(job_id))
    assert "rank 1" in row and "RuntimeError: injected failure on rank 1 at step 3" in row
    assert re.search(r"n\d@node\d:stopped", row) and re.search(r"n\d@node\d:failed\(1\)", row)
    d = slurm_cli.run("describe", job_id)
    assert d.returncode == 0, d.stderr
    assert re.search(
        r"first failure: node \d on node\d rank 1, exit code 1: .*injected "
        r"failure",
        d.stdout,
    ), d.stdout
    # slurmstepd's `*** STEP ... CANCELLED ***` line, or only srun's `_step_signal:
    # Terminating StepId=...` when the other node's torchrun exited first (a race)
    assert re.search(
        r"then: slurm_cancelled: Slurm step \d+\.0 (on node\d )?was cancelled", d.stdout
    ), d.stdout
    # rm forgets the job's folder on the login host; its logs stay in the archive
    folder = job_dir(slurm_cli, job_id)
    assert folder.is_dir()
    rm = slurm_cli.run("rm", job_id)
    assert rm.returncode == 0, rm.stderr
    assert not folder.exists()
    logs = slurm_cli.run("logs", job_id)
    assert "injected failure on rank 1" in logs.stdout


def test_stop_cancels_and_ps_recovers_the_job_from_slurm(slurm_cli: CLI) -> None:
    r = slurm_cli.run("submit", str(secret_spec(slurm_cli, "slurm-stop", 300)))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    wait_state(slurm_cli, job_id, "running")
    deadline = time.monotonic() + 60  # the workers are up once they printed
    while "tick 1" not in slurm_cli.run("logs", job_id).stdout:
        assert time.monotonic() < deadline
        time.sleep(1)
    secret = os.environ[SECRET_VAR]
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "secret_job.py" in args and secret not in args  # running, secret off every argv
    sid = slurm_id(slurm_cli, job_id)
    assert secret not in slurm("scontrol", "show", "job", "-d", sid)
    s = slurm_cli.run("stop", "--grace", "5", job_id)
    assert s.returncode == 0, s.stderr
    out = wait_state(slurm_cli, job_id, "stopped", timeout=60)
    assert sid not in slurm("squeue", "-h", "-o", "%i").split()
    # a new state dir: ps adopts the job from its folder and asks Slurm how it ended
    shutil.rmtree(slurm_cli.state_dir)
    out = wait_state(slurm_cli, job_id, "stopped", timeout=30)
    assert re.search(
        rf"^{job_id}\s+train\s+stopped\s+n0@node\d:stopped n1@node\d:stopped", out, re.M
    ), out


def test_a_partition_that_does_not_exist_is_one_line_and_leaves_nothing(slurm_cli: CLI) -> None:
    prof = yaml.safe_load(slurm_cli.profile.read_text())
    prof["slurm"]["partition"] = "no-such-partition"
    bad = slurm_cli.tmp / "bad-partition.yaml"
    bad.write_text(yaml.safe_dump(prof))
    r = slurm_cli.run("submit", str(spec(slurm_cli, "slurm-badpart")), profile=bad)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("  fix: "), r.stderr
    assert lines[0].startswith("error: sbatch on a refuses the job: ")
    assert "invalid partition specified: no-such-partition" in lines[0]
    assert not (slurm_cli.tmp / "jobs").exists()
    assert "slurm-badpart" not in slurm("squeue", "-h", "-o", "%j")


def test_a_python_without_torch_is_one_line_and_leaves_nothing(slurm_cli: CLI) -> None:
    r = slurm_cli.run("submit", str(spec(slurm_cli, "slurm-notorch", python="/usr/bin/python3")))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == (
        "error: login host a: /usr/bin/python3 cannot import torch "
        "(ModuleNotFoundError: No module named 'torch')"
    ), r.stderr
    assert lines[1].startswith("  fix: set `python:` in the spec") and len(lines) == 2
    assert not (slurm_cli.tmp / "jobs").exists()
    assert "slurm-notorch" not in slurm("squeue", "-h", "-o", "%j")


def test_a_login_host_without_sbatch_is_one_line_and_leaves_nothing(slurm_cli: CLI) -> None:
    """The login host is this machine (``transport: local``) with a PATH that holds no Slurm
    commands: the real lookup fails, nothing is created."""
    prof = yaml.safe_load(slurm_cli.profile.read_text())
    prof["hosts"] = {"here": {"transport": "local"}}
    prof["slurm"]["login_host"] = "here"
    path = slurm_cli.tmp / "no-sbatch.yaml"
    path.write_text(yaml.safe_dump(prof))
    empty = slurm_cli.tmp / "bin"
    empty.mkdir()
    env = {**slurm_cli.env(), "PATH": str(empty)}
    r = subprocess.run(
        slurm_cli.argv("submit", str(spec(slurm_cli, "slurm-nosbatch")), profile=path),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "error: login host here: sbatch does not run (sbatch: command not found)",
        "  fix: point slurm.login_host at a host with the Slurm client commands (sbatch, "
        "squeue, scancel) on its PATH",
    ], r.stderr
    assert not (slurm_cli.tmp / "jobs").exists()


def test_a_submission_interrupted_after_sbatch_is_cancelled_and_removed(
    slurm_cli: CLI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C while sbatch's answer is on its way (the job is queued, gpuconsole has no record
    of it yet): the job is cancelled by its unique name and its folder removed, as a Docker
    launch interrupted removes its containers."""
    import asyncio

    from console.jobs.store import Store
    from console.profiles import load_profile_file
    from console.service import Service
    from remote.ssh import SSHTransport

    real_run = SSHTransport.run

    async def interrupted_after_sbatch(
        self: SSHTransport, argv: list[str], *a: Any, **k: Any
    ) -> Any:
        done = await real_run(self, argv, *a, **k)
        if argv[:1] == ["sbatch"] and "--test-only" not in argv:
            raise asyncio.CancelledError  # what Ctrl-C raises in the submitting task
        return done

    async def scenario() -> str:
        svc = Service(load_profile_file(slurm_cli.profile), store=Store(slurm_cli.tmp / "st"))
        try:
            planned = await svc.plan(secret_spec(slurm_cli, "slurm-ctrlc", 60))
            monkeypatch.setattr(SSHTransport, "run", interrupted_after_sbatch)
            with pytest.raises(asyncio.CancelledError):
                await svc.submit(planned)
            assert planned.slurm is not None
            return planned.slurm.job_id
        finally:
            monkeypatch.setattr(SSHTransport, "run", real_run)
            await svc.close()

    with caplog.at_level("WARNING", logger="gpuconsole"):
        job_id = asyncio.run(scenario())
    assert (
        f"submission of {job_id} did not complete: its Slurm job was cancelled" in caplog.text
    )  # scancel --name found it (the job ran, or would have, otherwise)
    assert not job_dir(slurm_cli, job_id).exists()
    deadline = time.monotonic() + 30
    while job_id in slurm("squeue", "-h", "-o", "%j"):  # cancelled: leaves the queue
        assert time.monotonic() < deadline, slurm("squeue")
        time.sleep(1)
    assert "slurm-ctrlc" not in ps(slurm_cli)
