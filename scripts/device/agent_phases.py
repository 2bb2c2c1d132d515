"""Where the agent's ``--count 1`` CPU goes, phase by phase and NVML call by call, on a GPU.

    python3 scripts/device/agent_phases.py OUT_DIR [RUNS] [--console]

Copies ``agent.py`` and ``nvmlc.py`` into a temporary folder (as the console uploads them),
caches their byte code, then starts RUNS fresh children (default 9) of this file with
``-I -S --child FOLDER``. Each child does what ``agent.main`` does for ``--count 1`` (the
binding ``nvmlc``, the kernel log reader, the stdin watcher, the first sample after GPM's
window, ``emit``, ``close``) with every step and every NVML function of the binding wrapped
in a timer: CPU (``time.process_time_ns``, the whole process) and wall time, inclusive (a step
holds the steps and calls under it). With ``--console``, the children start as the console
starts the agent: with its boot-fixed file (``boot-fixed.txt`` in the folder, written by the
uncounted first run) and ending without NVML's teardown (``Agent.close(release_nvml=False)``).
The parent reads each child's total CPU from
``os.wait4``'s rusage. Writes into OUT_DIR:

* ``phases.txt``: per step and per NVML function, the median over the runs of its CPU and
  wall ms and its calls, the steps in the order they ran; the interpreter's start (CPU before
  the child's first line) and what no step holds;
* ``phases.json``: every run's numbers, the kernel log's source and line count.
"""

from __future__ import annotations

import time

T_START = time.process_time_ns()  # the interpreter's own start, in the child

import os  # noqa: E402  # loaded by the interpreter's start already
import sys  # noqa: E402

#: (class name, method) of the agent wrapped in timers, besides every ``nvml*`` function
STEPS = (
    ("Agent", "__init__"),
    ("Agent", "_init_nvml"),
    ("Agent", "_get_handle"),
    ("Agent", "_refresh_slow"),
    ("Agent", "_read_slow"),
    ("Agent", "_setup_gpm"),
    ("Agent", "sample"),
    ("Agent", "_sample_gpus"),
    ("Agent", "_gpu_record"),
    ("Agent", "_gpm"),
    ("Agent", "_processes"),
    ("Agent", "_xid_events"),
    ("Agent", "_read_kernel_log"),
    ("Agent", "close"),
    ("HostReader", "__init__"),
    ("HostReader", "read"),
    ("RankReader", "__init__"),
    ("RankReader", "read"),
    ("KernelLogReader", "read"),
)


def child(folder: str, console: bool = False) -> None:
    """One ``--count 1`` start with timers; prints one JSON line of the numbers."""
    acc: dict[str, list[int]] = {}  # name -> [cpu ns, wall ns, calls]
    order: list[str] = []

    def add(name: str, cpu: int, wall: int) -> None:
        if name not in acc:
            acc[name] = [0, 0, 0]
            order.append(name)
        a = acc[name]
        a[0] += cpu
        a[1] += wall
        a[2] += 1

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*a, **k):  # type: ignore[no-untyped-def]
            c, w = time.process_time_ns(), time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                add(name, time.process_time_ns() - c, time.perf_counter_ns() - w)

        return wrapper

    def step(name: str, fn, *a):  # type: ignore[no-untyped-def]
        return timed(name, fn)(*a)

    sys.path.insert(0, folder)
    c0 = time.process_time_ns()
    agent = step("import agent", __import__, "agent")
    nv, err = step("load_nvml (import nvmlc)", agent.load_nvml, "nvmlc")
    assert nv is not None, err
    for name in dir(nv):
        fn = getattr(nv, name)
        if name.startswith("nvml") and callable(fn) and not isinstance(fn, type):
            setattr(nv, name, timed("nvml " + name, fn))
    for cls, meth in STEPS:
        klass = getattr(agent, cls)
        setattr(klass, meth, timed(f"{cls}.{meth}", getattr(klass, meth)))
    reader = agent.KernelLogReader(agent.KERNEL_LOG_EVERY_S)
    fixed = agent.BootFixedCache(os.path.join(folder, "boot-fixed.txt")) if console else None
    a = agent.Agent(nv, 1.0, 10, kernel_log=reader, boot_fixed=fixed)
    closed = agent.Flag()
    step("watch_stdin (a thread)", agent.watch_stdin, closed)
    wait = a.gpm_wait_s()
    if wait > 0:
        time.sleep(wait + 0.005)
    sample = agent.safe_sample(a)
    with open(os.devnull, "w") as out:
        step("emit (dumps + write)", agent.emit, sample, out)
    a.close(release_nvml=not console)
    c_end = time.process_time_ns()
    kl = sample.get("kernel_log") or {}
    import json  # after the measurement

    print(
        json.dumps(
            {
                "interpreter": T_START,
                "measured": c_end - c0,
                "steps": {k: acc[k] for k in order},
                "kernel_log": {
                    "source": kl.get("source"),
                    "lines": len(kl.get("lines") or []),
                    "error": sample["errors"].get("kernel_log"),
                },
                "gpus": len(sample["gpus"]),
                "processes": len(sample["processes"] or []),
            }
        )
    )


def main() -> int:
    import json  # the parent's only: the child measures its own imports
    import shutil
    import statistics
    import subprocess

    from agent_nvml_ab import agent_folder  # this folder's

    out_dir = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    os.makedirs(out_dir, exist_ok=True)
    work = agent_folder("agent-phases-")
    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--child", work]
    if "--console" in sys.argv[3:]:
        argv.append("--console")
    env = dict(os.environ)
    env.pop("GPUCONSOLE_AGENT_NVML", None)
    got: list[dict] = []  # type: ignore[type-arg]
    for i in range(runs + 1):  # the first caches the byte code and is not counted
        res = subprocess.run(argv, capture_output=True, timeout=60, env=env)
        if res.returncode != 0:
            sys.stderr.write(res.stderr.decode())
            return 1
        if i:
            got.append(json.loads(res.stdout))
    # each child's whole CPU from its rusage: another round of starts, reaped with wait4
    totals: list[float] = []
    quiet = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    for _ in range(runs):
        pid = os.posix_spawn(argv[0], argv, env, file_actions=quiet)
        _, _, ru = os.wait4(pid, 0)
        totals.append((ru.ru_utime + ru.ru_stime) * 1e3)
    shutil.rmtree(work, ignore_errors=True)

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    def ms(key: str) -> list[float]:
        return [g[key] / 1e6 for g in got]

    names: list[str] = []
    for g in got:
        for k in g["steps"]:
            if k not in names:
                names.append(k)
    lines = [
        f"python {sys.version.split()[0]}, {runs} runs; ms, median over the runs (inclusive: a "
        "step holds the steps and NVML calls under it)",
        f"child total CPU (wait4 rusage, other runs)   {med(totals):7.1f}  "
        f"[{min(totals):.1f}-{max(totals):.1f}]",
        f"interpreter start (CPU before line 1)        {med(ms('interpreter')):7.1f}",
        f"measured (import agent .. close)             {med(ms('measured')):7.1f}",
        "",
        f"{'step / NVML function':44s} {'CPU':>7s} {'wall':>7s} {'calls':>5s}",
    ]
    for k in names:
        vals = [g["steps"].get(k, [0, 0, 0]) for g in got]
        cpu, wall = med([v[0] / 1e6 for v in vals]), med([v[1] / 1e6 for v in vals])
        lines.append(f"{k:44s} {cpu:7.2f} {wall:7.2f} {int(med([v[2] for v in vals])):5d}")
    nv_total = [
        sum(v[0] for k, v in g["steps"].items() if k.startswith("nvml ")) / 1e6 for g in got
    ]
    lines.append(f"{'all NVML calls (sum, nested calls twice)':44s} {med(nv_total):7.2f}")
    kls = {json.dumps(g["kernel_log"], sort_keys=True) for g in got}
    lines.append(f"kernel log: {' | '.join(sorted(kls))}")
    lines.append(f"gpus {got[0]['gpus']}, processes {got[0]['processes']}")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out_dir, "phases.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "phases.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "totals_ms": totals, "runs": got}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], "--console" in sys.argv[3:])
        sys.exit(0)
    sys.exit(main())
