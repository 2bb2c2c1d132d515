"""The alert rules: pure functions from what the console knows (:class:`Inputs`) to
observations (:class:`Observation`: does a rule's condition hold on a subject, right now?).

No rule keeps state or does I/O: durations (``for_s``), firing, resolving, acks and silences
are the engine's (:mod:`console.alerts.engine`). A rule reports on each subject it can judge
now; a subject it cannot judge (its host is down or has not answered, the reading is unknown,
the job's log activity is unknown) gets no observation, which leaves that alert as it was:
an alert is resolved only by an observation that its condition no longer holds.

Sources, per rule:

- ``host_unreachable``: the fleet's host status (``down``: the SSH/telemetry connection
  failed; ``stale``: no sample for 3 intervals).
- ``gpu_lost``, ``ecc_uncorrected``, ``remapped_rows_pending``, ``gpu_temperature``,
  ``gpu_throttle``, ``gpu_memory_high``: each GPU record of the host's latest sample
  (``remote/telemetry/schema.py``), on hosts that stream (status ``ok``) and whose driver
  answered; ``gpu_lost`` also from the PCI bus ids the host reported before and no longer does.
- ``xid``: every sample's ``xid_events`` (collected as they arrive, see :class:`SeenXid`),
  decoded with NVIDIA's Xid catalogue (:data:`remote.telemetry.faults.XID_INFO`).
- ``job_failed``: the job record (state ``failed``, the first failure's reason and fix from
  ``console/jobs/status.py`` and ``console/jobs/diagnose.py``).
- ``job_hung``, ``straggler``, ``gpus_idle``: the GPUs a job's processes hold (the fleet's
  container -> job map and the process list, :func:`job_gpus`), their utilization
  (``util_gpu_pct``, %), and the time of the job's newest log line; ``straggler`` also each
  rank's load over a window (GPM SM activity, power, or a CPU rank's CPU from the agent's
  ``ranks``) and what its GPU and host show (:mod:`console.fleet.straggler`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from console.alerts.config import (
    AlertsConfig,
    GpuMemoryHighRule,
    GpusIdleRule,
    GpuTemperatureRule,
    GpuThrottleRule,
    JobFailedRule,
    JobHungRule,
    RuleConfig,
    StragglerRule,
    XidRule,
)
from console.alerts.model import Alert, DetailValue, RuleId, Severity, alert_key
from console.fleet.straggler import RankLoad, slowest
from console.jobs.status import first_failed, has_started, job_summary
from console.jobs.store import JobRecord
from console.throughput import RankRates, si
from remote.dockerlogs import parse_rfc3339_ns
from remote.telemetry.faults import XID_INFO
from remote.telemetry.schema import DRIVER_DOWN_STATES, GpuRecord, Sample, XidRecord

if TYPE_CHECKING:
    from console.fleet.state import FleetState

__all__ = [
    "RULES",
    "HostInput",
    "Inputs",
    "JobGpu",
    "JobInput",
    "Observation",
    "RuleContext",
    "SeenXid",
    "job_gpus",
    "node_started_at",
]

_SEVERITY_ORDER: dict[Severity, int] = {"info": 0, "warning": 1, "critical": 2}


# -- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostInput:
    """One host as the rules see it.

    Attributes:
        name: the host's name in the profile.
        status: ``connecting``, ``ok``, ``stale`` or ``down`` (``console/fleet/state.py``).
        error: why it is down, if it is.
        status_since: when it took that status (Unix s), if known.
        sample: its latest sample, or ``None`` before the first one.
        known_gpus: PCI bus id -> GPU index (``None`` if never known) of every GPU the host
            reported since the console started watching it.
    """

    name: str
    status: str
    error: str | None = None
    status_since: float | None = None
    sample: Sample | None = None
    known_gpus: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class JobGpu:
    """A GPU one of a job's processes holds.

    Attributes:
        host: the host.
        gpu: the GPU index there.
        node_rank: the job's node (container) the process runs in.
        rank: torchrun's global rank of the process, if known.
        util_pct: the GPU's utilization in the host's latest sample (%), or ``None``.
    """

    host: str
    gpu: int
    node_rank: int
    rank: int | None
    util_pct: float | None

    def label(self) -> str:
        """``a:gpu1 (n0 r1)``."""
        rank = f" r{self.rank}" if self.rank is not None else ""
        return f"{self.host}:gpu{self.gpu} (n{self.node_rank}{rank})"


@dataclass(frozen=True)
class JobInput:
    """One job as the rules see it.

    Attributes:
        job: its record (state, nodes, first failure).
        gpus: the GPUs its processes hold (empty: a CPU job, or not known: the hosts' process
            lists are unknown or its containers are not mapped yet).
        last_log_at: Unix s of its newest log line (Docker's timestamp), or when it started
            when it never wrote one; ``None`` when unknown (no ``job_hung`` verdict then).
        ranks: its ranks' loads and the causes their GPUs and hosts show
            (:func:`console.fleet.straggler.rank_loads`), for the ``straggler`` rule.
        rank_rates: each rank's own rate as its log reports it, where every rank logs one
            (:func:`console.throughput.rank_rates`), for the ``straggler`` rule.
    """

    job: JobRecord
    gpus: tuple[JobGpu, ...] = ()
    last_log_at: float | None = None
    ranks: tuple[RankLoad, ...] = ()
    rank_rates: RankRates | None = None


@dataclass(frozen=True)
class SeenXid:
    """An Xid event from a host's sample.

    Attributes:
        host: the host.
        record: the sample's ``xid_events`` entry.
        at: when it happened (the record's ``time``, else when the sample arrived; Unix s).
    """

    host: str
    record: XidRecord
    at: float


@dataclass(frozen=True)
class Inputs:
    """Everything the rules look at, at one moment.

    Attributes:
        hosts: host name -> host.
        jobs: job id -> job (unfinished jobs and recently finished ones).
        xids: Xid events not older than the ``xid`` rule's ``hold_s``.
        jobs_complete: ``jobs`` holds every job not removed (so a failed job missing from
            it was removed or replaced, and its alert can resolve).
        price_per_gpu_hour: USD per GPU hour (the profile's), or ``None``.
    """

    hosts: Mapping[str, HostInput] = field(default_factory=dict)
    jobs: Mapping[str, JobInput] = field(default_factory=dict)
    xids: Sequence[SeenXid] = ()
    jobs_complete: bool = True
    price_per_gpu_hour: float | None = None


# -- outputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """Whether a rule's condition holds on one subject now.

    Attributes:
        key: the alert's de-duplication key (:func:`console.alerts.model.alert_key`).
        rule: the rule.
        holds: the condition holds now.
        severity, summary, host, gpu, job, details: what the alert will carry.
        for_s: the condition must have held this long (s) before the alert fires.
        since: when the condition began, when the input knows (a host's ``down`` time, a
            failure's end time); otherwise the engine counts from its first observation.
        not_before: the condition cannot have begun before this (``job_hung``: the job's
            newest log line); a later value restarts the count, and an alert that fired is
            resolved when it moves past its ``for_s``.
    """

    key: str
    rule: RuleId
    holds: bool
    severity: Severity = "warning"
    summary: str = ""
    host: str | None = None
    gpu: int | None = None
    job: str | None = None
    for_s: float = 0.0
    since: float | None = None
    not_before: float | None = None
    details: Mapping[str, DetailValue] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know of the engine: the time and the alerts' states (read only).

    Attributes:
        now: the evaluation time (Unix s).
        firing: key -> alert, for every firing alert.
        pending: key -> since (Unix s), for conditions that hold and have not fired yet or
            are firing.
    """

    now: float
    firing: Mapping[str, Alert]
    pending: Mapping[str, float]

    def since(self, key: str) -> float:
        """When ``key``'s condition began holding (``now`` if it did not hold until now)."""
        alert = self.firing.get(key)
        if alert is not None:
            return alert.since
        return self.pending.get(key, self.now)


Rule = Callable[[Inputs, Any, RuleContext], Iterable[Observation]]


# -- helpers -----------------------------------------------------------------------------------


def _obs(
    rule: RuleId,
    cfg: RuleConfig,
    holds: bool,
    summary: str,
    *,
    host: str | None = None,
    gpu: int | None = None,
    job: str | None = None,
    part: str | None = None,
    severity: Severity | None = None,
    since: float | None = None,
    not_before: float | None = None,
    for_s: float | None = None,
    **details: DetailValue,
) -> Observation:
    return Observation(
        key=alert_key(rule, host=host, gpu=gpu, job=job, part=part),
        rule=rule,
        holds=holds,
        severity=severity or cfg.severity,
        summary=summary,
        host=host,
        gpu=gpu,
        job=job,
        for_s=cfg.for_s if for_s is None else for_s,
        since=since,
        not_before=not_before,
        details=MappingProxyType({**details, "for_s": cfg.for_s if for_s is None else for_s}),
    )


def _duration(seconds: float) -> str:
    """``45 s``, ``5 min``, ``2.5 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _gpu_hosts(inputs: Inputs) -> Iterator[tuple[HostInput, Sample]]:
    """Hosts whose GPU records can be judged now: streaming, with a sample whose driver
    answered."""
    for h in inputs.hosts.values():
        s = h.sample
        if h.status == "ok" and s is not None and s["state"] not in DRIVER_DOWN_STATES:
            yield h, s


def _gpus(sample: Sample) -> Iterator[tuple[int, GpuRecord]]:
    for g in sample["gpus"]:
        if g["index"] is not None and not g["lost"]:
            yield g["index"], g


def node_started_at(job: JobRecord) -> float | None:
    """The earliest start of a job's nodes (Docker's ``StartedAt``, Unix s), or ``None``."""
    starts = []
    for n in job.nodes:
        if n.started_at:
            try:
                starts.append(parse_rfc3339_ns(n.started_at) / 1e9)
            except ValueError:
                continue
    return min(starts) if starts else None


def _failed_at(job: JobRecord) -> float | None:
    """When the first failed node finished (Unix s), if known."""
    n = first_failed(job.nodes)
    if n is None or not n.finished_at:
        return None
    try:
        return parse_rfc3339_ns(n.finished_at) / 1e9
    except ValueError:
        return None


def job_gpus(state: FleetState) -> dict[str, tuple[JobGpu, ...]]:
    """Job id -> the GPUs its processes hold, from the fleet's container -> job map and each
    host's latest process list (a GPU shared by two ranks of the job counts once, with the
    lowest rank)."""
    out: dict[str, dict[tuple[str, int], JobGpu]] = {}
    for v in state.hosts.values():
        util = {g["index"]: g["util_gpu_pct"] for g in v.gpus() if g["index"] is not None}
        for p in v.processes() or []:
            cj = state.job_of(p["container_id"])
            idx = p["gpu_index"]
            if cj is None or idx is None:
                continue
            u = util.get(idx)
            mine = out.setdefault(cj.job_id, {})
            old = mine.get((v.name, idx))
            rank = p["rank"]
            if old is None or (rank is not None and (old.rank is None or rank < old.rank)):
                mine[(v.name, idx)] = JobGpu(
                    v.name, idx, cj.node_rank, rank, None if u is None else float(u)
                )
    return {j: tuple(sorted(g.values(), key=lambda x: (x.host, x.gpu))) for j, g in out.items()}


# -- host and GPU rules ------------------------------------------------------------------------


def host_unreachable(inputs: Inputs, cfg: RuleConfig, ctx: RuleContext) -> Iterator[Observation]:
    """A host ``down`` (connection failed) or ``stale`` (no sample for 3 intervals)."""
    for h in inputs.hosts.values():
        if h.status == "connecting":
            continue  # not answered yet: unknown (a failed first connect turns it down)
        bad = h.status in ("down", "stale")
        why = h.error or ("no sample for 3 intervals" if h.status == "stale" else "")
        yield _obs(
            "host_unreachable",
            cfg,
            bad,
            f"host {h.name} unreachable for {_duration(cfg.for_s)}+" + (f": {why}" if why else ""),
            host=h.name,
            since=h.status_since if bad else None,
            status=h.status,
            reason=why or None,
        )


def gpu_lost(inputs: Inputs, cfg: RuleConfig, ctx: RuleContext) -> Iterator[Observation]:
    """A GPU the host reported before is missing from its sample, or marked ``lost``."""
    for h, s in _gpu_hosts(inputs):
        present = {g["pci_bus_id"]: g for g in s["gpus"] if g["pci_bus_id"]}
        known: dict[str, int | None] = dict(h.known_gpus)
        for bus, rec in present.items():
            known.setdefault(bus, rec["index"])
        for bus, index in known.items():
            g = present.get(bus)
            lost = g is None or g["lost"]
            idx = g["index"] if g is not None and g["index"] is not None else index
            how = "missing from the host's GPU list" if g is None else "lost (NVML/driver)"
            yield _obs(
                "gpu_lost",
                cfg,
                lost,
                f"{h.name}: GPU {idx if idx is not None else bus} ({bus}) {how}",
                host=h.name,
                gpu=idx,
                part=None if idx is not None else bus,
                pci_bus_id=bus,
                state=s["state"],
                state_detail=s["state_detail"],
            )


def xid(inputs: Inputs, cfg: XidRule, ctx: RuleContext) -> Iterator[Observation]:
    """An Xid on a GPU within the last ``hold_s``; one alert per GPU and Xid number."""
    groups: dict[str, list[SeenXid]] = {}
    for ev in inputs.xids:
        if ev.record["xid"] in cfg.ignore:
            continue
        r = ev.record
        gpu = r["gpu_index"]
        part = f"xid{r['xid']}" if gpu is not None else f"{r['pci_bus_id'] or '?'}/xid{r['xid']}"
        groups.setdefault(alert_key("xid", host=ev.host, gpu=gpu, part=part), []).append(ev)
    for key, evs in groups.items():
        evs.sort(key=lambda e: e.at)
        last, first = evs[-1], evs[0]
        r = last.record
        number = r["xid"]
        meaning, cls = XID_INFO.get(number, (r["detail"] or f"Xid {number}", "info"))
        severity: Severity = cfg.severity
        if cls in ("reset", "lost"):
            severity = "critical"
        elif cls == "hw" and _SEVERITY_ORDER[severity] < _SEVERITY_ORDER["warning"]:
            severity = "warning"
        gpu = r["gpu_index"]
        where = f"GPU {gpu}" if gpu is not None else f"GPU {r['pci_bus_id'] or '?'}"
        holds = ctx.now - last.at <= cfg.hold_s
        pids = sorted({e.record["pid"] for e in evs if e.record["pid"] is not None})
        yield Observation(
            key=key,
            rule="xid",
            holds=holds,
            severity=severity,
            summary=f"{last.host}: {where} Xid {number}: {meaning}"
            + (f" ({len(evs)} times)" if len(evs) > 1 else ""),
            host=last.host,
            gpu=gpu,
            for_s=cfg.for_s,
            since=first.at,
            details=MappingProxyType(
                {
                    "xid": number,
                    "meaning": meaning,
                    "xid_class": cls,
                    "count": len(evs),
                    "last_at": last.at,
                    "pci_bus_id": r["pci_bus_id"],
                    "pids": ",".join(map(str, pids)) or None,
                    "detail": r["detail"],
                }
            ),
        )
    # an Xid alert whose events aged out of the inputs: over
    for key, alert in ctx.firing.items():
        if alert.rule == "xid" and key not in groups:
            yield Observation(
                key=key,
                rule="xid",
                holds=False,
                severity=alert.severity,
                summary=alert.summary,
                host=alert.host,
                gpu=alert.gpu,
            )


def ecc_uncorrected(inputs: Inputs, cfg: RuleConfig, ctx: RuleContext) -> Iterator[Observation]:
    """Volatile uncorrected ECC errors > 0 (``ecc_volatile_uncorrected``)."""
    for h, s in _gpu_hosts(inputs):
        for idx, g in _gpus(s):
            n = g["ecc_volatile_uncorrected"]
            if n is None:
                continue
            yield _obs(
                "ecc_uncorrected",
                cfg,
                n > 0,
                f"{h.name}: GPU {idx} has {n} uncorrected ECC error(s) since the driver loaded",
                host=h.name,
                gpu=idx,
                ecc_volatile_uncorrected=n,
            )


def remapped_rows_pending(
    inputs: Inputs, cfg: RuleConfig, ctx: RuleContext
) -> Iterator[Observation]:
    """Row remapping pending (``remapped_rows_pending``): the GPU needs a reset."""
    for h, s in _gpu_hosts(inputs):
        for idx, g in _gpus(s):
            pending = g["remapped_rows_pending"]
            if pending is None:
                continue
            yield _obs(
                "remapped_rows_pending",
                cfg,
                pending,
                f"{h.name}: GPU {idx} has remapped rows pending (reset the GPU when it is free)",
                host=h.name,
                gpu=idx,
            )


def gpu_temperature(
    inputs: Inputs, cfg: GpuTemperatureRule, ctx: RuleContext
) -> Iterator[Observation]:
    """``temp_c`` over ``limit_c``."""
    for h, s in _gpu_hosts(inputs):
        for idx, g in _gpus(s):
            t = g["temp_c"]
            if t is None:
                continue
            yield _obs(
                "gpu_temperature",
                cfg,
                t > cfg.limit_c,
                f"{h.name}: GPU {idx} at {t} C (limit {cfg.limit_c:g} C) for "
                f"{_duration(cfg.for_s)}+",
                host=h.name,
                gpu=idx,
                temperature_c=t,
                limit_c=cfg.limit_c,
            )


def gpu_throttle(inputs: Inputs, cfg: GpuThrottleRule, ctx: RuleContext) -> Iterator[Observation]:
    """Clocks held down by one of the configured ``throttle_reasons``."""
    wanted = set(cfg.reasons)
    for h, s in _gpu_hosts(inputs):
        for idx, g in _gpus(s):
            reasons = g["throttle_reasons"]
            if reasons is None:
                continue
            hit = [r for r in reasons if r in wanted]
            yield _obs(
                "gpu_throttle",
                cfg,
                bool(hit),
                f"{h.name}: GPU {idx} throttled ({', '.join(hit) or '-'}) for "
                f"{_duration(cfg.for_s)}+, SM clock {g['sm_clock_mhz']} MHz",
                host=h.name,
                gpu=idx,
                reasons=",".join(hit) or None,
                sm_clock_mhz=g["sm_clock_mhz"],
                power_w=g["power_w"],
                temperature_c=g["temp_c"],
            )


def gpu_memory_high(
    inputs: Inputs, cfg: GpuMemoryHighRule, ctx: RuleContext
) -> Iterator[Observation]:
    """``mem_used_mib`` above ``used_pct`` % of ``mem_total_mib``."""
    for h, s in _gpu_hosts(inputs):
        for idx, g in _gpus(s):
            used, total = g["mem_used_mib"], g["mem_total_mib"]
            if used is None or not total:
                continue
            pct = 100.0 * used / total
            yield _obs(
                "gpu_memory_high",
                cfg,
                pct > cfg.used_pct,
                f"{h.name}: GPU {idx} memory {pct:.1f} % used ({used}/{total} MiB) for "
                f"{_duration(cfg.for_s)}+",
                host=h.name,
                gpu=idx,
                used_pct=round(pct, 2),
                mem_used_mib=used,
                mem_total_mib=total,
            )


# -- job rules ---------------------------------------------------------------------------------


def _newer_same_name(inputs: Inputs, job: JobRecord) -> bool:
    return any(
        j.job.name == job.name and j.job.created_at > job.created_at for j in inputs.jobs.values()
    )


def job_failed(inputs: Inputs, cfg: JobFailedRule, ctx: RuleContext) -> Iterator[Observation]:
    """A job ended ``failed``; resolved when it is removed or a newer job of its name
    exists. Failures older than ``max_age_s`` when first seen are not raised."""
    seen: set[str] = set()
    for ji in inputs.jobs.values():
        job = ji.job
        key = alert_key("job_failed", job=job.name)
        if key in seen:
            continue
        if _newer_same_name(inputs, job):
            continue  # the newest job of the name speaks for it
        seen.add(key)
        failed = job.state == "failed" and job.removed_at is None
        at = _failed_at(job) if failed else None
        if at is not None:
            at = min(at, ctx.now)  # a host clock ahead of ours
        if failed and key not in ctx.firing:
            age = ctx.now - (at if at is not None else ctx.now)
            if age > cfg.max_age_s:
                continue  # history, not news
        f = job.failure or {}
        summary = job_summary(job) or "failed"
        yield _obs(
            "job_failed",
            cfg,
            failed,
            f"job {job.name} ({job.id}) failed: {summary}",
            job=job.name,
            since=at,
            job_id=job.id,
            diagnosis=summary,
            fix=f.get("fix"),
            cause=f.get("kind"),
            node=f.get("node"),
            node_host=f.get("host"),
            rank=f.get("rank"),
            exit_code=f.get("exit_code", job.exit_code),
        )
    if inputs.jobs_complete:
        for key, alert in ctx.firing.items():
            if alert.rule == "job_failed" and key not in seen:  # removed
                yield Observation(
                    key=key,
                    rule="job_failed",
                    holds=False,
                    severity=alert.severity,
                    summary=alert.summary,
                    job=alert.job,
                )


def _running(inputs: Inputs) -> Iterator[JobInput]:
    """Jobs whose containers run: ``running``, or ``pending`` with a started node (silent
    since its start: a hang before the first line is judged too)."""
    for ji in inputs.jobs.values():
        if (
            ji.job.state in ("running", "pending")
            and ji.job.removed_at is None
            and any(has_started(n) for n in ji.job.nodes)
        ):
            yield ji


def _finished_job_alerts(
    inputs: Inputs, rule: RuleId, ctx: RuleContext, running: set[str]
) -> Iterator[Observation]:
    """Resolve ``rule``'s alerts of jobs that stopped running (or were forgotten)."""
    for key, alert in ctx.firing.items():
        if alert.rule == rule and key not in running:
            name = alert.job
            gone = inputs.jobs_complete or any(
                j.job.name == name and j.job.state not in ("running", "pending")
                for j in inputs.jobs.values()
            )
            if gone:
                yield Observation(
                    key=key,
                    rule=rule,
                    holds=False,
                    severity=alert.severity,
                    summary=alert.summary,
                    job=name,
                )


def job_hung(inputs: Inputs, cfg: JobHungRule, ctx: RuleContext) -> Iterator[Observation]:
    """A running job with no log line and every GPU it holds under ``idle_pct`` % for
    ``for_s``. A job whose GPUs are not known (a CPU job, hosts without a process list) is
    judged by its log alone; ``gpu_use`` in the details says so."""
    keys: set[str] = set()
    for ji in _running(inputs):
        if ji.last_log_at is None:
            continue  # log activity unknown: no verdict
        job = ji.job
        key = alert_key("job_hung", job=job.name)
        keys.add(key)
        utils = [g.util_pct for g in ji.gpus]
        if ji.gpus and any(u is None for u in utils):
            continue  # a reading is missing: no verdict
        idle = all(u is not None and u < cfg.idle_pct for u in utils)
        gpu_use = (
            f"all {len(utils)} GPU(s) under {cfg.idle_pct:g} %"
            if ji.gpus
            else "GPU use unknown (no GPU process of the job seen)"
        )
        silent = ctx.now - ji.last_log_at
        yield _obs(
            "job_hung",
            cfg,
            idle,
            f"job {job.name} ({job.id}) looks hung: no log line for "
            f"{_duration(max(silent, 0.0))}, {gpu_use}",
            job=job.name,
            not_before=ji.last_log_at,
            job_id=job.id,
            last_log_at=ji.last_log_at,
            silent_s=round(silent, 1),
            gpu_use=gpu_use,
            gpus=len(ji.gpus),
        )
    yield from _finished_job_alerts(inputs, "job_hung", ctx, keys)


#: The least load the busiest rank must have to be judged (idle ranks are all alike).
STRAGGLER_FLOOR = {"sm_activity": 10.0, "power": 0.0, "cpu": 20.0}


def straggler(inputs: Inputs, cfg: StragglerRule, ctx: RuleContext) -> Iterator[Observation]:
    """A rank of a running job slows the others: its load is ``slower_pct`` % above the
    median of the others (:func:`console.fleet.straggler.slowest`), or its GPU idles (<
    ``idle_pct``) while every other one is busy (> ``busy_pct``: input-bound). The summary
    names the rank and the causes its GPU and host show."""
    keys: set[str] = set()
    for ji in _running(inputs):
        job = ji.job
        key = alert_key("straggler", job=job.name)
        gpus_known = len(ji.gpus) >= 2 and all(g.util_pct is not None for g in ji.gpus)
        slow = None
        if len(ji.ranks) >= 2:
            slow = slowest(ji.ranks, floor=STRAGGLER_FLOOR[ji.ranks[0].signal])
        logged = _slow_by_log(ji.rank_rates)
        if not gpus_known and slow is None and len(ji.ranks) < 2 and logged is None:
            continue  # nothing to judge it by
        keys.add(key)
        idle = [g for g in ji.gpus if g.util_pct is not None and g.util_pct < cfg.idle_pct]
        busy = [g for g in ji.gpus if g.util_pct is not None and g.util_pct > cfg.busy_pct]
        input_bound = (
            gpus_known and bool(idle) and bool(busy) and len(idle) + len(busy) == len(ji.gpus)
        )
        if input_bound:
            nodes = sorted({g.node_rank for g in idle})
            why = [
                c
                for r in ji.ranks
                for g in idle
                if r.host == g.host and r.gpu == g.gpu
                for c in r.causes
            ]
            text = (
                f"job {job.name} ({job.id}): {', '.join(g.label() for g in idle)} idle "
                f"(< {cfg.idle_pct:g} %) while its other {len(busy)} GPU(s) are busy "
                f"(> {cfg.busy_pct:g} %): input-bound, the others wait for it"
            )
            if why:
                text += ": " + "; ".join(dict.fromkeys(why))
            yield _obs(
                "straggler",
                cfg,
                True,
                text,
                job=job.name,
                job_id=job.id,
                kind="input_bound",
                idle_gpus=",".join(g.label() for g in idle),
                idle_nodes=",".join(map(str, nodes)),
                busy_gpus=len(busy),
            )
            continue
        holds = slow is not None and slow.slower_pct >= cfg.slower_pct
        fired = ctx.firing.get(key)
        if (
            holds
            and slow is not None
            and fired is not None
            and (
                fired.details.get("rank") == slow.rank.rank
                and fired.details.get("signal") == slow.rank.signal
            )
        ):
            # still the same rank: the alert keeps the sentence it fired with (the numbers of
            # a rank that is slow drift, and at the job's end its peers exit first)
            yield Observation(
                key=key,
                rule="straggler",
                holds=True,
                severity=cfg.severity,
                summary=fired.summary,
                job=job.name,
                for_s=cfg.for_s,
                details=fired.details,
            )
            continue
        if not holds and logged is not None and logged[1] >= cfg.slower_pct:
            rank, pct, sentence = logged
            yield _obs(
                "straggler",
                cfg,
                True,
                f"job {job.name} ({job.id}): {sentence}",
                job=job.name,
                job_id=job.id,
                kind="slow_rank",
                rank=rank,
                signal="log",
                slower_pct=round(pct, 1),
            )
            continue
        r = slow.rank if slow is not None else None
        yield _obs(
            "straggler",
            cfg,
            holds,
            f"job {job.name} ({job.id}): "
            + (slow.sentence() if slow is not None else "no rank stands out"),
            job=job.name,
            job_id=job.id,
            kind="slow_rank" if holds else None,
            rank=r.rank if r is not None else None,
            node=r.node_rank if r is not None else None,
            rank_host=r.host if r is not None else None,
            rank_gpu=r.gpu if r is not None else None,
            signal=r.signal if r is not None else None,
            slower_pct=round(slow.slower_pct, 1) if slow is not None else None,
            causes="; ".join(r.causes) if r is not None and r.causes else None,
        )
    yield from _finished_job_alerts(inputs, "straggler", ctx, keys)


def _slow_by_log(rates: RankRates | None) -> tuple[int, float, str] | None:
    """(rank, % slower, sentence) of the rank whose own logged rate is lowest against the
    median of the others, or ``None`` (fewer than two ranks, a median of 0, or one of its
    recent readings as fast as the others': jitter, not a straggler)."""
    if rates is None or len(rates.rates) < 2:
        return None
    rank = min(rates.rates, key=lambda r: (rates.rates[r], r))
    low = rates.rates[rank]
    med = statistics.median(v for r, v in rates.rates.items() if r != rank)
    if low <= 0 or med <= 0 or rates.peaks.get(rank, low) >= med:
        return None  # not slower in every one of its recent readings
    pct = (med / low - 1) * 100
    unit = rates.unit
    return (
        rank,
        pct,
        f"rank {rank} is ~{pct:.0f}% slower by its own log ({si(low)} {unit}, the others' "
        f"median {si(med)} {unit})",
    )


def gpus_idle(inputs: Inputs, cfg: GpusIdleRule, ctx: RuleContext) -> Iterator[Observation]:
    """Every GPU a running job holds under ``idle_pct`` %, with the money it burns:
    ``usd_per_hour`` = GPUs x ``price_per_gpu_hour``, ``usd_so_far`` over the idle time."""
    keys: set[str] = set()
    price = inputs.price_per_gpu_hour
    for ji in _running(inputs):
        if not ji.gpus or any(g.util_pct is None for g in ji.gpus):
            continue
        job = ji.job
        key = alert_key("gpus_idle", job=job.name)
        keys.add(key)
        holds = all(g.util_pct is not None and g.util_pct < cfg.idle_pct for g in ji.gpus)
        n = len(ji.gpus)
        idle_s = max(ctx.now - ctx.since(key), 0.0) if holds else 0.0
        per_hour = None if price is None else n * price
        so_far = None if per_hour is None else round(per_hour * idle_s / 3600.0, 2)
        money = (
            f", burning ${per_hour:.2f}/h (${so_far:.2f} so far)"
            if per_hour is not None and so_far is not None
            else ""
        )
        yield _obs(
            "gpus_idle",
            cfg,
            holds,
            f"job {job.name} ({job.id}) holds {n} idle GPU(s) (< {cfg.idle_pct:g} %) "
            f"for {_duration(idle_s)}{money}",
            job=job.name,
            job_id=job.id,
            gpus=n,
            idle_s=round(idle_s, 1),
            usd_per_hour=per_hour,
            usd_so_far=so_far,
        )
    yield from _finished_job_alerts(inputs, "gpus_idle", ctx, keys)


#: Rule id -> rule function (called with the rule's block of :class:`AlertsConfig`).
RULES: dict[RuleId, Rule] = {
    "host_unreachable": host_unreachable,
    "gpu_lost": gpu_lost,
    "xid": xid,
    "ecc_uncorrected": ecc_uncorrected,
    "remapped_rows_pending": remapped_rows_pending,
    "gpu_temperature": gpu_temperature,
    "gpu_throttle": gpu_throttle,
    "gpu_memory_high": gpu_memory_high,
    "job_failed": job_failed,
    "job_hung": job_hung,
    "straggler": straggler,
    "gpus_idle": gpus_idle,
}


def observe(
    inputs: Inputs, config: AlertsConfig, ctx: RuleContext
) -> Iterator[tuple[RuleId, list[Observation] | None]]:
    """Every rule's observations, in :data:`RULES` order; ``None`` for a disabled rule."""
    for rule_id, fn in RULES.items():
        cfg = config.rule(rule_id)
        yield rule_id, (list(fn(inputs, cfg, ctx)) if cfg.enabled else None)
