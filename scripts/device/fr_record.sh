#!/usr/bin/env bash
# Record a real PyTorch Flight Recorder dump of an NCCL job, taken the way gpuconsole takes it,
# and PyTorch's own analysis of it, on the lent GPU machine (one GPU is enough: a 1-rank job).
#
# Run from the repository root on the device machine, with .venv/bin/py-spy carried along:
#   OUT=... bash scripts/device/fr_record.sh
# Writes into $OUT:
#   stacks-doc.json      remote/agent/stacks.py --flight-recorder over the running job: the
#                        ranks' py-spy stacks and each rank's dump summary, as a node sends it
#   gpuconsole_fr_rank_0 the dump itself (PyTorch's pickle)
#   fr_trace.txt         python -m torch.distributed.flight_recorder.fr_trace on the dumps
#   fr_trace_entries.txt the same with --just_print_entries
#   log.txt              everything printed (versions, the job's warnings)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out-fr}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PYSPY=${PYSPY:-$PWD/.venv/bin/py-spy}

main() {
  echo "== machine"; date -u; $PY -V; nvidia-smi -L
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  W=$(mktemp -d /tmp/gpuconsole-fr.XXXX)
  # the variables gpuconsole gives a job (console/jobs/flightrec.py), dumps in $W
  eval "$($PY - "$W" <<'PY'
import importlib.util, shlex, sys
spec = importlib.util.spec_from_file_location("flightrec", "console/jobs/flightrec.py")
fr = importlib.util.module_from_spec(spec); spec.loader.exec_module(fr)
for k, v in fr.flight_recorder_env(sys.argv[1]).items():
    print(f"export {k}={shlex.quote(v)}")
PY
)"
  env | grep -E '^TORCH_(NCCL|FR)_' | sort
  export GPUCONSOLE_FR_TEST=1
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 \
      scripts/examples/stuck_rank.py --steps 100000000 --stuck-rank 7 > "$W/job.log" 2>&1 &
  JOB=$!
  for _ in $(seq 1 60); do grep -q "step 10 " "$W/job.log" && break; sleep 1; done
  sleep 2
  tail -5 "$W/job.log"
  echo "== stacks.py --flight-recorder"
  $PY remote/agent/stacks.py --py-spy "$PYSPY" --flight-recorder --env GPUCONSOLE_FR_TEST=1 \
      > "$OUT/stacks-doc.json"
  echo "exit $?"
  $PY - "$OUT/stacks-doc.json" "$W/dumps" <<'PY'
import base64, json, os, sys
doc = json.load(open(sys.argv[1]))
os.makedirs(sys.argv[2], exist_ok=True)
for p in doc["processes"]:
    print(p["role"], p["rank"], p["pid"], p["error"], (p.get("flight_recorder") or {}).get("error"))
    fr = p.get("flight_recorder") or {}
    if fr.get("data_b64"):
        name = os.path.basename(fr["path"])
        open(os.path.join(sys.argv[2], name), "wb").write(base64.b64decode(fr["data_b64"]))
        print("dump", name, len(base64.b64decode(fr["data_b64"])), "bytes")
PY
  # the node script sends a summary; PyTorch's analyser reads the dumps themselves
  cp "$W"/gpuconsole_fr_rank_* "$W/dumps/" 2>/dev/null
  cp "$W"/dumps/gpuconsole_fr_rank_0 "$OUT/" 2>/dev/null
  echo "== fr_trace"
  $PY -m torch.distributed.flight_recorder.fr_trace "$W/dumps" -p gpuconsole_fr_rank_ \
      > "$OUT/fr_trace.txt" 2>&1; echo "exit $?"
  $PY -m torch.distributed.flight_recorder.fr_trace "$W/dumps" -p gpuconsole_fr_rank_ -j \
      > "$OUT/fr_trace_entries.txt" 2>&1; echo "exit $?"
  head -40 "$OUT/fr_trace.txt"; head -30 "$OUT/fr_trace_entries.txt"
  kill "$JOB"; wait "$JOB"
  echo "== the job's warnings (PyTorch says deprecated variable names here)"
  grep -i -E "warn|deprecat" "$W/job.log" | head -20
  ls -la "$W" "$W/dumps"
}
main 2>&1 | tee "$OUT/log.txt"
