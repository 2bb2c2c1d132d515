"""A small ctypes binding of the NVML calls the gpuconsole host agent makes (and no others).

Shipped to GPU hosts beside ``agent.py`` and run there with the host's ``python3`` (3.8 or
newer, standard library only). It exposes the subset of nvidia-ml-py's ``pynvml`` API that
``agent.py`` uses, with the same names, arguments and return shapes, so the agent takes either
module as its ``nv``. Why it exists: ``import pynvml`` defines hundreds of ctypes structures
and functions and costs about 29 ms of CPU per start of the agent (the agent starts once per
connection); this module defines the dozen structures the agent needs, loads
``libnvidia-ml.so.1`` at ``nvmlInit``/``nvmlInitWithFlags`` (never at import) and looks each C
function up on its first call, then keeps it.

Source of every layout and number: NVIDIA's own ``pynvml.py`` of nvidia-ml-py 13.615.71 (the
release the console ships; its struct ``_fields_``, constants, the symbol each wrapper calls,
its ``NVMLError`` strings) and ``nvml.h`` (the NVML API reference) for what the calls mean.
``tests/unit/test_nvmlc.py`` checks every structure and constant here against the installed
``pynvml``: field names, order, ctypes types, ``sizeof``.

Where it differs from pynvml, on purpose:

* ``NVMLError`` is one class (no generated ``NVMLError_*`` subclasses); ``NVMLError(code)``
  carries the NVML return code in ``.value`` and its ``str`` is pynvml's (the same table of
  messages, else NVML's own ``nvmlErrorString``, else ``"NVML Error with code N"``).
* Structures are plain ``ctypes.Structure``: a char array field reads as ``bytes`` (pynvml's
  ``_PrintableStructure`` decodes it to ``str``); functions that return a string return
  ``str``, as pynvml's do (undecodable bytes replaced, where pynvml would raise).
* Process lists are :class:`ProcessInfo` objects (``pid``, ``usedGpuMemory``: bytes, ``None``
  when NVML has no value, ``gpuInstanceId``, ``computeInstanceId``), as pynvml's
  ``nvmlFriendlyObject`` has them.
* Not thread-safe beyond loading the library once (the agent calls NVML from one thread).

Python 3.8 syntax; annotations are strings (never evaluated); nothing Unix-only is imported.
"""

from __future__ import annotations

import _thread  # threading's C core (``threading`` imports functools, collections: 3 ms)
import ctypes
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_uint,
    c_ulonglong,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

# --------------------------------------------------------------------------------------------
# constants (pynvml.py / nvml.h)

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_INIT_FLAG_NO_GPUS = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
NVML_CLOCK_GRAPHICS = 0  # nvmlClockType_t
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_VOLATILE_ECC = 0  # nvmlEccCounterType_t
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0  # nvmlMemoryErrorType_t
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16

#: ``NVML_VALUE_NOT_AVAILABLE_ulonglong`` (pynvml has it as ``c_ulonglong(-1)``; here its value).
NVML_VALUE_NOT_AVAILABLE_ULONGLONG = (1 << 64) - 1

#: struct versions: ``NVML_STRUCT_VERSION(name, n)`` = ``sizeof(struct) | n << 24``.
nvmlMemory_v2 = 0x02000028
nvmlTemperature_v1 = 0x100000C
NVML_GPM_SUPPORT_VERSION = 1
NVML_GPM_METRICS_GET_VERSION = 1
#: the length of ``nvmlGpmMetricsGet_t.metrics`` (pynvml 13.615: 477).
NVML_GPM_METRIC_MAX = 477
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10

nvmlEventTypeXidCriticalError = 0x8

# --------------------------------------------------------------------------------------------
# types (pynvml.py's _fields_, in its order)

_nvmlReturn_t = c_uint


class struct_c_nvmlDevice_t(Structure):
    """Opaque: ``nvmlDevice_t`` is a pointer to it."""


c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)


class struct_c_nvmlEventSet_t(Structure):
    """Opaque: ``nvmlEventSet_t`` is a pointer to it."""


c_nvmlEventSet_t = POINTER(struct_c_nvmlEventSet_t)


class struct_c_nvmlGpmSample_t(Structure):
    """Opaque: ``nvmlGpmSample_t`` is a pointer to it."""


c_nvmlGpmSample_t = POINTER(struct_c_nvmlGpmSample_t)


class nvmlPciInfo_t(Structure):
    """``nvmlPciInfo_t`` (v3: ``busId`` is the 32-byte field at the end)."""

    _fields_ = [
        ("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class c_nvmlUtilization_t(Structure):
    """``nvmlUtilization_t``: % of the last sample period busy (kernel, memory)."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class c_nvmlMemory_t(Structure):
    """``nvmlMemory_t`` (v1), bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    """``nvmlMemory_v2_t``, bytes (``used`` excludes ``reserved``)."""

    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


class c_nvmlTemperature_v1_t(Structure):
    """``nvmlTemperature_v1_t`` (``nvmlDeviceGetTemperatureV``), degrees C."""

    _fields_ = [("version", c_uint), ("sensorType", c_uint), ("temperature", c_int)]


class c_nvmlProcessInfo_v2_t(Structure):
    """``nvmlProcessInfo_v2_t`` (the v2 and v3 process lists use the same layout)."""

    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_v2_t


class c_nvmlEventData_t(Structure):
    """``nvmlEventData_t``."""

    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("eventType", c_ulonglong),
        ("eventData", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


class c_nvmlGpmSupport_t(Structure):
    """``nvmlGpmSupport_t``."""

    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class c_metricInfo_t(Structure):
    """``nvmlGpmMetric_t.metricInfo``: names and unit (NVML's own strings)."""

    _fields_ = [("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p)]


class c_nvmlGpmMetric_t(Structure):
    """``nvmlGpmMetric_t``: ``metricId`` in; ``nvmlReturn``, ``value``, ``metricInfo`` out."""

    _fields_ = [
        ("metricId", c_uint),
        ("nvmlReturn", _nvmlReturn_t),
        ("value", c_double),
        ("metricInfo", c_metricInfo_t),
    ]


class c_nvmlGpmMetricsGet_t(Structure):
    """``nvmlGpmMetricsGet_t``: two samples and the metrics asked for between them."""

    _fields_ = [
        ("version", c_uint),
        ("numMetrics", c_uint),
        ("sample1", c_nvmlGpmSample_t),
        ("sample2", c_nvmlGpmSample_t),
        ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX),
    ]


class ProcessInfo:
    """One process of a GPU's process list (pynvml's ``nvmlFriendlyObject`` of it)."""

    __slots__ = ("computeInstanceId", "gpuInstanceId", "pid", "usedGpuMemory")

    def __init__(
        self, pid: int, used: int | None, gpu_instance: int, compute_instance: int
    ) -> None:
        self.pid = pid
        self.usedGpuMemory = used
        self.gpuInstanceId = gpu_instance
        self.computeInstanceId = compute_instance


# --------------------------------------------------------------------------------------------
# errors


class NVMLError(Exception):
    """An NVML call's failure: ``value`` is the NVML return code (``nvmlReturn_t``)."""

    #: pynvml's messages for the codes it knows; others are asked of ``nvmlErrorString``.
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        text = self._errcode_to_string.get(self.value)
        if text is None:
            try:
                text = nvmlErrorString(self.value)
            except NVMLError:
                return f"NVML Error with code {self.value}"
            self._errcode_to_string[self.value] = text
        return text


def _check(ret: int) -> None:
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)


# --------------------------------------------------------------------------------------------
# the library and its functions: loaded on the first nvmlInit, each function on its first call

_lib: Any = None
_load_lock = _thread.allocate_lock()
_fns: dict[str, Any] = {}
_refcount = 0


def _load_library() -> None:
    """``libnvidia-ml.so.1`` (``nvml.dll`` on Windows, where the driver puts it), once;
    NVML_ERROR_LIBRARY_NOT_FOUND when it cannot be loaded (as pynvml says it)."""
    global _lib
    if _lib is not None:
        return
    with _load_lock:
        if _lib is not None:
            return
        import sys

        try:
            if sys.platform.startswith("win"):
                import os

                try:
                    lib = ctypes.CDLL(
                        os.path.join(os.getenv("WINDIR", "C:/Windows"), "System32/nvml.dll")
                    )
                except OSError:
                    lib = ctypes.CDLL(
                        os.path.join(
                            os.getenv("ProgramFiles", "C:/Program Files"),
                            "NVIDIA Corporation/NVSMI/nvml.dll",
                        )
                    )
            else:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND) from None
        _lib = lib


def _nvmlGetFunctionPointer(name: str) -> Any:
    """The C function ``name`` of the loaded library (cached); NVML_ERROR_UNINITIALIZED
    before the library is loaded, NVML_ERROR_FUNCTION_NOT_FOUND when this driver lacks it.
    The agent calls it for the v1 process lists."""
    fn = _fns.get(name)
    if fn is not None:
        return fn
    if _lib is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    try:
        fn = getattr(_lib, name)
    except AttributeError:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND) from None
    _fns[name] = fn
    return fn


def _call(name: str, *args: Any) -> None:
    """Call the C function ``name``; raise :class:`NVMLError` unless it returns success."""
    ret = _nvmlGetFunctionPointer(name)(*args)
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)


def _uint(name: str, handle: Any) -> int:
    """``fn(handle, unsigned int *)``."""
    out = c_uint()
    _call(name, handle, byref(out))
    return out.value


def _string(name: str, size: int, *first: Any) -> str:
    """``fn(*first, char *buf, unsigned int size)``, the text decoded."""
    buf = ctypes.create_string_buffer(size)
    _call(name, *first, buf, c_uint(size))
    return buf.value.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# init, system


def nvmlInitWithFlags(flags: int) -> None:
    """Load the library (first time) and ``nvmlInitWithFlags(flags)``."""
    global _refcount
    _load_library()
    _call("nvmlInitWithFlags", c_uint(flags))
    _refcount += 1


def nvmlInit() -> None:
    """``nvmlInitWithFlags(0)`` (pynvml does the same)."""
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    """``nvmlShutdown``; the library stays loaded."""
    global _refcount
    _call("nvmlShutdown")
    if _refcount > 0:
        _refcount -= 1


def nvmlErrorString(result: int) -> str:
    """NVML's text for a return code."""
    fn = _nvmlGetFunctionPointer("nvmlErrorString")
    fn.restype = c_char_p
    raw = fn(c_int(result))
    return raw.decode("utf-8", "replace") if raw else f"NVML Error with code {result}"


def nvmlSystemGetDriverVersion() -> str:
    """The driver version (``"580.159.04"``)."""
    return _string("nvmlSystemGetDriverVersion", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)


def nvmlSystemGetNVMLVersion() -> str:
    """NVML's version (``"13.580.159.04"``)."""
    return _string("nvmlSystemGetNVMLVersion", NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE)


def nvmlSystemGetCudaDriverVersion() -> int:
    """The CUDA driver API version the driver supports (``13000``)."""
    out = c_int()
    _call("nvmlSystemGetCudaDriverVersion", byref(out))
    return out.value


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    """As :func:`nvmlSystemGetCudaDriverVersion`, from the ``_v2`` symbol."""
    out = c_int()
    _call("nvmlSystemGetCudaDriverVersion_v2", byref(out))
    return out.value


# --------------------------------------------------------------------------------------------
# devices


def nvmlDeviceGetCount() -> int:
    """How many GPUs the driver enumerates (``nvmlDeviceGetCount_v2``)."""
    out = c_uint()
    _call("nvmlDeviceGetCount_v2", byref(out))
    return out.value


def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    """GPU ``index``'s handle (``nvmlDeviceGetHandleByIndex_v2``), a ``c_nvmlDevice_t``."""
    handle = c_nvmlDevice_t()
    _call("nvmlDeviceGetHandleByIndex_v2", c_uint(index), byref(handle))
    return handle


def nvmlDeviceGetName(handle: Any) -> str:
    """The product name (``"NVIDIA H100 80GB HBM3"``)."""
    return _string("nvmlDeviceGetName", NVML_DEVICE_NAME_V2_BUFFER_SIZE, handle)


def nvmlDeviceGetUUID(handle: Any) -> str:
    """The GPU's UUID (``"GPU-..."``)."""
    return _string("nvmlDeviceGetUUID", NVML_DEVICE_UUID_V2_BUFFER_SIZE, handle)


def nvmlDeviceGetPciInfo(handle: Any) -> nvmlPciInfo_t:
    """PCI identity (``nvmlDeviceGetPciInfo_v3``); ``busId`` as bytes."""
    info = nvmlPciInfo_t()
    _call("nvmlDeviceGetPciInfo_v3", handle, byref(info))
    return info


def nvmlDeviceGetUtilizationRates(handle: Any) -> c_nvmlUtilization_t:
    """GPU and memory utilization, %."""
    util = c_nvmlUtilization_t()
    _call("nvmlDeviceGetUtilizationRates", handle, byref(util))
    return util


def nvmlDeviceGetMemoryInfo(handle: Any, version: int | None = None) -> Any:
    """Memory in bytes: ``nvmlDeviceGetMemoryInfo`` (v1 struct), or with ``version``
    (:data:`nvmlMemory_v2`) ``nvmlDeviceGetMemoryInfo_v2``."""
    mem: Any
    if not version:
        mem = c_nvmlMemory_t()
        name = "nvmlDeviceGetMemoryInfo"
    else:
        mem = c_nvmlMemory_v2_t()
        mem.version = version
        name = "nvmlDeviceGetMemoryInfo_v2"
    _call(name, handle, byref(mem))
    return mem


def nvmlDeviceGetTemperatureV(handle: Any, sensor: int, version: int = nvmlTemperature_v1) -> int:
    """Temperature of ``sensor``, degrees C (``nvmlDeviceGetTemperatureV``, v1 struct)."""
    if version != nvmlTemperature_v1:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    temp = c_nvmlTemperature_v1_t()
    temp.version = nvmlTemperature_v1
    temp.sensorType = sensor
    _call("nvmlDeviceGetTemperatureV", handle, byref(temp))
    return int(temp.temperature)


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    """Temperature of ``sensor``, degrees C (the deprecated call, for older drivers)."""
    out = c_uint()
    _call("nvmlDeviceGetTemperature", handle, c_uint(sensor), byref(out))
    return out.value


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    """Power draw, mW."""
    return _uint("nvmlDeviceGetPowerUsage", handle)


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    """The power limit in force, mW."""
    return _uint("nvmlDeviceGetEnforcedPowerLimit", handle)


def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:
    """The current clock of domain ``type`` (:data:`NVML_CLOCK_SM`, ...), MHz."""
    out = c_uint()
    _call("nvmlDeviceGetClockInfo", handle, c_uint(type), byref(out))
    return out.value


def nvmlDeviceGetMaxClockInfo(handle: Any, type: int) -> int:
    """The highest clock of domain ``type``, MHz."""
    out = c_uint()
    _call("nvmlDeviceGetMaxClockInfo", handle, c_uint(type), byref(out))
    return out.value


def nvmlDeviceGetCurrPcieLinkGeneration(handle: Any) -> int:
    """The PCIe generation the link runs at now."""
    return _uint("nvmlDeviceGetCurrPcieLinkGeneration", handle)


def nvmlDeviceGetMaxPcieLinkGeneration(handle: Any) -> int:
    """The highest PCIe generation the GPU and the system allow."""
    return _uint("nvmlDeviceGetMaxPcieLinkGeneration", handle)


def nvmlDeviceGetCurrPcieLinkWidth(handle: Any) -> int:
    """The PCIe lanes in use now."""
    return _uint("nvmlDeviceGetCurrPcieLinkWidth", handle)


def nvmlDeviceGetMaxPcieLinkWidth(handle: Any) -> int:
    """The most PCIe lanes the GPU and the system allow."""
    return _uint("nvmlDeviceGetMaxPcieLinkWidth", handle)


def nvmlDeviceGetFanSpeed(handle: Any) -> int:
    """The fan's intended speed, %."""
    return _uint("nvmlDeviceGetFanSpeed", handle)


def nvmlDeviceGetPerformanceState(handle: Any) -> int:
    """The performance state, 0 (P0) to 15; 32 unknown."""
    return _uint("nvmlDeviceGetPerformanceState", handle)


def nvmlDeviceGetPersistenceMode(handle: Any) -> int:
    """:data:`NVML_FEATURE_ENABLED` or :data:`NVML_FEATURE_DISABLED`."""
    return _uint("nvmlDeviceGetPersistenceMode", handle)


def _ulonglong(name: str, handle: Any) -> int:
    out = c_ulonglong()
    _call(name, handle, byref(out))
    return out.value


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    """The clock event (throttle) reason bit mask."""
    return _ulonglong("nvmlDeviceGetCurrentClocksEventReasons", handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    """The same mask from the call's name before R535."""
    return _ulonglong("nvmlDeviceGetCurrentClocksThrottleReasons", handle)


def nvmlDeviceGetTotalEccErrors(handle: Any, errorType: int, counterType: int) -> int:
    """ECC error count of ``errorType`` (:data:`NVML_MEMORY_ERROR_TYPE_UNCORRECTED`, ...) in
    counter ``counterType`` (:data:`NVML_VOLATILE_ECC`, ...)."""
    out = c_ulonglong()
    _call("nvmlDeviceGetTotalEccErrors", handle, c_uint(errorType), c_uint(counterType), byref(out))
    return out.value


def nvmlDeviceGetRemappedRows(device: Any) -> tuple[int, int, int, int]:
    """``(correctable rows, uncorrectable rows, remapping pending, remapping failed)``."""
    corr, unc, pending, failure = c_uint(), c_uint(), c_uint(), c_uint()
    _call(
        "nvmlDeviceGetRemappedRows",
        device,
        byref(corr),
        byref(unc),
        byref(pending),
        byref(failure),
    )
    return (corr.value, unc.value, pending.value, failure.value)


def nvmlDeviceGetMigMode(device: Any) -> list[int]:
    """``[current, pending]`` MIG mode (:data:`NVML_DEVICE_MIG_ENABLE` when on)."""
    current, pending = c_uint(), c_uint()
    _call("nvmlDeviceGetMigMode", device, byref(current), byref(pending))
    return [current.value, pending.value]


def _processes(name: str, handle: Any) -> list[ProcessInfo]:
    """A ``_v2``/``_v3`` process list: ask the count, then the list, oversized (pynvml's
    way: a process may start between the two calls)."""
    fn = _nvmlGetFunctionPointer(name)
    count = c_uint(0)
    ret = fn(handle, byref(count), None)
    if ret == NVML_SUCCESS:
        return []
    if ret != NVML_ERROR_INSUFFICIENT_SIZE:
        raise NVMLError(ret)
    count.value = count.value * 2 + 5
    procs = (c_nvmlProcessInfo_v2_t * count.value)()
    _check(fn(handle, byref(count), procs))
    out = []
    for i in range(count.value):
        p = procs[i]
        used = p.usedGpuMemory
        out.append(
            ProcessInfo(
                p.pid,
                None if used == NVML_VALUE_NOT_AVAILABLE_ULONGLONG else used,
                p.gpuInstanceId,
                p.computeInstanceId,
            )
        )
    return out


def nvmlDeviceGetComputeRunningProcesses_v3(handle: Any) -> list[ProcessInfo]:
    """The compute processes on the GPU (``_v3`` symbol)."""
    return _processes("nvmlDeviceGetComputeRunningProcesses_v3", handle)


def nvmlDeviceGetComputeRunningProcesses_v2(handle: Any) -> list[ProcessInfo]:
    """The compute processes on the GPU (``_v2`` symbol, older drivers)."""
    return _processes("nvmlDeviceGetComputeRunningProcesses_v2", handle)


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle: Any) -> list[ProcessInfo]:
    """The graphics processes on the GPU (``_v3`` symbol)."""
    return _processes("nvmlDeviceGetGraphicsRunningProcesses_v3", handle)


def nvmlDeviceGetGraphicsRunningProcesses_v2(handle: Any) -> list[ProcessInfo]:
    """The graphics processes on the GPU (``_v2`` symbol, older drivers)."""
    return _processes("nvmlDeviceGetGraphicsRunningProcesses_v2", handle)


# --------------------------------------------------------------------------------------------
# events


def nvmlEventSetCreate() -> Any:
    """A new event set (``c_nvmlEventSet_t``)."""
    event_set = c_nvmlEventSet_t()
    _call("nvmlEventSetCreate", byref(event_set))
    return event_set


def nvmlDeviceRegisterEvents(handle: Any, eventTypes: int, eventSet: Any) -> None:
    """Register the GPU's events of the ``eventTypes`` mask in ``eventSet``."""
    _call("nvmlDeviceRegisterEvents", handle, c_ulonglong(eventTypes), eventSet)


def nvmlEventSetWait(eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
    """The next event (``nvmlEventSetWait_v2``), waiting up to ``timeoutms`` ms;
    NVML_ERROR_TIMEOUT when none came."""
    data = c_nvmlEventData_t()
    _call("nvmlEventSetWait_v2", eventSet, byref(data), c_uint(timeoutms))
    return data


def nvmlEventSetFree(eventSet: Any) -> None:
    """Free an event set."""
    _call("nvmlEventSetFree", eventSet)


# --------------------------------------------------------------------------------------------
# GPM (Hopper and newer)


def nvmlGpmQueryDeviceSupport(device: Any) -> c_nvmlGpmSupport_t:
    """Whether the GPU has GPM (``isSupportedDevice``)."""
    support = c_nvmlGpmSupport_t()
    support.version = NVML_GPM_SUPPORT_VERSION
    _call("nvmlGpmQueryDeviceSupport", device, byref(support))
    return support


def nvmlGpmSampleAlloc() -> Any:
    """A GPM sample buffer (``c_nvmlGpmSample_t``)."""
    sample = c_nvmlGpmSample_t()
    _call("nvmlGpmSampleAlloc", byref(sample))
    return sample


def nvmlGpmSampleFree(gpmSample: Any) -> None:
    """Free a GPM sample buffer."""
    _call("nvmlGpmSampleFree", gpmSample)


def nvmlGpmSampleGet(device: Any, gpmSample: Any) -> Any:
    """Take a GPM sample of the GPU into ``gpmSample``; returns it."""
    _call("nvmlGpmSampleGet", device, gpmSample)
    return gpmSample


def nvmlGpmMetricsGet(metricsGet: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
    """Compute ``metricsGet.metrics[:numMetrics]`` between its two samples; returns it."""
    _call("nvmlGpmMetricsGet", byref(metricsGet))
    return metricsGet
