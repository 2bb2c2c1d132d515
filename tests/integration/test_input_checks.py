"""Hostile input caught at plan time on the real test hosts, before anything is made there:
mount targets as Docker compares them, workdirs that cannot be synced."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from pathlib import Path

import docker
import pytest
import yaml

from remote.errors import TransportError
from remote.ssh import SSHTarget, SSHTransport
from remote.transport import workdir_digest
from tests.integration.conftest import CLI, EXAMPLES, job_containers

TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")


def assert_error(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1, res.stderr
    for n in needles:
        assert n in err[0], (n, err[0])
    assert "  fix: " in res.stderr
    return err[0]


@pytest.mark.parametrize(
    "target", ["//workspace", "/workspace/.", "/workspace/../workspace", "/opt/gpuconsole-gang"]
)
def test_a_reserved_mount_target_fails_the_dry_run_not_the_create(
    cli: CLI, engine: docker.DockerClient, target: str
) -> None:
    spec = cli.spec("mountres", mounts=[f"/tmp:{target}"])
    for extra in (["--dry-run"], []):
        res = cli.run("submit", str(spec), *extra)
        assert_error(res, 2, f"{spec}:", "mounts[0]", "where gpuconsole mounts")
    assert job_containers(engine, job_name="mountres") == []


def test_a_spec_mount_at_the_profiles_mount_point_is_refused(
    cli: CLI, engine: docker.DockerClient
) -> None:
    data = yaml.safe_load(cli.profile.read_text())
    data["defaults"]["mounts"] = ["/tmp:/data"]
    prof = cli.tmp / "mounts.yaml"
    prof.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = cli.spec("mountdup", mounts=["/var/tmp://data/."])
    res = cli.run("submit", str(spec), profile=prof)
    assert_error(
        res,
        2,
        f"{spec}:",
        "mounts[0]",
        "the container path /data is already mounted by defaults.mounts[0] '/tmp:/data'",
    )
    assert job_containers(engine, job_name="mountdup") == []


def _backslash_workdir(root: Path) -> Path:
    """A workdir (unique content, so its digest is this test's own) with a backslash name."""
    wd = root / "bw"
    (wd / "sub").mkdir(parents=True)
    (wd / "train_ddp.py").write_text(
        (EXAMPLES / "train_ddp.py").read_text() + f"# {secrets.token_hex(8)}\n"
    )
    (wd / "sub" / "a\\b.txt").write_text("x\n")
    return wd


def _workdirs_of(digest: str) -> list[str]:
    """Entries of host a's synced-workdir cache (the test hosts' home is this machine's
    /root) that belong to ``digest``: the synced copy or a staging folder of it."""
    res = subprocess.run(
        [
            "ssh",
            "-i",
            str(TESTHOSTS / "id_ed25519"),
            "-o",
            f"UserKnownHostsFile={TESTHOSTS / 'known_hosts'}",
            "-o",
            "BatchMode=yes",
            "root@127.0.0.11",
            "ls -a ~/.cache/gpuconsole/workdirs",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [n for n in res.stdout.split() if digest[:16] in n]


def test_a_backslash_in_a_workdir_name_is_refused_before_the_host(cli: CLI) -> None:
    wd = _backslash_workdir(cli.tmp)
    spec = cli.spec("bslash", workdir=str(wd))
    res = cli.run("submit", str(spec))
    assert_error(res, 2, f"{spec}:", "workdir", f"{wd / 'sub' / 'a'}\\b.txt", "backslash")
    assert "exclude: ['sub/a\\b.txt']" in res.stderr
    assert _workdirs_of(workdir_digest(wd)) == []
    # excluded as the fix says, it runs
    spec = cli.spec("bslash", workdir=str(wd), exclude=["sub/a\\b.txt"])
    res = cli.run("submit", str(spec), "--dry-run")
    assert res.returncode == 0, res.stderr


def test_a_failed_workdir_copy_leaves_no_staging_folder(cli: CLI) -> None:
    """The sync itself (not the plan's check) meets the name asyncssh refuses midway: the
    error names the file, and the half-made staging folder is removed from the host."""
    wd = _backslash_workdir(cli.tmp)
    digest = workdir_digest(wd)
    target = SSHTarget(
        "127.0.0.11",
        port=22,
        user="root",
        identity_file=str(TESTHOSTS / "id_ed25519"),
        known_hosts=str(TESTHOSTS / "known_hosts"),
    )

    async def sync() -> TransportError:
        t = SSHTransport("a", target)
        try:
            with pytest.raises(TransportError) as e:
                await t.sync_workdir(wd)
            return e.value
        finally:
            await t.close()

    err = asyncio.run(sync())
    assert "'sub/a\\\\b.txt': a backslash in a file name" in err.detail, err.detail
    assert err.hint is not None and "exclude" in err.hint
    assert _workdirs_of(digest) == []
