"""The backend seam (console/backends): which backend a job gets, what each offers, and the
reasons and previews each gives without asking a host (real profiles, sessions and records;
nothing is connected)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from console.backends import backend_for
from console.backends.base import JobBackend
from console.backends.docker import DockerBackend
from console.backends.host import HostBackend
from console.backends.slurm import SlurmBackend
from console.errors import JobError, PlanError, UsageError
from console.jobs.store import JobRecord, NodeRecord, Store
from console.profiles import Profile
from console.service import Service
from console.session import Session

SSH = Profile.model_validate(
    {
        "name": "lab",
        "hosts": {
            "a": {"hostname": "gpu1.example.org", "port": 2222, "user": "me"},
            "b": {"hostname": "gpu2.example.org", "runtime": "host"},
        },
        "defaults": {"image": "img:1", "stop_grace": 12},
    }
)
SLURM = Profile.model_validate(
    {
        "name": "cluster",
        "scheduler": "slurm",
        "hosts": {"login": {"hostname": "login.example.org"}},
        "slurm": {"login_host": "login"},
    }
)


def record(runtime: str, states: list[str], ids: list[str | None]) -> JobRecord:
    spec = {"runtime": runtime} if runtime != "slurm" else {}
    return JobRecord(
        id="t-abc123",
        name="t",
        profile="lab",
        profile_source=None,
        spec=spec,
        spec_hash="0" * 12,
        created_at=1.0,
        node_count=len(states),
        nodes=[
            NodeRecord(
                "t-abc123",
                i,
                "a" if runtime != "host" else "b",
                f"gpuconsole-t-abc123-n{i}",
                cid,
                st,
            )
            for i, (st, cid) in enumerate(zip(states, ids))
        ],
    )


def test_backend_for_picks_the_runtime_of_the_profile_then_of_the_job(tmp_path: Path) -> None:
    store = Store(tmp_path)
    ssh, slurm = Session(SSH), Session(SLURM)
    assert type(backend_for(ssh, store)) is DockerBackend
    assert type(backend_for(ssh, store, "docker")) is DockerBackend
    assert type(backend_for(ssh, store, "host")) is HostBackend
    # a Slurm profile's jobs are Slurm's whatever their runtime (the nodes run the script)
    assert type(backend_for(slurm, store, "host")) is SlurmBackend
    assert type(backend_for(slurm, store, "docker")) is SlurmBackend
    assert [
        b.name
        for b in (
            backend_for(ssh, store),
            backend_for(ssh, store, "host"),
            backend_for(slurm, store),
        )
    ] == ["docker", "host", "slurm"]
    # where a JOB not in the store is looked for, as locate_job's error names it
    assert backend_for(ssh, store).places() == "its hosts (a, b)"
    assert backend_for(slurm, store).places() == "its login host"


def test_each_backend_implements_every_method_of_the_protocol() -> None:
    wanted = {
        n for n, v in vars(JobBackend).items() if not n.startswith("_") and inspect.isfunction(v)
    }
    assert {
        "plan",
        "submit",
        "refresh",
        "reconcile",
        "stop",
        "remove",
        "read_logs",
        "follow",
        "exec_target",
        "attach_exec",
        "copy",
        "refusal",
    } <= wanted
    for cls in (DockerBackend, HostBackend, SlurmBackend):
        missing = sorted(n for n in wanted if inspect.isfunction(getattr(cls, n, None)) is False)
        assert missing == [], (cls.__name__, missing)
        for n in wanted:  # same parameters, so the service can call any of them alike
            want = list(inspect.signature(getattr(JobBackend, n)).parameters)
            assert list(inspect.signature(getattr(cls, n)).parameters) == want, (cls, n)


def test_capabilities_say_what_each_runtime_offers() -> None:
    offered = {
        cls.name: [
            a for a in ("exec", "cp", "notebook", "shell", "stacks") if cls.capabilities.offers(a)
        ]  # type: ignore[arg-type]
        for cls in (DockerBackend, HostBackend, SlurmBackend)
    }
    assert offered == {
        "docker": ["exec", "cp", "notebook", "shell", "stacks"],
        "host": ["stacks"],
        "slurm": ["stacks"],
    }
    assert [
        cls.capabilities.intake_process for cls in (DockerBackend, HostBackend, SlurmBackend)
    ] == [True, True, False]


def test_slurm_refusals_say_what_to_run_on_the_login_host(tmp_path: Path) -> None:
    b = SlurmBackend(Session(SLURM), Store(tmp_path))
    job = record("slurm", ["running", "pending"], ["254", "254"])
    job.nodes[0].host, job.nodes[1].host = "node1", "(pending)"
    e = b.refusal("exec", job, job.nodes[0])
    assert (type(e), e.message, e.hint) == (
        JobError,
        "job t-abc123 runs under Slurm, not in a container",
        "on the login host: `srun --overlap --jobid 254 -w node1 --pty bash`",
    )
    assert (
        b.refusal("exec", job, job.nodes[1]).hint
        == "on the login host: `srun --overlap --jobid 254 --pty bash`"
    )
    cp = b.refusal("cp", job)
    assert (type(cp), cp.message) == (
        JobError,
        "job t-abc123 runs under Slurm: its files are on the cluster's shared filesystem",
    )
    assert type(b.refusal("shell")) is UsageError
    nb = b.refusal("notebook")
    assert (type(nb), nb.message) == (
        PlanError,
        "profile cluster is a Slurm cluster; notebooks run on SSH profiles",
    )


def test_host_runtime_refusals_name_the_host_login(tmp_path: Path) -> None:
    prof = Profile.model_validate(
        {
            "name": "lab",
            "hosts": {
                "b": {"hostname": "gpu2.example.org", "port": 2222, "user": "me", "runtime": "host"}
            },
        }
    )
    b = HostBackend(Session(prof), Store(tmp_path))
    job = record("host", ["running"], ["gpuconsole-t-abc123-n0"])
    with pytest.raises(JobError) as e:
        b.exec_target(job, job.nodes[0])
    assert e.value.message == (
        "job t-abc123 runs in b's own Python (runtime: host), not in a container"
    )
    assert e.value.hint == (
        "log in to the host: `ssh -p 2222 me@gpu2.example.org`; "
        "`gpuconsole describe t-abc123` shows its folder and command"
    )
    cp = b.refusal("cp", job, job.nodes[0])
    assert cp.hint == (
        "copy with `scp -P 2222 me@gpu2.example.org:PATH .`; `gpuconsole "
        "describe t-abc123` shows its folder"
    )
    # a node that no longer runs says so first, as a Docker node does
    job.nodes[0].state = "succeeded"
    with pytest.raises(JobError) as done:
        b.exec_target(job, job.nodes[0])
    assert done.value.message == "job t-abc123: node 0 is not running (succeeded)"


def test_previews_of_stop_and_rm_per_runtime(tmp_path: Path) -> None:
    store = Store(tmp_path)
    docker = record("docker", ["running", "created", "succeeded"], ["a" * 64, "b" * 64, None])
    host = record("host", ["running"], ["gpuconsole-t-abc123-n0"])
    slurm = record("slurm", ["running"], ["254"])
    d = DockerBackend(Session(SSH), store)
    assert d.stop_preview(docker, "12") == [
        "a: docker stop --time 12 gpuconsole-t-abc123-n0",
        "a: docker rm gpuconsole-t-abc123-n1  (never started)",
    ]
    assert d.remove_preview(docker) == [
        "a: docker rm gpuconsole-t-abc123-n0",
        "a: docker rm gpuconsole-t-abc123-n1",
        "and each host's synced workdir of the job, unless a container uses it",
    ]
    assert (
        HostBackend(Session(SSH), store).remove_preview(host)[0]
        == "b: rm -r ~/.cache/gpuconsole/jobs/t-abc123/gpuconsole-t-abc123-n0"
    )
    s = SlurmBackend(Session(SLURM), store)
    assert s.stop_preview(slurm, "30") == [
        "login: scancel --signal=TERM 254; scancel 254 after 30 s"
    ]
    assert s.remove_preview(slurm) == ["login: the job's folder (its output is archived first)"]
    assert s.hosts_gone(slurm) == []
    assert d.hosts_gone(record("docker", ["running"], ["c" * 64])) == []


def test_the_service_asks_the_jobs_backend(tmp_path: Path) -> None:
    """The service's previews and capabilities are its job's backend's (one service, jobs of
    both runtimes of its SSH profile)."""
    store = Store(tmp_path)
    service = Service(SSH, store=store)
    docker = record("docker", ["running"], ["a" * 64])
    host = record("host", ["running"], ["gpuconsole-t-abc123-n0"])
    assert service.backend_for(docker).name == "docker"
    assert service.backend_for(host).name == "host"
    assert service.capabilities(docker).exec and not service.capabilities(host).exec
    assert service.stop_preview(docker) == ["a: docker stop --time 12 gpuconsole-t-abc123-n0"]
    assert service.remove_preview(host)[0].startswith("b: rm -r ~/.cache/gpuconsole/jobs/")

    async def shells() -> None:
        with pytest.raises(UsageError) as e:
            await service.shell_on_host("b", ["bash"], tty=False)
        assert e.value.message.startswith("host b runs jobs without Docker")
        await service.close()

    asyncio.run(shells())
