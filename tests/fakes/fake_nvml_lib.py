"""FakeNvmlLibrary: a stand-in for ``libnvidia-ml.so.1`` itself (the C library), for testing
the NVML bindings (``remote/agent/nvmlc.py`` and nvidia-ml-py's ``pynvml``) without a GPU.

Not NVIDIA code. It is put where a binding keeps its loaded ``ctypes.CDLL`` (``nvmlc._lib``,
``pynvml.nvmlLib``); every C function the agent calls is a Python function here taking the
ctypes arguments the binding passes (``byref`` objects, arrays, values) and writing its outputs
into them the way ``nvml.h`` describes, returning an ``nvmlReturn_t``. A symbol in ``missing``
is absent (``getattr`` raises ``AttributeError``, as on a ``CDLL`` without it).

Two GPUs, handles ``0x1000 + index``: GPU 0 a busy H100 with GPM and two compute processes
(one without a memory figure), GPU 1 an idle one without GPM; both fanless (``NOT_SUPPORTED``).
One Xid 79 on GPU 1 waits in every event set. GPM metric 10 answers
``NVML_ERROR_ARGUMENT_VERSION_MISMATCH`` (a code whose text comes from ``nvmlErrorString``).

``calls`` records each call as ``(symbol, arguments described)``: sizes and type names of what
was passed by reference, values of what was passed by value, so two bindings' calls can be
compared.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from typing import Any

HANDLE_BASE = 0x1000
NOT_AVAILABLE_U64 = (1 << 64) - 1
MIB = 1 << 20
#: per GPU: name, UUID, bus id, util, memory (total, reserved, used), temperature, power
GPUS: list[dict[str, Any]] = [
    {
        "name": b"NVIDIA H100 80GB HBM3",
        "uuid": b"GPU-2f4b1a5c-0000-4000-8000-000000000000",
        "bus": b"00000000:19:00.0",
        "util": (97, 41),
        "mem": (81559 * MIB, 512 * MIB, 17000 * MIB),
        "temp": 55,
        "power": 512345,
        "gpm": True,
        "procs": [(4242, 16896 * MIB), (4243, NOT_AVAILABLE_U64)],
    },
    {
        "name": b"NVIDIA H100 80GB HBM3",
        "uuid": b"GPU-2f4b1a5c-0000-4000-8000-000000000001",
        "bus": b"00000000:2A:00.0",
        "util": (0, 0),
        "mem": (81559 * MIB, 512 * MIB, 0),
        "temp": 31,
        "power": 69000,
        "gpm": False,
        "procs": [],
    },
]
GPM_VALUES = {2: 91.5, 3: 40.25, 5: 63.0}
GPM_ERRORS = {10: 25}  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
ERROR_STRINGS = {25: b"Argument Version Mismatch"}


def _obj(arg: Any) -> Any:
    """What a ``byref(x)`` argument points at (``x``), else the argument itself."""
    return getattr(arg, "_obj", arg)


def _addr(ptr: Any) -> int:
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


def _set_ptr(ptr: Any, value: int) -> None:
    """Store address ``value`` in the ctypes pointer object ``ptr``."""
    ctypes.cast(ctypes.pointer(ptr), ctypes.POINTER(ctypes.c_void_p)).contents.value = value


def describe(arg: Any) -> Any:
    """A comparable description of one argument as the C function received it."""
    if arg is None:
        return None
    if isinstance(arg, int):
        return ("value", arg)
    if hasattr(arg, "_obj"):  # byref(x)
        x = arg._obj
        return ("byref", type(x).__name__, ctypes.sizeof(x))
    if isinstance(arg, ctypes.Array):
        return ("array", ctypes.sizeof(arg._type_), len(arg))
    if isinstance(arg, ctypes._Pointer):
        return ("ptr", _addr(arg))
    if isinstance(arg, ctypes._SimpleCData):
        return ("value", arg.value)
    return ("other", type(arg).__name__)


class FakeNvmlLibrary:
    """The fake ``libnvidia-ml.so.1``; see the module docstring."""

    def __init__(self, missing: Iterable[str] = ()) -> None:
        self.missing = set(missing)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._samples: dict[int, tuple[int, int]] = {}  # GPM sample address -> (gpu, tick)
        self._next_addr = 0x9000
        self._tick = 0
        self._event_sets: dict[int, list[int]] = {}  # address -> pending (gpu, xid) as gpu
        self._table: dict[str, Callable[..., int]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("_c_")
        }

    def __getattr__(self, name: str) -> Callable[..., int]:
        if name.startswith("_") or name in self.missing or name not in self._table:
            raise AttributeError(name)
        impl = self._table[name]

        def c_function(*args: Any) -> Any:
            self.calls.append((name, tuple(describe(a) for a in args)))
            return impl(*args)

        c_function.__name__ = name
        return c_function

    def _new_addr(self) -> int:
        self._next_addr += 0x10
        return self._next_addr

    @staticmethod
    def _gpu(handle: Any) -> int:
        return _addr(handle) - HANDLE_BASE

    # -- init, system -------------------------------------------------------------------------

    def _c_nvmlInitWithFlags(self, flags: Any) -> int:
        return 0

    def _c_nvmlShutdown(self) -> int:
        return 0

    def _c_nvmlErrorString(self, code: Any) -> bytes:
        return ERROR_STRINGS.get(code.value if hasattr(code, "value") else int(code), b"?")

    @staticmethod
    def _text(buf: Any, size: Any, text: bytes) -> int:
        n = size.value if hasattr(size, "value") else int(size)
        if len(text) + 1 > n:
            return 7
        buf.value = text
        return 0

    def _c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        return self._text(buf, size, b"580.159.04")

    def _c_nvmlSystemGetNVMLVersion(self, buf: Any, size: Any) -> int:
        return self._text(buf, size, b"13.580.159.04")

    def _c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> int:
        _obj(out).value = 13000
        return 0

    def _c_nvmlSystemGetCudaDriverVersion(self, out: Any) -> int:
        _obj(out).value = 12080
        return 0

    # -- devices ----------------------------------------------------------------------------------

    def _c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        _obj(out).value = len(GPUS)
        return 0

    def _c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = index.value if hasattr(index, "value") else int(index)
        if not 0 <= i < len(GPUS):
            return 2
        _set_ptr(_obj(out), HANDLE_BASE + i)
        return 0

    def _c_nvmlDeviceGetName(self, h: Any, buf: Any, size: Any) -> int:
        return self._text(buf, size, GPUS[self._gpu(h)]["name"])

    def _c_nvmlDeviceGetUUID(self, h: Any, buf: Any, size: Any) -> int:
        return self._text(buf, size, GPUS[self._gpu(h)]["uuid"])

    def _c_nvmlDeviceGetPciInfo_v3(self, h: Any, out: Any) -> int:
        info, g = _obj(out), self._gpu(h)
        info.busId = GPUS[g]["bus"]
        info.busIdLegacy = GPUS[g]["bus"][4:]
        info.domain, info.bus, info.device = 0, int(GPUS[g]["bus"][9:11], 16), 0
        info.pciDeviceId, info.pciSubSystemId = 0x233010DE, 0x16C110DE
        return 0

    def _c_nvmlDeviceGetUtilizationRates(self, h: Any, out: Any) -> int:
        u = _obj(out)
        u.gpu, u.memory = GPUS[self._gpu(h)]["util"]
        return 0

    def _c_nvmlDeviceGetMemoryInfo_v2(self, h: Any, out: Any) -> int:
        m = _obj(out)
        if m.version != 0x02000028:
            return 25
        total, reserved, used = GPUS[self._gpu(h)]["mem"]
        m.total, m.reserved, m.used, m.free = total, reserved, used, total - reserved - used
        return 0

    def _c_nvmlDeviceGetMemoryInfo(self, h: Any, out: Any) -> int:
        m = _obj(out)
        total, reserved, used = GPUS[self._gpu(h)]["mem"]
        m.total, m.used, m.free = total, used + reserved, total - reserved - used
        return 0

    def _c_nvmlDeviceGetTemperatureV(self, h: Any, out: Any) -> int:
        t = _obj(out)
        if t.version != 0x100000C or t.sensorType != 0:
            return 25
        t.temperature = GPUS[self._gpu(h)]["temp"]
        return 0

    def _c_nvmlDeviceGetTemperature(self, h: Any, sensor: Any, out: Any) -> int:
        _obj(out).value = GPUS[self._gpu(h)]["temp"] - 1  # tells the two calls apart
        return 0

    def _c_nvmlDeviceGetPowerUsage(self, h: Any, out: Any) -> int:
        _obj(out).value = GPUS[self._gpu(h)]["power"]
        return 0

    def _c_nvmlDeviceGetEnforcedPowerLimit(self, h: Any, out: Any) -> int:
        _obj(out).value = 700000
        return 0

    def _c_nvmlDeviceGetClockInfo(self, h: Any, kind: Any, out: Any) -> int:
        _obj(out).value = {1: 1980, 2: 2619}.get(kind.value, 0) - 15 * self._gpu(h)
        return 0

    def _c_nvmlDeviceGetMaxClockInfo(self, h: Any, kind: Any, out: Any) -> int:
        _obj(out).value = {1: 1980, 2: 2619}[kind.value]
        return 0

    def _c_nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any, out: Any) -> int:
        _obj(out).value = 5 - self._gpu(h)
        return 0

    def _c_nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any, out: Any) -> int:
        _obj(out).value = 5
        return 0

    def _c_nvmlDeviceGetCurrPcieLinkWidth(self, h: Any, out: Any) -> int:
        _obj(out).value = 16
        return 0

    def _c_nvmlDeviceGetMaxPcieLinkWidth(self, h: Any, out: Any) -> int:
        _obj(out).value = 16
        return 0

    def _c_nvmlDeviceGetFanSpeed(self, h: Any, out: Any) -> int:
        return 3  # NVML_ERROR_NOT_SUPPORTED: SXM boards have no fan

    def _c_nvmlDeviceGetPerformanceState(self, h: Any, out: Any) -> int:
        _obj(out).value = 0 if self._gpu(h) == 0 else 8
        return 0

    def _c_nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, out: Any) -> int:
        _obj(out).value = 0x4 if self._gpu(h) == 0 else 0x1
        return 0

    def _c_nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any, out: Any) -> int:
        _obj(out).value = 0x44 if self._gpu(h) == 0 else 0x1
        return 0

    def _c_nvmlDeviceGetTotalEccErrors(self, h: Any, etype: Any, counter: Any, out: Any) -> int:
        if (etype.value, counter.value) != (1, 0):
            return 2
        _obj(out).value = 3 * self._gpu(h)
        return 0

    def _c_nvmlDeviceGetRemappedRows(self, h: Any, *outs: Any) -> int:
        for out, v in zip(outs, (2, 0, self._gpu(h), 0)):
            _obj(out).value = v
        return 0

    def _c_nvmlDeviceGetPersistenceMode(self, h: Any, out: Any) -> int:
        _obj(out).value = 1
        return 0

    def _c_nvmlDeviceGetMigMode(self, h: Any, cur: Any, pending: Any) -> int:
        _obj(cur).value, _obj(pending).value = 0, 0
        return 0

    def _procs(self, h: Any, count: Any, array: Any, graphics: bool) -> int:
        procs = [] if graphics else GPUS[self._gpu(h)]["procs"]
        n = _obj(count)
        if array is None or n.value < len(procs):
            n.value = len(procs)
            return 7 if procs else 0
        for i, (pid, used) in enumerate(procs):
            array[i].pid, array[i].usedGpuMemory = pid, used
            if hasattr(array[i], "gpuInstanceId"):
                array[i].gpuInstanceId = array[i].computeInstanceId = 0xFFFFFFFF
        n.value = len(procs)
        return 0

    def _c_nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, False)

    def _c_nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, False)

    def _c_nvmlDeviceGetComputeRunningProcesses(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, False)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, True)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, True)

    def _c_nvmlDeviceGetGraphicsRunningProcesses(self, h: Any, c: Any, a: Any) -> int:
        return self._procs(h, c, a, True)

    # -- events -----------------------------------------------------------------------------------

    def _c_nvmlEventSetCreate(self, out: Any) -> int:
        addr = self._new_addr()
        _set_ptr(_obj(out), addr)
        self._event_sets[addr] = []
        return 0

    def _c_nvmlDeviceRegisterEvents(self, h: Any, types: Any, es: Any) -> int:
        if types.value & 0x8 and self._gpu(h) == 1:
            self._event_sets[_addr(es)].append(1)
        return 0

    def _c_nvmlEventSetWait_v2(self, es: Any, out: Any, timeout: Any) -> int:
        pending = self._event_sets[_addr(es)]
        if not pending:
            return 10  # NVML_ERROR_TIMEOUT
        gpu = pending.pop(0)
        data = _obj(out)
        device_t = dict(type(data)._fields_)["device"]
        data.device = ctypes.cast(ctypes.c_void_p(HANDLE_BASE + gpu), device_t)
        data.eventType, data.eventData = 0x8, 79
        data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
        return 0

    def _c_nvmlEventSetFree(self, es: Any) -> int:
        self._event_sets.pop(_addr(es), None)
        return 0

    # -- GPM --------------------------------------------------------------------------------------

    def _c_nvmlGpmQueryDeviceSupport(self, h: Any, out: Any) -> int:
        s = _obj(out)
        if s.version != 1:
            return 25
        s.isSupportedDevice = 1 if GPUS[self._gpu(h)]["gpm"] else 0
        return 0

    def _c_nvmlGpmSampleAlloc(self, out: Any) -> int:
        _set_ptr(_obj(out), self._new_addr())
        return 0

    def _c_nvmlGpmSampleFree(self, sample: Any) -> int:
        self._samples.pop(_addr(sample), None)
        return 0

    def _c_nvmlGpmSampleGet(self, h: Any, sample: Any) -> int:
        if not GPUS[self._gpu(h)]["gpm"]:
            return 3
        self._tick += 1
        self._samples[_addr(sample)] = (self._gpu(h), self._tick)
        return 0

    def _c_nvmlGpmMetricsGet(self, out: Any) -> int:
        mg = _obj(out)
        s1, s2 = self._samples.get(_addr(mg.sample1)), self._samples.get(_addr(mg.sample2))
        if mg.version != 1 or s1 is None or s2 is None or s1[0] != s2[0] or s1[1] >= s2[1]:
            return 2
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            m.nvmlReturn = GPM_ERRORS.get(m.metricId, 0)
            m.value = GPM_VALUES.get(m.metricId, 0.0)
        return 0
