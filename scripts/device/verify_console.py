"""Verify the console's telemetry path on real GPUs, through the local transport.

Run from the repository root on the device machine (no docker, no sshd there), with the
``.venv``'s ``pynvml.py`` importable (``PYTHONPATH`` pointing at its folder). While
``matmul_load.py`` loads GPU 0 only:

1. ``host_samples(mode="auto")``: the agent uploaded to ``~/.cache/gpuconsole/agent/<hash>``
   exactly as the console does, 3 samples;
2. ``host_samples(mode="smi")``: the nvidia-smi ``-lms`` fallback with its compute-apps
   poll, 4 samples;
3. both fed into a FleetState: the fleet table, free GPUs, GPU 0's holder.

Writes ``$OUT/h200-smi-fallback.jsonl`` (the fallback's samples) and prints a report; exits
non-zero if a check fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from console.fleet.render import render_fleet  # noqa: E402
from console.fleet.state import FleetState, free_gpus, gpu_holders  # noqa: E402
from remote.telemetry.stream import host_samples  # noqa: E402
from remote.transport import LocalTransport  # noqa: E402


async def take(mode: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stream = host_samples(LocalTransport("h200"), 1.0, mode=mode)
    try:
        async for s in stream:
            out.append(s)
            if len(out) >= n:
                break
    finally:
        await stream.aclose()
    return out


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "out-verify"))
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    loader = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/device/matmul_load.py"), "60", "16"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert loader.stdout is not None
    ready = loader.stdout.readline().strip()
    print("loader:", ready, "pid", loader.pid)
    time.sleep(3)
    failures = []
    try:
        agent = asyncio.run(take("auto", 3))
        smi = asyncio.run(take("smi", 4))
    finally:
        loader.terminate()
        loader.wait()
    (out_dir / "h200-smi-fallback.jsonl").write_text(
        "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in smi)
    )
    for name, samples in (("agent", agent), ("smi", smi)):
        st = FleetState(["h200"])
        for s in samples:
            st.on_sample("h200", s)
        print(f"\n== {name}: source {samples[-1]['source']}, state {samples[-1]['state']}")
        print(render_fleet(st))
        free = free_gpus(st)
        holders = gpu_holders(st, "h200")
        pids = [h.pid for h in holders[0]] if holders else None
        print("free:", free, "GPU 0 holders:", pids)
        if free != {"h200": [1]}:
            failures.append(f"{name}: free GPUs {free}, expected GPU 1 only")
        if not pids or loader.pid not in pids:
            failures.append(f"{name}: loader pid {loader.pid} not on GPU 0 ({pids})")
        g0 = samples[-1]["gpus"][0]
        if not (g0.get("util_gpu_pct") or 0) >= 90:
            failures.append(f"{name}: GPU 0 utilization {g0.get('util_gpu_pct')}")
    print("\nFAILURES:" if failures else "\nall checks passed", *failures, sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
