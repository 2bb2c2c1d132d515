"""Steady GPU load for recording telemetry: bf16 8192x8192 matmuls on the current CUDA device.

``python3 matmul_load.py [SECONDS] [BALLAST_GIB]``: allocates BALLAST_GIB (default 16) of device
memory so memory use is plainly visible, warms up, prints ``READY <pid>`` and then multiplies
for SECONDS (default 60) or until killed. Pin it with ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import sys
import time

import torch


def main() -> int:
    """Load the GPU; see the module docstring."""
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    ballast_gib = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    dev = torch.device("cuda", 0)
    ballast = torch.empty(ballast_gib << 30, dtype=torch.uint8, device=dev)
    ballast.fill_(1)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = a @ b
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    # Run a moment before READY so utilization and GPM counters are at steady state.
    t_ready = time.time() + 2.0
    while time.time() < t_ready:
        for _ in range(50):
            c = a @ b
        torch.cuda.synchronize()
    print(
        f"READY {os.getpid()} {torch.cuda.get_device_name(dev)} "
        f"{torch.cuda.memory_reserved(dev) >> 20}MiB",
        flush=True,
    )
    end = time.time() + seconds
    n = 0
    t0 = time.time()
    while time.time() < end:
        for _ in range(50):
            c = a @ b
        torch.cuda.synchronize()
        n += 50
    dt = time.time() - t0
    print(
        f"DONE {n} matmuls in {dt:.1f} s: {2 * 8192**3 * n / dt / 1e12:.0f} TFLOP/s "
        f"({float(c[0, 0]):.1f})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
