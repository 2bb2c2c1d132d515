"""The telemetry sample (schema version 1), typed: one record per host, per interval.

Produced by the host agent (``remote/agent/agent.py``, NVML, ``source: "nvml"``) and by the
nvidia-smi fallback (``remote/telemetry/smi.py``, ``source: "nvidia-smi"``); consumed by
``console/fleet``. On the wire it is one JSON object per line; in the console it is the same
object typed as :class:`Sample` (TypedDicts: the record *is* the JSON object, no conversion).

Where the vocabulary lives: the agent runs on hosts as a single stdlib-only file (only it and
``pynvml.py`` are uploaded), so it cannot import this module there. The names and keys are
therefore defined once, in the agent file (its "record vocabulary" block: host states,
clock-event reasons and their bits, field names, record builders), and this module imports
them from ``remote.agent.agent`` and adds the static types. The ``Literal`` types below repeat
the vocabularies for mypy; ``tests/unit/test_schema.py`` checks they equal the agent's tuples.

Unknown is ``None`` (JSON ``null``), never 0: a reading NVML/nvidia-smi does not support or
that failed is ``None`` and its reason is kept in the record's ``errors`` map (field name ->
reason). Faces show it as ``?``, except where the GPU does not have the reading at all: those
keys are also listed in the GPU's ``unsupported`` (NVML answered ``NVML_ERROR_NOT_SUPPORTED``;
nvidia-smi printed ``[N/A]`` / ``[Not Supported]``; ``fan_pct`` on a fanless SXM H200), and
faces show them as ``n/a`` (not applicable), not as unknown. Recordings made before the key
existed get it from their ``errors`` reasons (:data:`NOT_SUPPORTED_REASONS`). Units are in
the key names: ``_pct`` percent (0-100), ``_mib`` MiB, ``_c`` degrees C, ``_w`` W, ``_mhz``
MHz, ``_s`` seconds.

``processes`` is ``None`` when the list could not be read (never reported as "no
processes"). ``mig_mode``: ``False`` also when the GPU does not support MIG (nvidia-smi
``[N/A]``). ``pid`` is the host PID; ``container_id`` (64 hex) comes from ``/proc/PID/cgroup``;
``rank`` and ``local_rank`` are the ``RANK``/``LOCAL_RANK`` torchrun set for the worker
(``/proc/PID/environ``; always ``None`` from nvidia-smi). ``throttle_reasons`` lists the
names of :data:`CLOCK_EVENT_REASONS` (bits without a name as ``"0x..."``).

``kernel_log`` carries new ``NVRM:`` kernel lines (Xids) when the agent read them this sample
(``None`` otherwise, from nvidia-smi, and in recordings made before it existed: still schema
1, :func:`read_sample` adds it as ``None``); ``errors["kernel_log"]`` says why while the host's
kernel log cannot be read (``kernel.dmesg_restrict``, no journal access).

Reading: :func:`read_sample` turns any decoded JSON line (a live stream's, a recording's) into
a :class:`Sample`: it checks the schema version and normalises what older writers spelled
otherwise (keys they did not write are added as unknown, the nvidia-smi spellings of throttle
reasons become the names above).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict, cast

from remote.agent.agent import (
    CLOCK_EVENT_REASONS,
    GPM_METRICS,
    GPU_FIELDS,
    GPU_IDENTITY,
    HOST_FIELDS,
    HOST_STATES,
    IDLE_REASON,
    KERNEL_LOG_FIELDS,
    KERNEL_LOG_SOURCES,
    PROCESS_FIELDS,
    PROCESS_TYPES,
    RANK_FIELDS,
    SCHEMA_VERSION,
    SLOWDOWN_REASONS,
    SOURCES,
    THROTTLE_REASON_ALIASES,
    UNSUPPORTED_KEY,
    XID_FIELDS,
    decode_clock_reasons,
)
from remote.agent.agent import empty_gpu as _empty_gpu
from remote.agent.agent import empty_host as _empty_host
from remote.agent.agent import empty_sample as _empty_sample
from remote.agent.agent import not_supported as _not_supported

#: ``state``: see :data:`HOST_STATES` (the agent's comments say what each means).
HostState = Literal[
    "ok",
    "no_driver",
    "nvml_unavailable",
    "driver_unreachable",
    "version_mismatch",
    "no_gpus",
    "gpu_lost",
    "error",
]
#: ``source``.
Source = Literal["nvml", "nvidia-smi"]
#: A GPU reading's key (:data:`GPU_FIELDS`): what ``unsupported`` lists.
GpuField = Literal[
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
]
#: ``processes[].type``.
ProcessType = Literal["compute", "graphics"]
#: ``kernel_log.source`` (``file``: a test's stand-in for the kernel log).
KernelLogSource = Literal["kmsg", "journalctl", "dmesg", "file"]

#: States in which the driver did not answer: the GPU list of the sample cannot be trusted.
DRIVER_DOWN_STATES: frozenset[str] = frozenset(
    {"no_driver", "nvml_unavailable", "driver_unreachable", "version_mismatch"}
)
#: States in which the GPUs that are listed can be used (a lost GPU is marked ``lost``).
USABLE_STATES: frozenset[str] = frozenset({"ok", "gpu_lost"})
#: Clock-event reason names, in bit order.
THROTTLE_REASONS: tuple[str, ...] = tuple(name for _, name in CLOCK_EVENT_REASONS)
#: GPM keys (all %), in record order.
GPM_KEYS: tuple[str, ...] = tuple(key for _, key in GPM_METRICS)


class GpmRecord(TypedDict):
    """NVML GPM metrics over the last interval (%), each ``None`` when NVML had no value."""

    sm_activity_pct: float | None
    sm_occupancy_pct: float | None
    tensor_activity_pct: float | None
    dram_bw_util_pct: float | None


class GpuRecord(TypedDict):
    """One GPU. ``index`` is ``None`` only for a GPU known by its PCI bus id alone (a failure
    message named it). Readings are ``None`` when unknown (reason in ``errors``)."""

    index: int | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None  # "00000000:3D:00.0"
    lost: bool
    util_gpu_pct: int | None  # % of the last sample period a kernel ran
    util_mem_pct: int | None  # % of the period memory was read or written
    mem_used_mib: int | None  # MiB (driver-reserved memory excluded, as nvidia-smi)
    mem_total_mib: int | None  # MiB
    temp_c: int | None  # degrees C, GPU die
    power_w: float | None  # W, 2 decimals
    power_limit_w: float | None  # W, enforced limit, 2 decimals
    sm_clock_mhz: int | None  # MHz
    mem_clock_mhz: int | None  # MHz
    sm_clock_max_mhz: int | None  # MHz, the highest SM clock (nvmlDeviceGetMaxClockInfo)
    mem_clock_max_mhz: int | None  # MHz, the highest memory clock
    pcie_gen: int | None  # PCIe generation the link runs at now (idle GPUs may drop it)
    pcie_gen_max: int | None  # the highest generation this GPU and system allow
    pcie_width: int | None  # PCIe lanes the link runs with now
    pcie_width_max: int | None  # the most lanes this GPU and system allow
    fan_pct: int | None  # % of maximum speed (None on fanless SXM parts)
    pstate: str | None  # "P0".."P15"
    throttle_reasons: list[str] | None  # THROTTLE_REASONS names, gpu_idle included
    ecc_volatile_uncorrected: int | None  # errors since the driver loaded
    remapped_rows_pending: bool | None
    persistence_mode: bool | None
    mig_mode: bool | None  # False also when the GPU has no MIG
    gpm: GpmRecord | None
    unsupported: list[GpuField]  # readings the GPU does not have (NVML_ERROR_NOT_SUPPORTED)
    errors: dict[str, str]  # field -> reason it is None


class HostRecord(TypedDict):
    """The host (``/proc``, NVML versions); the nvidia-smi fallback knows the driver only."""

    hostname: str | None
    cpu_pct: float | None  # %, since the previous sample
    load1: float | None
    load5: float | None
    load15: float | None
    mem_used_mib: int | None  # MiB (MemTotal - MemAvailable)
    mem_total_mib: int | None  # MiB
    swap_used_mib: int | None  # MiB (SwapTotal - SwapFree)
    swap_total_mib: int | None  # MiB
    swap_pages_per_s: float | None  # pages swapped in + out per s over the last interval
    uptime_s: float | None  # s
    driver_version: str | None  # "580.159.04"
    cuda_version: str | None  # "13.0"
    nvml_version: str | None
    errors: dict[str, str]


class ProcessRecord(TypedDict):
    """A process on a GPU. ``user``, ``command``, ``container_id``, ``rank``, ``local_rank``
    are ``None`` when unreadable (and always from nvidia-smi)."""

    gpu_index: int | None
    gpu_uuid: str | None
    pid: int  # host PID
    used_mib: int | None  # MiB; None under MIG / when NVML has no value
    type: ProcessType
    user: str | None
    command: str | None
    container_id: str | None  # 64 hex
    rank: int | None
    local_rank: int | None


class RankRecord(TypedDict):
    """A torchrun worker process on the host (``RankReader`` in the agent), on a GPU or not."""

    pid: int  # host PID
    rank: int  # RANK
    local_rank: int | None  # LOCAL_RANK
    container_id: str | None  # 64 hex, or a host-runtime node's name
    cpu_pct: float | None  # CPU over the last interval, % of one core (its helpers included)


class XidRecord(TypedDict):
    """An Xid (NVIDIA driver error) event."""

    time: float | None  # Unix s
    gpu_index: int | None
    pci_bus_id: str | None
    xid: int
    pid: int | None
    detail: str | None


class KernelLogRecord(TypedDict):
    """New NVIDIA kernel messages (``NVRM:`` lines, Xids) the agent read since the previous
    read (``KernelLogReader`` in the agent; parsed console-side by
    ``faults.scan_kernel_log``)."""

    source: KernelLogSource
    lines: list[str]  # as the source printed them (journalctl short-monotonic; dmesg, kmsg)
    since_boot: bool  # the first read of this source: every NVRM line of the boot so far
    dropped: int  # NVRM lines left out (more than the agent's KERNEL_LOG_MAX_LINES)
    gap: bool  # lines may be missing before these (ring buffer wrapped, file truncated)


class Sample(TypedDict):
    """One sample of one host."""

    schema: int  # SCHEMA_VERSION
    type: Literal["sample"]
    source: Source
    seq: int
    host_time: float  # Unix s, the host's clock
    interval_s: float
    state: HostState
    state_detail: str | None  # a person's sentence when state != "ok"
    host: HostRecord
    gpus: list[GpuRecord]
    processes: list[ProcessRecord] | None  # None: unknown (never "no processes")
    xid_events: list[XidRecord]
    errors: dict[str, str]  # "processes", "xid", "gpus", "kernel_log" -> reason
    kernel_log: KernelLogRecord | None  # None: not read this sample (reason in errors if any)
    ranks: list[RankRecord] | None  # None: not read (nvidia-smi, older recordings)


def empty_host() -> HostRecord:
    """A host record with every reading unknown (``None``)."""
    return cast(HostRecord, _empty_host())


def empty_gpu(index: int | None) -> GpuRecord:
    """A GPU record with every reading unknown (``None``), not lost."""
    return cast(GpuRecord, _empty_gpu(index))


def empty_sample(source: Source, seq: int, host_time: float, interval_s: float) -> Sample:
    """A sample with state ``ok``, an unknown host, no GPUs and an unknown process list (fill
    in ``host``, ``gpus``, ...)."""
    return cast(Sample, _empty_sample(source, seq, host_time, interval_s))


#: ``errors`` reasons that say "not supported" (NVML's ``nvmlErrorString`` of
#: NVML_ERROR_NOT_SUPPORTED, nvidia-smi's tokens): how :func:`read_sample` fills
#: ``unsupported`` for a record written before that key.
NOT_SUPPORTED_REASONS: frozenset[str] = frozenset(
    {
        "Not Supported",
        "nvidia-smi: [N/A]",
        "nvidia-smi: [Not Supported]",
        "nvidia-smi: N/A",
        "nvidia-smi: Not Supported",
    }
)


def mark_not_supported(gpu: GpuRecord, *keys: GpuField) -> None:
    """Add ``keys`` to a GPU record's ``unsupported`` (kept in :data:`GPU_FIELDS` order)."""
    _not_supported(cast(dict[str, Any], gpu), *keys)


def throttle_reasons(mask: int) -> list[str]:
    """The ``throttle_reasons`` of a clock-event mask (NVML's value or nvidia-smi's
    ``clocks_event_reasons.active``), in bit order; bits without a name as ``"0x..."``."""
    return decode_clock_reasons(mask)


def normalize_throttle_reasons(names: Iterable[str]) -> list[str]:
    """Reason names as this schema spells them (nvidia-smi's ``sw_thermal_slowdown`` ->
    ``sw_thermal``...), in bit order, each once; names it does not know are kept, last."""
    canon = [THROTTLE_REASON_ALIASES.get(str(n), str(n)) for n in names]
    known = [n for n in THROTTLE_REASONS if n in canon]
    rest = [n for n in dict.fromkeys(canon) if n not in THROTTLE_REASONS]
    rest.sort(key=lambda n: (0, int(n, 16)) if n.startswith("0x") and _is_hex(n[2:]) else (1, 0))
    return known + rest


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return bool(text)


def is_limit(reason: str) -> bool:
    """Whether a reason holds a working GPU's clocks down (every reason but ``gpu_idle``)."""
    return reason != IDLE_REASON


def is_slowdown(reason: str) -> bool:
    """Whether a reason is a thermal or hardware slowdown (:data:`SLOWDOWN_REASONS`)."""
    return reason in SLOWDOWN_REASONS


def _fill(rec: dict[str, Any], keys: Iterable[str], errors: bool) -> bool:
    """Add the missing ``keys`` as ``None`` (and ``errors``); whether any was missing."""
    added = False
    for k in keys:
        if k not in rec:
            rec[k] = None
            added = True
    if errors and not isinstance(rec.get("errors"), dict):
        rec["errors"] = {}
    return added


#: ``errors`` reason of a reading :func:`read_sample` added to a record written before it
#: existed (a recording's ``sm_clock_max_mhz``...): unknown, with why.
NOT_RECORDED = "not in the record (written before this field existed)"

#: A GPU record's keys in record order (what :func:`read_sample` restores for an older
#: record: keys added later sit in the middle).
_GPU_ORDER: tuple[str, ...] = (*GPU_IDENTITY, *GPU_FIELDS, UNSUPPORTED_KEY, "errors")
_HOST_ORDER: tuple[str, ...] = (*HOST_FIELDS, "errors")
#: Host readings added to schema 1 after its first recordings (a record without them was
#: written before they existed: unknown with :data:`NOT_RECORDED`).
HOST_FIELDS_ADDED: tuple[str, ...] = ("swap_used_mib", "swap_total_mib", "swap_pages_per_s")


def read_sample(obj: Mapping[str, Any] | Any) -> Sample:
    """A decoded JSON sample as a :class:`Sample`, normalised in place.

    Adds keys an older writer did not write as unknown (``None``; ``rank``/``local_rank`` of
    processes, host readings the nvidia-smi fallback had no key for), spells throttle reasons
    as :data:`THROTTLE_REASONS` (recordings of the nvidia-smi fallback before the names were
    shared wrote ``sw_thermal_slowdown``...), and leaves every known value as it is. Cheap on a
    record that is already complete (a few dict lookups per GPU).

    Raises:
        ValueError: ``obj`` is not a schema-1 sample (not a dict, another ``schema`` or
            ``type``, or ``gpus`` / ``state`` missing); the message names the field.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"a sample must be a JSON object, not {type(obj).__name__}")
    if obj.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"field `schema`: {obj.get('schema')!r}, expected {SCHEMA_VERSION}")
    if obj.get("type") != "sample":
        raise ValueError(f"field `type`: {obj.get('type')!r}, expected 'sample'")
    if obj.get("state") not in HOST_STATES:
        raise ValueError(
            f"field `state`: {obj.get('state')!r}, expected one of {', '.join(HOST_STATES)}"
        )
    if not isinstance(obj.get("gpus"), list):
        raise ValueError("field `gpus`: missing or not a list")
    if obj.get("source") not in SOURCES:
        raise ValueError(
            f"field `source`: {obj.get('source')!r}, expected one of {', '.join(SOURCES)}"
        )
    _fill(obj, ("seq", "host_time", "interval_s", "state_detail", "processes"), False)
    if not isinstance(obj.get("errors"), dict):
        obj["errors"] = {}
    if not isinstance(obj.get("xid_events"), list):
        obj["xid_events"] = []
    host = obj.get("host")
    if not isinstance(host, dict):
        host = obj["host"] = {}
    if not isinstance(host.get("errors"), dict):
        host["errors"] = {}
    if any(k not in host for k in HOST_FIELDS):  # readings added since: unknown, in order
        for k in HOST_FIELDS:
            if k not in host:
                host[k] = None
                if k in HOST_FIELDS_ADDED:
                    host["errors"].setdefault(k, NOT_RECORDED)
        for k in [*HOST_FIELDS, "errors", *(k for k in host if k not in _HOST_ORDER)]:
            if k in host:
                host[k] = host.pop(k)
    for g in obj["gpus"]:
        _fill(g, GPU_IDENTITY, False)
        if g["lost"] is None:
            g["lost"] = False
        _fill(g, (), True)
        older = False
        for k in GPU_FIELDS:  # readings added since the record was written: unknown, why
            if k not in g:
                g[k] = None
                g["errors"].setdefault(k, NOT_RECORDED)
                older = True
        if not isinstance(g.get(UNSUPPORTED_KEY), list):  # written before the key existed
            errs = g["errors"]
            g[UNSUPPORTED_KEY] = [
                k for k in GPU_FIELDS if g[k] is None and errs.get(k) in NOT_SUPPORTED_REASONS
            ]
            older = True
        if older:  # the keys in record order, in place (other keys a writer added go last)
            for k in [*_GPU_ORDER, *(k for k in g if k not in _GPU_ORDER)]:
                g[k] = g.pop(k)
        reasons = g["throttle_reasons"]
        if reasons is not None and any(r not in _CANONICAL for r in reasons):
            g["throttle_reasons"] = normalize_throttle_reasons(reasons)
        gpm = g["gpm"]
        if isinstance(gpm, dict):
            _fill(gpm, GPM_KEYS, False)
    for p in obj["processes"] or ():
        _fill(p, PROCESS_FIELDS, False)
    for x in obj["xid_events"]:
        _fill(x, XID_FIELDS, False)
    kl = obj.get("kernel_log")  # absent before the kernel log was read: nothing was read
    if not isinstance(kl, dict) or not isinstance(kl.get("lines"), list):
        obj["kernel_log"] = None
    else:
        kl.setdefault("source", None)
        kl.setdefault("since_boot", False)
        kl.setdefault("dropped", 0)
        kl.setdefault("gap", False)
    ranks = obj.get("ranks")  # absent before the agent listed torchrun's workers
    if ranks is None or not isinstance(ranks, list):
        obj.pop("ranks", None)
        obj["ranks"] = None
    else:
        for r in ranks:
            _fill(r, RANK_FIELDS, False)
    return cast(Sample, obj)


_CANONICAL = frozenset(THROTTLE_REASONS)

__all__ = [
    "CLOCK_EVENT_REASONS",
    "DRIVER_DOWN_STATES",
    "GPM_KEYS",
    "GPU_FIELDS",
    "GPU_IDENTITY",
    "HOST_FIELDS",
    "HOST_STATES",
    "IDLE_REASON",
    "KERNEL_LOG_FIELDS",
    "KERNEL_LOG_SOURCES",
    "NOT_RECORDED",
    "NOT_SUPPORTED_REASONS",
    "PROCESS_FIELDS",
    "PROCESS_TYPES",
    "SCHEMA_VERSION",
    "SLOWDOWN_REASONS",
    "SOURCES",
    "THROTTLE_REASONS",
    "THROTTLE_REASON_ALIASES",
    "UNSUPPORTED_KEY",
    "USABLE_STATES",
    "XID_FIELDS",
    "GpmRecord",
    "GpuField",
    "GpuRecord",
    "HostRecord",
    "HostState",
    "KernelLogRecord",
    "KernelLogSource",
    "ProcessRecord",
    "ProcessType",
    "Sample",
    "Source",
    "XidRecord",
    "empty_gpu",
    "empty_host",
    "empty_sample",
    "is_limit",
    "is_slowdown",
    "mark_not_supported",
    "normalize_throttle_reasons",
    "read_sample",
    "throttle_reasons",
]
