"""``gpuconsole ps`` over a fleet: 64 and 512 SSH hosts, a few jobs on 2 of them.

The hosts are loopback aliases of the two sshd test hosts (scripts/testhosts/up), as in
scripts/bench/console_cost.py: N profile entries ``h000``..., alternately 127.0.0.11 and
127.0.0.12, same key. Both test hosts share this machine's dockerd, so each host's listing
sees the same containers: 3 sleeping containers labelled as gpuconsole jobs, 2 on ``h000``
(one of them a 2-node job with node 1 on ``h001``), so every other host has no job of its own.

Each measurement is cold, like a user: a new ``python -m console.cli ps`` process (its import,
its N SSH connections, its listings). The state dir is kept between runs, after one warm-up run
that adopts the jobs: the runs measure the steady state (list every host, refresh the 3 running
jobs). Median of ``--runs`` (default 5).

Needs: ``scripts/testhosts/up`` (its sshd_config sets ``MaxStartups 100:30:200``: with the
default 10:30:100 sshd drops 30 % of unauthenticated connections beyond 10 in flight) and an open
file limit above 2 descriptors per host (``ulimit -n``; 512 hosts: one SSH socket and one
forwarded Docker socket each).

Baseline (``--floor``, needs ``apt-get install pdsh``): ``pdsh -R ssh -f N true`` over the
same N hosts (names ``h000``... in an ssh config passed with ``PDSH_SSH_ARGS_APPEND=-F``;
OpenSSH's client, one process per host), run right after each ``ps`` run: the rig's own cost
of N SSH logins running one command, which grows with N here because every "host" is one of
two sshds on the same 2 cores. The table then gives ps / floor too. ``--floor-kept``: the same
pdsh over connections kept open between runs (OpenSSH ``ControlMaster``/``ControlPersist``,
one master per host name, opened by an untimed run): what a command per host costs here when
no run pays a handshake.

Run: ``.venv/bin/python scripts/bench/ps_fleet.py [--hosts 64 512] [--runs 5] [--floor]
[--floor-kept]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import yaml
from rig import TESTHOSTS, write_ssh_config

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "gpuconsole/torch:2.13.0-cpu"
BENCH_LABEL = "io.gpuconsole-bench.ps-fleet"
#: The bench's own jobs (:func:`start_jobs`); others on the shared engine are only counted.
OURS = ("bench-a-000001", "bench-b-000002")


def make_profile(n: int, path: Path) -> None:
    """N loopback hosts ``h000``... alternating between the two test hosts."""
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
    prof = {
        "known_hosts": base["known_hosts"],
        "hosts": hosts,
        "connect_timeout": 30,
        "defaults": base.get("defaults", {}),
    }
    path.write_text(yaml.safe_dump(prof))


def start_jobs(client: docker.DockerClient) -> list[str]:
    """3 sleeping job containers: ``bench-a`` (h000), ``bench-b`` (2 nodes: h000, h001)."""
    now = time.time()
    made = []
    for job, rank, count, host in (
        ("bench-a-000001", 0, 1, "h000"),
        ("bench-b-000002", 0, 2, "h000"),
        ("bench-b-000002", 1, 2, "h001"),
    ):
        labels = {
            "io.gpuconsole.format": "1",
            "io.gpuconsole.job-id": job,
            "io.gpuconsole.job-name": job.rsplit("-", 1)[0],
            "io.gpuconsole.node-rank": str(rank),
            "io.gpuconsole.node-count": str(count),
            "io.gpuconsole.nproc-per-node": "1",
            "io.gpuconsole.host": host,
            "io.gpuconsole.spec-hash": "0" * 12,
            "io.gpuconsole.created-at": f"{now:.3f}",
            "io.gpuconsole.kind": "train",
            BENCH_LABEL: "1",
        }
        c = client.containers.run(
            IMAGE, ["sleep", "3600"], detach=True, labels=labels, name=f"{job}-n{rank}-bench"
        )
        made.append(str(c.id))
    return made


def remove_jobs(client: docker.DockerClient) -> None:
    for c in client.containers.list(all=True, filters={"label": BENCH_LABEL}):
        c.remove(force=True)


def floor_once(cfg: Path, n: int) -> float:
    """Wall seconds of ``pdsh -R ssh -f n true`` over ``h000``..; every host must succeed.

    Raises:
        SystemExit: pdsh failed on a host.
    """
    env = dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {cfg}")
    t0 = time.monotonic()
    res = subprocess.run(
        ["pdsh", "-R", "ssh", "-f", str(n), "-w", f"h[000-{n - 1:03d}]", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    dt = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"pdsh over {n} hosts failed ({res.returncode}): {res.stderr[-1000:]}")
    return dt


def kept_config(cfg: Path, sockets: Path) -> Path:
    """``cfg`` plus OpenSSH connection sharing (``ControlMaster auto``, ``ControlPersist``):
    one master connection per host name (``%n``) under ``sockets``, kept between runs."""
    kept = cfg.with_name(cfg.name + "-kept")
    kept.write_text(
        cfg.read_text().replace(
            "Host *\n",
            f"Host *\n  ControlMaster auto\n  ControlPath {sockets}/%n\n  ControlPersist 900\n",
        )
    )
    return kept


def close_masters(cfg: Path, n: int) -> None:
    """``ssh -O exit`` for the master connection of each of ``h000``.. (see :func:`kept_config`)."""
    for i in range(n):
        subprocess.run(
            ["ssh", "-F", str(cfg), "-O", "exit", f"h{i:03d}"],
            capture_output=True,
            timeout=30,
            check=False,
        )


def ps_once(
    profile: Path, state: Path, extra: list[str]
) -> tuple[float, list[dict[str, object]], str]:
    env = dict(
        os.environ, GPUCONSOLE_STATE_DIR=str(state), GPUCONSOLE_CONFIG_DIR=str(state / "config")
    )
    env.pop("GPUCONSOLE_PROFILE", None)
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "console.cli", "-p", str(profile), "ps", "--json", *extra],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    dt = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"ps failed ({res.returncode}): {res.stderr[-2000:]}")
    data = json.loads(res.stdout)
    jobs = data["jobs"] if isinstance(data, dict) else data
    return dt, jobs, res.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also time `pdsh -R ssh true` over the same hosts after each ps run",
    )
    ap.add_argument(
        "--floor-kept",
        action="store_true",
        help="also time `pdsh -R ssh true` over connections kept open between runs "
        "(OpenSSH ControlMaster/ControlPersist, opened by one untimed run)",
    )
    ap.add_argument(
        "--deadline",
        type=float,
        help="passed to `ps --deadline` (not given: ps's default; older ps: none)",
    )
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open file limit (ulimit -n): soft {soft}, hard {hard}")
    # every alias shares root's home: with a host-runtime jobs folder there, every host runs
    # `hostjob.py list` (a python start); without one, a shell that stops at once
    jobs_dir = Path.home() / ".cache/gpuconsole/jobs"
    nodes = len(list(jobs_dir.glob("*/*"))) if jobs_dir.is_dir() else 0
    print(
        f"host-runtime jobs folder on the hosts' (shared) home: "
        f"{'present, ' + str(nodes) + ' node folders' if jobs_dir.is_dir() else 'absent'}"
    )
    extra = [] if args.deadline is None else ["--deadline", str(args.deadline)]
    client = docker.from_env()
    remove_jobs(client)
    start_jobs(client)
    results: dict[int, list[float]] = {}
    floors: dict[int, list[float]] = {}
    kept: dict[int, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.hosts:
                prof = Path(tmp) / f"fleet{n}.yaml"
                make_profile(n, prof)
                cfg = Path(tmp) / f"ssh_config{n}"
                write_ssh_config([f"h{i:03d}" for i in range(n)], cfg)
                state = Path(tmp) / f"state{n}"
                if args.floor_kept:
                    sockets = Path(tempfile.mkdtemp(prefix="cm-", dir="/tmp"))
                    kcfg = kept_config(cfg, sockets)
                    floor_once(kcfg, n)  # opens the masters
                _, jobs, _ = ps_once(prof, state, extra)  # warm-up: adopts the bench jobs
                ours = sorted(str(j["id"]) for j in jobs if str(j["id"]) in OURS)
                if ours != sorted(OURS):
                    raise SystemExit(f"{n} hosts: jobs {ours}, not {sorted(OURS)}")
                others = len(jobs) - len(ours)
                if others:  # another run's labelled containers on the shared dockerd
                    print(f"{n} hosts: {others} other jobs on the shared Docker engine")
                times = []
                for _ in range(args.runs):
                    dt, jobs, stderr = ps_once(prof, state, extra)
                    states = {str(j["id"]): str(j["state"]) for j in jobs if str(j["id"]) in OURS}
                    if set(states.values()) != {"running"} or stderr.strip():
                        raise SystemExit(f"{n} hosts: {states} {stderr[-1000:]}")
                    times.append(dt)
                    if args.floor:
                        floors.setdefault(n, []).append(floor_once(cfg, n))
                    if args.floor_kept:
                        kept.setdefault(n, []).append(floor_once(kcfg, n))
                if args.floor_kept:
                    close_masters(kcfg, n)
                results[n] = times
                print(
                    f"{n} hosts: "
                    + " ".join(f"{t:.2f}" for t in times)
                    + " s"
                    + (
                        " | pdsh true: " + " ".join(f"{t:.2f}" for t in floors[n]) + " s"
                        if args.floor
                        else ""
                    )
                    + (
                        " | pdsh true, kept: " + " ".join(f"{t:.2f}" for t in kept[n]) + " s"
                        if args.floor_kept
                        else ""
                    )
                )
    finally:
        remove_jobs(client)
        client.close()
    first = args.hosts[0]
    base = statistics.median(results[first])
    head = f"\n{'hosts':>6}  {'median s':>9}  {'min s':>6}  {'max s':>6}  ratio to {first:<4}"
    if args.floor:
        head += f"  {'pdsh true s':>11}  {'ratio to ' + str(first):>12}  ps / pdsh"
    if args.floor_kept:
        head += f"  {'kept s':>7}  {'ratio to ' + str(first):>12}"
    print(head)
    floor_base = statistics.median(floors[first]) if args.floor else 0.0
    kept_base = statistics.median(kept[first]) if args.floor_kept else 0.0
    for n, times in results.items():
        med = statistics.median(times)
        row = f"{n:>6}  {med:>9.2f}  {min(times):>6.2f}  {max(times):>6.2f}  {med / base:<12.2f}"
        if args.floor:
            fl = statistics.median(floors[n])
            row += f"  {fl:>11.2f}  {fl / floor_base:>12.2f}  {med / fl:.2f}"
        if args.floor_kept:
            kp = statistics.median(kept[n])
            row += f"  {kp:>7.2f}  {kp / kept_base:>12.2f}"
        print(row)


if __name__ == "__main__":
    main()
