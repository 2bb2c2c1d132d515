"""Node and job states of the lifecycle (interrupted launches, stops), the launcher record,
and the container data the engine's list gives without an inspect."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from console.jobs.launcher import (
    LAUNCH_STALE_S,
    launch_in_flight,
    launcher_alive,
    launcher_token,
)
from console.jobs.status import job_state, node_state
from console.jobs.store import NodeRecord
from remote.docker import ContainerInfo, ContainerSpec, Engine, spec_from_attrs
from remote.gang import TEARDOWN_EXIT_CODE


def info(status: str, code: int | None = None) -> ContainerInfo:
    return ContainerInfo("c", "n", {}, status, code, None, None)


def nodes(*states: str) -> list[NodeRecord]:
    return [NodeRecord("j", i, "h", "c", state=s) for i, s in enumerate(states)]


def test_node_states() -> None:
    assert node_state(info("created"), False, launching=True) == "pending"
    assert node_state(info("created"), False, launching=False) == "created"
    assert node_state(info("running"), False) == "running"
    assert node_state(info("exited", 0), True) == "succeeded"
    assert node_state(info("exited", 1), False) == "failed"
    assert node_state(info("exited", 143), True) == "stopped"


def test_job_states() -> None:
    assert job_state(nodes("created", "created")) == "failed"
    assert job_state(nodes("running", "created")) == "failed"
    assert job_state(nodes("pending", "pending")) == "pending"
    assert job_state(nodes("stopped", "stopped")) == "stopped"
    assert job_state(nodes("running", "unreachable")) == "running"
    assert job_state(nodes("succeeded", "lost")) == "lost"


def test_launcher_token_names_this_process() -> None:
    token = launcher_token()
    host, pid, ticks = token.split()
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    assert ticks.isdigit()  # Linux: start ticks from /proc
    assert launcher_alive(token) is True
    assert launcher_alive(f"{host} {pid} 1") is False  # the pid, reused by another process
    assert launcher_alive(f"another-machine-{host} {pid} {ticks}") is None
    assert launcher_alive("garbage") is None


def test_a_dead_launcher_is_not_alive() -> None:
    child = subprocess.run(
        [sys.executable, "-c", "from console.jobs.launch import launcher_token as t; print(t())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert launcher_alive(child.stdout.strip()) is False


def test_launch_in_flight() -> None:
    now = 1000.0
    assert launch_in_flight(launcher_token(), None, now) is True
    elsewhere = f"other-{socket.gethostname()} 1 1"
    # a launcher that cannot be asked: the never-started container's age decides
    assert launch_in_flight(elsewhere, now - 5, now) is True
    assert launch_in_flight(elsewhere, now - LAUNCH_STALE_S - 1, now) is False
    assert launch_in_flight(None, now - LAUNCH_STALE_S - 1, now) is False
    assert launch_in_flight(None, None, now) is False


def test_container_info_from_the_list_without_inspect() -> None:
    summary = {
        "Id": "abc",
        "Names": ["/gpuconsole-j-1-n0"],
        "Labels": {"k": "v"},
        "State": "exited",
        "Status": "Exited (137) 3 seconds ago",
        "Created": 1700,
    }
    i = ContainerInfo.from_summary(summary)
    assert (i.id, i.name, dict(i.labels), i.status, i.exit_code, i.created_s, i.detailed) == (
        "abc",
        "gpuconsole-j-1-n0",
        {"k": "v"},
        "exited",
        137,
        1700.0,
        False,
    )
    assert (
        ContainerInfo.from_summary({**summary, "State": "dead", "Status": "Dead"}).exit_code is None
    )
    up = ContainerInfo.from_summary({**summary, "State": "running", "Status": "Up 2 seconds"})
    assert (up.status, up.exit_code, up.started_at) == ("running", None, None)


def test_containers_run_with_init() -> None:
    spec = ContainerSpec(name="n", image="img", command=["torchrun", "x.py"])
    assert spec.create_kwargs()["init"] is True
    assert spec.docker_run_argv()[:4] == ["docker", "run", "-d", "--init"]
    back = spec_from_attrs(
        {"Name": "/n", "Config": {"Image": "img", "Cmd": ["x"]}, "HostConfig": {"Init": True}}
    )
    assert back.init is True
    off = ContainerSpec(name="n", image="img", command=["x"], init=False)
    assert "init" not in off.create_kwargs() and "--init" not in off.docker_run_argv()


class FakeTransportForList:
    """Stands in for a transport: the engine only asks it for its name and socket here."""

    name = "a"
    connected = True

    async def docker_socket(self) -> str:
        return "/nonexistent.sock"


class FakeApiCountingInspects:
    """Stands in for the Engine API's read requests (:meth:`remote.docker.Engine.get`): a
    fixed container list; counts inspects."""

    def __init__(self, summaries: list[Mapping[str, Any]]) -> None:
        self.summaries = summaries
        self.inspected: list[str] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        if path == "/containers/json":
            assert params == {
                "all": "1",
                "filters": json.dumps({"label": ["io.gpuconsole.job-id=j-1"]}),
            }
            return self.summaries
        cid = path.removeprefix("/containers/").removesuffix("/json")
        self.inspected.append(cid)
        return {
            "Id": cid,
            "Name": "/x",
            "Config": {"Labels": {}},
            "State": {
                "Status": "exited",
                "ExitCode": 3,
                "StartedAt": "2026-01-01T00:00:00Z",
                "FinishedAt": "2026-01-01T00:00:05Z",
            },
        }


def test_engine_list_inspects_only_what_detail_asks_for() -> None:
    summaries: list[Mapping[str, Any]] = [
        {"Id": cid, "Names": [f"/{cid}"], "Labels": {}, "State": st, "Status": stat, "Created": 1}
        for cid, st, stat in (
            ("r", "running", "Up 1 second"),
            ("e", "exited", "Exited (3) 1 second ago"),
            ("c", "created", "Created"),
        )
    ]
    api = FakeApiCountingInspects(summaries)
    engine = Engine(FakeTransportForList())  # type: ignore[arg-type]
    engine.get = api.get  # type: ignore[method-assign]
    plain = asyncio.run(engine.list({"io.gpuconsole.job-id": "j-1"}))
    assert api.inspected == []
    assert [(i.id, i.status, i.exit_code) for i in plain] == [
        ("r", "running", None),
        ("e", "exited", 3),
        ("c", "created", None),
    ]
    detailed = asyncio.run(
        engine.list({"io.gpuconsole.job-id": "j-1"}, detail=lambda i: i.status == "exited")
    )
    assert api.inspected == ["e"]
    e = next(i for i in detailed if i.id == "e")
    assert (e.detailed, e.finished_at) == (True, "2026-01-01T00:00:05Z")


_STOPPED_TAIL = """[rank0]:step 3/1000 loss 0.7
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    time.sleep(monitor_interval)
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15
"""  # noqa: E501  (torchrun's own lines, as a `docker stop` leaves them)


def test_torchruns_signal_exception_is_a_stop_not_a_script_failure() -> None:
    from console.diagnosis import diagnose

    d = diagnose(_STOPPED_TAIL)
    assert d is not None
    assert d.kind == "stopped"
    assert d.summary.startswith("Torchrun's agent (pid 7) was stopped by SIGTERM")
    assert "not by a failure of the training script" in d.summary
    # a rank's own exception before it is still the root cause
    failing = (
        "[rank1]:Traceback (most recent call last):\n"
        '[rank1]:  File "train.py", line 3, in <module>\n'
        "[rank1]:ValueError: bad batch\n"
    ) + _STOPPED_TAIL
    d2 = diagnose(failing)
    assert d2 is not None and d2.kind == "exception" and "ValueError: bad batch" in d2.summary


def test_exit_reason_names_the_signal_behind_128_plus_n() -> None:
    from console.jobs.status import exit_reason

    assert exit_reason(137) == "exited with code 137 (128+9: SIGKILL)"
    assert exit_reason(143) == "exited with code 143 (128+15: SIGTERM)"
    assert exit_reason(1) == "exited with code 1"
    assert exit_reason(255) == "exited with code 255"  # not a signal number
    assert exit_reason(None) == "exited (exit code unknown)"


def test_a_stopped_job_shows_the_exit_code_its_nodes_recorded() -> None:
    """`ps` EXIT (``exit_code``) of a job that `stop` ended: the code its nodes recorded
    (Docker's State.ExitCode, or the host runtime's exit.json: 128+N for signal N), node 0
    first, passing over the gang's teardown code (a node that ended because another did)."""
    from console.jobs.status import stopped_exit_code

    def stopped(*codes: int | None) -> list[NodeRecord]:
        return [
            NodeRecord("j", i, "h", "c", state="stopped", exit_code=c) for i, c in enumerate(codes)
        ]

    assert stopped_exit_code(stopped(1)) == 1  # torchrun after its SignalException
    assert stopped_exit_code(stopped(143, 143)) == 143  # a process SIGTERM ended
    assert stopped_exit_code(stopped(137)) == 137  # SIGKILL after the grace period
    assert stopped_exit_code(stopped(TEARDOWN_EXIT_CODE, 1)) == 1
    assert stopped_exit_code(stopped(TEARDOWN_EXIT_CODE, TEARDOWN_EXIT_CODE)) == TEARDOWN_EXIT_CODE
    assert stopped_exit_code(stopped(None, 143)) == 143
    assert stopped_exit_code(stopped(None, None)) is None  # never started, removed by stop
    # stopped by the user: as a shell reports SIGTERM (README: 143), whatever torchrun's own
    # status after it (even Docker's 137 of a node killed after the grace period)
    assert stopped_exit_code(stopped(1), by_user=True) == 143
    assert stopped_exit_code(stopped(0), by_user=True) == 143  # a notebook: Jupyter exits 0
    assert stopped_exit_code(stopped(TEARDOWN_EXIT_CODE, 1), by_user=True) == 143
    assert stopped_exit_code(stopped(1, 137), by_user=True) == 143
    assert stopped_exit_code(stopped(None, None), by_user=True) is None


def test_job_ids_read_from_hosts_must_have_gpuconsoles_shape() -> None:
    """Labels (and Slurm/host-runtime job folders) come from hosts; an id names folders of
    the state dir, so only the shape new_job_id makes is taken."""
    from console.jobs.labels import K_JOB_ID, NodeLabels, check_job_id
    from console.jobs.plan import new_job_id
    from console.jobs.store import Store

    good = new_job_id("train.v2_run")
    assert check_job_id(good) == good
    for bad in (
        "../../x-000000",
        "a/b-000000",
        "..",
        "",
        "UPPER-000000",
        "x-00000g",
        "x-000000\n",
        "x" * 49 + "-000000",
    ):
        with pytest.raises(ValueError):
            check_job_id(bad)
    labels = {
        K_JOB_ID: "../../etc-000000",
        "io.gpuconsole.job-name": "etc",
        "io.gpuconsole.node-rank": "0",
        "io.gpuconsole.node-count": "1",
    }
    with pytest.raises(ValueError):
        NodeLabels.parse(labels)
    with pytest.raises(ValueError):
        Store.log_path(Store.__new__(Store), "../x", 0)


def test_run_line_read_back_is_the_one_that_ran() -> None:
    """``describe``'s ``docker run``: the image's own labels (Docker copies them into every
    container) are not shown as the run's, and --shm-size reads as it was given."""
    attrs = {
        "Name": "/n",
        "Config": {
            "Image": "img",
            "Cmd": ["x"],
            "Labels": {
                "org.opencontainers.image.title": "torch (CPU)",
                "io.gpuconsole.job-id": "j",
                "overridden": "by the run",
            },
        },
        "HostConfig": {"ShmSize": 1 << 30},
    }
    back = spec_from_attrs(
        attrs,
        image_labels={
            "org.opencontainers.image.title": "torch (CPU)",
            "overridden": "in the image",
        },
    )
    assert back.labels == {"io.gpuconsole.job-id": "j", "overridden": "by the run"}
    assert back.shm_size == "1g"
    sizes = {1536 << 20: "1536m", 64 << 10: "64k", 1000: "1000b"}
    for n, said in sizes.items():
        attrs["HostConfig"] = {"ShmSize": n}
        assert spec_from_attrs(attrs).shm_size == said


def test_a_started_node_is_pending_until_its_first_log_line(tmp_path: Path) -> None:
    """`refresh`: a node the launch left pending whose container runs stays pending while its
    log is empty (torchrun's start), becomes running with its first line, and never goes
    back; a host whose log cannot be read counts as running (what the engine says)."""
    import asyncio
    from collections.abc import AsyncIterator
    from types import SimpleNamespace

    from console.backends.containers import refresh
    from console.jobs.store import JobRecord, Store
    from remote.docker import ContainerInfo
    from remote.errors import TransportError

    labels = {
        "io.gpuconsole.job-id": "j-000001",
        "io.gpuconsole.node-rank": "0",
        "io.gpuconsole.node-count": "1",
        "io.gpuconsole.host": "a",
        "io.gpuconsole.format": "1",
        "io.gpuconsole.job-name": "j",
    }
    lines: list[str] = []
    broken = False
    reads: list[int] = []

    class Engine:
        async def list(
            self, filters: object, detail: object = None, runtime: object = None
        ) -> list[ContainerInfo]:
            return [
                ContainerInfo(
                    "c" * 64,
                    "gpuconsole-j-000001-n0",
                    labels,
                    "running",
                    None,
                    "2026-12-01T00:00:00Z",
                    None,
                )
            ]

        async def logs(self, cid: str, tail: int | None = None) -> AsyncIterator[object]:
            reads.append(1)
            if broken:
                raise TransportError("host a: connection lost", "retry")
            for text in lines[-(tail or len(lines)) :]:
                yield text

    class Session:
        profile = SimpleNamespace(defaults=SimpleNamespace(stop_grace=10.0))

        async def connected(self, host: str) -> object:
            return object()

        def engine(self, host: str) -> Engine:
            return Engine()

    store = Store(tmp_path / "state")
    rec = JobRecord(
        "j-000001",
        "j",
        "lab",
        None,
        {},
        "0" * 12,
        1.0,
        1,
        "pending",
        nodes=[NodeRecord("j-000001", 0, "a", "gpuconsole-j-000001-n0", "c" * 64, "pending")],
    )
    store.add_job(rec)

    def again() -> JobRecord:
        got = store.get("j-000001")
        assert got is not None
        return asyncio.run(refresh(Session(), store, got))  # type: ignore[arg-type]

    job = again()
    assert (job.state, job.nodes[0].state, len(reads)) == ("pending", "pending", 1)
    assert job.nodes[0].started_at == "2026-12-01T00:00:00Z"
    lines.append("[rank0]: step 1")
    job = again()
    assert (job.state, job.nodes[0].state) == ("running", "running")
    job = again()
    assert job.state == "running" and len(reads) == 2  # running: its log is not read again

    store.update_nodes(
        [NodeRecord("j-000001", 0, "a", "gpuconsole-j-000001-n0", "c" * 64, "pending")]
    )
    broken = True
    assert again().state == "running"  # the log could not be read: the engine's word
