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

Start-up breakdown (bench-side timestamps only; the product is unchanged): per host, the SSH
connect (including the wait for one of the monitor's ``--max-connecting`` handshake slots), the
agent's channel open, the agent's first sample's host time, its arrival, retries and their
reasons; the console's and the machine's CPU over the start, and how late the console's event
loop wakes up; printed as the ``start-json`` line (median / p90 / max, seconds).

``--containerised N`` starts N labelled job containers on the shared dockerd and replays a
trace whose GPU processes run in them, so the container -> job map is listed; the listings in
the window are counted and timed (``listings`` in ``result-json``).

Run: ``.venv/bin/python scripts/bench/console_cost.py [--hosts 64] [--duration 300]
[--snapshot-timeout 120] [--settle 5] [--no-baseline] [--max-connecting 128]
[--containerised 4]`` (needs ``scripts/testhosts/up``; above 64 hosts, run it under
``flock /tmp/gpuconsole-heavy.lock`` on a shared machine). Prints a table with the baseline
side by side, as ratios, and the ``result-json`` and ``start-json`` lines.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import console.fleet.monitor as fleet_monitor  # noqa: E402
from console.fleet.monitor import MAX_CONNECTING, FleetMonitor  # noqa: E402
from console.fleet.state import ContainerJob, FleetState  # noqa: E402
from console.profiles import load_profile_file  # noqa: E402
from console.session import Session  # noqa: E402
from remote.telemetry.stream import PHASE_AGENT_STARTING  # noqa: E402
from remote.transport import RemoteProcess  # noqa: E402

SOURCE_TRACE = ROOT / "tests" / "data" / "traces" / "h200-load.jsonl"
TRACE = Path("/var/tmp/gpuconsole-bench/fleet-8gpu.jsonl")
#: the trace with every GPU process in one of the bench's containers (``--containerised``)
TRACE_IN_CONTAINERS = Path("/var/tmp/gpuconsole-bench/fleet-8gpu-containers.jsonl")
IMAGE = "gpuconsole/torch:2.13.0-cpu"
BENCH_LABEL = "io.gpuconsole-bench.console-cost"
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
                procs.append(
                    dict(p, gpu_index=copy * 2 + p["gpu_index"], pid=p["pid"] + 1000 * copy)
                )
        s["gpus"], s["processes"] = gpus, procs
        out.append(json.dumps(s, separators=(",", ":")))
    TRACE.write_text("\n".join(out) + "\n")


def start_job_containers(n: int) -> list[str]:
    """``n`` sleeping containers of :data:`IMAGE` on the shared dockerd, each labelled as
    node 0 of its own one-node gpuconsole job (``bench-cc-00000K``, the labels
    scripts/bench/ps_fleet.py uses) and with :data:`BENCH_LABEL`; returns their full ids."""
    import docker

    client = docker.from_env()
    remove_job_containers()
    now = time.time()
    ids = []
    for k in range(n):
        job = f"bench-cc-{k + 1:06d}"
        labels = {
            "io.gpuconsole.format": "1",
            "io.gpuconsole.job-id": job,
            "io.gpuconsole.job-name": "bench-cc",
            "io.gpuconsole.node-rank": "0",
            "io.gpuconsole.node-count": "1",
            "io.gpuconsole.nproc-per-node": "2",
            "io.gpuconsole.host": "h000",
            "io.gpuconsole.spec-hash": "0" * 12,
            "io.gpuconsole.created-at": f"{now:.3f}",
            "io.gpuconsole.kind": "train",
            BENCH_LABEL: "1",
        }
        c = client.containers.run(
            IMAGE, ["sleep", "3600"], detach=True, labels=labels, name=f"{job}-n0-bench"
        )
        ids.append(str(c.id))
    return ids


def remove_job_containers() -> None:
    """Remove every container carrying :data:`BENCH_LABEL`."""
    import docker

    client = docker.from_env()
    for c in client.containers.list(all=True, filters={"label": BENCH_LABEL}):
        c.remove(force=True)


def make_container_trace(ids: list[str]) -> None:
    """The fleet trace with each GPU process's ``container_id`` set: the processes of the
    4 copies of the 2-GPU trace (GPUs 2k and 2k+1) run in container ``ids[k % len(ids)]``
    (4 two-GPU jobs per host). Every host replays this file, and all hosts share one dockerd,
    so every host reports the same containers and every host's listing returns them."""
    out = []
    for line in TRACE.read_text().splitlines():
        s = json.loads(line)
        for p in s["processes"] or []:
            p["container_id"] = ids[(p["gpu_index"] // 2) % len(ids)]
        out.append(json.dumps(s, separators=(",", ":")))
    TRACE_IN_CONTAINERS.write_text("\n".join(out) + "\n")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_profile(n: int, tmp: Path) -> Path:
    base = yaml.safe_load((TESTHOSTS / "profile.yaml").read_text())
    key = base["hosts"]["a"]["identity_file"]
    hosts = {
        f"h{i:03d}": {
            "hostname": "127.0.0.11" if i % 2 == 0 else "127.0.0.12",
            "port": 22,
            "user": "root",
            "identity_file": key,
        }
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
            [
                "ssh",
                "-i",
                key,
                "-o",
                f"UserKnownHostsFile={base['known_hosts']}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"root@127.0.0.{11 + i % 2}",
                *(command or ["head", "-n", "1", str(TRACE)]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for i in range(n)
    ]
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0 or not out.strip():
            raise SystemExit("baseline ssh failed: is scripts/testhosts/up running?")
    return time.monotonic() - start


class StartTimes(dict[str, str]):
    """The monitor's ``phase`` dict, recording when each host entered each phase.

    Bench instrumentation only: it replaces :attr:`FleetMonitor.phase` (written by the
    monitor's host tasks at each phase change, and on every sample), so the product is
    unchanged. ``events`` holds ``(host, phase, monotonic s)`` of each change, in order (only
    changes: the steady state adds nothing, so RSS is not affected)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, float]] = []

    def __setitem__(self, host: str, phase: str) -> None:
        if self.get(host) != phase:
            self.events.append((host, phase, time.monotonic()))
            super().__setitem__(host, phase)


def time_open_process(
    session: Session, hosts: list[str], opened: dict[str, list[tuple[float, float]]]
) -> None:
    """Wrap each host transport's ``open_process`` to record ``(start, done)`` monotonic s of
    each call (the agent's SSH channel open + exec request) in ``opened[host]``."""
    for h in hosts:
        t = session.transport(h)
        inner = t.open_process

        def timed(argv: list[str], _inner: Callable[..., Any] = inner, _h: str = h) -> Any:
            async def run() -> RemoteProcess:
                t0 = time.monotonic()
                proc: RemoteProcess = await _inner(argv)
                opened.setdefault(_h, []).append((t0, time.monotonic()))
                return proc

            return run()

        t.open_process = timed  # type: ignore[method-assign]


def cpu_jiffies() -> tuple[int, int]:
    """``(busy, total)`` jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


async def loop_delay(out: list[float], period: float = 0.1) -> None:
    """Record how late each ``period`` s sleep wakes up (s): the console event loop's delay."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period)
        out.append(time.monotonic() - t - period)


def dist(xs: list[float]) -> dict[str, float]:
    """median / p90 / max of ``xs`` (s), rounded to ms; empty -> {}."""
    if not xs:
        return {}
    xs = sorted(xs)
    return {
        "n": len(xs),
        "median": round(statistics.median(xs), 3),
        "p90": round(xs[int(0.9 * (len(xs) - 1))], 3),
        "max": round(xs[-1], 3),
    }


def breakdown(
    t0: float,
    events: list[tuple[str, str, float]],
    opened: dict[str, list[tuple[float, float]]],
    first: dict[str, tuple[float, float, float]],
    downs: dict[str, list[str]],
) -> dict[str, Any]:
    """Per-host start-up phases as distributions (s), from the recorded timestamps.

    For each host's successful attempt (the last ``connecting`` before its first sample):
    ``wait_to_connect_start`` (monitor start -> that attempt began: retries after a failure),
    ``connect`` (TCP + key exchange + auth: ``connecting`` -> ``agent starting``),
    ``open_channel`` (session channel open + exec request: ``open_process``),
    ``agent_to_first_sample`` (channel open -> the agent's first sample's host time: remote
    ``sh``/python start and first sample), ``delivery`` (that host time -> the console read it),
    ``first_sample_at`` (monitor start -> first sample). Also the attempts per host and the
    failure reasons (first 90 characters, host name dropped) with their counts."""
    per: dict[str, list[float]] = {
        k: []
        for k in (
            "wait_to_connect_start",
            "connect",
            "open_channel",
            "agent_to_first_sample",
            "delivery",
            "connected_at",
            "first_sample_at",
        )
    }
    attempts: list[float] = []
    by_host: dict[str, list[tuple[str, float]]] = {}
    for h, ph, t in events:
        by_host.setdefault(h, []).append((ph, t))
    for h, (rx_mono, rx_wall, host_time) in first.items():
        evs = [(ph, t) for ph, t in by_host.get(h, []) if t <= rx_mono]
        conns = [t for ph, t in evs if ph == "connecting"]
        starts = [t for ph, t in evs if ph == PHASE_AGENT_STARTING]
        attempts.append(float(len(conns)))
        if not conns or not starts:
            continue
        c, a = conns[-1], starts[-1]
        per["wait_to_connect_start"].append(c - t0)
        per["connect"].append(a - c)
        per["connected_at"].append(a - t0)
        per["first_sample_at"].append(rx_mono - t0)
        ops = [o for o in opened.get(h, []) if o[0] >= a and o[1] <= rx_mono]
        if ops:
            o0, o1 = ops[-1]
            per["open_channel"].append(o1 - o0)
            # host_time is wall time on the host (the same clock here)
            o1_wall = rx_wall - (rx_mono - o1)
            per["agent_to_first_sample"].append(host_time - o1_wall)
            per["delivery"].append(rx_wall - host_time)
    reasons: dict[str, int] = {}
    for h, rs in downs.items():
        for r in rs:
            key = r.removeprefix(f"host {h}: ")[:90]
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "phases_s": {k: dist(v) for k, v in per.items()},
        "attempts_per_host": dist(attempts),
        "failures": reasons,
    }


async def run_console(
    profile_path: Path,
    duration: float,
    snapshot_timeout: float = 120.0,
    settle: float = 5.0,
    max_connecting: int = MAX_CONNECTING,
    trace_path: Path = TRACE,
) -> dict[str, Any]:
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
    # start-up instrumentation (bench only): see StartTimes, time_open_process, breakdown
    first: dict[str, tuple[float, float, float]] = {}
    opened: dict[str, list[tuple[float, float]]] = {}
    downs: dict[str, list[str]] = {}
    on_down = state.on_down

    def record_down(host: str, error: str) -> None:
        downs.setdefault(host, []).append(error)
        on_down(host, error)

    state.on_down = record_down  # type: ignore[method-assign]

    def on_sample(host: str, sample: Any) -> None:
        now = time.time()
        lags.append(now - float(sample["host_time"]))
        if host not in first:
            first[host] = (time.monotonic(), now, float(sample["host_time"]))

    # container -> job map listings (bench only: the monitor's module function, wrapped)
    listings: list[tuple[float, float, int]] = []  # (start monotonic, seconds, ids mapped)
    inner_jobs = fleet_monitor.container_jobs

    async def counted_jobs(session: Session, hosts_: list[str]) -> dict[str, ContainerJob]:
        t = time.monotonic()
        got = await inner_jobs(session, hosts_)
        listings.append((t, time.monotonic() - t, len(got)))
        return got

    fleet_monitor.container_jobs = counted_jobs  # type: ignore[assignment]

    async with Session(profile) as session:
        mon = FleetMonitor(
            session,
            state,
            hosts,
            interval=1.0,
            on_sample=on_sample,
            mode="agent",
            replay_path=str(trace_path),
            max_connecting=max_connecting,
        )
        phases = StartTimes()
        mon.phase = phases
        time_open_process(session, hosts, opened)
        delays: list[float] = []
        prober = asyncio.create_task(loop_delay(delays))
        busy0, total0 = cpu_jiffies()
        cpu_start = time.process_time()
        t0 = time.monotonic()
        mon.start()
        complete = await mon.wait_complete(timeout=snapshot_timeout)
        first_snapshot = time.monotonic() - t0
        all_sampled = await_all = None
        if len(first) < len(hosts):  # complete() counts a host that is down: wait for all
            deadline = t0 + snapshot_timeout
            while len(first) < len(hosts) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await_all = time.monotonic() - t0
        all_sampled = max(f[0] for f in first.values()) - t0 if first else None
        start_wall = time.monotonic() - t0
        start_cpu = time.process_time() - cpu_start
        busy1, total1 = cpu_jiffies()
        prober.cancel()
        start = {
            "first_complete_s": round(first_snapshot, 2),
            "all_hosts_sampled_s": None if all_sampled is None else round(all_sampled, 2),
            "waited_for_all_s": None if await_all is None else round(await_all, 2),
            "console_cpu_pct_during_start": round(100 * start_cpu / start_wall, 1),
            "machine_busy_pct_during_start": round(
                100 * (busy1 - busy0) / max(1, total1 - total0), 1
            ),
            "loop_delay_s": dist(delays),
            **breakdown(t0, phases.events, opened, first, downs),
        }
        if not complete:
            missing = [
                v.name + ": " + str(v.error) for v in state.hosts.values() if v.sample is None
            ]
            raise SystemExit(
                f"fleet incomplete after {snapshot_timeout:.0f} s: "
                f"{len(missing)} hosts without a sample, e.g. {missing[:5]}"
            )
        await asyncio.sleep(settle)  # settle: every agent streaming, start-up backlog drained
        lags.clear()
        n_listings = len(listings)
        cpu0 = time.process_time()
        w0 = time.monotonic()
        rss = [rss_mib()]
        while time.monotonic() - w0 < duration:
            await asyncio.sleep(min(30.0, duration))
            rss.append(rss_mib())
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - w0
        mapped = len(mon._maps)  # hosts whose container -> job map was listed
        in_window = listings[n_listings:]
        jobs_known = len(state.containers)
        await mon.stop()
    down = sum(1 for v in state.hosts.values() if v.status != "ok")
    return {
        "first_snapshot_s": first_snapshot,
        "cpu_pct": 100 * cpu / wall,
        "lags": lags,
        "rss": rss,
        "samples": len(lags),
        "hosts_not_ok": down,
        "wall": wall,
        "hosts_mapped": mapped,
        "start": start,
        "listings": {
            "in_window": len(in_window),
            "per_s": round(len(in_window) / wall, 2),
            "seconds": dist([x[1] for x in in_window]),
            "empty": sum(1 for x in in_window if x[2] == 0),
            "containers_mapped_at_end": jobs_known,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument(
        "--snapshot-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the first complete snapshot",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds between the first complete snapshot and the measurement",
    )
    ap.add_argument(
        "--max-connecting",
        type=int,
        default=MAX_CONNECTING,
        help="SSH handshakes in flight at once (the monitor's bound; a number "
        "above --hosts: unbounded, as before it existed)",
    )
    ap.add_argument(
        "--containerised",
        type=int,
        default=0,
        metavar="N",
        help="N > 0: start N labelled job containers on the shared dockerd and "
        "replay a trace whose GPU processes run in them (the container -> "
        "job map is then listed on every host); removed afterwards",
    )
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the parallel-ssh baselines (first snapshot has no ratio)",
    )
    args = ap.parse_args()
    make_fleet_trace()
    trace = TRACE
    if args.containerised > 0:
        make_container_trace(start_job_containers(args.containerised))
        trace = TRACE_IN_CONTAINERS
    try:
        with tempfile.TemporaryDirectory() as tmp:
            prof = make_profile(args.hosts, Path(tmp))
            r = asyncio.run(
                run_console(
                    prof,
                    args.duration,
                    args.snapshot_timeout,
                    args.settle,
                    args.max_connecting,
                    trace,
                )
            )
    finally:
        if args.containerised > 0:
            remove_job_containers()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lags = sorted(r["lags"])
    p50 = statistics.median(lags) * 1000
    p99 = lags[int(0.99 * (len(lags) - 1))] * 1000
    growth = 100 * (r["rss"][-1] - r["rss"][0]) / r["rss"][0]
    expected = args.hosts * r["wall"]
    summary = {
        "hosts": args.hosts,
        "max_connecting": args.max_connecting,
        "containerised": args.containerised,
        "listings": r["listings"],
        "wall_s": round(r["wall"], 1),
        "cpu_pct": round(r["cpu_pct"], 1),
        "lag_p50_ms": round(p50, 1),
        "lag_p99_ms": round(p99, 1),
        "rss_first_mib": round(r["rss"][0], 1),
        "rss_last_mib": round(r["rss"][-1], 1),
        "maxrss_mib": round(maxrss, 1),
        "samples": r["samples"],
        "expected": round(expected),
        "hosts_not_ok": r["hosts_not_ok"],
        "hosts_mapped": r["hosts_mapped"],
        "first_snapshot_s": round(r["first_snapshot_s"], 2),
    }
    print("result-json " + json.dumps(summary), flush=True)
    print("start-json " + json.dumps(r["start"]), flush=True)
    base = base_py = None
    if not args.no_baseline:
        try:
            base = baseline_parallel_ssh(args.hosts)
            base_py = baseline_parallel_ssh(args.hosts, ["python3 -c 'print(1)'"])
        except SystemExit as e:
            print(f"baseline skipped: {e}")
    print(
        f"\nconsole cost: {args.hosts} hosts x 8 GPUs at 1 Hz for {r['wall']:.0f} s "
        f"({r['samples']} samples of {expected:.0f} expected; {r['hosts_not_ok']} hosts "
        f"not ok at the end; maxrss {maxrss:.0f} MiB; container map listed on "
        f"{r['hosts_mapped']} hosts)\n"
    )
    fs = r["first_snapshot_s"]
    rows = [
        ("metric", "gpuconsole", "target / baseline", "ratio"),
        ("console CPU, % of one core", f"{r['cpu_pct']:.1f}", "< 15", f"{r['cpu_pct'] / 15:.2f}"),
        ("sample-to-state lag p50, ms", f"{p50:.1f}", "-", "-"),
        ("sample-to-state lag p99, ms", f"{p99:.1f}", "< 200", f"{p99 / 200:.2f}"),
        (
            "RSS first -> last, MiB",
            f"{r['rss'][0]:.1f} -> {r['rss'][-1]:.1f}",
            "flat (< 5 %)",
            f"{growth:+.1f} %",
        ),
    ]
    if base is not None and base_py is not None:
        rows += [
            (
                "first complete snapshot, s",
                f"{fs:.2f}",
                f"{base:.2f} (parallel ssh cat)",
                f"{fs / base:.2f}",
            ),
            (
                "  same, baseline starting python3",
                f"{fs:.2f}",
                f"{base_py:.2f} (parallel ssh python3)",
                f"{fs / base_py:.2f}",
            ),
        ]
    else:
        rows.append(("first complete snapshot, s", f"{fs:.2f}", "(no baseline)", "-"))
    rows += [
        (
            "fleet target: CPU, % of one core",
            f"{r['cpu_pct']:.1f}",
            "< 50 (512 hosts)",
            f"{r['cpu_pct'] / 50:.2f}",
        ),
        ("fleet target: lag p99, ms", f"{p99:.1f}", "< 500 (512 hosts)", f"{p99 / 500:.2f}"),
        (
            "fleet target: samples received",
            f"{r['samples']} / {expected:.0f}",
            "all (none dropped)",
            f"{r['samples'] / expected:.4f}",
        ),
        (
            "fleet target: RSS last, MiB",
            f"{r['rss'][-1]:.1f}",
            "< 1024 (512 hosts)",
            f"{r['rss'][-1] / 1024:.2f}",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
