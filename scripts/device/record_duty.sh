#!/usr/bin/env bash
# Record real NVML telemetry of the two load shapes of scripts/device/duty_load.py (a rank that
# waits in the collective 23 % of each step, and the straggler it waits for) on one GPU, with
# the agent as the console runs it (agent.py + pynvml.py in one folder, --interval 1.0).
# Writes $OUT/duty.jsonl (agent lines), $OUT/duty.log (the loader's PHASE lines), log.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out-duty}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{
date -u; nvidia-smi -L
W=$(mktemp -d /tmp/gpuconsole-agent.XXXX)
cp remote/agent/agent.py "$W/"
VENV_PYNVML=$(find .venv/lib -maxdepth 3 -path "*/site-packages/pynvml.py" 2>/dev/null | head -1)
if [ -n "$VENV_PYNVML" ]; then cp "$VENV_PYNVML" "$W/pynvml.py"; else
  cp "$($PY -c 'import pynvml; print(pynvml.__file__)')" "$W/pynvml.py"; fi
(sleep 75) | (cd "$W" && "$PY" agent.py --interval 1.0) > "$OUT/duty.jsonl" &
AGENT=$!
sleep 3
$PY scripts/device/duty_load.py 30 | tee "$OUT/duty.log"
sleep 2
kill "$AGENT" 2>/dev/null; wait "$AGENT" 2>/dev/null
wc -l "$OUT/duty.jsonl"
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
for line in open(f"{out}/duty.jsonl"):
    s = json.loads(line)
    g = s["gpus"][0]
    print(round(s["host_time"], 1), g["util_gpu_pct"], g["power_w"], g["sm_clock_mhz"],
          g["throttle_reasons"], (g["gpm"] or {}).get("sm_activity_pct"), g.get("pcie_gen"),
          g.get("pcie_gen_max"), g.get("pcie_width"), g.get("pcie_width_max"))
PY
} 2>&1 | tee "$OUT/log.txt"
