"""Fleet rows: a :class:`~console.fleet.state.FleetState` as typed rows for any face.

Pure (no textual, no I/O). The TUI's fleet table (``console/app/widgets/fleet.py``) and any
other face build their lines from these rows:

- :func:`fleet_rows` turns the state into :class:`HostGroup` s: one :class:`HostRow` per host,
  in the state's host order, each followed by its :class:`GpuRow` s (by GPU index);
- :func:`sort_groups` orders them by a :data:`SORT_KEYS` column, ascending or descending;
- :func:`filter_groups` keeps the GPUs matching a text query (:func:`parse_query`);
- the ``*_text`` helpers and :func:`bar` / :func:`sparkline` are the plain-text cells.

Unknown stays ``None`` in the rows and prints as ``?`` in the text helpers, never 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Literal

from console.fleet.state import FleetState, GpuHolder, GpuPoint, HostView, gpu_holders
from remote.telemetry.schema import (
    DRIVER_DOWN_STATES,
    USABLE_STATES,
    GpuField,
    GpuRecord,
    is_limit,
    is_slowdown,
)

#: Host statuses as the faces name them (``FleetState``'s ``ok`` is ``up``).
HostStatus = Literal["up", "stale", "down", "connecting"]

#: Sort columns, in the order ``s`` cycles through them.
SORT_KEYS: tuple[str, ...] = ("host", "util", "mem", "temp", "power")

#: Clock-event (throttle) reason (``schema.THROTTLE_REASONS``) -> a short word for a table
#: cell. ``gpu_idle`` is not a limit on a working GPU and is left out of :func:`throttle_text`.
THROTTLE_WORDS: dict[str, str] = {
    "applications_clocks_setting": "app-clk",
    "sw_power_cap": "pwr-cap",
    "hw_slowdown": "hw-slow",
    "sync_boost": "sync-boost",
    "sw_thermal": "sw-therm",
    "hw_thermal": "hw-therm",
    "hw_power_brake": "pwr-brake",
    "display_clock_setting": "disp-clk",
    "board_limit": "board",
    "reliability": "reliab",
}

#: Sparkline levels, lowest to highest (0 % .. 100 %).
SPARK_LEVELS = "▁▂▃▄▅▆▇█"

#: A Docker container id (a ``runtime: host`` node's "container" is its name instead).
_HEX64 = re.compile(r"[0-9a-f]{64}")

#: Left-aligned eighth blocks for bars: index n draws n/8 of one cell.
_EIGHTHS = " ▏▎▍▌▋▊▉█"


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host.

    Attributes:
        key: stable row key, ``host:<name>``.
        name: the host's name in the profile.
        status: ``up``, ``stale`` (3 intervals without a sample), ``down`` (unreachable) or
            ``connecting`` (no sample yet).
        error: why the host is down (``None`` otherwise).
        problem: the sample's ``state`` when it is not ``ok`` (``driver_unreachable``,
            ``gpu_lost``...): a driver/GPU problem on a host that streams; ``None`` if ok.
        problem_detail: the sample's ``state_detail`` (a person's sentence), or ``None``.
        cpu_pct: host CPU utilization (%), or ``None``.
        mem_used_mib: host memory used (MiB), or ``None``.
        mem_total_mib: host memory total (MiB), or ``None``.
        gpu_count: GPUs in the latest sample (lost ones included); ``None`` before the first
            sample or while the driver does not answer.
        missing_gpus: PCI bus ids seen on the host before but absent now.
        age_s: seconds since the last sample (from the ``now`` given to :func:`fleet_rows`),
            or ``None``.
        source: ``nvml`` or ``nvidia-smi`` (where the GPU readings came from), or ``None``
            before the first sample or while the driver does not answer (no readings: a
            host without a driver is not "via nvidia-smi").
        xid_notes: Xid headlines of GPUs that have no row (lost from the sample, or a GSP
            message naming only the driver's GPU number): ``0000:b3:00.0: Xid 79 ...``.
    """

    key: str
    name: str
    status: HostStatus
    error: str | None
    problem: str | None
    problem_detail: str | None
    cpu_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    gpu_count: int | None
    missing_gpus: tuple[str, ...]
    age_s: float | None
    source: str | None
    xid_notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuUser:
    """Who uses a GPU: a gpuconsole job's node (its ranks grouped) or a foreign process.

    Attributes:
        job_id: the gpuconsole job, or ``None`` for a foreign process.
        job_name: that job's spec name, or ``None``.
        node_rank: the job's node (container) index, or ``None``.
        ranks: torchrun global ranks of the job's processes on this GPU (known ones, sorted).
        pids: host PIDs (sorted).
        user: the process owner (first process), or ``None``.
        command: the command line (first process), or ``None``.
        container: the container id's first 12 hex, or ``None``.
        used_mib: GPU memory of these processes (MiB, summed over known values), or ``None``.
    """

    job_id: str | None
    job_name: str | None
    node_rank: int | None
    ranks: tuple[int, ...]
    pids: tuple[int, ...]
    user: str | None
    command: str | None
    container: str | None
    used_mib: float | None


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU of a host.

    Attributes:
        key: stable row key, ``gpu:<host>:<index>``.
        host: the host's name.
        index: the GPU's NVML index.
        name: the model (``NVIDIA H200``), or ``None``.
        lost: the GPU fell off the bus (its readings are unknown).
        util_pct: utilization.gpu (%), or ``None``.
        mem_used_mib: memory used (MiB), or ``None``.
        mem_total_mib: memory total (MiB), or ``None``.
        temp_c: temperature (C), or ``None``.
        fan_pct: fan speed (%), or ``None`` (an SXM part has no fan).
        power_w: power draw (W), or ``None``.
        power_limit_w: enforced power limit (W), or ``None``.
        sm_activity_pct: GPM SM activity (%), ``None`` where GPM is not reported.
        throttle_reasons: active NVML clock-event reasons (``gpu_idle`` included), or ``None``.
        history: recent utilization (%), oldest first, ``None`` for unknown points.
        users: who holds the GPU (jobs first, then foreign processes by PID); ``None`` when
            the host's process list is unknown.
        usable: the host streams and its driver answers (``free`` needs it).
        pstate: performance state (``P0``), or ``None``.
        sm_clock_mhz: SM clock (MHz), or ``None``.
        tensor_activity_pct: GPM tensor-core activity (%), or ``None``.
        dram_bw_util_pct: GPM DRAM bandwidth utilization (%), or ``None``.
        ecc_uncorrected: volatile uncorrected ECC errors, or ``None``.
        xid: the root of the GPU's Xid chain this boot with its action (``Xid 79 fallen off
            the bus: reboot``; Xid 45 cleanup is never shown in place of its cause), or
            ``None`` without Xids.
        xid_code: that Xid's number, or ``None``.
        xid_severe: its action takes the GPU out (reboot, reset, NVLink, mechanicals) or the
            same faults hit many processes (drain).
        mem_clock_mhz: memory clock (MHz), or ``None``.
        sm_clock_max_mhz: the highest SM clock (MHz), or ``None``.
        mem_clock_max_mhz: the highest memory clock (MHz), or ``None``.
        unsupported: sample keys the GPU does not have at all (the record's ``unsupported``:
            NVML_ERROR_NOT_SUPPORTED), shown ``n/a``; any other ``None`` reading is unknown.
    """

    key: str
    host: str
    index: int
    name: str | None
    lost: bool
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temp_c: float | None
    fan_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_activity_pct: float | None
    throttle_reasons: tuple[str, ...] | None
    history: tuple[float | None, ...]
    users: tuple[GpuUser, ...] | None
    usable: bool
    pstate: str | None = None
    sm_clock_mhz: float | None = None
    tensor_activity_pct: float | None = None
    dram_bw_util_pct: float | None = None
    ecc_uncorrected: float | None = None
    xid: str | None = None
    xid_code: int | None = None
    xid_severe: bool = False
    mem_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    unsupported: frozenset[GpuField] = frozenset()

    def na(self, key: GpuField) -> bool:
        """Whether sample key ``key`` (``fan_pct``, ``gpm``...) is not applicable to this GPU
        (it does not have that reading), rather than unknown."""
        return key in self.unsupported

    @property
    def free(self) -> bool:
        """No process holds it, the process list is known and the host usable (as
        :func:`console.fleet.state.free_gpus`)."""
        return self.usable and not self.lost and self.users == ()

    @property
    def busy(self) -> bool:
        """At least one process holds it."""
        return bool(self.users)

    @property
    def job_ids(self) -> tuple[str, ...]:
        """The gpuconsole jobs using it, in :attr:`users` order."""
        return tuple(u.job_id for u in self.users or () if u.job_id is not None)


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on a GPU, for the selected GPU's process table.

    Attributes:
        key: stable row key, ``pid:<pid>``.
        pid: the host PID.
        job_id: the gpuconsole job it belongs to (by its container's labels), or ``None``
            for a foreign process (not started by gpuconsole).
        job_name: that job's spec name, or ``None``.
        node_rank: the job's node index, or ``None``.
        rank: torchrun's global rank (``RANK`` of the process), or ``None``.
        user: the process owner, or ``None`` when unreadable.
        command: the full command line, or ``None``.
        container: the Docker container id's first 12 hex; a ``runtime: host`` node's name
            (it runs without a container); ``None`` for a process outside any.
        used_mib: its GPU memory (MiB), or ``None`` (MIG, nvidia-smi ``[N/A]``).
    """

    key: str
    pid: int
    job_id: str | None
    job_name: str | None
    node_rank: int | None
    rank: int | None
    user: str | None
    command: str | None
    container: str | None
    used_mib: float | None


def gpu_processes(state: FleetState, host: str, index: int) -> tuple[ProcessRow, ...] | None:
    """The processes on one GPU, one row each: a gpuconsole job's first (by job, node, rank,
    PID), then foreign ones by PID; ``None`` when the host's process list is unknown."""
    holders = gpu_holders(state, host)
    if holders is None:
        return None
    rows = [
        ProcessRow(
            key=f"pid:{h.pid}",
            pid=h.pid,
            job_id=h.job.job_id if h.job else None,
            job_name=h.job.job_name if h.job else None,
            node_rank=h.job.node_rank if h.job else None,
            rank=h.rank,
            user=h.user,
            command=h.command,
            container=(h.container_id[:12] if _HEX64.fullmatch(h.container_id) else h.container_id)
            if h.container_id
            else None,
            used_mib=_num(h.used_mib),
        )
        for h in holders.get(index, [])
    ]

    def order(r: ProcessRow) -> tuple[int, str, int, int, int]:
        if r.job_id is None:
            return (1, "", 0, 0, r.pid)
        return (
            0,
            r.job_id,
            r.node_rank if r.node_rank is not None else -1,
            r.rank if r.rank is not None else -1,
            r.pid,
        )

    return tuple(sorted(rows, key=order))


@dataclass(frozen=True, slots=True)
class HostGroup:
    """A host row followed by its GPU rows."""

    host: HostRow
    gpus: tuple[GpuRow, ...]


def _num(v: Any) -> float | None:
    """A reading as float; ``None`` for unknown (or anything not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _users(holders: list[GpuHolder]) -> tuple[GpuUser, ...]:
    """Group one GPU's processes: one user per (job, node), one per foreign process."""
    jobs: dict[tuple[str, int], list[GpuHolder]] = {}
    foreign: list[GpuHolder] = []
    for h in holders:
        if h.job is not None:
            jobs.setdefault((h.job.job_id, h.job.node_rank), []).append(h)
        else:
            foreign.append(h)
    out: list[GpuUser] = []
    for (job_id, node), hs in sorted(jobs.items()):
        mibs = [float(h.used_mib) for h in hs if h.used_mib is not None]
        first = min(hs, key=lambda h: h.pid)
        out.append(
            GpuUser(
                job_id=job_id,
                job_name=hs[0].job.job_name if hs[0].job else None,
                node_rank=node,
                ranks=tuple(sorted({h.rank for h in hs if h.rank is not None})),
                pids=tuple(sorted(h.pid for h in hs)),
                user=first.user,
                command=first.command,
                container=first.container_id[:12] if first.container_id else None,
                used_mib=sum(mibs) if mibs else None,
            )
        )
    for h in sorted(foreign, key=lambda h: h.pid):
        out.append(
            GpuUser(
                job_id=None,
                job_name=None,
                node_rank=None,
                ranks=(),
                pids=(h.pid,),
                user=h.user,
                command=h.command,
                container=h.container_id[:12] if h.container_id else None,
                used_mib=_num(h.used_mib),
            )
        )
    return tuple(out)


def _status(v: HostView) -> HostStatus:
    if v.status == "down":
        return "down"
    if v.status == "stale":
        return "stale"
    if v.status == "ok" and v.sample is not None:
        return "up"
    return "connecting"


def _host_row(v: HostView, now: float | None) -> HostRow:
    s = v.sample
    age = now - v.last_rx if now is not None and v.last_rx is not None else None
    host = s["host"] if s else None
    state = s["state"] if s else None
    return HostRow(
        key=f"host:{v.name}",
        name=v.name,
        status=_status(v),
        error=v.error if v.status == "down" else None,
        problem=state if s and state != "ok" else None,
        problem_detail=(s["state_detail"] or None) if s and state != "ok" else None,
        cpu_pct=_num(host["cpu_pct"]) if host else None,
        mem_used_mib=_num(host["mem_used_mib"]) if host else None,
        mem_total_mib=_num(host["mem_total_mib"]) if host else None,
        gpu_count=None if s is None or s["state"] in DRIVER_DOWN_STATES else len(s["gpus"]),
        missing_gpus=tuple(v.missing_gpus()),
        age_s=max(age, 0.0) if age is not None else None,
        source=s["source"] if s and s["state"] not in DRIVER_DOWN_STATES else None,
        xid_notes=_xid_notes(v),
    )


def _xid_notes(v: HostView) -> tuple[str, ...]:
    shown = {g["index"] for g in v.gpus() if g["index"] is not None}
    return tuple(
        f"{x.pci_bus_id}: {x.line}"
        for x in v.xid_summaries()
        if x.gpu_index is None or x.gpu_index not in shown
    )


def fleet_rows(
    state: FleetState, *, now: float | None = None, history_points: int = 60
) -> list[HostGroup]:
    """The fleet as host groups, in the state's host order, GPUs by index.

    Args:
        state: the fleet.
        now: the clock the state's ``rx`` times come from (``time.monotonic()`` for a live
            monitor), for :attr:`HostRow.age_s`; ``None`` leaves ages unknown.
        history_points: how many of the most recent utilization points each GPU row keeps.

    Returns:
        One :class:`HostGroup` per host. A down host keeps the GPUs of its last sample out of
        the table (its readings are not current): its group has no GPU rows.
    """
    out: list[HostGroup] = []
    for v in state.hosts.values():
        row = _host_row(v, now)
        s = v.sample
        if s is None or row.status == "down" or s["state"] in DRIVER_DOWN_STATES:
            out.append(HostGroup(row, ()))
            continue
        usable = row.status == "up" and s["state"] in USABLE_STATES
        holders = gpu_holders(state, v.name)
        gpus: list[GpuRow] = []
        for g in s["gpus"]:
            idx = g["index"]
            if idx is None:
                continue
            hist = v.history.get(idx)
            # only the tail: the deque holds up to 15 minutes of points
            tail = (
                list(islice(reversed(hist), history_points))[::-1]
                if hist and history_points > 0
                else []
            )
            gpu_row = _gpu_row(v.name, idx, g, tail, holders, usable)
            xs = v.gpu_xids(idx)
            if xs is not None and xs.headline is not None:
                gpu_row = replace(
                    gpu_row,
                    xid=xs.line,
                    xid_code=xs.headline.xid,
                    xid_severe=xs.headline.severe or xs.drain,
                )
            gpus.append(gpu_row)
        out.append(HostGroup(row, tuple(sorted(gpus, key=lambda r: r.index))))
    return out


def _gpu_row(
    host: str,
    idx: int,
    g: GpuRecord,
    tail: Sequence[GpuPoint],
    holders: dict[int, list[GpuHolder]] | None,
    usable: bool,
) -> GpuRow:
    gpm = g["gpm"]
    reasons = g["throttle_reasons"]
    return GpuRow(
        key=f"gpu:{host}:{idx}",
        host=host,
        index=idx,
        name=g["name"] or None,
        lost=g["lost"],
        util_pct=_num(g["util_gpu_pct"]),
        mem_used_mib=_num(g["mem_used_mib"]),
        mem_total_mib=_num(g["mem_total_mib"]),
        temp_c=_num(g["temp_c"]),
        fan_pct=_num(g["fan_pct"]),
        power_w=_num(g["power_w"]),
        power_limit_w=_num(g["power_limit_w"]),
        sm_activity_pct=_num(gpm["sm_activity_pct"]) if gpm else None,
        throttle_reasons=tuple(reasons) if reasons is not None else None,
        history=tuple(None if p.util_pct is None else float(p.util_pct) for p in tail),
        users=None if holders is None else _users(holders.get(idx, [])),
        usable=usable,
        pstate=g["pstate"] or None,
        sm_clock_mhz=_num(g["sm_clock_mhz"]),
        tensor_activity_pct=_num(gpm["tensor_activity_pct"]) if gpm else None,
        dram_bw_util_pct=_num(gpm["dram_bw_util_pct"]) if gpm else None,
        ecc_uncorrected=_num(g["ecc_volatile_uncorrected"]),
        mem_clock_mhz=_num(g["mem_clock_mhz"]),
        sm_clock_max_mhz=_num(g["sm_clock_max_mhz"]),
        mem_clock_max_mhz=_num(g["mem_clock_max_mhz"]),
        unsupported=frozenset(g["unsupported"]),
    )


# -- sorting ---------------------------------------------------------------------------------

_GPU_VALUE: dict[str, Callable[[GpuRow], float | None]] = {
    "util": lambda r: r.util_pct,
    "mem": lambda r: r.mem_used_mib,
    "temp": lambda r: r.temp_c,
    "power": lambda r: r.power_w,
}


def _ordered(
    items: Sequence[Any], value: Callable[[Any], float | None], descending: bool
) -> list[Any]:
    """Stable sort by value, unknown (``None``) last in either direction."""
    known = [(v, x) for x in items if (v := value(x)) is not None]
    unknown = [x for x in items if value(x) is None]
    known.sort(key=lambda vx: vx[0], reverse=descending)
    return [x for _, x in known] + unknown


def sort_groups(
    groups: Sequence[HostGroup], key: str = "host", descending: bool = False
) -> list[HostGroup]:
    """Order hosts and their GPUs by a column; a GPU stays under its host.

    ``host``: hosts in the given (profile) order, GPUs by index; ``descending`` reverses both.
    ``util``/``mem``/``temp``/``power`` (utilization %, memory used MiB, temperature C,
    power W): GPUs ordered within each host, and hosts by their first GPU's value after that
    (the busiest host first when descending). Unknown values and hosts without GPUs go last
    in either direction; ties keep the host order.

    Raises:
        ValueError: ``key`` is not one of :data:`SORT_KEYS`.
    """
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort key {key!r}; one of {', '.join(SORT_KEYS)}")
    if key == "host":
        if not descending:
            return list(groups)
        return [HostGroup(g.host, tuple(reversed(g.gpus))) for g in reversed(groups)]
    value = _GPU_VALUE[key]
    inner = [replace(g, gpus=tuple(_ordered(g.gpus, value, descending))) for g in groups]

    def head(g: HostGroup) -> float | None:
        return value(g.gpus[0]) if g.gpus else None

    return _ordered(inner, head, descending)


# -- filtering -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One word of a filter query.

    Attributes:
        field: ``text`` (host, model, job id or name), ``host``, ``job``, ``model``, or the
            words ``free`` / ``busy``.
        value: the lower-cased text to find (empty for ``free``/``busy``).
    """

    field: Literal["text", "host", "job", "model", "free", "busy"]
    value: str


def parse_query(query: str) -> list[QueryTerm]:
    """Split a filter query into terms (whitespace-separated, case-insensitive).

    ``free`` and ``busy`` are words on their own; ``host:NAME``, ``job:ID`` and
    ``model:TEXT`` match only that field (a substring); any other word matches the host
    name, the GPU model, or a job id or name using the GPU. An empty qualifier
    (``host:``) matches everything.
    """
    terms: list[QueryTerm] = []
    for word in query.lower().split():
        if word == "free":
            terms.append(QueryTerm("free", ""))
        elif word == "busy":
            terms.append(QueryTerm("busy", ""))
        elif word.startswith("host:"):
            terms.append(QueryTerm("host", word[5:]))
        elif word.startswith("job:"):
            terms.append(QueryTerm("job", word[4:]))
        elif word.startswith("model:"):
            terms.append(QueryTerm("model", word[6:]))
        else:
            terms.append(QueryTerm("text", word))
    return terms


def _job_texts(r: GpuRow) -> list[str]:
    return [t.lower() for u in r.users or () for t in (u.job_id, u.job_name) if t]


def gpu_matches(r: GpuRow, terms: Iterable[QueryTerm]) -> bool:
    """Whether a GPU row matches every term (see :func:`parse_query`)."""
    for t in terms:
        if t.field == "free":
            ok = r.free
        elif t.field == "busy":
            ok = r.busy
        elif t.field == "host":
            ok = t.value in r.host.lower()
        elif t.field == "model":
            ok = t.value in (r.name or "").lower()
        elif t.field == "job":
            ok = any(t.value in j for j in _job_texts(r))
        else:
            ok = (
                t.value in r.host.lower()
                or t.value in (r.name or "").lower()
                or any(t.value in j for j in _job_texts(r))
            )
        if not ok:
            return False
    return True


def host_matches(h: HostRow, terms: Iterable[QueryTerm]) -> bool:
    """Whether a host row by itself matches every term: only host names (plain words and
    ``host:``) can; ``free``, ``busy``, ``job:`` and ``model:`` need a GPU."""
    for t in terms:
        if t.field not in ("text", "host") or t.value not in h.name.lower():
            return False
    return True


def filter_groups(groups: Sequence[HostGroup], query: str) -> list[HostGroup]:
    """Keep the GPUs matching ``query`` (all its terms) under their hosts.

    A host stays when any of its GPUs matches, or when the host itself matches (its name;
    then with the GPUs that match, e.g. none when it is down). An empty query keeps all.
    """
    terms = parse_query(query)
    if not terms:
        return list(groups)
    out = []
    for g in groups:
        gpus = tuple(r for r in g.gpus if gpu_matches(r, terms))
        if gpus or host_matches(g.host, terms):
            out.append(HostGroup(g.host, gpus))
    return out


# -- plain-text cells ------------------------------------------------------------------------

#: How a reading the GPU does not have prints (not applicable; unknown is ``?``).
NOT_APPLICABLE = "n/a"


def num_text(v: float | None, unit: str = "", *, na: bool = False) -> str:
    """A reading rounded to an integer with its unit; ``?`` when unknown, ``n/a`` when
    ``na`` (the GPU does not have the reading: :meth:`GpuRow.na`) and it is ``None``."""
    if v is None:
        return NOT_APPLICABLE if na else "?"
    return f"{v:.0f}{unit}"


def clock_text(mhz: float | None, max_mhz: float | None, *, na: bool = False) -> str:
    """``1500/1980 MHz``: a clock against its maximum (``?`` for an unknown side, ``n/a``
    for a clock the GPU does not report)."""
    return f"{num_text(mhz, na=na)}/{num_text(max_mhz, na=na)} MHz"


def bar(fraction: float | None, width: int) -> str:
    """A left-aligned bar of ``width`` cells in eighth blocks (``███▌      ``); ``fraction``
    is clamped to 0..1. Unknown is ``width`` spaces (the number next to it says ``?``)."""
    if width <= 0:
        return ""
    if fraction is None:
        return " " * width
    eighths = round(min(max(fraction, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


def util_text(pct: float | None, width: int = 6) -> str:
    """``███▌   42%``: a bar and the percentage (``?`` when unknown)."""
    return f"{bar(None if pct is None else pct / 100.0, width)}{num_text(pct, '%'):>5}"


def mem_text(used: float | None, total: float | None, width: int = 4) -> str:
    """``█ 17612/143771 MiB``: a bar of used/total and both numbers (``?`` when unknown)."""
    frac = used / total if used is not None and total else None
    return f"{bar(frac, width)} {num_text(used)}/{num_text(total)} MiB"


def power_text(power: float | None, limit: float | None, *, na: bool = False) -> str:
    """``691/700 W`` (``?`` for an unknown side; ``n/a`` with ``na``: no power reading)."""
    return f"{num_text(power, na=na)}/{num_text(limit, na=na)} W"


def throttle_text(reasons: Sequence[str] | None) -> str:
    """Active throttle reasons as short words (``pwr-cap,hw-therm``), ``-`` for none,
    ``?`` when unknown. ``gpu_idle`` is not shown."""
    if reasons is None:
        return "?"
    words = [THROTTLE_WORDS.get(r, r) for r in reasons if is_limit(r)]
    return ",".join(words) or "-"


def throttle_severity(
    reasons: Sequence[str] | None,
) -> Literal["unknown", "none", "limit", "slowdown"]:
    """How hard the clocks are held: ``slowdown`` (a thermal or hardware slowdown,
    ``schema.SLOWDOWN_REASONS``), ``limit`` (another reason, e.g. the power cap), ``none``
    (idle or no reason), ``unknown`` (the reasons could not be read)."""
    if reasons is None:
        return "unknown"
    if any(is_slowdown(r) for r in reasons):
        return "slowdown"
    return "limit" if any(is_limit(r) for r in reasons) else "none"


def sparkline(points: Sequence[float | None], width: int, top: float = 100.0) -> str:
    """The last ``width`` points as blocks ``▁▂▃▄▅▆▇█`` (0..``top``), right-aligned; an
    unknown point is ``?``, missing history is blank."""
    if width <= 0:
        return ""
    chars = []
    for p in list(points)[-width:]:
        if p is None:
            chars.append("?")
        else:
            level = round(min(max(p / top, 0.0), 1.0) * (len(SPARK_LEVELS) - 1))
            chars.append(SPARK_LEVELS[level])
    return "".join(chars).rjust(width)


def _command_text(command: str | None, limit: int) -> str:
    """``python3 …/matmul_load.py 90 16``: the program's base name, path arguments (``/``,
    ``.``, ``~``) with their directories shortened to ``…/``, cut to ``limit`` characters
    (``…`` at the end)."""
    if not command:
        return "?"
    prog, *args = command.split()
    words = [prog.rsplit("/", 1)[-1]]
    words += [
        "…/" + a.rsplit("/", 1)[-1] if a[:1] in "/.~" and "/" in a.rstrip("/") else a for a in args
    ]
    text = " ".join(words)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def user_text(u: GpuUser, command_limit: int = 40) -> str:
    """``ddp-x-1a2b3c n0 r0,r1`` for a job's node, ``pid 653 root python3 …`` otherwise
    (``[0123abcd4567]`` appended for a foreign process in a container)."""
    if u.job_id is not None:
        ranks = " " + ",".join(f"r{r}" for r in u.ranks) if u.ranks else ""
        return f"{u.job_id} n{u.node_rank}{ranks}"
    pid = u.pids[0] if u.pids else "?"
    s = f"pid {pid} {u.user or '?'} {_command_text(u.command, command_limit)}"
    return s + (f" [{u.container}]" if u.container else "")


def users_text(users: Sequence[GpuUser] | None, command_limit: int = 40) -> str:
    """Every user of a GPU, ``; ``-separated; ``-`` for none, ``?`` when unknown."""
    if users is None:
        return "?"
    return "; ".join(user_text(u, command_limit) for u in users) or "-"


def host_detail_text(h: HostRow) -> str:
    """What is wrong with a host, for people: the down reason, the driver problem, missing
    GPUs, Xids of GPUs without a row; empty when nothing is."""
    parts = []
    if h.status == "down":
        parts.append(h.error or "unreachable")
    if h.problem is not None:
        parts.append(h.problem + (f": {h.problem_detail}" if h.problem_detail else ""))
    if h.missing_gpus:
        parts.append(f"{len(h.missing_gpus)} GPU(s) missing: {', '.join(h.missing_gpus)}")
    parts.extend(h.xid_notes)
    if h.status == "stale" and h.age_s is not None:
        parts.append(f"no sample for {h.age_s:.0f}s")
    return "; ".join(parts)
