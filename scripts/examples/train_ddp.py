"""A small, real DistributedDataParallel training job, meant to be started by torchrun.

    torchrun --standalone --nproc-per-node 2 train_ddp.py --steps 20 --out /tmp/ckpt

Backend: NCCL with bf16 autocast when CUDA is available (one GPU per process, picked by
LOCAL_RANK), gloo on CPU otherwise. The data is a synthetic 4-class classification set made
from a fixed seed (no downloads), served by a DataLoader with worker processes: workers hand
batches to the trainer through shared memory, so a container needs a big enough /dev/shm.

Rank 0 writes ``<out>/checkpoint.pt`` atomically every ``--ckpt-every`` steps and at the end;
a restarted job resumes from it. ``--fail-rank R --fail-step K`` makes global rank R raise at
step K, to exercise failure handling (torchrun prints its failure summary, and ``@record``
makes it write the rank's error file). ``--oom-rank R --fail-step K`` makes global rank R ask
its GPU for more memory than it has at step K: a real CUDA out-of-memory error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

FEATURES = 32  # input width of each sample
CLASSES = 4  # number of target classes
SAMPLES = 8192  # size of the synthetic data set


def parse_args() -> argparse.Namespace:
    """Command-line options of the job (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=50, help="total optimizer steps")
    p.add_argument("--batch-size", type=int, default=64, help="samples per step per rank")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    p.add_argument("--out", type=Path, default=Path("/out"), help="checkpoint folder")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds to sleep per step")
    p.add_argument(
        "--slow-rank", type=int, default=-1, help="global rank that computes more per step"
    )
    p.add_argument(
        "--slow-work",
        type=int,
        default=0,
        help="extra 512x512 matmuls --slow-rank does per step (a straggler: the others wait "
        "for it in the gradient all-reduce)",
    )
    p.add_argument("--fail-rank", type=int, default=-1, help="global rank that fails on purpose")
    p.add_argument("--fail-step", type=int, default=-1, help="step at which --fail-rank fails")
    p.add_argument(
        "--oom-rank",
        type=int,
        default=-1,
        help="global rank that runs out of GPU memory at --fail-step (allocates twice the GPU)",
    )
    return p.parse_args()


def make_dataset() -> TensorDataset:
    """Deterministic synthetic data: x float32 [SAMPLES, FEATURES], y int64 [SAMPLES].

    The label is the argmax of a fixed random linear map of x, plus a little noise, so the
    task is learnable and the loss visibly falls. Every rank builds the same set.
    """
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.1 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` with torch.save to a temp file, then rename it over ``path``.

    The rename is atomic on POSIX, so a reader never sees a half-written checkpoint.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)


def exhaust_memory(device: torch.device) -> None:
    """Allocate twice the GPU's memory at once: CUDA's caching allocator raises
    ``torch.OutOfMemoryError`` ("CUDA out of memory. Tried to allocate ... GiB. GPU 0 has a
    total capacity of ..."). A CPU rank has no GPU memory to run out of: it says so."""
    if device.type != "cuda":
        raise RuntimeError("--oom-rank needs a GPU: this rank runs on the CPU")
    total = torch.cuda.get_device_properties(device).total_memory
    torch.empty(2 * total, dtype=torch.uint8, device=device)


def say(line: str) -> None:
    """Print one line in a single write (flushed), so lines of ranks sharing a pipe never mix."""
    print(line + "\n", end="", flush=True)


@record
def main() -> None:
    """Train for ``--steps`` steps; every rank prints a startup line and one line per step."""
    args = parse_args()
    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK (node rank), MASTER_ADDR/PORT.
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    say(
        f"rank {rank}/{world_size} local_rank {local_rank} "
        f"node_rank {os.environ.get('GROUP_RANK', '?')} backend {backend} device {device}"
    )

    # Resume: only rank 0 reads the checkpoint (other nodes need no copy of it). Its weights
    # reach the other ranks through DDP, which broadcasts rank 0's parameters when it wraps
    # the model; the step and loss go by a broadcast. Plain SGD keeps no per-parameter state,
    # so nothing else is needed (an optimizer with state, e.g. Adam, would need it sent too).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, CLASSES)).to(device)
    ckpt_path: Path = args.out / "checkpoint.pt"
    meta = torch.tensor([0.0, float("nan")], dtype=torch.float64, device=device)  # step, loss
    if rank == 0 and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        meta[0], meta[1] = ckpt["step"], ckpt["loss"]
    dist.broadcast(meta, src=0)
    start_step, loss_value = int(meta[0].item()), float(meta[1].item())
    if start_step > 0:
        say(f"resumed from step {start_step}")
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    dataset = make_dataset()
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True
    )
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=use_cuda,
        drop_last=True,
    )

    def checkpoint(step: int) -> None:
        if rank == 0:
            save_checkpoint(
                ckpt_path, {"step": step, "loss": loss_value, "model": model.state_dict()}
            )

    step, last_saved = start_step, start_step
    epoch = start_step // len(loader)  # resume with the shuffle order where it left off
    while step < args.steps:
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        tick = time.perf_counter()
        for x, y in loader:
            if step >= args.steps:
                break
            step += 1
            if rank == args.fail_rank and step == args.fail_step:
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if rank == args.oom_rank and step == args.fail_step:
                exhaust_memory(device)
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_cuda):
                loss = loss_fn(ddp(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            loss_value = loss.item()  # this rank's loss on its own batch
            if rank == args.slow_rank and args.slow_work > 0:
                busy = torch.randn(512, 512, device=device)
                for _ in range(args.slow_work):
                    busy = torch.tanh(busy @ busy)
            if args.step_sleep > 0:
                time.sleep(args.step_sleep)
            now = time.perf_counter()
            sps = x.shape[0] / (now - tick)  # this rank's samples per second
            tick = now
            say(
                f"step {step}/{args.steps} loss {loss_value:.4f} samples/s {sps:.1f} "
                f"world_size {world_size}"
            )
            if args.ckpt_every > 0 and step % args.ckpt_every == 0:
                checkpoint(step)
                last_saved = step
        epoch += 1

    if last_saved != step:
        checkpoint(step)
    say(f"done steps {args.steps} final_loss {loss_value:.4f}")
    # every rank (and rank 0's final checkpoint) done before the process group goes: tearing
    # it down while a peer is still inside gloo/NCCL can abort that peer at exit
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Everything is written and the process group destroyed. Under torch 2.13 (gloo, CPU) the
    # interpreter's own shutdown still aborted 1 run in 20 here ("terminate called without an
    # active exception": a native thread still joinable at exit; pytorch/pytorch#190489), which
    # torchrun reports as a failed rank after a finished run. Leave without that shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
