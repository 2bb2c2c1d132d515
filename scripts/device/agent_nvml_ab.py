"""The agent through its own NVML binding (nvmlc.py) against nvidia-ml-py's pynvml, on a GPU.

    python3 scripts/device/agent_nvml_ab.py OUT_DIR [RUNS] [BEFORE_AGENT_PY]

Needs nvidia-ml-py in this interpreter (``scripts/device/prepare.sh``). Builds the agent's
folder as the console uploads it (``agent.py``, ``nvmlc.py``, this interpreter's ``pynvml.py``)
in a temporary directory, byte code cached by a first run, then writes into OUT_DIR:

* ``ab.json``: the agent's samples (``--count 3 --interval 0.5``) through each binding
  (``--nvml nvmlc``, ``--nvml pynvml``), and ``differences``: every GPU, host-version, state,
  process and error-key difference between the two runs' samples apart from the readings that
  move between two moments (utilization, temperature, power, clocks, P-state, clock reasons,
  link generation, memory used; which of them are null must still agree), and the GPM values;
* ``ab.txt``: the two runs' first samples side by side, field by field;
* ``ab.json``'s ``boot_fixed``: the boot-fixed fields (``--boot-fixed-cache``) of a start
  without the file, the start that writes it and the one that reads it, the file's text, and
  whether the three agree;
* ``cpu.txt``: the CPU (user + sys, ``os.wait4``'s rusage of each child) of fresh processes, RUNS
  times each (default 9, the variants interleaved run by run), median and range in ms: the bare
  interpreter, the agent's top-level imports, ``import nvmlc``, ``import pynvml``, NVML init +
  one handle + six fields through plain ctypes, nvmlc and pynvml, and the agent's ``--count 1``
  through each binding, started as the console starts it (``-I -S -c 'import agent'``, byte code
  cached; nvmlc also with its boot-fixed file there, and with one it cannot write: a start
  that asks the driver) and as a script (``agent.py``, compiled each time); with
  BEFORE_AGENT_PY (an earlier ``agent.py``, e.g. ``git show REV:remote/agent/agent.py``),
  its ``--count 1`` too, from a folder of its own with the same ``nvmlc.py`` and ``pynvml.py``;
* ``importtime-nvmlc.txt``, ``importtime-pynvml.txt``: ``-X importtime`` of the agent's
  ``--count 1`` through each binding (as the console starts it);
* ``smi.txt``: ``nvidia-smi`` (the GPU and driver).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

PY = sys.executable
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AGENT_DIR = os.path.join(ROOT, "remote", "agent")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_start_floor import CTYPES_FIELDS, cpu_ms  # noqa: E402  # the floor's own snippet

#: the console's start command's Python (remote/telemetry/stream.py, _AGENT_MAIN)
AGENT_MAIN = (
    "import sys;p=sys.argv.pop(1);sys.path.insert(0,p.rpartition('/')[0]);"
    "import agent;r=getattr(agent,'run',None);r() if r else sys.exit(agent.main())"
)
#: the agent's fields kept in its boot-fixed file (remote/agent/agent.py, BOOT_FIXED)
BOOT_FIXED = ("sm_clock_max_mhz", "mem_clock_max_mhz", "pcie_gen_max", "pcie_width_max")
#: the six fast fields of GPU 0's handle ``h`` through a binding ``nv``
FAST_FIELDS = """
nv.nvmlDeviceGetMemoryInfo(h)
nv.nvmlDeviceGetUtilizationRates(h)
nv.nvmlDeviceGetTemperature(h, 0)
nv.nvmlDeviceGetPowerUsage(h)
nv.nvmlDeviceGetClockInfo(h, 1)
nv.nvmlDeviceGetClockInfo(h, 2)
"""
FIELDS = (
    """
n = nv.nvmlDeviceGetCount()
h = nv.nvmlDeviceGetHandleByIndex(0)"""
    + FAST_FIELDS
    + "nv.nvmlShutdown()\n"
)
#: GPU readings that move between two moments (their values are not compared)
MOVING = (
    "util_gpu_pct",
    "util_mem_pct",
    "temp_c",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pstate",
    "throttle_reasons",
    "pcie_gen",
    "mem_used_mib",
)


def stable(s: dict[str, Any]) -> dict[str, Any]:
    """What two bindings' samples of one idle host must agree on (see the docstring)."""
    gpus = []
    for g in s["gpus"]:
        rec = {k: v for k, v in g.items() if k not in MOVING and k != "gpm"}
        rec["null"] = sorted(k for k in MOVING if g[k] is None)
        rec["gpm_keys"] = sorted(g["gpm"]) if g["gpm"] else None
        gpus.append(rec)
    host = {k: s["host"][k] for k in ("driver_version", "cuda_version", "nvml_version")}
    return {
        "gpus": gpus,
        "host": host,
        "state": s["state"],
        "procs": s["processes"],
        "errors": sorted(s["errors"]),
    }


def diff(a: object, b: object, path: str, out: list[str]) -> None:
    """Every leaf where ``a`` and ``b`` differ, as ``path: a != b`` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            diff(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def agent_folder(prefix: str) -> str:
    """A temporary folder holding ``agent.py`` and ``nvmlc.py``, as the console uploads them."""
    work = tempfile.mkdtemp(prefix=prefix)
    for name in ("agent.py", "nvmlc.py"):
        shutil.copyfile(os.path.join(AGENT_DIR, name), os.path.join(work, name))
    return work


def main() -> int:
    out_dir = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    os.makedirs(out_dir, exist_ok=True)
    import pynvml

    work = agent_folder("agent-ab-")
    shutil.copyfile(pynvml.__file__, os.path.join(work, "pynvml.py"))
    agent_py = os.path.join(work, "agent.py")
    before_py = None
    if len(sys.argv) > 3:
        before = os.path.join(work, "before")
        os.mkdir(before)
        for name in ("nvmlc.py", "pynvml.py"):
            shutil.copyfile(os.path.join(work, name), os.path.join(before, name))
        before_py = os.path.join(before, "agent.py")
        shutil.copyfile(sys.argv[3], before_py)
    env = dict(os.environ)
    env.pop("GPUCONSOLE_AGENT_NVML", None)  # the binding is chosen by --nvml here

    def agent(binding: str, *more: str, script: bool = False, py: str = agent_py) -> list[str]:
        start = [py] if script else ["-c", AGENT_MAIN, py]
        return [PY, "-I", "-S", *start, "--nvml", binding, "--no-stdin-watch", *more]

    # (a) records through both bindings
    ab: dict[str, Any] = {"python": sys.version.split()[0], "runs": []}
    for binding in ("nvmlc", "pynvml"):
        argv = agent(binding, "--count", "3", "--interval", "0.5")
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        samples = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
        ab["runs"].append(
            {
                "binding": binding,
                "argv": ["python3", *argv[1:]],
                "exit": res.returncode,
                "stderr": res.stderr,
                "samples": samples,
            }
        )
    by = {r["binding"]: r["samples"] for r in ab["runs"]}
    differences: list[str] = []
    if len(by["nvmlc"]) != len(by["pynvml"]):
        differences.append(f"sample counts {len(by['nvmlc'])} != {len(by['pynvml'])}")
    for i, (a, b) in enumerate(zip(by["nvmlc"], by["pynvml"])):
        diff(stable(a), stable(b), f"sample[{i}]", differences)
    ab["differences"] = differences
    with open(os.path.join(out_dir, "ab.json"), "w") as f:
        json.dump(ab, f, indent=1)
    with open(os.path.join(out_dir, "ab.txt"), "w") as f:
        f.write("first sample, nvmlc | pynvml (every GPU field; * moves between moments)\n")
        for gi, (ga, gb) in enumerate(zip(by["nvmlc"][0]["gpus"], by["pynvml"][0]["gpus"])):
            for k in ga:
                mark = "*" if k in MOVING or k == "gpm" else " "
                same = "==" if ga[k] == gb.get(k) else "!="
                f.write(f"gpu{gi} {mark} {k:26s} {ga[k]!r} {same} {gb.get(k)!r}\n")
        for k in ("driver_version", "cuda_version", "nvml_version"):
            a, b = by["nvmlc"][0]["host"][k], by["pynvml"][0]["host"][k]
            f.write(f"host   {k:26s} {a!r} {'==' if a == b else '!='} {b!r}\n")
        f.write(f"differences: {differences}\n")
    print("differences:", differences)

    # (a2) the boot-fixed file: a first start writes it, a second reads its fields from it;
    # both records' fields equal the ones read from the driver without it
    fixed_file = os.path.join(work, "boot-fixed.txt")
    fixed: dict[str, Any] = {"file": fixed_file, "runs": []}
    for label in ("no file", "first start (writes it)", "second start (reads it)"):
        more = [] if label == "no file" else ["--boot-fixed-cache", fixed_file]
        res = subprocess.run(
            agent("nvmlc", "--count", "1", *more), capture_output=True, text=True, timeout=60
        )
        gpus = [json.loads(line)["gpus"] for line in res.stdout.splitlines() if line.strip()]
        fixed["runs"].append(
            {
                "run": label,
                "exit": res.returncode,
                "stderr": res.stderr,
                "fields": [{k: g.get(k) for k in BOOT_FIXED} for g in gpus[0]] if gpus else None,
            }
        )
    try:
        with open(fixed_file) as f:
            fixed["text"] = f.read()
    except OSError as e:
        fixed["text"] = f"not written: {e}"
    firsts = [r["fields"] for r in fixed["runs"]]
    fixed["agree"] = all(f == firsts[0] for f in firsts) and firsts[0] is not None
    ab["boot_fixed"] = fixed
    with open(os.path.join(out_dir, "ab.json"), "w") as f:
        json.dump(ab, f, indent=1)
    print("boot-fixed fields agree:", fixed["agree"], firsts[0])

    # (b) CPU per start
    path = f"import sys; sys.path.insert(0, {work!r}); "
    variants: list[tuple[str, list[str]]] = [
        ("interpreter -I -S", [PY, "-I", "-S", "-c", "pass"]),
        (
            "agent's top-level imports",
            [PY, "-I", "-S", "-c", "import json, math, os, sys, threading, time"],
        ),
        ("import ctypes", [PY, "-I", "-S", "-c", "import ctypes"]),
        ("import nvmlc", [PY, "-I", "-S", "-c", path + "import nvmlc"]),
        ("import pynvml", [PY, "-I", "-S", "-c", path + "import pynvml"]),
        ("ctypes: init + handle + 6 fields", [PY, "-I", "-S", "-c", CTYPES_FIELDS]),
        (
            "nvmlc: init + handle + 6 fields",
            [PY, "-I", "-S", "-c", path + "import nvmlc as nv; nv.nvmlInitWithFlags(0)" + FIELDS],
        ),
        (
            "pynvml: init + handle + 6 fields",
            [PY, "-I", "-S", "-c", path + "import pynvml as nv; nv.nvmlInitWithFlags(0)" + FIELDS],
        ),
        ("agent --count 1, nvmlc", agent("nvmlc", "--count", "1")),
        (
            "agent --count 1, nvmlc, boot-fixed file",
            agent("nvmlc", "--count", "1", "--boot-fixed-cache", fixed_file),
        ),
        (
            "agent --count 1, nvmlc, file unwritable",
            agent("nvmlc", "--count", "1", "--boot-fixed-cache", os.path.join(work, "no", "f")),
        ),
        ("agent --count 1, pynvml", agent("pynvml", "--count", "1")),
        ("agent.py script --count 1, nvmlc", agent("nvmlc", "--count", "1", script=True)),
        ("agent.py script --count 1, pynvml", agent("pynvml", "--count", "1", script=True)),
    ]
    if before_py:
        variants += [
            ("before: agent --count 1, nvmlc", agent("nvmlc", "--count", "1", py=before_py)),
            ("before: agent --count 1, pynvml", agent("pynvml", "--count", "1", py=before_py)),
        ]
    for _, argv in variants:  # byte code cached, files in the page cache
        cpu_ms(argv)
    got: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in variants}
    for _ in range(runs):
        for name, argv in variants:
            got[name].append(cpu_ms(argv))
    lines = [
        f"python {sys.version.split()[0]}, {runs} runs each (variants interleaved); CPU ms "
        "(user + sys): median [min-max], user/sys medians"
    ]
    for name, _ in variants:
        tot = [u + s for u, s, _ in got[name]]
        codes = sorted({c for _, _, c in got[name]})
        lines.append(
            f"{name:36s} {statistics.median(tot):6.1f} [{min(tot):5.1f}-{max(tot):5.1f}]  "
            f"user {statistics.median([u for u, _, _ in got[name]]):5.1f} "
            f"sys {statistics.median([s for _, s, _ in got[name]]):5.1f}  exit {codes}"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out_dir, "cpu.txt"), "w") as f:
        f.write(text)

    # (c) what the agent imports, through each binding
    for binding in ("nvmlc", "pynvml"):
        argv = agent(binding, "--count", "1")
        argv.insert(3, "-X")
        argv.insert(4, "importtime")
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        with open(os.path.join(out_dir, f"importtime-{binding}.txt"), "w") as f:
            f.write(res.stderr)
    smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
    with open(os.path.join(out_dir, "smi.txt"), "w") as f:
        f.write(smi.stdout)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
