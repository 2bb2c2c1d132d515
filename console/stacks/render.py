"""A capture as text: what ``gpuconsole stacks`` prints and the app's stacks view shows."""

from __future__ import annotations

import time
from typing import Any

from console.stacks.analysis import Analysis, StackGroup
from console.stacks.model import Capture, ProcessStack


def _member(p: ProcessStack) -> str:
    gpu = f" gpu {p.gpu}" if p.gpu is not None else ""
    return f"{p.tag} {p.host} pid {p.pid}{gpu}"


def _short(text: str, cap: int = 240) -> str:
    """A frame as printed, a C++ template name of thousands of characters cut short."""
    return text if len(text) <= cap else text[: cap - 3] + "..."


def _frames(g: StackGroup, indent: str, limit: int) -> list[str]:
    shown = [f"{indent}{_short(f.where())}" for f in g.frames[:limit]]
    if len(g.frames) > limit:
        more = len(g.frames) - limit
        shown.append(f"{indent}... {more} more frame{'s' * (more != 1)} (outermost last)")
    return shown


def render(capture: Capture, analysis: Analysis, *, frames: int = 12) -> str:
    """The capture as ``stacks`` prints it: the likely causes, the rank groups (odd ones
    first) with their members and frames, then torchrun's agents, the ranks' children, and
    what could not be read."""
    ranks = capture.processes("rank")
    nodes = len(capture.nodes)
    when = time.strftime("%H:%M:%S", time.localtime(capture.taken_at))
    spy = next((n.py_spy for n in capture.nodes if n.py_spy), None)
    head = (
        f"job {capture.job_id}: {len(ranks)} rank{'s' * (len(ranks) != 1)} on "
        f"{nodes} node{'s' * (nodes != 1)}, taken {when}" + (f" ({spy})" if spy else "")
    )
    if capture.fr_trace is not None and all(p.pid < 0 for p in ranks):  # a job that ended
        head = (
            f"job {capture.job_id}: no rank runs; read the Flight Recorder dumps its ranks "
            f"left, {when}"
        )
    out = [head]
    if analysis.findings:
        out.append("")
        out += [
            f"likely cause: {f}" if i == 0 else f"also: {f}"
            for i, f in enumerate(analysis.findings)
        ]
    for g in analysis.groups:
        out.append("")
        mark = "odd one out: " if g in analysis.odd else ""
        out.append(f"{mark}{g.title()}{' (idle)' if g.idle else ''}")
        out.append("  " + ", ".join(_member(p) for p in g.processes))
        out += _frames(g, "    ", frames)
    if analysis.flight:
        out.append("")
        out.append("Flight Recorder (each rank's last collectives, PyTorch's ring buffer):")
        out += [f"  {line}" for line in analysis.flight]
    if analysis.agents:
        out.append("")
        out.append("torchrun agents:")
        for g in analysis.agents:
            nodes_of = ", ".join(f"[n{p.node_rank}] {p.host} pid {p.pid}" for p in g.processes)
            out.append(f"  {nodes_of}: {g.where}")
    if analysis.children:
        out.append("")
        out.append("children of the ranks (DataLoader workers and others):")
        for g in analysis.children:
            idle = "idle " if g.idle else ""
            owners = sorted({p.rank for p in g.processes if p.rank is not None})
            out.append(
                f"  {len(g.processes)} {idle}of rank{'s' * (len(owners) != 1)} "
                f"{', '.join(map(str, owners))}: {g.where}"
            )
    if analysis.problems:
        out.append("")
        out.append("not read:")
        out += [f"  {p}" for p in analysis.problems]
    return "\n".join(out)


def _group_json(g: StackGroup) -> dict[str, Any]:
    return {
        "ranks": list(g.ranks),
        "where": g.where,
        "collective": g.collective,
        "idle": g.idle,
        "members": [
            {"node": p.node_rank, "host": p.host, "rank": p.rank, "pid": p.pid, "gpu": p.gpu}
            for p in g.processes
        ],
        "frames": [f.where() for f in g.frames],
    }


def analysis_json(a: Analysis) -> dict[str, Any]:
    """An analysis as JSON data (``stacks --json``'s ``analysis``)."""
    return {
        "summary": a.summary(),
        "findings": [{"kind": f.kind, "text": f.text} for f in a.findings],
        "groups": [_group_json(g) for g in a.groups],
        "odd": [list(g.ranks) for g in a.odd],
        "agents": [_group_json(g) for g in a.agents],
        "children": [_group_json(g) for g in a.children],
        "missing_ranks": a.missing,
        "world_size": a.world_size,
        "problems": a.problems,
        "flight_recorder": a.flight,
        "partial": a.partial,
    }
