"""Fleet rows (console/fleet/rows.py) from the recorded 2 x H200 traces: values, sort, filter."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from console.fleet.rows import (
    THROTTLE_WORDS,
    GpuRow,
    GpuUser,
    HostGroup,
    bar,
    filter_groups,
    fleet_rows,
    host_detail_text,
    mem_text,
    parse_query,
    power_text,
    sort_groups,
    sparkline,
    throttle_severity,
    throttle_text,
    user_text,
    users_text,
    util_text,
)
from console.fleet.state import ContainerJob, FleetState
from remote.telemetry.schema import THROTTLE_REASONS, empty_sample

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CID = "c0ffee" + "0" * 58
DOWN_REASON = "host gpu-c: cannot connect to 10.0.0.13:22: connection refused"
DRIVER_DETAIL = (
    "nvidia-smi: Unable to determine the device handle for GPU0000:3D:00.0: Unknown Error"
)


def trace(name: str) -> list[dict[str, Any]]:
    """The samples of a recorded trace, in order."""
    return [json.loads(ln) for ln in (TRACES / name).read_text().splitlines() if ln.strip()]


def build_fleet(*, job: bool = False) -> FleetState:
    """Four hosts: ``h200-a`` (the load trace: GPU 0 at 100 %, PID 653), ``h200-b`` (the idle
    trace), ``gpu-c`` down with a reason, ``gpu-d`` whose driver does not answer.

    Samples arrive 1 s apart (``rx`` = 100.0, 101.0, ...; monotonic clock of the test).
    With ``job``, h200-a's GPU 0 is held by two ranks of job ``ddp-x-1a2b3c`` (node 0)
    instead of the loader: the trace's process with a container id, plus a second rank.
    """
    st = FleetState(["h200-a", "h200-b", "gpu-c", "gpu-d"], interval=1.0)
    for i, s in enumerate(trace("h200-load.jsonl")):
        if job:
            s = copy.deepcopy(s)
            p0 = dict(
                s["processes"][0],
                container_id=CID,
                rank=0,
                local_rank=0,
                command="/usr/bin/python3 -u train.py --epochs 3",
            )
            p1 = dict(p0, pid=654, rank=1, local_rank=1, used_mib=1024)
            s["processes"] = [p1, p0]
        st.on_sample("h200-a", s, rx=100.0 + i)
    for i, s in enumerate(trace("h200-idle.jsonl")):
        st.on_sample("h200-b", s, rx=110.0 + i)
    st.on_down("gpu-c", DOWN_REASON)
    bad = empty_sample("nvml", 3, 1795974200.0, 1.0)
    bad.update(state="driver_unreachable", state_detail=DRIVER_DETAIL)
    bad["host"].update(cpu_pct=1.5, mem_used_mib=2048, mem_total_mib=515000)
    st.on_sample("gpu-d", bad, rx=124.0)
    if job:
        st.set_containers({CID: ContainerJob("ddp-x-1a2b3c", "ddp-x", 0)})
    return st


def gpu(groups: list[HostGroup], host: str, index: int) -> GpuRow:
    return next(r for g in groups if g.host.name == host for r in g.gpus if r.index == index)


def order(groups: list[HostGroup]) -> list[str]:
    """Row keys in display order: ``host`` then ``host:index`` for each GPU."""
    return [k for g in groups for k in [g.host.name] + [f"{r.host}:{r.index}" for r in g.gpus]]


def test_rows_carry_the_traces_last_readings() -> None:
    groups = fleet_rows(build_fleet(), now=124.5)
    assert [g.host.name for g in groups] == ["h200-a", "h200-b", "gpu-c", "gpu-d"]
    a = groups[0].host
    assert (a.key, a.status, a.cpu_pct, a.mem_used_mib, a.mem_total_mib, a.gpu_count) == (
        "host:h200-a",
        "up",
        3.2,
        1180,
        257811,
        2,
    )
    assert (a.problem, a.error, a.missing_gpus, a.source) == (None, None, (), "nvml")
    assert a.age_s == pytest.approx(0.5)  # last of 25 samples at rx 124.0
    g0 = gpu(groups, "h200-a", 0)
    assert g0.key == "gpu:h200-a:0" and g0.name == "NVIDIA H200"
    assert (g0.util_pct, g0.mem_used_mib, g0.mem_total_mib, g0.temp_c) == (100, 17612, 143771, 62)
    assert (g0.power_w, g0.power_limit_w, g0.sm_activity_pct) == (691.842, 700.0, 96.27)
    assert g0.fan_pct is None  # the H200 SXM has no fan: unknown, not 0
    assert g0.throttle_reasons == ("sw_power_cap",)
    assert (
        g0.pstate,
        g0.sm_clock_mhz,
        g0.tensor_activity_pct,
        g0.dram_bw_util_pct,
        g0.ecc_uncorrected,
    ) == ("P0", 1500, 93.45, 17.34, 0)
    assert g0.history == (100.0,) * 25
    assert g0.users == (
        GpuUser(
            job_id=None,
            job_name=None,
            node_rank=None,
            ranks=(),
            pids=(653,),
            user="root",
            command="python3 /work/main/scripts/device/matmul_load.py 90 16",
            container=None,
            used_mib=17604,
        ),
    )
    assert (g0.busy, g0.free, g0.job_ids) == (True, False, ())
    g1 = gpu(groups, "h200-a", 1)
    assert (g1.util_pct, g1.mem_used_mib, g1.temp_c, g1.power_w) == (0, 0, 44, 85.019)
    assert g1.throttle_reasons == ("gpu_idle",) and g1.users == () and g1.free
    b0 = gpu(groups, "h200-b", 0)
    assert (b0.power_w, b0.temp_c, b0.sm_activity_pct, len(b0.history)) == (76.331, 38, 0.0, 15)


def test_down_and_driver_problem_hosts() -> None:
    groups = fleet_rows(build_fleet(), now=124.5)
    c, d = groups[2], groups[3]
    assert (c.host.status, c.host.error, c.host.gpu_count, c.gpus) == (
        "down",
        DOWN_REASON,
        None,
        (),
    )
    assert host_detail_text(c.host) == DOWN_REASON
    assert (d.host.status, d.host.problem, d.host.problem_detail) == (
        "up",
        "driver_unreachable",
        DRIVER_DETAIL,
    )
    assert (d.host.cpu_pct, d.host.mem_used_mib, d.host.gpu_count, d.gpus) == (1.5, 2048, None, ())
    assert host_detail_text(d.host) == f"driver_unreachable: {DRIVER_DETAIL}"


def test_stale_host_and_age_from_the_injected_clock() -> None:
    st = build_fleet()
    st.tick(now=128.0)  # h200-b's last sample was at rx 124.0: 4 s > 3 intervals
    groups = fleet_rows(st, now=128.0)
    b = groups[1].host
    assert (b.status, b.age_s) == ("stale", 4.0)
    assert host_detail_text(b) == "no sample for 4s"
    assert groups[0].host.status == "stale"
    assert fleet_rows(st).__getitem__(1).host.age_s is None  # no clock: age unknown
    # a stale host's GPUs are not offered as free
    assert not any(r.free for g in groups for r in g.gpus)


def test_job_ranks_grouped_per_node() -> None:
    groups = fleet_rows(build_fleet(job=True))
    g0 = gpu(groups, "h200-a", 0)
    assert g0.users is not None
    (u,) = g0.users
    assert (u.job_id, u.job_name, u.node_rank, u.ranks, u.pids) == (
        "ddp-x-1a2b3c",
        "ddp-x",
        0,
        (0, 1),
        (653, 654),
    )
    assert (u.container, u.used_mib) == (CID[:12], 17604 + 1024)
    assert user_text(u) == "ddp-x-1a2b3c n0 r0,r1"
    assert g0.job_ids == ("ddp-x-1a2b3c",)


def test_smi_fallback_unknowns_stay_none() -> None:
    st = FleetState(["smi"])
    for s in trace("h200-smi-fallback.jsonl"):
        st.on_sample("smi", s, rx=1.0)
    (g,) = fleet_rows(st)
    assert (g.host.cpu_pct, g.host.mem_used_mib, g.host.source) == (None, None, "nvidia-smi")
    r0 = g.gpus[0]
    assert (r0.mem_used_mib, r0.util_pct, r0.sm_activity_pct, r0.fan_pct) == (
        17613,
        100,
        None,
        None,
    )
    assert r0.users is not None
    assert users_text(r0.users) == "pid 570 ? ?"


def test_sort_by_each_column() -> None:
    groups = fleet_rows(build_fleet())
    assert order(sort_groups(groups)) == [
        "h200-a",
        "h200-a:0",
        "h200-a:1",
        "h200-b",
        "h200-b:0",
        "h200-b:1",
        "gpu-c",
        "gpu-d",
    ]
    assert order(sort_groups(groups, "host", descending=True)) == [
        "gpu-d",
        "gpu-c",
        "h200-b",
        "h200-b:1",
        "h200-b:0",
        "h200-a",
        "h200-a:1",
        "h200-a:0",
    ]
    # temperature: a 62/44 C, b 38/39 C
    assert order(sort_groups(groups, "temp", descending=True)) == [
        "h200-a",
        "h200-a:0",
        "h200-a:1",
        "h200-b",
        "h200-b:1",
        "h200-b:0",
        "gpu-c",
        "gpu-d",
    ]
    assert order(sort_groups(groups, "temp")) == [
        "h200-b",
        "h200-b:0",
        "h200-b:1",
        "h200-a",
        "h200-a:1",
        "h200-a:0",
        "gpu-c",
        "gpu-d",
    ]
    # power: a 691.8/85.0 W, b 76.3/82.4 W
    assert order(sort_groups(groups, "power")) == [
        "h200-b",
        "h200-b:0",
        "h200-b:1",
        "h200-a",
        "h200-a:1",
        "h200-a:0",
        "gpu-c",
        "gpu-d",
    ]
    # memory and utilization: ties keep the host order
    assert order(sort_groups(groups, "mem", descending=True))[:3] == [
        "h200-a",
        "h200-a:0",
        "h200-a:1",
    ]
    assert order(sort_groups(groups, "util"))[:3] == ["h200-a", "h200-a:1", "h200-a:0"]
    with pytest.raises(ValueError, match="unknown sort key 'fan'"):
        sort_groups(groups, "fan")


def test_filter_words_and_qualifiers() -> None:
    groups = fleet_rows(build_fleet(job=True))
    assert order(filter_groups(groups, "")) == order(groups)
    assert order(filter_groups(groups, "free")) == [
        "h200-a",
        "h200-a:1",
        "h200-b",
        "h200-b:0",
        "h200-b:1",
    ]
    assert order(filter_groups(groups, "busy")) == ["h200-a", "h200-a:0"]
    assert order(filter_groups(groups, "h200-b")) == ["h200-b", "h200-b:0", "h200-b:1"]
    assert order(filter_groups(groups, "gpu-c")) == ["gpu-c"]  # a down host by name
    assert order(filter_groups(groups, "host:GPU")) == ["gpu-c", "gpu-d"]
    assert order(filter_groups(groups, "host:h200-a FREE")) == ["h200-a", "h200-a:1"]
    assert order(filter_groups(groups, "job:ddp-x")) == ["h200-a", "h200-a:0"]
    assert order(filter_groups(groups, "1a2b3c")) == ["h200-a", "h200-a:0"]
    assert order(filter_groups(groups, "model:h200")) == [
        "h200-a",
        "h200-a:0",
        "h200-a:1",
        "h200-b",
        "h200-b:0",
        "h200-b:1",
    ]
    assert filter_groups(groups, "model:a100") == []
    assert [(t.field, t.value) for t in parse_query(" Free job:X h ")] == [
        ("free", ""),
        ("job", "x"),
        ("text", "h"),
    ]


def test_unknown_process_list_is_neither_free_nor_busy() -> None:
    st = FleetState(["a"])
    s = copy.deepcopy(trace("h200-idle.jsonl")[-1])
    s["processes"] = None
    st.on_sample("a", s, rx=1.0)
    groups = fleet_rows(st)
    assert filter_groups(groups, "free") == [] and filter_groups(groups, "busy") == []
    assert users_text(groups[0].gpus[0].users) == "?"


def test_text_cells() -> None:
    assert bar(0.42, 6) == "██▌   "
    assert bar(None, 4) == "    " and bar(1.5, 3) == "███" and bar(0.0, 3) == "   "
    assert util_text(42) == "██▌     42%" and util_text(None) == "          ?"
    assert mem_text(17612, 143771) == "▌    17612/143771 MiB"
    assert mem_text(None, 143771) == "     ?/143771 MiB"
    assert power_text(691.842, 700.0) == "692/700 W" and power_text(None, None) == "?/? W"
    assert throttle_text(["gpu_idle"]) == "-" and throttle_text(None) == "?"
    assert throttle_text(["sw_power_cap", "hw_thermal"]) == "pwr-cap,hw-therm"
    assert sparkline([None, 0.0, 50.0, 100.0], 6) == "  ?▁▅█"
    assert sparkline([100.0] * 25, 4) == "████"
    u = GpuUser(
        None,
        None,
        None,
        (),
        (653,),
        "root",
        "python3 /work/main/scripts/device/matmul_load.py 90 16",
        None,
        17604,
    )
    assert user_text(u) == "pid 653 root python3 …/matmul_load.py 90 16"
    assert user_text(u, command_limit=12) == "pid 653 root python3 …/m…"


def test_connecting_host_and_missing_gpu() -> None:
    st = FleetState(["new", "h200"])
    samples = trace("h200-load.jsonl")
    st.on_sample("h200", samples[0], rx=1.0)
    fell = copy.deepcopy(samples[1])
    fell["gpus"] = fell["gpus"][:1]  # GPU 1 (00000000:00:07.0) is gone from the bus
    st.on_sample("h200", fell, rx=2.0)
    new, h200 = fleet_rows(st)
    assert (new.host.status, new.host.gpu_count, new.host.cpu_pct, new.gpus) == (
        "connecting",
        None,
        None,
        (),
    )
    assert (h200.host.gpu_count, h200.host.missing_gpus) == (1, ("00000000:00:07.0",))
    assert [r.index for r in h200.gpus] == [0]
    assert host_detail_text(h200.host) == "1 GPU(s) missing: 00000000:00:07.0"


def test_throttle_severity_from_the_shared_vocabulary() -> None:
    assert throttle_severity(None) == "unknown"
    assert throttle_severity([]) == "none" and throttle_severity(["gpu_idle"]) == "none"
    assert throttle_severity(["gpu_idle", "sw_power_cap"]) == "limit"
    assert throttle_severity(["0x800"]) == "limit"  # a bit without a name still limits
    for r in ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"):
        assert throttle_severity(["sw_power_cap", r]) == "slowdown"
    # every named reason has a short word
    assert set(THROTTLE_WORDS) == set(THROTTLE_REASONS) - {"gpu_idle"}
