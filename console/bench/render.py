"""``bench``'s text and JSON, and the short forms the fleet view and ``gpus`` show.

Units as the field writes them: matmul in TFLOP/s, the device copy in TB/s (bytes read +
written), PCIe in GB/s (one way), the all-reduce's busbw in GB/s (nccl-tests' definition).
"""

from __future__ import annotations

import time
from typing import Any

from console.bench.analysis import Verdict, fmt
from console.bench.datasheet import lookup
from console.bench.model import BenchReport, GpuBench, HostBench
from console.bench.store import StoredGpu, verdict_json
from console.texttable import text_table

#: How much of DCGM's own text about a failure the table shows (``--json`` has all of it).
DCGM_DETAIL_CHARS = 300


def _f(v: float | None, scale: float = 1.0) -> str:
    return "?" if v is None else fmt(v / scale)


def _fp8(g: GpuBench) -> str:
    if g.fp8_tflops is not None:
        return fmt(g.fp8_tflops)
    return "n/a" if g.fp8_unsupported else "?"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def model_name(g: GpuBench) -> str:
    """The datasheet's model name when known (``H200 SXM``), else NVML's name."""
    sheet = lookup(g.name)
    return sheet.model if sheet else (g.name or "?").removeprefix("NVIDIA ")


def gpu_rows(pairs: list[tuple[GpuBench, Verdict]]) -> list[str]:
    """The per-GPU table: figures, what the GPU showed under load, and the verdict."""
    rows = [
        [
            "HOST",
            "GPU",
            "MODEL",
            "BF16 TFLOP/s",
            "FP8",
            "COPY TB/s",
            "H2D GB/s",
            "D2H GB/s",
            "LOAD TFLOP/s",
            "CLOCK",
            "POWER",
            "TEMP",
            "PCIE",
            "VERDICT",
        ]
    ]
    for g, v in pairs:
        t = g.telemetry
        link = (
            f"{t.pcie_gen}x{t.pcie_width}"
            if t.pcie_gen is not None and t.pcie_width is not None
            else "?"
        )
        rows.append(
            [
                g.host,
                "?" if g.index is None else str(g.index),
                model_name(g),
                _f(g.bf16_tflops),
                _fp8(g),
                _f(g.copy_gbps, 1000.0),
                _f(g.h2d_gbps),
                _f(g.d2h_gbps),
                _f(g.sustained_tflops),
                "?" if t.sm_mhz_mean is None else f"{t.sm_mhz_mean:.0f} MHz",
                "?" if t.power_w_mean is None else f"{t.power_w_mean:.0f} W",
                "?" if t.temp_c_max is None else f"{t.temp_c_max:.0f} C",
                link,
                "SLOW" if v.flagged else "ok",
            ]
        )
    return text_table(rows, right={1, 3, 4, 5, 6, 7, 8, 9, 10, 11})


def host_line(h: HostBench) -> str:
    """One host's line: the all-reduce, or why it was not benched."""
    if h.state == "no_gpu":
        return f"host {h.host}: nothing to bench ({h.reason or 'no GPU'})"
    if h.state == "failed":
        return f"host {h.host}: not benched: {h.reason or '?'}"
    how = f" ({h.runtime}, torch {h.torch or '?'})" if h.runtime else ""
    if h.busbw_gbps is not None:
        size = h.allreduce[-1].bytes
        return (
            f"host {h.host}: all-reduce busbw {fmt(h.busbw_gbps)} GB/s over {h.world} GPUs "
            f"({size >> 20} MiB, NCCL {h.nccl or '?'}){how}"
        )
    return f"host {h.host}: {h.gpus or '?'} GPU(s), no all-reduce (one GPU){how}"


def render(report: BenchReport) -> str:
    """``bench``'s text: the GPU table, a line per host, the flagged GPUs with why, DCGM's
    verdicts."""
    lines: list[str] = []
    pairs = list(report.gpus)
    if pairs:
        lines += gpu_rows(pairs)
        lines.append("")
    lines += [host_line(h) for h in report.hosts]
    if report.cross is not None:
        c = report.cross
        if c.state == "benched" and c.busbw_gbps is not None:
            lines.append(
                f"across hosts {c.host}: all-reduce busbw {fmt(c.busbw_gbps)} GB/s over "
                f"{c.world} GPUs ({c.allreduce[-1].bytes >> 20} MiB, NCCL {c.nccl or '?'})"
            )
        else:
            lines.append(f"across hosts: not measured: {c.reason or '?'}")
    flagged = [(g, v) for g, v in pairs if v.flagged]
    for g, v in flagged:
        lines.append(f"flagged: host {g.host} GPU {g.index} ({model_name(g)}): {v.summary()}")
    for g, _v in pairs:
        for what, why in sorted(g.errors.items()):
            lines.append(f"note: host {g.host} GPU {g.index}: {what} not measured: {why}")
    for d in report.dcgm:
        if d.verdict == "absent":
            lines.append(f"dcgm: host {d.host}: not run ({d.detail}; DCGM not installed)")
        elif d.verdict == "error":
            lines.append(f"dcgm: host {d.host}: could not run: {d.detail}")
        else:
            named = [*d.failed, *(f"{t} (warn)" for t in d.warned)]
            failed = f": {', '.join(named)}" if named else ""
            gpus = f" on GPU {', '.join(map(str, d.gpus))}" if d.gpus else ""
            text = (
                d.detail
                if len(d.detail) <= DCGM_DETAIL_CHARS
                else (d.detail[: DCGM_DETAIL_CHARS - 1] + "…")
            )
            detail = f" ({text})" if text else ""
            lines.append(
                f"dcgm: host {d.host}: dcgmi diag -r {d.level}: {d.verdict.upper()}{failed}"
                f"{gpus}{detail}; gpuconsole: "
                + ("SLOW" if any(v.flagged for g, v in pairs if g.host == d.host) else "ok")
            )
    took = report.ended - report.started
    n = len(pairs)
    lines.append(
        f"{n} GPU(s) benched ({report.mode}, {took:.0f} s), {len(flagged)} flagged"
        if n
        else f"nothing to bench on the hosts asked ({report.mode})"
    )
    return "\n".join(lines)


def report_json(report: BenchReport) -> dict[str, Any]:
    """``bench --json``: the run, every GPU with its figures, telemetry and verdict, every
    host (the all-reduce), the cross-host run, DCGM's verdicts and the exit status."""
    return {
        "profile": report.profile,
        "mode": report.mode,
        "started": report.started,
        "ended": report.ended,
        "exit_code": report.exit_code,
        "gpus": [
            {**g.to_json(), "model": model_name(g), "verdict": verdict_json(v)}
            for g, v in report.gpus
        ],
        "hosts": [h.to_json() for h in report.hosts],
        "cross": report.cross.to_json() if report.cross else None,
        "dcgm": [
            {
                "host": d.host,
                "level": d.level,
                "verdict": d.verdict,
                "failed": list(d.failed),
                "warned": list(d.warned),
                "skipped": list(d.skipped),
                "gpus": list(d.gpus),
                "detail": d.detail,
            }
            for d in report.dcgm
        ],
    }


def short(s: StoredGpu) -> str:
    """The fleet view's cell: ``790 TF ok`` or ``612 TF SLOW`` (bf16 TFLOP/s)."""
    g = s.result
    tf = "?" if g.bf16_tflops is None else f"{g.bf16_tflops:.0f}"
    return f"{tf} TF {'SLOW' if s.verdict.flagged else 'ok'}"


def detail(s: StoredGpu) -> str:
    """The fleet view's detail line: the last bench's date, figures and verdict."""
    g = s.result
    return (
        f"bench {_when(g.at)} ({g.mode}): bf16 {_f(g.bf16_tflops)} TFLOP/s, fp8 {_fp8(g)}, "
        f"copy {_f(g.copy_gbps, 1000.0)} TB/s, H2D {_f(g.h2d_gbps)} / D2H {_f(g.d2h_gbps)} "
        f"GB/s: {s.verdict.summary()}"
    )


def last_table(stored: list[StoredGpu]) -> str:
    """``bench --last``: the stored last bench of every GPU, with its date."""
    if not stored:
        return "no bench results yet (`gpuconsole bench`)"
    lines = gpu_rows([(s.result, s.verdict) for s in stored])
    lines.append("")
    for s in stored:
        lines.append(f"host {s.result.host} GPU {s.result.index}: {detail(s)}")
    return "\n".join(lines)
