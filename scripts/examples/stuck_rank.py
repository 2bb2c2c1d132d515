"""A job with one stuck rank, for ``gpuconsole stacks``: every rank runs ``all_reduce`` in a
loop (gloo on CPU, NCCL on GPUs), except that ``--stuck-rank R`` stops at step
``--stuck-step K`` in ``load_next_shard`` (a sleep standing for a data loader that hangs), so
the other ranks wait in the collective until it comes back.

    torchrun --nnodes 2 --nproc-per-node 2 ... stuck_rank.py --stuck-rank 1 --hold 600

``--fr-dump-after S``: S seconds after start, every rank writes its Flight Recorder buffer
where PyTorch's NCCL watchdog writes it when a collective times out
(``$TORCH_FR_DUMP_TEMP_FILE<rank>``): a gloo job has neither the watchdog's dump nor the
dump pipe, so this stands in for the dump an NCCL job leaves.
"""

from __future__ import annotations

import argparse
import datetime
import os
import threading
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


def dump_flight_recorder_after(seconds: float) -> None:
    """Write this rank's Flight Recorder buffer to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` once,
    ``seconds`` from now (whole: written aside, then renamed)."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    if not prefix or dump is None:
        return

    def write() -> None:
        time.sleep(seconds)
        path = f"{prefix}{dist.get_rank()}"
        with open(path + ".tmp", "wb") as f:
            f.write(dump())
        os.replace(path + ".tmp", path)

    threading.Thread(target=write, daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--stuck-rank", type=int, default=1)
    ap.add_argument("--stuck-step", type=int, default=3)
    ap.add_argument("--hold", type=float, default=600.0, help="seconds the stuck rank sleeps")
    ap.add_argument("--fr-dump-after", type=float, help="write the Flight Recorder dump then")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(
        "nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=a.hold + 120)
    )
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} ready", flush=True)
    if a.fr_dump_after is not None:
        dump_flight_recorder_after(a.fr_dump_after)
    train(a.steps, a.stuck_rank, a.stuck_step, a.hold, "cuda" if cuda else "cpu")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
