"""Loads batches through DataLoader workers; with a small /dev/shm the workers run out of
shared memory (the test of `shm_exhausted` diagnosis)."""
import torch
from torch.utils.data import DataLoader, Dataset

class Big(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return torch.ones(4 * 1024 * 1024)  # 16 MiB of float32

if __name__ == "__main__":
    for step, batch in enumerate(DataLoader(Big(), batch_size=4, num_workers=2)):
        print(f"step {step} batch {tuple(batch.shape)}", flush=True)
