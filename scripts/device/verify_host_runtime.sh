#!/usr/bin/env bash
# Verify `runtime: host` on real GPUs, in one batch (issue 10): the device machine has no
# Docker and no sshd, so the local profile with `runtime: host` is the real path there.
#   1. `submit --follow` of the GPU example (NCCL, bf16) on every GPU, to its exit code;
#   2. the same job, long: `top --once` (text and --json) while it runs shows the GPUs busy
#      with the job's ranks, `gpus --free` is empty, a second submit is refused naming the
#      job, `stop` frees the GPU memory (nvidia-smi's memory.used and compute apps after);
#   3. `ps --json` after all of it.
# Usage (repository root): scripts/device/verify_host_runtime.sh OUTDIR [JOB_PYTHON [CLI_PYTHON]]
# Needs the CLI's dependencies importable (the device tool carries them as wheels in
# .devwheels/: `pip install --no-index --find-links .devwheels ...` first) and
# NCCL_NVLS_ENABLE=0 (set here). Also runs without GPUs (gpus_per_node 0) for a dry check.
set -uo pipefail

out=${1:?OUTDIR}
python=${2:-python3}
cli=${3:-$python}
mkdir -p "$out"
here=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPUCONSOLE_STATE_DIR=$out/state
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
gc() { "$cli" -m console.cli -p "$out/profile.yaml" "$@"; }

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
fi
gpu_field=$([ "$gpus" -gt 0 ] && echo all || echo 0)

cat >"$out/profile.yaml" <<EOF
name: device-host
hosts:
  local:
    transport: local
    runtime: host
    python: $python
EOF
spec() {  # spec NAME STEPS SLEEP
    cat >"$out/$1.yaml" <<EOF
name: $1
nodes: 1
gpus_per_node: $gpu_field
workdir: $here/scripts/examples
script: train_ddp.py
args: ["--steps", "$2", "--step-sleep", "$3", "--out", "$out/ckpt-$1", "--workers", "1"]
env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1"}
EOF
}
smi() {
    [ "$gpus" -gt 0 ] || return 0
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
    nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader
}

echo "== GPUs: $gpus; python: $("$python" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count())')"
smi | tee "$out/smi-before.txt"

echo "== 1. submit --follow (GPU example, 30 steps)"
spec gpu-follow 30 0
t0=$(date +%s%N)
gc submit "$out/gpu-follow.yaml" --follow >"$out/follow.out" 2>"$out/follow.err"
echo "exit $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee "$out/follow.rc"
tail -5 "$out/follow.out"; tail -3 "$out/follow.err"

echo "== 2. a long run: top, gpus --free, a second submit, stop"
spec gpu-long 100000 0.02
gc submit "$out/gpu-long.yaml" >"$out/long.id" 2>"$out/long.err"
job=$(cat "$out/long.id"); echo "job $job"
[ -n "$job" ] || { cat "$out/long.err"; exit 1; }
for i in $(seq 120); do  # until its rank holds the GPUs and works (or it ended)
    gc top --once --json >"$out/top.json" 2>/dev/null
    if grep -q "\"$job\"" "$out/top.json" && [ "$i" -gt 3 ]; then echo "mapped after ${i}s"; break; fi
    gc ps --json 2>/dev/null | "$cli" -c 'import json,sys; j=[x for x in json.load(sys.stdin) if x["id"]==sys.argv[1]]; sys.exit(0 if j and j[0]["state"] in ("running","pending") else 1)' "$job" || { echo "job ended early"; break; }
    sleep 1
done
gc top --once | tee "$out/top.txt"
gc gpus --free | tee "$out/gpus-free.txt"; echo "gpus --free exit ${PIPESTATUS[0]}"
smi | tee "$out/smi-during.txt"
spec gpu-second 10 0
gc submit "$out/gpu-second.yaml" >"$out/second.out" 2>"$out/second.err"
echo "second submit exit $?" | tee "$out/second.rc"; cat "$out/second.err"
gc logs "$job" --tail 5
t0=$(date +%s%N)
gc stop "$job" 2>&1 | tee "$out/stop.txt"
echo "stop took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
sleep 2
smi | tee "$out/smi-after.txt"
echo "== processes of the job left (GPUCONSOLE_JOB_ID=$job in environ):"
grep -l "GPUCONSOLE_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | tee "$out/left.txt"
echo "== 3. ps"
gc ps | tee "$out/ps.txt"
gc ps --json >"$out/ps.json"
gc stop gpu-second >/dev/null 2>&1
gc rm --force "$job" >/dev/null 2>&1
gc rm --force gpu-second >/dev/null 2>&1
gc rm gpu-follow >/dev/null 2>&1
echo "== done"
