"""A job with one stuck rank, for ``gpuconsole stacks``: every rank runs ``all_reduce`` in a
loop (gloo on CPU, NCCL on GPUs), except that ``--stuck-rank R`` stops at step
``--stuck-step K`` in ``load_next_shard`` (a sleep standing for a data loader that hangs), so
the other ranks wait in the collective until it comes back.

    torchrun --nnodes 2 --nproc-per-node 2 ... stuck_rank.py --stuck-rank 1 --hold 600
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist


def load_next_shard(seconds: float) -> None:
    time.sleep(seconds)  # the odd one out: it never reaches the all_reduce below


def train(steps: int, stuck_rank: int, stuck_step: int, hold: float, device: str) -> None:
    t = torch.ones(1024, device=device)
    for step in range(steps):
        if dist.get_rank() == stuck_rank and step == stuck_step:
            load_next_shard(hold)
        dist.all_reduce(t)
        if step % 10 == 0:
            print(f"step {step} sum {t[0].item():.0f}", flush=True)
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--stuck-rank", type=int, default=1)
    ap.add_argument("--stuck-step", type=int, default=3)
    ap.add_argument("--hold", type=float, default=600.0, help="seconds the stuck rank sleeps")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(
        "nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=a.hold + 120)
    )
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} ready", flush=True)
    train(a.steps, a.stuck_rank, a.stuck_step, a.hold, "cuda" if cuda else "cpu")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
