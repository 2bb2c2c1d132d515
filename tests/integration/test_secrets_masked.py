"""Secrets are never printed or logged, whatever their source (a spec's ``${VAR}``, the
profile's ``defaults.env``) and whatever renders the run line (dry run, ``-v`` debug logs,
``submit``, ``describe`` with the job's record or from a fresh state dir that adopted it from
the hosts, ``ps``, ``stop``), for Docker and ``runtime: host`` nodes, on the real test hosts."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.integration.conftest import CLI, job_containers

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"  # has torch (scripts/test makes it)


def _profile_with_env(cli: CLI, test_profile: Path) -> Path:
    data = yaml.safe_load(test_profile.read_text())
    data.setdefault("defaults", {})["env"] = {
        "PROFILE_KEY": "${GC_T_PROFILE_SECRET}",
        "PLAIN_P": "visible-p",
    }
    path = cli.tmp / "secret-profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


class Outputs:
    """Every stdout and stderr of the test's commands, to search for the secrets at once."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def add(self, what: str, res: subprocess.CompletedProcess[str]) -> str:
        self.seen.append((what, res.stdout + res.stderr))
        assert res.returncode == 0, f"{what}: {res.stdout}{res.stderr}"
        return res.stdout

    def check(self, *secrets: str) -> None:
        for what, text in self.seen:
            for s in secrets:
                assert s not in text, f"{what} printed a secret:\n{text}"


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    spec_secret = "spec-s3cret-" + uuid.uuid4().hex[:8]
    profile_secret = "prof-s3cret-" + uuid.uuid4().hex[:8]
    monkeypatch.setenv("GC_T_SPEC_SECRET", spec_secret)
    monkeypatch.setenv("GC_T_PROFILE_SECRET", profile_secret)
    return spec_secret, profile_secret


def _describe_masked(out: str, job_id: str, *, docker_run: bool) -> None:
    assert f"job {job_id}" in out
    assert ("docker run -d" in out) is docker_run, out
    assert "RUN_TOKEN=***" in out and "PROFILE_KEY=***" in out, out
    assert "PLAIN_S=visible-s" in out and "PLAIN_P=visible-p" in out, out  # literal: shown


def test_docker_job_secrets_masked_everywhere(
    cli: CLI, test_profile: Path, engine: docker.DockerClient, secrets: tuple[str, str]
) -> None:
    spec_secret, profile_secret = secrets
    profile = _profile_with_env(cli, test_profile)
    name = f"sec-{uuid.uuid4().hex[:6]}"
    spec = cli.spec(
        name,
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
        env={"RUN_TOKEN": "${GC_T_SPEC_SECRET}", "PLAIN_S": "visible-s"},
    )
    outs = Outputs()
    dry = outs.add(
        "submit --dry-run -v", cli.run("-v", "submit", "--dry-run", str(spec), profile=profile)
    )
    assert "RUN_TOKEN=***" in dry and "PROFILE_KEY=***" in dry, dry
    job_id = outs.add("submit -v", cli.run("-v", "submit", str(spec), profile=profile)).strip()
    try:
        # the secrets did reach the container (so the masking below hides real values)
        [c] = job_containers(engine, job_id=job_id)
        env = c.attrs["Config"]["Env"]
        assert f"RUN_TOKEN={spec_secret}" in env and f"PROFILE_KEY={profile_secret}" in env
        assert c.labels["io.gpuconsole.secret-env"] == "PROFILE_KEY,RUN_TOKEN"

        _describe_masked(
            outs.add("describe", cli.run("describe", job_id, profile=profile)),
            job_id,
            docker_run=True,
        )
        outs.add("ps --json", cli.run("ps", "--json", profile=profile))
        # a fresh state dir, and a profile without the defaults.env: what is on the host says
        # which values are secret
        fresh = CLI(test_profile, cli.tmp / "fresh-state", cli.tmp)
        outs.add("ps (fresh)", fresh.run("ps"))
        _describe_masked(
            outs.add("describe (fresh)", fresh.run("-v", "describe", job_id)),
            job_id,
            docker_run=True,
        )
        outs.add("stop (fresh)", fresh.run("-v", "stop", job_id, "--grace", "1"))
    finally:
        cli.run("stop", job_id, "--grace", "1", profile=profile)
    outs.add("describe (stopped)", cli.run("describe", job_id, profile=profile))
    outs.check(spec_secret, profile_secret)
    for s in secrets:
        assert _files_holding(cli.tmp, s.encode()) == []


@pytest.mark.skipif(not os.access(VENV_PYTHON, os.X_OK), reason=f"{VENV_PYTHON} missing")
def test_host_runtime_job_secrets_masked_everywhere(
    cli: CLI, test_profile: Path, secrets: tuple[str, str]
) -> None:
    spec_secret, profile_secret = secrets
    profile = _profile_with_env(cli, test_profile)
    name = f"hsec-{uuid.uuid4().hex[:6]}"
    data: dict[str, Any] = {
        "name": name,
        "runtime": "host",
        "python": VENV_PYTHON,
        "nodes": ["a", "b"],
        "gpus_per_node": 0,
        "nproc_per_node": 1,
        "workdir": str(Path(__file__).parents[2] / "scripts" / "examples"),
        "script": "train_ddp.py",
        "args": [
            "--steps",
            "400",
            "--step-sleep",
            "0.2",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "0",
        ],
        "env": {"RUN_TOKEN": "${GC_T_SPEC_SECRET}", "PLAIN_S": "visible-s"},
    }
    spec = cli.tmp / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    outs = Outputs()
    dry = outs.add(
        "submit --dry-run -v", cli.run("-v", "submit", "--dry-run", str(spec), profile=profile)
    )
    assert "RUN_TOKEN=***" in dry and "PROFILE_KEY=***" in dry, dry
    job_id = outs.add("submit -v", cli.run("-v", "submit", str(spec), profile=profile)).strip()
    try:
        _describe_masked(
            outs.add("describe", cli.run("describe", job_id, profile=profile)),
            job_id,
            docker_run=False,
        )
        fresh = CLI(test_profile, cli.tmp / "fresh-state", cli.tmp)
        outs.add("ps (fresh)", fresh.run("ps"))
        _describe_masked(
            outs.add("describe (fresh)", fresh.run("-v", "describe", job_id)),
            job_id,
            docker_run=False,
        )
        outs.add("stop (fresh)", fresh.run("-v", "stop", job_id, "--grace", "5"))
    finally:
        cli.run("stop", job_id, "--grace", "5", profile=profile)
        cli.run("rm", "--force", job_id, profile=profile)
    outs.check(spec_secret, profile_secret)
    for s in secrets:
        assert _files_holding(cli.tmp, s.encode()) == []


def test_an_escaped_reference_reaches_the_container_as_text(
    cli: CLI, test_profile: Path, engine: docker.DockerClient, secrets: tuple[str, str]
) -> None:
    """``$${X}`` is the text ``${X}`` (as Docker Compose reads it): the container gets it
    verbatim, not the variable's value, and it is no secret (shown as it is)."""
    spec_secret, _ = secrets
    name = f"lit-{uuid.uuid4().hex[:6]}"
    spec = cli.spec(
        name,
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
        env={"LITERAL": "$${GC_T_SPEC_SECRET}", "PRICE": "$$5", "TOKEN": "${GC_T_SPEC_SECRET}"},
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = res.stdout.strip()
    try:
        [c] = job_containers(engine, job_id=job_id)
        env = c.attrs["Config"]["Env"]
        assert "LITERAL=${GC_T_SPEC_SECRET}" in env and "PRICE=$5" in env
        assert f"TOKEN={spec_secret}" in env
        assert c.labels["io.gpuconsole.secret-env"] == "TOKEN"
        out = cli.run("describe", job_id)
        assert out.returncode == 0, out.stderr
        assert "LITERAL='${GC_T_SPEC_SECRET}'" in out.stdout or (
            "LITERAL=${GC_T_SPEC_SECRET}" in out.stdout
        ), out.stdout
        assert "TOKEN=***" in out.stdout and spec_secret not in out.stdout
    finally:
        cli.run("stop", job_id, "--grace", "1")
