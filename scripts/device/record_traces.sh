#!/usr/bin/env bash
# Record real NVML telemetry traces and the agent's CPU cost on a GPU machine, in one batch.
#
# Run from the repository root on the device machine (2 GPUs, NVML, nvidia-smi, torch with
# CUDA). Writes into $OUT (default ./out-traces):
#   h200-idle.jsonl, h200-load.jsonl  agent lines (python3 agent.py --interval 1.0), idle / with
#                                     a bf16 matmul loop on GPU 0 only
#   h200-smi.csv                      nvidia-smi polls at the moments of the agent's lines
#   loader.pid, meta.json             the loader's PID, versions, compute apps, agent exit
#   bench.txt, bench.json             scripts/bench/agent_cost.py (agent vs nvidia-smi CPU)
#   log.txt                           everything printed (8 files: the device tool's limit)
# The agent runs the way the console runs it: agent.py and pynvml.py copied into one folder.
# pynvml.py is the repo's .venv copy when it was carried along (what the console uploads),
# else the machine's nvidia-ml-py.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out-traces}
mkdir -p "$OUT"
# Never use NVLink multicast on shared hosts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

main() {
echo "== machine"; date -u; uname -r; $PY -V; nvidia-smi -L
nvidia-smi --query-gpu=index,name,driver_version,memory.total,persistence_mode,mig.mode.current \
  --format=csv
W=$(mktemp -d /tmp/gpuconsole-agent.XXXX)
cp remote/agent/agent.py "$W/"
VENV_PYNVML=$(find .venv/lib -maxdepth 3 -path "*/site-packages/pynvml.py" 2>/dev/null | head -1)
if [ -n "$VENV_PYNVML" ]; then
  cp "$VENV_PYNVML" "$W/pynvml.py"; echo "pynvml.py: repo .venv copy ($VENV_PYNVML)"
else
  cp "$($PY -c 'import pynvml; print(pynvml.__file__)')" "$W/pynvml.py"
  echo "pynvml.py: the machine's nvidia-ml-py"
fi
sha256sum "$W/pynvml.py"

echo "== one agent sample (quick check)"
(sleep 3) | (cd "$W" && timeout 20 "$PY" agent.py --interval 1.0 --count 1) > "$W/first.json"
echo "rc=$?"; head -c 600 "$W/first.json"; echo

echo "== record idle + load"
$PY scripts/device/record_traces.py --out "$OUT" --agent-dir "$W" --python "$PY" \
  --loader "$PY $PWD/scripts/device/matmul_load.py 90 16" --idle 15 --load 25
echo "record rc=$?"

echo "== agent cost"
$PY scripts/bench/agent_cost.py --pynvml-dir "$W" --samples 60 --interval 0.05 --spawns 20 \
  --json "$OUT/bench.json" | tee "$OUT/bench.txt"
echo "bench rc=$?"

echo "== quick checks"
$PY - "$OUT" <<'EOF'
import csv, json, sys
out = sys.argv[1]
load = [json.loads(l) for l in open(f"{out}/h200-load.jsonl")]
idle = [json.loads(l) for l in open(f"{out}/h200-idle.jsonl")]
smi = {(r["phase"], int(r["agent_seq"]), int(r["index"])): r
       for r in csv.DictReader(open(f"{out}/h200-smi.csv"))}
pid = int(open(f"{out}/loader.pid").read())
worst_mem, worst_util = 0.0, 0
for phase, lines in (("idle", idle), ("load", load)):
    for s in lines:
        for g in s["gpus"]:
            r = smi.get((phase, s["seq"], g["index"]))
            if not r or g["mem_used_mib"] is None or g["util_gpu_pct"] is None:
                continue
            dm = abs(g["mem_used_mib"] - int(r["memory_used_mib"]))
            du = abs(g["util_gpu_pct"] - int(r["util_gpu_pct"]))
            if phase == "load":
                worst_mem = max(worst_mem, dm / max(1, int(r["memory_used_mib"])))
                worst_util = max(worst_util, du)
print(f"load: worst memory disagreement {100 * worst_mem:.2f}%, worst util {worst_util} points")
g0 = [s["gpus"][0] for s in load]; g1 = [s["gpus"][1] for s in load]
print("GPU0 util", [g["util_gpu_pct"] for g in g0])
print("GPU1 util", [g["util_gpu_pct"] for g in g1])
print("GPU0 gpm", [g["gpm"] for g in g0[-3:]])
print("GPU0 procs", [[(p["pid"], p["used_mib"]) for p in s["processes"] if p["gpu_index"] == 0]
                     for s in load[-2:]], "loader pid", pid)
print("errors GPU0", g0[-1]["errors"], "sample errors", load[-1]["errors"])
EOF
ls -la "$OUT"
}

main 2>&1 | tee "$OUT/log.txt"
