"""Loads 64 MiB batches through two DataLoader workers.

With a small /dev/shm (``docker run --shm-size 8m``, a job spec's ``shm_size: 8m``) the workers
run out of shared memory: the integration test of the ``shm_exhausted`` diagnosis
(tests/integration/test_shm_diagnosis.py).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset


class Big(Dataset[torch.Tensor]):
    """64 items of 16 MiB (4 Mi float32 each)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(4 * 1024 * 1024)


if __name__ == "__main__":
    for step, batch in enumerate(DataLoader(Big(), batch_size=4, num_workers=2)):
        print(f"step {step} batch {tuple(batch.shape)}", flush=True)
