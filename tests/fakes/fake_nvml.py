"""FakeNVML: a stand-in for the ``pynvml`` module, for testing the agent without a GPU.

Not NVIDIA code and never shipped as ``pynvml``: it exposes only the subset of the pynvml
(nvidia-ml-py) API that ``agent.py`` calls, with the same names, return shapes, error class and
error codes, driven by a *scenario* (a JSON-able dict)::

    {
      "init_error": null | "LibraryNotFound" | "OSError" | "DriverNotLoaded"
                    | "LibRmVersionMismatch" | <any NVMLError_* suffix>,
      "driver_version": "580.159.04", "cuda_version": 13000, "nvml_version": "13.580.159.04",
      "missing": ["nvmlDeviceGetComputeRunningProcesses_v3", ...],  # FunctionNotFound
      "event_set_error": null | "NotSupported",
      "xid_events": [{"gpu": 0, "xid": 79}],       # delivered by nvmlEventSetWait
      "gpus": [{
        "handle_error": null | "GpuIsLost" | ...,   # nvmlDeviceGetHandleByIndex raises
        "name": "NVIDIA H200", "uuid": "GPU-...", "pci_bus_id": "00000000:19:00.0",
        "util_gpu": 97, "util_mem": 40,
        "mem_total": <bytes>, "mem_used": <bytes>, "mem_reserved": <bytes>,  # v1 used =
                                                                    # used + reserved
        "temp": 55, "power_mw": 512345, "power_limit_mw": 700000,
        "sm_clock": 1980, "mem_clock": 3201, "fan": 30, "pstate": 0,
        "sm_clock_max": 1980, "mem_clock_max": 3201,
        "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
        "clock_reasons": 4, "ecc_uncorrected": 0, "remapped_rows": [0, 0, 0, 0],
        "persistence": 1, "mig": [0, 0],
        "gpm_supported": true, "gpm": {"2": 91.5, "3": 40.25, "5": 63.0, "10": 22.5},
        "gpm_metric_errors": {"10": "NotSupported"},
        "procs": [{"pid": 4242, "used_mib": 16896}],  # used_mib null: not available
        "graphics_procs": [],
        "fail": {"nvmlDeviceGetFanSpeed": "NotSupported"}   # function -> error, this GPU
      }]
    }

Everything missing from a GPU takes the defaults in :data:`GPU_DEFAULTS`. ``calls`` counts
calls per function name, so tests can check what the agent asked and how often. Use it in
process (``Agent(FakeNVML(scenario))``) or, for a real subprocess of ``agent.py``, through a
``pynvml.py`` shim written by :func:`write_shim` into the folder given as ``--pynvml-dir``.

:func:`fake_nvidia_smi` prints the same scenario as nvidia-smi's CSV would show it, so a test
can feed one GPU state to the agent and to the nvidia-smi parser and compare the records.
"""

from __future__ import annotations

import ctypes
import json
import os
import types
from collections import Counter
from typing import Any

# NVML return codes (nvml.h), with pynvml's class-name suffix and message.
ERRORS: dict[str, tuple[int, str]] = {
    "Uninitialized": (1, "Uninitialized"),
    "InvalidArgument": (2, "Invalid Argument"),
    "NotSupported": (3, "Not Supported"),
    "NoPermission": (4, "Insufficient Permissions"),
    "NotFound": (6, "Not Found"),
    "InsufficientSize": (7, "Insufficient Size"),
    "DriverNotLoaded": (9, "Driver Not Loaded"),
    "Timeout": (10, "Timeout"),
    "LibraryNotFound": (12, "NVML Shared Library Not Found"),
    "FunctionNotFound": (13, "Function Not Found"),
    "GpuIsLost": (15, "GPU is lost"),
    "ResetRequired": (16, "GPU requires restart"),
    "LibRmVersionMismatch": (18, "RM has detected an NVML/RM version mismatch."),
    "ArgumentVersionMismatch": (25, "Argument Version Mismatch"),
    "Unknown": (999, "Unknown Error"),
}
_MESSAGES = {code: msg for code, msg in ERRORS.values()}

GIB = 1 << 30
MIB = 1 << 20

GPU_DEFAULTS: dict[str, Any] = {
    "handle_error": None,
    "name": "NVIDIA H200",
    "uuid": None,
    "pci_bus_id": None,
    "util_gpu": 0,
    "util_mem": 0,
    "mem_total": 143771 * MIB,
    "mem_used": 0,
    "mem_reserved": 512 * MIB,
    "temp": 30,
    "power_mw": 75000,
    "power_limit_mw": 700000,
    "sm_clock": 345,
    "mem_clock": 3201,
    "sm_clock_max": 1980,
    "mem_clock_max": 3201,
    "pcie_gen": 5,
    "pcie_gen_max": 5,
    "pcie_width": 16,
    "pcie_width_max": 16,
    "fan": 0,
    "pstate": 0,
    "clock_reasons": 1,
    "ecc_uncorrected": 0,
    "remapped_rows": [0, 0, 0, 0],
    "persistence": 1,
    "mig": [0, 0],
    "gpm_supported": True,
    "gpm": {},
    "gpm_metric_errors": {},
    "procs": [],
    "graphics_procs": [],
    "fail": {},
}


class NVMLError(Exception):
    """pynvml's ``NVMLError``: ``NVMLError(code)`` makes the subclass for that code."""

    _classes: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._classes.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


#: ``NVMLError_NotSupported`` etc., like pynvml's generated classes.
ERROR_CLASSES: dict[str, type[NVMLError]] = {}
for _suffix, (_code, _msg) in ERRORS.items():
    _cls = type("NVMLError_" + _suffix, (NVMLError,), {})
    NVMLError._classes[_code] = _cls
    ERROR_CLASSES["NVMLError_" + _suffix] = _cls


def error(name: str) -> NVMLError:
    """The NVMLError for a class suffix (``"NotSupported"``)."""
    return NVMLError(ERRORS[name][0])


class FakeHandle:
    """A device handle (``nvmlDevice_t``): one object per index, as NVML returns one pointer."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"FakeHandle({self.index})"


class Struct:
    """A plain record with attributes (stands in for pynvml's ctypes structs)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class GpmSample:
    """An ``nvmlGpmSample_t``: which GPU it was taken on, and when (a counter)."""

    def __init__(self) -> None:
        self.gpu: int | None = None
        self.tick = -1
        self.freed = False


class GpmMetric:
    """``nvmlGpmMetric_t``: metricId in; nvmlReturn and value out."""

    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class GpmMetricsGet:
    """``c_nvmlGpmMetricsGet_t``."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: GpmSample | None = None
        self.sample2: GpmSample | None = None
        self.metrics = [GpmMetric() for _ in range(32)]


class EventSet:
    """``nvmlEventSet_t``: the GPUs registered, and the queue of pending events."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}
        self.queue: list[Struct] = []
        self.freed = False


class FakeNVML(types.ModuleType):
    """The fake ``pynvml`` module. See the module docstring for the scenario format."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_FEATURE_ENABLED = 1
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    nvmlMemory_v2 = 0x02000028
    nvmlEventTypeXidCriticalError = 0x8
    NVMLError = NVMLError
    c_nvmlGpmMetricsGet_t = GpmMetricsGet

    def __init__(self, scenario: dict[str, Any] | None = None) -> None:
        super().__init__("pynvml", "FakeNVML stand-in for pynvml (tests only)")
        for name, cls in ERROR_CLASSES.items():
            setattr(self, name, cls)
        sc = dict(scenario or {})
        self.scenario = sc
        self.gpu_specs: list[dict[str, Any]] = []
        for i, g in enumerate(sc.get("gpus", [])):
            spec = dict(GPU_DEFAULTS)
            spec.update(g)
            spec.setdefault("uuid", None)
            if spec["uuid"] is None:
                spec["uuid"] = f"GPU-fake-{i:04d}"
            if spec["pci_bus_id"] is None:
                spec["pci_bus_id"] = f"00000000:{0x19 + i:02X}:00.0"
            self.gpu_specs.append(spec)
        self.missing = set(sc.get("missing", []))
        self.calls: Counter[str] = Counter()
        self.initialized = False
        self.lost: set[int] = set()
        self.tick = 0
        self.handles = [FakeHandle(i) for i in range(len(self.gpu_specs))]
        self.event_sets: list[EventSet] = []
        self.pending_xids: list[dict[str, int]] = list(sc.get("xid_events", []))

    @classmethod
    def from_file(cls, path: str) -> FakeNVML:
        """A FakeNVML from a scenario JSON file."""
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    # -- scenario control (tests) --------------------------------------------------------------

    def lose_gpu(self, index: int) -> None:
        """From now on every call on GPU ``index`` (and its handle lookup) says GpuIsLost;
        its event registrations go with its handle (a handle it gets when it is back must be
        registered again)."""
        self.lost.add(index)
        for es in self.event_sets:
            es.registered.pop(index, None)

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Queue an Xid event on GPU ``gpu`` for registered event sets."""
        self.pending_xids.append({"gpu": gpu, "xid": xid})

    def set_gpu(self, index: int, **fields: Any) -> None:
        """Change GPU ``index``'s scenario values (e.g. ``util_gpu=50``)."""
        self.gpu_specs[index].update(fields)

    # -- internals -----------------------------------------------------------------------------

    def _enter(self, fn: str, handle: FakeHandle | None = None) -> dict[str, Any]:
        self.calls[fn] += 1
        if fn in self.missing:
            raise error("FunctionNotFound")
        if not self.initialized and fn not in ("nvmlInit", "nvmlInitWithFlags"):
            raise error("Uninitialized")
        if handle is None:
            return {}
        if not isinstance(handle, FakeHandle):
            raise error("InvalidArgument")
        if handle.index in self.lost:
            raise error("GpuIsLost")
        spec = self.gpu_specs[handle.index]
        why = spec["fail"].get(fn)
        if why:
            raise error(why)
        return spec

    # -- init / system --------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: int) -> None:
        """``nvmlInitWithFlags``: raises the scenario's ``init_error``."""
        self._enter("nvmlInitWithFlags")
        why = self.scenario.get("init_error")
        if why == "OSError":
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")
        if why:
            raise error(why)
        self.initialized = True

    def nvmlInit(self) -> None:
        """``nvmlInit``."""
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        """``nvmlShutdown``."""
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        """``nvmlSystemGetDriverVersion``."""
        self._enter("nvmlSystemGetDriverVersion")
        return str(self.scenario.get("driver_version", "580.159.04"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        """``nvmlSystemGetNVMLVersion``."""
        self._enter("nvmlSystemGetNVMLVersion")
        return str(self.scenario.get("nvml_version", "13.580.159.04"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``: e.g. 13000."""
        self._enter("nvmlSystemGetCudaDriverVersion")
        return int(self.scenario.get("cuda_version", 13000))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        """``nvmlSystemGetCudaDriverVersion_v2``."""
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return int(self.scenario.get("cuda_version", 13000))

    def nvmlDeviceGetCount(self) -> int:
        """``nvmlDeviceGetCount``."""
        self._enter("nvmlDeviceGetCount")
        return len(self.gpu_specs)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """``nvmlDeviceGetHandleByIndex``: the scenario's ``handle_error`` or a handle."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if index in self.lost:
            raise error("GpuIsLost")
        why = self.gpu_specs[index]["handle_error"]
        if why:
            raise error(why)
        return self.handles[index]

    # -- device fields ---------------------------------------------------------------------------

    def nvmlDeviceGetName(self, h: FakeHandle) -> str:
        """``nvmlDeviceGetName``."""
        return str(self._enter("nvmlDeviceGetName", h)["name"])

    def nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        """``nvmlDeviceGetUUID``."""
        return str(self._enter("nvmlDeviceGetUUID", h)["uuid"])

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> Struct:
        """``nvmlDeviceGetPciInfo``: ``busId`` as bytes (a char array in pynvml)."""
        spec = self._enter("nvmlDeviceGetPciInfo", h)
        return Struct(busId=str(spec["pci_bus_id"]).encode())

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> Struct:
        """``nvmlDeviceGetUtilizationRates``: ``gpu`` and ``memory`` (%)."""
        spec = self._enter("nvmlDeviceGetUtilizationRates", h)
        return Struct(gpu=spec["util_gpu"], memory=spec["util_mem"])

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle, version: int | None = None) -> Struct:
        """``nvmlDeviceGetMemoryInfo`` (v1: used includes reserved) or ``_v2`` (version=)."""
        if version:
            spec = self._enter("nvmlDeviceGetMemoryInfo_v2", h)
            if version != self.nvmlMemory_v2:
                raise error("ArgumentVersionMismatch")
            used, total, res = spec["mem_used"], spec["mem_total"], spec["mem_reserved"]
            return Struct(
                version=version, total=total, reserved=res, used=used, free=total - used - res
            )
        spec = self._enter("nvmlDeviceGetMemoryInfo", h)
        used = spec["mem_used"] + spec["mem_reserved"]
        return Struct(total=spec["mem_total"], used=used, free=spec["mem_total"] - used)

    def nvmlDeviceGetTemperatureV(self, h: FakeHandle, sensor: int) -> int:
        """``nvmlDeviceGetTemperatureV`` (C)."""
        return int(self._enter("nvmlDeviceGetTemperatureV", h)["temp"])

    def nvmlDeviceGetTemperature(self, h: FakeHandle, sensor: int) -> int:
        """``nvmlDeviceGetTemperature`` (C)."""
        return int(self._enter("nvmlDeviceGetTemperature", h)["temp"])

    def nvmlDeviceGetPowerUsage(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetPowerUsage`` (mW)."""
        return int(self._enter("nvmlDeviceGetPowerUsage", h)["power_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetEnforcedPowerLimit`` (mW)."""
        return int(self._enter("nvmlDeviceGetEnforcedPowerLimit", h)["power_limit_mw"])

    def nvmlDeviceGetClockInfo(self, h: FakeHandle, clock: int) -> int:
        """``nvmlDeviceGetClockInfo`` (MHz) for NVML_CLOCK_SM / NVML_CLOCK_MEM."""
        spec = self._enter("nvmlDeviceGetClockInfo", h)
        return int(spec["sm_clock"] if clock == self.NVML_CLOCK_SM else spec["mem_clock"])

    def nvmlDeviceGetMaxClockInfo(self, h: FakeHandle, clock: int) -> int:
        """``nvmlDeviceGetMaxClockInfo`` (MHz) for NVML_CLOCK_SM / NVML_CLOCK_MEM."""
        spec = self._enter("nvmlDeviceGetMaxClockInfo", h)
        return int(spec["sm_clock_max"] if clock == self.NVML_CLOCK_SM else spec["mem_clock_max"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetCurrPcieLinkGeneration``."""
        return int(self._enter("nvmlDeviceGetCurrPcieLinkGeneration", h)["pcie_gen"])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetMaxPcieLinkGeneration``."""
        return int(self._enter("nvmlDeviceGetMaxPcieLinkGeneration", h)["pcie_gen_max"])

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetCurrPcieLinkWidth`` (lanes)."""
        return int(self._enter("nvmlDeviceGetCurrPcieLinkWidth", h)["pcie_width"])

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetMaxPcieLinkWidth`` (lanes)."""
        return int(self._enter("nvmlDeviceGetMaxPcieLinkWidth", h)["pcie_width_max"])

    def nvmlDeviceGetFanSpeed(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetFanSpeed`` (%)."""
        return int(self._enter("nvmlDeviceGetFanSpeed", h)["fan"])

    def nvmlDeviceGetPerformanceState(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetPerformanceState`` (0..15, 32 unknown)."""
        return int(self._enter("nvmlDeviceGetPerformanceState", h)["pstate"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetCurrentClocksEventReasons`` (bit mask)."""
        return int(self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)["clock_reasons"])

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetCurrentClocksThrottleReasons`` (bit mask; older name)."""
        return int(self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)["clock_reasons"])

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, etype: int, counter: int) -> int:
        """``nvmlDeviceGetTotalEccErrors``."""
        return int(self._enter("nvmlDeviceGetTotalEccErrors", h)["ecc_uncorrected"])

    def nvmlDeviceGetRemappedRows(self, h: FakeHandle) -> tuple[int, int, int, int]:
        """``nvmlDeviceGetRemappedRows``: (correctable, uncorrectable, pending, failure)."""
        c, u, p, f = self._enter("nvmlDeviceGetRemappedRows", h)["remapped_rows"]
        return int(c), int(u), int(p), int(f)

    def nvmlDeviceGetPersistenceMode(self, h: FakeHandle) -> int:
        """``nvmlDeviceGetPersistenceMode``."""
        return int(self._enter("nvmlDeviceGetPersistenceMode", h)["persistence"])

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> list[int]:
        """``nvmlDeviceGetMigMode``: [current, pending]."""
        return list(self._enter("nvmlDeviceGetMigMode", h)["mig"])

    # -- processes -------------------------------------------------------------------------------

    def _procs(self, fn: str, key: str, h: FakeHandle) -> list[Struct]:
        spec = self._enter(fn, h)
        return [
            Struct(
                pid=p["pid"],
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
                usedGpuMemory=None if p.get("used_mib") is None else int(p["used_mib"]) * MIB,
            )
            for p in spec[key]
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: FakeHandle) -> list[Struct]:
        """``nvmlDeviceGetComputeRunningProcesses_v3``."""
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", "procs", h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeHandle) -> list[Struct]:
        """``nvmlDeviceGetComputeRunningProcesses_v2``."""
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", "procs", h)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: FakeHandle) -> list[Struct]:
        """``nvmlDeviceGetGraphicsRunningProcesses_v3``."""
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics_procs", h)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: FakeHandle) -> list[Struct]:
        """``nvmlDeviceGetGraphicsRunningProcesses_v2``."""
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics_procs", h)

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        """pynvml's symbol lookup; only the v1 process-list symbols are provided, as C-like
        functions ``fn(handle, byref(c_uint count), array or None) -> return code``."""
        self.calls["_nvmlGetFunctionPointer:" + name] += 1
        if name in self.missing:
            raise error("FunctionNotFound")
        key = {
            "nvmlDeviceGetComputeRunningProcesses": "procs",
            "nvmlDeviceGetGraphicsRunningProcesses": "graphics_procs",
        }.get(name)
        if key is None:
            raise error("FunctionNotFound")

        def c_function(h: FakeHandle, count_ref: Any, array: Any) -> int:
            try:
                spec = self._enter(name, h)
            except NVMLError as e:
                return e.value
            procs = spec[key]
            count = count_ref._obj  # the c_uint behind ctypes.byref()
            if array is None or count.value < len(procs):
                count.value = len(procs)
                return 0 if not procs else ERRORS["InsufficientSize"][0]
            for i, p in enumerate(procs):
                array[i].pid = p["pid"]
                used = p.get("used_mib")
                array[i].usedGpuMemory = (
                    ctypes.c_ulonglong(-1).value if used is None else int(used) * MIB
                )
            count.value = len(procs)
            return 0

        return c_function

    # -- events -----------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> EventSet:
        """``nvmlEventSetCreate``."""
        self._enter("nvmlEventSetCreate")
        why = self.scenario.get("event_set_error")
        if why:
            raise error(why)
        es = EventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, h: FakeHandle, types_: int, es: EventSet) -> None:
        """``nvmlDeviceRegisterEvents``."""
        self._enter("nvmlDeviceRegisterEvents", h)
        es.registered[h.index] = es.registered.get(h.index, 0) | types_

    def nvmlEventSetWait(self, es: EventSet, timeout_ms: int) -> Struct:
        """``nvmlEventSetWait`` (v2 data): an ``nvmlEventData_t`` or NVMLError_Timeout."""
        self._enter("nvmlEventSetWait")
        keep = []
        for ev in self.pending_xids:
            if ev["gpu"] in es.registered:
                es.queue.append(
                    Struct(
                        device=self.handles[ev["gpu"]],
                        eventType=self.nvmlEventTypeXidCriticalError,
                        eventData=ev["xid"],
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
                )
            else:
                keep.append(ev)
        self.pending_xids = keep
        if not es.queue:
            raise error("Timeout")
        return es.queue.pop(0)

    def nvmlEventSetFree(self, es: EventSet) -> None:
        """``nvmlEventSetFree``."""
        self._enter("nvmlEventSetFree")
        es.freed = True

    # -- GPM --------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: FakeHandle) -> Struct:
        """``nvmlGpmQueryDeviceSupport``: ``isSupportedDevice``."""
        spec = self._enter("nvmlGpmQueryDeviceSupport", h)
        return Struct(version=1, isSupportedDevice=1 if spec["gpm_supported"] else 0)

    def nvmlGpmSampleAlloc(self) -> GpmSample:
        """``nvmlGpmSampleAlloc``."""
        self._enter("nvmlGpmSampleAlloc")
        return GpmSample()

    def nvmlGpmSampleFree(self, sample: GpmSample) -> None:
        """``nvmlGpmSampleFree``."""
        self._enter("nvmlGpmSampleFree")
        sample.freed = True

    def nvmlGpmSampleGet(self, h: FakeHandle, sample: GpmSample) -> GpmSample:
        """``nvmlGpmSampleGet``: stamps the sample with the GPU and a new tick."""
        spec = self._enter("nvmlGpmSampleGet", h)
        if not spec["gpm_supported"]:
            raise error("NotSupported")
        self.tick += 1
        sample.gpu, sample.tick = h.index, self.tick
        return sample

    def nvmlGpmMetricsGet(self, mg: GpmMetricsGet) -> GpmMetricsGet:
        """``nvmlGpmMetricsGet``: InvalidArgument unless sample1 and sample2 are two distinct
        samples of one GPU, sample1 taken first; values from the scenario's ``gpm``."""
        self._enter("nvmlGpmMetricsGet")
        s1, s2 = mg.sample1, mg.sample2
        if (
            mg.version != self.NVML_GPM_METRICS_GET_VERSION
            or s1 is None
            or s2 is None
            or s1 is s2
            or s1.gpu is None
            or s1.gpu != s2.gpu
            or not s1.tick < s2.tick
        ):
            raise error("InvalidArgument")
        spec = self.gpu_specs[s1.gpu]
        for m in mg.metrics[: mg.numMetrics]:
            why = spec["gpm_metric_errors"].get(str(m.metricId))
            if why:
                m.nvmlReturn, m.value = ERRORS[why][0], 0.0
            else:
                m.nvmlReturn, m.value = 0, float(spec["gpm"].get(str(m.metricId), 0.0))
        return mg


# ---------------------------------------------------------------------------------------------
# the same GPU state as nvidia-smi would print it


#: NVML error suffix -> the token nvidia-smi prints instead of a value.
SMI_TOKENS: dict[str, str] = {
    "NotSupported": "[N/A]",
    "FunctionNotFound": "[N/A]",
    "NoPermission": "[Insufficient Permissions]",
    "ResetRequired": "[GPU requires reset]",
}


def _smi_value(nv: FakeNVML, h: FakeHandle, index: int, field: str) -> str:
    """One ``--query-gpu`` value as nvidia-smi prints it with ``nounits`` (it is an NVML client:
    the same calls, formatted): W with 2 decimals, MiB as whole numbers, masks as 0x%016x."""
    if field == "index":
        return str(index)
    if field == "uuid":
        return nv.nvmlDeviceGetUUID(h)
    if field == "name":
        return nv.nvmlDeviceGetName(h)
    if field == "pci.bus_id":
        pci: Any = nv.nvmlDeviceGetPciInfo(h)  # a Struct: fields as attributes
        return str(pci.busId.decode())
    if field in ("utilization.gpu", "utilization.memory"):
        u: Any = nv.nvmlDeviceGetUtilizationRates(h)
        return str(u.gpu if field == "utilization.gpu" else u.memory)
    if field in ("memory.used", "memory.total"):
        m: Any = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        return str((m.used if field == "memory.used" else m.total) // MIB)
    if field == "temperature.gpu":
        return str(nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU))
    if field == "power.draw":
        return f"{nv.nvmlDeviceGetPowerUsage(h) / 1000:.2f}"
    if field == "enforced.power.limit":
        return f"{nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000:.2f}"
    if field in ("clocks.sm", "clocks.mem"):
        return str(
            nv.nvmlDeviceGetClockInfo(
                h, nv.NVML_CLOCK_SM if field == "clocks.sm" else nv.NVML_CLOCK_MEM
            )
        )
    if field in ("clocks.max.sm", "clocks.max.memory"):
        return str(
            nv.nvmlDeviceGetMaxClockInfo(
                h, nv.NVML_CLOCK_SM if field == "clocks.max.sm" else nv.NVML_CLOCK_MEM
            )
        )
    if field == "fan.speed":
        return str(nv.nvmlDeviceGetFanSpeed(h))
    if field == "pstate":
        return f"P{nv.nvmlDeviceGetPerformanceState(h)}"
    if field == "clocks_event_reasons.active":
        return f"0x{nv.nvmlDeviceGetCurrentClocksEventReasons(h):016x}"
    if field == "clocks_throttle_reasons.active":
        return f"0x{nv.nvmlDeviceGetCurrentClocksThrottleReasons(h):016x}"
    if field == "ecc.errors.uncorrected.volatile.total":
        return str(
            nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            )
        )
    if field == "persistence_mode":
        return "Enabled" if nv.nvmlDeviceGetPersistenceMode(h) == 1 else "Disabled"
    if field == "mig.mode.current":
        return "Enabled" if nv.nvmlDeviceGetMigMode(h)[0] == 1 else "Disabled"
    if field == "driver_version":
        return nv.nvmlSystemGetDriverVersion()
    raise KeyError(f"fake nvidia-smi: no rendering for field {field!r}")


def fake_nvidia_smi(
    scenario: dict[str, Any],
    fields: list[str] | tuple[str, ...],
) -> tuple[str, str]:
    """What ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` and
    ``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits``
    print for a scenario's GPU state: ``(query_gpu_text, compute_apps_text)``.

    A stand-in for nvidia-smi, for tests that feed one GPU state to both the agent and the
    nvidia-smi parser. Values come from a FakeNVML of the same scenario (nvidia-smi reads
    NVML too); a call that fails prints nvidia-smi's token (:data:`SMI_TOKENS`, else
    ``[Unknown Error]``). No GPU: ``No devices were found``. Lost GPUs are not rendered.
    """
    nv = FakeNVML(scenario)
    nv.nvmlInit()
    count = nv.nvmlDeviceGetCount()
    if count == 0:
        return "No devices were found\n", ""
    lines, apps = [], []
    for i in range(count):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        values = []
        for f in fields:
            try:
                values.append(_smi_value(nv, h, i, f))
            except NVMLError as e:
                suffix = type(e).__name__.partition("_")[2]
                values.append(SMI_TOKENS.get(suffix, "[Unknown Error]"))
        lines.append(", ".join(values))
        uuid = nv.nvmlDeviceGetUUID(h)
        procs: list[Any] = nv.nvmlDeviceGetComputeRunningProcesses_v3(h)
        for p in procs:
            used = "[N/A]" if p.usedGpuMemory is None else str(p.usedGpuMemory // MIB)
            apps.append(f"{uuid}, {p.pid}, {used}")
    return "".join(ln + "\n" for ln in lines), "".join(ln + "\n" for ln in apps)


SHIM = '''"""pynvml shim (tests): becomes a FakeNVML built from $FAKE_NVML_SCENARIO."""
import os
import sys

sys.path.insert(0, {agent_dir!r})
import fake_nvml  # noqa: E402

sys.modules[__name__] = fake_nvml.FakeNVML.from_file(os.environ["FAKE_NVML_SCENARIO"])
'''


def write_shim(folder: str) -> str:
    """Write ``folder/pynvml.py`` that turns ``import pynvml`` into a FakeNVML built from the
    scenario file named by ``$FAKE_NVML_SCENARIO``; returns the shim's path."""
    path = os.path.join(folder, "pynvml.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(SHIM.format(agent_dir=os.path.dirname(os.path.abspath(__file__))))
    return path
