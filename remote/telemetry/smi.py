"""The nvidia-smi fallback: telemetry samples from ``nvidia-smi --query-gpu`` CSV output.

Used when a host has no usable ``python3`` or NVML binding for the agent. gpuconsole runs::

    nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits -lms <interval>
    nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits

and turns the rows into schema-v1 samples (``remote/telemetry/schema.py``, source
``"nvidia-smi"``). Format facts this module relies on (nvidia-smi, all driver branches seen):

* values are separated by ``", "``; a value never contains a comma but may contain spaces (GPU
  names), so rows are split on commas only;
* with ``nounits`` numbers are bare; without it they carry a unit after a space (``53 %``,
  ``123.00 W``, ``1746 MHz``, ``2004 MiB``; temperatures have none);
* "no value" is printed as a bracketed reason (``[N/A]``, ``[Not Supported]``,
  ``[Unknown Error]``, ``[Requested functionality has been deprecated]``,
  ``[Insufficient Permissions]``, ``[GPU requires reset]``) or, by some fields/drivers, bare
  (``N/A``, ``ERR!``): all are ``None`` with the reason kept, never 0;
* ``mig.mode.current`` is ``Enabled`` / ``Disabled``, or ``[N/A]`` on GPUs without MIG;
* ``clocks_event_reasons.active`` (``clocks_throttle_reasons.active`` before driver R535) is a
  hex bitmask of NVML's ``nvmlClocksEventReason*`` bits, decoded with the agent's own table
  (``schema.throttle_reasons``), so both paths name the reasons alike;
* when nvidia-smi cannot run at all it prints one of a few messages instead of rows
  (:func:`classify_smi_failure` maps them to host states).

Units in the sample: percent, MiB, degrees C, W, MHz (see the schema's key suffixes).
The records are :class:`~remote.telemetry.schema.Sample` s, identical to the agent's for the
same GPU state except where nvidia-smi cannot know a value (:data:`SMI_UNKNOWN_GPU_FIELDS`,
:data:`SMI_UNKNOWN_PROCESS_FIELDS`, the host readings but the driver version): those are
``None`` with the reason in ``errors``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from remote.telemetry.faults import (
    GpuHandleError,
    HostFault,
    parse_plugin_discovery,
    pci_key,
)
from remote.telemetry.schema import (
    GPU_FIELDS,
    HOST_FIELDS,
    GpuField,
    GpuRecord,
    HostState,
    ProcessRecord,
    Sample,
    Source,
    empty_gpu,
    empty_sample,
    mark_not_supported,
    throttle_reasons,
)

SOURCE: Source = "nvidia-smi"

#: GPU readings nvidia-smi's ``--query-gpu`` does not give (always ``None``, reason kept).
SMI_UNKNOWN_GPU_FIELDS: tuple[str, ...] = (
    "remapped_rows_pending",
    "gpm",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
)
#: Process keys ``--query-compute-apps`` does not give (always ``None``); every listed process
#: is of ``type`` ``compute``.
SMI_UNKNOWN_PROCESS_FIELDS: tuple[str, ...] = (
    "user",
    "command",
    "container_id",
    "rank",
    "local_rank",
)

#: The ``--query-gpu`` fields gpuconsole asks for, in this order.
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "enforced.power.limit",
    "clocks.sm",
    "clocks.mem",
    "fan.speed",
    "pstate",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "persistence_mode",
    "mig.mode.current",
    "driver_version",
)
#: Field -> the older name to use when a driver rejects it ("is not a valid field to query").
LEGACY_FIELD_NAMES: dict[str, str] = {
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "clocks_event_reasons.supported": "clocks_throttle_reasons.supported",
}
#: Fields that may be dropped for drivers that do not know them (``mig.mode.current``: before
#: R450 no GPU had MIG).
OPTIONAL_FIELDS = frozenset({"mig.mode.current", "enforced.power.limit"})
#: The query for drivers before R535 (``clocks_throttle_reasons.active``).
QUERY_FIELDS_LEGACY: tuple[str, ...] = tuple(LEGACY_FIELD_NAMES.get(f, f) for f in QUERY_FIELDS)
#: The ``--query-compute-apps`` fields (``used_memory`` in MiB).
COMPUTE_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_memory")

SmiValue = int | float | bool | str | None


def smi_argv(interval_ms: int, fields: Sequence[str] = QUERY_FIELDS) -> list[str]:
    """``nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N`` (N in milliseconds)."""
    if interval_ms <= 0:
        raise ValueError(f"interval_ms must be positive, got {interval_ms}")
    return [
        "nvidia-smi",
        f"--query-gpu={','.join(fields)}",
        "--format=csv,noheader,nounits",
        "-lms",
        str(interval_ms),
    ]


def compute_apps_argv() -> list[str]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory`` in CSV without units."""
    return [
        "nvidia-smi",
        f"--query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}",
        "--format=csv,noheader,nounits",
    ]


def fields_without(fields: Sequence[str], invalid_field: str) -> tuple[str, ...] | None:
    """The query to retry after nvidia-smi rejected ``invalid_field``, or ``None`` if none.

    Renames it to its pre-R535 name when it has one, else drops it when it is optional.
    """
    if invalid_field not in fields:
        return None
    if invalid_field in LEGACY_FIELD_NAMES:
        return tuple(LEGACY_FIELD_NAMES[invalid_field] if f == invalid_field else f for f in fields)
    if invalid_field in OPTIONAL_FIELDS:
        return tuple(f for f in fields if f != invalid_field)
    return None


# ---------------------------------------------------------------------------------------------
# values

_INT_PREFIXES = (
    "utilization.",
    "memory.",
    "temperature.",
    "clocks.",
    "pcie.link.",
    "ecc.errors.",
    "retired_pages.single_bit",
    "retired_pages.double_bit",
    "encoder.stats.",
    "fbc.stats.",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.histogram",
)
_INT_FIELDS = frozenset(
    {
        "index",
        "count",
        "fan.speed",
        "pid",
        "used_memory",
        "used_gpu_memory",
        "accounting.buffer_size",
    }
)
_FLOAT_PREFIXES = ("power.", "enforced.power.", "module.power.", "gpu.power.")
_BOOL_FIELDS = frozenset(
    {
        "persistence_mode",
        "display_mode",
        "display_active",
        "accounting.mode",
        "ecc.mode.current",
        "ecc.mode.pending",
        "retired_pages.pending",
        "remapped_rows.pending",
        "remapped_rows.failure",
        "mig.mode.current",
        "mig.mode.pending",
    }
)
_MASK_FIELDS = frozenset(
    {
        "clocks_event_reasons.active",
        "clocks_event_reasons.supported",
        "clocks_throttle_reasons.active",
        "clocks_throttle_reasons.supported",
    }
)
#: Fields where "no value" means "off": a GPU without MIG support has MIG off.
_ABSENT_IS_FALSE = frozenset({"mig.mode.current", "mig.mode.pending"})
_BOOLS = {
    "enabled": True,
    "disabled": False,
    "yes": True,
    "no": False,
    "active": True,
    "not active": False,
    "true": True,
    "false": False,
    "on": True,
    "off": False,
}
#: Bare (unbracketed) values that mean "no value".
_BARE_MISSING = frozenset(
    {
        "n/a",
        "err!",
        "not supported",
        "unknown error",
        "unknown",
        "not available",
        "insufficient permissions",
    }
)
_NUM_RE = re.compile(
    r"^(?P<num>[-+]?\d+(?:\.\d+)?)(?:\s*(?P<unit>%|W|mW|MHz|MiB|KiB|GiB|C|ms|us|s|KB/s|MB/s))?$"
)


def _kind(name: str) -> str:
    if name in _MASK_FIELDS:
        return "mask"
    if name in _BOOL_FIELDS or name.startswith(
        ("clocks_event_reasons.", "clocks_throttle_reasons.")
    ):
        return "bool"
    if name in _INT_FIELDS or name.startswith(_INT_PREFIXES):
        return "int"
    if name.startswith(_FLOAT_PREFIXES):
        return "float"
    return "str"


def parse_value(name: str, raw: str) -> tuple[SmiValue, str | None]:
    """One nvidia-smi CSV value of field ``name`` -> ``(value, reason)``.

    ``reason`` is ``None`` when the value is known, else why it is ``None`` (nvidia-smi's own
    token, e.g. ``[Not Supported]``, or ``unparseable value '...'``). Units are stripped from
    numbers; numeric fields become ``int`` / ``float``, on/off fields ``bool``, clock-event masks
    ``int``; everything else stays text. ``mig.mode.*`` "no value" is ``False`` (no MIG).
    """
    text = raw.strip()
    missing = (text.startswith("[") and text.endswith("]")) or text.lower() in _BARE_MISSING
    if missing or not text:
        if name in _ABSENT_IS_FALSE and text.lower() in ("[n/a]", "n/a", "[not supported]"):
            return False, None
        return None, f"nvidia-smi: {text}" if text else "nvidia-smi: empty value"
    kind = _kind(name)
    try:
        if kind == "int" or kind == "float":
            m = _NUM_RE.match(text)
            if m is None:
                raise ValueError(text)
            num = float(m["num"])
            if kind == "int" and num.is_integer():
                return int(num), None
            return num, None
        if kind == "bool":
            return _BOOLS[text.lower()], None
        if kind == "mask":
            return int(text, 16), None
    except (ValueError, KeyError):
        return None, f"unparseable value {text!r}"
    return text, None


# ---------------------------------------------------------------------------------------------
# rows


@dataclass
class CsvRow:
    """One parsed nvidia-smi CSV data row.

    Attributes:
        fields: the column list it was parsed with.
        values: field -> value (``None`` when unknown); see :func:`parse_value`.
        errors: field -> reason, for each ``None`` value.
        line_no: 1-based line number in the text.
        raw: the line as read.
    """

    fields: tuple[str, ...]
    values: dict[str, SmiValue]
    errors: dict[str, str] = field(default_factory=dict)
    line_no: int = 0
    raw: str = ""

    def __getitem__(self, name: str) -> SmiValue:
        return self.values[name]


_HEADER_TOKEN_RE = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?: \[[^\]]+\])?$")


def _is_header(tokens: Sequence[str], fields: Sequence[str]) -> bool:
    if not all(_HEADER_TOKEN_RE.match(t) for t in tokens):
        return False
    names = [t.split(" [", 1)[0] for t in tokens]
    return any(n in fields or "." in n or "_" in n for n in names)


#: The query's own command line, after whatever prompt (``$ ``, a root shell's ``# ``,
#: ``PS C:\> ``, ``user@host:~$ ``, none): a data row holds no ``--query-...=`` or ``--format=``.
_COMMAND_RE = re.compile(r"\bnvidia-smi(?:\.exe)?\b.*\s--(?:query-[\w-]+|format)=")


def parse_csv_line(line: str, fields: Sequence[str], line_no: int = 0) -> CsvRow | None:
    """Parse one line; ``None`` for blank lines, command lines (``$ nvidia-smi ...``, with any
    prompt or none: :data:`_COMMAND_RE`), headers and messages.

    Raises:
        ValueError: the line has another number of values than ``fields`` (not a data row of
            this query: positions cannot be trusted).
    """
    text = line.strip()
    if (
        not text
        or line.startswith("$ ")
        or text == "$"
        or _COMMAND_RE.search(text)
        or _message_kind(text) is not None
    ):
        return None
    tokens = [t.strip() for t in text.split(",")]
    fields = tuple(fields)
    if _is_header(tokens, fields):
        return None
    if len(tokens) != len(fields):
        raise ValueError(f"line {line_no}: {len(tokens)} values, expected {len(fields)}")
    row = CsvRow(fields=fields, values={}, line_no=line_no, raw=line)
    for f, tok in zip(fields, tokens):
        value, reason = parse_value(f, tok)
        row.values[f] = value
        if reason is not None:
            row.errors[f] = reason
    return row


def parse_csv_rows(
    text: str, fields: Sequence[str], *, rejected: list[tuple[int, str]] | None = None
) -> list[CsvRow]:
    """Parse ``nvidia-smi --query-*`` CSV output with the given column list.

    Works for ``csv``, ``csv,noheader`` and ``csv,noheader,nounits``. Skips an optional header
    row, the command line (after any prompt), blank lines and nvidia-smi's failure messages (see
    :func:`classify_smi_failure`; e.g. ``NVML library version: 570.124`` is not a row). A value
    that cannot be read spoils only that field. A line with another number of values is not a
    row of this query (a message, a wrapper's log line): it is skipped and, when ``rejected`` is
    given, appended to it as ``(line_no, line)``.
    """
    rows: list[CsvRow] = []
    for no, line in enumerate(text.splitlines(), 1):
        try:
            row = parse_csv_line(line, fields, no)
        except ValueError:
            if rejected is not None:
                rejected.append((no, line))
            continue
        if row is not None:
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# samples

#: schema GPU key -> nvidia-smi fields that provide it, preferred first.
_KEY_SOURCES: dict[str, tuple[str, ...]] = {
    "uuid": ("uuid", "gpu_uuid"),
    "name": ("name", "gpu_name"),
    "pci_bus_id": ("pci.bus_id", "gpu_bus_id"),
    "util_gpu_pct": ("utilization.gpu",),
    "util_mem_pct": ("utilization.memory",),
    "mem_used_mib": ("memory.used",),
    "mem_total_mib": ("memory.total",),
    "temp_c": ("temperature.gpu",),
    "power_w": ("power.draw", "power.draw.instant", "power.draw.average"),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "sm_clock_mhz": ("clocks.sm", "clocks.current.sm"),
    "mem_clock_mhz": ("clocks.mem", "clocks.current.memory"),
    "sm_clock_max_mhz": ("clocks.max.sm", "clocks.max.graphics"),
    "mem_clock_max_mhz": ("clocks.max.memory", "clocks.max.mem"),
    "pcie_gen": ("pcie.link.gen.current",),
    "pcie_gen_max": ("pcie.link.gen.max",),
    "pcie_width": ("pcie.link.width.current",),
    "pcie_width_max": ("pcie.link.width.max",),
    "fan_pct": ("fan.speed",),
    "pstate": ("pstate",),
    "throttle_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    "ecc_volatile_uncorrected": ("ecc.errors.uncorrected.volatile.total",),
    "remapped_rows_pending": ("remapped_rows.pending",),
    "persistence_mode": ("persistence_mode",),
    "mig_mode": ("mig.mode.current",),
}
_NOT_QUERIED = "not queried by the nvidia-smi fallback"
#: The reasons :func:`parse_value` gives for nvidia-smi's "this GPU has no such reading" (it
#: prints ``[N/A]`` where NVML answers NVML_ERROR_NOT_SUPPORTED; ``[Not Supported]`` on older
#: drivers): the record's ``unsupported`` lists such keys.
SMI_NOT_SUPPORTED = frozenset(
    {
        "nvidia-smi: [N/A]",
        "nvidia-smi: [Not Supported]",
        "nvidia-smi: N/A",
        "nvidia-smi: Not Supported",
    }
)


def gpu_from_row(row: CsvRow, position: int) -> GpuRecord:
    """A schema GPU record from one row; ``position`` is the index when ``index`` is absent."""
    idx = row.values.get("index")
    gpu = empty_gpu(idx if isinstance(idx, int) and not isinstance(idx, bool) else position)
    fields = cast(dict[str, Any], gpu)  # the same record, written by key name below
    errors = gpu["errors"]
    if "index" in row.values and not isinstance(idx, int):
        errors["index"] = row.errors.get("index", "index unknown; row order used")
    for key, sources in _KEY_SOURCES.items():
        present = [s for s in sources if s in row.values]
        if not present:
            if key in GPU_FIELDS:
                errors[key] = _NOT_QUERIED
            continue
        src = next((s for s in present if row.values[s] is not None), present[0])
        value = row.values[src]
        fields[key] = (
            throttle_reasons(value)
            if key == "throttle_reasons" and isinstance(value, int)
            else value
        )
        if value is None:
            errors[key] = row.errors.get(src, "unknown")
            if errors[key] in SMI_NOT_SUPPORTED and key in GPU_FIELDS:  # a reading, n/a
                mark_not_supported(gpu, cast(GpuField, key))
    errors["gpm"] = "not available from nvidia-smi"
    return gpu


def processes_from_compute_apps(
    rows: Iterable[CsvRow],
    gpus: Sequence[GpuRecord],
) -> list[ProcessRecord]:
    """Schema process records from ``--query-compute-apps=gpu_uuid,pid,used_memory`` rows.

    ``gpu_index`` comes from the GPU with that UUID (``None`` if unknown); ``used_mib`` is
    ``None`` where nvidia-smi prints no value (e.g. ``[N/A]`` under MIG or WDDM).
    """
    by_uuid = {g["uuid"]: g["index"] for g in gpus if g["uuid"]}
    out: list[ProcessRecord] = []
    for r in rows:
        pid = r.values.get("pid")
        if not isinstance(pid, int):
            continue
        uuid = r.values.get("gpu_uuid")
        uuid = uuid if isinstance(uuid, str) else None
        used = r.values.get("used_memory", r.values.get("used_gpu_memory"))
        out.append(
            {
                "gpu_index": by_uuid.get(uuid) if uuid else None,
                "gpu_uuid": uuid,
                "pid": pid,
                "used_mib": used if isinstance(used, int) else None,
                "type": "compute",
                "user": None,
                "command": None,
                "container_id": None,
                "rank": None,
                "local_rank": None,
            }
        )
    return out


def sample_from_smi(
    rows: Sequence[CsvRow],
    compute_apps: Sequence[CsvRow] | None,
    seq: int,
    host_time: float,
    interval_s: float,
    *,
    fault: HostFault | None = None,
    known_gpus: Sequence[GpuRecord] | None = None,
) -> Sample:
    """A schema-v1 sample (source ``nvidia-smi``) from one polling round.

    Args:
        rows: one :class:`CsvRow` per GPU (any column list; fields gpuconsole does not know are
            ignored, schema fields not queried are ``None`` with the reason).
        compute_apps: ``--query-compute-apps`` rows, or ``None`` when that query was not run or
            failed (then ``processes`` is ``None``: unknown, never "no processes"). MIG-off GPUs
            are ordinary GPUs: their processes are listed like any other.
        seq, host_time (Unix s), interval_s (s): as in the schema.
        fault: a failure nvidia-smi printed in this round (see :func:`classify_smi_failure`).
        known_gpus: the previous sample's GPUs, to keep identities when readings are missing.
    """
    sample = empty_sample(SOURCE, seq, host_time, interval_s)
    gpus = [gpu_from_row(r, i) for i, r in enumerate(rows)]
    sample["gpus"] = gpus
    driver = next(
        (
            r.values.get("driver_version")
            for r in rows
            if isinstance(r.values.get("driver_version"), str)
        ),
        None,
    )
    _host(sample, driver if isinstance(driver, str) else None)
    if compute_apps is None:
        sample["errors"]["processes"] = "nvidia-smi --query-compute-apps not run for this sample"
    else:
        sample["processes"] = processes_from_compute_apps(compute_apps, gpus)
    if fault is not None:
        _apply_host_fault(sample, fault, known_gpus)
    elif not rows:
        sample["state"] = "no_gpus"
        sample["state_detail"] = "nvidia-smi listed no GPUs"
    return sample


def sample_from_fault(
    fault: HostFault,
    seq: int,
    host_time: float,
    interval_s: float,
    known_gpus: Sequence[GpuRecord] | None = None,
) -> Sample:
    """A schema-v1 sample for a round where nvidia-smi printed only a failure.

    GPUs from ``known_gpus`` (the last good sample) are listed with every reading ``None``;
    without them ``gpus`` is empty and ``errors["gpus"]`` says the list is unknown, so that
    "driver unreachable" never reads as "0 GPUs". Lost GPUs are found by PCI bus id.
    """
    sample = empty_sample(SOURCE, seq, host_time, interval_s)
    _host(sample, None)
    _apply_host_fault(sample, fault, known_gpus)
    return sample


def _host(sample: Sample, driver: str | None) -> None:
    """The host record: the driver version is all nvidia-smi tells (the rest is unknown)."""
    host = sample["host"]
    host["driver_version"] = driver
    host["errors"] = {
        k: "not collected by the nvidia-smi fallback" for k in HOST_FIELDS if k != "driver_version"
    }
    if driver is None:
        host["errors"]["driver_version"] = "not reported by nvidia-smi"


def _identity(g: GpuRecord) -> GpuRecord:
    rec = empty_gpu(g["index"])
    rec["uuid"], rec["name"], rec["pci_bus_id"] = g["uuid"], g["name"], g["pci_bus_id"]
    return rec


def _readings_unknown(gpu: GpuRecord, reason: str) -> None:
    fields = cast(dict[str, Any], gpu)
    for f in GPU_FIELDS:
        fields[f] = None
        gpu["errors"][f] = reason


def _apply_host_fault(
    sample: Sample, fault: HostFault, known_gpus: Sequence[GpuRecord] | None
) -> None:
    sample["state"] = fault.state
    sample["state_detail"] = fault.detail
    gpus = sample["gpus"]
    have = {pci_key(g["pci_bus_id"]) for g in gpus if g["pci_bus_id"]}
    have_idx = {g["index"] for g in gpus}
    if fault.state == "no_gpus":
        sample["gpus"] = []
        sample["processes"] = None
        sample["errors"]["processes"] = fault.detail
        return
    missing_reason = f"readings missing for this sample: {fault.detail}"
    for g in known_gpus or ():
        key = pci_key(g["pci_bus_id"]) if g["pci_bus_id"] else None
        if (key is not None and key in have) or g["index"] in have_idx:
            continue
        rec = _identity(g)
        _readings_unknown(rec, missing_reason)
        gpus.append(rec)
    for err in fault.gpu_errors:
        key = pci_key(err.pci_bus_id)
        found = [g for g in gpus if g["pci_bus_id"] and pci_key(g["pci_bus_id"]) == key]
        if found:
            rec = found[0]
        else:
            rec = empty_gpu(None)
            rec["pci_bus_id"] = err.pci_bus_id
            rec["errors"]["index"] = "index unknown: GPU known only by its PCI bus id"
            gpus.append(rec)
        rec["lost"] = err.lost
        _readings_unknown(rec, f"nvidia-smi: {err.reason}")
    if not fault.gpu_errors:
        if not gpus:
            sample["errors"]["gpus"] = f"GPU list unknown: {fault.detail}"
        for g in gpus:
            _readings_unknown(g, fault.detail)
    if sample["processes"] is None or not fault.gpu_errors:
        sample["processes"] = None
        sample["errors"]["processes"] = f"unknown: {fault.detail}"


# ---------------------------------------------------------------------------------------------
# the -lms stream


class SmiStreamParser:
    """Turns the line stream of ``nvidia-smi --query-gpu=... -lms N`` into samples.

    A polling round prints one row per GPU. A round ends when a GPU's row comes again (its
    ``index`` -- or ``uuid`` / ``pci.bus_id`` without one -- repeats, or the index wraps), or as
    soon as it has as many rows as the previous round (so samples are not one interval late).

    Lines that are not data (nvidia-smi's failure messages) are kept in :attr:`unparsed`. A
    device-handle failure inside a round becomes that round's fault (the lost GPU is marked,
    the others keep their readings); a host-level failure ends the round in progress. A stream
    that yields nothing (nvidia-smi failed at once) is turned into one sample by the caller:
    ``fault_sample(classify_smi_failure("\\n".join(parser.unparsed) + stderr), t)``.

    Args:
        fields: the column list of the query.
        interval_s: the polling interval in seconds (``-lms`` / 1000).
        gpu_count: rows per round when known in advance.
        start_seq: ``seq`` of the first sample.
        clock: host-time source (Unix s) when ``feed`` is given none.
    """

    #: at most this many non-data lines are kept in :attr:`unparsed` (the latest).
    MAX_UNPARSED = 200

    def __init__(
        self,
        fields: Sequence[str] = QUERY_FIELDS,
        interval_s: float = 1.0,
        *,
        gpu_count: int | None = None,
        start_seq: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fields = tuple(fields)
        self.interval_s = interval_s
        self.expected = gpu_count
        self.seq = start_seq
        self.clock = clock
        #: GPUs of the last sample built from rows (identities for failure samples).
        self.known_gpus: list[GpuRecord] = []
        #: non-data lines seen (failure messages, lines of another shape), oldest first.
        self.unparsed: list[str] = []
        self._rows: list[CsvRow] = []
        self._keys: list[SmiValue] = []
        self._messages: list[str] = []
        self._t0: float | None = None
        self._apps: list[CsvRow] | None = None
        self._line_no = 0

    def set_compute_apps(self, rows: Sequence[CsvRow] | None) -> None:
        """Process rows to attach to the next sample (then cleared: never reused stale)."""
        self._apps = list(rows) if rows is not None else None

    def feed(self, line: str, host_time: float | None = None) -> list[Sample]:
        """Consume one line; returns the samples it completed (usually zero or one)."""
        self._line_no += 1
        now = self.clock() if host_time is None else host_time
        out: list[Sample] = []
        text = line.strip()
        kind = _message_kind(text) if text else None
        if kind is not None:
            self.unparsed.append(text)
            del self.unparsed[: -self.MAX_UNPARSED]
            if kind == "gpu":
                self._messages.append(text)
                self._t0 = now if self._t0 is None else self._t0
            elif kind not in ("plugin", "detail"):
                out.extend(self._emit())  # a host-level failure ends the round in progress
            return out
        try:
            row = parse_csv_line(line, self.fields, self._line_no)
        except ValueError:
            self.unparsed.append(text)
            del self.unparsed[: -self.MAX_UNPARSED]
            return out
        if row is None:
            return out
        key = self._row_key(row)
        if self._rows and key is not None and (key in self._keys or self._wrapped(key)):
            self.expected = self.expected or len(self._rows)
            out.extend(self._emit())
        if self._t0 is None:
            self._t0 = now
        self._rows.append(row)
        self._keys.append(key)
        if self.expected is not None and len(self._rows) >= self.expected:
            out.extend(self._emit())
        return out

    def flush(self, host_time: float | None = None) -> list[Sample]:
        """End of stream: the pending partial round as a sample (zero or one samples)."""
        if self._t0 is None and host_time is not None:
            self._t0 = host_time
        return self._emit()

    def fault_sample(
        self,
        fault: HostFault | None,
        host_time: float | None = None,
    ) -> Sample:
        """A sample for a stream that failed (``fault`` from :func:`classify_smi_failure`;
        ``None`` -> state ``error``), keeping the identities of the GPUs seen so far."""
        if fault is None:
            tail = self.unparsed[-1] if self.unparsed else "no output"
            fault = HostFault(
                state="error",
                detail=f"nvidia-smi produced no samples: {tail}",
                hint=None,
                source=SOURCE,
            )
        now = self.clock() if host_time is None else host_time
        sample = sample_from_fault(fault, self.seq, now, self.interval_s, self.known_gpus)
        self.seq += 1
        return sample

    def _row_key(self, row: CsvRow) -> SmiValue:
        for f in ("index", "uuid", "gpu_uuid", "pci.bus_id"):
            v = row.values.get(f)
            if v is not None:
                return v
        return None

    def _wrapped(self, key: SmiValue) -> bool:
        last = self._keys[-1] if self._keys else None
        return (
            isinstance(key, int)
            and isinstance(last, int)
            and not isinstance(key, bool)
            and key < last
        )

    def _emit(self) -> list[Sample]:
        rows, apps, messages = self._rows, self._apps, self._messages
        host_time = self._t0 if self._t0 is not None else self.clock()
        self._rows, self._keys, self._messages, self._t0, self._apps = [], [], [], None, None
        if not rows:
            return []
        fault = classify_smi_failure("\n".join(messages)) if messages else None
        sample = sample_from_smi(
            rows,
            apps,
            self.seq,
            host_time,
            self.interval_s,
            fault=fault,
            known_gpus=self.known_gpus,
        )
        if fault is None:
            have = {g["index"] for g in sample["gpus"]}
            for g in self.known_gpus:
                if g["index"] not in have:
                    rec = _identity(g)
                    _readings_unknown(rec, "no row for this GPU in this polling round")
                    sample["gpus"].append(rec)
        sample["gpus"].sort(key=lambda g: (g["index"] is None, g["index"] or 0))
        self.known_gpus = [g for g in sample["gpus"] if g["index"] is not None]
        self.seq += 1
        return [sample]


# ---------------------------------------------------------------------------------------------
# failures

_NO_DRIVER_RE = re.compile(
    r"nvidia-smi: (?:command )?not found|nvidia-smi.*No such file or directory|"
    r"'nvidia-smi' is not recognized|executable file not found.*nvidia-smi",
    re.IGNORECASE,
)
_UNREACHABLE_RE = re.compile(r"couldn't communicate with the NVIDIA driver", re.IGNORECASE)
#: Apostrophes a copy of nvidia-smi's text may carry instead of ``'`` (a word processor's or a
#: forum's typographic quotes U+2018/U+2019, the modifier letter U+02BC, a backtick): read as
#: ``'``.
APOSTROPHES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "`": "'"})
#: Where one of nvidia-smi's / NVML's failure messages begins inside a line a wrapper
#: decorated (``[nvidia-smi(stdout)] Failed to initialize NVML: ...``), any apostrophe.
SMI_MESSAGE_RE = re.compile(
    r"NVIDIA-SMI has failed|Failed to initialize NVML|NVML library version|No devices were "
    r"found|No devices found|Unable to (?:determine|detect) the device handle|NVIDIA-SMI couldn.t "
    r"find|could not load NVML library",
    re.IGNORECASE,
)
_MISMATCH_RE = re.compile(r"Driver/library version mismatch", re.IGNORECASE)
_LIBVER_RE = re.compile(r"^NVML library version:\s*(?P<v>\d+(?:\.\d+)+)", re.IGNORECASE)
_KERNELVER_RE = re.compile(
    r"(?:Kernel module|kernel driver) version:\s*(?P<v>\d+(?:\.\d+)+)", re.IGNORECASE
)
#: NVML's library cannot be loaded: nvidia-smi's own words, NVML's
#: ``nvmlErrorString(NVML_ERROR_LIBRARY_NOT_FOUND)`` ("NVML Shared Library Not Found"), the Go
#: bindings' ``could not load NVML library`` (NVIDIA gpu-monitoring-tools
#: ``bindings/go/nvml/nvml_dl.go``, printed by the Kubernetes device plugin as ``Failed to
#: initialize NVML: could not load NVML library.``) and go-nvml's ``ERROR_LIBRARY_NOT_FOUND``.
_NVML_MISSING_RE = re.compile(
    r"couldn't find libnvidia-ml\.so|NVML Shared Library Not Found"
    r"|could not load NVML library|\bERROR_LIBRARY_NOT_FOUND\b",
    re.IGNORECASE,
)
_NO_GPUS_RE = re.compile(r"^No devices (?:were )?found\.?$", re.IGNORECASE)
#: nvidia-smi's per-GPU failure; older releases (and nvidia-smi.exe) say "detect".
_HANDLE_RE = re.compile(
    r"Unable to (?:determine|detect) the device handle for GPU ?"
    r"(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"\s*:\s*(?P<reason>.*)$",
    re.IGNORECASE,
)
_INVALID_FIELD_RE = re.compile(r'Field "(?P<f>[^"]+)" is not a valid field to query', re.IGNORECASE)
_INIT_FAILED_RE = re.compile(r"^Failed to initialize NVML: (?P<why>.*)$", re.IGNORECASE)
_CTIME_RE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d)(?: (?P<tz>[+-]\d{4}|[A-Z]{2,5}))? (?P<year>\d{4})"
)
_ISO_RE = re.compile(r"(?P<d>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?P<tz>[+-]\d\d:?\d\d)?")
_PLUGIN_LINE_RE = re.compile(r"^nvidia-docker-plugin \| ")


def _message_kind(line: str) -> str | None:
    """Which nvidia-smi message ``line`` is (``None`` for data)."""
    if _HANDLE_RE.search(line):
        return "gpu"
    if _LIBVER_RE.match(line) or _KERNELVER_RE.search(line):
        return "detail"
    if _PLUGIN_LINE_RE.match(line):
        return "plugin"
    for kind, rx in (
        ("no_driver", _NO_DRIVER_RE),
        ("unreachable", _UNREACHABLE_RE),
        ("mismatch", _MISMATCH_RE),
        ("nvml", _NVML_MISSING_RE),
        ("no_gpus", _NO_GPUS_RE),
        ("field", _INVALID_FIELD_RE),
        ("init", _INIT_FAILED_RE),
    ):
        if rx.search(line):
            return kind
    return None


def _stamp(line: str) -> datetime | None:
    m = _CTIME_RE.search(line)
    if m:
        try:
            dt = datetime.strptime(
                f"{m['mon']} {m['day']} {m['hms']} {m['year']}", "%b %d %H:%M:%S %Y"
            )
        except ValueError:
            return None
        tz = m["tz"]
        if tz and tz[0] in "+-":
            off = timedelta(hours=int(tz[1:3]), minutes=int(tz[3:5]))
            dt = dt.replace(tzinfo=timezone(off if tz[0] == "+" else -off))
        return dt
    m = _ISO_RE.search(line)
    if m:
        try:
            return datetime.fromisoformat(f"{m['d']}T{m['hms']}{m['tz'] or ''}")
        except ValueError:
            return None
    return None


def classify_smi_failure(text: str, returncode: int | None = None) -> HostFault | None:
    """Map nvidia-smi's failure output to a host state; ``None`` if ``text`` shows no failure.

    ======================================================  =======================
    nvidia-smi prints                                        state
    ======================================================  =======================
    ``nvidia-smi: command not found`` (or exit 127)          ``no_driver``
    ``NVIDIA-SMI couldn't find libnvidia-ml.so ...``         ``nvml_unavailable``
    ``Failed to initialize NVML: Driver/library version      ``version_mismatch``
    mismatch`` (+ ``NVML library version: X``)
    ``... couldn't communicate with the NVIDIA driver ...``  ``driver_unreachable``
    ``Unable to determine the device handle for GPU          ``gpu_lost`` (``GPU is
    <bus id>: <reason>``                                     lost``), else ``error``
    ``No devices were found``                                ``no_gpus``
    ``Field "x" is not a valid field to query.``             ``error`` (retry query)
    ``Failed to initialize NVML: <other>``                   ``error``
    ======================================================  =======================

    Device-handle failures are attributed by the bus id inside the message (tags a wrapper
    puts around the output are ignored); identical messages are one event, stamped with the
    nearest timestamp printed before the first one (if any). nvidia-docker-plugin lines showing
    GPU discovery that never finished are kept as ``evidence`` of the same fault. Typographic
    apostrophes (``couldn\u2018t``, :data:`APOSTROPHES`) read as ``'``.
    """
    text = text.translate(APOSTROPHES)
    lines = [ln.strip() for ln in text.splitlines()]
    kinds = [(_message_kind(ln), ln) for ln in lines if ln and not ln.startswith("$ ")]
    found = {k for k, _ in kinds if k is not None}
    evidence: tuple[str, ...] = ()
    if "plugin" in found:
        disc = parse_plugin_discovery(text)
        if disc.stalled and disc.discovery_started is not None:
            loaded = (
                f"NVML loaded at {disc.nvml_loaded:%Y-%m-%d %H:%M:%S}, " if disc.nvml_loaded else ""
            )
            evidence = (
                f"nvidia-docker-plugin: {loaded}GPU discovery started at "
                f"{disc.discovery_started:%Y-%m-%d %H:%M:%S} and never finished",
            )
    lib = next((m["v"] for _, ln in kinds if (m := _LIBVER_RE.match(ln))), None)
    kver = next((m["v"] for _, ln in kinds if (m := _KERNELVER_RE.search(ln))), None)

    def fault(state: HostState, detail: str, hint: str | None, **kw: Any) -> HostFault:
        return HostFault(
            state=state,
            detail=detail,
            hint=hint,
            source=SOURCE,
            library_version=lib,
            kernel_module_version=kver,
            evidence=evidence,
            **kw,
        )

    if "no_driver" in found or (returncode == 127 and not found):
        return fault(
            "no_driver",
            "no NVIDIA driver: nvidia-smi not found",
            "install the NVIDIA driver on the host (nvidia-smi comes with it)",
        )
    if "nvml" in found:
        return fault(
            "nvml_unavailable",
            "NVML library (libnvidia-ml.so) not found: no NVIDIA user-space driver",
            "install the NVIDIA driver's user-space libraries matching the kernel module",
        )
    if "mismatch" in found:
        libtxt = f"user-space NVML library {lib}" if lib else "user-space NVML library"
        ktxt = f"loaded kernel module {kver}" if kver else "the loaded kernel module"
        return fault(
            "version_mismatch",
            f"Driver/library version mismatch: {libtxt} differs from {ktxt}; every GPU "
            "reading unknown",
            "run a kernel module of the same version as the user-space driver"
            + (f" ({lib})" if lib else "")
            + ": install matching versions, then reload the nvidia modules "
            "(`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`) or reboot; "
            "compare /proc/driver/nvidia/version",
        )
    if "unreachable" in found:
        return fault(
            "driver_unreachable",
            "nvidia-smi couldn't communicate with the NVIDIA driver; every GPU reading unknown",
            "check the kernel module (`lsmod | grep nvidia`, `dmesg | grep NVRM`); after a kernel "
            "or driver package upgrade (see /var/log/apt/history.log) reinstall one consistent "
            "driver version and reboot",
        )
    if "gpu" in found:
        events: dict[tuple[tuple[int, int, int, int] | str, str], GpuHandleError] = {}
        last_stamp: datetime | None = None
        for ln in lines:
            st = _stamp(ln)
            if st is not None:
                last_stamp = st
            m = _HANDLE_RE.search(ln)
            if m is None:
                continue
            full = m["reason"].strip()
            lost = bool(re.search(r"GPU is lost|fallen off the bus", full, re.IGNORECASE))
            # quoted in prose, the message ends at its closing quote ("...: Unknown Error".)
            reason = full.split(". ", 1)[0].rstrip(".").rstrip("\"'`*").rstrip(".")
            k = (pci_key(m["pci"]) or m["pci"], reason)
            prev = events.get(k)
            if prev is None:
                events[k] = GpuHandleError(m["pci"], reason, lost, 1, last_stamp)
            else:
                events[k] = GpuHandleError(
                    prev.pci_bus_id, prev.reason, prev.lost, prev.repeats + 1, prev.first_seen
                )
        errs = tuple(events.values())
        lost_ids = [e.pci_bus_id for e in errs if e.lost]
        if lost_ids:
            return fault(
                "gpu_lost",
                f"GPU {', '.join(lost_ids)} is lost (reboot required)",
                "reboot the host to recover the lost GPU; if it recurs check PCIe "
                "seating, power and cooling",
                gpu_errors=errs,
            )
        return fault(
            "error",
            "nvidia-smi could not open GPU "
            + ", ".join(f"{e.pci_bus_id} ({e.reason})" for e in errs),
            "check the kernel log (`dmesg | grep -e NVRM -e Xid`); a GPU reset or reboot may be "
            "needed",
            gpu_errors=errs,
        )
    if "no_gpus" in found:
        return fault(
            "no_gpus",
            "no GPUs detected: the driver answers but enumerates 0 GPUs",
            "the host's GPUs are missing: look for them in `lspci -d 10de:` and in the kernel "
            "log (`dmesg | grep -e NVRM -e Xid`)",
        )
    if "field" in found:
        bad = next(m["f"] for _, ln in kinds if (m := _INVALID_FIELD_RE.search(ln)))
        return fault(
            "error",
            f'nvidia-smi does not know the query field "{bad}"',
            "gpuconsole asks again with the field's older name or without it; if this "
            "stays, the driver is too old for gpuconsole's query: update it",
            invalid_field=bad,
        )
    if "init" in found:
        why = next(m["why"] for _, ln in kinds if (m := _INIT_FAILED_RE.match(ln)))
        return fault(
            "error",
            f"Failed to initialize NVML: {why}",
            "check /dev/nvidia* permissions and the kernel log",
        )
    if returncode not in (None, 0):
        tail = next((ln for ln in reversed(lines) if ln), "no output")
        return fault("error", f"nvidia-smi exited {returncode}: {tail}", None)
    return None


__all__ = [
    "APOSTROPHES",
    "COMPUTE_APPS_FIELDS",
    "LEGACY_FIELD_NAMES",
    "OPTIONAL_FIELDS",
    "QUERY_FIELDS",
    "QUERY_FIELDS_LEGACY",
    "SMI_MESSAGE_RE",
    "SMI_UNKNOWN_GPU_FIELDS",
    "SMI_UNKNOWN_PROCESS_FIELDS",
    "SOURCE",
    "CsvRow",
    "SmiStreamParser",
    "SmiValue",
    "classify_smi_failure",
    "compute_apps_argv",
    "fields_without",
    "gpu_from_row",
    "parse_csv_line",
    "parse_csv_rows",
    "parse_value",
    "processes_from_compute_apps",
    "sample_from_fault",
    "sample_from_smi",
    "smi_argv",
]
