"""GPU fault classification from the texts a host gives when its GPUs misbehave.

Three sources, each parsed into plain data that ``remote/telemetry/smi.py``, the host agent and
``console/fleet`` can act on:

* **pynvml tracebacks** (Python's traceback format around the NVML binding ``pynvml`` /
  ``nvidia-ml-py``): :func:`classify_nvml_traceback` -> :class:`NvmlFault`, and
  :func:`apply_nvml_fault` writes the consequence into a schema-v1 sample
  (``remote/telemetry/schema.py``). Tracebacks are often cut (no final exception line, no head):
  classification then uses the frames alone and never raises.
* **the kernel log** (``dmesg``; NVIDIA's kernel module prints ``NVRM:`` lines):
  :func:`parse_kernel_log` / :func:`scan_kernel_log` -> :class:`XidEvent` (Xid = NVIDIA's error
  number, see NVIDIA's "Xid Errors" catalogue), :func:`summarize_xids` -> one
  :class:`GpuXidSummary` per GPU with a diagnosis and an action.
* **apt's history log** (``/var/log/apt/history.log``): :func:`classify_driver_upgrade` finds
  NVIDIA driver packages changed under a running system (the usual cause of "driver
  unreachable" / "version mismatch").

:class:`HostFault` (a host-level state, as produced from nvidia-smi's messages by
``smi.classify_smi_failure``) also lives here so both parsers share it. PCI bus ids come in
several spellings (nvidia-smi/NVML ``00000000:3D:00.0``, nvidia-smi messages ``0000:01:00.0``,
Xid lines ``PCI:0000:3d:00`` without the function); compare them with :func:`pci_key`.
Times: ``dmesg -T`` stamps are the host's local wall time without a zone (kept naive);
``dmesg`` plain stamps are seconds since boot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Literal

from remote.telemetry.schema import HostState
from remote.telemetry.xid_catalog import (
    ACTION_RANK,
    ACTION_TEXT,
    CAUSED_BY_RE,
    GSP_DETAIL_RE,
    GSP_TIMEOUT_BANNER_RE,
    GSP_TIMEOUT_RE,
    GSP_TIMEOUT_WORDS_RE,
    XID_CATALOG,
    recovery_action,
    xid_info,
)

# ---------------------------------------------------------------------------------------------
# shared: PCI bus ids and host faults

_PCI_RE = re.compile(
    r"(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?"
)


def pci_key(bus_id: str) -> tuple[int, int, int, int] | None:
    """``(domain, bus, device, function)`` of a PCI bus id in any of NVIDIA's spellings.

    Accepts ``00000000:3D:00.0`` (nvidia-smi ``pci.bus_id``, NVML), ``0000:01:00.0`` (nvidia-smi
    messages, lspci -D), ``PCI:0000:3d:00`` / ``0000:3d:00`` (kernel Xid lines; the function is
    omitted and means 0), ``0a:00.0`` (``nvidia-smi -i``; domain 0) and a domain of other
    widths (``000:BA:80.0``, as dcgm-exporter's users quote nvidia-smi). ``None`` if
    unparseable.
    """
    m = _PCI_RE.fullmatch(bus_id.strip())
    if m is None:
        return None
    return (int(m["dom"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16), int(m["fn"] or "0"))


@dataclass(frozen=True)
class GpuHandleError:
    """One GPU that nvidia-smi could not open, named by the PCI bus id inside the message.

    Attributes:
        pci_bus_id: as printed in the message (e.g. ``0000:01:00.0``).
        reason: nvidia-smi's reason, e.g. ``GPU is lost``.
        lost: the GPU fell off the bus / is lost (only a reboot brings it back).
        repeats: identical messages folded into this one event.
        first_seen: the timestamp printed nearest before the first message, if the text had one.
    """

    pci_bus_id: str
    reason: str
    lost: bool
    repeats: int = 1
    first_seen: datetime | None = None


@dataclass(frozen=True)
class HostFault:
    """A host-level telemetry state derived from a tool's failure output.

    Attributes:
        state: one of ``schema.HOST_STATES`` (never ``ok``).
        detail: human-readable reason, for the sample's ``state_detail``.
        hint: the fix or the next diagnostic step, or ``None``.
        source: the tool whose output was classified (``nvidia-smi``, ``nvml``).
        library_version: user-space NVML library version, when the output names it.
        kernel_module_version: loaded kernel module version, when the output names it.
        gpu_errors: GPUs that failed individually, attributed by PCI bus id (deduplicated).
        invalid_field: a ``--query-gpu`` field the driver does not know (query must change).
        evidence: further lines from other tools that show the same fault (not a second one).
    """

    state: HostState
    detail: str
    hint: str | None
    source: str = "nvidia-smi"
    library_version: str | None = None
    kernel_module_version: str | None = None
    gpu_errors: tuple[GpuHandleError, ...] = ()
    invalid_field: str | None = None
    evidence: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# pynvml tracebacks

NvmlFaultKind = Literal[
    "not_supported",  # the GPU has no such reading: that field is None, not a fault
    "function_not_found",  # symbol missing from libnvidia-ml (driver older than the binding)
    "gpu_lost",  # NVML_ERROR_GPU_IS_LOST: that GPU needs a reboot; others keep reporting
    "library_not_found",  # libnvidia-ml.so.1 cannot be loaded: no user-space driver
    "driver_not_loaded",  # NVML_ERROR_DRIVER_NOT_LOADED: kernel driver unreachable
    "version_mismatch",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    "no_permission",  # NVML_ERROR_NO_PERMISSION
    "error",  # any other NVML error
    "unknown",  # nothing recognisable in the text
]

#: NVML getter -> the schema GPU fields it fills (``processes`` = the sample's process list).
NVML_FUNCTION_FIELDS: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetFanSpeed": ("fan_pct",),
    "nvmlDeviceGetFanSpeed_v2": ("fan_pct",),
    "nvmlDeviceGetTemperature": ("temp_c",),
    "nvmlDeviceGetPowerUsage": ("power_w",),
    "nvmlDeviceGetEnforcedPowerLimit": ("power_limit_w",),
    "nvmlDeviceGetPowerManagementLimit": ("power_limit_w",),
    "nvmlDeviceGetUtilizationRates": ("util_gpu_pct", "util_mem_pct"),
    "nvmlDeviceGetMemoryInfo": ("mem_used_mib", "mem_total_mib"),
    "nvmlDeviceGetMemoryInfo_v2": ("mem_used_mib", "mem_total_mib"),
    "nvmlDeviceGetClockInfo": ("sm_clock_mhz", "mem_clock_mhz"),
    "nvmlDeviceGetPerformanceState": ("pstate",),
    "nvmlDeviceGetPowerState": ("pstate",),
    "nvmlDeviceGetCurrentClocksThrottleReasons": ("throttle_reasons",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("throttle_reasons",),
    "nvmlDeviceGetTotalEccErrors": ("ecc_volatile_uncorrected",),
    "nvmlDeviceGetRemappedRows": ("remapped_rows_pending",),
    "nvmlDeviceGetPersistenceMode": ("persistence_mode",),
    "nvmlDeviceGetMigMode": ("mig_mode",),
    "nvmlGpmQueryDeviceSupport": ("gpm",),
    "nvmlGpmSampleGet": ("gpm",),
    "nvmlGpmMetricsGet": ("gpm",),
    "nvmlDeviceGetName": ("name",),
    "nvmlDeviceGetUUID": ("uuid",),
    "nvmlDeviceGetPciInfo": ("pci_bus_id",),
    "nvmlDeviceGetPciInfo_v3": ("pci_bus_id",),
    "nvmlDeviceGetComputeRunningProcesses": ("processes",),
    "nvmlDeviceGetComputeRunningProcesses_v2": ("processes",),
    "nvmlDeviceGetComputeRunningProcesses_v3": ("processes",),
    "nvmlDeviceGetGraphicsRunningProcesses": ("processes",),
    "nvmlDeviceGetGraphicsRunningProcesses_v2": ("processes",),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": ("processes",),
    "nvmlDeviceGetMPSComputeRunningProcesses": ("processes",),
    "nvmlDeviceGetMPSComputeRunningProcesses_v3": ("processes",),
    "nvmlDeviceGetProcessUtilization": ("processes",),
}


@dataclass(frozen=True)
class NvmlReturn:
    """One NVML return code (``nvmlReturn_t`` in NVIDIA's ``nvml.h``).

    Attributes:
        code: its number (``NVML_ERROR_GPU_IS_LOST`` = 15).
        name: the C constant.
        suffix: pynvml's exception class suffix (``NVMLError_<suffix>``: nvidia-ml-py builds
            the class name from the constant in CamelCase).
        message: ``nvmlErrorString``'s text (pynvml's ``str()`` of the exception) as seen in
            real tracebacks; for the codes rarely seen, the header's comment.
        meaning: what it says about the host, one line.
        action: what to do (``None``: nothing, it is not a fault of the host).
        host_fault: the GPU or driver is at fault (a diagnosis names it), not the caller.
    """

    code: int
    name: str
    suffix: str
    message: str
    meaning: str
    action: str | None
    host_fault: bool


#: Every ``nvmlReturn_t`` of nvml.h (driver 570 / nvidia-ml-py 12.570, plus 30 from newer
#: headers), by code; meanings and actions from nvml.h's comments and NVIDIA's NVML API
#: reference ("Error reporting").
NVML_RETURNS: dict[int, NvmlReturn] = {
    r.code: r
    for r in (
        NvmlReturn(
            1,
            "NVML_ERROR_UNINITIALIZED",
            "Uninitialized",
            "Uninitialized",
            "NVML was not initialised before the call (a bug in the tool)",
            None,
            False,
        ),
        NvmlReturn(
            2,
            "NVML_ERROR_INVALID_ARGUMENT",
            "InvalidArgument",
            "Invalid Argument",
            "an invalid argument (a bad GPU index or handle)",
            None,
            False,
        ),
        NvmlReturn(
            3,
            "NVML_ERROR_NOT_SUPPORTED",
            "NotSupported",
            "Not Supported",
            "the GPU does not offer this reading (a fan on an SXM board): no value, not a fault",
            None,
            False,
        ),
        NvmlReturn(
            4,
            "NVML_ERROR_NO_PERMISSION",
            "NoPermission",
            "Insufficient Permissions",
            "the user may not make this call",
            "run it as root, or with the device nodes' permissions",
            False,
        ),
        NvmlReturn(
            5,
            "NVML_ERROR_ALREADY_INITIALIZED",
            "AlreadyInitialized",
            "Already Initialized",
            "deprecated: NVML allows several initialisations",
            None,
            False,
        ),
        NvmlReturn(
            6,
            "NVML_ERROR_NOT_FOUND",
            "NotFound",
            "Not Found",
            "the object asked for does not exist (a PID or a GPU no longer there)",
            None,
            False,
        ),
        NvmlReturn(
            7,
            "NVML_ERROR_INSUFFICIENT_SIZE",
            "InsufficientSize",
            "Insufficient Size",
            "the caller's buffer was too small (a tool bug or a race)",
            None,
            False,
        ),
        NvmlReturn(
            8,
            "NVML_ERROR_INSUFFICIENT_POWER",
            "InsufficientPower",
            "Insufficient External Power",
            "the GPU's external power cables are not connected properly",
            "power the node down and reseat the GPU's power cables",
            True,
        ),
        NvmlReturn(
            9,
            "NVML_ERROR_DRIVER_NOT_LOADED",
            "DriverNotLoaded",
            "Driver Not Loaded",
            "the NVIDIA kernel driver is not loaded",
            "load the nvidia module or reinstall the driver for the running kernel",
            True,
        ),
        NvmlReturn(
            10,
            "NVML_ERROR_TIMEOUT",
            "Timeout",
            "Timeout",
            "the GPU did not answer in time",
            "check the kernel log for Xids; reset the GPU if it repeats",
            True,
        ),
        NvmlReturn(
            11,
            "NVML_ERROR_IRQ_ISSUE",
            "IrqIssue",
            "Interrupt Request Issue",
            "the kernel driver has a problem with the GPU's interrupts",
            "check the kernel log (NVRM, PCIe AER); reboot the node",
            True,
        ),
        NvmlReturn(
            12,
            "NVML_ERROR_LIBRARY_NOT_FOUND",
            "LibraryNotFound",
            "NVML Shared Library Not Found",
            "libnvidia-ml.so.1 cannot be loaded: no NVIDIA user-space driver",
            "install the NVIDIA driver (in a container: run it with --gpus)",
            True,
        ),
        NvmlReturn(
            13,
            "NVML_ERROR_FUNCTION_NOT_FOUND",
            "FunctionNotFound",
            "Function Not Found",
            "the driver's libnvidia-ml lacks a function the binding calls (binding newer "
            "than the driver)",
            "use an nvidia-ml-py release that matches the driver, or upgrade the driver",
            False,
        ),
        NvmlReturn(
            14,
            "NVML_ERROR_CORRUPTED_INFOROM",
            "CorruptedInforom",
            "Corrupted infoROM",
            "the GPU's infoROM is corrupted",
            "drain the GPU and have its infoROM reflashed or the board replaced (NVIDIA support)",
            True,
        ),
        NvmlReturn(
            15,
            "NVML_ERROR_GPU_IS_LOST",
            "GpuIsLost",
            "GPU is lost",
            "the GPU fell off the bus or stopped answering",
            "reboot the node; if it recurs check PCIe seating, power and cooling",
            True,
        ),
        NvmlReturn(
            16,
            "NVML_ERROR_RESET_REQUIRED",
            "ResetRequired",
            "GPU requires restart",
            "the GPU needs a reset before it can be used again",
            "drain it, then `nvidia-smi -r -i <gpu>` (or reboot the node)",
            True,
        ),
        NvmlReturn(
            17,
            "NVML_ERROR_OPERATING_SYSTEM",
            "OperatingSystem",
            "The operating system has blocked the request.",
            "the operating system blocked the request",
            None,
            False,
        ),
        NvmlReturn(
            18,
            "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
            "LibRmVersionMismatch",
            "RM has detected an NVML/RM version mismatch.",
            "the user-space driver and the loaded kernel module are different versions",
            "reboot (or reload the nvidia modules) so both are the installed version",
            True,
        ),
        NvmlReturn(
            19,
            "NVML_ERROR_IN_USE",
            "InUse",
            "In use by another client",
            "another client holds the GPU (an operation needs it idle)",
            None,
            False,
        ),
        NvmlReturn(
            20,
            "NVML_ERROR_MEMORY",
            "Memory",
            "Insufficient Memory",
            "NVML ran out of memory",
            None,
            False,
        ),
        NvmlReturn(
            21,
            "NVML_ERROR_NO_DATA",
            "NoData",
            "No data",
            "no data yet (a first sample)",
            None,
            False,
        ),
        NvmlReturn(
            22,
            "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
            "VgpuEccNotSupported",
            "The requested vgpu operation is not available on target device, becasue ECC "
            "is enabled",
            "a vGPU operation refused because ECC is on",
            None,
            False,
        ),
        NvmlReturn(
            23,
            "NVML_ERROR_INSUFFICIENT_RESOURCES",
            "InsufficientResources",
            "Ran out of critical resources, other than memory",
            "the driver ran out of a resource other than memory",
            None,
            False,
        ),
        NvmlReturn(
            24,
            "NVML_ERROR_FREQ_NOT_SUPPORTED",
            "FreqNotSupported",
            "Ran out of critical resources, other than memory",
            "the requested clock frequency is not supported",
            None,
            False,
        ),
        NvmlReturn(
            25,
            "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
            "ArgumentVersionMismatch",
            "Argument version mismatch",
            "the binding passed a structure version the driver does not know (binding "
            "newer than the driver)",
            "use an nvidia-ml-py release that matches the driver",
            False,
        ),
        NvmlReturn(
            26,
            "NVML_ERROR_DEPRECATED",
            "Deprecated",
            "Deprecated",
            "the call is deprecated",
            None,
            False,
        ),
        NvmlReturn(
            27,
            "NVML_ERROR_NOT_READY",
            "NotReady",
            "Not Ready",
            "the system is not ready for the request",
            None,
            False,
        ),
        NvmlReturn(
            28,
            "NVML_ERROR_GPU_NOT_FOUND",
            "GpuNotFound",
            "GPU not found",
            "no GPU at that address",
            None,
            False,
        ),
        NvmlReturn(
            29,
            "NVML_ERROR_INVALID_STATE",
            "InvalidState",
            "Invalid state",
            "the GPU is in a state that does not allow the request",
            None,
            False,
        ),
        NvmlReturn(
            30,
            "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
            "ResetTypeNotSupported",
            "Reset type not supported",
            "the GPU does not support the reset asked for",
            None,
            False,
        ),
        NvmlReturn(
            999,
            "NVML_ERROR_UNKNOWN",
            "Unknown",
            "Unknown Error",
            "the driver reported an unknown error: the GPU or driver is in a bad state "
            "(in a container: often its device access was lost)",
            "check the kernel log for Xids; in a container restart it",
            True,
        ),
    )
}
_NVML_BY_SUFFIX = {r.suffix: r for r in NVML_RETURNS.values()}
_NVML_BY_MESSAGE = {r.message.lower(): r for r in NVML_RETURNS.values()}


def nvml_return(exception: str | None, message: str | None = None) -> NvmlReturn | None:
    """The NVML return code behind a pynvml exception: its class (``NVMLError_GpuIsLost``,
    also qualified) or its message (``GPU is lost``); ``None`` when neither names one."""
    if exception:
        suffix = exception.rsplit(".", 1)[-1].partition("NVMLError_")[2]
        if suffix in _NVML_BY_SUFFIX:
            return _NVML_BY_SUFFIX[suffix]
    if message:
        return _NVML_BY_MESSAGE.get(message.strip().lower())
    return None


#: pynvml exception class suffix (``NVMLError_<suffix>``) and message -> fault kind.
_NVML_ERRORS: dict[str, NvmlFaultKind] = {
    "NotSupported": "not_supported",
    "FunctionNotFound": "function_not_found",
    "GpuIsLost": "gpu_lost",
    "LibraryNotFound": "library_not_found",
    "DriverNotLoaded": "driver_not_loaded",
    "LibRmVersionMismatch": "version_mismatch",
    "NoPermission": "no_permission",
}
_NVML_MESSAGES: dict[str, NvmlFaultKind] = {
    "not supported": "not_supported",
    "function not found": "function_not_found",
    "gpu is lost": "gpu_lost",
    "nvml shared library not found": "library_not_found",
    "driver not loaded": "driver_not_loaded",
    "rm has detected an nvml/rm version mismatch.": "version_mismatch",
    "insufficient permissions": "no_permission",
}

_FRAME_RE = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<func>\S+)\s*$')
#: IPython's / Jupyter's traceback (IPython.core.ultratb): a header naming the exception
#: ("NVMLError_Unknown      Traceback (most recent call last)"), frames as "<path> in
#: <func>(<args>)", the current line of each marked "---> 78" / "-> 2141".
_IPY_HEADER_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)\s{2,}Traceback \(most recent call last\)")
_IPY_FRAME_RE = re.compile(
    r"^(?:~|/|<ipython-input-|<ipykernel_|[A-Za-z]:\\|\S+\.py\b)\S*(?: \S+)*? in "
    r"(?P<func>[A-Za-z_<][\w.<>]*)\(.*\)\s*$"
)
_IPY_CURRENT_RE = re.compile(r"^-*> ?\d+\s")
#: An NVML call in a frame's source line (the caller's ``pynvml.nvmlInit()``, when pynvml's
#: own frames are not in the text).
_NVML_CALL_RE = re.compile(r"(?<![\w'\"])(?:\w+\.)?(?P<fn>nvml[A-Z]\w*)\s*\(")
_EXC_RE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?:_\w+)?)(?::\s?(?P<msg>.*))?$"
)
_NVML_LIB_RE = re.compile(r"libnvidia-ml\.so(?:\.\d+)*|nvml\.dll", re.IGNORECASE)
#: ctypes' words when pynvml's ``_nvmlGetFunctionPointer`` looks up a symbol the loaded
#: libnvidia-ml lacks (CPython ``Modules/_ctypes``: ``dlsym`` error text, ``<lib>: undefined
#: symbol: <name>``), raised as ``AttributeError`` before pynvml turns it into
#: ``NVMLError_FunctionNotFound`` (a cut traceback often ends there).
_UNDEFINED_SYMBOL_RE = re.compile(r"undefined symbol: (?P<sym>_?nvml\w+)")
#: The start of a traceback or of its exception line (for a traceback indented as a block).
_TB_HEAD_RE = re.compile(r"\s*(?:Traceback \(most recent|[A-Za-z_][\w.]*(?:Error|Exception)\w*:)")


def _dedent_traceback(text: str) -> str:
    """``text`` without the indentation of a quoted block (a Markdown code block indented by
    four spaces, a log viewer's margin): the least indentation of the lines that begin a
    traceback or name an exception is cut from every line (lines indented less lose theirs)."""
    rows = text.split("\n")
    heads = [r for r in rows if _TB_HEAD_RE.match(r)]
    cut = min((len(r) - len(r.lstrip()) for r in heads), default=0)
    if cut == 0:
        return text
    return "\n".join(r[cut:] if r[:cut].isspace() else r.lstrip() for r in rows)


@dataclass(frozen=True)
class NvmlFault:
    """What one pynvml traceback means for telemetry.

    Attributes:
        kind: see :data:`NvmlFaultKind`.
        exception: the last exception class the text names, without its module
            (``NVMLError_NotSupported``): a traceback cut before its own exception line leaves
            the one before it (a chained ``OSError``, the same error printed earlier), and
            ``complete`` False; ``None`` when the text names none.
        message: the exception's message (``Not Supported``), or ``None``.
        nvml_function: the innermost ``nvml*`` API call in the frames, or ``None``.
        fields: schema GPU fields this fault makes unknown (``processes`` = the process list).
        host_state: the host state it implies (``nvml_unavailable`` ...), or ``None`` when only
            one field or one GPU is affected.
        gpu_lost: the GPU being queried is lost (its index is the caller's, it is not printed).
        processes_unknown: the sample's process list is unknown (never "no processes").
        fallback: what to run instead: ``nvidia-smi`` (the whole CSV fallback,
            ``smi.smi_argv``) or ``nvidia-smi-compute-apps`` (``smi.compute_apps_argv``).
        reason: one line for the sample's ``errors`` map / ``state_detail``.
        hint: the fix, or ``None``.
        complete: the (last chained) traceback ended with its exception line.
        returned: the NVML return code the exception stands for (:data:`NVML_RETURNS`), or
            ``None`` when the traceback does not name one.
    """

    kind: NvmlFaultKind
    exception: str | None
    message: str | None
    nvml_function: str | None
    fields: tuple[str, ...]
    host_state: HostState | None
    gpu_lost: bool
    processes_unknown: bool
    fallback: Literal["nvidia-smi", "nvidia-smi-compute-apps"] | None
    reason: str
    hint: str | None
    complete: bool
    returned: NvmlReturn | None = None


def classify_nvml_traceback(text: str) -> NvmlFault:
    """Classify a (possibly truncated or chained) pynvml traceback. Never raises.

    The exception line decides when present; otherwise the frames do: an ``OSError`` naming
    libnvidia-ml or a ``_LoadNvmlLibrary`` frame -> library not found; a failing
    ``_nvmlGetFunctionPointer`` frame -> function not found. A missing function whose caller was
    cut off is taken to be the process-list getter (``nvmlDeviceGetComputeRunningProcesses_v2``
    /``_v3``: the calls newer bindings make that older drivers lack). ctypes' ``AttributeError:
    .../libnvidia-ml.so.1: undefined symbol: nvml...`` (the lookup inside
    ``_nvmlGetFunctionPointer``, before pynvml re-raises it) is a function not found too, and
    names the missing function. A traceback indented as a block (quoted in Markdown) is read
    without that indentation; IPython's / Jupyter's form (the exception named in its header,
    ``<path> in <func>(...)`` frames) too. Where no pynvml frame names the NVML function, the
    last ``nvml*(...)`` call in a frame's source line does (the caller's ``pynvml.nvmlInit()``).
    """
    frames: list[str] = []
    exceptions: list[tuple[str, str | None]] = []
    calls: list[str] = []  # NVML calls in the frames' source lines
    complete = False  # the last traceback block ended with its exception line
    text = _dedent_traceback(text)
    after_frame = False
    for raw in text.splitlines():
        if raw.startswith("Traceback (most recent call last)"):
            complete = False
            continue
        if (hm := _IPY_HEADER_RE.match(raw)) is not None:
            exceptions.append((hm["name"].rsplit(".", 1)[-1], None))
            complete = False
            continue
        fm = _FRAME_RE.match(raw) or _IPY_FRAME_RE.match(raw)
        if fm:
            frames.append(fm["func"])
            complete = False
            after_frame = True
            continue
        source = after_frame or _IPY_CURRENT_RE.match(raw.lstrip()) is not None
        after_frame = False
        em = _EXC_RE.match(raw.rstrip())
        if em and not raw.startswith((" ", "\t")):
            msg = em["msg"] if em["msg"] is not None else None
            # a Markdown inline-code paste closes on the line: its backtick is not NVML's
            msg = msg.strip().rstrip("`").strip() if msg is not None else None
            exceptions.append((em["name"].rsplit(".", 1)[-1], msg))
            complete = True
            continue
        if source and (cm := _NVML_CALL_RE.search(raw)) is not None:
            calls.append(cm["fn"])
    exc_name, exc_msg = exceptions[-1] if exceptions else (None, None)
    nvml_funcs = [f for f in frames if f.startswith("nvml")]
    nvml_function = nvml_funcs[-1] if nvml_funcs else calls[-1] if calls else None
    sm = _UNDEFINED_SYMBOL_RE.search(text)
    symbol = sm["sym"] if sm is not None else None

    kind: NvmlFaultKind = "unknown"
    if exc_name is not None and exc_name.startswith("NVMLError"):
        suffix = exc_name.partition("_")[2]
        kind = _NVML_ERRORS.get(suffix, "error")
        if kind == "error" and exc_msg is not None:
            kind = _NVML_MESSAGES.get(exc_msg.lower(), "error")
    if kind in ("unknown", "error"):
        os_errors = [m for n, m in exceptions if n == "OSError" and m and _NVML_LIB_RE.search(m)]
        if os_errors or (frames and "_LoadNvmlLibrary" in frames and exc_name in (None, "OSError")):
            kind = "library_not_found"
        elif (frames and frames[-1] == "_nvmlGetFunctionPointer") or symbol is not None:
            kind = "function_not_found"
        elif kind == "unknown" and exc_msg is not None:
            kind = _NVML_MESSAGES.get(exc_msg.lower(), "unknown")

    if kind == "function_not_found" and symbol is not None:
        nvml_function = symbol  # the function the library lacks, not its caller
    fields: tuple[str, ...] = ()
    if kind in ("not_supported", "function_not_found", "no_permission", "error"):
        fields = NVML_FUNCTION_FIELDS.get(nvml_function or "", ())
        if kind == "function_not_found" and nvml_function is None:
            fields = ("processes",)
    processes_unknown = "processes" in fields or kind in (
        "library_not_found",
        "driver_not_loaded",
        "version_mismatch",
    )
    host_states: dict[NvmlFaultKind, HostState] = {
        "library_not_found": "nvml_unavailable",
        "driver_not_loaded": "driver_unreachable",
        "version_mismatch": "version_mismatch",
    }
    host_state = host_states.get(kind)
    fallback: Literal["nvidia-smi", "nvidia-smi-compute-apps"] | None = None
    if host_state is not None:
        fallback = "nvidia-smi"
    elif "processes" in fields:
        fallback = "nvidia-smi-compute-apps"
    what = nvml_function or "an NVML call"
    reasons: dict[str, str] = {
        "not_supported": f"{what}: not supported on this GPU (NVML_ERROR_NOT_SUPPORTED)",
        "function_not_found": f"{what}: function not found in libnvidia-ml (driver older than "
        "the NVML binding)",
        "gpu_lost": f"{what}: GPU is lost (NVML_ERROR_GPU_IS_LOST); reboot to recover it",
        "library_not_found": "NVML library not found: libnvidia-ml.so.1 cannot be loaded "
        "(no NVIDIA user-space driver, or not on the loader path)",
        "driver_not_loaded": "NVML cannot reach the NVIDIA kernel driver (driver not loaded)",
        "version_mismatch": "NVML library and kernel driver versions differ",
        "no_permission": f"{what}: insufficient permissions",
        "error": f"{what}: {exc_name or 'NVML error'}" + (f": {exc_msg}" if exc_msg else ""),
        "unknown": "unrecognised NVML failure" + (f": {exc_name}" if exc_name else ""),
    }
    hints: dict[str, str | None] = {
        "not_supported": None,
        "function_not_found": "upgrade the NVIDIA driver or pin an older nvidia-ml-py; meanwhile "
        "read the process list with `nvidia-smi --query-compute-apps`"
        if "processes" in fields
        else "upgrade the NVIDIA driver or pin an older nvidia-ml-py",
        "gpu_lost": "reboot the host (or power-cycle the GPU); if it recurs check PCIe seating, "
        "power and cooling",
        "library_not_found": "install the NVIDIA driver (user-space libraries) or add its "
        "directory to the loader path; falling back to nvidia-smi",
        "driver_not_loaded": "load the nvidia kernel module (`modprobe nvidia`) or reinstall the "
        "driver; check `dmesg` for NVRM errors",
        "version_mismatch": "install one driver version for both library and kernel module, "
        "then reload the nvidia modules or reboot",
        "no_permission": "run the agent with access to /dev/nvidia*",
        "error": None,
        "unknown": None,
    }
    return NvmlFault(
        kind=kind,
        exception=exc_name,
        message=exc_msg,
        nvml_function=nvml_function,
        fields=fields,
        host_state=host_state,
        gpu_lost=kind == "gpu_lost",
        processes_unknown=processes_unknown,
        fallback=fallback,
        reason=reasons[kind],
        hint=hints[kind],
        complete=complete,
        returned=nvml_return(exc_name, exc_msg),
    )


# ---------------------------------------------------------------------------------------------
# kernel log: Xid events

#: Day and month names as printed, in any case, short or long (``Fri``, ``april``, ``Sept.``).
_NAME = r"[A-Za-z]{3,9}\.?"
_CTIME = rf"{_NAME} {_NAME} +\d{{1,2}} \d\d:\d\d:\d\d \d{{4}}"
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # dmesg -T: [Wed Jan 27 23:04:35 2021] msg
    re.compile(rf"^\[(?P<ctime>{_CTIME})\]\s?(?P<msg>.*)$"),
    # journalctl -k -o short-monotonic: [14328.198504] host kernel: msg
    re.compile(r"^\[\s*(?P<up>\d+\.\d+)\] \S+ kernel: (?P<msg>.*)$"),
    # dmesg: [14328.198504] msg
    re.compile(r"^\[\s*(?P<up>\d+\.\d+)\]\s?(?P<msg>.*)$"),
    # dmesg --time-format=iso / journalctl -o short-iso: 2021-01-27T23:04:35,123456+0100 [host
    # kernel:] msg
    re.compile(
        r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
        r"(?: \S+ kernel:)? (?:\[\s*(?P<up>\d+\.\d+)\] )?(?P<msg>.*)$"
    ),
    # syslog / kern.log / journalctl: Jan 27 23:04:35 host kernel: [14328.198504] msg (month
    # names as the locale prints them: ``april 24``, ``Sept 3``)
    re.compile(
        rf"^(?P<sys>{_NAME} +\d{{1,2}} \d\d:\d\d:\d\d) \S+ kernel: "
        r"(?:\[\s*(?P<up>\d+\.\d+)\] )?(?P<msg>.*)$"
    ),
    # the same stamp straight before the driver's message (a report that left out the host
    # and "kernel:", or a collector that prints none): Sep 18 20:07:01 NVRM: Xid ...
    re.compile(rf"^(?P<sys>{_NAME} +\d{{1,2}} \d\d:\d\d:\d\d) (?P<msg>NVRM:.*)$"),
)
#: A Markdown quote (``> ``, ``>> ``) in front of a pasted kernel log line.
_QUOTE_RE = re.compile(r"^\s*(?:>\s?)+")
#: rsyslog's escape for a newline inside one record (``...but#012NVRM: this kernel module``).
_SYSLOG_NL_RE = re.compile(r"#012\s*(?:NVRM:\s*)?")
#: A driver message wrapped by the driver itself over several ``NVRM:`` lines, each printed
#: with its own stamp by journalctl and newer dmesg (nv.c: "The NVIDIA GPU %s\nNVRM: (PCI ID:
#: %s) installed in this system has\nNVRM: fallen off the bus ...", "API mismatch: the client
#: has the version %s, but\nNVRM: this kernel module ..."): its later lines begin in lower case,
#: with "(" or a version number, and the line before ends mid-sentence.
_WRAPPED_RE = re.compile(r"^NVRM:\s+(?:[a-z(]|\d+\.\d+)")
_SENTENCE_END_RE = re.compile(r"[.!:]\s*$")
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, (?P<rest>.*))?$"
)
_GPU_AT_RE = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)"
)
_FALLEN_RE = re.compile(r"fallen off the bus", re.IGNORECASE)
_GPU_PCI_RE = re.compile(
    r"GPU (?:at )?(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
)
_PCI_ID_RE = re.compile(r"\(PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
_PROBE_RE = re.compile(r"NVRM: The NVIDIA probe routine failed for (?P<n>\d+) device")
_BANNER_RE = re.compile(
    r"NVRM: loading NVIDIA UNIX (?P<what>.*?Kernel Module)(?: for \S+)?\s+"
    r"(?P<ver>\d+\.\d+(?:\.\d+)?)"
)
_PID_RE = re.compile(r"\bpid=(?:'(?P<q>[^']*)'|(?P<v>[^,\s]+))")
_NAME_RE = re.compile(r"\bname=(?P<name>[^,]*)")
_CH_RE = re.compile(r"\bCh (?P<ch>[0-9a-fA-F]{8})\b")
_MMU_RE = re.compile(
    r"MMU Fault: ENGINE (?P<engine>.+?)(?: (?P<client>\S*CLIENT\S*))? faulted @ "
    r"(?P<addr>0x[0-9a-fA-F_]+)\.? Fault is of type (?P<ftype>\S+)(?: (?P<access>\S+))?"
)
#: a "fallen off the bus" message within this many seconds of an Xid 79 for the same GPU is the
#: same event.
_SAME_EVENT_S = 10.0


@dataclass(frozen=True)
class MmuFault:
    """The MMU fault details of an Xid 31 line (kernel log, ``NVRM: Xid ... MMU Fault: ...``).

    Attributes:
        engine: e.g. ``GRAPHICS``, ``CE2``.
        client: e.g. ``GPCCLIENT_T1_10``, ``HUBCLIENT_CE0``, or ``None``.
        address: the faulting GPU virtual address as printed (``0x7fd7_90743000``).
        fault_type: e.g. ``FAULT_PDE``, ``FAULT_PRIV_VIOLATION``.
        access_type: e.g. ``ACCESS_TYPE_VIRT_READ``, or ``None``.
    """

    engine: str
    client: str | None
    address: str
    fault_type: str
    access_type: str | None


@dataclass(frozen=True)
class XidEvent:
    """One NVIDIA Xid event from the kernel log.

    Attributes:
        xid: the Xid number (79 for a "fallen off the bus" message that prints none).
        pci_bus_id: as the kernel printed it, lower-case (``0000:3d:00``, ``0000:b3:00.0``).
        time_text: the line's timestamp as printed (``Wed Jan 27 23:04:35 2021``,
            ``14328.198504``).
        wall_time: host-local wall time (naive) for ``dmesg -T``/syslog/ISO stamps, else ``None``.
        uptime_s: seconds since boot for plain ``dmesg`` stamps, else ``None``.
        pid: the process, or ``None`` when not printed or ``'<unknown>'``.
        process_name: ``name=`` value, or ``None`` (absent or ``<unknown>``).
        channel: ``Ch`` value (8 hex digits), or ``None``.
        mmu: MMU fault details (Xid 31), or ``None``.
        uuid: the GPU's UUID from an ``NVRM: GPU at PCI:...: GPU-...`` line, or ``None``.
        pci_device_id: vendor:device (``10de:26b5``) when printed, else ``None``.
        inferred: the Xid number was not printed but inferred (fallen off the bus -> 79, a GSP
            RPC timeout printed without an Xid -> 119).
        detail: the text after the Xid number (or the whole joined message).
        line_no: 1-based line of the message's first line.
        end_line_no: 1-based line of the message's last line (its continuation lines are
            ``line_no`` .. ``end_line_no``; 0 when unknown).
        caused_by: the earlier Xid an Xid 45 line names (``caused by previous Xid 149``);
            for an Xid 154 printed after the driver's GSP timeout lines
            (``xid_catalog.GSP_TIMEOUT_WORDS_RE``) with no other Xid between them, 119: the
            recovery action records what the timeout made the driver decide.
        recovery: for Xid 154, the new recovery action (``xid_catalog.Action``, e.g.
            ``reset_gpu`` for ``0x1 (GPU Reset Required)``), else ``None``.
        lead_line_no: 1-based first line of what the driver printed about this event before
            its own message (the ``GSP Timeout`` banner above an Xid 119), 0 when nothing:
            those lines go where the event goes (:meth:`rows`).

    ``pci_bus_id`` of a GSP message that names no bus is the driver's GPU number (``GPU4``),
    which :func:`pci_key` does not read as a bus id.
    """

    xid: int
    pci_bus_id: str
    time_text: str
    wall_time: datetime | None = None
    uptime_s: float | None = None
    pid: int | None = None
    process_name: str | None = None
    channel: str | None = None
    mmu: MmuFault | None = None
    uuid: str | None = None
    pci_device_id: str | None = None
    inferred: bool = False
    detail: str = ""
    line_no: int = 0
    caused_by: int | None = None
    recovery: str | None = None
    end_line_no: int = 0
    lead_line_no: int = 0

    def rows(self) -> range:
        """The 1-based lines of the event: its lead lines, its message and continuations."""
        first = min(self.lead_line_no or self.line_no, self.line_no)
        return range(first, max(self.end_line_no, self.line_no) + 1)


#: nv.c's notice after its wrapping ``NVRM:`` tokens and rsyslog's ``#012`` newlines are
#: removed: "API mismatch: the client has the version X, but this kernel module has the version
#: Y" (older drivers) and "the client 'kwin_wayland' (pid 1005) has the version X, ..." (newer).
_API_MISMATCH_RE = re.compile(
    r"API mismatch: the client (?:'(?P<client>[^']*)' \(pid (?P<pid>\d+)\) )?has the version "
    r"(?P<cv>\d+(?:\.\d+)+), but this kernel module has the version (?P<kv>\d+(?:\.\d+)+)"
)
_WRAP_TOKENS_RE = re.compile(r"(?:#012|\s)+(?:NVRM:\s*)?")


@dataclass(frozen=True)
class ApiMismatch:
    """The kernel module's ``API mismatch`` notice (``open-gpu-kernel-modules``
    ``kernel-open/nvidia/nv.c``): a user-space driver component of one version called the
    loaded kernel module of another, the kernel's side of nvidia-smi's "Driver/library version
    mismatch".

    Attributes:
        client_version: the user-space driver's version (``535.54.03``).
        kernel_module_version: the loaded module's version (``530.30.02``).
        client: the calling process's name when printed (newer drivers), else ``None``.
        pid: its pid when printed, else ``None``.
        count: how many such notices the text holds.
    """

    client_version: str
    kernel_module_version: str
    client: str | None = None
    pid: int | None = None
    count: int = 1


def _api_mismatches(message: str) -> list[ApiMismatch]:
    flat = _WRAP_TOKENS_RE.sub(" ", message)
    return [
        ApiMismatch(
            client_version=m["cv"],
            kernel_module_version=m["kv"],
            client=m["client"],
            pid=int(m["pid"]) if m["pid"] else None,
        )
        for m in _API_MISMATCH_RE.finditer(flat)
    ]


def find_api_mismatch(text: str) -> ApiMismatch | None:
    """The ``API mismatch`` notice in ``text``, the first one with the number of notices;
    ``None`` without one.

    ``text`` is kernel log lines as :func:`scan_kernel_log` reads them (the notice wrapped
    over several ``NVRM:`` lines, stamped or not, or joined by rsyslog's ``#012``), or lines
    whose decorations a caller already removed (then read as one flow of words)."""
    if "API mismatch" not in text:
        return None
    found = [
        m for *_, msg, _ in _records(text) if "API mismatch" in msg for m in _api_mismatches(msg)
    ] or _api_mismatches(text)
    return replace(found[0], count=len(found)) if found else None


@dataclass
class KernelLogScan:
    """Everything NVIDIA-related :func:`scan_kernel_log` found in a kernel log.

    Attributes:
        events: Xid events in log order.
        bus_to_uuid: PCI bus id (as printed) -> GPU UUID, from ``NVRM: GPU at`` lines.
        probe_failed_devices: N from ``The NVIDIA probe routine failed for N device(s)``
            (GPUs the driver could not bring up: the host shows that many fewer), or ``None``.
        driver_version: version from the module load banner, or ``None``.
        open_kernel_module: the banner names the open kernel module, ``None`` if no banner.
        api_mismatch: the kernel's ``API mismatch`` notice (a client of another driver version
            than the loaded module), the latest one, or ``None``.
    """

    events: list[XidEvent] = field(default_factory=list)
    bus_to_uuid: dict[str, str] = field(default_factory=dict)
    probe_failed_devices: int | None = None
    driver_version: str | None = None
    open_kernel_module: bool | None = None
    api_mismatch: ApiMismatch | None = None


_CTIME_FORMATS = (
    "%a %b %d %H:%M:%S %Y",
    "%A %B %d %H:%M:%S %Y",
    "%a %B %d %H:%M:%S %Y",
    "%A %b %d %H:%M:%S %Y",
)


def _parse_ctime(text: str) -> datetime | None:
    """``dmesg -T``'s ``Wed Jan 27 23:04:35 2021`` in any case, short or long names."""
    flat = " ".join(text.replace(".", "").split())
    for fmt in _CTIME_FORMATS:
        try:
            return datetime.strptime(flat, fmt)  # strptime reads names in any case
        except ValueError:
            continue
    return None


def _parse_time(m: re.Match[str]) -> tuple[str, datetime | None, float | None]:
    g = m.groupdict()
    up = float(g["up"]) if g.get("up") else None
    if g.get("ctime"):
        return g["ctime"], _parse_ctime(g["ctime"]), up
    if g.get("iso"):
        text = g["iso"]
        try:
            iso = text.replace(",", ".")
            if re.search(r"[+-]\d{4}$", iso):
                iso = iso[:-2] + ":" + iso[-2:]
            return text, datetime.fromisoformat(iso.replace("Z", "+00:00")), up
        except ValueError:
            return text, None, up
    if g.get("sys"):
        return g["sys"], None, up  # syslog stamps have no year
    return g.get("up") or "", None, up


_Record = tuple[int, str, datetime | None, float | None, str, int]
#: The lines of one wrapped message are printed together: at most this far apart (seconds).
_WRAP_S = 1.0


def _same_moment(
    wall_a: datetime | None, up_a: float | None, wall_b: datetime | None, up_b: float | None
) -> bool:
    """Two stamps at most :data:`_WRAP_S` apart, or not comparable (missing, or of different
    kinds: a collector's own time in front of a continuation line)."""
    if up_a is not None and up_b is not None:
        return abs(up_b - up_a) <= _WRAP_S
    if wall_a is not None and wall_b is not None:
        try:
            return abs((wall_b - wall_a).total_seconds()) <= _WRAP_S
        except TypeError:  # naive vs aware
            return True
    return True


def _records(text: str) -> list[_Record]:
    """Kernel messages: ``(line_no, time_text, wall, uptime, message, last_line_no)``.

    A Markdown quote before a line is dropped. A message continues on indented lines without
    a stamp (``dmesg``), and on ``NVRM:`` lines stamped at the same moment (within
    :data:`_WRAP_S`, or stamps that cannot be compared) when the driver wrapped one message
    over several lines (:data:`_WRAPPED_RE`; journalctl and newer dmesg stamp each line);
    rsyslog's ``#012`` inside a line is such a wrap too. Continuations
    are joined with one space, their ``NVRM:`` tokens removed.
    """
    out: list[_Record] = []

    def join(cont: str, no: int) -> None:
        prev = out[-1]
        if cont.startswith("NVRM:") and prev[4].startswith("NVRM:"):
            cont = cont[len("NVRM:") :].strip()
        out[-1] = (prev[0], prev[1], prev[2], prev[3], f"{prev[4]} {cont}".strip(), no)

    rows = [
        _QUOTE_RE.sub("", r.rstrip()) if r.lstrip().startswith(">") else r.rstrip()
        for r in text.splitlines()
    ]
    # indentation common to the whole block (a log pasted as a Markdown code block)
    base = min((len(r) - len(r.lstrip()) for r in rows if r.strip()), default=0)
    for no, row in enumerate(rows, 1):
        line = row[base:]
        if not line.strip():
            continue
        for rx in _PREFIXES:
            m = rx.match(line)
            if m:
                tt, wall, up = _parse_time(m)
                msg = m["msg"].strip()
                break
        else:
            if line[:1].isspace() and out:
                join(line.strip(), no)
                continue
            if "NVRM:" not in line:
                continue
            tt, wall, up, msg = "", None, None, line[line.index("NVRM:") :].strip()
        if "#012" in msg:
            msg = _SYSLOG_NL_RE.sub(" ", msg)
        if (
            out
            and _WRAPPED_RE.match(msg)
            and "NVRM:" in out[-1][4]
            and not _SENTENCE_END_RE.search(out[-1][4])
            and _same_moment(out[-1][2], out[-1][3], wall, up)
        ):
            join(msg, no)
            continue
        out.append((no, tt, wall, up, msg, no))
    return out


def _seconds(a: XidEvent, b: XidEvent) -> float | None:
    """``b - a`` in seconds, when both stamps are comparable."""
    if a.uptime_s is not None and b.uptime_s is not None:
        return b.uptime_s - a.uptime_s
    if a.wall_time is not None and b.wall_time is not None:
        try:
            return (b.wall_time - a.wall_time).total_seconds()
        except TypeError:  # naive vs aware
            return None
    return None


def _spread_out(events: Sequence[XidEvent]) -> bool:
    """Whether app-class faults come from several programs or over at least
    :data:`SUSPECT_MIN_SPAN_S` (True when their stamps cannot be compared: the count decides)."""
    names = {e.process_name for e in events if e.process_name}
    if len(names) > 1:
        return True
    span = _seconds(events[0], events[-1])
    return span is None or span >= SUSPECT_MIN_SPAN_S


def scan_kernel_log(text: str) -> KernelLogScan:
    """Parse NVIDIA kernel messages (``NVRM:``) from ``dmesg`` / ``dmesg -T`` / syslog text.

    Also reads ``journalctl -k -o short-monotonic`` lines (``[uptime] host kernel: msg``),
    lines quoted in Markdown and a log indented as a block. Unrelated lines are skipped. A
    message spread over several lines (indented continuations without a stamp, or the driver's
    wrapped ``NVRM:`` lines each with the same stamp, see :func:`_records`) is one message.
    "GPU ... has fallen off the bus" without an Xid number is an Xid 79 event (``inferred``);
    with a printed Xid 79 for the same GPU within 10 s of it, or when the stamps cannot be
    compared (syslog stamps have no year, unstamped pastes), it is the same event and not
    counted twice. A GSP RPC timeout printed without an Xid (``Timeout waiting for RPC from
    GSP``, or the ``GSP Timeout`` banner the driver prints before that Xid) is an Xid 119
    event (``inferred``, the catalogue's meaning) unless a printed Xid 119/120 is within 10 s
    of it (or cannot be placed against it; printed before it, its lines then lead that event:
    :attr:`XidEvent.lead_line_no`); the ``GPUn GSP RPC buffer``
    / ``RPC history`` lines after one are its details, never events. Those dumps
    (``GPU%d RPC history (CPU -> GSP):``, ``GPU%d RPC event history (CPU <- GSP):``) are only
    printed by the driver's ``kgspLogRpcDebugInfo`` after a GSP RPC timed out (``_kgspLogXid119``)
    or failed its sanity check (open-gpu-kernel-modules ``src/nvidia/src/kernel/gpu/gsp/
    kernel_gsp.c``), so a dump whose timeout line is not in the text (an excerpt cut above it)
    is that GPU's inferred Xid 119, its ``detail`` the dump's header. UUIDs from ``NVRM: GPU
    at`` lines are attached to every event of that bus id. The kernel's ``API mismatch``
    notice is :attr:`KernelLogScan.api_mismatch`.
    """
    scan = KernelLogScan()
    mismatches: list[ApiMismatch] = []
    gsp_timed_out = False  # GSP timeout lines since the last printed Xid
    for no, tt, wall, up, msg, last in _records(text):
        if "NVRM:" not in msg:
            continue
        m = _XID_RE.search(msg)
        if m:
            rest = m["rest"] or ""
            cause = CAUSED_BY_RE.search(rest)
            rec = recovery_action(rest) if int(m["xid"]) == 154 else None
            summarised = 119 if rec is not None and gsp_timed_out else None
            gsp_timed_out = False
            scan.events.append(
                XidEvent(
                    xid=int(m["xid"]),
                    pci_bus_id=m["pci"].lower(),
                    time_text=tt,
                    wall_time=wall,
                    uptime_s=up,
                    pid=_xid_pid(rest),
                    process_name=_xid_name(rest),
                    channel=(c["ch"] if (c := _CH_RE.search(rest)) else None),
                    mmu=_xid_mmu(rest),
                    detail=rest,
                    line_no=no,
                    caused_by=int(cause["xid"]) if cause else summarised,
                    recovery=rec[2] if rec else None,
                    end_line_no=last,
                )
            )
            continue
        if GSP_TIMEOUT_WORDS_RE.search(msg):
            gsp_timed_out = True
        if (hist := GSP_DETAIL_RE.search(msg)) is not None:
            # the RPC buffer / history lines after a GSP timeout: details of it; without that
            # timeout in the text, the dump stands for it (see the docstring)
            gpu = f"GPU{hist['gpu']}"
            if not any(
                e.xid in (119, 120) and e.inferred and e.pci_bus_id in (gpu, "GPU?")
                for e in scan.events
            ):
                scan.events.append(
                    XidEvent(
                        xid=119,
                        pci_bus_id=gpu,
                        time_text=tt,
                        wall_time=wall,
                        uptime_s=up,
                        inferred=True,
                        detail=msg[msg.index("NVRM:") + 5 :].strip(),
                        line_no=no,
                        end_line_no=last,
                    )
                )
            continue
        if (gsp := GSP_TIMEOUT_RE.search(msg) or GSP_TIMEOUT_BANNER_RE.search(msg)) is not None:
            scan.events.append(
                XidEvent(
                    xid=119,
                    pci_bus_id=f"GPU{gsp['gpu']}" if gsp["gpu"] else "GPU?",
                    time_text=tt,
                    wall_time=wall,
                    uptime_s=up,
                    inferred=True,
                    detail=msg[msg.index("NVRM:") + 5 :].strip(),
                    line_no=no,
                    end_line_no=last,
                )
            )
            continue
        if (g := _GPU_AT_RE.search(msg)) is not None:
            scan.bus_to_uuid[g["pci"].lower()] = g["uuid"]
        elif _FALLEN_RE.search(msg) and (p := _GPU_PCI_RE.search(msg)) is not None:
            pid_m = _PCI_ID_RE.search(msg)
            scan.events.append(
                XidEvent(
                    xid=79,
                    pci_bus_id=p["pci"].lower(),
                    time_text=tt,
                    wall_time=wall,
                    uptime_s=up,
                    pci_device_id=pid_m["id"].lower() if pid_m else None,
                    inferred=True,
                    detail=msg[msg.index("NVRM:") + 5 :].strip(),
                    line_no=no,
                    end_line_no=last,
                )
            )
        elif (pr := _PROBE_RE.search(msg)) is not None:
            scan.probe_failed_devices = int(pr["n"])
        elif (b := _BANNER_RE.search(msg)) is not None:
            scan.driver_version = b["ver"]
            scan.open_kernel_module = "open" in b["what"].lower()
        elif "API mismatch" in msg:
            mismatches += _api_mismatches(msg)
    if mismatches:
        scan.api_mismatch = replace(mismatches[-1], count=len(mismatches))
    # an inferred event another stands for is dropped; printed before it, its lines lead that
    # event's (the "GSP Timeout" banner above its Xid 119: in a window or out of it together)
    lead: dict[int, int] = {}
    kept: list[XidEvent] = []
    for i, e in enumerate(scan.events):
        by = _restated_by(e, scan.events, scan.events[:i])
        if by is None:
            kept.append(e)
        elif e.line_no < by.line_no:
            lead[id(by)] = min(lead.get(id(by), e.line_no), e.line_no)
    scan.events = [replace(e, lead_line_no=lead[id(e)]) if id(e) in lead else e for e in kept]
    if scan.bus_to_uuid:
        keyed = {pci_key(k): v for k, v in scan.bus_to_uuid.items()}
        scan.events = [
            replace(e, uuid=keyed[pci_key(e.pci_bus_id)])
            if e.uuid is None and pci_key(e.pci_bus_id) in keyed
            else e
            for e in scan.events
        ]
    return scan


def _restated_by(
    ev: XidEvent, events: Sequence[XidEvent], earlier: Sequence[XidEvent]
) -> XidEvent | None:
    """The event that already stands for an inferred one, or ``None``: a printed Xid 79 for
    the same GPU, or a printed Xid 119/120 (the bare GSP timeout names the driver's GPU
    number, not a bus), at most :data:`_SAME_EVENT_S` away or at an unknown distance (stamps
    missing or not comparable); or an ``earlier`` inferred Xid 79 of the same GPU (a GPU falls
    off the bus once: the driver's notice and its one-line restatement are one event)."""
    if not ev.inferred:
        return None
    same = (79,) if ev.xid == 79 else (119, 120)
    for e in events:
        if (
            e.xid not in same
            or e is ev
            or (e.inferred and (ev.xid != 79 or not any(x is e for x in earlier)))
        ):
            continue
        if ev.xid == 79 and pci_key(e.pci_bus_id) != pci_key(ev.pci_bus_id):
            continue
        d = _seconds(e, ev)
        if d is None or abs(d) <= _SAME_EVENT_S:
            return e
    return None


def _xid_pid(rest: str) -> int | None:
    m = _PID_RE.search(rest)
    if m is None:
        return None
    value = m["q"] if m["q"] is not None else m["v"]
    return int(value) if value.isdigit() else None


def _xid_name(rest: str) -> str | None:
    m = _NAME_RE.search(rest)
    if m is None:
        return None
    name = m["name"].strip().strip("'\"")
    return None if not name or name == "<unknown>" else name


def _xid_mmu(rest: str) -> MmuFault | None:
    m = _MMU_RE.search(rest)
    if m is None:
        return None
    return MmuFault(
        engine=m["engine"],
        client=m["client"],
        address=m["addr"],
        fault_type=m["ftype"],
        access_type=m["access"],
    )


# ---------------------------------------------------------------------------------------------
# Xid records in other tools' formats (no ``NVRM: Xid (PCI:...)`` kernel line)

#: One Xid record as another tool prints it. Each names the GPU or the moment, so that a
#: sentence merely naming an Xid ("what does Xid 79 mean?") is never taken for an event:
#:
#: * NVIDIA k8s-device-plugin (``internal/rm/health.go``; older ``server.go``):
#:   ``XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.`` /
#:   ``..., the device will go unhealthy.``
#: * DCGM (``dcgmlib/dcgm_errors.h`` ``DCGM_FR_XID_ERROR_MSG``): ``Detected XID %u for GPU %u``.
#: * gpud (leptonai/gpud's Xid component): ``XID 79(GPU has fallen off the bus) detected on
#:   PCI:0000:ae:00``, ``XID 149.0 (err status ...) NAME ... on GPU PCI:0019:01:00``.
#: * a bare ``Xid N`` bound to a PCI bus id (``XID 79 on GPU 0000:3b:00.0``,
#:   ``Xid 48 (PCI:0000:07:00)``) or at the start of a stamped row of a hand-made table of kernel
#:   records (``08-04 06:43:55 Xid 31 GPC1 GPCCLIENT_T1_9 @ 0x... FAULT_PDE``).
_PLUGIN_XID_RE = re.compile(
    r"XidCriticalError: Xid=(?P<xid>\d{1,3}) on Device=(?P<dev>[\w.:-]+?)[,;.]?(?:\s|$)"
)
_DCGM_XID_RE = re.compile(r"Detected XID (?P<xid>\d{1,3}) for GPU (?P<gpu>\d+)", re.IGNORECASE)
_BDF = r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_BOUND_XID_RE = re.compile(
    r"\bXID[ =:]*(?P<xid>\d{1,3})(?:\.\d+)?\b(?P<detail>[^\n]{0,160}?)"
    r"\b(?:detected )?(?:on|for|at) (?:GPU |device )?" + _BDF,
    re.IGNORECASE,
)
_XID_PCI_PAREN_RE = re.compile(r"\bXID[ =:]*(?P<xid>\d{1,3})\s*\(" + _BDF + r"\)", re.IGNORECASE)
_STAMPED_XID_RE = re.compile(
    r"^\s*(?P<stamp>(?:\d{2,4}[-/.]\d{1,2}(?:[-/.]\d{1,2})?[ T]+)?\d{1,2}:\d\d:\d\d(?:[.,]\d+)?)"
    r"\s+[|]?\s*XID[ =:]*(?P<xid>\d{1,3})\b(?P<detail>.*)$",
    re.IGNORECASE,
)
#: A sentence asking about an Xid, not reporting one.
_QUESTION_RE = re.compile(
    r"\?\s*$|^\s*(?:what|how|why|which|is|does|do|can|should|will)\b", re.IGNORECASE
)


def scan_xid_records(text: str) -> list[XidEvent]:
    """Xid events recorded by tools other than the kernel (see :data:`_PLUGIN_XID_RE` and the
    formats listed above it): the NVIDIA device plugin, DCGM, gpud, a table of kernel records
    copied without their ``NVRM:`` prefix. Lines holding an ``NVRM: Xid`` kernel record are
    left to :func:`scan_kernel_log`; a question naming an Xid is not an event.

    ``pci_bus_id`` is the bus id when the record names one, else the device the tool names
    (a GPU UUID, ``GPU0`` for DCGM's GPU id), else the empty string (a GPU the text does not
    name). ``time_text`` is the row's stamp for a stamped table row. Never raises.
    """
    events: list[XidEvent] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if "xid" not in line.lower() or "NVRM: Xid" in line or _QUESTION_RE.search(line):
            continue
        if (m := _PLUGIN_XID_RE.search(line)) is not None:
            dev = m["dev"]
            uuid = dev if dev.startswith(("GPU-", "MIG-")) else None
            events.append(
                XidEvent(
                    xid=int(m["xid"]),
                    pci_bus_id=dev,
                    time_text="",
                    uuid=uuid,
                    detail=line[m.start() :],
                    line_no=no,
                    end_line_no=no,
                )
            )
        elif (m := _DCGM_XID_RE.search(line)) is not None:
            events.append(
                XidEvent(
                    xid=int(m["xid"]),
                    pci_bus_id=f"GPU{m['gpu']}",
                    time_text="",
                    detail=line[m.start() :],
                    line_no=no,
                    end_line_no=no,
                )
            )
        elif (m := _BOUND_XID_RE.search(line) or _XID_PCI_PAREN_RE.search(line)) is not None:
            events.append(
                XidEvent(
                    xid=int(m["xid"]),
                    pci_bus_id=m["pci"].lower(),
                    time_text="",
                    detail=line[m.start() :],
                    line_no=no,
                    end_line_no=no,
                )
            )
        elif (m := _STAMPED_XID_RE.search(line)) is not None:
            detail = m["detail"].strip(" ,:-|")
            events.append(
                XidEvent(
                    xid=int(m["xid"]),
                    pci_bus_id="",
                    time_text=m["stamp"],
                    mmu=_xid_mmu(detail),
                    detail=detail,
                    line_no=no,
                    end_line_no=no,
                )
            )
    return events


# ---------------------------------------------------------------------------------------------
# why the driver is unreachable: the kernel's and modprobe's lines about the nvidia module


@dataclass(frozen=True)
class DriverLoadProblem:
    """A kernel or modprobe line that explains why the NVIDIA kernel driver is not reachable.

    Attributes:
        reason: ``other_driver`` (nouveau or another driver owns the GPUs; nv.c "The NVIDIA
            probe routine was not called for %d device(s)"), ``no_device`` (the module found
            no GPU it may drive: "No NVIDIA graphics adapter probed!"), ``unsupported_gpu``
            (the open module refuses a GPU without GSP), ``signature`` (Secure Boot / module
            signature enforcement refused the module: modprobe's "Key was rejected by service",
            "Required key not available", the kernel's Lockdown notice), ``wrong_kernel``
            (built for another kernel: "Unknown symbol", "disagrees about version of symbol",
            "version magic", "Exec format error"), ``not_installed`` (modprobe: "Module nvidia
            not found"), ``load_failed`` (modprobe's other "could not insert" errors),
            ``driver_failed`` (another ``NVRM: ... failed`` line).
        detail: what the line says, in a few words.
        line_no: its 1-based line in the text.
        devices: GPUs it concerns, when it says how many.
        module: the module named (``nvidia``, ``nvidia_367``), when it names one.
    """

    reason: str
    detail: str
    line_no: int
    devices: int | None = None
    module: str | None = None


_NOT_CALLED_RE = re.compile(r"NVRM: The NVIDIA probe routine was not called for (?P<n>\d+) dev")
_NO_ADAPTER_RE = re.compile(
    r"NVRM: No NVIDIA (?:graphics adapter|GPU|devices?) (?:probed|found)", re.IGNORECASE
)
_NO_GSP_RE = re.compile(r"not supported by open\s+(?:NVRM:\s*)?nvidia\.ko")
#: ``lsmod`` / dmesg lines of the nouveau driver (never the NVRM notice that merely names it).
_NOUVEAU_RE = re.compile(r"^(?:nouveau\b(?: \d{4}:|\s+\d+\s+\d+)|\[drm\] Initialized nouveau)")
_INSERT_RE = re.compile(
    r"could not insert '(?P<mod>nvidia[\w-]*)': (?P<why>[^\n]+?)\s*$", re.IGNORECASE
)
_NOT_FOUND_RE = re.compile(
    r"modprobe: FATAL: Module (?P<mod>nvidia[\w-]*) not found"
    r"|could not find module by name='(?P<mod2>nvidia[\w-]*)'",
    re.IGNORECASE,
)
_SYMBOL_RE = re.compile(
    r"^(?P<mod>nvidia(?:[-_](?:uvm|modeset|drm))?): (?:Unknown symbol \S+|disagrees about "
    r"version of symbol \S+|version magic '[^']*' should be)"
)
_LOCKDOWN_RE = re.compile(r"Lockdown: modprobe: unsigned module loading is restricted")
_NVRM_FAILED_RE = re.compile(r"NVRM: (?!Xid)(?P<msg>.*\bfailed\b.*)$")
_SIGNATURE_WHY = re.compile(r"Key was rejected|Required key not available", re.IGNORECASE)
_WRONG_KERNEL_WHY = re.compile(
    r"Unknown symbol|Exec format error|Invalid module format", re.IGNORECASE
)


def find_driver_load_problems(text: str) -> list[DriverLoadProblem]:
    """The lines of ``text`` (decorations already removed) that say why the nvidia kernel
    module is not loaded or drives no GPU, in text order (see :class:`DriverLoadProblem`).

    Sources: NVIDIA's kernel module (``kernel-open/nvidia/nv.c``, ``nv-pci.c``: the probe and
    GSP notices), kmod's ``modprobe`` errors (``could not insert '%s': %s`` with the errno
    text, ``Module %s not found``), the kernel's module loader (``kernel/module``: ``%s:
    Unknown symbol %s``, ``disagrees about version of symbol``) and Lockdown. The benign
    ``module verification failed: ... tainting kernel`` notice (the module loads) is no
    problem. Never raises.
    """
    out: list[DriverLoadProblem] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if (m := _NOT_CALLED_RE.search(line)) is not None:
            out.append(
                DriverLoadProblem(
                    "other_driver",
                    f"'The NVIDIA probe routine was not called for {m['n']} "
                    "device(s)' (nouveau, rivafb, nvidiafb or rivatv obtained them)",
                    no,
                    devices=int(m["n"]),
                )
            )
        elif _NO_ADAPTER_RE.search(line):
            out.append(DriverLoadProblem("no_device", "the nvidia module probed no GPU", no))
        elif _NO_GSP_RE.search(line):
            out.append(
                DriverLoadProblem(
                    "unsupported_gpu", "the open nvidia.ko does not support this GPU (no GSP)", no
                )
            )
        elif _NOUVEAU_RE.search(line):
            out.append(DriverLoadProblem("other_driver", "nouveau is loaded", no, module="nouveau"))
        elif (m := _INSERT_RE.search(line)) is not None:
            why = m["why"].strip().rstrip(".")
            reason = (
                "signature"
                if _SIGNATURE_WHY.search(why)
                else "wrong_kernel"
                if _WRONG_KERNEL_WHY.search(why)
                else "load_failed"
            )
            out.append(
                DriverLoadProblem(
                    reason, f"modprobe could not insert {m['mod']}: {why}", no, module=m["mod"]
                )
            )
        elif (m := _NOT_FOUND_RE.search(line)) is not None:
            mod = m["mod"] or m["mod2"]
            out.append(
                DriverLoadProblem(
                    "not_installed",
                    f"modprobe finds no {mod} module for the running kernel",
                    no,
                    module=mod,
                )
            )
        elif (m := _SYMBOL_RE.search(line)) is not None:
            out.append(
                DriverLoadProblem(
                    "wrong_kernel",
                    f"{m['mod']} was built for another kernel ({line[m.end(1) + 2 :]})",
                    no,
                    module=m["mod"],
                )
            )
        elif _LOCKDOWN_RE.search(line):
            out.append(
                DriverLoadProblem(
                    "signature", "kernel lockdown (Secure Boot) refuses unsigned modules", no
                )
            )
        elif (m := _NVRM_FAILED_RE.search(line)) is not None and "probe routine failed" not in line:
            out.append(DriverLoadProblem("driver_failed", m["msg"].strip(), no))
    return out


# ---------------------------------------------------------------------------------------------
# Xid summaries

#: Xid -> (short meaning, class), for every Xid NVIDIA's catalogue uses, derived from
#: ``remote/telemetry/xid_catalog.py``. Classes: ``lost`` (RESTART_BM: off the bus, reboot /
#: power cycle), ``consequence`` (Xid 45 cleanup after earlier errors, Xid 154 the driver's
#: verdict on one), ``reset`` (RESET_GPU / RESTART_VM, and Xid 48: reset before reuse), ``app``
#: (the application's fault; the GPU stays usable), ``hw`` (other GPU, memory, power or
#: interconnect events: NVLink, row remapping, ECC rates, mechanicals), ``info`` (IGNORE).
XID_INFO: dict[int, tuple[str, str]] = {}
for _code, _info in XID_CATALOG.items():
    if not _info.used:
        continue
    if _info.action == "reboot":
        _cls = "lost"
    elif _info.role in ("consequence", "summary"):
        _cls = "consequence"
    elif _info.action in ("reset_gpu", "restart_vm"):
        _cls = "reset"
    elif _info.role == "app":
        _cls = "app"
    elif _info.role == "root":
        _cls = "hw"
    else:
        _cls = "info"
    XID_INFO[_code] = (_info.short, _cls)
_APP_FAULTS = frozenset(x for x, (_, c) in XID_INFO.items() if c == "app")
#: app-class faults from at least this many events and distinct processes -> suspect hardware.
SUSPECT_MIN_EVENTS = 3
SUSPECT_MIN_PIDS = 3
#: ... and over at least this long (s) or from differently named programs: one program that
#: crashes the same way on every retry within a few minutes is its own bug, not the GPU's.
SUSPECT_MIN_SPAN_S = 600.0
#: an app-class fault at most this long before a reset-class Xid started its chain.
CHAIN_WINDOW_S = 300.0

XidVerdict = Literal[
    "gpu_lost", "needs_reset", "suspect_hardware", "application_fault", "hardware_warning", "info"
]


@dataclass(frozen=True)
class GpuXidSummary:
    """The Xid history of one GPU and what to do about it.

    Attributes:
        pci_bus_id: as first printed in the kernel log.
        gpu_index: from ``bus_to_index``, or ``None``.
        uuid: from the log's ``NVRM: GPU at`` lines, or ``None``.
        counts: Xid -> number of events.
        pids: distinct known pids in first-seen order (``<unknown>`` ones left out).
        first: the earliest event; last: the latest.
        events: this GPU's events in log order.
        verdict: see :data:`XidVerdict` (the worst finding wins).
        diagnosis: what happened, in one paragraph.
        action: what to do.
        drain: take the GPU out of scheduling.
        chain_root: for a reset-class Xid, the earlier app-class event (with its pid) that began
            the chain, or ``None``.
        headline: the chain's root Xid and its action (:func:`xid_headline`).
    """

    pci_bus_id: str
    gpu_index: int | None
    uuid: str | None
    counts: dict[int, int]
    pids: tuple[int, ...]
    first: XidEvent
    last: XidEvent
    events: tuple[XidEvent, ...]
    verdict: XidVerdict
    diagnosis: str
    action: str
    drain: bool
    chain_root: XidEvent | None
    headline: XidHeadline | None = None

    @property
    def line(self) -> str:
        """One line for a table: the headline (``Xid 79 fallen off the bus: reboot``), with
        what the history adds (faults across many processes: drain, run diagnostics)."""
        text = self.headline.text if self.headline else ""
        if self.headline is not None:
            rank = ACTION_RANK.get(self.headline.action, 0)
            harder = next(
                (
                    e
                    for e in self.events
                    if xid_info(e.xid).role not in _TAIL_ROLES
                    and ACTION_RANK.get(xid_info(e.xid).action, 0) > rank
                ),
                None,
            )
            if harder is not None:  # e.g. the Xid 109 after an application's Xid 13
                text += f"; then Xid {harder.xid}: {xid_info(harder.xid).action_text}"
        if self.verdict == "suspect_hardware":
            text += f"; {len(self.pids)} processes hit: drain, run diagnostics"
        return text


#: Longer words for a diagnosis where the catalogue's short ones leave out what matters.
_XID_EXPLAIN: dict[int, str] = {
    13: "graphics engine exception: application error, e.g. out-of-range access",
    31: "GPU memory page fault: MMU fault, invalid address used by the application",
    43: "GPU stopped processing: application fault, channel reset, GPU stays usable",
}


def _xid_text(xid: int) -> str:
    return _XID_EXPLAIN.get(xid) or XID_INFO.get(xid, (xid_info(xid).short, "info"))[0]


@dataclass(frozen=True)
class XidHeadline:
    """The one Xid to show for a GPU: the root of its chain, with the action to take.

    Attributes:
        xid: the root's Xid number (for a GPU with only Xid 45 lines, the Xid they name).
        short: its catalogue words (``fallen off the bus``).
        action: ``xid_catalog.Action``: the root's catalogue action, or the recovery action an
            Xid 154 line named when that one is harder.
        event: the event shown (the root, or the Xid 45 line that named it).
        consequences: Xid 45/154 events on this GPU that follow from the chain.
        text: ``Xid 79 fallen off the bus: reboot`` (``(via Xid 45)`` when the root was only
            named by cleanup lines).
        blame: how strongly the chain blames the GPU (:data:`BLAME_ROOT` ... :data:`BLAME_NONE`),
            to rank the chains of several GPUs.
    """

    xid: int
    short: str
    action: str
    event: XidEvent
    consequences: int
    text: str
    blame: int = 0

    @property
    def action_text(self) -> str:
        """The action in a person's words (``reset GPU``)."""
        return ACTION_TEXT.get(self.action, self.action)

    @property
    def severe(self) -> bool:
        """The GPU should leave scheduling now (reboot, reset, NVLink, mechanicals)."""
        return ACTION_RANK.get(self.action, 0) >= ACTION_RANK["nvlink"]


#: :attr:`XidHeadline.blame`: a chain-starting Xid of the GPU, its memory, firmware or
#: interconnect (catalogue role ``root``).
BLAME_ROOT = 3
#: a context switch timeout (Xid 109) with no application fault before it.
BLAME_LONE_TIMEOUT = 2
#: the application's fault (RESTART_APP / IGNORE-class Xids).
BLAME_APP = 1
#: only cleanup lines naming nothing, or informational Xids.
BLAME_NONE = 0

#: Xid 109 (context switch timeout, RESET_GPU) starts a chain only when no application fault on
#: that GPU came before it: after an Xid 13/31 it is the faulted context failing to switch out
#: (the catalogue lists it among the Xids that follow, with 45 and 154).
_FOLLOWERS = frozenset({109})
_TAIL_ROLES = frozenset({"consequence", "summary"})


def _blame(code: int) -> int:
    if code in _FOLLOWERS:
        return BLAME_LONE_TIMEOUT
    return {"root": BLAME_ROOT, "app": BLAME_APP}.get(xid_info(code).role, BLAME_NONE)


def chain_root(events: Sequence[XidEvent]) -> tuple[XidEvent, int]:
    """The event that begins one GPU's Xid chain, and the Xid it stands for, in the order of
    NVIDIA's Xid catalogue (``xid_catalog``: roles and immediate actions).

    ``events`` are one GPU's, in log order (non-empty). Chain starters (catalogue role
    ``root``: NVLink 74/144-150, GSP 119/120, 79, ECC 48/94/95, 62, row remapping 63/64, 92,
    ...) come first: the one whose immediate action hits hardest (reboot > reset > NVLink /
    mechanicals > support), the earliest of equals. Then an Xid 109 with no application
    fault before it; then the application's faults (13, 31, 43, ...: the hardest action, the
    earliest of equals); then a 109 that followed one. Consequences (Xid 45) and summaries
    (Xid 154) are never the root: a GPU with only those takes the Xid the first 45 names
    (``caused by previous Xid 149``), else its first event.
    """
    heads = [e for e in events if xid_info(e.xid).role not in _TAIL_ROLES]
    roots = [e for e in heads if xid_info(e.xid).role == "root" and e.xid not in _FOLLOWERS]
    apps = [e for e in heads if xid_info(e.xid).role != "root"]
    position = {id(e): i for i, e in enumerate(events)}
    first_app = min((position[id(e)] for e in apps), default=len(events))
    lone = [e for e in heads if e.xid in _FOLLOWERS and position[id(e)] < first_app]
    late = [e for e in heads if e.xid in _FOLLOWERS and position[id(e)] > first_app]
    for group in (roots, lone, apps, late):
        if group:
            best = max(ACTION_RANK.get(xid_info(e.xid).action, 0) for e in group)
            event = next(e for e in group if ACTION_RANK.get(xid_info(e.xid).action, 0) == best)
            return event, event.xid
    named = next((e for e in events if e.caused_by is not None), None)
    if named is not None and named.caused_by is not None:
        return named, named.caused_by
    return events[0], events[0].xid


def xid_headline(events: Sequence[XidEvent]) -> XidHeadline | None:
    """The root of one GPU's Xid chain (:func:`chain_root`) and its action, ``None`` without
    events.

    ``events`` in log order. The action is the root's catalogue action; an Xid 154's recovery
    action (``GPU Reset Required``, ``Node Reboot Required``) replaces it when harder. A root
    only named by Xid 45 lines is shown ``(via Xid 45)``.
    """
    if not events:
        return None
    event, code = chain_root(events)
    follow = [e for e in events if xid_info(e.xid).role in _TAIL_ROLES]
    via = f" (via Xid {event.xid})" if code != event.xid else ""
    info = xid_info(code)
    action: str = info.action
    for e in follow:
        if e.recovery is not None and ACTION_RANK.get(e.recovery, 0) > ACTION_RANK[action]:
            action = e.recovery
    if action in ("follow_root", "recovery_action"):
        action = "unknown"
    text = f"Xid {code} {info.short}: {ACTION_TEXT.get(action, action)}{via}"
    return XidHeadline(
        xid=code,
        short=info.short,
        action=action,
        event=event,
        consequences=len(follow),
        text=text,
        blame=_blame(code),
    )


def summarize_xids(
    events: Sequence[XidEvent],
    bus_to_index: Mapping[str, int] | None = None,
) -> list[GpuXidSummary]:
    """Group Xid events per GPU (by PCI bus id) and diagnose each GPU.

    Verdicts, worst first: Xid 79 -> ``gpu_lost`` (reboot / power cycle; if it recurs check PCIe
    seating, power, cooling). A reset-class Xid (62, 48, 95, ...) -> ``needs_reset`` (reset the
    GPU or reboot before reuse); the Xid 45s after it are cleanup, and the chain began with the
    last app-class fault (with a pid) within :data:`CHAIN_WINDOW_S` before it. App-class faults
    (13, 31, 43, ...) repeated (>= :data:`SUSPECT_MIN_EVENTS`) across many processes (>=
    :data:`SUSPECT_MIN_PIDS` pids) of different programs or over at least
    :data:`SUSPECT_MIN_SPAN_S` -> ``suspect_hardware`` (drain, run diagnostics). Otherwise
    ``application_fault``: the GPU stays usable, look at the process. A GPU with only cleanup
    lines (Xid 45 ``caused by previous Xid N``) is judged by the Xid they name (its root,
    :func:`chain_root`), never as an application fault of its own.

    Args:
        events: from :func:`parse_kernel_log`, in log order.
        bus_to_index: bus id (any spelling, e.g. nvidia-smi's ``00000000:3D:00.0``) -> index.
    """
    index_by_key = {pci_key(k): v for k, v in (bus_to_index or {}).items()}
    groups: dict[tuple[int, int, int, int] | str, list[XidEvent]] = {}
    for ev in events:
        groups.setdefault(pci_key(ev.pci_bus_id) or ev.pci_bus_id, []).append(ev)
    out: list[GpuXidSummary] = []
    for key, evs in groups.items():
        counts: dict[int, int] = {}
        pids: list[int] = []
        for ev in evs:
            counts[ev.xid] = counts.get(ev.xid, 0) + 1
            if ev.pid is not None and ev.pid not in pids:
                pids.append(ev.pid)
        ordered = sorted(evs, key=_order_key)
        out.append(
            _diagnose(
                evs,
                counts,
                tuple(pids),
                ordered[0],
                ordered[-1],
                index_by_key.get(key) if isinstance(key, tuple) else None,
            )
        )
    return out


def _order_key(e: XidEvent) -> tuple[float, int]:
    if e.uptime_s is not None:
        return e.uptime_s, e.line_no
    if e.wall_time is not None:
        wt = e.wall_time if e.wall_time.tzinfo else e.wall_time.replace(tzinfo=timezone.utc)
        return wt.timestamp(), e.line_no
    return 0.0, e.line_no


def _diagnose(
    evs: list[XidEvent],
    counts: dict[int, int],
    pids: tuple[int, ...],
    first: XidEvent,
    last: XidEvent,
    gpu_index: int | None,
) -> GpuXidSummary:
    def span() -> str:
        if first is last:
            return f"at {first.time_text}"
        return f"from {first.time_text} to {last.time_text}"

    parts = [f"{n}x Xid {x} ({_xid_text(x)})" for x, n in counts.items()]
    seen = "; ".join(parts) + f" {span()}"
    mmus = list(
        dict.fromkeys(
            " ".join(
                x for x in (e.mmu.engine, e.mmu.client, e.mmu.fault_type, e.mmu.access_type) if x
            )
            for e in evs
            if e.mmu is not None
        )
    )
    if mmus:
        seen += f" (MMU fault: {'; '.join(mmus)})"
    if pids:
        seen += f", pids {', '.join(map(str, pids))}"
    classes = {XID_INFO.get(x, ("", "info"))[1] for x in counts}
    headline = xid_headline(evs)
    named: XidEvent | None = None  # the Xid 45 that names a root absent from the log
    if headline is not None and headline.xid not in counts:
        named = headline.event
        classes.add(XID_INFO.get(headline.xid, ("", "hw"))[1])
        seen += (
            f". Only cleanup lines: they name Xid {headline.xid} "
            f"({_xid_text(headline.xid)}), not in the log, as the cause"
        )
    chain_root: XidEvent | None = None
    app_events = [e for e in evs if e.xid in _APP_FAULTS]
    verdict: XidVerdict
    if "lost" in classes:
        verdict = "gpu_lost"
        lost = next((e for e in evs if e.xid == 79), named or first)
        diagnosis = (
            f"{seen}. The GPU fell off the bus at {lost.time_text} and no longer "
            "responds; the driver cannot use it until the host is power-cycled."
        )
        action = (
            "reboot / power-cycle the host; if it recurs check PCIe seating, power "
            "delivery and cooling"
        )
    elif "reset" in classes:
        verdict = "needs_reset"
        trigger = next(
            (e for e in evs if XID_INFO.get(e.xid, ("", ""))[1] == "reset"), named or first
        )
        trigger_xid = headline.xid if trigger is named and headline is not None else trigger.xid
        for e in evs:
            if e is trigger:
                break
            d = _seconds(e, trigger)
            if e.xid in _APP_FAULTS and e.pid is not None and (d is None or d <= CHAIN_WINDOW_S):
                chain_root = e
        diagnosis = (
            f"{seen}. After Xid {trigger_xid} ({_xid_text(trigger_xid)}) the GPU needs a reset."
        )
        if counts.get(45):
            diagnosis += f" The {counts[45]} Xid 45 events are cleanup after it."
        if chain_root is not None:
            diagnosis += (
                f" The chain began with pid {chain_root.pid}'s Xid {chain_root.xid} at "
                f"{chain_root.time_text}."
            )
        action = (
            "drain the GPU; reset it (`nvidia-smi -r -i <index>` once idle) or reboot the "
            "host before reuse"
        )
    elif (
        len(app_events) >= SUSPECT_MIN_EVENTS
        and len({e.pid for e in app_events if e.pid is not None}) >= SUSPECT_MIN_PIDS
        and (_spread_out(app_events))
    ):
        verdict = "suspect_hardware"
        diagnosis = (
            f"{seen}. The same GPU faults again and again for many different processes: "
            "suspect hardware rather than one application."
        )
        action = (
            "drain the GPU and run diagnostics (`dcgmi diag -r 3`, vendor field "
            "diagnostics); replace it if they fail"
        )
    elif classes <= {"app", "consequence"}:
        verdict = "application_fault"
        diagnosis = f"{seen}. Application fault; the GPU stays usable."
        action = (
            "look at the faulting process"
            + (f" (pid {', '.join(map(str, pids))})" if pids else "")
            + "; no action on the GPU unless it recurs for other processes"
        )
    elif "hw" in classes:
        verdict = "hardware_warning"
        diagnosis = f"{seen}. Hardware health warning."
        action = "watch the GPU; run diagnostics (`dcgmi diag -r 3`) if it recurs"
    else:
        verdict = "info"
        diagnosis = f"{seen}."
        action = "none"
    uuid = next((e.uuid for e in evs if e.uuid), None)
    return GpuXidSummary(
        pci_bus_id=evs[0].pci_bus_id,
        gpu_index=gpu_index,
        uuid=uuid,
        counts=counts,
        pids=pids,
        first=first,
        last=last,
        events=tuple(evs),
        verdict=verdict,
        diagnosis=diagnosis,
        action=action,
        drain=verdict in ("gpu_lost", "needs_reset", "suspect_hardware"),
        chain_root=chain_root,
        headline=headline,
    )


# ---------------------------------------------------------------------------------------------
# apt history: driver packages changed under a running system

_APT_ENTRY_RE = re.compile(r"^Start-Date:\s*(?P<date>\d{4}-\d\d-\d\d\s+\d\d:\d\d:\d\d)", re.M)
_APT_ACTION_RE = re.compile(
    r"^(?P<action>Install|Upgrade|Downgrade|Remove|Purge|Reinstall): "
    r"(?P<pkgs>.*)$",
    re.M,
)
_APT_PKG_RE = re.compile(r"(?P<name>[^\s:,()]+)(?::(?P<arch>[\w-]+))? \((?P<vers>[^)]*)\)")
_NVIDIA_PKG_RE = re.compile(r"nvidia|^libcuda|^cuda-drivers|^libxnvctrl", re.IGNORECASE)
_DRIVER_VER_RE = re.compile(r"^(?:\d+:)?(?P<v>\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class PackageChange:
    """One package in an apt history entry (``/var/log/apt/history.log``).

    Attributes:
        action: ``Upgrade``, ``Install``, ``Remove``, ...
        name: package name (``libnvidia-common-460``); arch: ``amd64`` or ``None``.
        old_version / new_version: Debian versions (``460.73.01-0ubuntu0.20.04.1``); ``None``
            where the action has none.
        old_driver / new_driver: the NVIDIA driver version inside them (``460.73.01``).
    """

    action: str
    name: str
    arch: str | None
    old_version: str | None
    new_version: str | None

    @property
    def old_driver(self) -> str | None:
        return _driver_version(self.old_version)

    @property
    def new_driver(self) -> str | None:
        return _driver_version(self.new_version)


@dataclass(frozen=True)
class DriverUpgrade:
    """An apt run that changed NVIDIA driver packages, with root cause and fix.

    Attributes:
        start: ``Start-Date`` (host local time, naive).
        commandline: ``Commandline`` value, or ``None``.
        unattended: run by unattended-upgrade (not by a person).
        changes: the NVIDIA packages it changed.
        root_cause / fix: one line each.
    """

    start: datetime
    commandline: str | None
    unattended: bool
    changes: tuple[PackageChange, ...]
    root_cause: str
    fix: str


def _driver_version(deb_version: str | None) -> str | None:
    if deb_version is None:
        return None
    m = _DRIVER_VER_RE.match(deb_version)
    return m["v"] if m else None


def classify_driver_upgrade(apt_history_text: str) -> DriverUpgrade | None:
    """The latest apt history entry that changed NVIDIA packages, or ``None``.

    Reads Debian/Ubuntu ``/var/log/apt/history.log`` entries (``Start-Date:`` ... ``End-Date:``).
    A driver package changed while the kernel module of the old version stays loaded is the
    classic cause of "couldn't communicate with the NVIDIA driver" and "Driver/library version
    mismatch".
    """
    starts = list(_APT_ENTRY_RE.finditer(apt_history_text))
    found: DriverUpgrade | None = None
    for i, st in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(apt_history_text)
        body = apt_history_text[st.start() : end]
        changes: list[PackageChange] = []
        for am in _APT_ACTION_RE.finditer(body):
            for pm in _APT_PKG_RE.finditer(am["pkgs"]):
                if not _NVIDIA_PKG_RE.search(pm["name"]):
                    continue
                vers = [v.strip() for v in pm["vers"].split(",") if v.strip() != "automatic"]
                old = new = None
                if am["action"] in ("Upgrade", "Downgrade") and len(vers) >= 2:
                    old, new = vers[0], vers[1]
                elif am["action"] in ("Install", "Reinstall") and vers:
                    new = vers[0]
                elif vers:
                    old = vers[0]
                changes.append(PackageChange(am["action"], pm["name"], pm["arch"], old, new))
        if not changes:
            continue
        cm = re.search(r"^Commandline:\s*(?P<c>.*)$", body, re.M)
        cmd = cm["c"].strip() if cm else None
        req = re.search(r"^Requested-By:", body, re.M)
        unattended = cmd is not None and "unattended-upgrade" in cmd and req is None
        start = datetime.strptime(" ".join(st["date"].split()), "%Y-%m-%d %H:%M:%S")
        who = "an automatic upgrade (unattended-upgrade)" if unattended else "a package upgrade"
        moved = ", ".join(
            f"{c.name} {c.old_version or '-'} -> {c.new_version or '-'}" for c in changes
        )
        found = DriverUpgrade(
            start=start,
            commandline=cmd,
            unattended=unattended,
            changes=tuple(changes),
            root_cause=(
                f"{who} on {start:%Y-%m-%d %H:%M:%S} changed the NVIDIA driver "
                f"packages under the running system ({moved})"
            ),
            fix=(
                "reinstall one consistent NVIDIA driver version and reboot; keep unattended "
                "upgrades away from NVIDIA packages (apt-mark hold them or add them to "
                "Unattended-Upgrade::Package-Blacklist, or disable unattended-upgrade)"
            ),
        )
    return found


# ---------------------------------------------------------------------------------------------
# nvidia-docker-plugin (v1) log: GPU discovery that never finished

_PLUGIN_RE = re.compile(
    r"^nvidia-docker-plugin \| (?P<ts>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) "
    r"(?P<msg>.*)$"
)


@dataclass(frozen=True)
class PluginDiscovery:
    """GPU discovery progress in an ``nvidia-docker-plugin`` (nvidia-docker 1.x) log.

    Attributes:
        nvml_loaded: when ``Loading NVIDIA management library`` was logged, or ``None``.
        discovery_started: when ``Discovering GPU devices`` was logged, or ``None``.
        finished: a later line shows discovery completed (volumes provisioned / API served).
    """

    nvml_loaded: datetime | None
    discovery_started: datetime | None
    finished: bool

    @property
    def stalled(self) -> bool:
        """Discovery started and never finished: the same fault as nvidia-smi's no GPUs."""
        return self.discovery_started is not None and not self.finished


def parse_plugin_discovery(text: str) -> PluginDiscovery:
    """Read NVML load / GPU discovery times from an nvidia-docker-plugin log (local time)."""
    nvml: datetime | None = None
    disc: datetime | None = None
    finished = False
    for line in text.splitlines():
        m = _PLUGIN_RE.match(line.strip())
        if not m:
            continue
        ts = datetime.strptime(m["ts"], "%Y/%m/%d %H:%M:%S")
        msg = m["msg"]
        if msg.startswith("Loading NVIDIA management library"):
            nvml = ts
        elif msg.startswith("Discovering GPU devices"):
            disc, finished = ts, False
        elif disc is not None and msg.startswith(
            ("Provisioning volumes", "Serving plugin API", "Serving remote API")
        ):
            finished = True
    return PluginDiscovery(nvml_loaded=nvml, discovery_started=disc, finished=finished)


__all__ = [
    "BLAME_APP",
    "BLAME_LONE_TIMEOUT",
    "BLAME_NONE",
    "BLAME_ROOT",
    "CHAIN_WINDOW_S",
    "NVML_FUNCTION_FIELDS",
    "SUSPECT_MIN_EVENTS",
    "SUSPECT_MIN_PIDS",
    "XID_INFO",
    "ApiMismatch",
    "DriverLoadProblem",
    "DriverUpgrade",
    "GpuHandleError",
    "GpuXidSummary",
    "HostFault",
    "KernelLogScan",
    "MmuFault",
    "NvmlFault",
    "PackageChange",
    "PluginDiscovery",
    "XidEvent",
    "XidHeadline",
    "chain_root",
    "classify_driver_upgrade",
    "classify_nvml_traceback",
    "find_api_mismatch",
    "find_driver_load_problems",
    "parse_plugin_discovery",
    "pci_key",
    "scan_kernel_log",
    "scan_xid_records",
    "summarize_xids",
    "xid_headline",
]
