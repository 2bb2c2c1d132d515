"""Hostile input caught at plan time on the real test hosts, before anything is made there:
mount targets as Docker compares them, workdirs that cannot be synced."""

from __future__ import annotations

import subprocess

import docker
import pytest
import yaml

from tests.integration.conftest import CLI, job_containers


def assert_error(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1, res.stderr
    for n in needles:
        assert n in err[0], (n, err[0])
    assert "  fix: " in res.stderr
    return err[0]


@pytest.mark.parametrize("target", ["//workspace", "/workspace/.", "/workspace/../workspace",
                                    "/opt/gpuconsole-gang"])
def test_a_reserved_mount_target_fails_the_dry_run_not_the_create(
        cli: CLI, engine: docker.DockerClient, target: str) -> None:
    spec = cli.spec("mountres", mounts=[f"/tmp:{target}"])
    for extra in (["--dry-run"], []):
        res = cli.run("submit", str(spec), *extra)
        assert_error(res, 2, f"{spec}:", "mounts[0]", "where gpuconsole mounts")
    assert job_containers(engine, job_name="mountres") == []


def test_a_spec_mount_at_the_profiles_mount_point_is_refused(
        cli: CLI, engine: docker.DockerClient) -> None:
    data = yaml.safe_load(cli.profile.read_text())
    data["defaults"]["mounts"] = ["/tmp:/data"]
    prof = cli.tmp / "mounts.yaml"
    prof.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = cli.spec("mountdup", mounts=["/var/tmp://data/."])
    res = cli.run("submit", str(spec), profile=prof)
    assert_error(res, 2, f"{spec}:", "mounts[0]", "the container path /data is already "
                 "mounted by defaults.mounts[0] '/tmp:/data'")
    assert job_containers(engine, job_name="mountdup") == []
