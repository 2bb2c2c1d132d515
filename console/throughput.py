"""How fast a job trains and what it costs, from its own log lines and the profile's price.

Pure. A job's recent lines (:class:`~console.jobs.logs.JobLogLine`, with Docker's timestamps)
go through :func:`console.progress.parse_progress`; :func:`throughput_of` turns the readings
of the job's leading rank into a :class:`Throughput`: the step and total, steps/s, the job's
training rate (tokens/s or samples/s, whichever it reports), TFLOP/s and MFU as reported, and
the ETA. :func:`job_cost` adds money at ``price_per_gpu_hour``: $/h, $ so far, and $ per
million tokens or per 1,000 samples. What the log does not say stays ``None`` (unknown):
gpuconsole never derives samples from steps (it does not know the batch size) nor FLOPs from
a model.

Steps/s is measured: the step counter's rise over the time between two of the rank's lines
(Docker's timestamps), over the last :data:`WINDOW_S` seconds of one run of rising steps (a
counter that falls back, as a per-epoch tqdm bar does, starts a new run). Where the lines are
too close in time to measure (less than :data:`MIN_SPAN_S` apart, or a Slurm job's lines,
timestamped when read), the rate the job prints (tqdm's it/s, a time per iteration) is used.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from console.progress import Progress, parse_progress

if TYPE_CHECKING:
    from console.jobs.logs import JobLogLine
    from console.jobs.store import JobRecord

RateUnit = Literal["tokens/s", "samples/s"]
"""The unit of a job's training rate."""

StepsSource = Literal["measured", "reported"]
"""Where steps/s came from: the step counter over time, or the rate the job printed."""

#: Seconds of a rank's most recent lines that steps/s is measured over.
WINDOW_S = 300.0
#: Shortest time between two lines that steps/s is measured over (s).
MIN_SPAN_S = 2.0
#: How many of a job's last lines are read for its progress (per job, all nodes merged).
TAIL_LINES = 400


@dataclass(frozen=True)
class ProgressPoint:
    """One progress reading of one rank.

    Attributes:
        ts_s: when the line was written (Unix s; Docker's timestamp).
        node_rank / rank: who wrote it (``rank`` ``None``: a line without torchrun's rank tag).
        progress: what the line says.
    """

    ts_s: float
    node_rank: int
    rank: int | None
    progress: Progress


@dataclass(frozen=True)
class Throughput:
    """How fast a job trains, from its latest progress lines.

    Attributes:
        step / total: the latest step counter and its total, as printed.
        epoch: the latest epoch, as printed.
        steps_per_s: steps (iterations) per second, or ``None``.
        steps_source: :data:`StepsSource` of ``steps_per_s``.
        rate: the job's training rate in ``rate_unit`` (a per-GPU rate times the world
            size), or ``None`` when the job reports none.
        rate_unit: ``tokens/s`` or ``samples/s`` (tokens when the job reports both).
        rate_per_gpu: ``rate`` per GPU when the job reported it per GPU, else ``None``.
        tflops: TFLOP/s per GPU, as reported.
        mfu_pct: model FLOPs utilization (%), as reported.
        loss: the latest training loss.
        eta_s: seconds until ``step`` reaches ``total`` at ``steps_per_s``, or ``None``.
        at_s: when the latest progress line was written (Unix s).
        rank: the rank whose lines these are (``None``: untagged lines).
        stalled_s: seconds since the last progress line when that is much longer than the
            job's usual gap between them (:func:`stall_after_s`): the rates and ETA are then
            unknown; ``None`` while progress comes.
    """

    step: int | None
    total: int | None
    epoch: float | None
    steps_per_s: float | None
    steps_source: StepsSource | None
    rate: float | None
    rate_unit: RateUnit | None
    rate_per_gpu: float | None
    tflops: float | None
    mfu_pct: float | None
    loss: float | None
    eta_s: float | None
    at_s: float
    rank: int | None
    stalled_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``throughput`` object of ``ps --json``'s ``progress`` (keys as the
        attributes; ``null`` when unknown; a NaN loss as ``null``)."""
        return {
            "step": self.step,
            "total": self.total,
            "epoch": self.epoch,
            "steps_per_s": self.steps_per_s,
            "steps_source": self.steps_source,
            "rate": self.rate,
            "rate_unit": self.rate_unit,
            "rate_per_gpu": self.rate_per_gpu,
            "tflops": self.tflops,
            "mfu_pct": self.mfu_pct,
            "loss": None if self.loss is None or math.isnan(self.loss) else self.loss,
            "eta_s": self.eta_s,
            "at": self.at_s,
            "rank": self.rank,
            "stalled_s": self.stalled_s,
        }


def progress_points(lines: Iterable[JobLogLine]) -> list[ProgressPoint]:
    """The progress readings among ``lines``, in their order (lines that say nothing about
    progress, a loss alone included, are left out)."""
    out: list[ProgressPoint] = []
    for line in lines:
        p = parse_progress(line.text)
        if p is not None and p.says_progress:
            out.append(ProgressPoint(line.ts_ns / 1e9, line.node_rank, line.rank, p))
    return out


def _leading(points: list[ProgressPoint]) -> list[ProgressPoint]:
    """The readings of the rank that speaks for the job: the lowest global rank that printed
    progress (trainers log from rank 0), else the untagged lines of the lowest node."""
    ranks = {p.rank for p in points if p.rank is not None}
    if ranks:
        r = min(ranks)
        return [p for p in points if p.rank == r]
    node = min(p.node_rank for p in points)
    return [p for p in points if p.node_rank == node]


def _measured_steps_per_s(points: list[ProgressPoint]) -> float | None:
    """The step counter's rise per second over the last :data:`WINDOW_S` s of its last run of
    rising values; ``None`` when fewer than two steps :data:`MIN_SPAN_S` apart."""
    stepped = [p for p in points if p.progress.step is not None]
    if len(stepped) < 2:
        return None
    last = stepped[-1]
    first = last
    for p in reversed(stepped[:-1]):
        if p.progress.step is None or first.progress.step is None:
            break
        if p.progress.step > first.progress.step or last.ts_s - p.ts_s > WINDOW_S:
            break  # the counter restarted after p (a new epoch's bar), or p is too old
        first = p
    span = last.ts_s - first.ts_s
    if span < MIN_SPAN_S or first.progress.step is None or last.progress.step is None:
        return None
    rise = last.progress.step - first.progress.step
    return rise / span if rise > 0 else None


def _latest(points: list[ProgressPoint], attr: str) -> tuple[ProgressPoint, float] | None:
    for p in reversed(points):
        v = getattr(p.progress, attr)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            return p, float(v)
    return None


def throughput_of(
    lines: Iterable[JobLogLine], *, world_size: int | None = None, now: float | None = None
) -> Throughput | None:
    """A job's :class:`Throughput` from its recent lines (any order of nodes; each node's in
    time order), or ``None`` when none says anything about progress.

    Args:
        lines: the job's last lines (:data:`TAIL_LINES` are plenty), with Docker's
            timestamps.
        world_size: the job's ranks, to turn a per-GPU rate into the job's; ``None`` when
            unknown (a per-GPU rate then gives no job rate).
        now: the time (Unix s) to judge a stall by; ``None``: never stalled.
    """
    return throughput_from(progress_points(lines), world_size=world_size, now=now)


#: A rank's rate is the mean of its last this many readings.
RANK_RATE_READINGS = 5


@dataclass(frozen=True)
class RankRates:
    """Each rank's own rate, where every rank logs one (``step N ... samples/s S`` on each).

    Attributes:
        unit: ``tokens/s``, ``samples/s`` or ``steps/s``: the first that two ranks or more
            report, in that order.
        rates: rank -> the mean of its last :data:`RANK_RATE_READINGS` readings in ``unit``.
        peaks: rank -> the highest of those readings (a rank slower in every reading is
            slower; one slow step is not).
    """

    unit: str
    rates: dict[int, float]
    peaks: dict[int, float] = field(default_factory=dict)


def rank_rates(points: list[ProgressPoint]) -> RankRates | None:
    """:class:`RankRates` from the progress readings of a job's ranks, or ``None`` when fewer
    than two ranks report a rate in the same unit. In synchronous data-parallel training
    every rank's rate counts its wait for the others, so they agree; a rank that reports a
    lower rate than the others (its own compute or input time) is slower."""
    for attr, unit in (
        ("tokens_per_s", "tokens/s"),
        ("samples_per_s", "samples/s"),
        ("it_per_s", "steps/s"),
    ):
        by_rank: dict[int, list[float]] = {}
        for p in points:
            v = getattr(p.progress, attr)
            if p.rank is not None and v is not None and not math.isnan(v) and v > 0:
                by_rank.setdefault(p.rank, []).append(float(v))
        if len(by_rank) >= 2:
            last = {r: vs[-RANK_RATE_READINGS:] for r, vs in sorted(by_rank.items())}
            return RankRates(
                unit,
                {r: sum(vs) / len(vs) for r, vs in last.items()},
                {r: max(vs) for r, vs in last.items()},
            )
    return None


def _recent(points: list[ProgressPoint], attr: str) -> list[float]:
    """The last :data:`RANK_RATE_READINGS` finite values of ``attr`` among ``points``."""
    vals = [
        float(v)
        for p in points
        if (v := getattr(p.progress, attr)) is not None and not math.isnan(v) and v > 0
    ]
    return vals[-RANK_RATE_READINGS:]


def stall_after_s(points: list[ProgressPoint]) -> float:
    """How long without a progress line before a job's rate is no longer its rate: five of
    the rank's usual gaps between progress lines, at least :data:`MIN_STALL_S`."""
    ts = [p.ts_s for p in points[-11:]]
    gaps = sorted(b - a for a, b in itertools.pairwise(ts) if b > a)
    usual = gaps[len(gaps) // 2] if gaps else 0.0
    return max(MIN_STALL_S, 5 * usual)


#: The least time without a progress line that counts as a stall (s).
MIN_STALL_S = 120.0


def throughput_from(
    points: list[ProgressPoint], *, world_size: int | None = None, now: float | None = None
) -> Throughput | None:
    """:func:`throughput_of` from readings already parsed (:func:`progress_points`); with
    ``now`` (Unix s), a job whose last progress line is older than :func:`stall_after_s` is
    stalled: its rates and ETA are unknown, ``stalled_s`` says since when."""
    if not points:
        return None
    mine = sorted(_leading(points), key=lambda p: p.ts_s)
    latest = mine[-1]
    steps = _measured_steps_per_s(mine)
    source: StepsSource | None = "measured" if steps is not None else None
    if steps is None:
        reported = _latest(mine, "it_per_s")
        if reported is not None and reported[1] > 0:
            steps, source = reported[1], "reported"
    step_at = _latest(mine, "step")
    step = int(step_at[1]) if step_at is not None else None
    total_at = _latest(mine, "total")
    total = int(total_at[1]) if total_at is not None else None
    rate: float | None = None
    unit: RateUnit | None = None
    per_gpu: float | None = None
    for attr, u in (("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s")):
        found = _latest(mine, attr)
        if found is None:
            continue
        point, _ = found
        value = statistics.fmean(_recent(mine, attr) or [found[1]])  # a few lines, not one
        unit = "tokens/s" if u == "tokens/s" else "samples/s"
        scope = point.progress.rate_scope
        printing = {p.rank for p in points if p.rank is not None and getattr(p.progress, attr)}
        if scope == "gpu":
            per_gpu = value
            rate = value * world_size if world_size else None
        elif scope is None and len(printing) >= 2:
            # every rank prints a rate of its own (the scope unsaid): a rank's, so the job's
            # is their mean times the ranks
            by_rank = [
                statistics.fmean(vals)
                for r in sorted(printing)
                if (vals := _recent([p for p in points if p.rank == r], attr))
            ]
            per_gpu = statistics.fmean(by_rank)
            rate = per_gpu * (world_size or len(printing))
        else:
            rate = value
        break
    stalled = None
    if now is not None and now - latest.ts_s > stall_after_s(mine):
        stalled = now - latest.ts_s
        steps = source = rate = per_gpu = None
    eta = None
    if steps and step is not None and total is not None and total >= step:
        eta = (total - step) / steps
    epoch = _latest(mine, "epoch")
    tflops = _latest(mine, "tflops")
    mfu = _latest(mine, "mfu_pct")
    loss = next((p.progress.loss for p in reversed(mine) if p.progress.loss is not None), None)
    return Throughput(
        step=step,
        total=total,
        epoch=epoch[1] if epoch else None,
        steps_per_s=steps,
        steps_source=source,
        rate=rate,
        rate_unit=unit,
        rate_per_gpu=per_gpu,
        tflops=tflops[1] if tflops and stalled is None else None,
        mfu_pct=mfu[1] if mfu and stalled is None else None,
        loss=loss,
        eta_s=eta,
        at_s=latest.ts_s,
        rank=latest.rank,
        stalled_s=stalled,
    )


@dataclass(frozen=True)
class JobCost:
    """What a job costs at the profile's price.

    Attributes:
        gpus: GPUs it holds.
        usd_per_hour: ``gpus`` x ``price_per_gpu_hour``.
        usd_so_far: over the time it has run (since its first node started).
        usd_per_unit: $ per million tokens (``per_unit`` ``Mtok``) or per 1,000 samples
            (``1k samples``) at its current rate, or ``None`` when no rate is known.
        per_unit: what ``usd_per_unit`` is per.
    """

    gpus: int
    usd_per_hour: float
    usd_so_far: float
    usd_per_unit: float | None
    per_unit: Literal["Mtok", "1k samples"] | None

    def as_dict(self) -> dict[str, Any]:
        """The ``cost`` object of ``ps --json``'s ``progress``."""
        return {
            "gpus": self.gpus,
            "usd_per_hour": round(self.usd_per_hour, 4),
            "usd_so_far": round(self.usd_so_far, 4),
            "usd_per_unit": None if self.usd_per_unit is None else round(self.usd_per_unit, 6),
            "per_unit": self.per_unit,
        }


def job_cost(
    gpus: int | None, price_per_gpu_hour: float | None, ran_s: float, tp: Throughput | None
) -> JobCost | None:
    """:class:`JobCost` of a job holding ``gpus`` GPUs for ``ran_s`` seconds; ``None`` when
    the GPU count or the price is unknown, or the job holds no GPU."""
    if not gpus or price_per_gpu_hour is None:
        return None
    per_hour = gpus * price_per_gpu_hour
    per_unit: float | None = None
    unit: Literal["Mtok", "1k samples"] | None = None
    if tp is not None and tp.rate and tp.rate_unit is not None:
        units_per_hour = tp.rate * 3600
        if tp.rate_unit == "tokens/s":
            per_unit, unit = per_hour / (units_per_hour / 1e6), "Mtok"
        else:
            per_unit, unit = per_hour / (units_per_hour / 1e3), "1k samples"
    return JobCost(gpus, per_hour, per_hour * max(0.0, ran_s) / 3600, per_unit, unit)


def spec_gpus(job: JobRecord) -> int | None:
    """GPUs the job asked for on all its nodes (``gpus_per_node`` a count or a list, times the
    nodes), ``None`` for ``all`` (the host's count, known from telemetry only)."""
    g = job.spec.get("gpus_per_node", "all")
    if isinstance(g, bool):
        return None
    if isinstance(g, int):
        return g * job.node_count
    if isinstance(g, list):
        return len(g) * job.node_count
    return None


def world_size(job: JobRecord, gpus: int | None = None) -> int | None:
    """The job's ranks: ``nproc_per_node`` (default: its GPUs per node, else 1) x nodes."""
    n = job.spec.get("nproc_per_node")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n * job.node_count
    if gpus is None:
        gpus = spec_gpus(job)
    if gpus == 0:
        return job.node_count
    return gpus


def ran_seconds(job: JobRecord, now: float) -> float:
    """Seconds since the job's first node started (Docker's ``StartedAt``) until ``now`` or
    its last node finished; 0 before any started."""
    starts = [_rfc3339(n.started_at) for n in job.nodes]
    begun = [s for s in starts if s is not None]
    if not begun:
        return 0.0
    ends = [_rfc3339(n.finished_at) for n in job.nodes]
    end = now
    if job.state not in ("pending", "running") and all(e is not None for e in ends):
        end = max(e for e in ends if e is not None)
    return max(0.0, end - min(begun))


def _rfc3339(text: str | None) -> float | None:
    """Docker's RFC 3339 time (nanoseconds, ``Z``) as Unix s; ``None`` for none or Docker's
    zero time (``0001-01-01T00:00:00Z``)."""
    if not text or text.startswith("0001-"):
        return None
    t = text.replace("Z", "+00:00")
    head, _, rest = t.partition(".")
    if rest:  # Python parses at most 6 fractional digits
        digits = "".join(c for c in rest if c.isdigit())
        tz = rest[len(digits) :]
        t = f"{head}.{digits[:6]}{tz}"
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        return None


# -- text ------------------------------------------------------------------------------------


def si(value: float) -> str:
    """``51.2k``, ``1.30M``, ``812``, ``3.42`` (3 significant digits, SI suffix)."""
    for suffix, n in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= n:
            return f"{value / n:.3g}{suffix}"
    return f"{value:.3g}"


def duration_text(seconds: float) -> str:
    """``42s``, ``5m``, ``3h12m``, ``2d4h``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def rate_text(tp: Throughput | None) -> str:
    """``51.2k tokens/s``, ``2.41 steps/s`` (when no training rate), ``stalled 5m`` or ``?``."""
    if tp is None:
        return "?"
    if tp.stalled_s is not None:
        return f"stalled {duration_text(tp.stalled_s)}"
    if tp.rate is not None and tp.rate_unit is not None:
        return f"{si(tp.rate)} {tp.rate_unit}"
    if tp.rate_per_gpu is not None and tp.rate_unit is not None:
        return f"{si(tp.rate_per_gpu)} {tp.rate_unit}/GPU"
    if tp.steps_per_s is not None:
        return f"{si(tp.steps_per_s)} steps/s"
    return "?"


def step_text(tp: Throughput | None) -> str:
    """``120/5000``, ``120`` or ``?``."""
    if tp is None or tp.step is None:
        return "?"
    return f"{tp.step}/{tp.total}" if tp.total is not None else str(tp.step)


def eta_text(tp: Throughput | None) -> str:
    """The ETA as :func:`duration_text`, or ``?``."""
    return "?" if tp is None or tp.eta_s is None else duration_text(tp.eta_s)


def usd(value: float) -> str:
    """``$7.00``, ``$1,234``, ``$0.0042``."""
    if value >= 1000:
        return f"${value:,.0f}"
    if value >= 0.1 or value == 0:
        return f"${value:.2f}"
    return f"${value:.2g}"


def throughput_lines(tp: Throughput | None, cost: JobCost | None, now: float) -> list[str]:
    """``describe``'s progress and cost lines (what is known only)."""
    out: list[str] = []
    if tp is not None:
        parts = [f"step {step_text(tp)}"] if tp.step is not None else []
        if tp.epoch is not None:
            parts.append(f"epoch {tp.epoch:g}")
        if tp.steps_per_s is not None:
            parts.append(f"{tp.steps_per_s:.3g} steps/s ({tp.steps_source})")
        if tp.rate is not None or tp.rate_per_gpu is not None:
            parts.append(rate_text(tp))
            if tp.rate is not None and tp.rate_per_gpu is not None:
                parts.append(f"{si(tp.rate_per_gpu)} {tp.rate_unit}/GPU")
        if tp.tflops is not None:
            parts.append(f"{tp.tflops:.4g} TFLOP/s/GPU")
        if tp.mfu_pct is not None:
            parts.append(f"MFU {tp.mfu_pct:.3g}%")
        if tp.loss is not None:
            parts.append(f"loss {tp.loss:.4g}")
        if tp.eta_s is not None:
            parts.append(f"ETA {duration_text(tp.eta_s)}")
        if tp.stalled_s is not None:
            parts.append(f"no progress line for {duration_text(tp.stalled_s)}: stalled?")
        out.append(
            "progress: " + ", ".join(parts) + f" (last line {duration_text(now - tp.at_s)} ago)"
        )
    if cost is not None:
        text = f"cost: {usd(cost.usd_per_hour)}/h ({cost.gpus} GPUs), {usd(cost.usd_so_far)} so far"
        if cost.usd_per_unit is not None:
            text += f", {usd(cost.usd_per_unit)} per {cost.per_unit}"
        out.append(text)
    return out


@dataclass(frozen=True)
class JobProgress:
    """A running job's progress and cost, as :meth:`console.service.Service.progress` reads
    them.

    Attributes:
        job_id: the job.
        throughput: what its log says, or ``None`` when it says nothing yet.
        cost: at the profile's price, or ``None`` (no price, GPU count unknown, CPU job).
        read_at: when the log was read (Unix s).
        last_line_at: when its newest line was written (Unix s), ``None`` without lines.
        error: why the log could not be read (one line), else ``None``.
        rank_rates: each rank's own rate, where the ranks log one (:func:`rank_rates`).
    """

    job_id: str
    throughput: Throughput | None
    cost: JobCost | None
    read_at: float
    last_line_at: float | None = None
    error: str | None = None
    rank_rates: RankRates | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"throughput": {...} | null, "cost": {...} | null, "read_at": ...,
        "last_line_at": ..., "error": ...}``."""
        return {
            "throughput": self.throughput.as_dict() if self.throughput else None,
            "cost": self.cost.as_dict() if self.cost else None,
            "read_at": self.read_at,
            "last_line_at": self.last_line_at,
            "error": self.error,
            "rank_rates": None
            if self.rank_rates is None
            else {
                "unit": self.rank_rates.unit,
                "rates": {str(r): v for r, v in self.rank_rates.rates.items()},
            },
        }
