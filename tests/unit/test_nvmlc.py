"""The agent's own NVML binding (remote/agent/nvmlc.py) against NVIDIA's pynvml (nvidia-ml-py).

What is real: ``nvmlc`` and the repo's ``pynvml`` (the one the console ships beside it), the
agent (``remote/agent/agent.py``). What stands in: ``FakeNvmlLibrary``
(tests/fakes/fake_nvml_lib.py) for ``libnvidia-ml.so.1`` itself, put where each binding keeps
its loaded library; this machine has no NVIDIA driver. On a GPU the two bindings were compared
by scripts/device/agent_nvml_ab.py (tests/data/device/agent-nvmlc-*/, checked below).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml
import pytest

from remote.agent import agent as agent_mod
from remote.agent import nvmlc
from tests.fakes.fake_nvml_lib import FakeNvmlLibrary

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "remote" / "agent"
#: the device's A/B recordings (scripts/device/agent_nvml_ab.py), one folder per GPU model
DEVICE_AB = sorted((ROOT / "tests" / "data" / "device").glob("agent-nvmlc-*/ab.json"))

#: the structures nvmlc defines, each under pynvml's name
STRUCTS = [
    "struct_c_nvmlDevice_t",
    "struct_c_nvmlEventSet_t",
    "struct_c_nvmlGpmSample_t",
    "nvmlPciInfo_t",
    "c_nvmlUtilization_t",
    "c_nvmlMemory_t",
    "c_nvmlMemory_v2_t",
    "c_nvmlTemperature_v1_t",
    "c_nvmlProcessInfo_v2_t",
    "c_nvmlProcessInfo_v3_t",
    "c_nvmlEventData_t",
    "c_nvmlGpmSupport_t",
    "c_metricInfo_t",
    "c_nvmlGpmMetric_t",
    "c_nvmlGpmMetricsGet_t",
]


def ctype_shape(t: Any) -> Any:
    """A ctypes type as a comparable value: simple types as their C type code (``"I"``:
    unsigned int), arrays as (length, element), pointers as what they point at, structures as
    their fields with offsets and the size."""
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return ("array", t._length_, ctype_shape(t._type_))
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return ("pointer", t._type_.__name__)
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        fields = getattr(t, "_fields_", [])
        return (
            "struct",
            ctypes.sizeof(t),
            ctypes.alignment(t),
            [(f[0], getattr(t, f[0]).offset, ctype_shape(f[1])) for f in fields],
        )
    return ("simple", t._type_, ctypes.sizeof(t))


@pytest.mark.parametrize("name", STRUCTS)
def test_structures_match_pynvml(name: str) -> None:
    mine, theirs = getattr(nvmlc, name), getattr(pynvml, name)
    assert ctype_shape(mine) == ctype_shape(theirs)
    assert [f[0] for f in getattr(mine, "_fields_", [])] == [
        f[0] for f in getattr(theirs, "_fields_", [])
    ]
    assert ctypes.sizeof(mine) == ctypes.sizeof(theirs)


def test_structure_sizes_are_nvml_h_s() -> None:
    # the struct versions encode sizeof: NVML_STRUCT_VERSION(Memory, 2) = sizeof | 2 << 24
    assert ctypes.sizeof(nvmlc.c_nvmlMemory_v2_t) | 2 << 24 == nvmlc.nvmlMemory_v2
    assert ctypes.sizeof(nvmlc.c_nvmlTemperature_v1_t) | 1 << 24 == nvmlc.nvmlTemperature_v1
    assert ctypes.sizeof(nvmlc.nvmlPciInfo_t) == 68
    assert ctypes.sizeof(nvmlc.c_nvmlProcessInfo_v2_t) == 24
    assert ctypes.sizeof(nvmlc.c_nvmlEventData_t) == 32
    assert ctypes.sizeof(nvmlc.c_nvmlGpmMetricsGet_t) == 24 + 477 * 40


def nvmlc_constants() -> dict[str, int]:
    return {
        k: v
        for k, v in vars(nvmlc).items()
        if isinstance(v, int) and (k.startswith("NVML_") or k.startswith("nvml"))
    }


def test_constants_equal_pynvml() -> None:
    consts = nvmlc_constants()
    assert len(consts) > 50
    for name, value in consts.items():
        if name == "NVML_VALUE_NOT_AVAILABLE_ULONGLONG":
            assert value == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            continue
        assert getattr(pynvml, name) == value, name


def test_error_strings_equal_pynvml() -> None:
    assert nvmlc.NVMLError._errcode_to_string == {
        k: v
        for k, v in pynvml.NVMLError._errcode_to_string.items()
        if k in nvmlc.NVMLError._errcode_to_string
    }
    assert set(pynvml.NVMLError._errcode_to_string) <= set(nvmlc.NVMLError._errcode_to_string)
    for code in (3, 12, 13, 15, 18):
        assert str(nvmlc.NVMLError(code)) == str(pynvml.NVMLError(code))
        assert nvmlc.NVMLError(code).value == code
    # no library loaded: NVML cannot say, pynvml's words
    assert str(nvmlc.NVMLError(25)) == "NVML Error with code 25"


def agent_nv_names() -> set[str]:
    """Every ``nv.NAME`` agent.py uses, and the names it looks up on ``nv`` as strings (the
    versioned calls' ``attr("nvmlX")``, ``close()``'s ``getattr(nv, fn)``); not the C symbols
    it hands to ``nv._nvmlGetFunctionPointer`` (``procs_v1("nvmlX")``)."""
    import ast
    import re

    tree = ast.parse((AGENT_DIR / "agent.py").read_text())
    names = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "nv"
    }
    symbols = {
        a.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "procs_v1"
        for a in n.args
        if isinstance(a, ast.Constant)
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            if re.fullmatch(r"nvml[A-Z]\w+", n.value) and n.value not in symbols:
                names.add(n.value)
    return names


def test_nvmlc_has_every_name_the_agent_uses_with_pynvml_s_signature() -> None:
    used = agent_nv_names()
    assert {
        "nvmlGpmMetricsGet",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlEventSetFree",
        "NVMLError",
        "c_nvmlGpmMetricsGet_t",
        "_nvmlGetFunctionPointer",
    } <= used
    assert "nvmlDeviceGetComputeRunningProcesses" not in used
    for name in sorted(used):
        assert hasattr(nvmlc, name), name
        mine, theirs = getattr(nvmlc, name), getattr(pynvml, name)
        if inspect.isfunction(mine):
            want = inspect.signature(theirs).parameters
            got = inspect.signature(mine).parameters
            assert [(p.name, p.default) for p in got.values()] == [
                (p.name, p.default) for p in want.values()
            ], name


@pytest.fixture
def libs() -> Iterator[None]:
    """Leave both bindings without a library after the test."""
    yield
    nvmlc._lib = None
    nvmlc._fns.clear()
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def put(nv: ModuleType, lib: FakeNvmlLibrary) -> None:
    if nv is nvmlc:
        nvmlc._lib = lib
        nvmlc._fns.clear()
    else:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()


def agent_run(nv: ModuleType, missing: set[str]) -> tuple[list[dict[str, Any]], FakeNvmlLibrary]:
    """Two samples of the agent reading the fake library through ``nv``; the library."""
    lib = FakeNvmlLibrary(missing)
    put(nv, lib)
    t = [0.0]

    def clock() -> float:  # 0.2 s between the agent's looks: GPM has its window
        t[0] += 0.2
        return t[0]

    agent = agent_mod.Agent(nv, 1.0, clock=clock)
    samples = [agent.sample(), agent.sample()]
    agent.close()
    return samples, lib


def comparable(s: dict[str, Any]) -> dict[str, Any]:
    """A sample without what changes from one reading to the next (times, the host's load)."""
    host = {k: s["host"][k] for k in ("driver_version", "cuda_version", "nvml_version")}
    host_errors = {k: v for k, v in s["host"]["errors"].items() if k in host}
    xids = [{k: v for k, v in e.items() if k != "time"} for e in s["xid_events"]]
    return {
        "state": (s["state"], s["state_detail"]),
        "host": (host, host_errors),
        "gpus": s["gpus"],
        "processes": s["processes"],
        "xid_events": xids,
        "errors": {k: v for k, v in s["errors"].items() if k in ("processes", "xid")},
    }


OLD_DRIVER = {  # symbols a pre-R470 / pre-R535 driver lacks: every versioned fallback taken
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlGpmQueryDeviceSupport",
    "nvmlEventSetCreate",
}


@pytest.mark.parametrize("missing", [set(), OLD_DRIVER], ids=["new-driver", "old-driver"])
def test_agent_records_and_c_calls_equal_through_both_bindings(
    libs: None, missing: set[str]
) -> None:
    mine, lib_mine = agent_run(nvmlc, missing)
    theirs, lib_theirs = agent_run(pynvml, missing)
    # the same C functions, in the same order, with the same argument types and values
    assert lib_mine.calls == lib_theirs.calls
    assert len(lib_mine.calls) > 80
    for a, b in zip(mine, theirs):
        assert comparable(a) == comparable(b)
    s = mine[0]
    g0, g1 = s["gpus"]
    assert s["state"] == "ok"
    assert (g0["name"], g0["uuid"], g0["pci_bus_id"]) == (
        "NVIDIA H100 80GB HBM3",
        "GPU-2f4b1a5c-0000-4000-8000-000000000000",
        "00000000:19:00.0",
    )
    assert (g0["util_gpu_pct"], g0["power_w"], g0["power_limit_w"]) == (97, 512.35, 700.0)
    assert g0["fan_pct"] is None and g0["errors"]["fan_pct"] == "Not Supported"
    assert g0["unsupported"] == ["fan_pct"]
    assert g1["remapped_rows_pending"] is True and g1["ecc_volatile_uncorrected"] == 3
    assert s["processes"] is not None
    assert [(p["pid"], p["used_mib"]) for p in s["processes"]] == [(4242, 16896), (4243, None)]
    if not missing:
        assert (g0["temp_c"], g0["mem_used_mib"], g0["throttle_reasons"]) == (
            55,
            17000,
            ["sw_power_cap"],
        )
        assert s["host"]["cuda_version"] == "13.0"
        assert g0["gpm"] == {
            "sm_activity_pct": 91.5,
            "sm_occupancy_pct": 40.25,
            "tensor_activity_pct": 63.0,
            "dram_bw_util_pct": None,
        }
        # a code outside pynvml's table: its text from nvmlErrorString, through both
        assert g0["errors"]["gpm.dram_bw_util_pct"] == "Argument Version Mismatch"
        assert g1["unsupported"] == ["fan_pct", "gpm"]
        # Xid events are registered after the first sample: the fake's pending one comes next
        assert s["xid_events"] == []
        assert [(e["gpu_index"], e["xid"]) for e in mine[1]["xid_events"]] == [(1, 79)]
    else:  # the older entry points answered
        assert (g0["temp_c"], g0["mem_used_mib"], g0["throttle_reasons"]) == (
            54,
            17512,
            ["sw_power_cap", "hw_thermal"],
        )
        assert s["host"]["cuda_version"] == "12.8"
        assert g0["errors"]["gpm"] == "Function Not Found"
        assert "xid" not in s["errors"]  # not asked in the first sample
        assert mine[1]["errors"]["xid"] == "nvmlEventSetCreate: Function Not Found"


def test_uninitialized_and_missing_function(libs: None) -> None:
    with pytest.raises(nvmlc.NVMLError) as e:
        nvmlc.nvmlDeviceGetCount()
    assert e.value.value == nvmlc.NVML_ERROR_UNINITIALIZED
    put(nvmlc, FakeNvmlLibrary({"nvmlDeviceGetCount_v2"}))
    nvmlc.nvmlInitWithFlags(0)
    with pytest.raises(nvmlc.NVMLError) as e:
        nvmlc.nvmlDeviceGetCount()
    assert e.value.value == nvmlc.NVML_ERROR_FUNCTION_NOT_FOUND
    assert str(e.value) == "Function Not Found"
    assert agent_mod.nvml_code(e.value) == agent_mod.NVML_ERROR_FUNCTION_NOT_FOUND


# ---------------------------------------------------------------------------------------------
# import cost and loading


def test_import_loads_no_library_and_no_pynvml() -> None:
    code = (
        "import ctypes, sys\n"
        "loaded = []\n"
        "real = ctypes.CDLL\n"
        "class Spy(real):\n"
        "    def __init__(self, name, *a, **k):\n"
        "        loaded.append(name)\n"
        "        real.__init__(self, name, *a, **k)\n"
        "ctypes.CDLL = Spy\n"
        f"sys.path.insert(0, {str(AGENT_DIR)!r})\n"
        "import nvmlc\n"
        "print(loaded, nvmlc._lib, 'pynvml' in sys.modules, 'json' in sys.modules)\n"
        "try:\n"
        "    nvmlc.nvmlInitWithFlags(0)\n"
        "except nvmlc.NVMLError as e:\n"
        "    print(e.value, e)\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[] None False False"  # nothing loaded at import
    if ctypes.util.find_library("nvidia-ml") is None:  # no driver here: NVML's "not found"
        assert lines[1:] == ["12 NVML Shared Library Not Found", "['libnvidia-ml.so.1']"]


def test_load_nvml_chooses(tmp_path: Path) -> None:
    path = list(sys.path)
    try:
        nv, err = agent_mod.load_nvml("auto", None)
        assert err is None and nv.__name__ == "nvmlc"
        assert nv.__file__ == str(AGENT_DIR / "nvmlc.py")
        nv, err = agent_mod.load_nvml("pynvml", None)
        assert err is None and nv is pynvml
        # --pynvml-dir asks for pynvml from that folder: the tests' stand-in comes that way
        (tmp_path / "pynvml.py").write_text("STAND_IN = True\n")
        sys.modules.pop("pynvml")
        nv, err = agent_mod.load_nvml("auto", str(tmp_path))
        assert err is None and nv.STAND_IN is True
    finally:
        sys.modules["pynvml"] = pynvml
        sys.modules.pop("nvmlc", None)
        sys.path[:] = path


def test_bundle_without_nvmlc_falls_back_to_pynvml(tmp_path: Path) -> None:
    """An agent folder without nvmlc.py (an older bundle's layout) reads with pynvml; a
    folder with it, with nvmlc; ``--nvml nvmlc`` without the file says why."""
    (tmp_path / "agent.py").write_bytes((AGENT_DIR / "agent.py").read_bytes())
    (tmp_path / "pynvml.py").write_text("raise ImportError('this is pynvml.py')\n")
    code = "import sys, agent; nv, err = agent.load_nvml(sys.argv[1]); print(nv, err)"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def ask(binding: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", code, binding],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=30,
            check=True,
        ).stdout.strip()

    assert ask("auto") == (
        "None nvmlc: ModuleNotFoundError: No module named 'nvmlc'; "
        "pynvml: ImportError: this is pynvml.py"
    )
    assert ask("nvmlc") == "None nvmlc: ModuleNotFoundError: No module named 'nvmlc'"
    (tmp_path / "nvmlc.py").write_bytes((AGENT_DIR / "nvmlc.py").read_bytes())
    assert ask("auto").startswith("<module 'nvmlc' from ")


def test_bundle_ships_nvmlc() -> None:
    from remote.telemetry.stream import agent_bundle

    bundle = agent_bundle()
    assert sorted(bundle) == ["agent.py", "nvmlc.py", "pynvml.py"]
    assert bundle["nvmlc.py"] == (AGENT_DIR / "nvmlc.py").read_bytes()


# ---------------------------------------------------------------------------------------------
# the device's A/B run (an H100): the records of both bindings field by field


@pytest.mark.skipif(not DEVICE_AB, reason="no device recording")
@pytest.mark.parametrize("path", DEVICE_AB, ids=[p.parent.name for p in DEVICE_AB])
def test_device_records_equal_through_both_bindings(path: Path) -> None:
    ab = json.loads(path.read_text())
    runs = ab["runs"]
    assert {r["binding"] for r in runs} == {"nvmlc", "pynvml"}
    by = {r["binding"]: r["samples"] for r in runs}
    assert len(by["nvmlc"]) == len(by["pynvml"]) >= 3
    for a, b in zip(by["nvmlc"], by["pynvml"]):
        assert a["state"] == b["state"] == "ok"
        assert [g["name"] for g in a["gpus"]] == [g["name"] for g in b["gpus"]]
        assert a["gpus"] and a["gpus"][0]["name"].startswith("NVIDIA ")
        assert stable(a) == stable(b)
    assert ab["differences"] == []


DEVICE_PHASES = sorted((ROOT / "tests" / "data" / "device").glob("*/phases.json"))


@pytest.mark.skipif(not DEVICE_PHASES, reason="no device recording")
@pytest.mark.parametrize("path", DEVICE_PHASES, ids=[p.parent.name for p in DEVICE_PHASES])
def test_device_start_phases_hold_together(path: Path) -> None:
    """scripts/device/agent_phases.py on a GPU: the kernel log came from /dev/kmsg with no
    error, and each run's inclusive steps hold what they call (a step's CPU is at least its
    NVML calls'; the whole start at least its steps')."""
    rec = json.loads(path.read_text())
    assert len(rec["runs"]) == len(rec["totals_ms"]) >= 5
    for run in rec["runs"]:
        assert run["kernel_log"] == {
            "source": "kmsg",
            "lines": run["kernel_log"]["lines"],
            "error": None,
        }
        assert run["gpus"] >= 1
        cpu = {k: v[0] for k, v in run["steps"].items()}
        assert cpu["Agent._init_nvml"] >= cpu["nvml nvmlInitWithFlags"]
        assert cpu["Agent._refresh_slow"] >= cpu["Agent._read_slow"]
        assert cpu["Agent.sample"] >= cpu["Agent._sample_gpus"] + cpu["Agent._read_kernel_log"]
        steps = cpu["Agent.__init__"] + cpu["Agent.sample"] + cpu["Agent.close"]
        assert run["measured"] >= steps
    shipped = json.loads((path.parent / "ab.json").read_text())["runs"][0]["samples"][0]
    assert shipped["kernel_log"]["source"] == "kmsg" and shipped["kernel_log"]["since_boot"]
    assert all(re.match(r"^\[ *\d+\.\d{6}\] NVRM: ", ln) for ln in shipped["kernel_log"]["lines"])


DEVICE_COSTS = ROOT / "tests" / "data" / "device" / "agent-nvmlc-h100-exit"


@pytest.mark.skipif(not (DEVICE_COSTS / "costs.json").exists(), reason="no device recording")
def test_device_record_agrees_with_the_raw_slow_calls() -> None:
    """scripts/device/nvml_call_costs.py called the slow NVML functions one by one through
    pynvml on the same H100 the agent sampled: the agent's record (ended by ``agent.run``, as
    the console starts it) carries the same power limit (mW -> W), maximum clocks and ECC
    count; the power limit's field value (NVML_FI_DEV_POWER_CURRENT_LIMIT) is the same too."""
    costs = json.loads((DEVICE_COSTS / "costs.json").read_text())
    raw: dict[str, set[str]] = {}
    for runs in costs["calls"].values():
        assert len(runs) == costs["runs"] >= 5
        for _total, calls in runs:
            for name, _ms, result in calls:
                raw.setdefault(name.removesuffix(" again"), set()).add(result)
    ab = json.loads((DEVICE_COSTS / "ab.json").read_text())
    (nvmlc,) = (r for r in ab["runs"] if r["binding"] == "nvmlc")
    assert nvmlc["exit"] == 0 and len(nvmlc["samples"]) == 3
    g = nvmlc["samples"][0]["gpus"][0]
    assert raw["EnforcedPowerLimit"] == {f"ok {round(g['power_limit_w'] * 1000)}"}
    assert raw["MaxClockInfo SM"] == {f"ok {g['sm_clock_max_mhz']}"}
    assert raw["MaxClockInfo MEM"] == {f"ok {g['mem_clock_max_mhz']}"}
    assert raw["TotalEccErrors"] == {f"ok {g['ecc_volatile_uncorrected']}"}
    limit_mw = round(g["power_limit_w"] * 1000)
    assert raw["FieldValues [190]"] == {f"ok [(190, 0, {limit_mw})]"}


def _ab_script() -> Any:
    """scripts/device/agent_nvml_ab.py as a module (its ``stable``: what two bindings'
    samples must agree on)."""
    import importlib.util

    path = ROOT / "scripts" / "device" / "agent_nvml_ab.py"
    spec = importlib.util.spec_from_file_location("agent_nvml_ab", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stable(s: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between two bindings' samples of one idle GPU (the device script's
    own rule)."""
    result: dict[str, Any] = _ab_script().stable(s)
    return result


# ---------------------------------------------------------------------------------------------
# the agent's start-up cuts: JSON without the json package, commands without subprocess

TRACES = ROOT / "tests" / "data" / "traces"


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def test_dumps_writes_what_json_dumps_writes(libs: None) -> None:
    samples, _ = agent_run(nvmlc, set())
    traces = [
        json.loads(line)
        for path in sorted(TRACES.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    assert len(traces) > 20
    odd = {
        "text": 'quote " backslash \\ tab \t nul \x00 del \x7f é ü 漢 🙂 \ud800 \u2028',
        "numbers": [0, -1, 2**70, 1.5, -0.0, 1e-300, 1e300, 0.1 + 0.2, 123456789.125],
        "nested": {"a": [[], {}, (1, 2), [None, True, False]]},
        7: "int key",
        2.5: "float key",
        True: "bool key",
        None: "none key",
    }
    for obj in [*samples, *traces, odd]:
        assert agent_mod.dumps(obj) == json_dumps(obj)
    for bad in (float("nan"), {"x": [float("inf")]}, -float("inf")):
        with pytest.raises(ValueError):
            agent_mod.dumps(bad)
        with pytest.raises(ValueError):
            json_dumps(bad)
    wrong: list[object] = [{"x": {1, 2}}, {(1, 2): "tuple key"}, b"bytes"]
    for wrong_type in wrong:
        with pytest.raises(TypeError):
            agent_mod.dumps(wrong_type)
        with pytest.raises(TypeError):
            json_dumps(wrong_type)


def test_run_command_without_subprocess(tmp_path: Path) -> None:
    rc, out, err = agent_mod.run_command(
        ["sh", "-c", 'echo "out $LC_ALL"; echo err >&2; head -c 5; exit 3'], 10.0
    )
    assert (rc, out, err) == (3, "out C\n", "err\n")  # stdin is /dev/null: head reads nothing
    # more than a pipe holds, on both: both are drained while it runs
    rc, out, err = agent_mod.run_command(
        ["sh", "-c", "yes x | head -c 300000; yes y | head -c 300000 >&2"], 10.0
    )
    assert (rc, out, err) == (0, "x\n" * 150_000, "y\n" * 150_000)
    assert agent_mod.run_command(["gpuconsole-no-such-tool"], 10.0) == (
        127,
        "",
        "gpuconsole-no-such-tool: not installed",
    )
    rc, out, err = agent_mod.run_command(["sh", "-c", "kill -9 $$"], 10.0)
    assert (rc, out, err) == (-9, "", "")
    marker = tmp_path / "still-running"
    rc, out, err = agent_mod.run_command(["sh", "-c", f"sleep 30; touch {marker}"], 0.3)
    assert (rc, err) == (124, "sh: no answer within 0.3s")
    (tmp_path / "x").write_text("")
    rc, _, _ = agent_mod.run_command([str(tmp_path / "x")], 10.0)  # not executable
    assert rc == 126


def test_run_command_ends_a_child_that_closed_its_output_but_runs_on(tmp_path: Path) -> None:
    """A child that closes stdout and stderr and keeps running is killed at the deadline
    (124), not waited for."""
    marker = tmp_path / "still-running"
    t0 = time.monotonic()
    rc, _out, err = agent_mod.run_command(
        ["sh", "-c", f"echo early; exec >&- 2>&-; sleep 30; touch {marker}"], 0.5
    )
    assert (rc, err) == (124, "sh: no answer within 0.5s")
    assert time.monotonic() - t0 < 5
    assert not marker.exists()


def test_run_command_reaps_its_child_when_reading_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception while reading (Ctrl-C) kills the child before it propagates: no wait for
    a child that could run on, no zombie."""
    import select as select_mod

    started: list[int] = []
    real_spawn = os.posix_spawnp

    def spawn(*a: Any, **kw: Any) -> int:
        pid = real_spawn(*a, **kw)
        started.append(pid)
        return pid

    def interrupted(*a: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "posix_spawnp", spawn)
    monkeypatch.setattr(select_mod, "select", interrupted)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        agent_mod.run_command(["sleep", "30"], 60.0)
    assert time.monotonic() - t0 < 5
    assert started
    with pytest.raises(ChildProcessError):  # reaped already
        os.waitpid(started[0], os.WNOHANG)


def test_dmesg_stamp_reads_what_the_old_regular_expression_read() -> None:
    import re

    pattern = r"^\[\s*(\d+\.\d+)\]"
    lines = [
        "[    5.123456] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04",
        "[12345.000001] NVRM: Xid (PCI:0000:19:00): 79, pid=1, GPU has fallen off the bus.",
        "[5.1]x",
        "[\t 7.25] tab",
        "[ 5.] no fraction",
        "[ .5] no whole",
        "[ 5.1 ] space before the bracket",
        "[ 5,1] comma",
        "5.1] no bracket",
        "[5.1.2] two dots",
        "[ 5.1",
        "",
        "  continuation line",
    ]
    for line in lines:
        m = re.match(pattern, line)
        assert agent_mod.dmesg_stamp(line) == (float(m.group(1)) if m else None), line


def test_an_error_nvml_has_no_text_for_still_says_its_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``nvmlErrorString`` answering NULL (a code this driver does not know) gives the code,
    never an empty reason."""

    class NullText:
        restype: object = None

        def __call__(self, code: object) -> None:
            return None

    monkeypatch.setattr(nvmlc, "_nvmlGetFunctionPointer", lambda name: NullText())
    monkeypatch.setattr(nvmlc.NVMLError, "_errcode_to_string", {})
    assert nvmlc.nvmlErrorString(4242) == "NVML Error with code 4242"
    assert str(nvmlc.NVMLError(4242)) == "NVML Error with code 4242"
