"""The first fleet snapshot: ``gpuconsole top --once --json`` over 64 hosts against pdsh.

Side by side in one run, interleaved (the order rotates each round), ``--runs`` rounds
(default 5), medians reported:

- ``console``: ``gpuconsole top --once --json`` over 64 profile hosts, each agent replaying the
  8-GPU trace of ``console_cost.py`` (``--agent-replay``: hidden, benchmarks only), until every
  host delivered its first sample and the process exited. ``--before TREE`` adds the same
  command run from another source tree (``git archive`` of an older commit) as its own side.
- ``pdsh agent``: ``pdsh -R ssh -f 64`` running the same agent once on the same 64 hosts
  (``python3 -I -S <bundle>/agent.py --count 1 --replay TRACE``, the bundle the console
  uploaded, ``python3`` from PATH as a person would type it).
- ``pdsh agent via py link``: the same with the interpreter the agent linked as ``py`` in its
  folder (what the console starts): the shim-free floor for the same agent.
- ``pdsh cat``: pdsh running ``cat`` of a one-line file: the floor for 64 SSH round trips.

The hosts are loopback aliases of the two sshd test hosts (``scripts/testhosts/up``),
alternately 127.0.0.11 and 127.0.0.12. pdsh drops repeated host names, so each of the 64 gets
its own name (``h000`` ... ``h063``) in an ssh config file passed with ``PDSH_SSH_ARGS_APPEND=-F``
(same key and known_hosts as the profile, BatchMode). Each side runs with a one-host warm-up
first (the console uploads its bundle and the agent links its interpreter; not counted).

Measured per run: wall (s, monotonic, start to exit) and client CPU (user + system s of the
command and every child it waited for: the console process, or pdsh and its 64 ssh clients;
``getrusage(RUSAGE_CHILDREN)`` before and after). The hosts' own CPU (sshd, the agents) is not
in it: on this machine it is the same two cores, so it shows in every side's wall instead.

Run: ``.venv/bin/python scripts/bench/first_snapshot.py [--hosts 64] [--runs 5]
[--before TREE]`` (needs pdsh: ``apt-get install pdsh``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from console_cost import TRACE, make_fleet_trace, make_profile  # noqa: E402
from rig import write_ssh_config  # noqa: E402

from remote.telemetry.stream import AGENT_BASE, _bundle_digest  # noqa: E402

ONE_LINE = TRACE.parent / "one-line.txt"
#: Runs the console's CLI from a source tree (``PYTHONPATH`` and cwd point at it).
_CLI = "import sys; from console.cli import main; sys.argv[0] = 'gpuconsole'; sys.exit(main())"


def timed(
    argv: list[str],
    env: dict[str, str],
    cwd: Path | None = None,
) -> tuple[float, float, str, int]:
    """Run ``argv``; returns (wall s, client CPU s, stdout, exit status)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        sys.stderr.write(f"{shlex.join(argv[:6])}...: exit {p.returncode}\n{p.stderr[-2000:]}\n")
    return wall, cpu, p.stdout, p.returncode


def console_side(tree: Path, profile: Path, n: int) -> Callable[[int | None], tuple[float, float]]:
    """``top --once --json`` from ``tree``; checks that every host has a sample."""
    env = dict(os.environ, PYTHONPATH=str(tree))

    def run(hosts: int | None = None) -> tuple[float, float]:
        argv = [
            sys.executable,
            "-c",
            _CLI,
            "-p",
            str(profile),
            "top",
            "--once",
            "--json",
            "--timeout",
            "120",
            "--agent-replay",
            str(TRACE),
        ]
        if hosts is not None:
            argv += ["--hosts", ",".join(f"h{i:03d}" for i in range(hosts))]
        wall, cpu, out, rc = timed(argv, env, cwd=tree)
        got = [h for h in json.loads(out)["hosts"] if h["sample"]] if rc == 0 else []
        if len(got) != (hosts or n):
            raise SystemExit(f"console ({tree}): {len(got)} of {hosts or n} hosts answered")
        return wall, cpu

    return run


def pdsh_side(cfg: Path, n: int, command: str) -> Callable[[int | None], tuple[float, float]]:
    """pdsh -R ssh with fanout n running ``command``; checks one line from every host."""
    env = dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {cfg}")

    def run(hosts: int | None = None) -> tuple[float, float]:
        k = hosts or n
        argv = ["pdsh", "-R", "ssh", "-f", str(n), "-w", f"h[000-{k - 1:03d}]", command]
        wall, cpu, out, _rc = timed(argv, env)
        answered = {ln.split(":", 1)[0] for ln in out.splitlines() if ln.strip()}
        if len(answered) != k:
            raise SystemExit(f"pdsh `{command[:40]}...`: {len(answered)} of {k} hosts answered")
        return wall, cpu

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also run the console from this source tree (an older commit)",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated sides to leave out (e.g. 'pdsh agent via py link')",
    )
    args = ap.parse_args()
    make_fleet_trace()
    ONE_LINE.write_text(TRACE.read_text().splitlines()[0][:60] + "\n")
    folder = f"~/{AGENT_BASE}/{_bundle_digest()}"
    agent_args = f"--count 1 --no-stdin-watch --replay {TRACE}"
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        profile = make_profile(args.hosts, tmp)
        cfg = write_ssh_config([f"h{i:03d}" for i in range(args.hosts)], tmp / "ssh_config")
        sides: dict[str, Callable[[int | None], tuple[float, float]]] = {
            "console": console_side(ROOT, profile, args.hosts)
        }
        if args.before is not None:
            sides["console, before"] = console_side(args.before.resolve(), profile, args.hosts)
        sides["pdsh agent"] = pdsh_side(
            cfg, args.hosts, f"python3 -I -S {folder}/agent.py {agent_args}"
        )
        sides["pdsh agent via py link"] = pdsh_side(
            cfg, args.hosts, f"{folder}/py -I -S {folder}/agent.py {agent_args}"
        )
        sides["pdsh cat"] = pdsh_side(cfg, args.hosts, f"cat {ONE_LINE}")
        for name in filter(None, (x.strip() for x in args.skip.split(","))):
            if name in ("console", "pdsh agent", "pdsh cat"):
                raise SystemExit(f"--skip {name!r}: the ratios need it")
            sides.pop(name, None)
        for run in sides.values():  # warm-up: bundles uploaded, interpreter linked
            run(2)
        names = list(sides)
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        load0 = os.getloadavg()[0]
        for r in range(args.runs):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                results[name].append(sides[name](None))
                w, c = results[name][-1]
                print(
                    f"round {r + 1} {name:<22} wall {w:6.2f} s  client CPU {c:5.2f} s", flush=True
                )
        load1 = os.getloadavg()[0]

    def med(name: str, i: int) -> float:
        return statistics.median(x[i] for x in results[name])

    base = "pdsh agent"
    print(
        f"\nfirst fleet snapshot: {args.hosts} hosts, median of {args.runs} interleaved runs "
        f"(load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores)\n"
    )
    rows = [
        (
            "side",
            "wall s",
            "(min-max)",
            "client CPU s",
            f"wall / {base}",
            f"CPU / {base}",
            "wall / pdsh cat",
        )
    ]
    for name in names:
        walls = [x[0] for x in results[name]]
        rows.append(
            (
                name,
                f"{med(name, 0):.2f}",
                f"({min(walls):.2f}-{max(walls):.2f})",
                f"{med(name, 1):.2f}",
                f"{med(name, 0) / med(base, 0):.2f}",
                f"{med(name, 1) / med(base, 1):.2f}",
                f"{med(name, 0) / med('pdsh cat', 0):.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    main()
