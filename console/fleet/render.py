"""Plain-text rendering of the fleet for ``gpuconsole top`` and ``gpuconsole gpus``.

Unknown readings print as ``?`` (never 0), readings the GPU does not have at all (the record's
``unsupported``: NVML_ERROR_NOT_SUPPORTED) as ``n/a``; a host that is not streaming prints its
status and error on one line. SM MHz is the SM clock against its maximum (``1500/1980``).
Below the table, one line per GPU with Xids this boot: the root of its chain with NVIDIA's
action (``a GPU 3: Xid 79 fallen off the bus: reboot``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.fleet.state import FleetState, GpuHolder, free_gpus, gpu_holders
from console.texttable import text_table
from remote.telemetry.schema import is_limit


def _n(v: Any, fmt: str = "{:.0f}", unit: str = "", *, na: bool = False) -> str:
    """A reading; ``?`` unknown, ``n/a`` (with ``na``) a reading the GPU does not have."""
    if v is None:
        return "n/a" if na else "?"
    return fmt.format(v) + unit


def _holder(h: GpuHolder) -> str:
    """``4242 ddp-1a2b3c n0 r1`` for a job's worker, ``4242 python3`` otherwise."""
    if h.job:
        rank = f" r{h.rank}" if h.rank is not None else ""
        return f"{h.pid} {h.job.job_id} n{h.job.node_rank}{rank}"
    return f"{h.pid} {(h.command or '').split(' ')[0].rsplit('/', 1)[-1]}"


def _throttle(reasons: Sequence[str] | None) -> str:
    """Active clock-event reasons (``schema.THROTTLE_REASONS`` names) except ``gpu_idle``;
    ``?`` if unknown."""
    if reasons is None:
        return "?"
    active = [r for r in reasons if is_limit(r)]
    return ",".join(active) or "-"


def render_fleet(state: FleetState) -> str:
    """The fleet table: one row per GPU, its processes mapped to containers and jobs."""
    rows = [
        [
            "HOST",
            "GPU",
            "NAME",
            "UTIL",
            "SM",
            "MEM MiB",
            "TEMP",
            "POWER W",
            "SM MHz",
            "THROTTLE",
            "PROCESSES",
        ]
    ]
    notes: list[str] = []
    xid_notes: list[str] = []  # each GPU's Xid chain root with its action
    for v in state.hosts.values():
        if v.sample is None or v.status == "down":
            if v.error:  # under the table: a long reason in the NAME column pushes the rest off
                notes.append(f"{v.name}: {v.status}: {v.error.removeprefix(f'host {v.name}: ')}")
            rows.append(
                [
                    v.name,
                    "-",
                    v.status,
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
            continue
        s = v.sample
        tag = "" if v.status == "ok" else f" [{v.status}]"
        missing = v.missing_gpus()
        if missing:
            notes.append(
                f"{v.name}: {len(missing)} GPU(s) fewer than last seen, missing: "
                f"{', '.join(missing)}"
            )
        if s["state"] != "ok":
            notes.append(
                f"{v.name}: {s['state']}" + (f": {s['state_detail']}" if s["state_detail"] else "")
            )
        xids = [(x.gpu_index, x.pci_bus_id, x.line) for x in v.xid_summaries()]
        xid_notes.extend(
            f"{v.name} GPU {i}: {line}" if i is not None else f"{v.name} {bus}: {line}"
            for i, bus, line in xids
        )
        if v.kernel_log_error and not xids:
            notes.append(f"{v.name}: Xids from NVML events only: {v.kernel_log_error}")
        holders = gpu_holders(state, v.name)
        gpus = s["gpus"]
        if not gpus:
            rows.append(
                [v.name + tag, "-", f"no GPUs ({s['state']})", "", "", "", "", "", "", "", ""]
            )
        for g in gpus:
            idx = g["index"]
            gpm = g["gpm"]
            if holders is None:
                procs = "?"
            else:
                hs = holders.get(idx, []) if idx is not None else []
                procs = ", ".join(_holder(h) for h in hs) or "-"
            name = ("LOST " if g["lost"] else "") + (g["name"] or "?")
            na = set(g["unsupported"])
            rows.append(
                [
                    v.name + tag,
                    str(idx),
                    name.replace("NVIDIA ", ""),
                    _n(g["util_gpu_pct"], unit="%"),
                    _n(gpm["sm_activity_pct"] if gpm else None, unit="%", na="gpm" in na),
                    f"{_n(g['mem_used_mib'])} / {_n(g['mem_total_mib'])}",
                    _n(g["temp_c"], unit="C", na="temp_c" in na),
                    f"{_n(g['power_w'], na='power_w' in na)} / "
                    f"{_n(g['power_limit_w'], na='power_limit_w' in na)}",
                    f"{_n(g['sm_clock_mhz'], na='sm_clock_mhz' in na)}/"
                    f"{_n(g['sm_clock_max_mhz'], na='sm_clock_max_mhz' in na)}",
                    _throttle(g["throttle_reasons"]),
                    procs,
                ]
            )
    lines = text_table(rows, right={3, 4, 5, 6, 7, 8})
    usage = state.job_usage()
    if usage:
        lines.append("")
        for u in usage.values():
            where = " ".join(f"{h}:{i}" for h, i in u.gpus)
            lines.append(
                f"job {u.job_id}: {len(u.gpus)} GPU(s) [{where}] mean util "
                f"{_n(u.mean_util_pct, unit='%')}, {_n(u.mem_used_mib)} MiB"
            )
    if xid_notes:
        lines.append("")
        lines.extend(xid_notes)
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines)


def render_free(state: FleetState) -> str:
    """Free GPUs, one row each: host, index, name, memory total."""
    rows = [["HOST", "GPU", "NAME", "MEM MiB"]]
    for host, idxs in free_gpus(state).items():
        by_idx = {g["index"]: g for g in state.hosts[host].gpus()}
        for i in idxs:
            g = by_idx.get(i)
            rows.append(
                [
                    host,
                    str(i),
                    (g["name"] if g else None) or "?",
                    _n(g["mem_total_mib"] if g else None),
                ]
            )
    return "\n".join(text_table(rows, right={3}))
