"""Smoke test for the gpuconsole torch image, run under torchrun by scripts/lib/build-image.

Every rank joins a gloo process group and all-reduces its rank + 1; the sum must be
1 + 2 + ... + world_size on every rank.
"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert t.item() == expected, (t.item(), expected)
print(f"rank {rank}/{world}: gloo all_reduce ok ({t.item():g}), torch {torch.__version__}")
dist.destroy_process_group()
