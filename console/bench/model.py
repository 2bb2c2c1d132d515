"""The bench script's documents (``remote/bench/gpubench.py``) typed once.

The script prints ``gpuconsole:bench <JSON>`` lines (torchrun tags them ``[rankN]:``): one
``kind: gpu`` document per GPU and one ``kind: host`` per host. :func:`documents` finds them in
a job's log lines; :func:`gpu_result` and :func:`host_result` read them into
:class:`GpuBench` and :class:`HostBench`. Units are in the names: ``_tflops`` TFLOP/s,
``_gbps`` GB/s (1e9 bytes/s), ``_mhz``, ``_w``, ``_c``. A figure that could not be taken is
``None`` (never 0), with the reason in ``errors``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from remote.bench import MARKER, SCHEMA

if TYPE_CHECKING:
    from console.bench.analysis import Verdict

#: How long a bench runs: ``quick`` (under 30 s a host) or ``full`` (larger sizes, 60 s of
#: sustained load); the modes of ``remote/bench/gpubench.py --mode``.
BenchMode = Literal["quick", "full"]


def bench_mode(value: object) -> BenchMode:
    """A stored or printed mode as :data:`BenchMode`; ``quick`` for a missing or unknown one
    (documents written before the field existed)."""
    return "full" if value == "full" else "quick"


#: The reason bits that are no limit on a working GPU (left out of the reasons shown).
IGNORED_REASONS = frozenset({"gpu_idle"})


def documents(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The bench documents among ``lines`` (any prefix before :data:`MARKER`: torchrun's
    rank tag, a collector's timestamp); lines that do not parse, or of another schema
    version, are skipped."""
    out = []
    for line in lines:
        at = line.find(MARKER)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(MARKER) :])
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("v") == SCHEMA and doc.get("kind") in ("gpu", "host"):
            out.append(doc)
    return out


def _num(v: Any) -> float | None:
    """A finite number, else ``None`` (booleans and text are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) and f >= 0 else None


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


def _int(v: Any) -> int | None:
    n = _num(v)
    return None if n is None else int(n)


@dataclass(frozen=True)
class Telemetry:
    """What the GPU showed during the bench (the sustained load unless said otherwise).

    Attributes:
        sampler: ``nvml``, ``nvidia-smi`` or ``none`` (nothing could be read).
        samples: samples taken during the load.
        sm_mhz_mean / sm_mhz_min: SM clock during the load, MHz.
        sm_max_mhz: the SM clock's maximum (NVML's max clock), MHz.
        power_w_mean / power_w_max: board power during the load, W.
        power_limit_w / power_default_limit_w: the enforced and the default power limit, W.
        temp_c_max: hottest GPU temperature during the load, C.
        reasons: clock event (throttle) reasons seen during the load, NVML's names
            (``remote.agent.agent.CLOCK_EVENT_REASONS``), ``gpu_idle`` left out.
        reason_share: reason -> fraction (0-1) of the load's samples that had it.
        pcie_gen / pcie_width: the link under load (the most seen while busy).
        pcie_gen_max / pcie_width_max: the most the GPU and its slot allow together.
        pcie_gen_gpu_max: the most the GPU itself allows (``None``: unknown).
        ecc_new_corrected / ecc_new_uncorrected: volatile ECC errors counted during the bench.
        ecc_aggregate_uncorrected: uncorrected ECC errors over the GPU's life.
        remap_pending: a row remap waits for a GPU reset.
        other_processes: compute processes on the GPU besides the bench during the load
            (``None``: the list could not be read).
    """

    sampler: str = "none"
    samples: int = 0
    sm_mhz_mean: float | None = None
    sm_mhz_min: float | None = None
    sm_max_mhz: float | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    temp_c_max: float | None = None
    reasons: tuple[str, ...] = ()
    reason_share: dict[str, float] = field(default_factory=dict)
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    pcie_gen_gpu_max: int | None = None
    ecc_new_corrected: int | None = None
    ecc_new_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    remap_pending: bool | None = None
    other_processes: int | None = None


@dataclass(frozen=True)
class GpuBench:
    """One GPU's bench.

    Attributes:
        host: the profile's host name.
        index: the GPU's index on the host (nvidia-smi order), ``None`` if not known.
        uuid: NVML's ``GPU-...`` UUID.
        name: the model as NVML names it (``NVIDIA H200``).
        mode: ``quick`` or ``full``.
        at: when the bench ended (Unix s).
        bf16_tflops / fp8_tflops: matmul TFLOP/s (median of the repetitions); fp8 ``None``
            where the GPU or torch has none (``fp8_unsupported`` says why) or it failed.
        copy_gbps: device-to-device copy, GB/s of bytes read + written.
        h2d_gbps / d2h_gbps: pinned host -> device and device -> host, GB/s one way.
        sustained_tflops / sustained_min_tflops: bf16 matmul TFLOP/s over the sustained load,
            and its slowest ~0.25 s window.
        sustained_s: the load's length, s.
        telemetry: what the GPU showed meanwhile.
        torch: the PyTorch version that ran it.
        errors: measurement -> why it could not be taken.
    """

    host: str
    index: int | None
    uuid: str | None
    name: str | None
    mode: BenchMode
    at: float
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    fp8_unsupported: str | None = None
    copy_gbps: float | None = None
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    sustained_tflops: float | None = None
    sustained_min_tflops: float | None = None
    sustained_s: float | None = None
    telemetry: Telemetry = field(default_factory=Telemetry)
    torch: str | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def figure(self, metric: str) -> float | None:
        """The figure a comparison uses: ``bf16 fp8 copy h2d d2h sustained``."""
        return {
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "copy": self.copy_gbps,
            "h2d": self.h2d_gbps,
            "d2h": self.d2h_gbps,
            "sustained": self.sustained_tflops,
        }[metric]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the store's and ``--json``'s form)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuBench:
        """Read :meth:`to_json`'s dict back (unknown keys ignored).

        Raises:
            KeyError, TypeError: a required key is missing or of the wrong type.
        """
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        tel = data.get("telemetry") or {}
        tknown = {f.name for f in fields(Telemetry)}
        t = {k: v for k, v in tel.items() if k in tknown}
        t["reasons"] = tuple(t.get("reasons") or ())
        kw["telemetry"] = Telemetry(**t)
        return cls(**kw)


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce size: bytes, the slowest rank's seconds per call, algbw and busbw
    (GB/s, nccl-tests' definitions: busbw = algbw * 2(n-1)/n)."""

    bytes: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True)
class HostBench:
    """One host's bench (or why none ran).

    Attributes:
        host: the profile's host name (the hosts joined by ``,`` for the cross-host run).
        mode: ``quick`` or ``full``.
        at: when it ended (Unix s).
        state: ``benched``; ``no_gpu`` (nothing to bench: no NVIDIA driver, no GPU, or the
            script found no CUDA device); ``failed`` (it could not run or did not end:
            ``reason`` says why).
        cuda: whether the script found a CUDA device.
        reason: why nothing was benched, else ``None``.
        gpus: GPUs benched.
        world: ranks of the all-reduce.
        allreduce: the all-reduce per size (empty with one GPU).
        nccl: NCCL's version.
        torch: PyTorch's version.
        runtime: ``docker`` or ``host`` (how it ran).
        elapsed_s: the script's own time, s.
    """

    host: str
    mode: BenchMode
    at: float
    state: str = "benched"
    cuda: bool = True
    reason: str | None = None
    gpus: int | None = None
    world: int | None = None
    allreduce: tuple[AllReduce, ...] = ()
    nccl: str | None = None
    torch: str | None = None
    runtime: str | None = None
    elapsed_s: float | None = None

    @property
    def busbw_gbps(self) -> float | None:
        """The all-reduce's bus bandwidth at its largest size (GB/s), ``None`` without one."""
        return self.allreduce[-1].busbw_gbps if self.allreduce else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``busbw_gbps`` included)."""
        return {**asdict(self), "busbw_gbps": self.busbw_gbps}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostBench:
        """Read :meth:`to_json`'s dict back."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["allreduce"] = tuple(AllReduce(**a) for a in data.get("allreduce") or ())
        return cls(**kw)


def _reasons(
    mask: int | None, counts: Mapping[str, Any] | None, samples: int
) -> tuple[tuple[str, ...], dict[str, float]]:
    from remote.agent.agent import decode_clock_reasons

    if mask is None:
        return (), {}
    names = tuple(n for n in decode_clock_reasons(mask) if n not in IGNORED_REASONS)
    share: dict[str, float] = {}
    for bit_hex, count in (counts or {}).items():
        try:
            bit = int(str(bit_hex), 16)
        except ValueError:
            continue
        for n in decode_clock_reasons(bit):
            if n not in IGNORED_REASONS and samples and isinstance(count, int):
                share[n] = round(count / samples, 3)
    return names, share


def _telemetry(doc: Mapping[str, Any]) -> Telemetry:
    load = _get(doc, "telemetry", "load") or {}
    static = doc.get("static") or {}
    samples = int(_num(load.get("samples")) or 0)
    names, share = _reasons(
        load.get("reasons_mask") if isinstance(load.get("reasons_mask"), int) else None,
        load.get("reason_counts"),
        samples,
    )
    # the link while busy: the most seen under load, during the PCIe copies, or right after
    gens = [
        _num(_get(doc, "telemetry", "load", "pcie_gen", "max")),
        _num(_get(doc, "telemetry", "pcie", "pcie_gen", "max")),
        _num(_get(doc, "pcie_link", "pcie_gen")),
    ]
    widths = [
        _num(_get(doc, "telemetry", "load", "pcie_width", "max")),
        _num(_get(doc, "telemetry", "pcie", "pcie_width", "max")),
        _num(_get(doc, "pcie_link", "pcie_width")),
    ]
    gen = max((g for g in gens if g is not None), default=None)
    width = max((w for w in widths if w is not None), default=None)
    before = doc.get("ecc_before") or {}
    after = doc.get("ecc_after") or {}

    def delta(key: str) -> int | None:
        a, b = _int(after.get(key)), _int(before.get(key))
        return None if a is None or b is None else max(0, a - b)

    procs = doc.get("processes_load")
    others = None
    if isinstance(procs, list) and procs:  # the bench's own process is one of them
        others = len(procs) - 1
    return Telemetry(
        sampler=str(doc.get("sampler") or "none"),
        samples=samples,
        sm_mhz_mean=_num(_get(load, "sm_mhz", "mean")),
        sm_mhz_min=_num(_get(load, "sm_mhz", "min")),
        sm_max_mhz=_num(static.get("sm_max_mhz")),
        power_w_mean=_num(_get(load, "power_w", "mean")),
        power_w_max=_num(_get(load, "power_w", "max")),
        power_limit_w=_num(static.get("power_limit_w")),
        power_default_limit_w=_num(static.get("power_default_limit_w")),
        temp_c_max=_num(_get(load, "temp_c", "max")),
        reasons=names,
        reason_share=share,
        pcie_gen=None if gen is None else int(gen),
        pcie_width=None if width is None else int(width),
        pcie_gen_max=_int(static.get("pcie_gen_max")),
        pcie_width_max=_int(static.get("pcie_width_max")),
        pcie_gen_gpu_max=_int(static.get("pcie_gen_gpu_max")),
        ecc_new_corrected=delta("volatile_corrected"),
        ecc_new_uncorrected=delta("volatile_uncorrected"),
        ecc_aggregate_uncorrected=_int(after.get("aggregate_uncorrected")),
        remap_pending=after.get("remap_pending")
        if isinstance(after.get("remap_pending"), bool)
        else None,
        other_processes=others,
    )


def gpu_result(doc: Mapping[str, Any], host: str, index: int | None, at: float) -> GpuBench:
    """A ``kind: gpu`` document as :class:`GpuBench` for GPU ``index`` of ``host``."""
    errors = {str(k): str(v) for k, v in (doc.get("errors") or {}).items()}
    return GpuBench(
        host=host,
        index=index,
        uuid=doc.get("uuid") if isinstance(doc.get("uuid"), str) else None,
        name=doc.get("static", {}).get("name") or doc.get("name"),
        mode=bench_mode(doc.get("mode")),
        at=at,
        bf16_tflops=_num(_get(doc, "bf16", "median")),
        fp8_tflops=_num(_get(doc, "fp8", "median")),
        fp8_unsupported=doc.get("fp8_unsupported"),
        copy_gbps=_num(_get(doc, "copy", "median")),
        h2d_gbps=_num(_get(doc, "pcie", "h2d", "median")),
        d2h_gbps=_num(_get(doc, "pcie", "d2h", "median")),
        sustained_tflops=_num(_get(doc, "sustained", "tflops")),
        sustained_min_tflops=_num(_get(doc, "sustained", "min_window_tflops")),
        sustained_s=_num(_get(doc, "sustained", "seconds")),
        telemetry=_telemetry(doc),
        torch=doc.get("torch"),
        errors=errors,
    )


def host_result(
    doc: Mapping[str, Any], host: str, at: float, runtime: str | None = None
) -> HostBench:
    """A ``kind: host`` document as :class:`HostBench`."""
    ar = doc.get("allreduce") or []
    sizes = tuple(
        AllReduce(
            int(a["bytes"]), float(a["time_s"]), float(a["algbw_gbps"]), float(a["busbw_gbps"])
        )
        for a in ar
        if isinstance(a, Mapping)
        and all(_num(a.get(k)) is not None for k in ("bytes", "time_s", "algbw_gbps"))
        and _num(a.get("busbw_gbps")) is not None
    )
    cuda = bool(doc.get("cuda", True))
    return HostBench(
        host=host,
        mode=bench_mode(doc.get("mode")),
        at=at,
        state="benched" if cuda else "no_gpu",
        cuda=cuda,
        reason=doc.get("reason") if isinstance(doc.get("reason"), str) else None,
        gpus=_int(doc.get("gpus")),
        world=_int(doc.get("world")),
        allreduce=sizes,
        nccl=doc.get("nccl") if isinstance(doc.get("nccl"), str) else None,
        torch=doc.get("torch") if isinstance(doc.get("torch"), str) else None,
        runtime=runtime,
        elapsed_s=_num(doc.get("elapsed_s")),
    )


#: ``dcgmi diag``'s outcome on a host: its verdict (``pass``, ``warn``, ``fail``), ``absent`` (no
#: ``dcgmi`` there) or ``error`` (it could not run).
DcgmOutcome = Literal["pass", "warn", "fail", "absent", "error"]


@dataclass(frozen=True)
class DcgmVerdict:
    """``dcgmi diag`` on one host (read by :func:`console.bench.dcgm.parse_diag`).

    Attributes:
        host: the host.
        level: the run level (``-r 1`` or ``2``).
        verdict: see :data:`DcgmOutcome`.
        failed: the tests that failed, as DCGM names them (``PCIe``, ``pcie``,
            ``Persistence Mode``).
        detail: DCGM's own ``Warning``/``Error`` text about the failures, or why it could
            not run.
        warned: the tests that warned.
        skipped: the tests DCGM skipped (no failure).
        gpus: the GPU indices DCGM said failed or warned (empty when it named none).
    """

    host: str
    level: int
    verdict: DcgmOutcome
    failed: tuple[str, ...] = ()
    detail: str = ""
    warned: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()


#: ``bench``'s exit statuses (README, "Is every GPU as fast as it should be"): every GPU
#: benched and none flagged; a host could not be benched (unreachable, the launch failed);
#: bad flags; a GPU flagged (by gpuconsole or DCGM); nothing to bench on the hosts asked.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FLAGGED, EXIT_NOTHING = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class BenchReport:
    """One ``bench`` run.

    Attributes:
        profile: the profile's name.
        mode: ``quick`` or ``full``.
        started / ended: Unix s.
        gpus: each benched GPU with its verdict, host then index order.
        hosts: each host asked: benched, no GPU, or failed (why).
        cross: the all-reduce across hosts (``--cross``), or ``None``.
        dcgm: ``dcgmi diag`` per host (``--dcgm``).
    """

    profile: str
    mode: BenchMode
    started: float
    ended: float
    gpus: tuple[tuple[GpuBench, Verdict], ...] = ()
    hosts: tuple[HostBench, ...] = ()
    cross: HostBench | None = None
    dcgm: tuple[DcgmVerdict, ...] = ()

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_FAILED` when a host (or the cross run) failed, else
        :data:`EXIT_FLAGGED` when a GPU was flagged (or DCGM failed one), else
        :data:`EXIT_NOTHING` when no host had a GPU, else :data:`EXIT_OK`."""
        runs = [*self.hosts, *([self.cross] if self.cross else [])]
        if any(h.state == "failed" for h in runs):
            return EXIT_FAILED
        if any(v.flagged for _g, v in self.gpus) or any(d.verdict == "fail" for d in self.dcgm):
            return EXIT_FLAGGED
        if not self.gpus:
            return EXIT_NOTHING
        return EXIT_OK
