#!/usr/bin/env bash
# Verify `gpuconsole bench` on real GPUs, in one batch (issue 25): the device machine has no
# Docker and no sshd, so the local profile with `runtime: host` is the real path there.
#   0. the bench script alone (`python remote/bench/gpubench.py --mode quick`, cuda:0): its
#      documents, whatever the CLI does;
#   1. `bench --quick` (text, then --json), timed: under 30 s a host is the target;
#   2. `bench --full --dcgm` (DCGM's verdict beside, or "not installed");
#   3. `bench --last`, `submit --dry-run` of the GPU example (names a GPU the bench flagged),
#      and `submit --dry-run --exclude-slow`;
#   4. nvidia-smi before and after, and the job store (no bench job left running).
# Expected on one H200 (what PyTorch measured there before): bf16 ~790 TFLOP/s, device copy
# ~4.3 TB/s (bytes read + written); fp8 ~1,200-1,600 TFLOP/s; PCIe gen 5 x16 ~50-57 GB/s.
# Usage (repository root): scripts/device/verify_bench.sh OUTDIR [JOB_PYTHON [CLI_PYTHON]]
# Needs the CLI's dependencies importable (the device tool carries them as wheels in
# .devwheels/: `pip install --no-index --find-links .devwheels ...` first; nvidia-ml-py's
# pynvml among them, shipped with the bench) and NCCL_NVLS_ENABLE=0 (set here). Without GPUs
# it checks the "nothing to bench" path (exit 4).
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
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

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
cat >"$out/gpu-example.yaml" <<EOF
name: gpu-example
nodes: 1
gpus_per_node: $gpu_field
workdir: $here/scripts/examples
script: train_ddp.py
args: ["--steps", "10"]
EOF
smi() {
    [ "$gpus" -gt 0 ] || return 0
    nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu,clocks.sm,power.draw,temperature.gpu,pcie.link.gen.current,pcie.link.gen.max --format=csv
    nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader
}

echo "== GPUs: $gpus; python: $("$python" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count())')"
echo "== CLI python: $("$cli" -c 'import sys, pynvml; print(sys.version.split()[0], "pynvml", pynvml.__file__)' 2>&1)"
command -v dcgmi && dcgmi --version 2>&1 | head -3
smi | tee "$out/smi-before.txt"

echo "== 0. the bench script alone (cuda:0, quick)"
t0=$(date +%s%N)
(cd "$here/remote/bench" && "$python" gpubench.py --mode quick) >"$out/script.out" 2>"$out/script.err"
echo "exit $? in $(ms "$t0") ms" | tee "$out/script.rc"
cat "$out/script.out"; tail -5 "$out/script.err"

echo "== 1. bench --quick"
t0=$(date +%s%N)
gc bench --quick >"$out/quick.txt" 2>"$out/quick.err"
echo "exit $? in $(ms "$t0") ms" | tee "$out/quick.rc"
cat "$out/quick.txt"; tail -5 "$out/quick.err"
t0=$(date +%s%N)
gc bench --quick --json >"$out/quick.json" 2>"$out/quick-json.err"
echo "exit $? in $(ms "$t0") ms" | tee "$out/quick-json.rc"
"$cli" - "$out/quick.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for g in r["gpus"]:
    t = g["telemetry"]
    print(f'GPU {g["index"]} {g["name"]}: bf16 {g["bf16_tflops"]} TFLOP/s, fp8 {g["fp8_tflops"]} '
          f'({g["fp8_unsupported"]}), copy {g["copy_gbps"]} GB/s, h2d {g["h2d_gbps"]}, '
          f'd2h {g["d2h_gbps"]}, load {g["sustained_tflops"]} TFLOP/s; sampler {t["sampler"]} '
          f'{t["samples"]} samples, SM {t["sm_mhz_mean"]} of {t["sm_max_mhz"]} MHz, '
          f'{t["power_w_mean"]} W of {t["power_limit_w"]}, {t["temp_c_max"]} C, reasons '
          f'{t["reasons"]}, PCIe gen {t["pcie_gen"]}/{t["pcie_gen_max"]} '
          f'x{t["pcie_width"]}/{t["pcie_width_max"]}, others {t["other_processes"]}; '
          f'errors {g["errors"]}; verdict {g["verdict"]["summary"]}')
for h in r["hosts"]:
    print("host", h["host"], h["state"], h["reason"], "busbw", h["busbw_gbps"], h["elapsed_s"], "s")
EOF

echo "== 2. bench --full --dcgm"
t0=$(date +%s%N)
gc bench --full --dcgm --json >"$out/full.json" 2>"$out/full.err"
echo "exit $? in $(ms "$t0") ms" | tee "$out/full.rc"
tail -5 "$out/full.err"
gc bench --last | tee "$out/last.txt"

echo "== 3. submit --dry-run (names a flagged GPU), --exclude-slow"
gc submit "$out/gpu-example.yaml" --dry-run >"$out/dry-run.txt" 2>&1
echo "exit $?" >>"$out/dry-run.txt"; cat "$out/dry-run.txt"
gc submit "$out/gpu-example.yaml" --dry-run --exclude-slow >"$out/dry-run-exclude.txt" 2>&1
echo "exit $?" >>"$out/dry-run-exclude.txt"; cat "$out/dry-run-exclude.txt"

echo "== 4. after"
smi | tee "$out/smi-after.txt"
gc ps --all | tee "$out/ps.txt"
cp "$GPUCONSOLE_STATE_DIR/bench.json" "$out/bench-store.json" 2>/dev/null
echo "== done"
