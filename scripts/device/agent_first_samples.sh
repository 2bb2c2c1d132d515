#!/usr/bin/env bash
# On a GPU machine (the device tool), from the repository root: what the agent's first
# samples say about a fully loaded GPU, and where its start-up CPU goes.
#   scripts/device/agent_first_samples.sh OUTDIR [PYTHON]
# 1. matmul_load.py on GPU 0; the agent (--count 4 --interval 0.5) beside it: every sample's
#    GPM near 100 % (the first waits for GPM's 100 ms window; a reading over a shorter one
#    would be 0 %, so the agent never gives one);
# 2. five `--count 1` runs: CPU (user + sys) of each, from /proc/self via `python -c` wrapper;
# 3. `-X importtime` and cProfile of one `--count 1` run.
set -uo pipefail
out=${1:?OUTDIR}
py=${2:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
agent=remote/agent/agent.py
w=$(mktemp -d)  # pynvml.py beside nothing else, as the console ships it (--pynvml-dir)
cp "$("$py" -c 'import pynvml; print(pynvml.__file__)')" "$w/pynvml.py"
nv=(--pynvml-dir "$w")
CUDA_VISIBLE_DEVICES=0 "$py" scripts/device/matmul_load.py 40 4 >"$out/load.txt" 2>&1 &
load=$!
for _ in $(seq 1 120); do grep -q READY "$out/load.txt" 2>/dev/null && break; sleep 0.5; done
"$py" -I -S "$agent" "${nv[@]}" --count 4 --interval 0.5 --no-stdin-watch </dev/null >"$out/first-samples.jsonl" 2>"$out/first-samples.err"
"$py" - "$out/first-samples.jsonl" >"$out/first-samples.txt" <<'PY'
import json, sys
for ln in open(sys.argv[1]):
    s = json.loads(ln)
    for g in s["gpus"]:
        print(s["seq"], g["index"], "util", g["util_gpu_pct"], "gpm", g["gpm"], "err", g["errors"].get("gpm"))
PY
for i in 1 2 3 4 5; do
  "$py" - "$py" "$agent" "$w" <<'PY' >>"$out/start-cpu.txt" 2>&1
import os, resource, subprocess, sys, time
t = time.monotonic()
subprocess.run([sys.argv[1], "-I", "-S", sys.argv[2], "--pynvml-dir", sys.argv[3], "--count", "1", "--no-stdin-watch"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=False)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"wall {1000*(time.monotonic()-t):.0f} ms, cpu user {1000*r.ru_utime:.0f} ms sys {1000*r.ru_stime:.0f} ms")
PY
done
"$py" -I -S -X importtime "$agent" "${nv[@]}" --count 1 --no-stdin-watch </dev/null >/dev/null 2>"$out/importtime.txt"
"$py" -I -S -m cProfile -s cumulative "$agent" "${nv[@]}" --count 1 --no-stdin-watch </dev/null >"$out/cprofile.txt" 2>&1
kill "$load" 2>/dev/null; wait "$load" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv >"$out/smi.txt" 2>&1
"$py" -c 'import sys; print(sys.version)' >"$out/python.txt" 2>&1
echo done
