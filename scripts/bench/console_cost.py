"""Console cost at fleet scale: 64 SSH hosts, each streaming a replayed 8-GPU trace at 1 Hz.

The hosts are loopback aliases of the two sshd test hosts (scripts/testhosts/up): 64 profile
entries, alternately 127.0.0.11 and 127.0.0.12, one SSH connection and one agent each. Each
agent replays ``tests/data/traces/fleet-8gpu.jsonl`` (``agent.py --replay``), re-stamped with
the host's time, so the console does the same work as against 64 real 8-GPU hosts. The 8-GPU
trace is derived from the 2-GPU H200 trace recorded on the device (each GPU and its processes
copied 4 times with new indices, UUIDs and bus ids).

Measured in the console process, for ``--duration`` seconds (default 300):

- CPU: process CPU time / wall time (% of one core); target < 15 %.
- sample-to-state lag: state receive time minus the sample's host time (same clock here);
  p50/p99, target p99 < 200 ms.
- memory: RSS each 30 s after the history buffers were pre-filled; flat = growth < 5 %.
- time to the first complete fleet snapshot, against the baseline: 64 parallel ``ssh`` clients
  (OpenSSH, same key and known_hosts) each printing the first line of the same trace.

Issue 11 part 3 runs it at 128, 256 and 512 hosts (every host name distinct, ``h000``..;
the aliases still alternate between the two sshds) and also prints the fleet targets at
512 x 8 GPUs: CPU < 50 % of one core, lag p99 < 500 ms, no sample dropped, RSS < 1 GiB; and
how many hosts had their container -> job map listed (only hosts whose samples show a GPU
process in a container are listed; the replayed trace has none).

Run: ``.venv/bin/python scripts/bench/console_cost.py [--hosts 64] [--duration 300]
[--snapshot-timeout 120] [--settle 5] [--no-baseline]`` (needs ``scripts/testhosts/up``).
Prints a table with the baseline side by side, as ratios, and one ``result-json`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from console.fleet.monitor import FleetMonitor  # noqa: E402
from console.fleet.state import FleetState  # noqa: E402
from console.profiles import load_profile_file  # noqa: E402
from console.session import Session  # noqa: E402

SOURCE_TRACE = ROOT / "tests" / "data" / "traces" / "h200-load.jsonl"
TRACE = Path("/var/tmp/gpuconsole-bench/fleet-8gpu.jsonl")
TESTHOSTS = Path(os.environ.get("GPUCONSOLE_TESTHOSTS_DIR", "/var/tmp/gpuconsole-testhosts"))


def make_fleet_trace() -> None:
    """Write the derived 8-GPU trace (see the module docstring) where the hosts can read it."""
    TRACE.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for line in SOURCE_TRACE.read_text().splitlines():
        s = json.loads(line)
        gpus, procs = [], []
        for copy in range(4):
            for g in s["gpus"]:
                g2 = dict(g, index=copy * 2 + g["index"])
                g2["uuid"] = f"{g['uuid'][:-2]}{copy:02d}"
                g2["pci_bus_id"] = f"00000000:{0x10 + g2['index']:02X}:00.0"
                gpus.append(g2)
            for p in s["processes"] or []:
                procs.append(dict(p, gpu_index=copy * 2 + p["gpu_index"],
                                  pid=p["pid"] + 1000 * copy))
        s["gpus"], s["processes"] = gpus, procs
        out.append(json.dumps(s, separators=(",", ":")))
    TRACE.write_text("\n".join(out) + "\n")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_profile(n: int, tmp: Path) -> Path:
    base = yaml.safe_load((TESTHOSTS / "profile.yaml").read_text())
    key = base["hosts"]["a"]["identity_file"]
    hosts = {
        f"h{i:03d}": {"hostname": "127.0.0.11" if i % 2 == 0 else "127.0.0.12", "port": 22,
                      "user": "root", "identity_file": key}
        for i in range(n)
    }
    prof = {"known_hosts": base["known_hosts"], "hosts": hosts, "connect_timeout": 30}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(prof))
    return path


def baseline_parallel_ssh(n: int, command: list[str] | None = None) -> float:
    """Seconds for n concurrent OpenSSH clients to each run ``command`` (default: print the
    trace's first line) and return its output."""
    base = yaml.safe_load((TESTHOSTS / "profile.yaml").read_text())
    key = base["hosts"]["a"]["identity_file"]
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            ["ssh", "-i", key, "-o", f"UserKnownHostsFile={base['known_hosts']}",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
             f"root@127.0.0.{11 + i % 2}",
             *(command or ["head", "-n", "1", str(TRACE)])],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for i in range(n)
    ]
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0 or not out.strip():
            raise SystemExit("baseline ssh failed: is scripts/testhosts/up running?")
    return time.monotonic() - start


async def run_console(profile_path: Path, duration: float,
                      snapshot_timeout: float = 120.0, settle: float = 5.0) -> dict[str, Any]:
    profile = load_profile_file(profile_path)
    hosts = list(profile.hosts)
    state = FleetState(hosts, interval=1.0, history_s=600)
    # fill every GPU's history (10 minutes of real samples per host) so memory is measured
    # with full buffers
    trace = [json.loads(ln) for ln in TRACE.read_text().splitlines()]
    t0 = time.time() - state.maxlen
    for h in hosts:
        for i in range(state.maxlen):
            s = json.loads(json.dumps(trace[i % len(trace)]))
            s["host_time"] = t0 + i
            state.on_sample(h, s)
        v = state.host(h)
        v.sample, v.status, v.last_rx, v.samples = None, "connecting", None, 0
    gc.collect()
    lags: list[float] = []

    def on_sample(host: str, sample: Any) -> None:
        lags.append(time.time() - float(sample["host_time"]))

    async with Session(profile) as session:
        mon = FleetMonitor(session, state, hosts, interval=1.0, on_sample=on_sample,
                           mode="agent", replay_path=str(TRACE))
        t0 = time.monotonic()
        mon.start()
        complete = await mon.wait_complete(timeout=snapshot_timeout)
        first_snapshot = time.monotonic() - t0
        if not complete:
            missing = [v.name + ": " + str(v.error) for v in state.hosts.values()
                    if v.sample is None]
            raise SystemExit(f"fleet incomplete after {snapshot_timeout:.0f} s: "
                             f"{len(missing)} hosts without a sample, e.g. {missing[:5]}")
        await asyncio.sleep(settle)  # settle: every agent streaming, start-up backlog drained
        lags.clear()
        cpu0 = time.process_time()
        w0 = time.monotonic()
        rss = [rss_mib()]
        while time.monotonic() - w0 < duration:
            await asyncio.sleep(min(30.0, duration))
            rss.append(rss_mib())
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - w0
        mapped = len(mon._maps)  # hosts whose container -> job map was listed
        await mon.stop()
    down = sum(1 for v in state.hosts.values() if v.status != "ok")
    return {"first_snapshot_s": first_snapshot, "cpu_pct": 100 * cpu / wall, "lags": lags,
            "rss": rss, "samples": len(lags), "hosts_not_ok": down, "wall": wall,
            "hosts_mapped": mapped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--snapshot-timeout", type=float, default=120.0,
                    help="seconds to wait for the first complete snapshot")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between the first complete snapshot and the measurement")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the parallel-ssh baselines (first snapshot has no ratio)")
    args = ap.parse_args()
    make_fleet_trace()
    with tempfile.TemporaryDirectory() as tmp:
        prof = make_profile(args.hosts, Path(tmp))
        r = asyncio.run(run_console(prof, args.duration, args.snapshot_timeout,
                                    args.settle))
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lags = sorted(r["lags"])
    p50 = statistics.median(lags) * 1000
    p99 = lags[int(0.99 * (len(lags) - 1))] * 1000
    growth = 100 * (r["rss"][-1] - r["rss"][0]) / r["rss"][0]
    expected = args.hosts * r["wall"]
    summary = {"hosts": args.hosts, "wall_s": round(r["wall"], 1),
               "cpu_pct": round(r["cpu_pct"], 1), "lag_p50_ms": round(p50, 1),
               "lag_p99_ms": round(p99, 1), "rss_first_mib": round(r["rss"][0], 1),
               "rss_last_mib": round(r["rss"][-1], 1), "maxrss_mib": round(maxrss, 1),
               "samples": r["samples"], "expected": round(expected),
               "hosts_not_ok": r["hosts_not_ok"], "hosts_mapped": r["hosts_mapped"],
               "first_snapshot_s": round(r["first_snapshot_s"], 2)}
    print("result-json " + json.dumps(summary), flush=True)
    base = base_py = None
    if not args.no_baseline:
        try:
            base = baseline_parallel_ssh(args.hosts)
            base_py = baseline_parallel_ssh(args.hosts, ["python3 -c 'print(1)'"])
        except SystemExit as e:
            print(f"baseline skipped: {e}")
    print(f"\nconsole cost: {args.hosts} hosts x 8 GPUs at 1 Hz for {r['wall']:.0f} s "
          f"({r['samples']} samples of {expected:.0f} expected; {r['hosts_not_ok']} hosts "
          f"not ok at the end; maxrss {maxrss:.0f} MiB; container map listed on "
          f"{r['hosts_mapped']} hosts)\n")
    fs = r["first_snapshot_s"]
    rows = [
        ("metric", "gpuconsole", "target / baseline", "ratio"),
        ("console CPU, % of one core", f"{r['cpu_pct']:.1f}", "< 15", f"{r['cpu_pct'] / 15:.2f}"),
        ("sample-to-state lag p50, ms", f"{p50:.1f}", "-", "-"),
        ("sample-to-state lag p99, ms", f"{p99:.1f}", "< 200", f"{p99 / 200:.2f}"),
        ("RSS first -> last, MiB", f"{r['rss'][0]:.1f} -> {r['rss'][-1]:.1f}",
         "flat (< 5 %)", f"{growth:+.1f} %"),
    ]
    if base is not None and base_py is not None:
        rows += [
            ("first complete snapshot, s", f"{fs:.2f}", f"{base:.2f} (parallel ssh cat)",
             f"{fs / base:.2f}"),
            ("  same, baseline starting python3", f"{fs:.2f}",
             f"{base_py:.2f} (parallel ssh python3)", f"{fs / base_py:.2f}"),
        ]
    else:
        rows.append(("first complete snapshot, s", f"{fs:.2f}", "(no baseline)", "-"))
    rows += [
        ("fleet target: CPU, % of one core", f"{r['cpu_pct']:.1f}", "< 50 (512 hosts)",
         f"{r['cpu_pct'] / 50:.2f}"),
        ("fleet target: lag p99, ms", f"{p99:.1f}", "< 500 (512 hosts)", f"{p99 / 500:.2f}"),
        ("fleet target: samples received", f"{r['samples']} / {expected:.0f}",
         "all (none dropped)", f"{r['samples'] / expected:.4f}"),
        ("fleet target: RSS last, MiB", f"{r['rss'][-1]:.1f}", "< 1024 (512 hosts)",
         f"{r['rss'][-1] / 1024:.2f}"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
