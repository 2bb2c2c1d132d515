"""Make the gloo Flight Recorder dumps of this folder: a 2-rank job that runs three
all_reduce, then diverges, and each rank writes its own buffer (``_dump_fr_trace``: gloo has
no dump pipe) to ``/out/gpuconsole_fr_rank_<rank>``.

- ``missing``: rank 1 never calls the 4th all_reduce (``gloo-2rank-missing``);
- ``op``: rank 1 calls broadcast where rank 0 calls all_reduce (``gloo-2rank-op``).

    docker run --rm --network none --hostname localhost -e GLOO_SOCKET_IFNAME=lo \\
        -v $PWD:/w -v $OUT:/out gpuconsole/torch:2.13.0-cpu \\
        torchrun --nnodes 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29400 \\
        --nproc-per-node 2 /w/make_gloo_dumps.py missing

``fr_trace.txt`` beside each pair: ``python -m torch.distributed.flight_recorder.fr_trace``
over the pair as gpuconsole hands it over (``console.stacks.frtrace.dump_files``), PyTorch
2.13.
"""

import os
import sys
import time

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
for _ in range(3):
    dist.all_reduce(t)
if sys.argv[1] == "missing":
    if rank != 1:
        dist.all_reduce(torch.ones(8), async_op=True)
elif sys.argv[1] == "op":
    if rank == 1:
        dist.broadcast(torch.ones(8), 0, async_op=True)
    else:
        dist.all_reduce(torch.ones(8), async_op=True)
time.sleep(2)
data = c10d._dump_fr_trace()
with open(f"/out/gpuconsole_fr_rank_{rank}", "wb") as f:
    f.write(data)
os._exit(0)  # the other rank's collective never completes
