"""Record agent and nvidia-smi telemetry side by side, idle and under load (see record_traces.sh).

Starts ``agent.py --interval 1.0`` (stdin kept open), and each time it emits a line polls
``nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits`` at
once, so both streams describe the same moments. Phases:

1. ``idle``: ``--idle`` agent lines with no load;
2. ``load``: starts ``--loader`` (a bf16 matmul loop pinned to GPU 0), waits for it to print
   ``READY <pid>``, then records ``--load`` lines; halfway it also lists
   ``nvidia-smi --query-compute-apps``;
3. stops the loader, closes the agent's stdin and times how long the agent takes to exit.

Writes ``<out>/h200-idle.jsonl``, ``h200-load.jsonl`` (agent lines), ``h200-smi.csv`` (phase,
agent seq, host time before/after the poll, index, memory.used MiB, utilization.gpu %),
``loader.pid`` and ``meta.json`` (versions, compute apps, agent exit status and latency).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

SMI_QUERY = ["--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits"]

#: Run in the agent's folder (its pynvml.py) while loaded: what each memory call reports.
PROBE = """
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    rec = {"index": i, "v1_used_mib": v1.used >> 20, "v1_total_mib": v1.total >> 20}
    try:
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        rec.update(v2_used_mib=v2.used >> 20, v2_reserved_mib=v2.reserved >> 20,
                   v2_total_mib=v2.total >> 20)
    except pynvml.NVMLError as e:
        rec["v2_error"] = str(e)
    try:
        rec["supported_event_types"] = hex(pynvml.nvmlDeviceGetSupportedEventTypes(h))
    except Exception as e:
        rec["supported_event_types"] = str(e)
    out.append(rec)
print(json.dumps(out))
"""


def smi_poll(smi: list[str]) -> tuple[float, float, list[list[str]]]:
    """One nvidia-smi poll: (time before, time after, rows)."""
    t0 = time.time()
    out = subprocess.run(smi + SMI_QUERY, capture_output=True, text=True, timeout=30)
    t1 = time.time()
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line]
    return t0, t1, rows


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The agent's next stdout line (fails the run if it takes longer than ``timeout``)."""
    stdout = proc.stdout
    assert stdout is not None
    box: list[str] = []

    def read() -> None:
        box.append(stdout.readline())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    if not box or not box[0]:
        raise SystemExit(f"agent produced no line within {timeout} s (rc={proc.poll()})")
    return box[0]


def record(
    proc: subprocess.Popen[str],
    smi: list[str],
    phase: str,
    n: int,
    jsonl: IO[str],
    writer: Any,
    on_line: Any = None,
) -> list[dict[str, Any]]:
    """Record ``n`` agent lines and one nvidia-smi poll per line."""
    got = []
    for i in range(n):
        line = read_line(proc, 10.0)
        jsonl.write(line)
        sample = json.loads(line)
        got.append(sample)
        t0, t1, rows = smi_poll(smi)
        for r in rows:
            writer.writerow([phase, sample["seq"], f"{t0:.3f}", f"{t1:.3f}", *r])
        if on_line:
            on_line(i)
    return got


def main(argv: list[str] | None = None) -> int:
    """Run the recording; see the module docstring."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--agent-dir", required=True, help="folder holding agent.py and pynvml.py")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--smi", default="nvidia-smi")
    p.add_argument("--loader", required=True, help="command line of the load generator")
    p.add_argument("--idle", type=int, default=15)
    p.add_argument("--load", type=int, default=25)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--prefix", default="h200")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi = shlex.split(args.smi)
    meta: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        meta["smi_L"] = subprocess.run(smi + ["-L"], capture_output=True, text=True).stdout
    except OSError as e:
        meta["smi_L"] = str(e)

    agent = subprocess.Popen(
        [args.python, "agent.py", "--interval", str(args.interval)],
        cwd=args.agent_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    loader: subprocess.Popen[str] | None = None
    loader_out: list[str] = []
    csv_file = open(out / f"{args.prefix}-smi.csv", "w", newline="")
    writer = csv.writer(csv_file)
    writer.writerow(
        ["phase", "agent_seq", "t_before", "t_after", "index", "memory_used_mib", "util_gpu_pct"]
    )
    try:
        with open(out / f"{args.prefix}-idle.jsonl", "w") as f:
            idle = record(agent, smi, "idle", args.idle, f, writer)
        print(f"idle: {len(idle)} lines, states {sorted({s['state'] for s in idle})}", flush=True)

        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
        loader = subprocess.Popen(
            shlex.split(args.loader),
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        ready = threading.Event()

        def watch_loader() -> None:
            assert loader is not None and loader.stdout is not None
            for line in loader.stdout:
                loader_out.append(line.rstrip())
                if line.startswith("READY"):
                    ready.set()
            ready.set()

        threading.Thread(target=watch_loader, daemon=True).start()
        (out / "loader.pid").write_text(f"{loader.pid}\n")
        ramp = 0
        while not ready.is_set():  # keep draining the agent while the loader warms up
            read_line(agent, 10.0)
            ramp += 1
            if ramp > 120:
                raise SystemExit("loader never became ready")
        if loader.poll() is not None:
            raise SystemExit(f"loader exited early: {loader_out}")
        print(f"loader ready after {ramp} agent lines: {loader_out[-1]}", flush=True)

        def mid(i: int) -> None:
            if i == args.load // 2:
                meta["compute_apps"] = subprocess.run(
                    smi
                    + [
                        "--query-compute-apps=pid,used_memory,gpu_uuid",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                ).stdout
                meta["smi_memory"] = subprocess.run(
                    smi
                    + [
                        "--query-gpu=index,memory.used,memory.reserved,memory.total",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                ).stdout
                probe = subprocess.run(
                    [args.python, "-c", PROBE], cwd=args.agent_dir, capture_output=True, text=True
                )
                meta["nvml_memory_probe"] = probe.stdout.strip() or probe.stderr[-1000:]

        with open(out / f"{args.prefix}-load.jsonl", "w") as f:
            load = record(agent, smi, "load", args.load, f, writer, mid)
        print(f"load: {len(load)} lines", flush=True)
        meta["loader_pid"] = loader.pid
    finally:
        csv_file.close()
        if loader is not None and loader.poll() is None:
            os.killpg(loader.pid, signal.SIGTERM)
            try:
                loader.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(loader.pid, signal.SIGKILL)
        meta["loader_output"] = loader_out
        # Liveness link: closing stdin must end the agent promptly.
        assert agent.stdin is not None
        t0 = time.monotonic()
        agent.stdin.close()
        try:
            rc = agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            rc = -9
        meta["agent_exit_after_stdin_close_s"] = round(time.monotonic() - t0, 3)
        meta["agent_rc"] = rc
        meta["agent_stderr"] = agent.stderr.read()[-2000:] if agent.stderr else ""
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
        print(
            "meta:",
            json.dumps(
                {
                    k: meta.get(k)
                    for k in (
                        "loader_pid",
                        "agent_rc",
                        "agent_exit_after_stdin_close_s",
                        "compute_apps",
                        "smi_memory",
                        "nvml_memory_probe",
                    )
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
