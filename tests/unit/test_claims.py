"""Launch claims (remote/claims.py) taken by the real holder script on this machine through
LocalTransport (its home under tmp): all or none, held until released or the holder dies,
re-entrant for one launch, removed once released; and the launch's use of them
(console/jobs/launch.claim_launch): the name and GPUs two racing launches want."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from console.errors import JobNameInUse, PlanError
from console.jobs.launch import claim_launch, merge_holders
from console.jobs.plan import HostFacts, JobPlan, build_plan
from console.jobs.spec import load_spec
from console.profiles import HostConfig, JobDefaults, Profile
from remote.claims import ClaimHeld, take
from remote.docker import ContainerInfo
from remote.errors import TransportError
from remote.transport import LocalTransport

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _claim_files(home: Path) -> list[str]:
    return sorted(p.name for p in (home / ".cache" / "gpuconsole" / "claims").rglob("*.lock"))


async def test_claims_are_exclusive_all_or_none_and_released(home: Path) -> None:
    t = LocalTransport("a")
    a = await take(t, ["name-x", "gpu-0"], owner="console-1 11 x-aaaaaa", what="x-aaaaaa")
    with pytest.raises(ClaimHeld) as e:
        await take(t, ["gpu-1", "name-x"], owner="console-2 22 x-bbbbbb", what="x-bbbbbb")
    assert e.value.host == "a"
    [h] = e.value.holders
    assert (h.key, h.owner, h.what) == ("name-x", "console-1 11 x-aaaaaa", "x-aaaaaa")
    assert h.since is not None
    # that refusal took nothing: gpu-1 is free for anyone
    c = await take(t, ["gpu-1"], owner="console-3 33 y-cccccc", what="y-cccccc")
    await c.release()
    # the same launch reaching this machine as a second profile host holds it already
    again = await take(t, ["name-x"], owner="console-1 11 x-aaaaaa", what="x-aaaaaa")
    await again.release()
    await a.release()
    await a.release()  # twice is fine
    assert _claim_files(home) == []
    b = await take(t, ["name-x"], owner="console-2 22 x-bbbbbb", what="x-bbbbbb")
    await b.release()


async def test_a_killed_holder_drops_its_claims(home: Path) -> None:
    """A console that dies ends its holder (its stdin closes; here: SIGKILL, harsher): the
    kernel drops the lock, and the file it leaves is taken by the next launch."""
    t = LocalTransport("a")
    a = await take(t, ["name-x"], owner="o1", what="x-aaaaaa")
    proc = a._proc
    assert proc is not None
    os.kill(proc.proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    await proc.wait()
    assert _claim_files(home) == ["name-x.lock"]
    b = await take(t, ["name-x"], owner="o2", what="x-bbbbbb")
    await b.release()
    assert _claim_files(home) == []


async def test_a_claim_ends_after_its_longest_hold(home: Path) -> None:
    t = LocalTransport("a")
    a = await take(t, ["name-x"], owner="o1", what="x-aaaaaa", hold_s=0.2)
    assert a._proc is not None
    await a._proc.wait()
    b = await take(t, ["name-x"], owner="o2", what="x-bbbbbb")
    await b.release()


async def test_bad_key_is_refused(home: Path) -> None:
    with pytest.raises(TransportError) as e:
        await take(LocalTransport("a"), ["../x"], owner="o", what="w")
    assert "bad claim key '../x'" in e.value.message


# -- the launch's claims -----------------------------------------------------------------


class _Engine:
    def __init__(self, infos: list[ContainerInfo]) -> None:
        self.infos = infos

    async def list(
        self, labels: Mapping[str, str | None], *, runtime: str | None = None
    ) -> list[ContainerInfo]:
        return [
            c
            for c in self.infos
            if all(k in c.labels and (v is None or c.labels[k] == v) for k, v in labels.items())
        ]


class _Session:
    """What claim_launch uses of a Session: transports (this machine) and engines."""

    def __init__(self) -> None:
        self.infos: list[ContainerInfo] = []

    async def connected(self, host: str) -> LocalTransport:
        return LocalTransport(host)

    def engine(self, host: str) -> _Engine:
        return _Engine(self.infos)


def _plan(tmp_path: Path, name: str, job_id: str) -> JobPlan:
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        f"name: {name}\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: 1\nnodes: [a]\n"
    )
    prof = Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults.model_validate({"image": "img:1"}),
    )
    facts = {"a": HostFacts("a", "10.0.0.1", 2, "/home/u", holders={0: [], 1: []})}
    return build_plan(
        load_spec(p), prof, ["a"], facts, job_id=job_id, created_at=0.0, image="img:1"
    )


def _running(plan: JobPlan) -> ContainerInfo:
    c = plan.nodes[0].container
    return ContainerInfo("f" * 64, c.name, dict(c.labels), "running", None, None, None)


async def test_racing_launches_of_one_name_one_wins(home: Path, tmp_path: Path) -> None:
    session: Any = _Session()
    first, second = _plan(tmp_path, "demo", "demo-111111"), _plan(tmp_path, "demo", "demo-222222")
    async with claim_launch(session, first):
        with pytest.raises(JobNameInUse) as e:
            async with claim_launch(session, second):
                pytest.fail("both launches passed")
        session.infos.append(_running(first))  # created while it held the claim
    assert e.value.message.startswith(
        "a job named 'demo' is being launched right now (demo-111111, from "
    )
    assert e.value.hint is not None and "another name (--name)" in e.value.hint
    # once released, the check under the claim sees the job that won
    with pytest.raises(JobNameInUse) as e:
        async with claim_launch(session, second):
            pytest.fail("the name is running")
    assert e.value.message == "a job named 'demo' is already running (demo-111111)"


async def test_racing_launches_for_one_gpu_one_wins(home: Path, tmp_path: Path) -> None:
    session: Any = _Session()
    one, two = _plan(tmp_path, "one", "one-111111"), _plan(tmp_path, "two", "two-222222")
    assert one.nodes[0].gpu_ids == two.nodes[0].gpu_ids == (0,)
    assert one.nodes[0].container.labels["io.gpuconsole.gpus"] == "0"
    async with claim_launch(session, one):
        with pytest.raises(PlanError) as e:
            async with claim_launch(session, two):
                pytest.fail("both launches got GPU 0")
        assert e.value.message.startswith(
            "host a: GPU(s) 0 are being given to job one-111111 right now (from "
        )
        async with claim_launch(session, two, force=True):  # --force shares GPUs on purpose
            pass
        session.infos.append(_running(one))
    # GPU 0 is one's now, though no process of it has opened the GPU yet
    with pytest.raises(PlanError) as e:
        async with claim_launch(session, two):
            pytest.fail("GPU 0 was given twice")
    assert e.value.message == (
        "host a: GPU(s) 0 in use (GPU 0: gpuconsole-one-111111-n0 (job one-111111 n0))"
    )
    assert e.value.hint is not None and "`gpuconsole stop one-111111`" in e.value.hint


def test_planning_counts_gpus_given_to_starting_nodes() -> None:
    """A node given a GPU whose processes have not opened it yet holds it for planning; one
    whose job already shows a process there is not listed twice."""
    procs = {0: ["pid 7 (u: python) in container 0123456789ab (job one-111111 n0 r0)"], 1: []}
    given = {
        0: ["gpuconsole-one-111111-n0 (job one-111111 n0)"],
        1: ["gpuconsole-two-222222-n0 (job two-222222 n0)"],
    }
    assert merge_holders(procs, given) == {0: procs[0], 1: given[1]}
    assert merge_holders(None, {}) is None
    assert merge_holders(None, given) == given
