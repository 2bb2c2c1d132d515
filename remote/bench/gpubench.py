"""gpuconsole's GPU bench: one process per GPU under torchrun, in the job's image or Python.

Run by ``gpuconsole bench`` as a job's script (``torchrun --nproc-per-node N gpubench.py
--mode quick``); by hand: ``python gpubench.py --mode quick`` benches ``cuda:0`` alone.

Each process measures its GPU (``LOCAL_RANK``), in this order:

- bf16 matmul (``M = N = K``, 8192 by default): TFLOP/s = 2*M*N*K / t, timed with CUDA events
  over short bursts of back-to-back matmuls (about :data:`BURST_S` each, :data:`GAP_S` apart):
  the GPU's figure at its boost clock, before the power limit pulls the clock down (a 700 W
  H200 reads about 790 TFLOP/s in a burst and about 670 after a second of load; the sustained
  load below is that second figure); the median of the bursts (and the best) are reported;
- fp8 matmul (``torch._scaled_mm``, e4m3 x e4m3 -> bf16, fast accumulation) where the GPU is
  sm_89 or newer and torch has ``float8_e4m3fn``; ``null`` (never 0) where it is not;
- device copy (``dst.copy_(src)`` of one buffer, a cudaMemcpy device to device): GB/s =
  bytes read + bytes written / t, the STREAM "copy" convention (nvbandwidth's device-local
  copy counts the same);
- host to device and device to host over PCIe from pinned host memory, one GPU of the host at
  a time (the GPUs of a PCIe switch share it);
- a sustained matmul load of ``--sustain-s`` seconds on every GPU at once, while a thread samples
  the GPU through NVML (nvidia-ml-py's ``pynvml``, shipped beside this script; else
  ``nvidia-smi --query-gpu``) every 0.5 s: SM clock and its maximum, power and limits,
  temperature, the clock event (throttle) reason mask, PCIe link generation and width (now and
  the most allowed), ECC error counts and the compute processes on the GPU;
- with 2+ processes, NCCL all-reduce of float32 buffers: algbw = bytes / t, busbw = algbw *
  2(n-1)/n (nccl-tests, doc/PERFORMANCE.md), t the slowest rank's mean time per call.

Output: one line per GPU and one per host (rank 0) on stdout, each ``gpuconsole:bench
<JSON>``; units in the keys (``_tflops`` TFLOP/s, ``_gbps`` GB/s = 1e9 bytes/s, ``_mhz``,
``_w``, ``_c``, ``_s``). A reading that could not be taken is ``null`` with the reason in the
document's ``errors``. Without CUDA the host document says ``"cuda": false`` and why; the exit
status is 0 whenever the documents were printed.

Standard library + torch 2.x only; Python 3.8+.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

MARKER = "gpuconsole:bench "
SCHEMA = 1
GIB = 1 << 30
MIB = 1 << 20

#: Per mode: matmul size, repetitions and seconds per repetition, device-copy and PCIe buffer
#: bytes, sustained-load seconds, all-reduce buffer sizes (bytes).
MODES: dict[str, dict[str, Any]] = {
    "quick": {
        "n": 8192,
        "reps": 3,
        "rep_s": 0.1,
        "copy_bytes": 1 * GIB,
        "pcie_bytes": 256 * MIB,
        "sustain_s": 6.0,
        "allreduce": [256 * MIB],
    },
    "full": {
        "n": 8192,
        "reps": 10,
        "rep_s": 0.25,
        "copy_bytes": 4 * GIB,
        "pcie_bytes": 1 * GIB,
        "sustain_s": 60.0,
        "allreduce": [MIB << k for k in range(0, 11, 2)],  # 1 MiB .. 1 GiB
    },
}


def emit(doc: dict[str, Any]) -> None:
    """Print one document on its own line after :data:`MARKER`."""
    doc = {"v": SCHEMA, **doc}
    sys.stdout.write(MARKER + json.dumps(doc, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def reason(e: BaseException) -> str:
    """One line: the exception's type and its first line."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


# -- GPU readings (NVML, else nvidia-smi) -----------------------------------------------------


class Reader:
    """Reads one GPU's state; :meth:`sample` returns a dict of readings (``None`` = unknown)."""

    source = "none"
    problem: str | None = None

    def sample(self) -> dict[str, Any]:
        """The GPU's readings now."""
        return {}

    def processes(self) -> list[dict[str, Any]] | None:
        """Compute processes on the GPU (``pid`` as the host sees it, ``used_mib``), or ``None``."""
        return None

    def ecc(self) -> dict[str, Any]:
        """ECC counters (volatile and aggregate, corrected and uncorrected) and row remapping."""
        return {}

    def static(self) -> dict[str, Any]:
        """Readings that do not change during the bench (maxima, limits)."""
        return {}


class NvmlReader(Reader):
    """The GPU through nvidia-ml-py's ``pynvml`` (bundled beside this script)."""

    source = "nvml"

    def __init__(self, uuid: str | None, index_hint: int | None) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        handle = None
        if uuid:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception:
                handle = None
        if handle is None and index_hint is not None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index_hint)
        if handle is None:
            raise RuntimeError("no NVML handle for the GPU (no UUID, no index)")
        self.h = handle
        self.errors: dict[str, str] = {}

    def _get(self, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:
            self.errors.setdefault(key, reason(e))
            return None

    def sample(self) -> dict[str, Any]:
        nv, h = self.nv, self.h
        # nvmlDeviceGetCurrentClocksThrottleReasons before nvidia-ml-py 12.535
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons_fn is None:
            reasons_fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        power = self._get("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h))
        return {
            "t": time.time(),
            "sm_mhz": self._get("sm_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "power_w": None if power is None else round(power / 1000.0, 2),
            "temp_c": self._get(
                "temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            ),
            "reasons": self._get("reasons", lambda: int(reasons_fn(h))),
            "pcie_gen": self._get("pcie_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "pcie_width": self._get("pcie_width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
        }

    def static(self) -> dict[str, Any]:
        """Readings that do not change during the bench (maxima, limits)."""
        nv, h = self.nv, self.h

        def watts(fn: Callable[[], Any]) -> Callable[[], Any]:
            return lambda: round(fn() / 1000.0, 2)

        gpu_max = getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
        return {
            "name": self._get("name", lambda: _text(nv.nvmlDeviceGetName(h))),
            "uuid": self._get("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h))),
            "pci_bus_id": self._get("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId)),
            "sm_max_mhz": self._get(
                "sm_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
            ),
            "power_limit_w": self._get(
                "power_limit_w", watts(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
            ),
            "power_default_limit_w": self._get(
                "power_default_limit_w",
                watts(lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h)),
            ),
            "pcie_gen_max": self._get(
                "pcie_gen_max", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)
            ),
            "pcie_gen_gpu_max": self._get("pcie_gen_gpu_max", lambda: gpu_max(h))
            if gpu_max is not None
            else None,
            "pcie_width_max": self._get(
                "pcie_width_max", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)
            ),
        }

    def processes(self) -> list[dict[str, Any]] | None:
        nv, h = self.nv, self.h
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception as e:
            self.errors.setdefault("processes", reason(e))
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(
                {
                    "pid": int(p.pid),
                    "used_mib": None if not isinstance(used, int) else used // MIB,
                }
            )
        return out

    def ecc(self) -> dict[str, Any]:
        nv, h = self.nv, self.h
        out: dict[str, Any] = {}
        for key, kind, counter in (
            ("volatile_corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ("volatile_uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ("aggregate_uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        ):

            def count(kind: Any = kind, counter: Any = counter) -> int:
                return int(nv.nvmlDeviceGetTotalEccErrors(h, kind, counter))

            out[key] = self._get("ecc." + key, count)
        rows = self._get("ecc.remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            out["remap_pending"] = bool(rows[2])
            out["remap_failure"] = bool(rows[3])
        return out


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


#: nvidia-smi --query-gpu fields of a sample, in order; the reason mask's older name below.
_SMI_SAMPLE = (
    "clocks.sm",
    "power.draw",
    "temperature.gpu",
    "clocks_event_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.width.current",
)
_SMI_STATIC = (
    "name",
    "uuid",
    "pci.bus_id",
    "clocks.max.sm",
    "enforced.power.limit",
    "power.default_limit",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)
_SMI_ECC = (
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
)


class SmiReader(Reader):
    """The GPU through ``nvidia-smi --query-gpu`` (no pynvml, or NVML would not load)."""

    source = "nvidia-smi"

    def __init__(self, uuid: str | None, index_hint: int | None) -> None:
        self.smi = shutil.which("nvidia-smi")
        if self.smi is None:
            raise RuntimeError("nvidia-smi is not on PATH")
        self.target = uuid or (str(index_hint) if index_hint is not None else None)
        if self.target is None:
            raise RuntimeError("no UUID or index to ask nvidia-smi about")
        self.errors: dict[str, str] = {}
        self.legacy = False

    def _query(self, fields: tuple[str, ...]) -> list[str | None]:
        names = [
            f.replace("clocks_event_reasons", "clocks_throttle_reasons") if self.legacy else f
            for f in fields
        ]
        res = subprocess.run(
            [
                str(self.smi),
                "-i",
                str(self.target),
                "--query-gpu=" + ",".join(names),
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if res.returncode != 0:
            text = (res.stdout + res.stderr).strip()
            if not self.legacy and "clocks_event_reasons" in text:
                self.legacy = True
                return self._query(fields)
            raise RuntimeError(f"nvidia-smi exit {res.returncode}: {text[:200]}")
        values = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")]
        out: list[str | None] = []
        for v in values:
            out.append(None if v in ("[N/A]", "N/A", "[Not Supported]", "") else v)
        return out

    def _num(self, v: str | None) -> float | None:
        try:
            return None if v is None else float(v)
        except ValueError:
            return None

    def sample(self) -> dict[str, Any]:
        try:
            sm, power, temp, mask, gen, width = self._query(_SMI_SAMPLE)
        except Exception as e:
            self.errors.setdefault("sample", reason(e))
            return {"t": time.time()}
        return {
            "t": time.time(),
            "sm_mhz": self._num(sm),
            "power_w": self._num(power),
            "temp_c": self._num(temp),
            "reasons": int(mask, 16) if mask and mask.startswith("0x") else None,
            "pcie_gen": self._num(gen),
            "pcie_width": self._num(width),
        }

    def static(self) -> dict[str, Any]:
        """Readings that do not change during the bench (maxima, limits)."""
        try:
            name, uuid, bus, sm_max, limit, default, gen, width = self._query(_SMI_STATIC)
        except Exception as e:
            self.errors.setdefault("static", reason(e))
            return {}
        return {
            "name": name,
            "uuid": uuid,
            "pci_bus_id": bus,
            "sm_max_mhz": self._num(sm_max),
            "power_limit_w": self._num(limit),
            "power_default_limit_w": self._num(default),
            "pcie_gen_max": self._num(gen),
            "pcie_gen_gpu_max": None,
            "pcie_width_max": self._num(width),
        }

    def processes(self) -> list[dict[str, Any]] | None:
        try:
            res = subprocess.run(
                [
                    str(self.smi),
                    "-i",
                    str(self.target),
                    "--query-compute-apps=pid,used_memory",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except Exception as e:
            self.errors.setdefault("processes", reason(e))
            return None
        if res.returncode != 0:
            self.errors.setdefault("processes", res.stderr.strip()[:200])
            return None
        out = []
        for line in res.stdout.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0].isdigit():
                used = parts[1]
                out.append(
                    {"pid": int(parts[0]), "used_mib": int(used) if used.isdigit() else None}
                )
        return out

    def ecc(self) -> dict[str, Any]:
        try:
            vc, vu, au = self._query(_SMI_ECC)
        except Exception as e:
            self.errors.setdefault("ecc", reason(e))
            return {}
        n = self._num
        return {
            "volatile_corrected": None if n(vc) is None else int(n(vc) or 0),
            "volatile_uncorrected": None if n(vu) is None else int(n(vu) or 0),
            "aggregate_uncorrected": None if n(au) is None else int(n(au) or 0),
        }


def open_reader(uuid: str | None, index_hint: int | None) -> tuple[Reader, list[str]]:
    """NVML, else nvidia-smi, else a reader that knows nothing; with why each failed."""
    why: list[str] = []
    for cls in (NvmlReader, SmiReader):
        try:
            return cls(uuid, index_hint), why
        except Exception as e:
            why.append(f"{cls.source}: {reason(e)}")
    return Reader(), why


class Sampler(threading.Thread):
    """Samples a :class:`Reader` every ``interval`` s, tagging each sample with the phase."""

    def __init__(self, reader: Reader, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="gpubench-sampler")
        self.reader = reader
        self.interval = interval
        self.phase = "idle"
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            s = self.reader.sample()
            if s:
                s["phase"] = self.phase
                self.samples.append(s)
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        """End the thread (within one interval)."""
        self.stopped.set()
        self.join(timeout=15)

    def summary(self, phase: str) -> dict[str, Any]:
        """Min/mean/max of the readings taken during ``phase``; the reason bits seen (OR) and
        in how many samples each bit was set."""
        rows = [s for s in self.samples if s.get("phase") == phase]
        out: dict[str, Any] = {"samples": len(rows)}

        def values(key: str) -> list[float]:
            return [float(s[key]) for s in rows if isinstance(s.get(key), (int, float))]

        for key in ("sm_mhz", "power_w", "temp_c", "pcie_gen", "pcie_width"):
            v = values(key)
            out[key] = (
                {"min": min(v), "mean": round(statistics.fmean(v), 2), "max": max(v)} if v else None
            )
        masks = [int(s["reasons"]) for s in rows if isinstance(s.get("reasons"), int)]
        seen = 0
        counts: dict[str, int] = {}
        for m in masks:
            seen |= m
            bit = 1
            while bit <= m:
                if m & bit:
                    counts[hex(bit)] = counts.get(hex(bit), 0) + 1
                bit <<= 1
        out["reasons_mask"] = seen if masks else None
        out["reason_counts"] = counts if masks else None
        return out


# -- measurements ----------------------------------------------------------------------------


def timed(torch: Any, fn: Callable[[], Any], iters: int) -> float:
    """Seconds for ``iters`` back-to-back calls of ``fn`` on the current stream (CUDA events)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000.0


def calibrated(torch: Any, fn: Callable[[], Any], rep_s: float) -> int:
    """How many calls of ``fn`` take about ``rep_s`` seconds (after a warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = timed(torch, fn, 3) / 3
    return max(3, min(100000, int(rep_s / max(t, 1e-6))))


def repeat(
    torch: Any, fn: Callable[[], Any], work: float, reps: int, rep_s: float, gap_s: float = 0.0
) -> dict[str, Any]:
    """Rates (``work`` units per second) of ``reps`` repetitions of about ``rep_s`` s each,
    ``gap_s`` s of idle GPU between them: median and best."""
    iters = calibrated(torch, fn, rep_s)
    rates = []
    for _ in range(reps):
        if gap_s > 0:
            time.sleep(gap_s)
        rates.append(work * iters / timed(torch, fn, iters))
    return {"median": statistics.median(rates), "best": max(rates), "reps": reps, "iters": iters}


#: Length of one matmul burst (s): short enough that the GPU stays at its boost clock.
BURST_S = 0.02
#: Idle time before each matmul burst (s), so that the power drawn by the last one has fallen.
GAP_S = 0.15


def matmul_bf16(torch: Any, dev: Any, n: int, reps: int, rep_s: float) -> dict[str, Any]:
    """bf16 ``n x n @ n x n`` TFLOP/s (2*n^3 per call)."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    work = 2.0 * n**3 / 1e12
    r = repeat(torch, lambda: torch.matmul(a, b, out=out), work, reps, BURST_S, GAP_S)
    return r


def fp8_support(torch: Any, dev: Any) -> str | None:
    """Why fp8 cannot be measured here, or ``None`` when it can be tried."""
    major, minor = torch.cuda.get_device_capability(dev)
    if (major, minor) < (8, 9):
        return f"sm_{major}{minor}: fp8 tensor cores need sm_89 or newer"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm"
    return None


def matmul_fp8(torch: Any, dev: Any, n: int, reps: int, rep_s: float) -> dict[str, Any]:
    """fp8 (e4m3 x e4m3 -> bf16, per-tensor scale 1, fast accumulation) TFLOP/s through
    ``torch._scaled_mm`` (the second operand column-major, as cuBLASLt wants it)."""
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev, dtype=torch.float32)

    def mm() -> Any:
        # torch 2.1-2.3 return (out, amax); 2.4+ the output alone
        return torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    mm()
    r = repeat(torch, mm, 2.0 * n**3 / 1e12, reps, BURST_S, GAP_S)
    return r


def device_copy(torch: Any, dev: Any, nbytes: int, reps: int, rep_s: float) -> dict[str, Any]:
    """Device-to-device copy GB/s, bytes read + written (2 x the buffer) per second."""
    free, _total = torch.cuda.mem_get_info(dev)
    nbytes = int(min(nbytes, free // 4))
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    src.fill_(1)
    r = repeat(torch, lambda: dst.copy_(src), 2.0 * nbytes / 1e9, reps, rep_s)
    r["bytes"] = nbytes
    return r


def pcie(torch: Any, dev: Any, nbytes: int, reps: int) -> dict[str, Any]:
    """Pinned host -> device and device -> host GB/s (bytes moved one way per second)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    host.fill_(1)
    out: dict[str, Any] = {"bytes": nbytes}

    def h2d() -> Any:
        return gpu.copy_(host, non_blocking=True)

    def d2h() -> Any:
        return host.copy_(gpu, non_blocking=True)

    for key, fn in (("h2d", h2d), ("d2h", d2h)):
        fn()
        torch.cuda.synchronize(dev)
        rates = [nbytes / 1e9 / timed(torch, fn, 1) for _ in range(reps)]
        out[key] = {"median": statistics.median(rates), "best": max(rates), "reps": reps}
    return out


def sustained(torch: Any, dev: Any, n: int, seconds: float) -> dict[str, Any]:
    """bf16 matmuls back to back for ``seconds``: mean TFLOP/s and the slowest ~0.25 s window."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)

    def mm() -> Any:
        return torch.matmul(a, b, out=out)

    chunk = calibrated(torch, mm, 0.25)
    flops = 2.0 * n**3 / 1e12
    windows: list[tuple[Any, Any]] = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(chunk):
            mm()
        e.record()
        windows.append((s, e))
        if len(windows) >= 2:
            windows[-2][1].synchronize()  # at most two chunks queued: no idle gap, no backlog
    torch.cuda.synchronize(dev)
    rates = [flops * chunk / (float(s.elapsed_time(e)) / 1000.0) for s, e in windows]
    total_s = sum(float(s.elapsed_time(e)) / 1000.0 for s, e in windows)
    return {
        "seconds": round(total_s, 3),
        "tflops": flops * chunk * len(windows) / total_s if total_s else None,
        "min_window_tflops": min(rates) if rates else None,
        "windows": len(rates),
    }


def allreduce(
    torch: Any, dist: Any, dev: Any, sizes: list[int], world: int
) -> list[dict[str, Any]]:
    """NCCL all-reduce (sum, float32) per buffer size: the slowest rank's mean seconds per
    call, algbw and busbw (GB/s, nccl-tests' definitions)."""
    out = []
    for nbytes in sizes:
        buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
        for _ in range(5):
            dist.all_reduce(buf)
        torch.cuda.synchronize(dev)
        iters = 20 if nbytes >= 64 * MIB else 50

        def call(buf: Any = buf) -> Any:
            return dist.all_reduce(buf)

        secs_here = timed(torch, call, iters) / iters
        t = torch.tensor([secs_here], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        secs = float(t.item())
        algbw = nbytes / secs / 1e9
        out.append(
            {
                "bytes": nbytes,
                "time_s": secs,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2.0 * (world - 1) / world,
            }
        )
        del buf
    return out


# -- the run ---------------------------------------------------------------------------------


def visible_index(local: int) -> int | None:
    """The NVML index of CUDA device ``local`` when the UUID is unknown: inside a container
    NVML sees only the container's GPUs (in PCI order, as ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    numbers them); on a host, ``CUDA_VISIBLE_DEVICES``' entry when it is an index."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd and not os.path.exists("/.dockerenv"):
        parts = [p.strip() for p in cvd.split(",")]
        if local < len(parts) and parts[local].isdigit():
            return int(parts[local])
        return None
    return local


def device_uuid(torch: Any, dev: Any) -> str | None:
    """``GPU-<uuid>`` as NVML spells it, from torch's device properties (torch 2.x)."""
    try:
        u = torch.cuda.get_device_properties(dev).uuid
    except Exception:
        return None
    text = str(u)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def main(argv: list[str] | None = None) -> int:
    """Bench this process's GPU (see the module docstring); 0 once the documents are out."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--mode", choices=sorted(MODES), default="quick")
    p.add_argument("--sustain-s", type=float, default=None, help="sustained load seconds")
    p.add_argument(
        "--allreduce-only", action="store_true", help="only the all-reduce (across hosts)"
    )
    args = p.parse_args(argv)
    cfg = dict(MODES[args.mode])
    if args.sustain_s is not None:
        cfg["sustain_s"] = args.sustain_s
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    node = int(os.environ.get("GROUP_RANK", os.environ.get("GPUCONSOLE_NODE_RANK", "0")))
    t0 = time.time()
    base: dict[str, Any] = {"rank": rank, "local_rank": local, "node": node, "mode": args.mode}
    try:
        import torch
    except ImportError as e:
        if local == 0:
            emit({**base, "kind": "host", "cuda": False, "reason": f"no torch: {reason(e)}"})
        return 0
    versions = {
        "torch": torch.__version__,
        "cuda_runtime": getattr(torch.version, "cuda", None),
        "python": sys.version.split()[0],
    }
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        if local == 0:
            why = (
                "torch was built without CUDA"
                if not getattr(torch.version, "cuda", None)
                else "no CUDA device visible (torch.cuda.is_available() is false)"
            )
            emit({**base, **versions, "kind": "host", "cuda": False, "reason": why})
        return 0
    if local >= torch.cuda.device_count():
        emit({**base, "kind": "gpu", "errors": {"device": f"cuda:{local} does not exist"}})
        return 0
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    errors: dict[str, str] = {}
    uuid = device_uuid(torch, dev)
    reader, failed = open_reader(uuid, visible_index(local))
    if failed and reader.source == "none":
        errors["sampler"] = "; ".join(failed)
    static = reader.static()
    procs_before = reader.processes()
    ecc_before = reader.ecc()
    sampler = Sampler(reader)
    sampler.start()
    dist = None
    if world > 1:
        import torch.distributed as dist_mod

        dist = dist_mod
        dist.init_process_group("nccl")

    def barrier() -> None:
        if dist is not None:
            x = torch.zeros(1, device=dev)
            dist.all_reduce(x)
            torch.cuda.synchronize(dev)

    def measure(key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:
            errors[key] = reason(e)
            return None
        finally:
            try:
                torch.cuda.empty_cache()
            except Exception:
                pass

    props = torch.cuda.get_device_properties(dev)
    doc: dict[str, Any] = {
        **base,
        **versions,
        "kind": "gpu",
        "uuid": uuid or static.get("uuid"),
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_mib": int(props.total_memory) // MIB,
        "multiprocessors": int(props.multi_processor_count),
        "sampler": reader.source,
        "static": static,
        "processes_before": procs_before,
    }
    n, reps, rep_s = int(cfg["n"]), int(cfg["reps"]), float(cfg["rep_s"])
    if not args.allreduce_only:
        barrier()
        sampler.phase = "matmul"
        doc["bf16"] = measure("bf16", lambda: matmul_bf16(torch, dev, n, reps, rep_s))
        no_fp8 = fp8_support(torch, dev)
        if no_fp8 is None:
            doc["fp8"] = measure("fp8", lambda: matmul_fp8(torch, dev, n, reps, rep_s))
        else:
            doc["fp8"] = None
            doc["fp8_unsupported"] = no_fp8
        sampler.phase = "copy"
        doc["copy"] = measure(
            "copy", lambda: device_copy(torch, dev, int(cfg["copy_bytes"]), reps, rep_s)
        )
        sampler.phase = "idle"
        for turn in range(local_world):  # one GPU of the host at a time on the PCIe bus
            barrier()
            if turn == local:
                sampler.phase = "pcie"
                doc["pcie"] = measure(
                    "pcie", lambda: pcie(torch, dev, int(cfg["pcie_bytes"]), max(reps, 5))
                )
                doc["pcie_link"] = reader.sample()  # the link right after the transfers
                sampler.phase = "idle"
        barrier()
        sampler.phase = "load"
        procs_load = reader.processes()
        doc["sustained"] = measure(
            "sustained", lambda: sustained(torch, dev, n, float(cfg["sustain_s"]))
        )
        sampler.phase = "idle"
        doc["processes_load"] = procs_load
    doc["ecc_before"] = ecc_before
    doc["ecc_after"] = reader.ecc()
    host_doc: dict[str, Any] | None = None
    if dist is not None:
        barrier()
        sampler.phase = "allreduce"
        ar = measure(
            "allreduce", lambda: allreduce(torch, dist, dev, list(cfg["allreduce"]), world)
        )
        sampler.phase = "idle"
        if rank == 0:
            nccl = None
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:
                pass
            host_doc = {
                "allreduce": ar,
                "nccl": nccl,
                "world": world,
                "nodes": world // local_world,
            }
    sampler.stop()
    doc["telemetry"] = {
        phase: sampler.summary(phase) for phase in ("matmul", "copy", "pcie", "load", "allreduce")
    }
    doc["errors"] = {**errors, **getattr(reader, "errors", {})}
    doc["elapsed_s"] = round(time.time() - t0, 2)
    emit(doc)
    if local == 0:
        emit(
            {
                **base,
                **versions,
                "kind": "host",
                "cuda": True,
                "gpus": local_world,
                "world": world,
                **(host_doc or {}),
                "elapsed_s": round(time.time() - t0, 2),
            }
        )
    if dist is not None:
        try:
            barrier()
            dist.destroy_process_group()
        except Exception:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
