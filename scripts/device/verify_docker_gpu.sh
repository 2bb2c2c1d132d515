#!/usr/bin/env bash
# Verify the Docker path on a real GPU, in one batch (issue 25 part 1): the job in a container
# started with --gpus on the local Docker engine, through the CLI.
#   1. `submit --follow` of the GPU example (NCCL, bf16, DataLoader workers, --shm-size, a
#      checkpoint volume) to its exit code, then again with more steps: it resumes;
#   2. a long run of it: `top --once` (text, --json) maps the rank's process to container, job
#      and rank; `gpus --free` leaves the GPU out; a second submit is refused naming the job;
#      the app's fleet view (Textual's pilot) shows the job on the GPU; `watch --metrics-port`
#      serves series carrying hpc_job and rank; `stop` (timed) and GPU memory back to 0 MiB
#      (timed); `logs` and `cp JOB:/out .` after;
#   3. a rank that runs out of CUDA memory: the failure as `ps --json`, `describe` and
#      `diagnose` (of its saved `logs`) read it;
#   4. `notebook` on the GPU: JupyterLab in a container, a kernel's torch.cuda.is_available();
#   5. `ps` of all of it;
#   6. `bench --quick` and `bench --full --json` through Docker (the profile's image).
# Usage (repository root): scripts/device/verify_docker_gpu.sh OUTDIR [CLI_PYTHON]
# STEPS (default "1 2 3 4 5 6") picks the sections to run.
# Environment: IMAGE (default gpuconsole/device-base, made by ../shared/device/docker-gpu/up),
# MOUNTS (comma-separated, default "/usr:/usr:ro,/opt/torch:/opt/torch:ro": the device's own
# Python, PyTorch and NCCL in that empty image; "" for none). The CLI's dependencies must be
# importable by CLI_PYTHON and the Docker engine up. Without GPUs it runs as a dry check
# (gpus_per_node 0, gloo on CPU; the OOM and notebook-GPU checks then say so).
set -uo pipefail

out=${1:?OUTDIR}
cli=${2:-python3}
image=${IMAGE:-gpuconsole/device-base}
mounts=${MOUNTS-/usr:/usr:ro,/opt/torch:/opt/torch:ro}
steps=" ${STEPS:-1 2 3 4 5 6} "
want() { [[ $steps == *" $1 "* ]]; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPUCONSOLE_STATE_DIR=$out/state GPUCONSOLE_CONFIG_DIR=$out/config
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
gc() { "$cli" -m console.cli -p "$out/profile.yaml" "$@"; }
bg() { ( exec "$cli" -m console.cli -p "$out/profile.yaml" "$@" ) & }  # $! is the CLI itself
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
fi
gpu_field=$([ "$gpus" -gt 0 ] && echo all || echo 0)
mount_list=$(IFS=,; for m in $mounts; do printf '"%s", ' "$m"; done)

cat >"$out/profile.yaml" <<EOF
name: device-docker
hosts:
  local:
    transport: local
defaults:
  image: $image
  mounts: [${mount_list%, }]
  env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
EOF
spec() {  # spec NAME STEPS SLEEP [EXTRA ARG...]
    local name=$1 steps=$2 sleep=$3
    shift 3
    local extra=""
    for a in "$@"; do extra+=", \"$a\""; done
    cat >"$out/$name.yaml" <<EOF
name: $name
nodes: 1
gpus_per_node: $gpu_field
workdir: $here/scripts/examples
script: train_ddp.py
args: ["--steps", "$steps", "--step-sleep", "$sleep", "--out", "/out", "--workers", "2"$extra]
mounts: ["$out/ckpt-$name:/out"]
shm_size: 2g
EOF
    mkdir -p "$out/ckpt-$name"
}
smi() {
    [ "$gpus" -gt 0 ] || return 0
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
    nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader
}
job_state() {  # job_state JOB: its state in `ps --json`
    gc ps --json 2>/dev/null | "$cli" -c 'import json,sys; j=[x for x in json.load(sys.stdin) if x["id"]==sys.argv[1]]; print(j[0]["state"] if j else "gone")' "$1"
}

echo "== GPUs: $gpus; image $image; mounts [$mounts]; docker $(docker version --format '{{.Server.Version}}' 2>&1)"
docker run --rm --gpus all $(for m in ${mounts//,/ }; do printf -- '-v %s ' "$m"; done) "$image" \
    python3 -c 'import sys, torch; print("in a container: python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count())' 2>&1 | tail -2
smi | tee "$out/smi-before.txt"

if want 1; then
echo "== 1. submit --follow (GPU example, 30 steps), then 40 steps: resume"
spec gpu-ckpt 30 0
t0=$(date +%s%N)
gc submit "$out/gpu-ckpt.yaml" --follow >"$out/follow.out" 2>"$out/follow.err"
echo "exit $? in $(ms "$t0") ms" | tee "$out/follow.rc"
grep -m1 "backend" "$out/follow.out"; tail -3 "$out/follow.out"; tail -3 "$out/follow.err"
ls -la "$out/ckpt-gpu-ckpt"
gc describe gpu-ckpt >"$out/describe-ckpt.txt" 2>&1
grep -E "docker run|--gpus|--shm-size|no-new-privileges|cap-drop" "$out/describe-ckpt.txt" | head -5
sed -i 's/"--steps", "30"/"--steps", "40"/' "$out/gpu-ckpt.yaml"
gc rm gpu-ckpt >/dev/null 2>&1
t0=$(date +%s%N)
gc submit "$out/gpu-ckpt.yaml" --follow >"$out/resume.out" 2>"$out/resume.err"
echo "resume exit $? in $(ms "$t0") ms" | tee "$out/resume.rc"
grep -E "resumed from|backend" "$out/resume.out"; tail -2 "$out/resume.out"; tail -2 "$out/resume.err"
fi

if want 2; then
echo "== 2. a long run: top, gpus --free, second submit, fleet view, metrics, stop, logs, cp"
spec gpu-long 100000 0.02
gc submit "$out/gpu-long.yaml" >"$out/long.id" 2>"$out/long.err"
job=$(tail -1 "$out/long.id"); echo "job $job"
[ -n "$job" ] || { cat "$out/long.err"; exit 1; }
for i in $(seq $([ "$gpus" -gt 0 ] && echo 120 || echo 5)); do  # until its rank holds the GPU
    gc top --once --json >"$out/top.json" 2>/dev/null
    if grep -q "\"$job\"" "$out/top.json" && [ "$i" -gt 3 ]; then echo "mapped after ${i}s"; break; fi
    st=$(job_state "$job"); case $st in running|pending) ;; *) echo "job $st early"; break ;; esac
    sleep 1
done
gc top --once | tee "$out/top.txt"
gc gpus --free | tee "$out/gpus-free.txt"; echo "gpus --free exit ${PIPESTATUS[0]}"
smi | tee "$out/smi-during.txt"
spec gpu-second 10 0
gc submit "$out/gpu-second.yaml" >"$out/second.out" 2>"$out/second.err"
echo "second submit exit $?" | tee "$out/second.rc"; cat "$out/second.err"
timeout 120 "$cli" scripts/device/fleet_pilot.py "$out/profile.yaml" "$job" "$out/fleet.txt" --timeout 60
echo "fleet pilot exit $?"; grep -E "$job|GPU" "$out/fleet.txt" | head -8
bg watch --metrics-port 0 --interval 1 >"$out/watch.out" 2>"$out/watch.err"
wpid=$!
port=""
for _ in $(seq 40); do
    port=$(grep -oE '127\.0\.0\.1:[0-9]+' "$out/watch.err" | head -1 | cut -d: -f2)
    [ -n "$port" ] && break; sleep 0.5
done
sleep 6  # a few telemetry rounds
"$cli" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" 2>&1
kill -TERM "$wpid"; wait "$wpid"; echo "watch exit $? (port $port)"
grep -E "hpc_job=\"$job\"" "$out/metrics.txt" | head -6
gc logs "$job" --tail 3
t0=$(date +%s%N)
gc stop "$job" 2>&1 | tee "$out/stop.txt"
echo "stop took $(ms "$t0") ms" | tee "$out/stop-time.txt"
if [ "$gpus" -gt 0 ]; then
    for _ in $(seq 100); do
        used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s+=$1} END {print s}')
        [ "$used" = 0 ] && break; sleep 0.1
    done
    echo "GPU memory used ${used} MiB $(ms "$t0") ms after stop began" | tee -a "$out/stop-time.txt"
fi
smi | tee "$out/smi-after.txt"
gc logs "$job" --tail 3 >"$out/logs-after.txt" 2>&1; echo "logs after stop exit $?"; cat "$out/logs-after.txt"
rm -rf "$out/cp"; mkdir -p "$out/cp"
gc cp "$job:/out" "$out/cp" 2>&1; echo "cp exit $?"; ls -la "$out/cp/out" 2>&1
fi

if want 3; then
echo "== 3. a rank out of CUDA memory"
spec gpu-oom 50 0 --oom-rank 0 --fail-step 5
t0=$(date +%s%N)
gc submit "$out/gpu-oom.yaml" --follow >"$out/oom.out" 2>"$out/oom.err"
echo "oom exit $? in $(ms "$t0") ms" | tee "$out/oom.rc"
tail -4 "$out/oom.err"
gc ps --json >"$out/ps-oom.json" 2>&1
"$cli" -c 'import json,sys; j=[x for x in json.load(open(sys.argv[1])) if x["name"]=="gpu-oom"]; print(json.dumps(j[0].get("failure"), indent=1) if j else "no job")' "$out/ps-oom.json"
gc describe gpu-oom >"$out/describe-oom.txt" 2>&1
grep -iE -A3 "failure|cause|fix" "$out/describe-oom.txt" | head -12
gc logs gpu-oom >"$out/oom-logs.txt" 2>&1
gc diagnose "$out/oom-logs.txt" >"$out/diagnose-oom.txt" 2>&1; echo "diagnose exit $?"; cat "$out/diagnose-oom.txt"
fi

if want 4; then
echo "== 4. notebook on the GPU"
nbgpus=$([ "$gpus" -gt 0 ] && echo 1 || echo 0)
mkdir -p "$out/nb"
bg notebook --gpus "$nbgpus" --name nb-gpu -w "$out/nb" --timeout 240 >"$out/notebook.out" 2>"$out/notebook.err"
npid=$!
url=""
for _ in $(seq 500); do
    url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/lab\?token=[0-9a-f]+' "$out/notebook.out" | head -1)
    [ -n "$url" ] && break
    kill -0 "$npid" 2>/dev/null || break
    sleep 0.5
done
echo "notebook url: ${url:+http://127.0.0.1:PORT/lab?token=(hidden)}"
if [ -n "$url" ]; then
    "$cli" scripts/device/jupyter_probe.py "$url" >"$out/kernel.json" 2>&1; echo "kernel probe exit $?"
    cat "$out/kernel.json"
else
    tail -5 "$out/notebook.out" "$out/notebook.err"
fi
kill -TERM "$npid" 2>/dev/null; wait "$npid"; echo "notebook CLI exit $? (SIGTERM)"
gc stop nb-gpu >/dev/null 2>&1; gc rm nb-gpu >/dev/null 2>&1
fi

if want 5; then
echo "== 5. ps"
gc ps | tee "$out/ps.txt"
gc ps --json >"$out/ps.json"
for j in gpu-second "$job" gpu-ckpt gpu-oom; do gc rm --force "$j" >/dev/null 2>&1; done
smi
fi

if want 6; then
echo "== 6. bench through Docker"
t0=$(date +%s%N)
gc bench --quick >"$out/bench-quick.txt" 2>"$out/bench-quick.err"
echo "bench --quick exit $? in $(ms "$t0") ms"; cat "$out/bench-quick.txt"; tail -3 "$out/bench-quick.err"
t0=$(date +%s%N)
gc bench --full --json >"$out/bench-full.json" 2>"$out/bench-full.err"
echo "bench --full exit $? in $(ms "$t0") ms"; tail -3 "$out/bench-full.err"
gc bench --last | tee "$out/bench-last.txt"
fi

echo "== done"
