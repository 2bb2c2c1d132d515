"""Tests of the host agent (remote/agent/agent.py) without a GPU, and replays of real traces.

The agent runs against ``tests/fakes/fake_nvml.py`` (FakeNVML, a stand-in for pynvml driven by
a scenario): in process (``Agent(FakeNVML(scenario))``) to check exact values, and as a real
subprocess (``--pynvml-dir`` pointing at a ``pynvml.py`` shim that becomes the fake) to check
the process contract: one JSON line per interval, exit on stdin EOF, exit status 3 without NVML
where nvidia-smi exists (without either: tests/unit/test_agent_no_driver.py).

The traces under tests/data/traces/ were recorded on 2 H200s (driver 580, NVML through the
repo's nvidia-ml-py) by scripts/device/record_traces.sh: the agent's lines idle and with a bf16
matmul loop on GPU 0, and nvidia-smi polled at the moment of each line. See that folder's
README for the numbers.
"""

from __future__ import annotations

import ast
import csv
import ctypes.util
import importlib.util
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from remote.telemetry import schema

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "remote" / "agent"
FAKES_DIR = ROOT / "tests" / "fakes"
AGENT_PY = AGENT_DIR / "agent.py"
TRACES = ROOT / "tests" / "data" / "traces"
MIB = 1 << 20


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


agent_mod = _load("gpuconsole_agent_under_test", AGENT_PY)
fake_nvml = _load("fake_nvml", FAKES_DIR / "fake_nvml.py")
FakeNVML = fake_nvml.FakeNVML

ID_A = "3f0b6c3fbe2c4e0a9d4bd1c6a8f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d"
ID_B = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9"


def scenario_two_gpus(**over: Any) -> dict[str, Any]:
    """GPU 0 busy (processes, GPM), GPU 1 idle without a fan, GPM or MIG."""
    sc: dict[str, Any] = {
        "driver_version": "580.159.04",
        "cuda_version": 13000,
        "nvml_version": "13.580.159.04",
        "gpus": [
            {
                "uuid": "GPU-aaaa",
                "pci_bus_id": "00000000:19:00.0",
                "util_gpu": 97,
                "util_mem": 41,
                "mem_used": 17000 * MIB,
                "mem_total": 143771 * MIB,
                "mem_reserved": 512 * MIB,
                "temp": 55,
                "power_mw": 512345,
                "power_limit_mw": 700000,
                "sm_clock": 1980,
                "mem_clock": 3201,
                "fan": 30,
                "pstate": 0,
                "clock_reasons": 0x4 | 0x20,
                "ecc_uncorrected": 2,
                "remapped_rows": [0, 0, 1, 0],
                "persistence": 1,
                "mig": [0, 0],
                "gpm": {"2": 91.5, "3": 40.25, "5": 63.0, "10": 22.5},
                "procs": [{"pid": 4242, "used_mib": 16896}, {"pid": 4243, "used_mib": None}],
            },
            {
                "uuid": "GPU-bbbb",
                "pci_bus_id": "00000000:2A:00.0",
                "util_gpu": 0,
                "util_mem": 0,
                "mem_used": 0,
                "temp": 31,
                "power_mw": 74000,
                "sm_clock": 345,
                "pstate": 8,
                "clock_reasons": 0x1,
                "persistence": 0,
                "gpm_supported": False,
                "fail": {
                    "nvmlDeviceGetFanSpeed": "NotSupported",
                    "nvmlDeviceGetMigMode": "NotSupported",
                },
            },
        ],
    }
    sc.update(over)
    return sc


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A fake /proc: host files plus PIDs 4242 (in a container, uid 0) and 4243 (uid 12345)."""
    root = tmp_path / "proc"
    root.mkdir()
    (root / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 1 1 1\n")
    (root / "meminfo").write_text(
        "MemTotal:       65536000 kB\nMemFree:  1000 kB\nMemAvailable:   49152000 kB\n"
        "SwapTotal:       8388608 kB\nSwapFree:        7340032 kB\n"
    )
    (root / "vmstat").write_text("nr_free_pages 1000\npswpin 500\npswpout 700\n")
    (root / "uptime").write_text("12345.67 99999.00\n")
    p = root / "4242"
    p.mkdir()
    (p / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    (p / "cmdline").write_bytes(b"python\0train.py\0--lr\0" + b"x" * 300 + b"\0")
    (p / "cgroup").write_text(f"0::/system.slice/docker-{ID_A}.scope\n")
    (p / "environ").write_bytes(b"PATH=/usr/bin\0RANK=5\0LOCAL_RANK=1\0WORLD_SIZE=8\0")
    q = root / "4243"
    q.mkdir()
    (q / "status").write_text("Name:\tjob\nUid:\t12345\t12345\t12345\t12345\n")
    (q / "cmdline").write_bytes(b"")
    (q / "comm").write_text("job\n")
    (q / "cgroup").write_text("0::/user.slice/user-12345.slice/session-3.scope\n")
    return root


class TickingClock:
    """Monotonic seconds that advance ``step`` at every read (a sample's GPM interval is then
    never too short, as between two real samples a second apart)."""

    def __init__(self, step: float = 1.0) -> None:
        self.t, self.step = 1000.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def make(
    sc: dict[str, Any],
    proc: Path | None = None,
    slow_every: int = 10,
    clock: Any = None,
) -> tuple[Any, Any]:
    """(agent, fake) for a scenario; the agent's clock ticks 1 s a read unless given."""
    fake = FakeNVML(sc)
    kw: dict[str, Any] = {"slow_every": slow_every, "clock": clock or TickingClock()}
    if proc is not None:
        kw["proc_root"] = str(proc)
    return agent_mod.Agent(fake, 1.0, **kw), fake


# ---------------------------------------------------------------------------------------------
# schema conformance

HOST_KEYS = [
    "hostname",
    "cpu_pct",
    "load1",
    "load5",
    "load15",
    "mem_used_mib",
    "mem_total_mib",
    "swap_used_mib",
    "swap_total_mib",
    "swap_pages_per_s",
    "uptime_s",
    "driver_version",
    "cuda_version",
    "nvml_version",
    "errors",
]
PROC_KEYS = ["gpu_index", "gpu_uuid", "pid", "used_mib", "type", "user", "command", "container_id"]
XID_KEYS = ["time", "gpu_index", "pci_bus_id", "xid", "pid", "detail"]
GPU_TYPES: dict[str, tuple[type, ...]] = {
    "util_gpu_pct": (int,),
    "util_mem_pct": (int,),
    "mem_used_mib": (int,),
    "mem_total_mib": (int,),
    "temp_c": (int,),
    "power_w": (float,),
    "power_limit_w": (float,),
    "sm_clock_mhz": (int,),
    "mem_clock_mhz": (int,),
    "sm_clock_max_mhz": (int,),
    "mem_clock_max_mhz": (int,),
    "pcie_gen": (int,),
    "pcie_gen_max": (int,),
    "pcie_width": (int,),
    "pcie_width_max": (int,),
    "fan_pct": (int,),
    "pstate": (str,),
    "throttle_reasons": (list,),
    "ecc_volatile_uncorrected": (int,),
    "remapped_rows_pending": (bool,),
    "persistence_mode": (bool,),
    "mig_mode": (bool,),
    "gpm": (dict,),
}


def check_schema(s: dict[str, Any]) -> None:
    """Assert a sample has exactly the keys and value types of remote/telemetry/schema.py."""
    assert list(s) == list(schema.empty_sample("nvml", 0, 0.0, 1.0))
    assert s["schema"] == schema.SCHEMA_VERSION and s["type"] == "sample"
    assert s["source"] == "nvml"
    assert s["state"] in schema.HOST_STATES
    assert s["state_detail"] is None or isinstance(s["state_detail"], str)
    assert (s["state"] == "ok") == (s["state_detail"] is None)
    assert list(s["host"]) == HOST_KEYS
    for k, v in s["host"].items():
        if v is None:
            assert k in s["host"]["errors"], k  # unknown has a reason
    for g in s["gpus"]:
        assert list(g) == list(schema.empty_gpu(0)), list(g)
        assert isinstance(g["lost"], bool)
        for f in schema.GPU_FIELDS:
            if g[f] is None:
                assert f in g["errors"] or "handle" in g["errors"], (f, g["errors"])
            else:
                assert isinstance(g[f], GPU_TYPES[f]), (f, g[f])
                assert not (isinstance(g[f], bool) and GPU_TYPES[f] == (int,)), f
        if g["gpm"] is not None:
            assert list(g["gpm"]) == [
                "sm_activity_pct",
                "sm_occupancy_pct",
                "tensor_activity_pct",
                "dram_bw_util_pct",
            ]
    if s["processes"] is None:
        assert "processes" in s["errors"]
    else:
        for p in s["processes"]:
            # traces recorded before the rank fields existed lack the last two keys
            assert list(p) in (PROC_KEYS, [*PROC_KEYS, "rank", "local_rank"])
            assert p["type"] in ("compute", "graphics")
    for x in s["xid_events"]:
        assert list(x) == XID_KEYS
    json.dumps(s, allow_nan=False)


def test_agent_gpu_fields_match_schema() -> None:
    assert agent_mod.GPU_FIELDS == schema.GPU_FIELDS
    assert agent_mod.SCHEMA_VERSION == schema.SCHEMA_VERSION


# ---------------------------------------------------------------------------------------------
# exact values from the fake


def test_two_gpus_exact_values(proc_root: Path) -> None:
    agent, _ = make(scenario_two_gpus(), proc_root)
    (proc_root / "stat").write_text("cpu  160 0 140 900 0 0 0 0 0 0\n")  # +100 busy, +100 idle
    s = agent.sample()
    check_schema(s)
    assert (s["seq"], s["interval_s"], s["state"], s["state_detail"]) == (0, 1.0, "ok", None)
    h = s["host"]
    assert h["cpu_pct"] == 50.0
    assert (h["mem_total_mib"], h["mem_used_mib"]) == (64000, 16000)
    assert (h["swap_total_mib"], h["swap_used_mib"]) == (8192, 1024)
    assert h["swap_pages_per_s"] == 0.0  # no page swapped since the agent started
    assert h["uptime_s"] == 12345.67
    assert (h["driver_version"], h["cuda_version"], h["nvml_version"]) == (
        "580.159.04",
        "13.0",
        "13.580.159.04",
    )
    assert h["errors"] == {}
    g0, g1 = s["gpus"]
    assert g0 == {
        "index": 0,
        "uuid": "GPU-aaaa",
        "name": "NVIDIA H200",
        "pci_bus_id": "00000000:19:00.0",
        "lost": False,
        "util_gpu_pct": 97,
        "util_mem_pct": 41,
        "mem_used_mib": 17000,
        "mem_total_mib": 143771,
        "temp_c": 55,
        "power_w": 512.35,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "sm_clock_max_mhz": 1980,
        "mem_clock_max_mhz": 3201,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "fan_pct": 30,
        "pstate": "P0",
        "throttle_reasons": ["sw_power_cap", "sw_thermal"],
        "ecc_volatile_uncorrected": 2,
        "remapped_rows_pending": True,
        "persistence_mode": True,
        "mig_mode": False,
        "gpm": {
            "sm_activity_pct": 91.5,
            "sm_occupancy_pct": 40.25,
            "tensor_activity_pct": 63.0,
            "dram_bw_util_pct": 22.5,
        },
        "unsupported": [],
        "errors": {},
    }
    assert g1["fan_pct"] is None and g1["errors"]["fan_pct"] == "Not Supported"
    assert g1["mig_mode"] is False and "mig_mode" not in g1["errors"]  # NotSupported -> false
    assert g1["gpm"] is None and "GPM not supported" in g1["errors"]["gpm"]
    assert set(g1["errors"]) == {"fan_pct", "gpm"}
    # NVML_ERROR_NOT_SUPPORTED: the GPU has no such reading (n/a), not an unknown one
    assert g1["unsupported"] == ["fan_pct", "gpm"]
    assert (g1["pstate"], g1["throttle_reasons"], g1["persistence_mode"]) == (
        "P8",
        ["gpu_idle"],
        False,
    )
    assert (g1["util_gpu_pct"], g1["mem_used_mib"], g1["temp_c"]) == (0, 0, 31)
    assert s["processes"] == [
        {
            "gpu_index": 0,
            "gpu_uuid": "GPU-aaaa",
            "pid": 4242,
            "used_mib": 16896,
            "type": "compute",
            "user": "root",
            "command": "python train.py --lr " + "x" * 176 + "...",
            "container_id": ID_A,
            "rank": 5,
            "local_rank": 1,
        },
        {
            "gpu_index": 0,
            "gpu_uuid": "GPU-aaaa",
            "pid": 4243,
            "used_mib": None,
            "type": "compute",
            "user": "12345",
            "command": "[job]",
            "container_id": None,
            "rank": None,
            "local_rank": None,
        },
    ]
    assert len(s["processes"][0]["command"]) == 200
    assert s["xid_events"] == [] and s["errors"] == {}
    assert agent.sample()["seq"] == 1


def test_real_proc_for_own_pid() -> None:
    me = os.getpid()
    agent, _ = make(scenario_two_gpus(gpus=[{"procs": [{"pid": me, "used_mib": 10}]}]))
    (p,) = agent.sample()["processes"]
    assert p["user"] == pwd.getpwuid(os.getuid()).pw_name
    cmdline = Path(f"/proc/{me}/cmdline").read_bytes().split(b"\0")
    assert p["command"].startswith(cmdline[0].decode())
    gone = agent_mod.ProcessInfoReader().get(2**22 + 12345)
    assert gone == (None, None, None)


def test_gpm_uses_two_distinct_samples_every_interval() -> None:
    agent, fake = make(scenario_two_gpus())
    for i in range(3):  # FakeNVML rejects a metrics call whose samples are not prev -> new
        fake.set_gpu(0, gpm={"2": 10.0 + i, "3": 5.0, "5": 1.0, "10": 2.0})
        g0 = agent.sample()["gpus"][0]
        assert g0["gpm"]["sm_activity_pct"] == 10.0 + i, g0["errors"]
    assert fake.calls["nvmlGpmSampleGet"] == 4  # one at start, one per sample
    assert fake.calls["nvmlGpmSampleAlloc"] == 2  # per supported GPU, reused


def test_gpm_first_sample_at_once_is_unknown_not_zero() -> None:
    """GPM reads two samples apart; the first emitted sample comes as soon as NVML answers,
    before 100 ms have passed: unknown with the reason, then real from the next sample."""
    clock = TickingClock(step=0.0)
    agent, fake = make(scenario_two_gpus(), clock=clock)
    g0 = agent.sample()["gpus"][0]
    assert g0["gpm"] == dict.fromkeys(
        ["sm_activity_pct", "sm_occupancy_pct", "tensor_activity_pct", "dram_bw_util_pct"]
    )
    assert g0["errors"]["gpm"] == agent_mod.GPM_FIRST
    assert fake.calls["nvmlGpmSampleGet"] == 1  # setup's only (GPU 1 has no GPM)
    clock.t += 0.05  # still too soon: the start sample is kept
    assert agent.sample()["gpus"][0]["gpm"]["sm_activity_pct"] is None
    clock.t += 0.06  # 110 ms after the start sample
    g0 = agent.sample()["gpus"][0]
    assert g0["gpm"]["sm_activity_pct"] == 91.5 and "gpm" not in g0["errors"]
    assert fake.calls["nvmlGpmSampleGet"] == 2


FIRST_SAMPLES = Path(__file__).parents[1] / "data/device/agent-first-samples-h100"
FIRST_SAMPLES_H200 = Path(__file__).parents[1] / "data/device/agent-first-samples-h200"


def test_recorded_first_samples_on_a_loaded_hopper_gpu() -> None:
    """The device recording (README there): a matmul load on an H100, the agent taking its
    first sample at once: its GPM is unknown with the reason, every later one reads the load."""
    lines = (FIRST_SAMPLES / "first-samples.jsonl").read_text().splitlines()
    samples = [json.loads(ln) for ln in lines]
    assert [s["seq"] for s in samples] == [0, 1, 2, 3]
    for s in samples:
        check_schema(s)
    first = samples[0]["gpus"][0]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["util_gpu_pct"] == 100
    assert set(first["gpm"].values()) == {None}
    assert first["errors"]["gpm"] == agent_mod.GPM_FIRST
    for s in samples[1:]:
        g = s["gpus"][0]
        assert g["gpm"]["sm_activity_pct"] > 90 and g["gpm"]["tensor_activity_pct"] > 90, g
        assert "gpm" not in g["errors"]


def test_gpm_metric_error_is_null_with_reason() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][0]["gpm_metric_errors"] = {"10": "NotSupported"}
    agent, _ = make(sc)
    g0 = agent.sample()["gpus"][0]
    assert g0["gpm"]["dram_bw_util_pct"] is None
    assert g0["gpm"]["sm_activity_pct"] == 91.5
    assert g0["errors"] == {"gpm.dram_bw_util_pct": "Not Supported"}


def test_mig_enabled_skips_gpm_with_reason() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][0]["mig"] = [1, 1]
    g0 = make(sc)[0].sample()["gpus"][0]
    assert g0["mig_mode"] is True and g0["gpm"] is None and "MIG" in g0["errors"]["gpm"]


def test_unsupported_field_is_not_asked_again_until_slow_refresh() -> None:
    agent, fake = make(scenario_two_gpus(), slow_every=5)
    for _ in range(5):
        assert agent.sample()["gpus"][1]["errors"]["fan_pct"] == "Not Supported"
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 5 + 1  # GPU 0 each time, GPU 1 once
    agent.sample()  # seq 5: slow refresh clears the memo
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 6 + 2


def test_slow_fields_read_once_per_n_samples() -> None:
    agent, fake = make(scenario_two_gpus(), slow_every=10)
    for _ in range(10):
        agent.sample()
    assert fake.calls["nvmlDeviceGetName"] == 2  # at start, 2 GPUs
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 2
    assert fake.calls["nvmlSystemGetDriverVersion"] == 1
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 20
    fake.set_gpu(0, ecc_uncorrected=7)
    assert agent.sample()["gpus"][0]["ecc_volatile_uncorrected"] == 7  # seq 10 refreshes
    assert fake.calls["nvmlDeviceGetName"] == 4
    assert fake.calls["nvmlInitWithFlags"] == 1
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2


def test_unexpected_exception_in_one_field_spares_the_rest() -> None:
    agent, fake = make(scenario_two_gpus())

    def broken(h: Any) -> int:
        raise RuntimeError("boom")

    fake.nvmlDeviceGetPowerUsage = broken
    s = agent.sample()
    check_schema(s)
    for g in s["gpus"]:
        assert g["power_w"] is None and g["errors"]["power_w"] == "RuntimeError: boom"
        assert g["temp_c"] is not None
    assert s["state"] == "ok"


# ---------------------------------------------------------------------------------------------
# lost GPUs


def test_gpu_lost_at_index_2_others_report() -> None:
    sc = scenario_two_gpus()
    sc["gpus"].append({"handle_error": "GpuIsLost"})
    agent, _ = make(sc)
    s = agent.sample()
    check_schema(s)
    assert s["state"] == "gpu_lost"
    assert s["state_detail"] == "GPU 2 is lost (GPU is lost)"
    g2 = s["gpus"][2]
    assert g2["index"] == 2 and g2["lost"] is True
    assert all(g2[f] is None for f in schema.GPU_FIELDS)
    assert g2["errors"] == {"handle": "GPU is lost"}
    assert s["gpus"][0]["util_gpu_pct"] == 97 and s["gpus"][0]["lost"] is False
    assert [p["pid"] for p in s["processes"]] == [4242, 4243]
    assert "processes" not in s["errors"]


def test_gpu_lost_mid_run_names_bus_id() -> None:
    agent, fake = make(scenario_two_gpus())
    assert agent.sample()["state"] == "ok"
    fake.lose_gpu(1)
    for _ in range(2):
        s = agent.sample()
        check_schema(s)
        assert s["state"] == "gpu_lost"
        assert s["state_detail"] == "GPU 1 (00000000:2A:00.0) is lost (GPU is lost)"
        assert s["gpus"][1]["lost"] is True
        assert s["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"  # last known
        assert s["gpus"][0]["util_gpu_pct"] == 97 and not s["gpus"][0]["lost"]
        assert s["processes"] is not None and len(s["processes"]) == 2


def test_lost_gpu_that_returns_is_picked_up_at_slow_refresh() -> None:
    agent, fake = make(scenario_two_gpus(), slow_every=4)
    agent.sample()
    fake.lose_gpu(0)
    assert agent.sample()["gpus"][0]["lost"] is True
    fake.lost.clear()
    assert agent.sample()["state"] == "gpu_lost"  # seq 2: handles are not asked again yet
    assert agent.sample()["gpus"][0]["lost"] is True
    s = agent.sample()  # seq 4: slow refresh asks for the handle, sets GPM up again
    assert s["state"] == "ok" and s["gpus"][0]["lost"] is False
    assert s["gpus"][0]["gpm"]["sm_activity_pct"] == 91.5
    assert len(s["processes"]) == 2


def test_a_lost_gpus_gpm_samples_are_freed() -> None:
    """A GPU with GPM holds two samples (GPU 0 here; GPU 1 has no GPM); losing it frees
    them, so a GPU that comes and goes holds two at a time, not two more per return."""
    agent, fake = make(scenario_two_gpus(), slow_every=4)
    agent.sample()

    def held() -> int:
        return int(fake.calls["nvmlGpmSampleAlloc"] - fake.calls["nvmlGpmSampleFree"])

    assert held() == 2
    for _ in range(3):  # lost, then back at the next slow refresh
        fake.lose_gpu(0)
        agent.sample()
        assert held() == 0
        fake.lost.clear()
        while agent.sample()["gpus"][0]["lost"]:
            pass
        assert held() == 2
    assert fake.calls["nvmlGpmSampleAlloc"] == 8
    agent.close()
    assert held() == 0


def test_close_at_the_process_end_leaves_nvml_to_the_driver() -> None:
    agent, fake = make(scenario_two_gpus())
    agent.sample()
    agent.sample()
    before = dict(fake.calls)
    agent.close(release_nvml=False)
    assert dict(fake.calls) == before  # no GPM free, no event set free, no nvmlShutdown
    assert not agent.initialized
    agent2, fake2 = make(scenario_two_gpus())
    agent2.sample()
    agent2.close()
    assert fake2.calls["nvmlShutdown"] == 1


def test_a_failed_gpm_set_up_frees_what_it_allocated() -> None:
    fake = FakeNVML(scenario_two_gpus())
    fake.missing.add("nvmlGpmSampleGet")  # the set-up's first reading fails
    agent = agent_mod.Agent(fake, 1.0, slow_every=10, clock=TickingClock())
    s = agent.sample()
    assert s["gpus"][0]["gpm"] is None
    assert fake.calls["nvmlGpmSampleAlloc"] == fake.calls["nvmlGpmSampleFree"] == 2


def test_other_handle_error_is_state_error() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][1]["handle_error"] = "NoPermission"
    s = make(sc)[0].sample()
    assert s["state"] == "error"
    assert s["state_detail"] == (
        "GPU 1: nvmlDeviceGetHandleByIndex failed (Insufficient Permissions)"
    )
    assert s["gpus"][1]["lost"] is False and s["gpus"][0]["util_gpu_pct"] == 97


# ---------------------------------------------------------------------------------------------
# versioned functions fall back to older symbols


def test_process_list_falls_back_v3_to_v2() -> None:
    agent, fake = make(scenario_two_gpus(missing=["nvmlDeviceGetComputeRunningProcesses_v3"]))
    for _ in range(3):
        s = agent.sample()
    assert [p["pid"] for p in s["processes"]] == [4242, 4243]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1  # learned once
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 6
    assert agent._v["compute_procs"].used == "v2"


def test_process_list_falls_back_to_v1_through_ctypes() -> None:
    missing = [
        f"nvmlDeviceGet{k}RunningProcesses_v{n}" for k in ("Compute", "Graphics") for n in (2, 3)
    ]
    agent, fake = make(scenario_two_gpus(missing=missing))
    s = agent.sample()
    assert agent._v["compute_procs"].used == "v1"
    assert [(p["pid"], p["used_mib"]) for p in s["processes"]] == [(4242, 16896), (4243, None)]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 3  # size, fill (GPU 0); GPU 1


def test_memory_temperature_and_reasons_fall_back() -> None:
    sc = scenario_two_gpus(
        missing=[
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlSystemGetCudaDriverVersion_v2",
        ]
    )
    agent, _ = make(sc)
    s = agent.sample()
    g0 = s["gpus"][0]
    assert g0["mem_used_mib"] == 17000 + 512  # v1 counts driver-reserved memory as used
    assert g0["temp_c"] == 55
    assert g0["throttle_reasons"] == ["sw_power_cap", "sw_thermal"]
    assert s["host"]["cuda_version"] == "13.0"
    assert {k: v.used for k, v in agent._v.items()} == {
        "init": "flags",
        "memory": "v1",
        "temperature": "v1",
        "clock_reasons": "throttle",
        "compute_procs": "v3",
        "graphics_procs": "v3",
        "cuda_version": "v1",
    }


def test_no_version_left_is_function_not_found() -> None:
    sc = scenario_two_gpus(
        missing=[
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ]
    )
    g0 = make(sc)[0].sample()["gpus"][0]
    assert g0["throttle_reasons"] is None
    assert g0["errors"] == {"throttle_reasons": "Function Not Found"}


# ---------------------------------------------------------------------------------------------
# processes unreadable


def test_process_list_unreadable_is_null_never_empty() -> None:
    sc = scenario_two_gpus()
    for g in sc["gpus"]:
        g.setdefault("fail", {})["nvmlDeviceGetComputeRunningProcesses_v3"] = "NoPermission"
    s = make(sc)[0].sample()
    check_schema(s)
    assert s["processes"] is None
    assert s["errors"]["processes"] == (
        "GPU 0: Insufficient Permissions; GPU 1: Insufficient Permissions"
    )


def test_one_gpu_process_list_unreadable_keeps_the_others() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][1]["procs"] = [{"pid": 777, "used_mib": 5}]
    sc["gpus"][0]["fail"] = {"nvmlDeviceGetComputeRunningProcesses_v3": "Unknown"}
    s = make(sc)[0].sample()
    assert [p["pid"] for p in s["processes"]] == [777]
    assert s["errors"]["processes"] == "GPU 0: Unknown Error"
    assert s["gpus"][0]["errors"]["processes"] == "Unknown Error"


def test_graphics_processes_are_typed() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][1]["graphics_procs"] = [{"pid": 555, "used_mib": 64}]
    s = make(sc)[0].sample()
    assert [(p["gpu_index"], p["pid"], p["type"]) for p in s["processes"]] == [
        (0, 4242, "compute"),
        (0, 4243, "compute"),
        (1, 555, "graphics"),
    ]


# ---------------------------------------------------------------------------------------------
# init failures and host states


@pytest.mark.parametrize(
    ("init_error", "state", "words"),
    [
        ("LibraryNotFound", "nvml_unavailable", "libnvidia-ml.so.1"),
        ("OSError", "nvml_unavailable", "cannot open shared object"),
        ("DriverNotLoaded", "driver_unreachable", "Driver Not Loaded"),
        ("LibRmVersionMismatch", "version_mismatch", "version mismatch"),
        ("Unknown", "error", "nvmlInit failed: Unknown Error"),
    ],
)
def test_init_failures(init_error: str, state: str, words: str) -> None:
    agent, _ = make(scenario_two_gpus(init_error=init_error))
    s = agent.sample()
    check_schema(s)
    assert s["state"] == state and words in s["state_detail"]
    assert s["gpus"] == [] and s["processes"] is None
    assert s["errors"]["processes"] == s["state_detail"]
    assert s["host"]["driver_version"] is None and "driver_version" in s["host"]["errors"]
    assert s["host"]["mem_total_mib"] is not None  # host fields still read


def test_pynvml_import_failure_is_nvml_unavailable() -> None:
    agent = agent_mod.Agent(None, 1.0, import_error="ModuleNotFoundError: No module 'pynvml'")
    s = agent.sample()
    check_schema(s)
    assert s["state"] == "nvml_unavailable" and "pynvml" in s["state_detail"]


def test_driver_comes_back_after_retry() -> None:
    agent, fake = make(scenario_two_gpus(init_error="DriverNotLoaded"), slow_every=3)
    assert [agent.sample()["state"] for _ in range(3)] == ["driver_unreachable"] * 3
    fake.scenario["init_error"] = None
    s = agent.sample()  # seq 3: retries nvmlInit
    assert s["state"] == "ok" and s["gpus"][0]["util_gpu_pct"] == 97


def test_zero_gpus_is_a_valid_sample() -> None:
    s = make({"gpus": []})[0].sample()
    check_schema(s)
    assert s["state"] == "no_gpus" and s["gpus"] == []
    assert s["processes"] is None  # unknown, not "idle" (as the nvidia-smi fallback says)
    assert s["errors"]["processes"] == "the NVIDIA driver enumerates 0 GPUs"
    assert s["state_detail"] == "the NVIDIA driver enumerates 0 GPUs"


# ---------------------------------------------------------------------------------------------
# Xid events


def test_xid_events_reported_once() -> None:
    agent, fake = make(scenario_two_gpus(xid_events=[{"gpu": 1, "xid": 79}]))
    first = agent.sample()  # registers nothing: NVML delivers no event from before it
    assert first["xid_events"] == [] and "xid" not in first["errors"]
    assert fake.calls["nvmlEventSetCreate"] == fake.calls["nvmlDeviceRegisterEvents"] == 0
    s = agent.sample()  # registered at its start; the fake's pending event comes now
    (x,) = s["xid_events"]
    assert x["time"] == pytest.approx(time.time(), abs=5)
    assert {k: v for k, v in x.items() if k != "time"} == {
        "gpu_index": 1,
        "pci_bus_id": "00000000:2A:00.0",
        "xid": 79,
        "pid": None,
        "detail": "GPU has fallen off the bus",
    }
    assert agent.sample()["xid_events"] == []
    fake.inject_xid(0, 48)
    fake.inject_xid(0, 31)
    assert [(x["gpu_index"], x["xid"]) for x in agent.sample()["xid_events"]] == [(0, 48), (0, 31)]
    assert fake.calls["nvmlDeviceRegisterEvents"] == 2


def test_a_gpu_back_from_lost_is_registered_for_xid_events_again() -> None:
    """GPU 0 is lost (its registration goes with its handle) and back at the slow refresh:
    its new handle is registered on the same event set, and its next Xid is reported."""
    agent, fake = make(scenario_two_gpus(), slow_every=4)
    agent.sample()
    agent.arm_xid()
    assert fake.calls["nvmlDeviceRegisterEvents"] == 2
    fake.lose_gpu(0)
    agent.sample()
    fake.lost.clear()
    while agent.sample()["gpus"][0]["lost"]:
        pass
    assert fake.calls["nvmlDeviceRegisterEvents"] == 3
    assert fake.calls["nvmlEventSetCreate"] == 1
    fake.inject_xid(0, 79)
    s = agent.sample()
    assert [(x["gpu_index"], x["xid"]) for x in s["xid_events"]] == [(0, 79)]
    assert "xid" not in s["errors"]


def test_xid_registration_refused_goes_to_errors() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][1]["fail"]["nvmlDeviceRegisterEvents"] = "NotSupported"
    sc["xid_events"] = [{"gpu": 0, "xid": 13}]
    agent = make(sc)[0]
    assert "xid" not in agent.sample()["errors"]  # the first sample registers nothing
    s = agent.sample()
    assert s["errors"]["xid"] == "Xid events not registered: GPU 1: Not Supported"
    assert [x["xid"] for x in s["xid_events"]] == [13]  # GPU 0 still watched
    agent = make(scenario_two_gpus(event_set_error="NoPermission"))[0]
    agent.arm_xid()  # as the main loop does once the first sample is out
    s = agent.sample()
    assert s["errors"] == {"xid": "nvmlEventSetCreate: Insufficient Permissions"}
    assert s["state"] == "ok"


# ---------------------------------------------------------------------------------------------
# helpers: container ids, clock reasons, CUDA version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"12:memory:/docker/{ID_A}\n11:cpu,cpuacct:/docker/{ID_A}\n", ID_A),
        (f"1:name=systemd:/docker/{ID_A}\n", ID_A),
        (f"0::/system.slice/docker-{ID_A}.scope\n", ID_A),
        (f"0::/docker/{ID_A}\n", ID_A),
        (f"0::/docker-{ID_A}.scope\n", ID_A),
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1a2b3c_4d5e_6f70"
            f"_8192_a3b4c5d6e7f8.slice/cri-containerd-{ID_B}.scope\n",
            ID_B,
        ),
        (f"11:cpuset:/kubepods/burstable/pod5c7a1b2c-3d4e-5f60-7182-93a4b5c6d7e8/{ID_B}\n", ID_B),
        (f"0::/machine.slice/libpod-{ID_B}.scope/container\n", ID_B),
        (f"0::/system.slice/crio-{ID_B}.scope\n", ID_B),
        ("12:pids:/user.slice/user-1000.slice/session-2.scope\n0::/user.slice\n", None),
        ("0::/\n", None),
        ("0::/init.scope\n", None),
        ("0::/system.slice/containerd.service\n", None),
        (f"0::/system.slice/docker-{ID_A}0.scope\n", None),  # 65 hex digits: not an id
        ("", None),
    ],
)
def test_container_id_from_cgroup(text: str, expected: str | None) -> None:
    assert agent_mod.parse_container_id(text) == expected


def test_clock_reason_names_and_cuda_version() -> None:
    assert agent_mod.decode_clock_reasons(0) == []
    assert agent_mod.decode_clock_reasons(0x1FF) == [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clock_setting",
    ]
    assert agent_mod.decode_clock_reasons(0x1000 | 0x80) == ["hw_power_brake", "0x1000"]
    assert agent_mod.format_cuda_version(12080) == "12.8"
    assert agent_mod.format_cuda_version(13000) == "13.0"
    assert agent_mod.format_cuda_version(12020) == "12.2"


def test_unknown_pstate_is_null_with_reason() -> None:
    sc = scenario_two_gpus()
    sc["gpus"][0]["pstate"] = 32  # NVML_PSTATE_UNKNOWN
    g0 = make(sc)[0].sample()["gpus"][0]
    assert g0["pstate"] is None and g0["errors"]["pstate"] == (
        "ValueError: unknown performance state 32"
    )


def test_bug_in_sampling_yields_error_sample() -> None:
    agent, _ = make(scenario_two_gpus())

    def boom() -> dict[str, Any]:
        raise KeyError("x")

    agent.sample = boom
    s = agent_mod.safe_sample(agent)
    assert s["state"] == "error" and s["state_detail"] == "agent failure: KeyError: 'x'"
    assert list(s) == list(schema.empty_sample("nvml", 0, 0.0, 1.0))


# ---------------------------------------------------------------------------------------------
# the real process: JSON lines, stdin EOF, exit codes


def run_env(tmp_path: Path, sc: dict[str, Any]) -> dict[str, str]:
    fake_nvml.write_shim(str(tmp_path))
    (tmp_path / "scenario.json").write_text(json.dumps(sc))
    return dict(os.environ, FAKE_NVML_SCENARIO=str(tmp_path / "scenario.json"))


def with_fake_nvidia_smi(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with a stand-in ``nvidia-smi`` first on PATH (only its presence matters: the
    agent hands a host without NVML over to the console's nvidia-smi fallback)."""
    bin_dir = tmp_path / "fake-smi-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return dict(env, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}")


def test_process_exits_when_stdin_closes(tmp_path: Path) -> None:
    env = run_env(tmp_path, scenario_two_gpus())
    proc = subprocess.Popen(
        [sys.executable, str(AGENT_PY), "--interval", "0.2", "--pynvml-dir", str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    lines = [json.loads(proc.stdout.readline()) for _ in range(3)]
    assert [s["seq"] for s in lines] == [0, 1, 2]
    for s in lines:
        check_schema(s)
    # the first sample comes as soon as GPM's 100 ms window is there: it reads the load
    for s in lines:
        assert s["gpus"][0]["gpm"]["sm_activity_pct"] == 91.5
        assert "gpm" not in s["gpus"][0]["errors"]
    assert lines[2]["host_time"] - lines[0]["host_time"] == pytest.approx(0.4, abs=0.15)
    t0 = time.monotonic()
    proc.stdin.close()
    assert proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 1.0  # no waiting out the interval
    assert proc.stderr is not None and proc.stderr.read() == b""
    proc.stdout.close()
    proc.stderr.close()


def test_process_library_not_found_exits_3_after_one_line(tmp_path: Path) -> None:
    env = with_fake_nvidia_smi(tmp_path, run_env(tmp_path, {"init_error": "LibraryNotFound"}))
    out = subprocess.run(
        [sys.executable, str(AGENT_PY), "--pynvml-dir", str(tmp_path)],
        input=b"",
        capture_output=True,
        env=env,
        timeout=30,
    )
    assert out.returncode == agent_mod.EXIT_NVML_UNAVAILABLE == 3
    (line,) = out.stdout.decode().splitlines()
    s = json.loads(line)
    check_schema(s)
    assert s["state"] == "nvml_unavailable"


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has libnvidia-ml"
)
def test_real_pynvml_without_driver_exits_3(tmp_path: Path) -> None:
    import pynvml  # the repo's nvidia-ml-py: what the console uploads next to agent.py

    work = tmp_path / "upload"
    work.mkdir()
    (work / "agent.py").write_bytes(AGENT_PY.read_bytes())
    (work / "pynvml.py").write_bytes(Path(pynvml.__file__).read_bytes())
    out = subprocess.run(
        [sys.executable, "agent.py", "--interval", "1.0"],
        cwd=work,
        env=with_fake_nvidia_smi(tmp_path, dict(os.environ)),
        stdin=subprocess.PIPE,
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 3
    s = json.loads(out.stdout)
    check_schema(s)
    assert s["state"] == "nvml_unavailable"
    assert s["state_detail"] == (
        "libnvidia-ml.so.1 could not be loaded (NVML Shared Library Not Found)"
    )


def test_process_count_and_closed_stdout(tmp_path: Path) -> None:
    env = run_env(tmp_path, scenario_two_gpus())
    proc = subprocess.Popen(
        [
            sys.executable,
            str(AGENT_PY),
            "--interval",
            "0.05",
            "--count",
            "50",
            "--pynvml-dir",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    json.loads(proc.stdout.readline())
    proc.stdout.close()  # the reader went away: exit quietly, no traceback
    assert proc.wait(timeout=10) == 0
    assert b"Traceback" not in proc.stderr.read()
    proc.stderr.close()
    assert proc.stdin is not None
    proc.stdin.close()


def test_console_start_command_delivers_every_line_then_exits(tmp_path: Path) -> None:
    """As the console starts it (``_AGENT_MAIN``: ``agent.run``, which ends the process with
    ``os._exit``), stdout a pipe: every sample arrives whole, nothing on stderr, exit code 0;
    a usage error still exits 2 with its message."""
    from remote.telemetry.stream import _AGENT_MAIN

    env = run_env(tmp_path, scenario_two_gpus())
    argv = [sys.executable, "-I", "-S", "-c", _AGENT_MAIN, str(AGENT_PY)]
    opts = ["--interval", "0.05", "--count", "3", "--pynvml-dir", str(tmp_path)]
    proc = subprocess.Popen(
        [*argv, *opts],
        stdin=subprocess.PIPE,  # held open: the agent ends at --count, not at stdin's EOF
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.wait(timeout=30) == 0 and err == b""
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()
    samples = [json.loads(line) for line in out.decode().splitlines()]
    assert [s["seq"] for s in samples] == [0, 1, 2]
    assert [g["uuid"] for g in samples[-1]["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    assert samples[-1]["gpus"][0]["power_limit_w"] == 700.0
    bad = subprocess.run([*argv, "--interval", "0"], capture_output=True, env=env, timeout=30)
    assert bad.returncode == 2 and b"--interval must be > 0" in bad.stderr


def test_bad_interval_is_usage_error() -> None:
    out = subprocess.run(
        [sys.executable, str(AGENT_PY), "--interval", "0"], capture_output=True, timeout=30
    )
    assert out.returncode == 2 and b"--interval must be > 0" in out.stderr


# ---------------------------------------------------------------------------------------------
# Python 3.8 hosts


@pytest.mark.parametrize(
    "path",
    [AGENT_DIR / "agent.py", AGENT_DIR / "nvmlc.py", FAKES_DIR / "fake_nvml.py"],
    ids=["agent.py", "nvmlc.py", "fake_nvml.py"],
)
def test_agent_keeps_python38_syntax(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source  # annotations never evaluated
    newer = {
        "removeprefix",
        "removesuffix",
        "bit_count",
        "cache",
        "pairwise",
        "UTC",
        "to_thread",
        "TaskGroup",
        "BooleanOptionalAction",
    }
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
    }
    assert not used & newer
    in_annotations: set[int] = set()  # annotations are strings here, never evaluated
    for node in ast.walk(tree):
        notes: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(node.returns)
        elif isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        for note in notes:
            if note is not None:
                in_annotations.update(id(n) for n in ast.walk(note))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):  # zip(strict=...) is 3.10+
            assert all(k.arg != "strict" for k in node.keywords)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and id(node) not in in_annotations
        ):
            # builtin generics (list[int]) evaluated at run time fail on 3.8
            assert node.value.id not in ("list", "dict", "tuple", "set", "type"), (
                path.name,
                node.lineno,
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            assert id(node) in in_annotations or not any(  # X | None at run time: 3.10+
                isinstance(side, ast.Constant) and side.value is None
                for side in (node.left, node.right)
            ), (path.name, node.lineno)


# ---------------------------------------------------------------------------------------------
# replays of the real H200 traces


def _trace(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TRACES / name).read_text().splitlines() if line]


def _smi() -> dict[tuple[str, int, int], dict[str, str]]:
    with open(TRACES / "h200-smi.csv", newline="") as f:
        return {(r["phase"], int(r["agent_seq"]), int(r["index"])): r for r in csv.DictReader(f)}


needs_traces = pytest.mark.skipif(
    not (TRACES / "h200-load.jsonl").exists(), reason="no recorded traces"
)


@needs_traces
@pytest.mark.parametrize("name", ["h200-idle.jsonl", "h200-load.jsonl"])
def test_trace_schema_valid(name: str) -> None:
    lines = _trace(name)
    assert len(lines) >= 10
    for s in lines:
        check_schema(dict(schema.read_sample(s)))  # recorded before `kernel_log` existed
        assert s["state"] == "ok" and len(s["gpus"]) == 2
        assert all(g["name"] == "NVIDIA H200" and g["mem_total_mib"] > 140000 for g in s["gpus"])
    seqs = [s["seq"] for s in lines]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


@needs_traces
def test_trace_load_on_gpu0_only() -> None:
    load = _trace("h200-load.jsonl")
    pid = int((TRACES / "loader.pid").read_text())
    for s in load:
        g0, g1 = s["gpus"]
        assert g0["util_gpu_pct"] >= 90, g0
        assert g1["util_gpu_pct"] == 0 and g1["mem_used_mib"] < 100
        assert g0["gpm"]["sm_activity_pct"] > 50 and g0["gpm"]["tensor_activity_pct"] > 10
        mine = [p for p in s["processes"] if p["pid"] == pid]
        assert [(p["gpu_index"], p["type"]) for p in mine] == [(0, "compute")]
        assert mine[0]["used_mib"] > 16 * 1024  # the 16 GiB ballast and the matrices
        assert "matmul_load.py" in mine[0]["command"]
        assert not [p for p in s["processes"] if p["gpu_index"] == 1]
    idle = _trace("h200-idle.jsonl")
    for s in idle:
        assert all(g["util_gpu_pct"] == 0 for g in s["gpus"])
        assert s["processes"] == []


@needs_traces
def test_trace_agrees_with_nvidia_smi() -> None:
    smi = _smi()
    matched = 0
    for phase in ("idle", "load"):
        for s in _trace(f"h200-{phase}.jsonl"):
            for g in s["gpus"]:
                r = smi[(phase, s["seq"], g["index"])]
                mem = int(r["memory_used_mib"])
                assert abs(g["mem_used_mib"] - mem) <= max(0.01 * mem, 2), (phase, s["seq"])
                if phase == "load":
                    assert abs(g["util_gpu_pct"] - int(r["util_gpu_pct"])) <= 5
                matched += 1
    assert matched >= 2 * 30


@needs_traces
def test_trace_matches_nvidia_smi_compute_apps_and_explains_v2() -> None:
    meta = json.loads((TRACES / "meta.json").read_text())
    pid = int((TRACES / "loader.pid").read_text())
    apps = [line.split(", ") for line in meta["compute_apps"].splitlines()]
    assert [(int(a[0]), a[2]) for a in apps] == [
        (pid, _trace("h200-load.jsonl")[0]["gpus"][0]["uuid"])
    ]
    for s in _trace("h200-load.jsonl"):
        (p,) = [p for p in s["processes"] if p["pid"] == pid]
        assert p["used_mib"] == int(apps[0][1])
    # nvmlDeviceGetMemoryInfo v1 counts driver-reserved memory as used: >1% off nvidia-smi
    probe = json.loads(meta["nvml_memory_probe"])
    smi_used = int(meta["smi_memory"].splitlines()[0].split(", ")[1])
    assert abs(probe[0]["v2_used_mib"] - smi_used) <= 2
    assert probe[0]["v1_used_mib"] - smi_used == pytest.approx(probe[0]["v2_reserved_mib"], abs=2)
    assert (probe[0]["v1_used_mib"] - smi_used) / smi_used > 0.01
    assert meta["agent_rc"] == 0 and meta["agent_exit_after_stdin_close_s"] < 1.0


@needs_traces
def test_trace_h200_unsupported_fields_and_power_cap() -> None:
    lines = _trace("h200-idle.jsonl") + _trace("h200-load.jsonl")
    for s in lines:
        assert s["errors"] == {}  # Xid registration allowed, process lists readable
        for g in s["gpus"]:
            assert g["errors"] == {"fan_pct": "Not Supported"}  # H200 SXM: no fan
            assert g["fan_pct"] is None
    for s in _trace("h200-load.jsonl"):
        g0 = s["gpus"][0]
        assert g0["throttle_reasons"] == ["sw_power_cap"]
        assert g0["power_w"] <= g0["power_limit_w"] == 700.0
        assert g0["pstate"] == "P0"
    for s in _trace("h200-idle.jsonl"):
        assert all(g["throttle_reasons"] == ["gpu_idle"] for g in s["gpus"])
        assert all(v == 0.0 for g in s["gpus"] for v in g["gpm"].values())


@needs_traces
def test_trace_polls_were_simultaneous() -> None:
    smi = _smi()
    for phase in ("idle", "load"):
        for s in _trace(f"h200-{phase}.jsonl"):
            lag = float(smi[(phase, s["seq"], 0)]["t_before"]) - s["host_time"]
            assert 0 <= lag < 0.1


def test_worker_ranks_come_from_the_process_environment() -> None:
    import subprocess
    import sys

    env = dict(os.environ, RANK="3", LOCAL_RANK="1")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    plain_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=plain_env)
    try:
        reader = agent_mod.ProcessInfoReader()
        assert reader.ranks(worker.pid) == (3, 1)
        assert reader.ranks(plain.pid) == (None, None)
        assert reader.ranks(2**22 + 12345) == (None, None)  # gone: unknown, no error
    finally:
        worker.kill()
        plain.kill()
        worker.wait()
        plain.wait()


# ---------------------------------------------------------------------------------------------
# torchrun's workers and their CPU (RankReader)


def _proc_pid(root: Path, pid: int, ppid: int, ticks: tuple[int, int], env: bytes) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    # /proc/PID/stat: pid (comm) state ppid ... utime(14) stime(15); comm may hold spaces
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks[0]), str(ticks[1])] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (pt main thread) " + " ".join(fields) + "\n")
    (d / "environ").write_bytes(env)
    (d / "cgroup").write_text(f"0::/system.slice/docker-{ID_A}.scope\n")


def test_rank_reader_finds_torchrun_workers_and_their_cpu(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    root.mkdir()
    worker = b"PATH=/bin\0TORCHELASTIC_RUN_ID=abc\0RANK=%d\0LOCAL_RANK=%d\0"
    _proc_pid(root, 100, 1, (0, 0), b"PATH=/bin\0")  # torchrun itself: no RANK
    _proc_pid(root, 101, 100, (1000, 200), worker % (0, 0))
    _proc_pid(root, 102, 100, (1000, 200), worker % (1, 1))
    _proc_pid(root, 103, 101, (50, 10), worker % (0, 0))  # rank 0's DataLoader worker
    _proc_pid(root, 104, 1, (10, 0), b"RANK=3\0")  # RANK without torchrun: not a worker
    clock = iter([10.0, 11.0, 12.0])
    reader = agent_mod.RankReader(str(root), clock=lambda: next(clock))
    reader.hz = 100.0
    first = reader.read()
    assert first is not None
    assert [(r["pid"], r["rank"], r["local_rank"], r["cpu_pct"]) for r in first] == [
        (101, 0, 0, None),  # no interval yet
        (102, 1, 1, None),
    ]
    assert first[0]["container_id"] == ID_A
    # over the next interval: rank 0 +150 ticks (+30 in its loader worker), rank 1 +50 ticks
    _proc_pid(root, 101, 100, (1120, 230), worker % (0, 0))
    _proc_pid(root, 102, 100, (1040, 210), worker % (1, 1))
    _proc_pid(root, 103, 101, (75, 15), worker % (0, 0))
    second = reader.read()
    assert second is not None
    cpu = {r["rank"]: r["cpu_pct"] for r in second}
    # 1 s apart: 180 ticks at 100 Hz = 180 % of a core (1.8 cores busy), 50 ticks = 50 %
    assert cpu == {0: 180.0, 1: 50.0}
    # a worker that exits is forgotten
    for f in (root / "102").iterdir():
        f.unlink()
    (root / "102").rmdir()
    third = reader.read()
    assert third is not None and [r["rank"] for r in third] == [0]


def test_sample_carries_ranks_and_swap(proc_root: Path) -> None:
    agent, _ = make(scenario_two_gpus(), proc_root)
    s = agent.sample()
    assert s["ranks"] == []  # PIDs 4242 and 4243 carry no TORCHELASTIC_RUN_ID
    (proc_root / "vmstat").write_text("pswpin 900\npswpout 1300\n")  # +1000 pages
    agent.host._prev_swap = (agent.host._prev_swap[0] - 2.0, agent.host._prev_swap[1])
    s = agent.sample()
    assert s["host"]["swap_pages_per_s"] == pytest.approx(500.0, rel=0.05)


def test_recorded_first_sample_on_a_loaded_h200_reads_the_load() -> None:
    """The device recording of the agent that waits for GPM's window before its first sample
    (README there): on a loaded H200 every sample, the first too, reads the load."""
    lines = (FIRST_SAMPLES_H200 / "first-samples.jsonl").read_text().splitlines()
    samples = [json.loads(ln) for ln in lines]
    assert [s["seq"] for s in samples] == [0, 1, 2, 3]
    for s in samples:
        check_schema(s)
        (g,) = s["gpus"]
        assert g["name"] == "NVIDIA H200" and g["util_gpu_pct"] == 100
        assert g["gpm"]["sm_activity_pct"] > 90 and g["gpm"]["tensor_activity_pct"] > 90, g
        assert "gpm" not in g["errors"]


class FakeEarlyLock:
    """A lock whose timed acquire gives up after 10 ms whatever the timeout (a C library that
    times the wait on the wall clock while the clock is stepped)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        time.sleep(min(0.01, max(timeout, 0.0)))
        return False

    def release(self) -> None:
        raise AssertionError("never held")


def test_the_agent_waits_to_its_deadline_through_an_early_wakeup() -> None:
    """The first sample waits for GPM's window: a timed wait that ends early must not let it
    go out before (it would read GPM as not yet known)."""
    flag = agent_mod.Flag()
    flag._lock = FakeEarlyLock()
    t0 = time.monotonic()
    assert flag.wait_until(t0 + 0.12) is False
    assert time.monotonic() - t0 >= 0.12
    flag._up = True
    assert flag.wait_until(time.monotonic() + 5) is True
