"""Start-up cost of the CLI: ``gpuconsole --help`` and ``gpuconsole ps`` against a bare start
of the same interpreter (``python -c pass``), in paired, interleaved runs.

Run on this machine: ``.venv/bin/python scripts/bench/startup.py [--runs 30] [--json FILE]``.
Each round starts the three commands once each, in a shuffled order, so a busy moment on the
(shared) machine hits all three alike. Measured per run: wall time from ``subprocess.run`` to
the child's exit (``time.perf_counter``, ms). ``ps`` runs on an empty state dir
(``$GPUCONSOLE_STATE_DIR``, a fresh temporary folder) with an empty config dir
(``$GPUCONSOLE_CONFIG_DIR``) and no ``$GPUCONSOLE_PROFILE``, so it uses the bundled ``local``
profile: one host, this machine, whose Docker engine it asks for labelled containers (a
profile needs at least one host, so ``ps`` always asks one; ``--profile`` picks another).
When that host has a host-runtime jobs folder (``~/.cache/gpuconsole/jobs``,
:data:`remote.hostengine.JOBS_DIR`, left by jobs run with ``runtime: host``) holding job
folders, ``ps`` also starts the host's ``python3`` to list those nodes (``hostjob.py list``);
the script says whether the folder exists, and times ``ps`` a second time with ``$HOME``
pointed at an empty folder (no jobs folder: the listing is one ``sh`` that exits at once), so
that cost is shown apart. ``ps`` keeps the validated profile in a temporary
``$GPUCONSOLE_CACHE_DIR`` (:mod:`console.profilecache`; the first, untimed, run of each command
fills it), and is timed a third time with a cache dir it cannot create (``ps, profile not
kept``: the profile is parsed and validated on every run, as on the first run after it changed).

Bytecode: by default the children write and read their ``.pyc`` files under a temporary
``$PYTHONPYCACHEPREFIX`` (``$PYTHONDONTWRITEBYTECODE`` unset), as an installed package runs
(pip compiles it at install); ``--no-bytecode-cache`` keeps the caller's setting, so with
``PYTHONDONTWRITEBYTECODE=1`` every start compiles the project's sources again.
``--pythonpath DIR`` puts another checkout first on every child's ``sys.path`` (the bare
interpreter's too), e.g. a ``git worktree`` of the commit before a change.

Prints, per command, the median and p90 wall time and the ratio to the bare interpreter
(ratio of the medians, and the median of the per-round ratios), then which of the heavy
packages each command imported (one extra run with ``-X importtime``). Targets (issue 11):
``--help`` within 5x a bare interpreter, ``ps`` within 8x.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: Packages whose import the start-up of a command should not pay unless it uses them.
HEAVY = (
    "asyncssh",
    "docker",
    "pydantic",
    "textual",
    "yaml",
    "requests",
    "cryptography",
    "apprise",
    "prometheus_client",
    "sqlite3",
    "console.service",
    "console.jobs.spec",
    "console.jobs.plan",
    "remote.telemetry.faults",
)

#: The host runtime's jobs folder under the local host's home (``remote.hostengine.JOBS_DIR``).
HOST_JOBS_DIR = ".cache/gpuconsole/jobs"


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (linear interpolation between closest ranks)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def wall_ms(argv: list[str], env: dict[str, str]) -> float:
    """Wall time of one run of ``argv`` (ms), output discarded.

    Raises:
        SystemExit: the command failed (its stderr is shown).
    """
    t0 = time.perf_counter()
    p = subprocess.run(
        argv,
        env=env,
        cwd=tempfile.gettempdir(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    dt = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    return dt


def heavy_imports(python: str, args: list[str], env: dict[str, str]) -> list[str]:
    """Which of :data:`HEAVY` ``python -X importtime -m console.cli ARGS`` imports (``-c
    pass`` for no args)."""
    cmd = [python, "-X", "importtime"]
    cmd += ["-m", "console.cli", *args] if args else ["-c", "pass"]
    p = subprocess.run(
        cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=False
    )
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in p.stderr.splitlines()
        if line.startswith("import time:")
    }
    return [h for h in HEAVY if h in names]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=30, help="rounds (each runs every command once)")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--gpuconsole", default=str(ROOT / ".venv" / "bin" / "gpuconsole"))
    ap.add_argument("--profile", help="profile for ps (default: the bundled local profile)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--pythonpath", type=Path, help="a checkout to import console from")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep the caller's PYTHONDONTWRITEBYTECODE / PYTHONPYCACHEPREFIX",
    )
    ap.add_argument("--json", type=Path, help="write the raw times here")
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="startup-state-")
    config = tempfile.mkdtemp(prefix="startup-config-")
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(
        GPUCONSOLE_STATE_DIR=state,
        GPUCONSOLE_CONFIG_DIR=config,
        GPUCONSOLE_CACHE_DIR=tempfile.mkdtemp(prefix="startup-cache-"),
    )
    if args.pythonpath:
        env["PYTHONPATH"] = str(args.pythonpath.resolve())
    if not args.no_bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="startup-pycache-")
    cache = "no" if env.get("PYTHONDONTWRITEBYTECODE") else "yes"
    ps = [args.gpuconsole, *(["--profile", args.profile] if args.profile else []), "ps"]
    empty_home = dict(env, HOME=tempfile.mkdtemp(prefix="startup-home-"))
    # a cache dir that cannot be made (under a file): the profile is validated on every run
    blocker = Path(tempfile.mkdtemp(prefix="startup-nocache-")) / "file"
    blocker.write_text("not a folder")
    uncached = dict(env, GPUCONSOLE_CACHE_DIR=str(blocker))
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([args.python, "-c", "pass"], env),
        "gpuconsole --help": ([args.gpuconsole, "--help"], env),
        "gpuconsole ps": (ps, env),
        "ps, empty $HOME": (ps, empty_home),
        "ps, profile not kept": (ps, uncached),
    }
    for argv, cenv in cmds.values():  # warm the page cache and the state dir once
        wall_ms(argv, cenv)
    rng = random.Random(args.seed)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.runs):
        order = list(cmds)
        rng.shuffle(order)
        for name in order:
            times[name].append(wall_ms(*cmds[name]))

    bare = times["python -c pass"]
    base = statistics.median(bare)
    targets = {
        "gpuconsole --help": 5.0,
        "gpuconsole ps": 8.0,
        "ps, empty $HOME": 8.0,
        "ps, profile not kept": 8.0,
    }
    print(
        f"start-up, {args.runs} interleaved rounds, wall ms ({args.python}; console from "
        f"{args.pythonpath or ROOT}; bytecode cache: {cache})"
    )
    jobs_dir = Path(env.get("HOME", str(Path.home()))) / HOST_JOBS_DIR
    if jobs_dir.is_dir():
        jobs = sum(1 for p in jobs_dir.iterdir() if p.is_dir())
        print(
            f"note: {jobs_dir} exists ({jobs} job folders): `gpuconsole ps` lists the local "
            "host runtime's nodes (with python3 where it holds job folders); "
            "`ps, empty $HOME` has no such folder"
        )
    print(f"{'command':<22} {'median':>8} {'p90':>8} {'ratio':>7} {'paired':>7} {'target':>7}")
    result: dict[str, Any] = {
        "runs": args.runs,
        "bytecode_cache": cache == "yes",
        "host_jobs_dir": jobs_dir.is_dir(),
        "pythonpath": str(args.pythonpath or ""),
        "commands": {},
    }
    for name, xs in times.items():
        med, p90 = statistics.median(xs), quantile(xs, 0.9)
        paired = statistics.median(x / b for x, b in zip(xs, bare))
        tgt = f"{targets[name]:.0f}x" if name in targets else "-"
        print(f"{name:<22} {med:8.1f} {p90:8.1f} {med / base:7.2f} {paired:7.2f} {tgt:>7}")
        result["commands"][name] = {
            "argv": cmds[name][0],
            "ms": xs,
            "median_ms": med,
            "p90_ms": p90,
            "ratio": med / base,
            "paired_ratio": paired,
        }
    print("heavy imports:")
    for name, extra in (
        ("python -c pass", []),
        ("gpuconsole --help", ["--help"]),
        ("gpuconsole ps", cmds["gpuconsole ps"][0][1:]),
    ):
        found = heavy_imports(args.python, extra, env)
        print(f"  {name:<18} {', '.join(found) or '-'}")
        result["commands"][name]["heavy_imports"] = found
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
