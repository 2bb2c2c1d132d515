"""A job whose host was taken out of its profile: ``ps`` says so once per listing (and does not
try to reach the host), ``rm`` refuses with the way out, ``rm --force`` forgets it when no host
of it is left in the profile, and refuses while one is (``ps`` would adopt it again there)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.errors import JobError, UsageError
from console.jobs.store import JobRecord, NodeRecord, Store
from console.profiles import HostConfig, Profile
from console.service import Service


def job(job_id: str, hosts: list[str]) -> JobRecord:
    return JobRecord(
        id=job_id,
        name=job_id.split("-")[0],
        profile="lab",
        profile_source=None,
        spec={},
        spec_hash="0" * 12,
        created_at=1.0,
        node_count=len(hosts),
        nodes=[
            NodeRecord(job_id, r, h, f"{job_id}-n{r}", f"{r:064x}", "running")
            for r, h in enumerate(hosts)
        ],
    )


def test_orphan_job_warned_refused_then_forgotten(tmp_path: Path) -> None:
    # host "a" answers nothing (no engine socket there): only the orphan's warning matters
    profile = Profile(
        name="lab",
        hosts={"a": HostConfig(transport="local", docker_socket=str(tmp_path / "no-engine.sock"))},
    )
    store = Store(tmp_path / "state")
    store.add_job(job("gone-000001", ["old-gpu"]))
    store.add_job(job("half-000002", ["a", "old-gpu"]))
    service = Service(profile, store=store)
    warned: list[str] = []

    async def scenario() -> None:
        jobs = await service.list_jobs(warn=warned.append)
        assert {j.id for j in jobs} == {"gone-000001", "half-000002"}
        orphan = next(j for j in jobs if j.id == "gone-000001")
        assert [n.state for n in orphan.nodes] == ["running"]  # last known, not guessed
        with pytest.raises(JobError) as refused:
            await service.remove(orphan)
        assert refused.value.message == (
            "job gone-000001 ran on host 'old-gpu', which is no longer in profile 'lab': its "
            "containers there cannot be stopped or removed"
        )
        assert "rm --force gone-000001" in (refused.value.hint or "")
        forgotten = await service.remove(orphan, force=True)
        assert forgotten.removed_at is not None
        half = next(j for j in jobs if j.id == "half-000002")
        with pytest.raises(JobError) as kept:
            await service.remove(half, force=True)
        assert "also has nodes on a" in (kept.value.hint or "")
        after = await service.list_jobs()
        assert [j.id for j in after] == ["half-000002"]
        await service.close()

    asyncio.run(scenario())
    about = [w for w in warned if "no longer in profile" in w]
    assert about == [
        "job gone-000001: host 'old-gpu' is no longer in profile 'lab', so its state there is "
        "unknown; add the host back, or `gpuconsole rm --force gone-000001` to forget the job",
        "job half-000002: host 'old-gpu' is no longer in profile 'lab', so its state there is "
        "unknown; add the host back, or `gpuconsole rm --force half-000002` to forget the job",
    ]
    assert not any("unknown host" in w for w in warned), warned


def test_exec_into_a_slurm_job_names_its_slurm_id_and_node(tmp_path: Path) -> None:
    profile = Profile.model_validate(
        {
            "name": "cluster",
            "scheduler": "slurm",
            "hosts": {"login": {"hostname": "login.example.org"}},
            "slurm": {"login_host": "login"},
        }
    )
    job = JobRecord(
        id="t-abc123",
        name="t",
        profile="cluster",
        profile_source=None,
        spec={},
        spec_hash="0" * 12,
        created_at=1.0,
        node_count=2,
        nodes=[
            NodeRecord("t-abc123", 0, "node1", "slurm-254-n0", "254", "running"),
            NodeRecord("t-abc123", 1, "(pending)", "slurm-254-n1", "254", "pending"),
        ],
    )
    service = Service(profile, store=Store(tmp_path))
    with pytest.raises(JobError) as on0:
        service.exec_target(job, None)
    assert on0.value.hint == "on the login host: `srun --overlap --jobid 254 -w node1 --pty bash`"
    with pytest.raises(JobError) as on1:
        service.exec_target(job, 1)
    assert on1.value.hint == "on the login host: `srun --overlap --jobid 254 --pty bash`"


def test_a_dev_shell_on_a_host_without_docker_says_so(tmp_path: Path) -> None:
    profile = Profile.model_validate(
        {
            "name": "lab",
            "hosts": {"a": {"hostname": "gpu1.example.org", "runtime": "host"}},
            "defaults": {"image": "img:1"},
        }
    )
    service = Service(profile, store=Store(tmp_path))

    async def scenario() -> None:
        with pytest.raises(UsageError) as e:
            await service.shell_on_host("a", ["bash"], tty=False)
        assert e.value.message == (
            "host a runs jobs without Docker (its profile says "
            "`runtime: host`): a dev container needs Docker"
        )
        assert (e.value.hint or "").startswith("`ssh gpu1.example.org`")
        await service.close()

    asyncio.run(scenario())
