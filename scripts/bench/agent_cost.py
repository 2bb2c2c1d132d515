"""CPU cost of one telemetry sample: the NVML agent versus spawning nvidia-smi once per poll.

Run on a GPU host (``python3 scripts/bench/agent_cost.py [--pynvml-dir DIR]``). Measures:

* ``agent (in-process)``: ``time.process_time()`` around ``Agent.sample()`` plus the JSON
  encoding of the line, over ``--samples`` samples taken ``--interval`` s apart (the sleep is not
  counted). This is the agent's steady-state cost per sample.
* ``agent (process)``: the CPU time (``resource.getrusage(RUSAGE_CHILDREN)``, user + system) of
  ``python3 agent.py --count N`` minus that of ``--count 1``, per extra sample; and the startup
  (``--count 1``: interpreter, imports, ``nvmlInit``, handles, GPM setup, first sample).
* ``nvidia-smi``: the CPU time of ``nvidia-smi --query-gpu=<the same fields> --format=csv,
  noheader,nounits`` (child user + system from ``RUSAGE_CHILDREN``; plus the parent's own
  fork/exec/read cost) over ``--spawns`` spawns.

Prints a table (method, CPU ms per sample, ratio to the agent) and, with ``--json``, writes the
numbers, the NVML entry points the agent settled on and the fields NVML refused.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "remote" / "agent" / "agent.py"

#: What the agent reports per GPU, as nvidia-smi query fields.
SMI_FIELDS = [
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
    "fan.speed",
    "pstate",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "persistence_mode",
    "mig.mode.current",
]
#: Older drivers name the clock event reasons "throttle reasons".
SMI_FALLBACK = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}


def load_agent() -> ModuleType:
    """Import remote/agent/agent.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("gpuconsole_agent", AGENT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def children_cpu_s() -> float:
    """User + system CPU seconds of all waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench_in_process(
    mod: ModuleType, pynvml_dir: str | None, samples: int, interval: float
) -> dict[str, Any]:
    """CPU ms per ``Agent.sample()`` + JSON encoding, in this process."""
    nv, err = mod.load_pynvml(pynvml_dir)
    agent = mod.Agent(nv, interval, import_error=err)
    if agent.state != "ok":
        raise SystemExit(f"agent state {agent.state}: {agent.state_detail}")
    time.sleep(interval)
    first = agent.sample()  # warm: caches, first GPM interval
    cpu: list[float] = []
    wall: list[float] = []
    last = first
    for _ in range(samples):
        time.sleep(interval)
        c0, w0 = time.process_time(), time.perf_counter()
        last = agent.sample()
        json.dumps(last, separators=(",", ":"))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    refused = {f"gpu{g['index']}": g["errors"] for g in last["gpus"] if g["errors"]}
    variants = {name: v.used for name, v in agent._v.items()}
    agent.close()
    return {
        "cpu_ms_mean": 1e3 * statistics.mean(cpu),
        "cpu_ms_median": 1e3 * statistics.median(cpu),
        "wall_ms_median": 1e3 * statistics.median(wall),
        "samples": samples,
        "gpus": len(last["gpus"]),
        "variants": variants,
        "refused": refused,
        "host_errors": last["host"]["errors"],
        "sample_errors": last["errors"],
    }


def bench_process(
    python: str, pynvml_dir: str | None, samples: int, interval: float
) -> dict[str, Any]:
    """Whole-process CPU of the agent: startup, and per extra sample."""

    def run(count: int) -> float:
        argv = [
            python,
            str(AGENT),
            "--count",
            str(count),
            "--interval",
            str(interval),
            "--no-stdin-watch",
        ]
        if pynvml_dir:
            argv += ["--pynvml-dir", pynvml_dir]
        before = children_cpu_s()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        return children_cpu_s() - before

    one = statistics.median(run(1) for _ in range(3))
    many = run(samples + 1)
    return {"startup_ms": 1e3 * one, "cpu_ms_per_sample": 1e3 * (many - one) / samples}


def smi_argv(smi: str, fields: list[str]) -> list[str]:
    """The nvidia-smi query command line."""
    return [smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def bench_smi(smi: str, spawns: int) -> dict[str, Any]:
    """CPU ms per nvidia-smi poll (child, and child + the parent's spawning cost)."""
    fields = list(SMI_FIELDS)
    probe = subprocess.run(smi_argv(smi, fields), capture_output=True, text=True)
    if probe.returncode != 0:
        fields = [SMI_FALLBACK.get(f, f) for f in fields]
        probe = subprocess.run(smi_argv(smi, fields), capture_output=True, text=True)
        if probe.returncode != 0:
            raise SystemExit(f"nvidia-smi failed: {probe.stdout}{probe.stderr}")
    child: list[float] = []
    parent: list[float] = []
    wall: list[float] = []
    for _ in range(spawns):
        c0, p0, w0 = children_cpu_s(), time.process_time(), time.perf_counter()
        subprocess.run(smi_argv(smi, fields), stdout=subprocess.PIPE, check=True)
        child.append(children_cpu_s() - c0)
        parent.append(time.process_time() - p0)
        wall.append(time.perf_counter() - w0)
    return {
        "fields": len(fields),
        "child_ms_mean": 1e3 * statistics.mean(child),
        "parent_ms_mean": 1e3 * statistics.mean(parent),
        "wall_ms_median": 1e3 * statistics.median(wall),
        "spawns": spawns,
        "output_first_line": probe.stdout.splitlines()[0] if probe.stdout else "",
    }


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pynvml-dir", default=None)
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--spawns", type=int, default=20)
    p.add_argument("--smi", default="nvidia-smi")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)

    mod = load_agent()
    inproc = bench_in_process(mod, args.pynvml_dir, args.samples, args.interval)
    proc = bench_process(args.python, args.pynvml_dir, args.samples, args.interval)
    smi = bench_smi(args.smi, args.spawns)
    base = inproc["cpu_ms_mean"]
    rows = [
        ("agent (in-process, sample + JSON)", base),
        ("agent (process, per extra sample)", proc["cpu_ms_per_sample"]),
        ("nvidia-smi spawn (child CPU)", smi["child_ms_mean"]),
        ("nvidia-smi spawn (child + parent)", smi["child_ms_mean"] + smi["parent_ms_mean"]),
    ]
    print(
        f"GPUs: {inproc['gpus']}; agent samples: {args.samples} at {args.interval} s; "
        f"nvidia-smi spawns: {args.spawns} ({smi['fields']} fields)"
    )
    print(f"{'method':<38} {'CPU ms/sample':>14} {'ratio':>8}")
    for name, ms in rows:
        print(f"{name:<38} {ms:>14.3f} {ms / base:>8.1f}")
    print(
        f"agent startup (process, --count 1): {proc['startup_ms']:.1f} ms CPU; "
        f"agent wall per sample {inproc['wall_ms_median']:.2f} ms; "
        f"nvidia-smi wall per spawn {smi['wall_ms_median']:.1f} ms"
    )
    ratio = smi["child_ms_mean"] / base
    verdict = "PASS" if ratio >= 20 else "FAIL"
    print(f"target agent <= 1/20 of one nvidia-smi spawn: {verdict} (ratio {ratio:.1f})")
    print("NVML entry points used:", json.dumps(inproc["variants"]))
    print("refused by NVML (last sample):", json.dumps(inproc["refused"]))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"in_process": inproc, "process": proc, "nvidia_smi": smi, "ratio": ratio}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
