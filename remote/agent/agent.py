"""gpuconsole host agent: one telemetry sample (schema v1) per interval on stdout, from NVML.

Run on a GPU host with the host's own ``python3`` (3.8 or newer, standard library only), from a
folder that also holds ``nvmlc.py`` (the agent's own small ctypes binding of the NVML calls it
makes) and ``pynvml.py`` (nvidia-ml-py)::

    python3 agent.py --interval 1.0 [--nvml auto|nvmlc|pynvml] [--pynvml-dir DIR]
                     [--slow-every 10] [--count N] [--boot-fixed-cache FILE]

NVML binding (:func:`load_nvml`): ``nvmlc.py`` unless ``--nvml pynvml`` (or the environment's
``GPUCONSOLE_AGENT_NVML=pynvml``) or ``--pynvml-dir`` asks for pynvml; pynvml also when
``nvmlc.py`` cannot be imported. Both give the same records; nvmlc starts about 30 ms of CPU
sooner (pynvml defines its whole API at import).

Each line on stdout is one JSON object in the format of ``remote/telemetry/schema.py`` (version
1, ``"source": "nvml"``); stdout is flushed after each line. The agent exits with status 0 when
its stdin reaches end of file (the console keeps stdin open as the liveness link: a dropped SSH
session closes it), after ``--count`` samples, or when stdout is closed.

Exit status 3: NVML could not be loaded (``libnvidia-ml.so.1`` or both bindings missing) but
``nvidia-smi`` is on PATH; one sample with state ``nvml_unavailable`` is written first, and the
console falls back to ``nvidia-smi``. When ``nvidia-smi`` is missing too, nothing could read the
GPUs: the agent does not exit but streams host samples (CPU, memory, load; zero GPUs) every
interval with state ``no_driver`` (``nvml_unavailable`` when the NVIDIA kernel module is loaded
all the same), the NVML reason in ``state_detail`` (:meth:`Agent.without_nvidia_smi`). Status 2:
bad arguments.

Kernel log: every ``--kernel-log-every`` s (default 10, and at the first sample) the agent reads
new ``NVRM:`` kernel messages (Xids) from ``/dev/kmsg``, ``journalctl -k`` or ``dmesg``, the
first this user may read, keeping a cursor (:class:`KernelLogReader`); they go into the
sample's ``kernel_log``, and while none works ``errors["kernel_log"]`` says why. NVML's Xid
events (``xid_events``) are registered once the first sample is out (:meth:`Agent.arm_xid`):
NVML delivers only events that come after the registration, so the first sample could not hold
any.

Costs: NVML is initialised once, device handles are cached; ``/dev/kmsg`` stays open between
kernel log reads; the only subprocesses are the kernel log reads where it cannot be read (one
``journalctl`` or ``dmesg`` per ``--kernel-log-every``). Fast
fields are read every sample; slow ones (name, UUID, PCI bus id, power limit, ECC counters,
remapped rows, persistence and MIG mode, versions) every ``--slow-every`` samples and cached. A
field NVML reports as not supported is not asked again until the next slow refresh. With
``--boot-fixed-cache FILE`` (the console passes it), each GPU's highest clocks and PCIe link
come at the start from FILE, written by an earlier run of the same boot and driver
(:class:`BootFixedCache`), instead of the driver.

Unknown is ``null``, never 0: a field that NVML does not support or that failed is ``null`` and
the reason (NVML's error string, e.g. ``"Not Supported"``) is kept in the record's ``errors`` map
under the field's name. One failing field or GPU never stops the others.

This file is shipped to hosts as a file (with ``nvmlc.py`` and ``pynvml.py`` only) and run there
by itself, so it is also the single source of the record's vocabulary (host states, clock-event
reason names and bits, keys, record builders: the block below the imports). The console imports
this module for that vocabulary only (``remote/telemetry/schema.py`` types it; the nvidia-smi
fallback builds its records with it); it never runs the agent in process. Hence: standard
library only, no Unix-only module imported at import time (``pwd`` is imported where it is
used), and Python 3.8 syntax and semantics (the annotations below are strings, never
evaluated).
"""

from __future__ import annotations

import _thread
import math
import os
import sys
import time

# Start-up cost: the host starts this file once per connection (``python3 -I -S``: no site,
# no user site), so nothing is imported here that the first sample does not need. ``argparse``,
# ``re``, ``json``, ``subprocess``, ``socket``, ``typing`` and ``ctypes`` cost milliseconds each
# to import (``json`` and ``subprocess`` mostly through ``re``, which they import); the options
# are parsed by hand (:func:`parse_args`, argparse only for --help and mistakes), samples are
# written by :func:`dumps` (json's own C string encoder, no ``json`` package), the kernel log
# tools are started with ``os.posix_spawnp`` (:func:`run_command`), dmesg's stamps are read
# without a regular expression, the container id's regular expression is compiled where it is
# used (only for processes on a GPU), the stdin watcher is a ``_thread`` thread (``threading``
# imports functools and collections: 3 ms), and ``ctypes`` comes with the NVML binding
# (nvmlc.py or pynvml).
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (they are strings, never evaluated)
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any, NoReturn

# --------------------------------------------------------------------------------------------
# the record's vocabulary: the single source of these names and keys
#
# This file runs on hosts by itself (only its NVML bindings are shipped with it), so the names
# and keys that appear in its JSON lines are defined here, once. The console's typed view of
# the record, remote/telemetry/schema.py, imports them from this file, and the nvidia-smi
# fallback (remote/telemetry/smi.py) builds its records with them: both paths spell everything
# alike.

SCHEMA_VERSION = 1
#: Environment variable naming a ``runtime: host`` node (its process has no container): the
#: console's plan sets it, and the agent reports it as the process's container id.
HOST_NODE_ENV = "GPUCONSOLE_CONTAINER"

#: ``source``: where a sample's GPU readings came from.
SOURCES = ("nvml", "nvidia-smi")

#: Host states (``state``): everything but ``ok`` means the host is unhealthy.
HOST_STATES = (
    "ok",
    "no_driver",  # no NVIDIA driver / nvidia-smi on the host
    "nvml_unavailable",  # libnvidia-ml.so.1 cannot be loaded (no user-space driver)
    "driver_unreachable",  # nvidia-smi/NVML cannot talk to the kernel driver
    "version_mismatch",  # driver/library version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    "no_gpus",  # the driver answers but enumerates 0 GPUs
    "gpu_lost",  # at least one GPU fell off the bus / is lost
    "error",  # anything else; see state_detail
)

#: Clock event (throttle) reason bits (``nvmlClocksEventReason*``, before R535
#: ``nvmlClocksThrottleReason*``; nvidia-smi's ``clocks_event_reasons.active`` mask has the same
#: bits) -> the names reported in ``throttle_reasons``. A set bit not listed here is reported
#: as ``"0x<bit>"`` (see :func:`decode_clock_reasons`).
CLOCK_EVENT_REASONS = (
    (0x001, "gpu_idle"),  # nothing runs; clocks drop to idle
    (0x002, "applications_clocks_setting"),  # application clocks set (was UserDefinedClocks)
    (0x004, "sw_power_cap"),  # software power scaling holds clocks under the power limit
    (0x008, "hw_slowdown"),  # HW slowdown (clocks / 2 or more): temperature, power brake
    (0x010, "sync_boost"),  # in a sync-boost group
    (0x020, "sw_thermal"),  # SwThermalSlowdown: software thermal slowdown
    (0x040, "hw_thermal"),  # HwThermalSlowdown: hardware thermal slowdown
    (0x080, "hw_power_brake"),  # HwPowerBrakeSlowdown: external power brake asserted
    (0x100, "display_clock_setting"),  # limited by the display clock setting
    (0x200, "board_limit"),  # BoardLimit
    (0x400, "reliability"),  # Reliability
)

#: Other spellings of the reasons (NVML's ``...Slowdown`` names as nvidia-smi's per-reason
#: fields spell them, and NVML's deprecated alias) -> the name above. Records read from
#: older recordings are normalised with this map.
THROTTLE_REASON_ALIASES = {
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "user_defined_clocks": "applications_clocks_setting",
}

#: The reason that is no limit on a working GPU (faces leave it out).
IDLE_REASON = "gpu_idle"

#: Reasons that cut clocks hard (thermal or hardware slowdowns), as opposed to power capping.
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")

#: A GPU's identity keys, in record order (before :data:`GPU_FIELDS`, then ``errors``).
GPU_IDENTITY = ("index", "uuid", "name", "pci_bus_id", "lost")

#: GPU readings, in record order. Units are in the names: ``_pct`` percent (0-100), ``_mib``
#: MiB, ``_c`` degrees C, ``_w`` W (2 decimals, as nvidia-smi prints them), ``_mhz`` MHz.
GPU_FIELDS = (
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "mem_total_mib",
    "temp_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "fan_pct",
    "pstate",
    "throttle_reasons",
    "ecc_volatile_uncorrected",
    "remapped_rows_pending",
    "persistence_mode",
    "mig_mode",
    "gpm",
)

#: The GPU record's ``unsupported`` key (after :data:`GPU_FIELDS`, before ``errors``): the
#: readings this GPU does not have at all, NVML's ``NVML_ERROR_NOT_SUPPORTED`` (nvidia-smi
#: prints ``[N/A]`` or ``[Not Supported]`` for them), e.g. ``fan_pct`` on a fanless SXM part,
#: ``gpm`` before Hopper. Such a reading is ``None`` as not applicable, not as unknown (a
#: reading that failed otherwise is unknown: only in ``errors``). Field names, in record order.
UNSUPPORTED_KEY = "unsupported"

#: Host readings, in record order (then ``errors``): hostname, CPU %, load averages, memory
#: and swap (MiB), pages swapped in and out per second (``/proc/vmstat`` ``pswpin`` +
#: ``pswpout`` since the previous sample), uptime (s), driver / CUDA / NVML versions.
HOST_FIELDS = (
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
)

#: A process record's keys, in order. ``used_mib`` MiB; ``rank``/``local_rank`` from the
#: process's environment (``None`` when unreadable, and always from nvidia-smi).
PROCESS_FIELDS = (
    "gpu_index",
    "gpu_uuid",
    "pid",
    "used_mib",
    "type",
    "user",
    "command",
    "container_id",
    "rank",
    "local_rank",
)
#: ``processes[].type``.
PROCESS_TYPES = ("compute", "graphics")

#: A ``ranks`` record's keys, in order: one per torchrun worker process on the host (its
#: environment holds ``RANK`` and ``TORCHELASTIC_RUN_ID``, as torchrun's elastic agent sets
#: them), on a GPU or not. ``cpu_pct``: the process's CPU time (user + system, all its
#: threads) over the last interval, % of one core (``/proc/PID/stat``); ``None`` on its first
#: sample.
RANK_FIELDS = ("pid", "rank", "local_rank", "container_id", "cpu_pct")

#: An Xid event record's keys, in order (``time`` Unix s).
XID_FIELDS = ("time", "gpu_index", "pci_bus_id", "xid", "pid", "detail")

#: GPM metrics read on Hopper and newer: (NVML_GPM_METRIC_* id, key in the ``gpm`` record, %).
GPM_METRICS = (
    (2, "sm_activity_pct"),  # NVML_GPM_METRIC_SM_UTIL
    (3, "sm_occupancy_pct"),  # NVML_GPM_METRIC_SM_OCCUPANCY
    (5, "tensor_activity_pct"),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    (10, "dram_bw_util_pct"),  # NVML_GPM_METRIC_DRAM_BW_UTIL
)


def empty_host() -> dict[str, Any]:
    """A host record with every reading unknown (``None``) and no reasons yet."""
    rec: dict[str, Any] = {k: None for k in HOST_FIELDS}
    rec["errors"] = {}
    return rec


def empty_gpu(index: int | None) -> dict[str, Any]:
    """A GPU record with every reading unknown (``None``), not lost, no reasons yet."""
    rec: dict[str, Any] = {
        "index": index,
        "uuid": None,
        "name": None,
        "pci_bus_id": None,
        "lost": False,
    }
    for f in GPU_FIELDS:
        rec[f] = None
    rec[UNSUPPORTED_KEY] = []
    rec["errors"] = {}
    return rec


def not_supported(rec: dict[str, Any], *keys: str) -> None:
    """Mark ``keys`` of a GPU record as not supported by the GPU (``unsupported``, in
    :data:`GPU_FIELDS` order)."""
    have = set(rec[UNSUPPORTED_KEY]) | set(keys)
    rec[UNSUPPORTED_KEY] = [k for k in GPU_FIELDS if k in have]


def empty_sample(source: str, seq: int, host_time: float, interval_s: float) -> dict[str, Any]:
    """A sample with state ``ok``, an unknown host, no GPUs, an unknown process list."""
    return {
        "schema": SCHEMA_VERSION,
        "type": "sample",
        "source": source,
        "seq": seq,
        "host_time": host_time,
        "interval_s": interval_s,
        "state": "ok",
        "state_detail": None,
        "host": empty_host(),
        "gpus": [],
        "processes": None,
        "xid_events": [],
        "errors": {},
        "kernel_log": None,
        "ranks": None,
    }


# --------------------------------------------------------------------------------------------
# NVML facts

#: Exit status when NVML cannot be loaded and nvidia-smi is on PATH (the console then falls
#: back to nvidia-smi); without nvidia-smi the agent streams host samples instead.
EXIT_NVML_UNAVAILABLE = 3
#: Present while the NVIDIA kernel module is loaded (relative to the ``/proc`` root).
NVIDIA_PROC_VERSION = "driver/nvidia/version"

# NVML return codes (nvml.h; stable ABI). Used instead of pynvml's generated exception classes
# so that any pynvml version (and the test stand-in) is classified the same way.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
#: ``errors["gpm"]`` of a GPU whose ``nvmlGpmQueryDeviceSupport`` says no (``gpm`` is then in
#: the record's ``unsupported``).
GPM_NOT_SUPPORTED = "GPM not supported on this GPU (needs Hopper or newer)"

#: Shortest time between the two ``nvmlGpmSampleGet`` a GPM reading is computed from (s):
#: NVML's GPM documentation asks for more than 100 ms ("due to the internal sample refresh
#: rate"); over a shorter one a fully loaded H200 read 0 % SM and tensor activity.
GPM_MIN_INTERVAL_S = 0.1

#: ``errors["gpm"]`` of a sample too soon after GPM's first sample (its values are ``None``).
GPM_FIRST = "GPM needs two samples 100 ms apart: unknown until the next sample"

#: ``nvmlInitWithFlags`` flag: do not fail when the driver enumerates no GPU.
NVML_INIT_FLAG_NO_GPUS = 1
#: ``nvmlEventTypeXidCriticalError``.
NVML_EVENT_XID = 0x8
#: NVML's "value not available" for 64-bit counters (``NVML_VALUE_NOT_AVAILABLE_ulonglong``).
NOT_AVAILABLE_U64 = (1 << 64) - 1
MIB = 1024 * 1024

#: Xid -> its short meaning, every Xid NVIDIA's catalogue uses (``xid_events[].detail``).
#: A copy of ``remote/telemetry/xid_catalog.agent_meanings()`` (this file is shipped alone);
#: ``tests/unit/test_xid_catalog.py`` checks the two are equal.
XID_MEANINGS = {
    8: "GPU stopped processing",
    11: "Invalid or corrupted push buffer stream",
    13: "Graphics Engine Exception",
    25: "Invalid or illegal push buffer stream",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    37: "Driver firmware error",
    38: "Driver firmware error",
    39: "Copy Engine Exception",
    40: "Copy Engine Exception",
    41: "Copy Engine Exception",
    43: "GPU stopped processing",
    44: "Graphics Engine fault during context switch",
    45: (
        "Preemptive cleanup, due to previous errors -- Most likely to see when running "
        "multiple cuda applications and hitting a DBE"
    ),
    46: "GPU stopped processing",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    60: "Video processor exception",
    62: "Internal micro-controller halt (newer drivers)",
    63: "GPU memory remapping event",
    64: "GPU memory remapping failure",
    66: "Illegal access by driver",
    67: "Illegal access by driver",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    70: "CE3: Unknown Error",
    71: "CE4: Unknown Error",
    72: "CE5: Unknown Error",
    74: "NVLINK Error",
    75: "CE6: Unknown Error",
    76: "CE7: Unknown Error",
    77: "CE8: Unknown Error",
    78: "vGPU Start Error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU",
    82: "NVJPG0 Error",
    83: "NVDEC1 Error",
    84: "NVDEC2 Error",
    85: "CE9: Unknown Error",
    86: "OFA Exception",
    88: "NVDEC3 Error",
    89: "NVDEC4 Error",
    92: "High single-bit ECC error rate",
    93: "Non-fatal violation of provisioned InfoROM wear limit",
    94: "Contained memory error",
    95: "Uncontained memory error",
    96: "NVDEC5 Error",
    97: "NVDEC6 Error",
    98: "NVDEC7 Error",
    99: "NVJPG1 Error",
    100: "NVJPG2 Error",
    101: "NVJPG3 Error",
    102: "NVJPG4 Error",
    103: "NVJPG5 Error",
    104: "NVJPG6 Error",
    105: "NVJPG7 Error",
    106: "SMBPBI Test Message",
    107: "SMBPBI Test Message Silent",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Error",
    126: "CE10: Unknown Error",
    127: "CE11: Unknown Error",
    128: "CE12: Unknown Error",
    129: "CE13: Unknown Error",
    130: "CE14: Unknown Error",
    131: "CE15: Unknown Error",
    132: "CE16: Unknown Error",
    133: "CE17: Unknown Error",
    134: "CE18: Unknown Error",
    135: "CE19: Unknown Error",
    136: "Link Training Failed",
    137: "NVLink Privilege Error",
    139: "OFA1 Error",
    140: "ECC Unrecovered Error",
    141: "CUDA Fast Path Error",
    142: "NVENC3 Error",
    143: "GPU Initialization Error",
    144: "NVLINK: SAW Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    151: "Key rotation Error",
    152: "DLA SMMU Error",
    153: "DLA timeout Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    157: "Resource Retirement Failure",
    158: "GPU Fatal Timeout",
    159: "CHI Non-Data Error",
    160: "Channel Retirement Event",
    161: "Channel Retirement Failure",
    162: "Power Smoothing HW Circuitry capability reengaged",
    163: "Power Smoothing HW Circuitry capability disengaged",
    164: "Power Smoothing HW Circuitry low lifetime reached",
    165: "Power Smoothing HW Circuitry lifetime exhausted",
    166: "CC traffic seen prior to link properly being configured for encrypted traffic",
    167: "PCIE_FATAL_TIMEOUT",
    168: "Errors found in WPR (write protected region)",
    169: "Internal micro-controller halt",
    170: "Interrupt seen in CC mode",
    171: (
        "Additional to Xid 48 providing more details on particulars of fault to "
        "differentiate DRAM/SRAM"
    ),
    172: (
        "Additional to Xid 48 providing more details on particulars of fault to "
        "differentiate DRAM/SRAM"
    ),
}

#: A container id in a cgroup path (compiled at first use: ``re`` is not imported at start-up).
_CONTAINER_ID_PATTERN = (
    r"(?:docker|cri-containerd|crio|libpod)[-/]([0-9a-f]{64})\b"
    r"|/kubepods[^:\s]*?/([0-9a-f]{64})\b"
)


# --------------------------------------------------------------------------------------------
# helpers


def nvml_code(exc: BaseException) -> int | None:
    """The NVML return code carried by an ``NVMLError`` of pynvml or nvmlc (its ``value``), else
    ``None``."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def reason_of(exc: BaseException) -> str:
    """A short human-readable reason: NVML's own string (``"Not Supported"``) when it has one."""
    if nvml_code(exc) is not None:
        try:
            return str(exc)
        except Exception:  # NVMLError's __str__ can itself call NVML (nvmlErrorString)
            return f"NVML error {nvml_code(exc)}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _text(value: Any) -> str:
    """NVML strings arrive as ``str`` or (char arrays in structs) as ``bytes``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _finite(value: float) -> float | None:
    """``value`` rounded to 2 decimals, or ``None`` for NaN/inf (JSON has neither)."""
    return round(value, 2) if math.isfinite(value) else None


def handle_key(handle: Any) -> int:
    """A hashable identity for an NVML device handle (the ``nvmlDevice_t`` pointer value)."""
    import ctypes  # the NVML binding imported it already

    try:
        ptr = ctypes.cast(handle, ctypes.c_void_p).value
        if ptr is not None:
            return int(ptr)
    except Exception:  # not a ctypes pointer (the test stand-in): identity
        pass
    return id(handle)


def parse_container_id(cgroup_text: str) -> str | None:
    """The 64-hex container id in a ``/proc/PID/cgroup`` text, or ``None``.

    Understands cgroup v1 (``12:memory:/docker/<id>``), cgroup v2 with systemd
    (``0::/system.slice/docker-<id>.scope``), cgroup v2 with cgroupfs (``0::/docker/<id>``),
    containerd/CRI-O/podman scopes (``cri-containerd-<id>.scope``, ``crio-<id>.scope``,
    ``libpod-<id>.scope``) and Kubernetes cgroupfs paths (``/kubepods/<qos>/pod<uid>/<id>``).
    The first (outermost) id wins: that is the container the host's engine knows.
    """
    import re  # compiled once by re's own cache

    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        path = parts[2] if len(parts) == 3 else line
        m = re.search(_CONTAINER_ID_PATTERN, path)
        if m:
            return m.group(1) or m.group(2)
    return None


def format_cuda_version(value: int) -> str:
    """NVML's CUDA driver version integer (``12080``) as ``"12.8"``."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def decode_clock_reasons(mask: int) -> list[str]:
    """Names of the set bits of a clock event reason mask (:data:`CLOCK_EVENT_REASONS`), in
    bit order; bits without a name as ``"0x..."``. Used by the agent and the nvidia-smi
    fallback alike."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def watts(milliwatts: float) -> float:
    """NVML's mW as W with 2 decimals (the precision nvidia-smi prints, so both paths agree)."""
    return round(milliwatts / 1000.0, 2)


def read_text(path: str) -> str:
    """A small /proc file's text (raises OSError)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# the boot-fixed slow fields, kept between runs


#: Slow fields that cannot change while the machine is up with the same driver: the board's
#: highest clocks (``nvmlDeviceGetMaxClockInfo`` costs 1.4-2.7 ms of CPU on every call on an
#: H100 with driver 580: ``tests/data/device/agent-nvmlc-h100-exit/calls.txt``) and the
#: fastest PCIe link the GPU and the system allow together.
BOOT_FIXED = ("sm_clock_max_mhz", "mem_clock_max_mhz", "pcie_gen_max", "pcie_width_max")


class BootFixedCache:
    """Each GPU's :data:`BOOT_FIXED` values, kept in a small file between the agent's runs on
    a host (``--boot-fixed-cache``), so a start reads them from the file instead of the driver.
    The slow refreshes after the first sample ask the driver again, and rewrite the file when
    it said something else.

    Valid for one boot (``/proc/sys/kernel/random/boot_id``) and one driver version
    (``nvmlSystemGetDriverVersion``); a GPU is known by its UUID and PCI bus id together.
    Format, ASCII: line 1 ``gpuconsole-boot-fixed 1 BOOT_ID DRIVER_VERSION``, then one line per
    GPU: ``UUID BUS_ID`` and the four values in :data:`BOOT_FIXED`'s order (integers). A file
    that is missing, unreadable, of another boot or driver, or not in this format is ignored
    (and replaced); one that cannot be written leaves the agent as it was (no cache).

    Args:
        path: the file (relative: to the agent's working folder, its bundle's).
        proc_root: where ``/proc`` is (tests point it elsewhere).
    """

    MAGIC = "gpuconsole-boot-fixed 1"

    def __init__(self, path: str, proc_root: str = "/proc") -> None:
        self.path = path
        self.proc_root = proc_root
        self.key: str | None = None
        self.gpus: dict[tuple[str, str], tuple[int, ...]] = {}
        self.dirty = False

    def load(self, driver_version: str | None) -> None:
        """Read the file for this boot and ``driver_version`` (nothing kept without both)."""
        self.gpus, self.dirty, self.key = {}, False, None
        try:
            boot = read_text(self.proc_root + "/sys/kernel/random/boot_id").strip()
        except OSError:
            return
        words = [boot, driver_version or ""]
        if not all(w and w.isprintable() and " " not in w for w in words):
            return
        self.key = " ".join([self.MAGIC, *words])
        try:
            lines = read_text(self.path).splitlines()
        except OSError:
            return
        if not lines or lines[0] != self.key:
            return
        for line in lines[1:]:
            parts = line.split(" ")
            if len(parts) != 2 + len(BOOT_FIXED):
                self.gpus = {}
                return
            try:
                values = tuple(int(v) for v in parts[2:])
            except ValueError:
                self.gpus = {}
                return
            self.gpus[(parts[0], parts[1])] = values

    def get(self, uuid: str | None, bus_id: str | None) -> dict[str, int] | None:
        """The kept values of the GPU with this UUID and bus id, or ``None``."""
        values = self.gpus.get((str(uuid), str(bus_id))) if uuid and bus_id else None
        return dict(zip(BOOT_FIXED, values)) if values is not None else None

    def put(self, uuid: str | None, bus_id: str | None, values: dict[str, Any]) -> None:
        """Keep what the driver said for a GPU (only a GPU whose four values it all gave)."""
        if self.key is None or not uuid or not bus_id or " " in uuid + bus_id:
            return
        if not all(isinstance(values.get(k), int) for k in BOOT_FIXED):
            return
        new = tuple(int(values[k]) for k in BOOT_FIXED)
        if self.gpus.get((uuid, bus_id)) != new:
            self.gpus[(uuid, bus_id)] = new
            self.dirty = True

    def save(self) -> None:
        """Write the file if anything changed: a temporary file renamed over it, so a reader
        never sees half of one (two agents starting together write the same lines)."""
        if not self.dirty or self.key is None:
            return
        self.dirty = False
        lines = [self.key] + [
            " ".join([uuid, bus, *(str(v) for v in values)])
            for (uuid, bus), values in sorted(self.gpus.items())
        ]
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(tmp, self.path)
        except (OSError, UnicodeEncodeError):
            try:
                os.unlink(tmp)
            except OSError:
                pass


# --------------------------------------------------------------------------------------------
# versioned NVML calls


class Versioned:
    """Call the newest of several NVML entry points the driver has, remembering the one found.

    NVML versions functions by symbol (``nvmlDeviceGetComputeRunningProcesses_v3``, ``_v2``,
    ...). An older driver lacks the newer symbols: pynvml then raises ``NVMLError`` with
    ``NVML_ERROR_FUNCTION_NOT_FOUND`` (or a struct version the driver does not know raises
    ``NVML_ERROR_ARGUMENT_VERSION_MISMATCH``); a pynvml without the wrapper raises
    ``AttributeError``. Those move on to the next older entry point, for good.
    """

    FALLBACK_CODES = (NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH)

    def __init__(self, name: str, variants: Sequence[tuple[str, Callable[..., Any]]]) -> None:
        self.name = name
        self.variants = list(variants)
        self.pos = 0

    @property
    def used(self) -> str | None:
        """The label of the variant in use (``"v3"``), ``None`` when none is left."""
        return self.variants[self.pos][0] if self.pos < len(self.variants) else None

    def __call__(self, *args: Any) -> Any:
        """Call the current variant; fall back on a missing symbol/wrapper.

        Raises:
            Exception: the variant's own error, or the last fallback error when none is left.
        """
        last: BaseException | None = None
        while self.pos < len(self.variants):
            try:
                return self.variants[self.pos][1](*args)
            except AttributeError as e:
                last = e
            except Exception as e:
                if nvml_code(e) not in self.FALLBACK_CODES:
                    raise
                last = e
            self.pos += 1
        assert last is not None
        raise last


class _ProcInfoV1:
    """One entry of the v1 process list (``nvmlProcessInfo_v1_t``: pid, usedGpuMemory)."""

    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


def processes_v1(nv: Any, symbol: str, handle: Any) -> list[Any]:
    """``nvmlDeviceGet{Compute,Graphics}RunningProcesses`` (v1 struct) through ctypes.

    pynvml 12+ has no wrapper for the v1 symbols, which drivers older than R470 export alone.
    Returns objects with ``pid`` and ``usedGpuMemory`` (bytes, ``None`` when not available).
    """
    import ctypes  # the NVML binding imported it already

    class ProcessInfoV1(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

    fn = nv._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == NVML_SUCCESS:
        return []
    for _ in range(3):  # the list can grow between the two calls
        if ret != NVML_ERROR_INSUFFICIENT_SIZE:
            raise nv.NVMLError(ret)
        count.value = count.value * 2 + 5
        arr = (ProcessInfoV1 * count.value)()
        ret = fn(handle, ctypes.byref(count), arr)
        if ret == NVML_SUCCESS:
            return [
                _ProcInfoV1(
                    int(arr[i].pid),
                    None
                    if arr[i].usedGpuMemory == NOT_AVAILABLE_U64
                    else int(arr[i].usedGpuMemory),
                )
                for i in range(count.value)
            ]
    raise nv.NVMLError(ret)


# --------------------------------------------------------------------------------------------
# kernel log: NVRM lines (Xids) read where the SSH user may read them


#: Seconds between kernel log reads (the first sample always reads; 0 turns reading off).
KERNEL_LOG_EVERY_S = 10.0
#: Most NVRM lines one sample carries: the latest are kept, the others counted in ``dropped``.
KERNEL_LOG_MAX_LINES = 500
#: Seconds one ``journalctl`` / ``dmesg`` may run.
KERNEL_LOG_TIMEOUT_S = 5.0
#: The ``kernel_log`` record's keys, in order.
KERNEL_LOG_FIELDS = ("source", "lines", "since_boot", "dropped", "gap")
#: ``kernel_log.source`` values (``file``: a test's file standing in for the kernel log).
KERNEL_LOG_SOURCES = ("kmsg", "journalctl", "dmesg", "file")
#: The kernel's record-per-read log device (Documentation/ABI/testing/dev-kmsg), what util-linux
#: ``dmesg`` itself reads.
KMSG_PATH = "/dev/kmsg"
#: Bytes one ``read`` of ``/dev/kmsg`` may return: a record is at most the kernel's
#: ``CONSOLE_EXT_LOG_MAX`` (8 KiB) with its header; a smaller buffer gets EINVAL.
KMSG_READ_BYTES = 16384
#: Most records one read of ``/dev/kmsg`` takes (a kernel flooding its log cannot hold the
#: sample up); the rest are read at the next read.
KMSG_MAX_RECORDS = 100_000


def dmesg_stamp(line: str) -> float | None:
    """The seconds of dmesg's ``[  123.456789]`` prefix, else ``None`` (what the regular
    expression ``^\\[\\s*(\\d+\\.\\d+)\\]`` reads, with ASCII digits)."""
    if not line.startswith("["):
        return None
    end = line.find("]")
    if end < 0:
        return None
    whole, dot, frac = line[1:end].lstrip().partition(".")
    if not (dot and whole and frac) or not (whole + frac).isascii():
        return None
    if not (whole.isdigit() and frac.isdigit()):
        return None
    return float(whole + "." + frac)


#: journalctl's words when it runs but cannot show the kernel's messages to this user.
_JOURNAL_REFUSALS = (
    "not seeing messages from other users",
    "No journal files were",
    "insufficient permissions",
    "Permission denied",
)


def run_command(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    """Run ``argv`` (C locale, stdin ``/dev/null``); ``(returncode, stdout, stderr)``; 127 when
    the program is not installed, 124 when it ran past ``timeout`` s (it is killed), 126 when
    it could not be started otherwise. Never raises for these.

    Started with ``os.posix_spawnp`` and read through two pipes with ``select``
    (:func:`_spawn_and_read`): ``subprocess`` imports ``locale`` and with it ``re``, several ms
    of the agent's start; ``subprocess`` where there is no ``posix_spawnp``."""
    env = dict(os.environ, LC_ALL="C")
    if hasattr(os, "posix_spawnp"):
        return _spawn_and_read(list(argv), env, timeout)
    import subprocess

    try:
        res = subprocess.run(
            list(argv), capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        return 127, "", argv[0] + ": not installed"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer within {timeout:g}s"
    except OSError as e:
        return 126, "", f"{argv[0]}: {reason_of(e)}"
    return (
        res.returncode,
        res.stdout.decode("utf-8", "replace"),
        res.stderr.decode("utf-8", "replace"),
    )


def _spawn_and_read(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """:func:`run_command` through ``os.posix_spawnp``: the child's stdout and stderr are two
    pipes (``os.pipe`` fds are close-on-exec: the child keeps only its dup2'ed 1 and 2), read
    with ``select`` until both close or ``timeout`` s pass (then SIGKILL), its SIGPIPE and
    SIGXFSZ at their defaults as ``subprocess`` leaves them."""
    import select  # a C module: no Python imports behind it

    out_r, out_w = os.pipe()
    try:
        err_r, err_w = os.pipe()
    except OSError as e:  # out of descriptors
        os.close(out_r)
        os.close(out_w)
        return 126, "", f"{argv[0]}: {reason_of(e)}"
    try:
        pid = os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            # SIGPIPE and SIGXFSZ back to their defaults in the child (Python ignores them;
            # subprocess's restore_signals does the same); 13 and 25 on Linux and macOS, the
            # numbers because ``signal`` imports enum
            setsigdef=(13, 25),
        )
    except FileNotFoundError:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return 127, "", argv[0] + ": not installed"
    except OSError as e:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return 126, "", f"{argv[0]}: {reason_of(e)}"
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
    finally:
        for fd in (out_r, err_r):
            os.close(fd)
        # past the deadline, or the reading failed (Ctrl-C): the child goes; else it has
        # closed its output and is given what is left of the deadline to exit
        status = None if timed_out or open_fds else _wait_until(pid, deadline)
        if status is None:
            timed_out = timed_out or not open_fds
            try:
                os.kill(pid, 9)  # SIGKILL (Linux and BSDs; ``signal`` imports enum)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
    if timed_out:
        return 124, "", f"{argv[0]}: no answer within {timeout:g}s"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    return (
        code,
        b"".join(chunks[out_r]).decode("utf-8", "replace"),
        b"".join(chunks[err_r]).decode("utf-8", "replace"),
    )


def _wait_until(pid: int, deadline: float) -> int | None:
    """The wait status of child ``pid`` once it exits, or ``None`` if it still runs at
    ``deadline`` (``time.monotonic()``); polls every 2 ms (a child that closed its output is
    usually exiting)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.002)


def nvrm_lines(lines: Iterable[str]) -> list[str]:
    """The lines of the kernel messages that mention ``NVRM``: a message is a line and the
    indented continuation lines after it (dmesg and journalctl indent them); a message is kept
    whole when any of its lines mentions NVRM."""
    out: list[str] = []
    msg: list[str] = []

    def flush() -> None:
        if any("NVRM" in m for m in msg):
            out.extend(msg)

    for line in lines:
        if not line.strip():
            continue
        if line[:1].isspace() and msg:
            msg.append(line)
            continue
        flush()
        msg = [line]
    flush()
    return out


def kmsg_unescape(text: bytes) -> bytes:
    """``/dev/kmsg``'s message text with its ``\\xNN`` escapes undone (the kernel writes every
    non-printable byte and the backslash itself that way, a newline as ``\\x0a``)."""
    if b"\\x" not in text:
        return text
    parts = text.split(b"\\x")
    out = [parts[0]]
    for part in parts[1:]:
        code = part[:2]
        if len(code) == 2 and not code.strip(b"0123456789abcdefABCDEF"):
            out.append(bytes((int(code, 16),)) + part[2:])
        else:  # not an escape the kernel wrote: kept as it came
            out.append(b"\\x" + part)
    return b"".join(out)


def kmsg_lines(record: bytes) -> list[str]:
    """One ``/dev/kmsg`` record as ``dmesg`` prints it: ``[%5d.%06d] text`` (seconds since
    boot, the record's microsecond stamp), the lines after a newline in the text indented
    under it as older dmesg indents them; ``[]`` for a record that is not one.

    Format (Documentation/ABI/testing/dev-kmsg): ``prio,seq,usec,flags[,...];text\\n``, then
    dictionary lines that begin with a space (``" SUBSYSTEM=pci"``), which are not the message.
    """
    head, sep, rest = record.partition(b";")
    fields = head.split(b",")
    if not sep or len(fields) < 4:
        return []
    try:
        usec = int(fields[2])
    except ValueError:
        return []
    text = kmsg_unescape(rest.partition(b"\n")[0]).decode("utf-8", "replace")
    stamp = f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}]"
    first, *more = text.split("\n")
    pad = " " * (len(stamp) + 1)
    return [f"{stamp} {first}"] + [pad + m for m in more if m.strip()]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class KernelLogReader:
    """Reads new NVIDIA kernel messages (``NVRM:`` lines) every ``every_s`` seconds, with a
    cursor so that no line is shipped twice and none is skipped.

    Sources, the first that works is kept (the SSH user is often not root):

    * ``/dev/kmsg``, read in the agent's own process (no program started): the kernel's ring
      buffer, one record per ``read``, kept open so that each read continues where the last
      ended; the kernel says when records were overwritten before they were read (EPIPE):
      ``gap``. The same rights as ``dmesg`` (``kernel.dmesg_restrict``), about a third of
      its CPU (no process to start, only NVRM records decoded).
    * ``journalctl -k -b -o short-monotonic --show-cursor`` (first read: this boot; then
      ``--after-cursor``). Needs the journal and, for a non-root user, the ``adm`` or
      ``systemd-journal`` group; journalctl then exits 0 showing no kernel lines and says so
      on stderr, which counts as refused.
    * ``dmesg`` (boot-relative stamps); the cursor is the last stamp and how many messages
      carried it. ``kernel.dmesg_restrict=1`` refuses it to users without CAP_SYSLOG. When the
      oldest message left is newer than the cursor, the ring buffer wrapped: ``gap``.
    * ``file``: a file read from a byte offset, standing in for the kernel log in tests
      (``--kernel-log-file``); no other source is tried then.

    :meth:`read` returns the ``kernel_log`` record (``source``, ``lines``: the new NVRM lines
    as the source printed them, ``since_boot``: the first read of a source, every NVRM line of
    this boot so far, ``dropped``: lines left out over :data:`KERNEL_LOG_MAX_LINES`, ``gap``:
    lines may be missing before these) or ``None`` with the reason no source works.

    Args:
        every_s: seconds between reads.
        file: the test source, or ``None``.
        run: runs a command (:func:`run_command`; tests give a fake).
        clock: monotonic seconds.
        restrict_path: where ``kernel.dmesg_restrict`` is read, to explain a refusal.
        kmsg_path: the kernel's log device (:data:`KMSG_PATH`); ``None``: not tried.
        open_fd: opens ``kmsg_path`` (``os.open``), read_fd: reads one record from the file
            descriptor (``os.read``); tests give fakes for both.
    """

    def __init__(
        self,
        every_s: float = KERNEL_LOG_EVERY_S,
        file: str | None = None,
        run: Callable[[Sequence[str], float], tuple[int, str, str]] = run_command,
        clock: Callable[[], float] = time.monotonic,
        restrict_path: str = "/proc/sys/kernel/dmesg_restrict",
        kmsg_path: str | None = KMSG_PATH,
        open_fd: Callable[[str, int], int] = os.open,
        read_fd: Callable[[int, int], bytes] = os.read,
    ) -> None:
        self.every_s = every_s
        self.file = file
        self.run = run
        self.clock = clock
        self.restrict_path = restrict_path
        self.kmsg_path = kmsg_path
        self.open_fd = open_fd
        self.read_fd = read_fd
        self._kmsg_fd: int | None = None
        #: the source in use (``None``: none works yet).
        self.source: str | None = None
        #: why no source works after the last read, or ``None``.
        self.error: str | None = None
        self._next: float | None = None
        self._journal_cursor: str | None = None
        self._dmesg_cursor: tuple[float, int] | None = None
        self._file_offset: int | None = None

    def due(self) -> bool:
        """Whether a read is due (always for the first)."""
        return self._next is None or self.clock() >= self._next

    def read(self) -> dict[str, Any] | None:
        """Read what is new; sets :attr:`error` when no source works (never raises)."""
        self._next = self.clock() + self.every_s
        if self.file:
            order = ["file"]
        else:
            order = (["kmsg"] if self.kmsg_path else []) + ["journalctl", "dmesg"]
        if self.source in order:  # the working source first
            order.remove(self.source)
            order.insert(0, self.source)
        why: list[str] = []
        for name in order:
            try:
                got = getattr(self, "_read_" + name)()
            except Exception as e:  # a bug here must never stop the samples
                got = f"{name}: {reason_of(e)}"
            if isinstance(got, str):
                why.append(got)
                if self.source == name:
                    self.source = None
                continue
            lines, since_boot, gap = got
            self.source, self.error = name, None
            keep = nvrm_lines(lines)
            dropped = max(0, len(keep) - KERNEL_LOG_MAX_LINES)
            return {
                "source": name,
                "lines": keep[dropped:],
                "since_boot": since_boot,
                "dropped": dropped,
                "gap": gap,
            }
        self.error = "kernel log unreadable: " + "; ".join(why)
        return None

    def close(self) -> None:
        """Close ``/dev/kmsg`` if it is open."""
        fd, self._kmsg_fd = self._kmsg_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- sources: each returns (new lines, since_boot, gap) or the reason it cannot --------------

    def _read_kmsg(self) -> tuple[list[str], bool, bool] | str:
        assert self.kmsg_path is not None
        first = self._kmsg_fd is None
        if self._kmsg_fd is None:
            try:  # the position starts at the oldest record the ring buffer still holds
                flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
                self._kmsg_fd = self.open_fd(self.kmsg_path, flags)
            except OSError as e:
                return f"kmsg: {self.kmsg_path}: {e.strerror or reason_of(e)}"
        fd = self._kmsg_fd
        lines: list[str] = []
        gap = False
        for _ in range(KMSG_MAX_RECORDS):
            try:
                record = self.read_fd(fd, KMSG_READ_BYTES)
            except BlockingIOError:  # every record read
                break
            except BrokenPipeError:  # overwritten before it was read: the next one follows
                gap = True
                continue
            except InterruptedError:
                continue
            except OSError as e:
                self.close()
                return f"kmsg: {self.kmsg_path}: {e.strerror or reason_of(e)}"
            if not record:
                break
            if b"NVRM" in record:  # the only records shipped: the rest are not decoded
                lines.extend(kmsg_lines(record))
        return lines, first, gap

    def _read_journalctl(self) -> tuple[list[str], bool, bool] | str:
        argv = ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "--show-cursor"]
        first = self._journal_cursor is None
        if not first:
            argv.append(f"--after-cursor={self._journal_cursor}")
        rc, out, err = self.run(argv, KERNEL_LOG_TIMEOUT_S)
        if rc != 0:
            self._journal_cursor = None
            return "journalctl: " + (_last_line(err) or f"exit status {rc}")
        refused = next((r for r in _JOURNAL_REFUSALS if r in err or r in out), None)
        if refused is not None:  # the line that says so ("Hint: You are currently not ...")
            said = next(
                (ln.strip() for ln in (err + "\n" + out).splitlines() if refused in ln), refused
            )
            return "journalctl: " + said
        lines: list[str] = []
        cursor = self._journal_cursor
        for line in out.splitlines():
            if line.startswith("-- cursor: "):
                cursor = line[len("-- cursor: ") :].strip()
            elif not line.startswith("-- "):  # "-- No entries --", "-- Logs begin at ..."
                lines.append(line)
        if first and not lines:
            return "journalctl: no kernel messages in the journal of this boot"
        self._journal_cursor = cursor
        return lines, first, False

    def _read_dmesg(self) -> tuple[list[str], bool, bool] | str:
        rc, out, err = self.run(["dmesg"], KERNEL_LOG_TIMEOUT_S)
        if rc != 0:
            said = _last_line(err)
            said = said[len("dmesg: ") :] if said.startswith("dmesg: ") else said
            why = "dmesg: " + (said or f"exit status {rc}")
            try:
                restricted = read_text(self.restrict_path).strip() == "1"
            except OSError:
                restricted = False
            if restricted:
                why += (
                    " (kernel.dmesg_restrict=1: only root or CAP_SYSLOG may read the "
                    "kernel log; journalctl needs the adm or systemd-journal group)"
                )
            return why
        records: list[tuple[float, list[str]]] = []
        for line in out.splitlines():
            stamp = dmesg_stamp(line)
            if stamp is not None:
                records.append((stamp, [line]))
            elif records and line.strip():
                records[-1][1].append(line)
        if out.strip() and not records:
            return "dmesg: no timestamps on its lines (printk.time=0): no cursor can be kept"
        first = self._dmesg_cursor is None
        gap = False
        new: list[str] = []
        if first:
            for _, msg in records:
                new.extend(msg)
        else:
            assert self._dmesg_cursor is not None
            last, seen = self._dmesg_cursor
            gap = bool(records) and records[0][0] > last
            same = 0
            for stamp, msg in records:
                if stamp < last:
                    continue
                if stamp == last:
                    same += 1
                    if same <= seen:
                        continue
                new.extend(msg)
        if records:
            top = records[-1][0]
            n_top = sum(1 for stamp, _ in records if stamp == top)
            self._dmesg_cursor = (top, n_top)
        return new, first, gap

    def _read_file(self) -> tuple[list[str], bool, bool] | str:
        assert self.file is not None
        try:
            with open(self.file, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                first = self._file_offset is None
                start = self._file_offset or 0
                gap = False
                if start > size:  # truncated or replaced: read it again from the start
                    start, first, gap = 0, True, True
                f.seek(start)
                data = f.read()
        except OSError as e:
            return f"file {self.file}: {reason_of(e)}"
        end = data.rfind(b"\n") + 1  # whole lines only; a partial last line waits
        self._file_offset = start + end
        return data[:end].decode("utf-8", "replace").splitlines(), first, gap


# --------------------------------------------------------------------------------------------
# host readings (/proc)


class HostReader:
    """Host fields from ``/proc`` (Linux): CPU %, load, memory, uptime; hostname from socket."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc = proc_root
        self._prev_cpu = self._cpu_times()
        pages = self._swapped_pages()
        self._prev_swap = None if pages is None else (time.monotonic(), pages)
        try:
            self.hostname = os.uname().nodename  # what socket.gethostname() says, on Linux
        except AttributeError:  # no uname (not Linux: no /proc either)
            import socket

            self.hostname = socket.gethostname()

    def _cpu_times(self) -> tuple[int, int] | None:
        """``(idle, total)`` jiffies from the ``cpu`` line of /proc/stat (idle includes iowait;
        guest time is already inside user/nice and is not added twice)."""
        try:
            with open(os.path.join(self.proc, "stat"), "rb") as f:
                line = f.readline().split()
        except OSError:
            return None
        vals = [int(v) for v in line[1:9]]
        if len(vals) < 4:
            return None
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return idle, sum(vals)

    def _swapped_pages(self) -> int | None:
        """Pages swapped in plus out since boot (``/proc/vmstat`` ``pswpin``, ``pswpout``)."""
        try:
            total = 0
            for line in read_text(os.path.join(self.proc, "vmstat")).splitlines():
                key, _, value = line.partition(" ")
                if key in ("pswpin", "pswpout"):
                    total += int(value)
            return total
        except (OSError, ValueError):
            return None

    def read(self) -> dict[str, Any]:
        """The host record without the NVML version fields (the caller adds those)."""
        rec = empty_host()
        for k in ("driver_version", "cuda_version", "nvml_version", "errors"):
            del rec[k]
        rec["hostname"] = self.hostname
        errors: dict[str, str] = {}
        cur = self._cpu_times()
        if cur is None:
            errors["cpu_pct"] = "/proc/stat unreadable"
        elif self._prev_cpu is None or cur[1] <= self._prev_cpu[1]:
            errors["cpu_pct"] = "no interval yet"
        else:
            didle, dtotal = cur[0] - self._prev_cpu[0], cur[1] - self._prev_cpu[1]
            rec["cpu_pct"] = round(100.0 * (1.0 - didle / dtotal), 1)
        if cur is not None:
            self._prev_cpu = cur
        try:
            l1, l5, l15 = os.getloadavg()
            rec["load1"], rec["load5"], rec["load15"] = round(l1, 2), round(l5, 2), round(l15, 2)
        except OSError as e:
            for k in ("load1", "load5", "load15"):
                errors[k] = reason_of(e)
        try:
            info: dict[str, int] = {}
            for line in read_text(os.path.join(self.proc, "meminfo")).splitlines():
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree"):
                    info[key] = int(rest.split()[0])  # kB
            rec["mem_total_mib"] = info["MemTotal"] // 1024
            rec["mem_used_mib"] = (info["MemTotal"] - info["MemAvailable"]) // 1024
            if "SwapTotal" in info and "SwapFree" in info:
                rec["swap_total_mib"] = info["SwapTotal"] // 1024
                rec["swap_used_mib"] = (info["SwapTotal"] - info["SwapFree"]) // 1024
            else:
                for k in ("swap_used_mib", "swap_total_mib"):
                    errors[k] = "no Swap lines in /proc/meminfo"
        except (OSError, KeyError, ValueError, IndexError) as e:
            for k in ("mem_used_mib", "mem_total_mib", "swap_used_mib", "swap_total_mib"):
                if rec[k] is None:
                    errors[k] = "/proc/meminfo: " + reason_of(e)
        swapped = self._swapped_pages()
        if swapped is None:
            errors["swap_pages_per_s"] = "/proc/vmstat unreadable"
        else:
            t = time.monotonic()
            if self._prev_swap is None or t <= self._prev_swap[0]:
                errors["swap_pages_per_s"] = "no interval yet"
            else:
                rate = (swapped - self._prev_swap[1]) / (t - self._prev_swap[0])
                rec["swap_pages_per_s"] = round(max(0.0, rate), 1)
            self._prev_swap = (t, swapped)
        try:
            rec["uptime_s"] = float(read_text(os.path.join(self.proc, "uptime")).split()[0])
        except (OSError, ValueError, IndexError) as e:
            errors["uptime_s"] = "/proc/uptime: " + reason_of(e)
        rec["errors"] = errors
        return rec


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class ProcessInfoReader:
    """User, command and container id of a host PID, from ``/proc/PID/{status,cmdline,cgroup}``.

    Results are cached per PID while the PID stays on a GPU (call :meth:`prune` each sample
    with the PIDs seen), so a long-running job costs three small reads once.
    """

    COMMAND_MAX = 200

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc = proc_root
        self._cache: dict[int, tuple[str | None, str | None, str | None]] = {}
        self._ranks: dict[int, tuple[int | None, int | None]] = {}

    def get(self, pid: int) -> tuple[str | None, str | None, str | None]:
        """``(user, command, container_id)``; each ``None`` when unreadable (another PID
        namespace, the process exited, no permission)."""
        hit = self._cache.get(pid)
        if hit is None:
            hit = (self._user(pid), self._command(pid), self._container(pid))
            self._cache[pid] = hit
        return hit

    def prune(self, live: Iterable[int]) -> None:
        """Forget PIDs no longer on any GPU (so a reused PID is read afresh)."""
        keep = set(live)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]
        for pid in [p for p in self._ranks if p not in keep]:
            del self._ranks[pid]

    def ranks(self, pid: int) -> tuple[int | None, int | None]:
        """``(RANK, LOCAL_RANK)`` that torchrun gave a worker, from ``/proc/PID/environ``;
        ``None`` when unset or unreadable (environ is readable by the process's owner and
        root only)."""
        hit = self._ranks.get(pid)
        if hit is None:
            hit = (None, None)
            try:
                env = dict(
                    kv.split("=", 1)
                    for kv in read_text(f"{self.proc}/{pid}/environ").split("\0")
                    if "=" in kv
                )
                hit = (_int_or_none(env.get("RANK")), _int_or_none(env.get("LOCAL_RANK")))
            except OSError:
                pass
            self._ranks[pid] = hit
        return hit

    def _user(self, pid: int) -> str | None:
        try:
            for line in read_text(f"{self.proc}/{pid}/status").splitlines():
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])  # real uid
                    import pwd  # here: the console imports this file on any platform

                    try:
                        return pwd.getpwuid(uid).pw_name
                    except KeyError:
                        return str(uid)
        except (OSError, ValueError, IndexError):
            return None
        return None

    def _command(self, pid: int) -> str | None:
        try:
            raw = read_text(f"{self.proc}/{pid}/cmdline")
        except OSError:
            return None
        cmd = " ".join(a for a in raw.split("\0") if a)
        if not cmd:
            try:
                cmd = "[" + read_text(f"{self.proc}/{pid}/comm").strip() + "]"
            except OSError:
                return None
        if len(cmd) > self.COMMAND_MAX:
            cmd = cmd[: self.COMMAND_MAX - 3] + "..."
        return cmd

    def _container(self, pid: int) -> str | None:
        """The container id from the cgroup, else the node name that gpuconsole's host
        runtime (``runtime: host``, no container) puts in the process's environment as
        ``GPUCONSOLE_CONTAINER``."""
        try:
            cid = parse_container_id(read_text(f"{self.proc}/{pid}/cgroup"))
        except OSError:
            cid = None
        if cid is not None:
            return cid
        try:
            for kv in read_text(f"{self.proc}/{pid}/environ").split("\0"):
                if kv.startswith(HOST_NODE_ENV + "="):
                    return kv[len(HOST_NODE_ENV) + 1 :] or None
        except OSError:
            pass
        return None


class RankReader:
    """torchrun's worker processes on the host (:data:`RANK_FIELDS`), on a GPU or not, with
    their CPU use: what tells a CPU rank that computes more than the others, or a rank whose
    input pipeline eats the host.

    A process is a worker when its ``/proc/PID/environ`` holds ``RANK`` and
    ``TORCHELASTIC_RUN_ID`` (torchrun's elastic agent sets both); it is read once per PID
    (only for PIDs not seen before). A worker's children with the same ``RANK`` (DataLoader
    workers inherit the environment) are not ranks of their own: their CPU time counts to
    the rank. CPU time is ``utime + stime`` of ``/proc/PID/stat`` (clock ticks).
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        procinfo: ProcessInfoReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc = proc_root
        self.clock = clock
        self.procinfo = procinfo or ProcessInfoReader(proc_root)
        try:
            self.hz = float(os.sysconf("SC_CLK_TCK"))
        except (AttributeError, ValueError, OSError):
            self.hz = 100.0
        #: pid -> (rank, local_rank, container id) for workers, ``None`` for other processes
        self._kind: dict[int, tuple[int, int | None, str | None] | None] = {}
        self._prev: dict[int, tuple[float, int]] = {}  # rank's pid -> (monotonic s, ticks)

    def _classify(self, pid: int) -> tuple[int, int | None, str | None] | None:
        try:
            raw = read_text(f"{self.proc}/{pid}/environ")
        except OSError:
            return None
        if "TORCHELASTIC_RUN_ID=" not in raw:
            return None
        env = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
        rank = _int_or_none(env.get("RANK"))
        if rank is None:
            return None
        return rank, _int_or_none(env.get("LOCAL_RANK")), self.procinfo._container(pid)

    def _stat(self, pid: int) -> tuple[int, int] | None:
        """``(ppid, utime + stime ticks)``; ``None`` once the process is gone."""
        try:
            raw = read_text(f"{self.proc}/{pid}/stat")
        except OSError:
            return None
        rest = raw[raw.rfind(")") + 2 :].split()  # after "pid (comm) "
        try:
            return int(rest[1]), int(rest[11]) + int(rest[12])
        except (IndexError, ValueError):
            return None

    def read(self) -> list[dict[str, Any]] | None:
        """The workers now, lowest rank first; ``None`` when ``/proc`` cannot be listed."""
        try:
            pids = [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        except OSError:
            return None
        live = set(pids)
        for pid in [p for p in self._kind if p not in live]:
            del self._kind[pid]
            self._prev.pop(pid, None)
        workers: dict[int, tuple[int, int | None, str | None]] = {}
        for pid in pids:
            if pid not in self._kind:
                self._kind[pid] = self._classify(pid)
            kind = self._kind[pid]
            if kind is not None:
                workers[pid] = kind
        now = self.clock()
        ticks: dict[int, int] = {}
        parent: dict[int, int] = {}
        for pid in workers:
            st = self._stat(pid)
            if st is not None:
                parent[pid], ticks[pid] = st
        # a worker whose parent is a worker of the same rank is that rank's helper
        top: dict[int, int] = {}
        for pid in ticks:
            root = pid
            for _ in range(8):
                up = parent.get(root)
                if up is None or up not in ticks or workers[up][0] != workers[pid][0]:
                    break
                root = up
            top[pid] = root
        total: dict[int, int] = {}
        for pid, root in top.items():
            total[root] = total.get(root, 0) + ticks[pid]
        out: list[dict[str, Any]] = []
        for pid, t in total.items():
            rank, local_rank, container = workers[pid]
            prev = self._prev.get(pid)
            cpu = None
            if prev is not None and now > prev[0] and t >= prev[1]:
                cpu = round(100.0 * (t - prev[1]) / self.hz / (now - prev[0]), 1)
            self._prev[pid] = (now, t)
            out.append(
                {
                    "pid": pid,
                    "rank": rank,
                    "local_rank": local_rank,
                    "container_id": container,
                    "cpu_pct": cpu,
                }
            )
        for pid in [p for p in self._prev if p not in total]:
            del self._prev[pid]
        out.sort(key=lambda r: (r["rank"], r["container_id"] or "", r["pid"]))
        return out


# --------------------------------------------------------------------------------------------
# the agent


def _bus_suffix(g: GpuState) -> str:
    bus = g.slow.get("pci_bus_id")
    return f" ({bus})" if bus else ""


class GpuState:
    """What the agent keeps about one GPU between samples."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        #: why the handle could not be had (``nvmlDeviceGetHandleByIndex``), or None.
        self.handle_error: str | None = None
        #: set once any call on this GPU said NVML_ERROR_GPU_IS_LOST.
        self.lost_reason: str | None = None
        #: slow fields: values and reasons, refreshed every ``slow_every`` samples.
        self.slow: dict[str, Any] = {"uuid": None, "name": None, "pci_bus_id": None}
        self.slow_errors: dict[str, str] = {}
        #: slow fields NVML answered NVML_ERROR_NOT_SUPPORTED.
        self.slow_unsupported: tuple[str, ...] = ()
        #: fast fields NVML said are not supported or has no function for (skipped until the
        #: next slow refresh): key -> (reason, NVML said NVML_ERROR_NOT_SUPPORTED).
        self.unsupported: dict[str, tuple[str, bool]] = {}
        #: GPM: (previous sample, spare sample, metrics struct), or the reason it is off.
        self.gpm: tuple[Any, Any, Any] | None = None
        self.gpm_error: str | None = None
        #: when the previous GPM sample was taken (the agent's clock, s).
        self.gpm_at = 0.0
        self.xid_registered = False

    @property
    def lost(self) -> bool:
        """Whether the GPU is lost (its handle or a call said so)."""
        return self.lost_reason is not None


class Agent:
    """Reads NVML and /proc and builds samples (schema v1).

    Args:
        nv: the NVML binding: ``nvmlc`` (this folder's ``nvmlc.py``), the pynvml module, or a
            stand-in with the same API (:func:`load_nvml`); ``None`` when none could be imported
            (then ``import_error`` says why).
        interval_s: the sampling interval reported in samples (s).
        slow_every: read the slow fields every this many samples.
        proc_root: where ``/proc`` is (tests point it elsewhere).
        import_error: why no NVML binding could be imported.
        kernel_log: reads the host's NVRM kernel messages into ``kernel_log`` (``None``: not
            read; the command line always gives one unless ``--kernel-log-every 0``).
        clock: monotonic seconds (the GPM interval's).
        boot_fixed: where the first sample's :data:`BOOT_FIXED` fields come from when it knows
            them (``None``: the driver, every time).
    """

    def __init__(
        self,
        nv: Any,
        interval_s: float = 1.0,
        slow_every: int = 10,
        proc_root: str = "/proc",
        import_error: str | None = None,
        kernel_log: KernelLogReader | None = None,
        clock: Callable[[], float] = time.monotonic,
        boot_fixed: BootFixedCache | None = None,
    ) -> None:
        self.kernel_log = kernel_log
        self.boot_fixed = boot_fixed
        self.clock = clock
        self.nv = nv
        self.interval_s = interval_s
        self.slow_every = max(1, slow_every)
        self.proc_root = proc_root
        self.seq = 0
        self.state = "ok"
        self.state_detail: str | None = None
        self.initialized = False
        #: NVML unusable and no nvidia-smi: host samples only (:meth:`without_nvidia_smi`)
        self.smi_missing = False
        self.gpus: list[GpuState] = []
        self.versions: dict[str, Any] = {
            "driver_version": None,
            "cuda_version": None,
            "nvml_version": None,
        }
        self.version_errors: dict[str, str] = {}
        self.event_set: Any = None
        self.xid_error: str | None = None
        #: Xid events asked for (:meth:`arm_xid`)
        self.xid_armed = False
        self._by_handle: dict[int, GpuState] = {}
        self.host = HostReader(proc_root)
        self.procinfo = ProcessInfoReader(proc_root)
        self.rank_reader = RankReader(proc_root, self.procinfo)
        self._v: dict[str, Versioned] = {}
        if nv is None:
            self.state = "nvml_unavailable"
            self.state_detail = f"no NVML binding could be imported: {import_error or 'unknown'}"
            return
        self._v = self._versioned_calls(nv)
        self._init_nvml()

    # -- setup --------------------------------------------------------------------------------

    def _versioned_calls(self, nv: Any) -> dict[str, Versioned]:
        def attr(name: str) -> Callable[..., Any]:
            return lambda *a: getattr(nv, name)(*a)

        def procs_v1(symbol: str) -> Callable[..., Any]:
            return lambda h: processes_v1(nv, symbol, h)

        return {
            "init": Versioned(
                "init",
                [
                    ("flags", lambda: nv.nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS)),
                    ("v1", attr("nvmlInit")),
                ],
            ),
            "memory": Versioned(
                "memory",
                [
                    ("v2", lambda h: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)),
                    ("v1", lambda h: nv.nvmlDeviceGetMemoryInfo(h)),
                ],
            ),
            "temperature": Versioned(
                "temperature",
                [
                    ("V", lambda h: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU)),
                    ("v1", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                ],
            ),
            "clock_reasons": Versioned(
                "clock_reasons",
                [
                    ("event", attr("nvmlDeviceGetCurrentClocksEventReasons")),
                    ("throttle", attr("nvmlDeviceGetCurrentClocksThrottleReasons")),
                ],
            ),
            "compute_procs": Versioned(
                "compute_procs",
                [
                    ("v3", attr("nvmlDeviceGetComputeRunningProcesses_v3")),
                    ("v2", attr("nvmlDeviceGetComputeRunningProcesses_v2")),
                    ("v1", procs_v1("nvmlDeviceGetComputeRunningProcesses")),
                ],
            ),
            "graphics_procs": Versioned(
                "graphics_procs",
                [
                    ("v3", attr("nvmlDeviceGetGraphicsRunningProcesses_v3")),
                    ("v2", attr("nvmlDeviceGetGraphicsRunningProcesses_v2")),
                    ("v1", procs_v1("nvmlDeviceGetGraphicsRunningProcesses")),
                ],
            ),
            "cuda_version": Versioned(
                "cuda_version",
                [
                    ("v2", attr("nvmlSystemGetCudaDriverVersion_v2")),
                    ("v1", attr("nvmlSystemGetCudaDriverVersion")),
                ],
            ),
        }

    def _init_nvml(self) -> None:
        """``nvmlInitWithFlags`` once, then device count, handles and GPM (Xid events are
        registered after the first sample: :meth:`arm_xid`).

        Sets ``state``: ``nvml_unavailable`` (library missing), ``driver_unreachable``,
        ``version_mismatch``, ``error`` (other init failures); ``no_gpus`` is decided per sample.
        """
        try:
            self._v["init"]()
        except OSError as e:
            self._fail_init(
                "nvml_unavailable", f"libnvidia-ml.so.1 could not be loaded: {reason_of(e)}"
            )
            return
        except Exception as e:
            code = nvml_code(e)
            if code == NVML_ERROR_LIBRARY_NOT_FOUND:
                self._fail_init(
                    "nvml_unavailable", f"libnvidia-ml.so.1 could not be loaded ({reason_of(e)})"
                )
            elif code == NVML_ERROR_DRIVER_NOT_LOADED:
                self._fail_init(
                    "driver_unreachable",
                    f"NVML cannot talk to the NVIDIA kernel driver ({reason_of(e)})",
                )
            elif code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                self._fail_init(
                    "version_mismatch",
                    f"NVIDIA driver/library version mismatch ({reason_of(e)}); "
                    "a reboot or driver reload is needed",
                )
            else:
                self._fail_init("error", f"nvmlInit failed: {reason_of(e)}")
            return
        self.initialized = True
        self.state, self.state_detail = "ok", None
        try:
            count = int(self.nv.nvmlDeviceGetCount())
        except Exception as e:
            self.state = "error"
            self.state_detail = f"nvmlDeviceGetCount failed: {reason_of(e)}"
            count = 0
        self.gpus = [GpuState(i) for i in range(count)]
        for g in self.gpus:
            self._get_handle(g)
        self._refresh_slow()
        for g in self.gpus:
            self._setup_gpm(g)
        self.xid_armed = False

    def _fail_init(self, state: str, detail: str) -> None:
        self.state, self.state_detail = state, detail
        self.initialized = False
        if state == "nvml_unavailable" and self.smi_missing:
            self._explain_missing_smi()

    def without_nvidia_smi(self) -> None:
        """NVML cannot be loaded and ``nvidia-smi`` is not on PATH either, so nothing can read
        this host's GPUs: the agent streams host samples (zero GPUs) instead of exiting
        :data:`EXIT_NVML_UNAVAILABLE`, and tries ``nvmlInit`` again every ``slow_every``
        samples (a driver installed meanwhile is picked up).

        State: ``no_driver`` ("no NVIDIA driver: nvidia-smi not found (NVML: <why>)", the
        words the console's nvidia-smi fallback uses), or ``nvml_unavailable`` when the NVIDIA
        kernel module is loaded all the same (``/proc/driver/nvidia/version`` exists: only
        the driver's user-space part is missing)."""
        self.smi_missing = True
        if self.state == "nvml_unavailable":
            self._explain_missing_smi()

    def _explain_missing_smi(self) -> None:
        nvml = self.state_detail or self.state
        if os.path.exists(os.path.join(self.proc_root, NVIDIA_PROC_VERSION)):
            self.state_detail = (
                f"{nvml}; nvidia-smi not found either, although the NVIDIA kernel module is "
                "loaded (/proc/driver/nvidia/version): the driver's user-space part "
                "(libnvidia-ml.so.1, nvidia-smi) is missing"
            )
        else:
            self.state = "no_driver"
            self.state_detail = f"no NVIDIA driver: nvidia-smi not found (NVML: {nvml})"

    def _get_handle(self, g: GpuState) -> None:
        """``nvmlDeviceGetHandleByIndex``; GpuIsLost marks the GPU lost."""
        try:
            g.handle = self.nv.nvmlDeviceGetHandleByIndex(g.index)
        except Exception as e:
            g.handle = None
            if nvml_code(e) == NVML_ERROR_GPU_IS_LOST:
                g.lost_reason = reason_of(e)
                g.handle_error = None
            else:
                g.handle_error = reason_of(e)
            return
        g.handle_error = None
        g.lost_reason = None
        self._by_handle[handle_key(g.handle)] = g

    def _setup_gpm(self, g: GpuState) -> None:
        """GPM on Hopper+: ``nvmlGpmQueryDeviceSupport``, two ``nvmlGpmSampleAlloc`` buffers, a
        ``c_nvmlGpmMetricsGet_t`` reused every sample, and a first ``nvmlGpmSampleGet``: the start
        of the first reading (see :meth:`_gpm`)."""
        if g.handle is None:
            g.gpm_error = g.lost_reason or g.handle_error or "no handle"
            return
        nv = self.nv
        samples: list[Any] = []  # allocated so far: freed again if the set-up fails
        try:
            support = nv.nvmlGpmQueryDeviceSupport(g.handle)
            if not support.isSupportedDevice:
                g.gpm_error = GPM_NOT_SUPPORTED
                return
            samples.append(nv.nvmlGpmSampleAlloc())
            samples.append(nv.nvmlGpmSampleAlloc())
            prev, spare = samples
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(GPM_METRICS)
            for i, (mid, _) in enumerate(GPM_METRICS):
                mg.metrics[i].metricId = mid
            nv.nvmlGpmSampleGet(g.handle, prev)
        except Exception as e:
            self._free_samples(samples)
            g.gpm_error = reason_of(e)
            self._note_lost(g, e)
            return
        g.gpm = (prev, spare, mg)
        g.gpm_at = self.clock()
        g.gpm_error = None

    def arm_xid(self) -> None:
        """Register for Xid events (:meth:`_setup_xid`), once NVML is up; done after the first
        sample, which could not hold any: NVML delivers only the events that come after the
        registration, so registering first only added its cost (the driver's) to the first
        sample's (the kernel log read of the first sample has the Xids from before). The main
        loop calls it once the first sample is out and more will follow; :meth:`sample` calls
        it from the second sample on if nobody did."""
        if self.initialized and not self.xid_armed:
            self.xid_armed = True
            self._setup_xid()

    def _setup_xid(self) -> None:
        """``nvmlEventSetCreate`` (once) and ``nvmlDeviceRegisterEvents(
        nvmlEventTypeXidCriticalError)`` on every GPU with a handle that is not registered yet
        (a GPU that came back after it was lost has a new handle); failures go to
        ``errors["xid"]``."""
        usable = [g for g in self.gpus if g.handle is not None and not g.xid_registered]
        if not usable:
            return
        if self.event_set is None:
            try:
                self.event_set = self.nv.nvmlEventSetCreate()
            except Exception as e:
                self.xid_error = f"nvmlEventSetCreate: {reason_of(e)}"
                return
        self.xid_error = None
        failed: list[str] = []
        for g in usable:
            try:
                self.nv.nvmlDeviceRegisterEvents(g.handle, NVML_EVENT_XID, self.event_set)
                g.xid_registered = True
            except Exception as e:
                failed.append(f"GPU {g.index}: {reason_of(e)}")
        if failed:
            self.xid_error = "Xid events not registered: " + "; ".join(failed)

    # -- per sample ---------------------------------------------------------------------------

    def sample(self) -> dict[str, Any]:
        """One sample (schema v1) of the host and every GPU; advances ``seq``."""
        now = time.time()
        s = empty_sample("nvml", self.seq, round(now, 3), self.interval_s)
        s["state"], s["state_detail"] = self.state, self.state_detail
        slow_tick = self.seq > 0 and self.seq % self.slow_every == 0
        if (
            self.nv is not None
            and not self.initialized
            and (self.state != "nvml_unavailable" or self.smi_missing)
        ):
            if slow_tick:  # driver unreachable / mismatch / absent: try again now and then
                self._init_nvml()
                s["state"], s["state_detail"] = self.state, self.state_detail
        elif self.initialized and slow_tick:
            self._refresh_slow()
        host = self.host.read()
        self._add_versions(host)
        s["host"] = host
        s["ranks"] = self.rank_reader.read()
        if s["ranks"] is None:
            s["errors"]["ranks"] = f"{self.proc_root} cannot be listed"
        if self.initialized:
            if self.seq > 0:
                self.arm_xid()
            self._sample_gpus(s)
        else:
            s["errors"]["processes"] = s["state_detail"] or s["state"]
        self._read_kernel_log(s)
        self.seq += 1
        return s

    def _read_kernel_log(self, s: dict[str, Any]) -> None:
        """New NVRM kernel lines into ``kernel_log`` when a read is due; while no source
        works, every sample says why in ``errors["kernel_log"]``."""
        reader = self.kernel_log
        if reader is None:
            return
        if reader.due():
            s["kernel_log"] = reader.read()
        if reader.error:
            s["errors"]["kernel_log"] = reader.error

    def _add_versions(self, host: dict[str, Any]) -> None:
        errors = host.pop("errors")
        host.update(self.versions)
        if not self.initialized:
            for k in self.versions:
                errors[k] = self.state_detail or self.state
        else:
            errors.update(self.version_errors)
        host["errors"] = errors

    def _refresh_slow(self) -> None:
        """Versions (``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion_v2``,
        ``nvmlSystemGetNVMLVersion``) and each GPU's slow fields; retries lost handles."""
        nv = self.nv
        self.version_errors = {}
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("driver_version", lambda: _text(nv.nvmlSystemGetDriverVersion())),
            ("cuda_version", lambda: format_cuda_version(int(self._v["cuda_version"]()))),
            ("nvml_version", lambda: _text(nv.nvmlSystemGetNVMLVersion())),
        ]
        for key, fn in calls:
            try:
                self.versions[key] = fn()
            except Exception as e:
                self.versions[key] = None
                self.version_errors[key] = reason_of(e)
        if self.boot_fixed is not None and self.seq == 0:
            self.boot_fixed.load(self.versions["driver_version"])
        regained_any = False
        for g in self.gpus:
            regained = False
            if g.handle is None:
                self._get_handle(g)
                if g.handle is None:
                    continue
                regained = self.seq > 0
            g.unsupported.clear()
            self._read_slow(g)
            if regained:
                self._setup_gpm(g)
                regained_any = True
        if regained_any and self.xid_armed:  # its Xid events, on its new handle
            self._setup_xid()
        if self.boot_fixed is not None:
            self.boot_fixed.save()

    def _read_slow(self, g: GpuState) -> None:
        """Name (``nvmlDeviceGetName``), UUID, PCI bus id (``nvmlDeviceGetPciInfo``), enforced
        power limit (mW -> W), the highest clocks, the highest PCIe generation and width
        (``nvmlDeviceGetMaxPcieLinkGeneration``/``Width``), volatile uncorrected ECC total,
        remapped rows pending, persistence mode, current MIG mode. At the start the
        :data:`BOOT_FIXED` ones come from :attr:`boot_fixed` where it knows this GPU."""
        nv, h = self.nv, g.handle
        vals: dict[str, Any] = {}
        errs: dict[str, str] = {}
        unsupported: list[str] = []
        store = self.boot_fixed
        kept: dict[str, int] | None = None
        looked = False

        def mig() -> bool:
            try:
                return bool(nv.nvmlDeviceGetMigMode(h)[0] == 1)  # NVML_DEVICE_MIG_ENABLE
            except Exception as e:
                if nvml_code(e) == NVML_ERROR_NOT_SUPPORTED:
                    return False  # no MIG on this GPU: schema says false
                raise

        for key, fn in (
            ("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h))),
            ("name", lambda: _text(nv.nvmlDeviceGetName(h))),
            ("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId)),
            ("power_limit_w", lambda: watts(nv.nvmlDeviceGetEnforcedPowerLimit(h))),
            # the highest clocks the GPU may run at (boost), MHz
            ("sm_clock_max_mhz", lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))),
            ("mem_clock_max_mhz", lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))),
            # the fastest PCIe link this GPU and this system allow together
            ("pcie_gen_max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
            ("pcie_width_max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
            (
                "ecc_volatile_uncorrected",
                lambda: int(
                    nv.nvmlDeviceGetTotalEccErrors(
                        h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                    )
                ),
            ),
            ("remapped_rows_pending", lambda: bool(nv.nvmlDeviceGetRemappedRows(h)[2])),
            (
                "persistence_mode",
                lambda: nv.nvmlDeviceGetPersistenceMode(h) == nv.NVML_FEATURE_ENABLED,
            ),
            ("mig_mode", mig),
        ):
            if key in BOOT_FIXED and store is not None and self.seq == 0:
                if not looked:  # the UUID and bus id are read by now
                    kept, looked = store.get(vals.get("uuid"), vals.get("pci_bus_id")), True
                if kept is not None:
                    vals[key] = kept[key]
                    continue
            try:
                vals[key] = fn()
            except Exception as e:
                vals[key] = g.slow.get(key) if key in ("uuid", "name", "pci_bus_id") else None
                errs[key] = reason_of(e)
                if nvml_code(e) == NVML_ERROR_NOT_SUPPORTED:
                    unsupported.append(key)
                self._note_lost(g, e)
        if store is not None and kept is None:
            fixed = {k: vals[k] for k in BOOT_FIXED if k not in errs}
            store.put(vals.get("uuid"), vals.get("pci_bus_id"), fixed)
        g.slow, g.slow_errors, g.slow_unsupported = vals, errs, tuple(unsupported)

    def _note_lost(self, g: GpuState, exc: BaseException) -> None:
        if nvml_code(exc) == NVML_ERROR_GPU_IS_LOST:
            g.lost_reason = reason_of(exc)

    def _field(
        self,
        g: GpuState,
        rec: dict[str, Any],
        key: str,
        fn: Callable[[], Any],
        also: tuple[str, ...] = (),
    ) -> None:
        """``rec[key] = fn()`` (with ``also``: ``fn()`` returns a tuple for ``(key, *also)``);
        on failure the keys stay ``None`` and the reason goes to ``rec["errors"]``."""
        keys = (key, *also)
        skip = g.unsupported.get(key)
        if skip is not None:
            for k in keys:
                rec["errors"][k] = skip[0]
            if skip[1]:
                not_supported(rec, *keys)
            return
        try:
            value = fn()
        except Exception as e:
            reason = reason_of(e)
            for k in keys:
                rec["errors"][k] = reason
            code = nvml_code(e)
            if code == NVML_ERROR_NOT_SUPPORTED:
                not_supported(rec, *keys)
            if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                g.unsupported[key] = (reason, code == NVML_ERROR_NOT_SUPPORTED)
            self._note_lost(g, e)
            return
        if also:
            for k, val in zip(keys, value):
                rec[k] = val
        else:
            rec[key] = value

    def _gpu_record(self, g: GpuState) -> dict[str, Any]:
        rec = empty_gpu(g.index)
        for k in ("uuid", "name", "pci_bus_id"):
            rec[k] = g.slow.get(k)
        if g.handle is None:
            rec["lost"] = g.lost
            rec["errors"]["handle"] = g.lost_reason or g.handle_error or "no handle"
            return rec
        nv, h, v = self.nv, g.handle, self._v

        def util() -> tuple[int, int]:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            return int(u.gpu), int(u.memory)

        def memory() -> tuple[int, int]:
            m = v["memory"](h)
            return int(m.used) // MIB, int(m.total) // MIB

        def pstate() -> str:
            p = int(nv.nvmlDeviceGetPerformanceState(h))
            if not 0 <= p <= 15:
                raise ValueError(f"unknown performance state {p}")
            return f"P{p}"

        # fast fields, every sample (units: NVML's, converted where the key says so)
        # nvmlDeviceGetUtilizationRates: % of the last sample period busy (kernel / memory)
        self._field(g, rec, "util_gpu_pct", util, also=("util_mem_pct",))
        # nvmlDeviceGetMemoryInfo_v2 (used excludes driver-reserved memory, as nvidia-smi
        # shows it), else v1: bytes -> MiB
        self._field(g, rec, "mem_used_mib", memory, also=("mem_total_mib",))
        self._field(g, rec, "temp_c", lambda: int(v["temperature"](h)))  # GPU die sensor, C
        self._field(g, rec, "power_w", lambda: watts(nv.nvmlDeviceGetPowerUsage(h)))
        self._field(
            g, rec, "sm_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        )
        self._field(
            g, rec, "mem_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        )
        # the link as trained now (an idle GPU may lower its generation to save power)
        self._field(g, rec, "pcie_gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)))
        self._field(g, rec, "pcie_width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)))
        self._field(g, rec, "fan_pct", lambda: int(nv.nvmlDeviceGetFanSpeed(h)))
        self._field(g, rec, "pstate", pstate)
        self._field(
            g, rec, "throttle_reasons", lambda: decode_clock_reasons(int(v["clock_reasons"](h)))
        )
        # slow fields, cached
        for key in (
            "power_limit_w",
            "sm_clock_max_mhz",
            "mem_clock_max_mhz",
            "pcie_gen_max",
            "pcie_width_max",
            "ecc_volatile_uncorrected",
            "remapped_rows_pending",
            "persistence_mode",
            "mig_mode",
        ):
            rec[key] = g.slow.get(key)
        for key, why in g.slow_errors.items():
            rec["errors"][key] = why
        if g.slow_unsupported:
            not_supported(rec, *g.slow_unsupported)
        self._gpm(g, rec)
        if g.lost:
            rec["lost"] = True
        return rec

    def gpm_wait_s(self) -> float:
        """Seconds until every GPU with GPM has a window of :data:`GPM_MIN_INTERVAL_S` since
        its start sample (0.0 when none has GPM): waited before the first sample, so that it
        carries SM and tensor activity instead of :data:`GPM_FIRST` (``top --once`` on a
        Hopper host shows its load, not ``?``)."""
        now = self.clock()
        waits = [g.gpm_at + GPM_MIN_INTERVAL_S - now for g in self.gpus if g.gpm is not None]
        return max([0.0, *waits])

    def _gpm(self, g: GpuState, rec: dict[str, Any]) -> None:
        """SM activity, SM occupancy, any-tensor activity, DRAM bandwidth (%) between the
        previous ``nvmlGpmSampleGet`` and this one (``nvmlGpmMetricsGet``); ``None`` each,
        with :data:`GPM_FIRST`, when the previous one is less than
        :data:`GPM_MIN_INTERVAL_S` old (the first sample, taken as soon as NVML answers)."""
        if g.gpm is None:
            rec["errors"]["gpm"] = g.gpm_error or "GPM not set up"
            if g.gpm_error == GPM_NOT_SUPPORTED:
                not_supported(rec, "gpm")
            return
        if rec.get("mig_mode"):
            rec["errors"]["gpm"] = "MIG mode: GPM is per GPU instance (not collected)"
            return
        now = self.clock()
        if now - g.gpm_at < GPM_MIN_INTERVAL_S:  # the first sample, at once: no reading yet
            rec["gpm"] = {key: None for _, key in GPM_METRICS}
            rec["errors"]["gpm"] = GPM_FIRST
            return  # the start sample stays: the next reading spans from it
        prev, cur, mg = g.gpm
        nv = self.nv
        try:
            nv.nvmlGpmSampleGet(g.handle, cur)
        except Exception as e:
            rec["errors"]["gpm"] = reason_of(e)
            self._note_lost(g, e)
            return
        g.gpm = (cur, prev, mg)  # this sample is the next one's start
        g.gpm_at = now
        try:
            mg.sample1, mg.sample2 = prev, cur
            nv.nvmlGpmMetricsGet(mg)
        except Exception as e:
            rec["errors"]["gpm"] = reason_of(e)
            self._note_lost(g, e)
            return
        out: dict[str, float | None] = {}
        for i, (_, key) in enumerate(GPM_METRICS):
            m = mg.metrics[i]
            ret = int(m.nvmlReturn)
            if ret != NVML_SUCCESS:
                out[key] = None
                rec["errors"]["gpm." + key] = reason_of(nv.NVMLError(ret))
            else:
                out[key] = _finite(float(m.value))
        rec["gpm"] = out

    def _processes(self, g: GpuState, out: list[dict[str, Any]]) -> str | None:
        """Append GPU ``g``'s compute and graphics processes to ``out``; the reason when the
        compute list could not be read (a graphics list NVML does not support is empty)."""
        lists = []
        try:
            lists.append(("compute", self._v["compute_procs"](g.handle)))
        except Exception as e:
            self._note_lost(g, e)
            return reason_of(e)
        try:
            lists.append(("graphics", self._v["graphics_procs"](g.handle)))
        except Exception as e:
            if nvml_code(e) not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                self._note_lost(g, e)
                return "graphics: " + reason_of(e)
        for kind, procs in lists:
            for p in procs:
                pid = int(p.pid)
                used = p.usedGpuMemory
                user, cmd, cid = self.procinfo.get(pid)
                rank, local_rank = self.procinfo.ranks(pid)
                out.append(
                    {
                        "gpu_index": g.index,
                        "gpu_uuid": g.slow.get("uuid"),
                        "pid": pid,
                        "used_mib": None
                        if used is None or used >= NOT_AVAILABLE_U64
                        else int(used) // MIB,
                        "type": kind,
                        "user": user,
                        "command": cmd,
                        "container_id": cid,
                        "rank": rank,
                        "local_rank": local_rank,
                    }
                )
        return None

    def _xid_events(self, s: dict[str, Any]) -> None:
        """Drain ``nvmlEventSetWait(set, 0)`` until it times out (at most 64 events).

        ``time`` is when the agent drained the event (NVML gives none); ``xid`` is the event's
        ``eventData``; ``pid`` is ``None`` (the v2 event data carries no PID).
        """
        if self.xid_error:
            s["errors"]["xid"] = self.xid_error
        if self.event_set is None or not any(g.xid_registered for g in self.gpus):
            return
        for _ in range(64):
            try:
                data = self.nv.nvmlEventSetWait(self.event_set, 0)
            except Exception as e:
                if nvml_code(e) != NVML_ERROR_TIMEOUT:
                    s["errors"]["xid"] = f"nvmlEventSetWait: {reason_of(e)}"
                return
            if not int(data.eventType) & NVML_EVENT_XID:
                continue
            g = self._by_handle.get(handle_key(data.device))
            xid = int(data.eventData)
            s["xid_events"].append(
                {
                    "time": round(time.time(), 3),
                    "gpu_index": g.index if g else None,
                    "pci_bus_id": g.slow.get("pci_bus_id") if g else None,
                    "xid": xid,
                    "pid": None,
                    "detail": XID_MEANINGS.get(xid),
                }
            )

    def _sample_gpus(self, s: dict[str, Any]) -> None:
        procs: list[dict[str, Any]] = []
        proc_errors: list[str] = []
        readable = 0
        for g in self.gpus:
            rec = self._gpu_record(g)
            if g.handle is not None and not g.lost:
                why = self._processes(g, procs)
                if why is None:
                    readable += 1
                else:
                    rec["errors"]["processes"] = why
                    proc_errors.append(f"GPU {g.index}: {why}")
            if g.lost:
                rec["lost"] = True
                self._drop_handle(g)
            s["gpus"].append(rec)
        self.procinfo.prune(p["pid"] for p in procs)
        live = [g for g in self.gpus if g.handle is not None and not g.lost]
        if proc_errors:
            s["errors"]["processes"] = "; ".join(proc_errors)
        if self.state != "ok":
            s["errors"]["processes"] = self.state_detail or self.state
        s["processes"] = procs if (readable or not live) and self.state == "ok" else None
        self._xid_events(s)
        lost = [g for g in self.gpus if g.lost]
        broken = [g for g in self.gpus if g.handle is None and not g.lost]
        if self.state != "ok":
            pass  # nvmlDeviceGetCount failed: keep its state and detail
        elif not self.gpus:
            s["state"], s["state_detail"] = "no_gpus", "the NVIDIA driver enumerates 0 GPUs"
            # GPUs the driver no longer sees may still hold processes: unknown, not "idle"
            s["processes"] = None
            s["errors"]["processes"] = s["state_detail"]
        elif lost:
            s["state"] = "gpu_lost"
            s["state_detail"] = "; ".join(
                f"GPU {g.index}{_bus_suffix(g)} is lost ({g.lost_reason})" for g in lost
            )
        elif broken:
            s["state"] = "error"
            s["state_detail"] = "; ".join(
                f"GPU {g.index}: nvmlDeviceGetHandleByIndex failed ({g.handle_error})"
                for g in broken
            )

    def _free_samples(self, samples: Iterable[Any]) -> None:
        """``nvmlGpmSampleFree`` each of ``samples`` (errors ignored: a lost GPU's may fail)."""
        for sample in samples:
            try:
                self.nv.nvmlGpmSampleFree(sample)
            except Exception:
                pass

    def _drop_handle(self, g: GpuState) -> None:
        """Forget a lost GPU's handle (its GPM samples freed); the slow refresh asks for it
        again."""
        if g.handle is not None:
            self._by_handle.pop(handle_key(g.handle), None)
        if g.gpm is not None:
            self._free_samples(g.gpm[:2])
        g.handle = None
        g.gpm = None
        g.gpm_error = g.lost_reason
        g.xid_registered = False

    def close(self, release_nvml: bool = True) -> None:
        """Free GPM samples and the event set, ``nvmlShutdown``, close the kernel log (errors
        ignored). ``release_nvml=False``: the process is ending, and the driver frees its
        NVML objects with it; only the kernel log is closed."""
        if self.kernel_log is not None:
            self.kernel_log.close()
        if not self.initialized:
            return
        if not release_nvml:
            self.initialized = False
            return
        nv = self.nv
        for g in self.gpus:
            if g.gpm is not None:
                for smp in g.gpm[:2]:
                    try:
                        nv.nvmlGpmSampleFree(smp)
                    except Exception:
                        pass
                g.gpm = None
        for fn, arg in (("nvmlEventSetFree", self.event_set), ("nvmlShutdown", None)):
            try:
                if fn == "nvmlShutdown":
                    nv.nvmlShutdown()
                elif arg is not None:
                    getattr(nv, fn)(arg)
            except Exception:
                pass
        self.initialized = False


# --------------------------------------------------------------------------------------------
# main loop


#: The NVML bindings :func:`load_nvml` chooses from (``--nvml``).
NVML_BINDINGS = ("auto", "nvmlc", "pynvml")
#: Environment variable choosing the binding when ``--nvml`` is not given (A/B runs).
NVML_BINDING_ENV = "GPUCONSOLE_AGENT_NVML"


def load_pynvml(pynvml_dir: str | None) -> tuple[Any, str | None]:
    """Import ``pynvml`` (from ``pynvml_dir`` first when given, else next to this script).

    Returns:
        ``(module, None)`` or ``(None, reason)``.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    for d in ([pynvml_dir] if pynvml_dir else []) + [here]:
        if d and d not in sys.path:
            sys.path.insert(0, d)
    if pynvml_dir:  # make sure the requested folder wins over the script's own
        sys.path.remove(pynvml_dir)
        sys.path.insert(0, pynvml_dir)
    try:
        return __import__("pynvml"), None
    except Exception as e:
        return None, reason_of(e)


def load_nvml(binding: str = "auto", pynvml_dir: str | None = None) -> tuple[Any, str | None]:
    """The NVML binding the agent reads with: ``nvmlc`` (``nvmlc.py`` next to this script: only
    the calls the agent makes, through ctypes, cheaper to start) or nvidia-ml-py's ``pynvml``
    (:func:`load_pynvml`).

    ``binding``: ``"nvmlc"`` or ``"pynvml"`` forces one; ``"auto"`` takes pynvml when
    ``pynvml_dir`` names a folder for it (an explicit request; the tests' stand-in comes that
    way), else nvmlc, and pynvml when nvmlc cannot be imported (a folder without it).

    Returns:
        ``(module, None)`` or ``(None, reason)`` (both reasons when neither imports).
    """
    if binding == "pynvml" or (binding == "auto" and pynvml_dir):
        return load_pynvml(pynvml_dir)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return __import__("nvmlc"), None
    except Exception as e:
        why = "nvmlc: " + reason_of(e)
    if binding == "nvmlc":
        return None, why
    nv, err = load_pynvml(pynvml_dir)
    return (nv, None) if nv is not None else (None, f"{why}; pynvml: {err}")


class Flag:
    """``threading.Event``'s ``set``/``is_set``/``wait`` over one ``_thread`` lock (the lock is
    held while the flag is down; :meth:`set` releases it for good)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._up = False

    def set(self) -> None:
        """Raise the flag (once; later calls do nothing)."""
        if not self._up:
            self._up = True
            self._lock.release()

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._up

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the flag; ``True`` once it is up."""
        if self._up:
            return True
        if self._lock.acquire(True, max(0.0, timeout)):
            self._lock.release()  # stays up for the next wait
            return True
        return self._up

    def wait_until(self, deadline: float) -> bool:
        """Wait until ``time.monotonic()`` reaches ``deadline`` or the flag is up; ``True``
        once it is up. A lock's timed wait may end early (where the C library times it on the
        wall clock and the clock is stepped): the wait goes on to the deadline."""
        while True:
            left = deadline - time.monotonic()
            if self.wait(max(0.0, left)):
                return True
            if left <= 0 or time.monotonic() >= deadline:
                return False


def watch_stdin(closed: Flag) -> int:
    """Set ``closed`` when stdin reaches end of file (or errors); input itself is ignored.
    Runs in a ``_thread`` thread, which the interpreter does not wait for at exit (as a
    daemon thread); returns its id."""

    def run() -> None:
        try:
            fd = sys.stdin.fileno()
            while os.read(fd, 65536):
                pass
        except (OSError, ValueError, AttributeError):
            pass
        closed.set()

    return _thread.start_new_thread(run, ())


def _string_encoder() -> Callable[[str], str]:
    """JSON's ASCII string encoder: ``_json``'s C function (what ``json.dumps`` uses) without
    importing the ``json`` package (which imports ``re``); ``json``'s own where there is no
    ``_json`` (not CPython)."""
    try:
        from _json import encode_basestring_ascii

        return encode_basestring_ascii
    except ImportError:
        from json.encoder import encode_basestring_ascii as py_encoder

        return py_encoder


_encode_str: Callable[[str], str] | None = None


def dumps(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"), allow_nan=False)``, the same text, for what a
    sample holds (dicts, lists, tuples, strings, ints, floats, booleans, ``None``).

    Raises:
        ValueError: a NaN or infinity (JSON has neither).
        TypeError: any other type, or a dict key that is not a string, number, bool or None.
    """
    global _encode_str
    if _encode_str is None:
        _encode_str = _string_encoder()
    enc = _encode_str
    parts: list[str] = []
    add = parts.append

    def key(k: Any) -> str:
        if isinstance(k, str):
            return enc(k)
        if k is True:
            return '"true"'
        if k is False:
            return '"false"'
        if k is None:
            return '"null"'
        if isinstance(k, int):
            return '"' + int.__repr__(k) + '"'
        if isinstance(k, float):
            return '"' + number(k) + '"'
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")

    def number(f: float) -> str:
        if f != f or f in (math.inf, -math.inf):
            raise ValueError("Out of range float values are not JSON compliant: " + repr(f))
        return float.__repr__(f)

    def value(o: Any) -> None:
        if isinstance(o, str):
            add(enc(o))
        elif o is None:
            add("null")
        elif o is True:
            add("true")
        elif o is False:
            add("false")
        elif isinstance(o, int):
            add(int.__repr__(o))
        elif isinstance(o, float):
            add(number(o))
        elif isinstance(o, dict):
            add("{")
            first = True
            for k, v in o.items():
                if not first:
                    add(",")
                first = False
                add(key(k))
                add(":")
                value(v)
            add("}")
        elif isinstance(o, (list, tuple)):
            add("[")
            for i, v in enumerate(o):
                if i:
                    add(",")
                value(v)
            add("]")
        else:
            raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    value(obj)
    return "".join(parts)


def emit(sample: dict[str, Any], out: Any) -> None:
    """Write one sample as one JSON line (:func:`dumps`) and flush."""
    out.write(dumps(sample) + "\n")
    out.flush()


def safe_sample(agent: Agent) -> dict[str, Any]:
    """``agent.sample()``, or, should it raise (a bug), a sample with state ``error``."""
    try:
        return agent.sample()
    except Exception as e:
        seq = agent.seq
        agent.seq += 1
        s = empty_sample("nvml", seq, round(time.time(), 3), agent.interval_s)
        s["state"], s["state_detail"] = "error", f"agent failure: {reason_of(e)}"
        s["errors"]["processes"] = "agent failure"
        return s


class Options:
    """The command-line options (see the module docstring and :func:`parse_args`)."""

    def __init__(self) -> None:
        self.interval = 1.0
        self.pynvml_dir: str | None = None
        self.nvml = os.environ.get(NVML_BINDING_ENV, "auto")
        self.slow_every = 10
        self.count = 0
        self.no_stdin_watch = False
        self.replay: str | None = None
        self.kernel_log_every = KERNEL_LOG_EVERY_S
        self.kernel_log_file: str | None = None
        self.link_python = False
        self.boot_fixed_cache: str | None = None


#: Options taking a value -> (attribute, type); flags -> attribute (the fast parser's table).
_VALUED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--interval": ("interval", float),
    "--pynvml-dir": ("pynvml_dir", str),
    "--nvml": ("nvml", str),
    "--slow-every": ("slow_every", int),
    "--count": ("count", int),
    "--replay": ("replay", str),
    "--kernel-log-every": ("kernel_log_every", float),
    "--kernel-log-file": ("kernel_log_file", str),
    "--boot-fixed-cache": ("boot_fixed_cache", str),
}
_FLAGS = {"--no-stdin-watch": "no_stdin_watch", "--link-python": "link_python"}


def _parse_fast(argv: Sequence[str]) -> Options | None:
    """The options the console passes (``--opt VALUE``, ``--opt=VALUE``, flags), without
    importing argparse (about 9 ms of start-up); ``None`` for anything else (``--help``, an
    unknown option, a bad value), which :func:`parse_args` leaves to argparse."""
    o = Options()
    it = iter(argv)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in _FLAGS and not eq:
            setattr(o, _FLAGS[name], True)
            continue
        if name not in _VALUED:
            return None
        if not eq:
            nxt = next(it, None)
            if nxt is None:
                return None
            value = nxt
        attr, kind = _VALUED[name]
        try:
            setattr(o, attr, kind(value))
        except ValueError:
            return None
    if not o.interval > 0 or o.kernel_log_every < 0 or o.nvml not in NVML_BINDINGS:
        return None
    return o


def parse_args(argv: Sequence[str] | None) -> Options:
    """Command-line options (see the module docstring): parsed by hand when they are the
    console's (:func:`_parse_fast`), else by argparse, which prints help or the mistake and
    exits with status 2."""
    if argv is None:
        argv = sys.argv[1:]
    fast = _parse_fast(argv)
    if fast is not None:
        return fast
    import argparse

    p = argparse.ArgumentParser(
        prog="agent.py", description="gpuconsole host agent: NVML telemetry as JSON lines"
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--pynvml-dir", default=None, help="folder holding pynvml.py")
    p.add_argument(
        "--nvml",
        choices=NVML_BINDINGS,
        default=os.environ.get(NVML_BINDING_ENV, "auto"),
        help="NVML binding: nvmlc.py next to this file, or nvidia-ml-py's pynvml; auto (the "
        f"default, or ${NVML_BINDING_ENV}): pynvml when --pynvml-dir is given, else nvmlc, "
        "pynvml when nvmlc is missing",
    )
    p.add_argument(
        "--slow-every", type=int, default=10, help="read slow fields every N samples (default 10)"
    )
    p.add_argument("--count", type=int, default=0, help="exit after N samples (0: run on)")
    p.add_argument("--no-stdin-watch", action="store_true", help="do not exit when stdin closes")
    p.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="emit the samples of a trace (JSON lines of samples or of recording "
        "lines) in a loop, re-stamped with this host's time, instead of NVML",
    )
    p.add_argument(
        "--kernel-log-every",
        type=float,
        default=KERNEL_LOG_EVERY_S,
        help="seconds between kernel log (NVRM/Xid) reads; 0: do not read it",
    )
    p.add_argument(
        "--link-python",
        action="store_true",
        help="after the first sample, link this interpreter as 'py' next to this "
        "file (the console starts that link next time: no PATH shim)",
    )
    p.add_argument(
        "--boot-fixed-cache",
        default=None,
        metavar="FILE",
        help="keep each GPU's highest clocks and PCIe link in FILE between runs (valid for "
        "one boot and driver version): a start does not ask the driver for them again",
    )
    # tests only: a file stands in for the kernel log (hosts without an NVIDIA driver)
    p.add_argument("--kernel-log-file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.interval > 0:
        p.error("--interval must be > 0")
    if args.kernel_log_every < 0:
        p.error("--kernel-log-every must be >= 0")
    o = Options()
    o.__dict__.update(vars(args))
    return o


#: The interpreter link :func:`link_python` leaves next to this file.
PYTHON_LINK = "py"


def link_python() -> None:
    """Link this interpreter (its real path) as :data:`PYTHON_LINK` next to this file, so the
    console's next start runs it directly instead of the ``python3`` found on PATH (which may
    be a shim such as pyenv's: a shell script starting several processes). Best effort:
    anything that fails leaves the console on ``python3``."""
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.realpath(sys.executable or "")
    if not exe or not os.access(exe, os.X_OK):
        return
    link = os.path.join(here, PYTHON_LINK)
    tmp = f"{link}.{os.getpid()}"
    try:
        os.symlink(exe, tmp)
        os.replace(tmp, link)  # atomic: a concurrent start sees the old link or the new
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_trace(path: str) -> list[dict[str, Any]]:
    """The samples of a trace file: JSON lines of samples, or recording lines
    (``{"host", "rx", "sample"}``)."""
    import json  # replays only

    samples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            samples.append(rec["sample"] if "sample" in rec else rec)
    if not samples:
        raise ValueError(path + ": no samples")
    return samples


def replay(
    path: str,
    interval: float,
    count: int,
    closed: Flag,
    after_first: Callable[[], None] | None = None,
) -> int:
    """Emit a trace's samples in a loop every ``interval`` s with fresh ``seq``/``host_time``
    (benchmarks and demos: a console sees what a real host would send); ``after_first`` is
    called once the first sample is out."""
    samples = load_trace(path)
    seq = 0
    next_t = time.monotonic()
    while True:
        if closed.wait_until(next_t):
            return 0
        s = dict(samples[seq % len(samples)])
        seq += 1
        s["seq"] = seq
        s["host_time"] = round(time.time(), 3)
        s["interval_s"] = interval
        emit(s, sys.stdout)
        if seq == 1 and after_first is not None:
            after_first()
        if count and seq >= count:
            return 0
        next_t += interval


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Sample every ``--interval`` s until stdin closes; see the module docstring.

    ``exiting``: the process ends as this returns (:func:`run`), so NVML is not shut down
    and its GPM samples and event set are not freed one by one: the driver frees a process's
    NVML objects when its device files close."""
    args = parse_args(argv)
    if args.replay:
        closed_r = Flag()
        if not args.no_stdin_watch:
            watch_stdin(closed_r)
        try:
            return replay(
                args.replay,
                args.interval,
                args.count,
                closed_r,
                link_python if args.link_python else None,
            )
        except BrokenPipeError:
            return 0
    nv, import_error = load_nvml(args.nvml, args.pynvml_dir)
    reader = (
        KernelLogReader(args.kernel_log_every, file=args.kernel_log_file)
        if args.kernel_log_every > 0
        else None
    )
    fixed = BootFixedCache(args.boot_fixed_cache) if args.boot_fixed_cache else None
    agent = Agent(
        nv,
        args.interval,
        args.slow_every,
        import_error=import_error,
        kernel_log=reader,
        boot_fixed=fixed,
    )
    closed = Flag()
    if not args.no_stdin_watch:
        watch_stdin(closed)
    out = sys.stdout
    try:
        if agent.state == "nvml_unavailable":
            import shutil  # only here: start-up cost

            if shutil.which("nvidia-smi") is not None:  # the console's fallback may read it
                emit(agent.sample(), out)
                return EXIT_NVML_UNAVAILABLE
            agent.without_nvidia_smi()  # nothing else can: a host without GPUs, streaming
        # the first sample goes out as soon as NVML answers (on a GPU with GPM, once its
        # 100 ms window is there), so a console sees the whole fleet at once (its CPU % is
        # null: no window yet); then one every interval
        wait = agent.gpm_wait_s()
        next_t = time.monotonic() + (wait + 0.005 if wait > 0 else 0.0)
        while True:
            if closed.wait_until(next_t):
                return 0
            emit(safe_sample(agent), out)
            if agent.seq == 1 and args.link_python:
                link_python()
            if args.count and agent.seq >= args.count:
                return 0
            if agent.seq == 1:
                agent.arm_xid()  # the first sample is out: Xid events from now on
            next_t += args.interval
            now = time.monotonic()
            if next_t < now:  # fell behind (suspended, slow NVML): skip, don't burst
                next_t = now + args.interval
    except BrokenPipeError:
        try:  # the reader is gone; keep Python from complaining at exit
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        agent.close(release_nvml=not exiting)


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """:func:`main`, then end the process at once with its exit code: stdout and stderr are
    flushed, and ``os._exit`` skips the interpreter's finalization (module teardown, a last
    garbage collection), which here is all cost and no effect (the console's start command,
    ``remote/telemetry/stream.py``)."""
    code = main(argv, exiting=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader is gone: nothing left to deliver
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
