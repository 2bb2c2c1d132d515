"""The script behind trun-tee-tqdm.txt: a tqdm-style bar redrawn with carriage returns."""

import sys
import time

for i in range(0, 101, 25):
    bar = "#" * (i // 10)
    sys.stderr.write(f"\rprogress: {i:3d}%|{bar:<10}| {i}/100 [00:0{i // 25}<00:00, 9.9it/s]")
    sys.stderr.flush()
    time.sleep(0.05)
sys.stderr.write("\n")
print("done", flush=True)
