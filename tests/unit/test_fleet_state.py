"""FleetState: staleness, bounded history, free GPUs, PID -> container -> job, rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from console.fleet.monitor import Recorder, read_recording
from console.fleet.render import render_fleet, render_free
from console.fleet.state import ContainerJob, FleetState, free_gpus, gpu_holders
from remote.telemetry.schema import empty_gpu, empty_sample

CID = "a" * 64


def sample(
    seq: int, *, utils: list[int | None], procs: list[dict[str, Any]] | None, state: str = "ok"
) -> dict[str, Any]:
    s = empty_sample("nvml", seq, 1000.0 + seq, 1.0)
    s["state"] = state
    for i, u in enumerate(utils):
        g = empty_gpu(i)
        g.update(
            name="NVIDIA H200",
            uuid=f"GPU-{i}",
            util_gpu_pct=u,
            mem_used_mib=100 * i,
            mem_total_mib=143771,
        )
        s["gpus"].append(g)
    s["processes"] = procs
    return s


def proc(gpu: int, pid: int, cid: str | None, mib: int = 1000) -> dict[str, Any]:
    return {
        "gpu_index": gpu,
        "gpu_uuid": f"GPU-{gpu}",
        "pid": pid,
        "used_mib": mib,
        "type": "compute",
        "user": "root",
        "command": "/opt/venv/bin/python train.py",
        "container_id": cid,
    }


def test_stale_after_three_missed_intervals() -> None:
    st = FleetState(["a", "b"], interval=1.0)
    st.on_sample("a", sample(1, utils=[0], procs=[]), rx=100.0)
    assert st.tick(now=102.9) == []
    assert st.hosts["a"].status == "ok"
    assert st.tick(now=103.1) == ["a"]
    assert st.hosts["a"].status == "stale"
    assert st.hosts["b"].status == "connecting"
    st.on_down("b", "host b: cannot connect to 127.0.0.12:22: connection refused")
    assert st.complete()
    st.on_sample("a", sample(2, utils=[0], procs=[]), rx=104.0)
    assert st.hosts["a"].status == "ok"


def test_history_is_bounded_to_at_least_ten_minutes() -> None:
    st = FleetState(["a"], interval=1.0, history_s=60)
    assert st.maxlen == 600
    for i in range(700):
        st.on_sample("a", sample(i, utils=[i % 100, None], procs=[]), rx=float(i))
    h0 = st.hosts["a"].history[0]
    assert len(h0) == 600
    assert h0[0].t == 1000.0 + 100 and h0[-1].util_pct == 699 % 100
    assert st.hosts["a"].history[1][-1].util_pct is None  # unknown stays unknown


def test_free_gpus_and_holders_map_pid_to_container_to_job() -> None:
    st = FleetState(["a", "b", "c"])
    st.on_sample(
        "a", sample(1, utils=[97, 0, 0], procs=[proc(0, 4242, CID), proc(2, 77, None, 500)])
    )
    st.on_sample("b", sample(1, utils=[0, 0], procs=None))  # process list unknown
    st.on_sample("c", sample(1, utils=[], procs=[], state="driver_unreachable"))
    st.set_containers({CID: ContainerJob("ddp-1a2b3c", "ddp", 0)})
    assert free_gpus(st) == {"a": [1]}
    holders = gpu_holders(st, "a")
    assert holders is not None
    (h,) = holders[0]
    assert (h.pid, h.job) == (4242, ContainerJob("ddp-1a2b3c", "ddp", 0))
    assert h.describe() == (
        f"pid 4242 (root: /opt/venv/bin/python train.py) in container "
        f"{CID[:12]} (job ddp-1a2b3c n0)"
    )
    assert gpu_holders(st, "b") is None
    # top --json carries the same map; a process of no job is left out
    jobs = st.snapshot()["hosts"][0]["jobs"]
    assert jobs == [
        {
            "pid": 4242,
            "gpu_index": 0,
            "job_id": "ddp-1a2b3c",
            "job_name": "ddp",
            "node_rank": 0,
            "rank": None,
        }
    ]
    # a runtime-host node: the agent reports its name as the container id
    st.on_sample("b", sample(2, utils=[90, 0], procs=[proc(1, 99, "gpuconsole-hr-1-n0")]))
    st.set_containers(
        {
            CID: ContainerJob("ddp-1a2b3c", "ddp", 0),
            "gpuconsole-hr-1-n0": ContainerJob("hr-1", "hr", 0),
        }
    )
    (hb,) = (gpu_holders(st, "b") or {})[1]
    assert hb.describe().endswith("on the host (job hr-1 n0)")
    assert st.snapshot()["hosts"][1]["jobs"][0]["job_id"] == "hr-1"
    usage = st.job_usage()["ddp-1a2b3c"]
    assert usage.gpus == (("a", 0),) and usage.mean_util_pct == 97 and usage.mem_used_mib == 1000


def test_lost_gpu_is_never_free() -> None:
    st = FleetState(["a"])
    s = sample(1, utils=[0, None], procs=[], state="gpu_lost")
    s["gpus"][1]["lost"] = True
    st.on_sample("a", s)
    assert free_gpus(st) == {"a": [0]}


def test_render_shows_unknown_as_question_mark_and_down_hosts() -> None:
    st = FleetState(["a", "b"])
    st.on_sample("a", sample(1, utils=[97, None], procs=[proc(0, 4242, CID)]))
    st.on_down("b", "host b: cannot connect to 127.0.0.12:22: connection refused")
    st.set_containers({CID: ContainerJob("ddp-1a2b3c", "ddp", 1)})
    text = render_fleet(st)
    lines = text.splitlines()
    assert lines[0].split() == [
        "HOST",
        "GPU",
        "NAME",
        "UTIL",
        "SM",
        "MEM",
        "MiB",
        "TEMP",
        "POWER",
        "W",
        "SM",
        "MHz",
        "THROTTLE",
        "PROCESSES",
    ]
    row0 = next(ln for ln in lines if ln.startswith("a ") and " 0 " in ln)
    assert "97%" in row0 and "4242 ddp-1a2b3c n1" in row0
    row1 = next(ln for ln in lines if ln.startswith("a ") and " 1 " in ln)
    assert "?" in row1 and "0%" not in row1
    assert row1.split()[4:6] == ["?", "100"]  # GPM unknown (not n/a); memory is known
    # the table's row says down; the reason is a note under it (the NAME column stays narrow)
    assert any(ln.split()[:3] == ["b", "-", "down"] for ln in lines), lines
    assert "b: down: cannot connect to 127.0.0.12:22: connection refused" in lines
    assert "job ddp-1a2b3c: 1 GPU(s) [a:0] mean util 97%, 1000 MiB" in text
    # GPU 1 holds no process: it is the free one
    assert [ln.split()[:2] for ln in render_free(st).splitlines()[1:]] == [["a", "1"]]


def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    import asyncio

    path = tmp_path / "rec.jsonl"
    with open(path, "w") as f:
        rec = Recorder(f)
        rec("a", sample(1, utils=[10], procs=[]))
        rec("b", sample(1, utils=[20, 30], procs=[]))
        rec("a", sample(2, utils=[11], procs=[]))

    async def collect() -> list[tuple[str, int]]:
        return [(h, s["seq"]) async for h, s in read_recording(path, speed=0)]

    assert asyncio.run(collect()) == [("a", 1), ("b", 1), ("a", 2)]
    path.write_text(path.read_text() + "not json\n")

    async def bad() -> None:
        async for _ in read_recording(path, speed=0):
            pass

    with pytest.raises(ValueError, match=r"rec.jsonl:4: not a gpuconsole recording line"):
        asyncio.run(bad())
    assert json.loads(path.read_text().splitlines()[0])["host"] == "a"


def test_recorded_h200_trace_through_the_fleet_state() -> None:
    traces = Path(__file__).resolve().parents[1] / "data" / "traces"
    loader_pid = int((traces / "loader.pid").read_text())
    st = FleetState(["h200"])
    for line in (traces / "h200-load.jsonl").read_text().splitlines():
        st.on_sample("h200", json.loads(line))
    assert free_gpus(st) == {"h200": [1]}
    holders = gpu_holders(st, "h200")
    assert holders is not None
    assert [h.pid for h in holders[0]] == [loader_pid] and holders[1] == []
    hist = st.hosts["h200"].history
    assert len(hist[0]) == 25
    assert min(p.util_pct or 0 for p in hist[0]) >= 95
    assert max(p.util_pct or 0 for p in hist[1]) == 0
    assert all((p.sm_activity_pct or 0) > 50 for p in hist[0])
    row = next(
        ln for ln in render_fleet(st).splitlines() if ln.startswith("h200") and ln.split()[1] == "0"
    )
    assert "sw_power_cap" in row and str(loader_pid) in row
    assert row.split()[12] == "1500/?"  # SM clock against its maximum (not in the recording)
    # a GPU without GPM (NVML: not supported): n/a, not unknown
    s = json.loads((traces / "h200-idle.jsonl").read_text().splitlines()[0])
    for g in s["gpus"]:
        g.update(gpm=None, unsupported=["fan_pct", "gpm"])
    st.on_sample("old", s)
    old = [ln.split() for ln in render_fleet(st).splitlines() if ln.startswith("old ")]
    assert [r[4] for r in old] == ["n/a", "n/a"]


def test_gpu_count_below_the_count_last_seen_names_the_missing_bus_id() -> None:
    st = FleetState(["a"])
    full = sample(1, utils=[0, 0], procs=[])
    full["gpus"][0]["pci_bus_id"] = "00000000:3B:00.0"
    full["gpus"][1]["pci_bus_id"] = "00000000:B3:00.0"
    st.on_sample("a", full)
    assert st.hosts["a"].missing_gpus() == []
    fewer = sample(2, utils=[0], procs=[])  # after a reboot, b3:00.0 failed to probe
    fewer["gpus"][0]["pci_bus_id"] = "00000000:3B:00.0"
    st.on_sample("a", fewer)
    assert st.hosts["a"].missing_gpus() == ["00000000:B3:00.0"]
    assert st.snapshot()["hosts"][0]["missing_gpus"] == ["00000000:B3:00.0"]
    assert "a: 1 GPU(s) fewer than last seen, missing: 00000000:B3:00.0" in render_fleet(st)


def test_recorded_nvidia_smi_fallback_trace() -> None:
    traces = Path(__file__).resolve().parents[1] / "data" / "traces"
    pid = int((traces / "h200-smi-fallback.pid").read_text())
    samples = [
        json.loads(ln) for ln in (traces / "h200-smi-fallback.jsonl").read_text().splitlines()
    ]
    assert {s["source"] for s in samples} == {"nvidia-smi"}
    assert {s["state"] for s in samples} == {"ok"}
    st = FleetState(["h200"])
    for s in samples:
        st.on_sample("h200", s)
    last = samples[-1]
    g0, g1 = last["gpus"]
    assert "H200" in g0["name"] and g0["util_gpu_pct"] >= 95 and g1["util_gpu_pct"] == 0
    assert g0["gpm"] is None and g0["fan_pct"] is None  # nvidia-smi has no GPM; SXM no fan
    assert g0["errors"]["fan_pct"]  # the reason is kept
    assert free_gpus(st) == {"h200": [1]}
    holders = gpu_holders(st, "h200")
    assert holders is not None and [h.pid for h in holders[0]] == [pid]
    assert holders[0][0].used_mib is not None and holders[0][0].used_mib > 16000


def test_replay_reads_a_bare_agent_trace() -> None:
    import asyncio

    trace = Path(__file__).resolve().parents[1] / "data" / "traces" / "h200-idle.jsonl"

    async def collect() -> list[tuple[str, int]]:
        return [(h, s["seq"]) async for h, s in read_recording(trace, speed=0)]

    got = asyncio.run(collect())
    assert len(got) == 15 and {h for h, _ in got} == {"vm"}  # the trace's own hostname
    assert [seq for _, seq in got] == list(range(15))


def test_job_memory_unknown_is_not_zero() -> None:
    # nvidia-smi under MIG prints [N/A] for a process's memory: the job's memory is unknown
    st = FleetState(["a"])
    p = proc(0, 4242, CID)
    p["used_mib"] = None
    st.on_sample("a", sample(1, utils=[50], procs=[p]))
    st.set_containers({CID: ContainerJob("ddp-1a2b3c", "ddp", 0)})
    usage = st.job_usage()["ddp-1a2b3c"]
    assert usage.gpus == (("a", 0),) and usage.mem_used_mib is None
    assert "mean util 50%, ? MiB" in render_fleet(st)


def test_samples_are_read_once_on_arrival() -> None:
    # a recording of the nvidia-smi fallback from before the names were shared
    s = sample(1, utils=[100], procs=[proc(0, 9, None)])
    s["source"] = "nvidia-smi"
    s["gpus"][0]["throttle_reasons"] = ["hw_thermal_slowdown", "sw_power_cap"]
    del s["processes"][0]["container_id"]
    s["host"] = {"errors": {}}
    st = FleetState(["a"])
    st.on_sample("a", s)
    kept = st.hosts["a"].sample
    assert kept is not None
    assert kept["gpus"][0]["throttle_reasons"] == ["sw_power_cap", "hw_thermal"]
    assert kept["processes"] is not None and kept["processes"][0]["container_id"] is None
    assert kept["host"]["cpu_pct"] is None
    with pytest.raises(ValueError, match="field `state`"):
        st.on_sample("a", dict(s, state="fine"))
