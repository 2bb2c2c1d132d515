#!/usr/bin/env bash
# Record what PyTorch's NCCL watchdog leaves when a collective times out, on the lent GPU
# machine (one GPU): a 1-rank job whose all_reduce waits behind a kernel that spins for
# minutes (torch.cuda._sleep on the same stream), so the watchdog's timeout (15 s) fires and,
# with gpuconsole's Flight Recorder variables (console/jobs/flightrec.py), dumps the buffer.
#
# Run from the repository root on the device machine, with .venv/bin/py-spy carried along:
#   OUT=... bash scripts/device/fr_timeout.sh
# Writes into $OUT:
#   stacks-doc-hung.json  remote/agent/stacks.py --flight-recorder while the collective hangs
#                         (the dump asked through the pipe)
#   gpuconsole_fr_rank_0  the dump the watchdog wrote on the timeout
#   stacks-doc-ended.json the node script's reading of that file once the pipe is gone
#   fr_trace.txt          PyTorch's analyser over it, as gpuconsole runs it
#   frtrace-read.txt      console.stacks.frtrace's reading of that output
#   job.log               the job's output (the watchdog's timeout messages)
#   log.txt               everything printed
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/out-frt}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PYSPY=${PYSPY:-$PWD/.venv/bin/py-spy}

main() {
  echo "== machine"; date -u; $PY -V; nvidia-smi -L
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  W=$(mktemp -d /tmp/gpuconsole-frt.XXXX)
  eval "$(PYTHONPATH=. $PY -c '
import shlex, sys
from console.jobs.flightrec import flight_recorder_env
for k, v in flight_recorder_env(sys.argv[1]).items():
    print(f"export {k}={shlex.quote(v)}")
' "$W")"
  env | grep -E '^TORCH_(NCCL|FR)_' | sort
  cat > "$W/hang.py" <<'PY'
import datetime, os, time
import torch, torch.distributed as dist

def train_step(t):
    dist.all_reduce(t)

torch.cuda.set_device(0)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=15))
t = torch.ones(1024, device="cuda")
for step in range(5):
    train_step(t)
torch.cuda.synchronize()
print("steps done; now a kernel that spins for minutes, then all_reduce", flush=True)
torch.cuda._sleep(1 << 40)
train_step(t)
torch.cuda.synchronize()
print("never printed", flush=True)
PY
  export GPUCONSOLE_FR_TEST=1
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "$W/hang.py" > "$OUT/job.log" 2>&1 &
  JOB=$!
  for _ in $(seq 1 60); do grep -q "steps done" "$OUT/job.log" && break; sleep 1; done
  sleep 2
  echo "== stacks.py --flight-recorder while it hangs"
  $PY remote/agent/stacks.py --py-spy "$PYSPY" --flight-recorder --env GPUCONSOLE_FR_TEST=1 \
      > "$OUT/stacks-doc-hung.json"; echo "exit $?"
  echo "== waiting for the watchdog's timeout"
  for _ in $(seq 1 90); do kill -0 "$JOB" 2>/dev/null || break; sleep 1; done
  kill "$JOB" 2>/dev/null; wait "$JOB"; echo "job exit $?"
  ls -la "$W"
  cp "$W"/gpuconsole_fr_rank_0 "$OUT/" 2>/dev/null
  echo "== the node script over the file (no pipe any more: its earlier_dump)"
  PYTHONPATH=. $PY -c '
import json, sys
import remote.agent.stacks as a
print(json.dumps(a.earlier_dump("", sys.argv[1] + "/gpuconsole_fr_rank_0", "no pipe")))
' "$W" > "$OUT/stacks-doc-ended.json"
  head -c 600 "$OUT/stacks-doc-ended.json"; echo
  echo "== fr_trace as gpuconsole runs it"
  mkdir -p "$W/in"
  PYTHONPATH=. $PY -c '
import pathlib, sys
from console.stacks.frtrace import dump_files
d = pathlib.Path(sys.argv[1])
for name, data in dump_files({0: (d / "gpuconsole_fr_rank_0").read_bytes()}).items():
    (d / "in" / name).write_bytes(data)
' "$W"
  $PY -m torch.distributed.flight_recorder.fr_trace "$W/in" -p gpuconsole_fr_rank_ \
      > "$OUT/fr_trace.txt" 2>&1; echo "fr_trace exit $?"
  $PY -m torch.distributed.flight_recorder.fr_trace "$W/in" -p gpuconsole_fr_rank_ -j \
      > "$OUT/fr_trace_entries.txt" 2>&1; echo "fr_trace -j exit $?"
  cat "$OUT/fr_trace.txt"; tail -8 "$OUT/fr_trace_entries.txt"
  PYTHONPATH=. $PY -c '
import sys
from console.stacks.frtrace import from_output
text = open(sys.argv[1]).read()
print("\n".join(from_output((0,), 0, text, "device").lines()))
' "$OUT/fr_trace.txt" > "$OUT/frtrace-read.txt"; cat "$OUT/frtrace-read.txt"
  echo "== the job's watchdog lines"
  grep -i -E "watchdog|timeout|timed out|flight|dump" "$OUT/job.log" | head -30
}
main 2>&1 | tee "$OUT/log.txt"
