"""One GPU state, two paths, one record: the agent (NVML) and the nvidia-smi fallback agree.

Each scenario is a FakeNVML state (``tests/fakes/fake_nvml.py``, the named stand-in for
pynvml). The agent samples it in process; ``fake_nvidia_smi`` prints what nvidia-smi would
print for the same state (``--query-gpu`` and ``--query-compute-apps`` CSV, ``nounits``), and
the smi parser turns that into a sample. The two samples are compared field by field: every
value must be equal (and of the same type), every unknown must be ``None`` on both sides with
a reason on both sides, except the fields nvidia-smi cannot give
(``smi.SMI_UNKNOWN_GPU_FIELDS``, ``smi.SMI_UNKNOWN_PROCESS_FIELDS``, host readings but the
driver version), which must be ``None`` with a reason on the smi side.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from console.fleet.rows import fleet_rows, num_text, throttle_text, util_text
from console.fleet.state import FleetState
from remote.telemetry import schema
from remote.telemetry.smi import (
    COMPUTE_APPS_FIELDS,
    QUERY_FIELDS,
    QUERY_FIELDS_LEGACY,
    SMI_UNKNOWN_GPU_FIELDS,
    SMI_UNKNOWN_PROCESS_FIELDS,
    SmiStreamParser,
    classify_smi_failure,
    parse_csv_rows,
)

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


agent_mod = _load("gpuconsole_agent_parity", ROOT / "remote" / "agent" / "agent.py")
fake_nvml = _load("fake_nvml_parity", ROOT / "tests" / "fakes" / "fake_nvml.py")

#: every named clock-event reason bit, one GPU each; then none, all, and an unnamed bit
REASON_MASKS = [bit for bit, _ in agent_mod.CLOCK_EVENT_REASONS] + [0x0, 0x7FF, 0x801]


def _gpu(i: int, **over: Any) -> dict[str, Any]:
    g: dict[str, Any] = {
        "uuid": f"GPU-{i:04x}",
        "pci_bus_id": f"00000000:{0x19 + i:02X}:00.0",
        "util_gpu": 10 + i,
        "util_mem": 5 + i,
        "mem_used": (1000 + i) * MIB,
        "mem_total": 143771 * MIB,
        "temp": 40 + i,
        "power_mw": 512345 + 7 * i,
        "power_limit_mw": 700000,
        "sm_clock": 1980,
        "mem_clock": 3201,
        "fan": 30 + i,
        "pstate": 0,
        "clock_reasons": 0x4,
        "ecc_uncorrected": i,
        "persistence": 1,
        "mig": [0, 0],
        "gpm_supported": False,
    }
    g.update(over)
    return g


SCENARIOS: dict[str, dict[str, Any]] = {
    "every_reason_bit": {
        "driver_version": "580.159.04",
        "gpus": [_gpu(i, clock_reasons=m) for i, m in enumerate(REASON_MASKS)],
    },
    "busy_with_processes": {
        "driver_version": "580.159.04",
        "gpus": [
            _gpu(
                0,
                util_gpu=100,
                power_mw=694638,
                clock_reasons=0x4,
                procs=[{"pid": 653, "used_mib": 17604}, {"pid": 654, "used_mib": 12}],
            ),
            _gpu(1, util_gpu=0, power_mw=83712, clock_reasons=0x1, pstate=8, persistence=0),
        ],
    },
    # every reading NVML/nvidia-smi cannot give: unknown on both paths, never 0
    "unknown_values": {
        "driver_version": "535.104.05",
        "gpus": [
            _gpu(
                0,
                fail={
                    f: "NotSupported"
                    for f in (
                        "nvmlDeviceGetUtilizationRates",
                        "nvmlDeviceGetMemoryInfo_v2",
                        "nvmlDeviceGetTemperatureV",
                        "nvmlDeviceGetPowerUsage",
                        "nvmlDeviceGetEnforcedPowerLimit",
                        "nvmlDeviceGetClockInfo",
                        "nvmlDeviceGetMaxClockInfo",
                        "nvmlDeviceGetCurrPcieLinkGeneration",
                        "nvmlDeviceGetMaxPcieLinkGeneration",
                        "nvmlDeviceGetCurrPcieLinkWidth",
                        "nvmlDeviceGetMaxPcieLinkWidth",
                        "nvmlDeviceGetFanSpeed",
                        "nvmlDeviceGetPerformanceState",
                        "nvmlDeviceGetCurrentClocksEventReasons",
                        "nvmlDeviceGetTotalEccErrors",
                        "nvmlDeviceGetPersistenceMode",
                        "nvmlDeviceGetMigMode",
                        "nvmlDeviceGetRemappedRows",
                    )
                },
            ),
            _gpu(
                1,
                fail={
                    "nvmlDeviceGetFanSpeed": "NotSupported",
                    "nvmlDeviceGetTotalEccErrors": "NoPermission",
                },
                procs=[{"pid": 77, "used_mib": None}],
            ),
        ],
    },
    # MIG on: NVML has no whole-GPU utilization and no per-process memory
    "mig_enabled": {
        "driver_version": "580.159.04",
        "gpus": [
            _gpu(
                0,
                mig=[1, 1],
                fail={"nvmlDeviceGetUtilizationRates": "NotSupported"},
                procs=[{"pid": 4242, "used_mib": None}],
            ),
            _gpu(1, mig=[0, 0]),
        ],
    },
}


def agent_sample(sc: dict[str, Any], missing: tuple[str, ...] = ()) -> dict[str, Any]:
    nv = fake_nvml.FakeNVML(dict(sc, missing=list(missing)))
    agent = agent_mod.Agent(nv, 1.0)
    try:
        return dict(agent.sample())
    finally:
        agent.close()


def smi_sample(sc: dict[str, Any], fields: tuple[str, ...] = QUERY_FIELDS) -> dict[str, Any]:
    gpu_text, apps_text = fake_nvidia_smi(sc, fields)
    parser = SmiStreamParser(fields, 1.0, start_seq=0)
    parser.set_compute_apps(parse_csv_rows(apps_text, COMPUTE_APPS_FIELDS))
    out = []
    for line in gpu_text.splitlines():
        out += parser.feed(line, 100.0)
    out += parser.flush(100.0)
    if not out:
        fault = classify_smi_failure("\n".join(parser.unparsed))
        out = [parser.fault_sample(fault, 100.0)]
    assert len(out) == 1
    return dict(out[0])


def fake_nvidia_smi(sc: dict[str, Any], fields: tuple[str, ...]) -> tuple[str, str]:
    text, apps = fake_nvml.fake_nvidia_smi(sc, fields)
    return str(text), str(apps)


def assert_same_record(a: dict[str, Any], s: dict[str, Any]) -> None:
    """Agent sample ``a`` and smi sample ``s`` describe the same state, field by field."""
    assert list(a) == list(s)  # the same keys in the same order
    assert (a["source"], s["source"]) == ("nvml", "nvidia-smi")
    for key in ("schema", "type", "state"):
        assert a[key] == s[key], key
    assert list(a["host"]) == list(s["host"]) == [*schema.HOST_FIELDS, "errors"]
    # nvidia-smi prints the driver version with the GPU rows only
    assert s["host"]["driver_version"] == (a["host"]["driver_version"] if s["gpus"] else None)
    assert (s["host"]["driver_version"] is None) == ("driver_version" in s["host"]["errors"])
    for k in schema.HOST_FIELDS:
        if k != "driver_version":
            assert s["host"][k] is None and k in s["host"]["errors"], k
    assert len(a["gpus"]) == len(s["gpus"])
    for ga, gs in zip(a["gpus"], s["gpus"]):
        where = f"GPU {ga['index']}"
        assert list(ga) == list(gs), where
        for k in schema.GPU_IDENTITY:
            assert ga[k] == gs[k], (where, k)
        for f in schema.GPU_FIELDS:
            if f in SMI_UNKNOWN_GPU_FIELDS:
                assert gs[f] is None and f in gs["errors"], (where, f)
                continue
            assert ga[f] == gs[f], (where, f, ga[f], gs[f])
            assert type(ga[f]) is type(gs[f]), (where, f, ga[f], gs[f])
            # unknown on both sides, with a reason on both sides (never a silent 0)
            assert (f in ga["errors"]) == (f in gs["errors"]) == (ga[f] is None), (where, f)
        # not supported (n/a) on both sides: NVML_ERROR_NOT_SUPPORTED, nvidia-smi's [N/A]
        assert [f for f in ga["unsupported"] if f not in SMI_UNKNOWN_GPU_FIELDS] == gs[
            "unsupported"
        ], where
    if a["processes"] is None:
        assert s["processes"] is None
        assert "processes" in a["errors"] and "processes" in s["errors"]
        return
    assert s["processes"] is not None and len(a["processes"]) == len(s["processes"])
    for pa, ps in zip(a["processes"], s["processes"]):
        assert list(pa) == list(ps) == list(schema.PROCESS_FIELDS)
        for k in schema.PROCESS_FIELDS:
            if k in SMI_UNKNOWN_PROCESS_FIELDS:
                assert ps[k] is None, k
            else:
                assert pa[k] == ps[k], (k, pa[k], ps[k])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_agent_and_smi_give_the_same_record(name: str) -> None:
    sc = SCENARIOS[name]
    assert_same_record(agent_sample(sc), smi_sample(sc))


def test_before_r535_clocks_throttle_reasons_on_both_paths() -> None:
    # a driver without nvmlDeviceGetCurrentClocksEventReasons: the agent falls back to
    # ...ThrottleReasons, nvidia-smi is asked for clocks_throttle_reasons.active
    sc = SCENARIOS["every_reason_bit"]
    a = agent_sample(sc, missing=("nvmlDeviceGetCurrentClocksEventReasons",))
    s = smi_sample(sc, QUERY_FIELDS_LEGACY)
    assert_same_record(a, s)


def test_every_reason_bit_has_one_name_on_both_paths() -> None:
    a = agent_sample(SCENARIOS["every_reason_bit"])
    s = smi_sample(SCENARIOS["every_reason_bit"])
    expected = [[name] for _, name in agent_mod.CLOCK_EVENT_REASONS] + [
        [],
        [
            "gpu_idle",
            "applications_clocks_setting",
            "sw_power_cap",
            "hw_slowdown",
            "sync_boost",
            "sw_thermal",
            "hw_thermal",
            "hw_power_brake",
            "display_clock_setting",
            "board_limit",
            "reliability",
        ],
        ["gpu_idle", "0x800"],
    ]
    assert [g["throttle_reasons"] for g in a["gpus"]] == expected
    assert [g["throttle_reasons"] for g in s["gpus"]] == expected


def test_values_as_recorded_units() -> None:
    s = smi_sample(SCENARIOS["busy_with_processes"])
    a = agent_sample(SCENARIOS["busy_with_processes"])
    for rec in (a, s):
        g0 = rec["gpus"][0]
        # W with 2 decimals, MiB whole, MHz, degrees C, %
        assert (g0["power_w"], g0["power_limit_w"]) == (694.64, 700.0)
        assert (g0["mem_used_mib"], g0["mem_total_mib"]) == (1000, 143771)
        assert (g0["sm_clock_mhz"], g0["temp_c"], g0["util_gpu_pct"]) == (1980, 40, 100)
        assert rec["gpus"][1]["pstate"] == "P8" and rec["gpus"][1]["persistence_mode"] is False
        assert [(p["pid"], p["used_mib"]) for p in rec["processes"]] == [(653, 17604), (654, 12)]


def test_unknown_stays_none_and_shows_question_mark_on_both_paths() -> None:
    for sample in (
        agent_sample(SCENARIOS["unknown_values"]),
        smi_sample(SCENARIOS["unknown_values"]),
    ):
        g0 = sample["gpus"][0]
        assert all(g0[f] is None for f in schema.GPU_FIELDS if f not in ("mig_mode", "gpm"))
        assert g0["mig_mode"] is False  # no MIG support: off, not unknown
        assert sample["gpus"][1]["ecc_volatile_uncorrected"] is None
        assert sample["processes"] is not None
        assert sample["processes"][0]["used_mib"] is None
        state = FleetState(["h"])
        state.on_sample("h", sample, rx=0.0)
        (group,) = fleet_rows(state, now=0.0)
        r0 = group.gpus[0]
        assert (r0.util_pct, r0.mem_used_mib, r0.temp_c, r0.power_w, r0.fan_pct) == (
            None,
            None,
            None,
            None,
            None,
        )
        assert util_text(r0.util_pct).strip() == "?"
        assert num_text(r0.temp_c, "C") == "?" and throttle_text(r0.throttle_reasons) == "?"


def test_mig_gpu_on_both_paths() -> None:
    for sample in (agent_sample(SCENARIOS["mig_enabled"]), smi_sample(SCENARIOS["mig_enabled"])):
        g0, g1 = sample["gpus"]
        assert (g0["mig_mode"], g1["mig_mode"]) == (True, False)
        assert g0["util_gpu_pct"] is None and "util_gpu_pct" in g0["errors"]
        assert g0["gpm"] is None and "gpm" in g0["errors"]
        assert sample["processes"] is not None
        assert [(p["gpu_index"], p["pid"], p["used_mib"]) for p in sample["processes"]] == [
            (0, 4242, None)
        ]


def test_host_without_gpus_on_both_paths() -> None:
    sc: dict[str, Any] = {"driver_version": "580.159.04", "gpus": []}
    a, s = agent_sample(sc), smi_sample(sc)
    assert_same_record(a, s)
    for sample in (a, s):
        assert sample["state"] == "no_gpus" and sample["gpus"] == []
        assert sample["processes"] is None  # unknown, not "idle"
