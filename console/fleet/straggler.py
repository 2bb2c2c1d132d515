"""Which rank slows a data-parallel job down, and why, from telemetry alone (pure).

In a data-parallel job every step ends in a collective (the gradient all-reduce): the slowest
rank computes while the others wait for it. Waiting in NCCL keeps a GPU's utilization.gpu
high (a kernel is resident) but its SMs mostly idle and its power low; waiting in gloo blocks
the process, so its CPU drops. So the straggler is the rank that is *busier* than the others:

- **load** per rank, averaged over the last :data:`WINDOW_S` seconds of samples, from the
  best signal every rank of the job has: NVML GPM SM activity (Hopper and newer), else power
  draw, else (a CPU job) the worker process's CPU time (the agent's ``ranks``);
- the rank with the highest load against the median of the others: if every step waits for
  it, its share of busy time over theirs estimates how much slower it is
  (``load / median - 1``: 80 % SM activity against 65 % is ~23 % slower);
- an **input-bound** rank is the opposite case: its GPU idles (waiting for data) while the
  others' are busy (waiting for it in the collective); the ``straggler`` alert names both.

For each rank, the readings that would explain it (:func:`causes`), from its GPU and host in
the same sample: SM clock held below its maximum with the throttle reason, temperature, a
lower power limit than the job's other GPUs, a PCIe link below the generation/width the GPU
and system allow, uncorrected ECC errors or pending row remaps, Xids, the host's CPU
saturated or memory swapping, other processes on the GPU. Sources: the sample schema
(``remote/telemetry/schema.py``) and NVML's clock-event reasons as the agent names them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from remote.telemetry.schema import SLOWDOWN_REASONS, GpuRecord, HostRecord, ProcessRecord

if TYPE_CHECKING:
    from console.fleet.state import FleetState, HostView
    from console.jobs.store import JobRecord

Signal = Literal["sm_activity", "power", "cpu"]
"""The load a job's ranks are compared by (the best one every rank has)."""

#: Seconds of samples a rank's load is averaged over.
WINDOW_S = 60.0
#: A host CPU this busy (%) is saturated.
HOST_CPU_SATURATED_PCT = 95.0
#: Pages swapped in and out per second above which a host is swapping.
SWAPPING_PAGES_PER_S = 100.0
#: A GPU this much hotter than the median of the job's other GPUs (C) is said to be hot.
HOTTER_C = 10
#: An SM clock below this share of the job's other GPUs' median (or of its maximum, with a
#: limit reason) is held down.
CLOCK_HELD = 0.9

_UNIT = {"sm_activity": "% SM activity", "power": " W", "cpu": "% CPU"}


@dataclass(frozen=True)
class RankLoad:
    """One rank of a running job as the straggler rule sees it.

    Attributes:
        rank: torchrun's global rank (``None``: a GPU process whose rank is unreadable).
        node_rank: the job's node it runs in.
        host: that node's host.
        gpu: the GPU index it runs on, ``None`` for a CPU rank.
        signal: what ``load`` is.
        load: the mean of ``signal`` over the window (% or W), ``None`` when unknown.
        util_pct: its GPU's mean utilization.gpu over the window (%), ``None`` for a CPU
            rank or when unknown.
        causes: readings of its GPU and host that would slow it (:func:`causes`), each a
            clause ("GPU 5 on host b is held at 1410 MHz by hw_thermal, 87 C").
    """

    rank: int | None
    node_rank: int
    host: str
    gpu: int | None
    signal: Signal
    load: float | None
    util_pct: float | None
    causes: tuple[str, ...] = ()

    def who(self) -> str:
        """``rank 5`` (``n1 GPU 3`` when its rank is unknown)."""
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"n{self.node_rank} GPU {self.gpu}" if self.gpu is not None else f"n{self.node_rank}"

    def load_text(self) -> str:
        """``81% SM activity``, ``612 W``, ``97% CPU``."""
        return "?" if self.load is None else f"{self.load:.0f}{_UNIT[self.signal]}"


@dataclass(frozen=True)
class SlowRank:
    """The busiest rank of a job against the others.

    Attributes:
        rank: that rank.
        median: the median load of the other ranks (same unit).
        slower_pct: ``(load / median - 1) x 100``: how much slower it is, if every step waits
            for it.
    """

    rank: RankLoad
    median: float
    slower_pct: float

    def sentence(self) -> str:
        """``rank 5 is at least ~23% slower (81% SM activity, the others' median 66%): GPU 5 on
        host b is held at 1410 MHz by hw_thermal, 87 C``. "At least": a waiting rank's GPU
        still shows some activity (NCCL's kernels), so the ratio understates the gap."""
        r = self.rank
        unit = _UNIT[r.signal]
        gap = (
            f"~{self.slower_pct:.0f}%"
            if self.slower_pct < 100
            else f"~{1 + self.slower_pct / 100:.3g}x"  # the others wait most of each step
        )
        text = (
            f"{r.who()} is at least {gap} slower ({r.load_text()}, the others' median "
            f"{self.median:.0f}{unit})"
        )
        if r.causes:
            return f"{text}: " + "; ".join(r.causes)
        where = f"GPU {r.gpu} on host {r.host}" if r.gpu is not None else f"host {r.host}"
        return (
            f"{text}; no hardware cause seen on {where}: it may do more work than the others "
            "(uneven batches or model split) or wait on its own input"
        )


#: The least gap between the busiest rank's load and the others' median that counts, per
#: signal (points of %, or W): below it, the difference is the samples' noise (two CPU ranks
#: at 24 % and 22 % of a core are alike however the ratio reads).
MIN_GAP = {"sm_activity": 5.0, "power": 20.0, "cpu": 10.0}


def slowest(loads: Sequence[RankLoad], *, floor: float = 0.0) -> SlowRank | None:
    """The rank with the highest load against the median of the others, or ``None`` (fewer
    than two ranks with a known load, the busiest under ``floor``, the others' median 0, or
    a gap under :data:`MIN_GAP` of the signal).
    """
    known = [r for r in loads if r.load is not None]
    if len(known) < 2:
        return None
    top = max(known, key=lambda r: (r.load or 0.0, -(r.rank or 0)))
    if top.load is None or top.load < floor:
        return None
    others = [r.load for r in known if r is not top and r.load is not None]
    med = statistics.median(others)
    if med <= 0 or top.load - med < MIN_GAP[top.signal]:
        return None
    return SlowRank(top, med, (top.load / med - 1.0) * 100.0)


# -- the loads ------------------------------------------------------------------------------


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _node_host(job: JobRecord, node_rank: int) -> str | None:
    return next((n.host for n in job.nodes if n.node_rank == node_rank), None)


def rank_loads(
    state: FleetState, jobs: Iterable[JobRecord], *, window_s: float = WINDOW_S
) -> dict[str, list[RankLoad]]:
    """Job id -> every rank of that job seen in the fleet's latest samples, with its load over
    the last ``window_s`` seconds and the causes its GPU and host show: GPU ranks when the
    job has GPU processes, else CPU ranks (the agent's ``ranks``). One pass over the hosts
    for all ``jobs``. A worker is taken only from the host its node runs on (two test hosts
    on one machine both list every container's workers)."""
    wanted = {j.id: j for j in jobs}
    gpu_ranks: dict[str, list[tuple[HostView, int, int, int | None]]] = {}
    cpu_ranks: dict[str, dict[int, tuple[HostView, int, list[float | None]]]] = {}
    seen: set[tuple[str, int]] = set()
    for v in state.hosts.values():
        for p in v.processes() or ():
            cj = state.job_of(p["container_id"])
            idx = p["gpu_index"]
            job = wanted.get(cj.job_id) if cj is not None else None
            if job is None or cj is None or idx is None or (v.name, idx) in seen:
                continue
            if _node_host(job, cj.node_rank) not in (None, v.name):
                continue
            seen.add((v.name, idx))
            gpu_ranks.setdefault(job.id, []).append((v, idx, cj.node_rank, p["rank"]))
        for (cid, rank), hist in v.rank_history.items():
            cj = state.job_of(cid)
            job = wanted.get(cj.job_id) if cj is not None else None
            if job is None or cj is None or not hist:
                continue
            if _node_host(job, cj.node_rank) not in (None, v.name):
                continue
            end = hist[-1][0]
            window = [cpu for t, cpu in hist if t >= end - window_s]
            cpu_ranks.setdefault(job.id, {}).setdefault(rank, (v, cj.node_rank, window))
    out: dict[str, list[RankLoad]] = {}
    for job_id, job in wanted.items():
        if job_id in gpu_ranks:
            out[job_id] = _gpu_loads(state, job, gpu_ranks[job_id], window_s)
        elif job_id in cpu_ranks:
            out[job_id] = [
                RankLoad(
                    rank,
                    node,
                    v.name,
                    None,
                    "cpu",
                    _mean(window),
                    None,
                    tuple(_host_causes(v.name, v.sample["host"] if v.sample else None)),
                )
                for rank, (v, node, window) in sorted(cpu_ranks[job_id].items())
            ]
    return {job_id: _own_host_causes(state, loads) for job_id, loads in out.items()}


def _own_host_causes(state: FleetState, loads: list[RankLoad]) -> list[RankLoad]:
    """Drop a host's CPU or swapping from a rank's causes when a host of another of the job's
    ranks shows the same: shared by the job, it does not set this rank apart (two test hosts
    on one machine are both saturated by the job itself)."""
    flags: dict[str, set[str]] = {}
    for r in loads:
        if r.host not in flags:
            v = state.hosts.get(r.host)
            sample = v.sample if v is not None else None
            host = sample["host"] if sample is not None else None
            kinds = {_host_kind(c, r.host) for c in _host_causes(r.host, host)}
            flags[r.host] = {k for k in kinds if k is not None}
    out = []
    for r in loads:
        elsewhere: set[str] = set().union(*(flags[h] for h in flags if h != r.host))
        keep = tuple(c for c in r.causes if _host_kind(c, r.host) not in elsewhere)
        out.append(r if keep == r.causes else replace(r, causes=keep))
    return out


def _host_kind(cause: str, host: str) -> str | None:
    """``cpu`` or ``swap`` for a host cause of ``host`` (:func:`_host_causes`), else None."""
    if cause.startswith(f"host {host}'s CPU is "):
        return "cpu"
    if cause.startswith(f"host {host} is swapping"):
        return "swap"
    return None


def _gpu_loads(
    state: FleetState,
    job: JobRecord,
    ranks: list[tuple[HostView, int, int, int | None]],
    window_s: float,
) -> list[RankLoad]:
    def window(v: HostView, idx: int) -> list[tuple[float | None, float | None, float | None]]:
        hist = v.history.get(idx) or ()
        if not hist:
            return []
        end = hist[-1].t
        return [(p.sm_activity_pct, p.power_w, p.util_pct) for p in hist if p.t >= end - window_s]

    points = {(v.name, idx): window(v, idx) for v, idx, _, _ in ranks}
    sm = {k: _mean(p[0] for p in pts) for k, pts in points.items()}
    power = {k: _mean(p[1] for p in pts) for k, pts in points.items()}
    signal: Signal = "sm_activity" if all(x is not None for x in sm.values()) else "power"
    loads = sm if signal == "sm_activity" else power
    gpus = {(v.name, idx): _gpu(v, idx) for v, idx, _, _ in ranks}
    records = [g for g in gpus.values() if g is not None]
    out = []
    for v, idx, node, rank in sorted(ranks, key=lambda r: (r[3] is None, r[3] or 0, r[2])):
        g = gpus[(v.name, idx)]
        peers = [x for x in records if x is not g]
        found = causes(v, g, peers, job_id=job.id, state=state) if g is not None else ()
        util = _mean(p[2] for p in points[(v.name, idx)])
        out.append(RankLoad(rank, node, v.name, idx, signal, loads[(v.name, idx)], util, found))
    return out


def _gpu(v: HostView, idx: int) -> GpuRecord | None:
    return next((g for g in v.gpus() if g["index"] == idx and not g["lost"]), None)


# -- the causes -----------------------------------------------------------------------------


def causes(
    v: HostView,
    g: GpuRecord,
    peers: Sequence[GpuRecord],
    *,
    job_id: str | None = None,
    state: FleetState | None = None,
) -> tuple[str, ...]:
    """What on GPU ``g`` of host ``v`` (and the host itself) would make its rank slower than
    the ranks on ``peers`` (the job's other GPUs), one clause each, most telling first."""
    idx = g["index"]
    here = f"GPU {idx} on host {v.name}"
    out: list[str] = []
    clock, top = g["sm_clock_mhz"], g["sm_clock_max_mhz"]
    peer_clock = _median([p["sm_clock_mhz"] for p in peers])
    # a reason most of the other GPUs share (every GPU of a busy job at its power cap) is the
    # job's load, not this GPU's cause
    shared = {
        r
        for r in {r for p in peers for r in (p["throttle_reasons"] or [])}
        if 2 * sum(r in (p["throttle_reasons"] or []) for p in peers) > len(peers)
    }
    reasons = [r for r in (g["throttle_reasons"] or []) if r != "gpu_idle" and r not in shared]
    held_vs_max = clock is not None and top and clock < CLOCK_HELD * top and reasons
    held_vs_peers = clock is not None and peer_clock and clock < CLOCK_HELD * peer_clock
    temp, peer_temp = g["temp_c"], _median([p["temp_c"] for p in peers])
    hot = temp is not None and (
        temp >= 85 or (peer_temp is not None and temp >= peer_temp + HOTTER_C)
    )
    if (held_vs_max or held_vs_peers) and (reasons or hot):
        slow = [r for r in reasons if r in SLOWDOWN_REASONS] or reasons
        text = f"{here} is held at {clock} MHz"
        if peer_clock:
            text += f" (the others {peer_clock:.0f} MHz)"
        elif top:
            text += f" (max {top} MHz)"
        if slow:
            text += " by " + ", ".join(slow)
        if temp is not None and (hot or any("thermal" in r for r in slow)):
            text += f", {temp} C"
        out.append(text)
    elif hot:
        out.append(
            f"{here} runs at {temp} C" + (f" (the others {peer_temp:.0f} C)" if peer_temp else "")
        )
    limit, peer_limit = g["power_limit_w"], _median([p["power_limit_w"] for p in peers])
    if limit is not None and peer_limit and limit < 0.95 * peer_limit:
        out.append(f"{here} has its power limit at {limit:.0f} W (the others {peer_limit:.0f} W)")
    gen, gen_max, width, width_max = (
        g["pcie_gen"],
        g["pcie_gen_max"],
        g["pcie_width"],
        g["pcie_width_max"],
    )
    if (gen is not None and gen_max and gen < gen_max) or (
        width is not None and width_max and width < width_max
    ):
        out.append(
            f"{here}'s PCIe link runs at Gen{gen or '?'} x{width or '?'} "
            f"(the GPU and system allow Gen{gen_max or '?'} x{width_max or '?'})"
        )
    ecc = g["ecc_volatile_uncorrected"]
    if ecc:
        out.append(f"{here} has {ecc} uncorrected ECC error(s) since the driver loaded")
    if g["remapped_rows_pending"]:
        out.append(f"{here} has a row remap pending (it needs a reset)")
    if idx is not None and (x := v.gpu_xids(idx)) is not None:
        out.append(f"{here} logged {x.headline}")
    out += _host_causes(v.name, v.sample["host"] if v.sample is not None else None)
    if state is not None and idx is not None:
        others = _other_processes(state, v, idx, job_id)
        if others:
            out.append(f"{here} is shared with " + ", ".join(others))
    return tuple(out)


def _host_causes(name: str, host: HostRecord | None) -> list[str]:
    out: list[str] = []
    if host is None:
        return out
    cpu = host["cpu_pct"]
    if cpu is not None and cpu >= HOST_CPU_SATURATED_PCT:
        out.append(f"host {name}'s CPU is {cpu:.0f}% busy")
    swap = host.get("swap_pages_per_s")
    if swap is not None and swap >= SWAPPING_PAGES_PER_S:
        out.append(f"host {name} is swapping ({swap:.0f} pages/s)")
    return out


def _other_processes(state: FleetState, v: HostView, idx: int, job_id: str | None) -> list[str]:
    out = []
    procs: list[ProcessRecord] = v.processes() or []
    for p in procs:
        if p["gpu_index"] != idx:
            continue
        cj = state.job_of(p["container_id"])
        if cj is not None and cj.job_id == job_id:
            continue
        what = f"pid {p['pid']}"
        if cj is not None:
            what += f" (job {cj.job_id})"
        elif p["command"]:
            what += f" ({p['command'][:40]}" + (f", user {p['user']})" if p["user"] else ")")
        out.append(what)
    return out


def _median(values: Iterable[float | int | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None
