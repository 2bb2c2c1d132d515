"""Two consoles (two state dirs) submitting one job name at the same moment: exactly one
launches, the other exits 1 with JobNameInUse and its fix, whichever side of the claim it
lost on; and the same over ``runtime: host``. Real sshd hosts a and b, real dockerd."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.integration.conftest import CLI, EXAMPLES, job_containers

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"  # has torch (scripts/test makes it)
ROUNDS = 3
#: The hosts' claims folder (hosts a and b are this machine, user root).
CLAIMS = Path.home() / ".cache" / "gpuconsole" / "claims"


def _claim_files(name: str) -> list[Path]:
    return sorted(CLAIMS.glob(f"*/name-{name}.lock"))


def _race(first: CLI, second: CLI, spec: Path) -> tuple[str, list[str]]:
    """Start both submits at once; the job id of the one that launched and the other's
    stderr lines."""
    procs = [c.popen("submit", str(spec)) for c in (first, second)]
    done = [(p, *p.communicate(timeout=300)) for p in procs]
    won = [(p, out, err) for p, out, err in done if p.returncode == 0]
    lost = [(p, out, err) for p, out, err in done if p.returncode != 0]
    assert len(won) == 1 and len(lost) == 1, [(p.returncode, out, err) for p, out, err in done]
    ((p, out, err),) = lost
    assert p.returncode == 1 and out == "", (p.returncode, out, err)
    return won[0][1].strip(), err.splitlines()


def _check_loser(name: str, lines: list[str]) -> None:
    assert len(lines) == 2, lines
    head = f"error: a job named {name!r} "
    assert lines[0].startswith(head), lines
    assert any(
        w in lines[0]
        for w in (
            "is being launched right now",
            "is already running",
            "has containers created but never started",
        )
    ), lines
    assert lines[1].startswith("  fix: ") and "another name (--name)" in lines[1], lines


def test_two_consoles_submitting_one_name_at_once_launch_it_once(
    cli: CLI, test_profile: Path, engine: docker.DockerClient
) -> None:
    other = CLI(test_profile, cli.tmp / "other-state", cli.tmp)
    for i in range(ROUNDS):
        name = f"race-{uuid.uuid4().hex[:6]}"
        spec = cli.spec(
            name,
            nodes=["a", "b"],
            nproc_per_node=1,
            args=["--steps", "100000", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
        )
        first, second = (cli, other) if i % 2 == 0 else (other, cli)
        job_id, lines = _race(first, second, spec)
        try:
            _check_loser(name, lines)
            cs = job_containers(engine, job_name=name)
            assert sorted(
                (c.labels["io.gpuconsole.job-id"], c.labels["io.gpuconsole.node-rank"]) for c in cs
            ) == [(job_id, "0"), (job_id, "1")]
        finally:
            for c in (cli, other):
                c.run("stop", job_id, "--grace", "1")
        # no claim is left behind: the name launches again at once once stopped
        assert _claim_files(name) == []
        res = cli.run("submit", str(spec))
        assert res.returncode == 0, res.stderr
        cli.run("stop", res.stdout.strip(), "--grace", "1")
        assert _claim_files(name) == []


@pytest.mark.skipif(not os.access(VENV_PYTHON, os.X_OK), reason=f"{VENV_PYTHON} missing")
def test_two_consoles_racing_on_the_host_runtime_launch_once(cli: CLI, test_profile: Path) -> None:
    other = CLI(test_profile, cli.tmp / "other-state", cli.tmp)
    name = f"hrace-{uuid.uuid4().hex[:6]}"
    data: dict[str, Any] = {
        "name": name,
        "runtime": "host",
        "python": VENV_PYTHON,
        "nodes": ["a", "b"],
        "gpus_per_node": 0,
        "nproc_per_node": 1,
        "workdir": str(EXAMPLES),
        "script": "train_ddp.py",
        "args": [
            "--steps",
            "100000",
            "--step-sleep",
            "0.2",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "0",
        ],
    }
    spec = cli.tmp / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    job_id, lines = _race(cli, other, spec)
    try:
        _check_loser(name, lines)
        assert _claim_files(name) == []
        for c in (cli, other):
            res = c.run("ps", "--json")
            assert res.returncode == 0, res.stderr
            assert [j["id"] for j in yaml.safe_load(res.stdout) if j["name"] == name] == [job_id]
    finally:
        for c in (cli, other):
            c.run("stop", job_id, "--grace", "5")
            subprocess.run(
                [*c.argv("rm", "--force", job_id)], env=c.env(), capture_output=True, timeout=120
            )
