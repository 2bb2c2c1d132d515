"""The typed sample (remote/telemetry/schema.py): one vocabulary with the agent, and reading.

The agent file is the single source of the names and keys; schema.py imports them and adds
static types. These tests pin that the static types say the same as the agent's tuples, and
that :func:`read_sample` reads the recorded H200 traces (tests/data/traces/, never changed)
and older spellings into complete records without touching a known value.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from remote.agent import agent as agent_mod
from remote.telemetry import schema

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"


def test_literal_types_say_what_the_agent_says() -> None:
    assert get_args(schema.HostState) == agent_mod.HOST_STATES
    assert get_args(schema.Source) == agent_mod.SOURCES
    assert get_args(schema.ProcessType) == agent_mod.PROCESS_TYPES
    assert get_args(schema.GpuField) == agent_mod.GPU_FIELDS
    assert schema.DRIVER_DOWN_STATES < set(agent_mod.HOST_STATES)
    assert schema.USABLE_STATES == {"ok", "gpu_lost"}


def test_record_types_have_the_agents_keys_in_order() -> None:
    assert list(schema.GpuRecord.__annotations__) == [
        *agent_mod.GPU_IDENTITY,
        *agent_mod.GPU_FIELDS,
        agent_mod.UNSUPPORTED_KEY,
        "errors",
    ]
    assert list(schema.HostRecord.__annotations__) == [*agent_mod.HOST_FIELDS, "errors"]
    assert list(schema.ProcessRecord.__annotations__) == list(agent_mod.PROCESS_FIELDS)
    assert list(schema.XidRecord.__annotations__) == list(agent_mod.XID_FIELDS)
    assert list(schema.GpmRecord.__annotations__) == [k for _, k in agent_mod.GPM_METRICS]
    assert list(schema.Sample.__annotations__) == list(schema.empty_sample("nvml", 0, 0.0, 1.0))
    assert list(schema.empty_gpu(3)) == list(schema.GpuRecord.__annotations__)
    assert list(schema.empty_host()) == list(schema.HostRecord.__annotations__)


def test_reason_vocabulary_is_nvmls_bits() -> None:
    # NVML nvmlClocksEventReason* (nvml.h / nvidia-ml-py 13): 0x1 .. 0x400
    assert dict(agent_mod.CLOCK_EVENT_REASONS) == {
        0x1: "gpu_idle",
        0x2: "applications_clocks_setting",
        0x4: "sw_power_cap",
        0x8: "hw_slowdown",
        0x10: "sync_boost",
        0x20: "sw_thermal",
        0x40: "hw_thermal",
        0x80: "hw_power_brake",
        0x100: "display_clock_setting",
        0x200: "board_limit",
        0x400: "reliability",
    }
    assert schema.throttle_reasons(0x0) == []
    assert schema.throttle_reasons(0x25) == ["gpu_idle", "sw_power_cap", "sw_thermal"]
    assert schema.throttle_reasons(0x1801) == ["gpu_idle", "0x800", "0x1000"]
    assert set(agent_mod.THROTTLE_REASON_ALIASES.values()) <= set(schema.THROTTLE_REASONS)
    assert set(agent_mod.SLOWDOWN_REASONS) <= set(schema.THROTTLE_REASONS)


def test_schema_imports_the_agent_without_unix_only_modules() -> None:
    # the console imports the agent file for its vocabulary: it must load where `pwd` does not
    code = (
        "import sys; sys.modules['pwd'] = None; import remote.telemetry.schema as s; "
        "print(s.SCHEMA_VERSION, len(s.HOST_STATES))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["1", "8"]


def test_normalize_throttle_reasons() -> None:
    assert schema.normalize_throttle_reasons(
        [
            "hw_power_brake_slowdown",
            "sw_thermal_slowdown",
            "gpu_idle",
            "hw_thermal_slowdown",
            "0x1000",
            "0x800",
            "sw_thermal",
        ]
    ) == ["gpu_idle", "sw_thermal", "hw_thermal", "hw_power_brake", "0x800", "0x1000"]
    assert schema.normalize_throttle_reasons(["user_defined_clocks"]) == [
        "applications_clocks_setting"
    ]


def _recorded(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out.append(rec["sample"] if "sample" in rec else rec)
    return out


@pytest.mark.parametrize("name", ["h200-idle.jsonl", "h200-load.jsonl", "h200-smi-fallback.jsonl"])
def test_recorded_traces_read_into_complete_records(name: str) -> None:
    raw = _recorded(TRACES / name)
    assert len(raw) >= 4
    for r in raw:
        before = copy.deepcopy(r)
        s = schema.read_sample(r)
        assert list(s) == list(schema.Sample.__annotations__)
        assert list(s["host"]) == list(schema.HostRecord.__annotations__)
        for g in s["gpus"]:
            assert list(g) == list(schema.GpuRecord.__annotations__)
            assert set(g["throttle_reasons"] or ()) <= set(schema.THROTTLE_REASONS)
            # every recorded value is kept as it was; readings the recording predates are
            # unknown with the reason
            g0 = before["gpus"][g["index"]]
            assert {k: g[k] for k in g0 if k != "errors"} == {
                k: v for k, v in g0.items() if k != "errors"
            }
            assert g["errors"] == {
                **g0["errors"],
                **{k: schema.NOT_RECORDED for k in schema.GPU_FIELDS if k not in g0},
            }
        for p, p0 in zip(s["processes"] or (), before["processes"] or ()):
            assert list(p) == list(schema.ProcessRecord.__annotations__)
            # the recordings predate rank/local_rank: unknown, not 0
            assert (p["rank"], p["local_rank"]) == (None, None)
            assert {k: p[k] for k in p0} == p0


def test_recorded_values_as_the_readme_states() -> None:
    load = [schema.read_sample(r) for r in _recorded(TRACES / "h200-load.jsonl")]
    g0 = load[0]["gpus"][0]
    assert (g0["mem_used_mib"], g0["power_limit_w"], g0["throttle_reasons"]) == (
        17612,
        700.0,
        ["sw_power_cap"],
    )
    assert g0["fan_pct"] is None and g0["errors"]["fan_pct"] == "Not Supported"
    smi = [schema.read_sample(r) for r in _recorded(TRACES / "h200-smi-fallback.jsonl")]
    assert {s["source"] for s in smi} == {"nvidia-smi"}
    assert smi[0]["gpus"][1]["throttle_reasons"] == ["gpu_idle"]


def test_not_supported_is_told_apart_from_unknown_in_recordings() -> None:
    # the H200 SXM has no fan: NVML said Not Supported (nvidia-smi [N/A]); that is the only
    # reading the recordings' H200s do not support (tests/data/traces/README.md)
    for name in ("h200-idle.jsonl", "h200-load.jsonl", "h200-smi-fallback.jsonl"):
        for s in map(schema.read_sample, _recorded(TRACES / name)):
            for g in s["gpus"]:
                assert g["unsupported"] == ["fan_pct"], name
                assert "fan_pct" in g["unsupported"]
                assert "temp_c" not in g["unsupported"]
    # a reading that failed otherwise stays unknown, not "not supported"
    r = _recorded(TRACES / "h200-idle.jsonl")[0]
    r["gpus"][0]["errors"] = {"fan_pct": "Unknown Error"}
    r["gpus"][1]["errors"] = {"fan_pct": "Insufficient Permissions"}
    g0, g1 = schema.read_sample(r)["gpus"]
    assert g0["unsupported"] == g1["unsupported"] == []
    # the recordings predate the max clocks: unknown, with the reason
    assert g0["sm_clock_max_mhz"] is None
    assert g0["errors"]["sm_clock_max_mhz"] == schema.NOT_RECORDED


def test_older_smi_spellings_and_missing_keys_are_normalised_on_read() -> None:
    old = {
        "schema": 1,
        "type": "sample",
        "source": "nvidia-smi",
        "seq": 3,
        "host_time": 1.0,
        "interval_s": 1.0,
        "state": "ok",
        "state_detail": None,
        "host": {"errors": {}},
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "name": "NVIDIA H200",
                "pci_bus_id": "x",
                "lost": False,
                "util_gpu_pct": 0,
                "throttle_reasons": [
                    "sw_thermal_slowdown",
                    "hw_power_brake_slowdown",
                    "sw_power_cap",
                ],
                "errors": {},
            }
        ],
        "processes": [
            {
                "gpu_index": 0,
                "gpu_uuid": "GPU-a",
                "pid": 5,
                "used_mib": None,
                "type": "compute",
                "user": None,
                "command": None,
                "container_id": None,
            }
        ],
        "xid_events": [],
        "errors": {},
    }
    s = schema.read_sample(old)
    g = s["gpus"][0]
    assert g["throttle_reasons"] == ["sw_power_cap", "sw_thermal", "hw_power_brake"]
    assert g["util_gpu_pct"] == 0 and g["temp_c"] is None and g["gpm"] is None
    assert s["host"]["hostname"] is None
    # readings added to the schema since the record was written: unknown, with why
    assert s["host"]["errors"] == {k: schema.NOT_RECORDED for k in schema.HOST_FIELDS_ADDED}
    assert s["processes"] is not None and s["processes"][0]["rank"] is None
    assert s is old  # read in place: one object, no copy per sample


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema": 2}, "schema"),
        ({"type": "hello"}, "type"),
        ({"state": "fine"}, "state"),
        ({"gpus": None}, "gpus"),
        ({"source": "dcgm"}, "source"),
    ],
)
def test_read_sample_rejects_what_is_not_a_sample(change: dict[str, Any], field: str) -> None:
    s = dict(schema.empty_sample("nvml", 0, 0.0, 1.0), **change)
    with pytest.raises(ValueError, match=f"field `{field}`"):
        schema.read_sample(s)
    with pytest.raises(ValueError, match="JSON object"):
        schema.read_sample([1, 2])
