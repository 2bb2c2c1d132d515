"""Two real GPU load shapes of a data-parallel step, for recording straggler telemetry on one GPU.

``python3 duty_load.py SECONDS_PER_PHASE``: on the current CUDA device, phase ``waiting`` then
phase ``straggler``, each SECONDS_PER_PHASE long, printing ``PHASE <name> <unix time>`` at each
start and ``END <unix time>`` at the end:

- ``straggler``: bf16 8192x8192 matmuls back to back (the rank every step waits for);
- ``waiting``: the same matmuls for 77 % of each 100 ms step, then ``torch.cuda._sleep`` for
  the rest: a spin kernel resident on the GPU that does no work, as a rank waiting in NCCL's
  all-reduce for the straggler keeps a kernel resident (utilization.gpu stays high, SM
  activity and power drop). 77 % is the share of a rank that is ~30 % faster than the
  straggler (1 / 1.3).
"""

from __future__ import annotations

import sys
import time

import torch

STEP_S = 0.1
BUSY = 0.77


def main() -> int:
    """Run both phases; see the module docstring."""
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 25.0
    dev = torch.device("cuda", 0)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    # matmuls per step and spin cycles for the rest of a step
    t0 = time.perf_counter()
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
    per_mm = (time.perf_counter() - t0) / 50
    n_mm = max(1, round(BUSY * STEP_S / per_mm))
    t0 = time.perf_counter()
    torch.cuda._sleep(10_000_000)
    torch.cuda.synchronize()
    cycles_per_s = 10_000_000 / (time.perf_counter() - t0)
    spin = int(cycles_per_s * (STEP_S - n_mm * per_mm))
    print(f"CALIBRATED matmul {per_mm * 1e3:.2f} ms, {n_mm} per step, spin {spin} cycles")
    for phase in ("waiting", "straggler"):
        print(f"PHASE {phase} {time.time():.3f}", flush=True)
        end = time.time() + seconds
        while time.time() < end:
            for _ in range(n_mm):
                c = a @ b
            if phase == "waiting":
                torch.cuda._sleep(spin)
            else:
                for _ in range(round(n_mm * (1 / BUSY - 1))):
                    c = a @ b
            torch.cuda.synchronize()
    print(f"END {time.time():.3f} {float(c[0, 0])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
