"""Each benched GPU against its model's fleet median and its datasheet, with the likely reason.

A GPU is flagged when one of its figures is more than :data:`BELOW_MEDIAN` below the median of
the GPUs of the same model benched in the same mode (the last result of every such GPU of the
profile, this run's included; at least 2 GPUs), or more than
:data:`console.bench.datasheet.SLACK` below what its model reaches in this bench
(:func:`console.bench.datasheet.achievable`; PCIe against the link the GPU and slot allow).
The reasons come from the telemetry taken during the bench (:func:`likely_reasons`): clock
event (throttle) reasons by NVML's names, a power limit below the default, a PCIe link below
what the GPU and slot allow (or a slot below the GPU), ECC errors or a pending row remap,
another process on the GPU, heat.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from console.bench import datasheet
from console.bench.model import GpuBench, Telemetry

#: Figures compared, with their unit as shown.
METRICS: tuple[tuple[str, str], ...] = (
    ("bf16", "TFLOP/s"),
    ("fp8", "TFLOP/s"),
    ("copy", "GB/s"),
    ("h2d", "GB/s"),
    ("d2h", "GB/s"),
    ("sustained", "TFLOP/s"),
)
#: How far below the model's fleet median (fraction) counts as slow.
BELOW_MEDIAN = 0.10
#: A temperature (C) at which a GPU under load counts as hot.
HOT_C = 85.0
#: Reasons that are normal under a full matmul load (the GPU sits at its power limit): named
#: only when nothing else explains the GPU.
POWER_CAP_REASONS = ("sw_power_cap",)


@dataclass(frozen=True)
class Finding:
    """One figure below its reference.

    Attributes:
        metric: ``bf16 fp8 copy h2d d2h sustained``.
        value: the GPU's figure (TFLOP/s or GB/s).
        reference: the median or the datasheet-achievable figure.
        basis: ``median`` (of ``peers`` GPUs of the model) or ``datasheet``.
        below_pct: how far below the reference, percent.
        peers: GPUs in the median (0 for the datasheet).
    """

    metric: str
    value: float
    reference: float
    basis: str
    below_pct: float
    peers: int = 0

    def text(self) -> str:
        """``bf16 612 TFLOP/s is 22% below the fleet median 785 (8 GPUs)``."""
        unit = dict(METRICS)[self.metric]
        ref = (
            f"the fleet median {fmt(self.reference)} ({self.peers} GPUs)"
            if self.basis == "median"
            else f"the datasheet-achievable {fmt(self.reference)}"
        )
        return f"{self.metric} {fmt(self.value)} {unit} is {self.below_pct:.0f}% below {ref}"


@dataclass(frozen=True)
class Verdict:
    """A GPU's verdict: flagged or not, the findings and the likely reasons (most telling
    first)."""

    host: str
    index: int | None
    flagged: bool
    findings: tuple[Finding, ...] = ()
    reasons: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: ``slow: <findings>; likely: <reasons>``, or ``ok``."""
        if not self.flagged:
            return "ok"
        why = "; ".join(f.text() for f in self.findings)
        likely = ", ".join(self.reasons) if self.reasons else "no cause in the telemetry"
        return f"slow: {why}; likely: {likely}"


def fmt(v: float) -> str:
    """A figure with 3 significant digits at most (``612``, ``54.9``, ``4.31``)."""
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def model_key(g: GpuBench) -> str:
    """What GPUs are compared by: the datasheet model when known, else NVML's name."""
    sheet = datasheet.lookup(g.name)
    return sheet.model if sheet else (g.name or "?")


def medians(fleet: Iterable[GpuBench]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(model, mode, metric) -> (median figure, GPUs in it), over GPUs with that figure."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for g in fleet:
        for metric, _unit in METRICS:
            v = g.figure(metric)
            if v is not None:
                groups.setdefault((model_key(g), g.mode, metric), []).append(v)
    return {k: (statistics.median(vs), len(vs)) for k, vs in groups.items()}


def expected(g: GpuBench, metric: str) -> float | None:
    """The figure a healthy GPU of ``g``'s model reaches in this bench, ``None`` if unknown:
    the datasheet's for matmul and copy (:func:`console.bench.datasheet.achievable`); for PCIe
    the rate of the link the GPU and its slot allow (else the model's generation x16) times
    :data:`console.bench.datasheet.ACHIEVABLE` ``pcie``."""
    sheet = datasheet.lookup(g.name)
    if metric in ("bf16", "fp8", "copy"):
        return None if sheet is None else datasheet.achievable(sheet, metric)
    if metric in ("h2d", "d2h"):
        t = g.telemetry
        gen = t.pcie_gen_max or (sheet.pcie_gen if sheet else None)
        width = t.pcie_width_max or (16 if sheet else None)
        rate = datasheet.pcie_gbps(gen, width)
        return None if rate is None else rate * datasheet.ACHIEVABLE["pcie"]
    return None


def findings(
    g: GpuBench, med: dict[tuple[str, str, str], tuple[float, int]]
) -> tuple[Finding, ...]:
    """``g``'s figures more than :data:`BELOW_MEDIAN` below the model's median, or more than
    :data:`console.bench.datasheet.SLACK` below the datasheet-achievable figure (the larger
    shortfall of the two per metric)."""
    out = []
    for metric, _unit in METRICS:
        v = g.figure(metric)
        if v is None:
            continue
        found: list[Finding] = []
        m = med.get((model_key(g), g.mode, metric))
        if m is not None and m[1] >= 2 and m[0] > 0 and v < m[0] * (1 - BELOW_MEDIAN):
            found.append(Finding(metric, v, m[0], "median", 100 * (1 - v / m[0]), m[1]))
        e = expected(g, metric)
        if e and v < e * (1 - datasheet.SLACK):
            found.append(Finding(metric, v, e, "datasheet", 100 * (1 - v / e)))
        if found:
            out.append(max(found, key=lambda f: f.below_pct))
    return tuple(out)


def likely_reasons(t: Telemetry, shared: Sequence[str] = ()) -> tuple[str, ...]:
    """What in the telemetry slows a GPU, most telling first. ``shared``: reasons every GPU
    of the model showed in the run (power capping under a full load): named last, as such."""
    out: list[str] = []
    own = [r for r in t.reasons if r not in POWER_CAP_REASONS and r not in shared]
    if own:
        parts = []
        for r in own:
            share = t.reason_share.get(r)
            parts.append(f"{r} ({share:.0%} of the load)" if share is not None else r)
        clock = ""
        if t.sm_mhz_mean is not None and t.sm_max_mhz:
            clock = f", SM clock {t.sm_mhz_mean:.0f} of {t.sm_max_mhz:.0f} MHz"
        out.append("throttled: " + ", ".join(parts) + clock)
    if t.other_processes:
        out.append(f"another process on it ({t.other_processes} besides the bench)")
    if t.pcie_gen is not None and t.pcie_gen_max is not None and t.pcie_gen < t.pcie_gen_max:
        out.append(
            f"PCIe link at gen {t.pcie_gen} under load; the GPU and slot allow gen {t.pcie_gen_max}"
        )
    if (
        t.pcie_width is not None
        and t.pcie_width_max is not None
        and t.pcie_width < t.pcie_width_max
    ):
        out.append(
            f"PCIe link x{t.pcie_width} under load; the GPU and slot allow x{t.pcie_width_max}"
        )
    if (
        t.pcie_gen_gpu_max is not None
        and t.pcie_gen_max is not None
        and t.pcie_gen_max < t.pcie_gen_gpu_max
    ):
        out.append(f"the slot allows PCIe gen {t.pcie_gen_max}, the GPU gen {t.pcie_gen_gpu_max}")
    if t.ecc_new_uncorrected:
        out.append(f"ECC: {t.ecc_new_uncorrected} uncorrected error(s) during the bench")
    if t.ecc_new_corrected:
        out.append(f"ECC: {t.ecc_new_corrected} corrected error(s) during the bench")
    if t.remap_pending:
        out.append("ECC: a row remap is pending (reset the GPU)")
    if (
        t.power_limit_w is not None
        and t.power_default_limit_w is not None
        and t.power_limit_w < 0.95 * t.power_default_limit_w
    ):
        out.append(
            f"power limit {t.power_limit_w:.0f} W, below the default "
            f"{t.power_default_limit_w:.0f} W"
        )
    if t.temp_c_max is not None and t.temp_c_max >= HOT_C:
        out.append(f"hot: {t.temp_c_max:.0f} C under load")
    capped = [r for r in t.reasons if r in POWER_CAP_REASONS or r in shared]
    if capped and not out:
        power = ""
        if t.power_w_mean is not None and t.power_limit_w is not None:
            power = f" at {t.power_w_mean:.0f} W of {t.power_limit_w:.0f} W"
        out.append(", ".join(capped) + power + (" (as the others)" if shared else ""))
    return tuple(out)


def judge(run: Sequence[GpuBench], fleet: Iterable[GpuBench]) -> list[Verdict]:
    """A verdict for each GPU of ``run``, against ``fleet`` (the last result of every GPU of
    the profile, ``run``'s included)."""
    med = medians(fleet)
    shared_by_model: dict[str, set[str]] = {}
    for g in run:
        key = model_key(g)
        seen = set(g.telemetry.reasons)
        shared_by_model[key] = seen if key not in shared_by_model else shared_by_model[key] & seen
    out = []
    for g in run:
        found = findings(g, med)
        peers = [x for x in run if model_key(x) == model_key(g)]
        shared = sorted(shared_by_model.get(model_key(g), set())) if len(peers) > 1 else []
        reasons = likely_reasons(g.telemetry, shared) if found else ()
        out.append(Verdict(g.host, g.index, bool(found), found, reasons))
    return out
