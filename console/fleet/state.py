"""Fleet state: the latest sample of every host, bounded per-GPU history, jobs' GPU usage.

Pure state, no I/O: the monitor (``console/fleet/monitor.py``) or a replay feeds it samples
(schema v1, ``remote/telemetry/schema.py``) and ticks it; faces read it. Every sample is
read once on arrival (:func:`~remote.telemetry.schema.read_sample`: checked, older spellings
normalised) and kept as a typed :class:`~remote.telemetry.schema.Sample`.

Host status:

- ``connecting``: no sample yet;
- ``ok``: a sample arrived within the last 3 intervals;
- ``stale``: 3 intervals passed without a sample (the stream may be stuck);
- ``down``: the host cannot be reached (the error is kept).

A host whose samples say ``state != "ok"`` (no driver, GPU lost...) is ``ok`` as a stream but
unhealthy; :attr:`HostView.healthy` tells.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from remote.telemetry.schema import (
    DRIVER_DOWN_STATES,
    USABLE_STATES,
    GpuRecord,
    ProcessRecord,
    Sample,
    read_sample,
)

if TYPE_CHECKING:  # the fault parser is imported where samples carry Xids (CLI start-up)
    from remote.telemetry.faults import GpuXidSummary, XidEvent

#: Missed intervals after which a host is ``stale``.
STALE_AFTER_INTERVALS = 3
#: Xid events kept per host (the oldest go first).
XID_HISTORY_MAX = 2000


#: A Docker container id (a ``runtime: host`` node's id is its name instead).
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One point of a GPU's history.

    Attributes:
        t: the host's time of the sample (Unix seconds).
        util_pct: utilization.gpu (%), or ``None``.
        mem_used_mib: memory used (MiB), or ``None``.
        power_w: power draw (W), or ``None``.
        sm_activity_pct: GPM SM activity (%), or ``None``.
    """

    t: float
    util_pct: float | None
    mem_used_mib: float | None
    power_w: float | None
    sm_activity_pct: float | None


@dataclass
class HostView:
    """What the console knows of one host."""

    name: str
    status: str = "connecting"
    error: str | None = None
    sample: Sample | None = None
    last_rx: float | None = None
    samples: int = 0
    history: dict[int, deque[GpuPoint]] = field(default_factory=dict)
    #: (container id, torchrun rank) -> (host time, CPU % of one core) of each sample that
    #: listed that worker (``ranks``), as long as the GPU history
    rank_history: dict[tuple[str | None, int], deque[tuple[float, float | None]]] = field(
        default_factory=dict
    )
    known_gpus: dict[str, str] = field(default_factory=dict)
    #: PCI bus id (as the samples spell it) -> GPU index, every GPU seen (a GPU that fell off
    #: the bus keeps its index for its Xids).
    bus_index: dict[str, int] = field(default_factory=dict)
    #: Xid events of this boot, oldest first (at most :data:`XID_HISTORY_MAX`): from the
    #: host's kernel log (``kernel_log`` of the samples, parsed by ``faults.scan_kernel_log``),
    #: or from NVML's Xid events while the kernel log cannot be read.
    xid_events: list[XidEvent] = field(default_factory=list)
    #: where the kernel log is read (``kmsg``, ``journalctl``, ``dmesg``), ``None`` until it is.
    kernel_log_source: str | None = None
    #: why the host's kernel log cannot be read (the latest sample's reason), or ``None``.
    kernel_log_error: str | None = None
    _xid_gen: int = 0  # counts changes of xid_events (the summaries' cache key)
    _xid_cache: tuple[tuple[int, int], list[GpuXidSummary]] | None = None

    def xid_summaries(self) -> list[GpuXidSummary]:
        """One Xid summary per GPU with events (``faults.summarize_xids``: verdict, action,
        the chain's root as ``headline``), GPU indices mapped from the PCI bus ids."""
        key = (self._xid_gen, len(self.bus_index))
        if self._xid_cache is None or self._xid_cache[0] != key:
            from remote.telemetry.faults import summarize_xids

            self._xid_cache = (key, summarize_xids(self.xid_events, self.bus_index))
        return self._xid_cache[1]

    def gpu_xids(self, index: int) -> GpuXidSummary | None:
        """The Xid summary of the GPU with this index, or ``None``."""
        return next((x for x in self.xid_summaries() if x.gpu_index == index), None)

    def missing_gpus(self) -> list[str]:
        """PCI bus ids of GPUs seen on this host before but absent from its latest sample
        (a GPU that fell off the bus, or failed to probe after a reboot)."""
        if self.sample is None or self.sample["state"] in DRIVER_DOWN_STATES:
            return []
        now = {g["pci_bus_id"] for g in self.sample["gpus"] if not g["lost"]}
        return sorted(b for b in self.known_gpus if b not in now)

    @property
    def healthy(self) -> bool:
        """Streaming, and the host itself says ``ok``."""
        return self.status == "ok" and self.sample is not None and self.sample["state"] == "ok"

    def gpus(self) -> list[GpuRecord]:
        """The latest GPU records (empty before the first sample)."""
        return list(self.sample["gpus"]) if self.sample else []

    def processes(self) -> list[ProcessRecord] | None:
        """The latest process records, or ``None`` when unknown."""
        if not self.sample:
            return None
        procs = self.sample["processes"]
        return list(procs) if procs is not None else None


@dataclass(frozen=True)
class JobUsage:
    """A gpuconsole job's share of the fleet, from its containers' GPU processes.

    Attributes:
        job_id: the job.
        gpus: ``(host, gpu index)`` pairs its processes run on.
        mean_util_pct: mean utilization.gpu over those GPUs (%), or ``None`` if unknown.
        mem_used_mib: GPU memory its processes use (MiB), summed over the known values;
            ``None`` when no process's memory is known (MIG, nvidia-smi ``[N/A]``).
    """

    job_id: str
    gpus: tuple[tuple[str, int], ...]
    mean_util_pct: float | None
    mem_used_mib: float | None


@dataclass(frozen=True)
class ContainerJob:
    """Which job and node a container belongs to (from its labels)."""

    job_id: str
    job_name: str
    node_rank: int


class FleetState:
    """The fleet's telemetry state.

    Args:
        hosts: host names, in display order.
        interval: the sampling interval (s).
        history_s: how much history to keep per GPU (s); at least 10 minutes.
    """

    def __init__(
        self, hosts: Iterable[str], interval: float = 1.0, history_s: float = 900.0
    ) -> None:
        self.interval = interval
        self.maxlen = max(int(max(history_s, 600.0) / interval), 1)
        self.hosts: dict[str, HostView] = {h: HostView(h) for h in hosts}
        self.containers: dict[str, ContainerJob] = {}

    def host(self, name: str) -> HostView:
        """The view of a host (added on first sight)."""
        if name not in self.hosts:
            self.hosts[name] = HostView(name)
        return self.hosts[name]

    def on_sample(self, host: str, sample: Sample, rx: float | None = None) -> None:
        """Take one sample of a host (``rx``: local receive time, monotonic seconds).

        ``sample`` is a decoded JSON sample (a stream's or a recording's); it is normalised in
        place by :func:`~remote.telemetry.schema.read_sample` and kept as a ``Sample``.

        Raises:
            ValueError: ``sample`` is not a schema-1 sample (the message names the field).
        """
        typed = read_sample(sample)
        v = self.host(host)
        v.sample = typed
        v.last_rx = time.monotonic() if rx is None else rx
        v.status = "ok"
        v.error = None
        v.samples += 1
        t = float(typed["host_time"] or 0.0)
        for g in typed["gpus"]:
            if g["pci_bus_id"]:
                v.known_gpus.setdefault(g["pci_bus_id"], g["name"] or "?")
                if g["index"] is not None:
                    v.bus_index[g["pci_bus_id"]] = g["index"]
            idx = g["index"]
            if idx is None:
                continue
            hist = v.history.get(idx)
            if hist is None:
                hist = v.history[idx] = deque(maxlen=self.maxlen)
            gpm = g["gpm"]
            hist.append(
                GpuPoint(
                    t,
                    g["util_gpu_pct"],
                    g["mem_used_mib"],
                    g["power_w"],
                    gpm["sm_activity_pct"] if gpm else None,
                )
            )
        ranks = typed["ranks"]
        if ranks is not None:
            seen = set()
            for r in ranks:
                key = (r["container_id"], r["rank"])
                seen.add(key)
                rh = v.rank_history.get(key)
                if rh is None:
                    rh = v.rank_history[key] = deque(maxlen=self.maxlen)
                rh.append((t, r["cpu_pct"]))
            for key in [k for k in v.rank_history if k not in seen]:
                del v.rank_history[key]  # the worker exited
        _take_xids(v, typed)

    def on_down(self, host: str, error: str) -> None:
        """The host could not be reached."""
        v = self.host(host)
        v.status = "down"
        v.error = error

    def tick(self, now: float | None = None) -> list[str]:
        """Mark hosts ``stale`` after 3 missed intervals; returns the names that turned stale.

        A host whose last sample reported a fault state (no driver, ...) is polled slowly on
        purpose and never turns stale.
        """
        now = time.monotonic() if now is None else now
        turned = []
        for v in self.hosts.values():
            faulted = v.sample is not None and v.sample["state"] not in USABLE_STATES
            if (
                v.status == "ok"
                and v.last_rx is not None
                and not faulted
                and now - v.last_rx > STALE_AFTER_INTERVALS * self.interval
            ):
                v.status = "stale"
                turned.append(v.name)
        return turned

    def complete(self) -> bool:
        """Whether every host has delivered a sample or is known down."""
        return all(v.sample is not None or v.status == "down" for v in self.hosts.values())

    def set_containers(self, mapping: Mapping[str, ContainerJob]) -> None:
        """Container id -> job, from the hosts' container labels."""
        self.containers = dict(mapping)

    def job_of(self, container_id: str | None) -> ContainerJob | None:
        """The job a container belongs to, by full id or a 12+ hex prefix."""
        if not container_id:
            return None
        job = self.containers.get(container_id)
        if job is None and len(container_id) >= 12:
            for cid, j in self.containers.items():
                if cid.startswith(container_id) or container_id.startswith(cid):
                    return j
        return job

    def job_usage(self) -> dict[str, JobUsage]:
        """Per job: the GPUs its processes hold, their mean utilization and memory."""
        gpus: dict[str, set[tuple[str, int]]] = {}
        mem: dict[str, float] = {}
        for v in self.hosts.values():
            for p in v.processes() or []:
                job = self.job_of(p["container_id"])
                idx = p["gpu_index"]
                if job is None or idx is None:
                    continue
                gpus.setdefault(job.job_id, set()).add((v.name, idx))
                if p["used_mib"] is not None:  # unknown adds nothing (never counted as 0)
                    mem[job.job_id] = mem.get(job.job_id, 0.0) + p["used_mib"]
        out = {}
        for job_id, pairs in gpus.items():
            utils = []
            for host, idx in pairs:
                for g in self.hosts[host].gpus():
                    util = g["util_gpu_pct"]
                    if g["index"] == idx and util is not None:
                        utils.append(float(util))
            mean = sum(utils) / len(utils) if utils else None
            out[job_id] = JobUsage(job_id, tuple(sorted(pairs)), mean, mem.get(job_id))
        return out

    def snapshot(self) -> dict[str, Any]:
        """The fleet as JSON-ready data:
        ``{"hosts": [{name, status, error, missing_gpus, sample, jobs, xids, kernel_log}]}``.

        ``jobs``: the sample's GPU processes mapped to their job (pid, GPU, job id and name,
        node rank, torchrun rank);
        ``xids``: one entry per GPU with Xid events this boot (:func:`xid_json`);
        ``kernel_log``: ``{"source", "error"}`` (where the host's kernel log is read, or why it
        cannot be).
        """
        return {
            "hosts": [
                {
                    "name": v.name,
                    "status": v.status,
                    "error": v.error,
                    "missing_gpus": v.missing_gpus(),
                    "sample": v.sample,
                    "jobs": self._process_jobs(v.sample),
                    "xids": [xid_json(x) for x in v.xid_summaries()],
                    "kernel_log": {"source": v.kernel_log_source, "error": v.kernel_log_error},
                }
                for v in self.hosts.values()
            ]
        }

    def _process_jobs(self, sample: Sample | None) -> list[dict[str, Any]]:
        """The sample's GPU processes that belong to a gpuconsole job: ``pid``,
        ``gpu_index``, ``job_id``, ``job_name``, ``node_rank`` and torchrun's ``rank``."""
        out: list[dict[str, Any]] = []
        if sample is None:
            return out
        for p in sample["processes"] or []:
            job = self.job_of(p["container_id"])
            if job is not None:
                out.append(
                    {
                        "pid": p["pid"],
                        "gpu_index": p["gpu_index"],
                        "job_id": job.job_id,
                        "job_name": job.job_name,
                        "node_rank": job.node_rank,
                        "rank": p["rank"],
                    }
                )
        return out


def xid_json(x: GpuXidSummary) -> dict[str, Any]:
    """One GPU's Xid summary as JSON: ``gpu_index`` (``None`` for a GPU the samples no longer
    list), ``pci_bus_id``, ``xid`` (the chain's root), ``action``
    (``xid_catalog.Action``), ``text`` (``Xid 79 fallen off the bus: reboot``), ``verdict``,
    ``diagnosis``, ``counts`` (Xid -> events), ``pids``, ``last`` (the latest event's time as
    the kernel printed it)."""
    h = x.headline
    return {
        "gpu_index": x.gpu_index,
        "pci_bus_id": x.pci_bus_id,
        "xid": h.xid if h else None,
        "action": h.action if h else None,
        "text": x.line,
        "verdict": x.verdict,
        "diagnosis": x.diagnosis,
        "counts": {str(k): n for k, n in x.counts.items()},
        "pids": list(x.pids),
        "last": x.last.time_text,
    }


def _take_xids(v: HostView, s: Sample) -> None:
    """Add a sample's Xid events to the host's history: its kernel log lines when the agent
    read them (``since_boot`` replaces the history: an agent that started again re-reads the
    boot), else NVML's Xid events while the kernel log is not read."""
    from remote.telemetry.faults import XidEvent, scan_kernel_log

    v.kernel_log_error = s["errors"].get("kernel_log")
    kl = s["kernel_log"]
    new: list[XidEvent] = []
    if kl is not None:
        v.kernel_log_source = kl["source"]
        if kl["since_boot"] and v.xid_events:
            v.xid_events = []
            v._xid_gen += 1
        new = scan_kernel_log("\n".join(kl["lines"])).events
    elif v.kernel_log_source is None:
        for x in s["xid_events"]:
            when = x["time"]
            wall = datetime.fromtimestamp(when) if when is not None else None
            new.append(
                XidEvent(
                    xid=x["xid"],
                    pci_bus_id=x["pci_bus_id"] or f"GPU{x['gpu_index']}",
                    time_text=wall.isoformat(sep=" ", timespec="seconds") if wall else "",
                    wall_time=wall,
                    pid=x["pid"],
                    detail=x["detail"] or "",
                )
            )
    if new:
        v.xid_events.extend(new)
        del v.xid_events[:-XID_HISTORY_MAX]
        v._xid_gen += 1


@dataclass(frozen=True)
class GpuHolder:
    """A process holding a GPU, for people: pid, user, command, container and job."""

    pid: int
    user: str | None
    command: str | None
    container_id: str | None
    job: ContainerJob | None
    used_mib: float | None
    rank: int | None = None

    def describe(self) -> str:
        """``pid 123 (alice: python train.py) in container 0123abcd4567 (job x-1a2b3c n0 r1)``;
        a ``runtime: host`` node (no container) shows as ``on the host``.
        """
        who = ": ".join(x for x in (self.user, (self.command or "")[:60]) if x)
        s = f"pid {self.pid}" + (f" ({who})" if who else "")
        if self.container_id and _HEX64.fullmatch(self.container_id):
            s += f" in container {self.container_id[:12]}"
        elif self.container_id:
            s += " on the host"
        if self.job:
            rank = f" r{self.rank}" if self.rank is not None else ""
            s += f" (job {self.job.job_id} n{self.job.node_rank}{rank})"
        return s


def gpu_holders(state: FleetState, host: str) -> dict[int, list[GpuHolder]] | None:
    """GPU index -> processes holding it on a host; ``None`` when the list is unknown."""
    v = state.host(host)
    procs = v.processes()
    if procs is None:
        return None
    out: dict[int, list[GpuHolder]] = {g["index"]: [] for g in v.gpus() if g["index"] is not None}
    for p in procs:
        idx = p["gpu_index"]
        if idx is None:
            continue
        out.setdefault(idx, []).append(
            GpuHolder(
                p["pid"],
                p["user"],
                p["command"],
                p["container_id"],
                state.job_of(p["container_id"]),
                p["used_mib"],
                p["rank"],
            )
        )
    return out


def free_gpus(state: FleetState) -> dict[str, list[int]]:
    """Host -> indices of GPUs with no process, on healthy hosts whose process list is known.

    A lost GPU is never free.
    """
    out: dict[str, list[int]] = {}
    for v in state.hosts.values():
        usable = v.status == "ok" and v.sample is not None
        if not usable or v.sample is None or v.sample["state"] not in USABLE_STATES:
            continue
        holders = gpu_holders(state, v.name)
        if holders is None:
            continue
        lost = {g["index"] for g in v.gpus() if g["lost"]}
        out[v.name] = sorted(i for i, hs in holders.items() if not hs and i not in lost)
    return out
