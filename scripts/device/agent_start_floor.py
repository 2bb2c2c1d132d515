"""Where the agent's start-up CPU goes, as a floor: each step alone in a fresh process.

    python3 scripts/device/agent_start_floor.py PYNVML_DIR [RUNS]

Runs each variant RUNS times (default 7) as a child of this script and reads the child's
CPU (user + sys) from ``os.wait4``'s rusage; prints one line per variant with the median and
the range, in ms. Variants: the bare interpreter (``-I -S``), the agent's top-level imports,
``import pynvml`` (nvidia-ml-py, from PYNVML_DIR as the console ships it), NVML init with
ctypes alone and with pynvml, init + one GPU's handle + the fast fields through each, the
kernel-log tools the agent runs (``journalctl``, ``dmesg``), and the agent's own
``--count 1``. Used on the device machine (NVML, one or more GPUs); see
tests/data/device/agent-start-floor-*/README.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys

PY = sys.executable

# the same NVML calls through ctypes alone (nvml.h: nvmlInitWithFlags, nvmlDeviceGetCount_v2,
# nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMemoryInfo, nvmlDeviceGetUtilizationRates,
# nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage, nvmlDeviceGetClockInfo, nvmlShutdown)
CTYPES_INIT = """
import ctypes
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInitWithFlags(0) == 0
"""
CTYPES_FIELDS = (
    CTYPES_INIT
    + """
n = ctypes.c_uint()
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
mem = (ctypes.c_ulonglong * 3)()
util = (ctypes.c_uint * 2)()
v = ctypes.c_uint()
assert lib.nvmlDeviceGetMemoryInfo(h, mem) == 0
assert lib.nvmlDeviceGetUtilizationRates(h, util) == 0
assert lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(v)) == 0
assert lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(v)) == 0
assert lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(v)) == 0
assert lib.nvmlDeviceGetClockInfo(h, 2, ctypes.byref(v)) == 0
lib.nvmlShutdown()
"""
)
PYNVML_INIT = """
import sys
sys.path.insert(0, sys.argv[1])
import pynvml
pynvml.nvmlInitWithFlags(0)
"""
PYNVML_FIELDS = (
    PYNVML_INIT
    + """
pynvml.nvmlDeviceGetCount()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceGetMemoryInfo(h)
pynvml.nvmlDeviceGetUtilizationRates(h)
pynvml.nvmlDeviceGetTemperature(h, 0)
pynvml.nvmlDeviceGetPowerUsage(h)
pynvml.nvmlDeviceGetClockInfo(h, 1)
pynvml.nvmlDeviceGetClockInfo(h, 2)
pynvml.nvmlShutdown()
"""
)


def cpu_ms(argv: list[str]) -> tuple[float, float, int]:
    """(user ms, sys ms, exit status) of one run of ``argv``."""
    p = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return 1000 * ru.ru_utime, 1000 * ru.ru_stime, p.returncode


def main() -> int:
    pdir = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    agent = os.path.join(os.path.dirname(__file__), "..", "..", "remote", "agent", "agent.py")
    variants: list[tuple[str, list[str]]] = [
        ("interpreter -I -S", [PY, "-I", "-S", "-c", "pass"]),
        (
            "agent's top-level imports",
            [PY, "-I", "-S", "-c", "import json, math, os, sys, threading, time"],
        ),
        (
            "import pynvml",
            [
                PY,
                "-I",
                "-S",
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import pynvml",
                pdir,
            ],
        ),
        ("import ctypes", [PY, "-I", "-S", "-c", "import ctypes"]),
        ("ctypes: NVML init", [PY, "-I", "-S", "-c", CTYPES_INIT]),
        ("pynvml: NVML init", [PY, "-I", "-S", "-c", PYNVML_INIT, pdir]),
        ("ctypes: init + handle + 6 fields", [PY, "-I", "-S", "-c", CTYPES_FIELDS]),
        ("pynvml: init + handle + 6 fields", [PY, "-I", "-S", "-c", PYNVML_FIELDS, pdir]),
    ]
    for tool in (["journalctl", "-k", "-n", "1", "--no-pager"], ["dmesg"]):
        if shutil.which(tool[0]):
            variants.append((" ".join(tool), tool))
    variants.append(
        (
            "agent --count 1",
            [PY, "-I", "-S", agent, "--pynvml-dir", pdir, "--count", "1", "--no-stdin-watch"],
        )
    )
    print(
        f"python {sys.version.split()[0]}, {runs} runs each; CPU ms (user + sys): "
        "median [min-max], user/sys medians"
    )
    for name, argv in variants:
        got = [cpu_ms(argv) for _ in range(runs)]
        tot = [u + s for u, s, _ in got]
        codes = sorted({c for _, _, c in got})
        print(
            f"{name:36s} {statistics.median(tot):6.1f} [{min(tot):5.1f}-{max(tot):5.1f}]  "
            f"user {statistics.median([u for u, _, _ in got]):5.1f} "
            f"sys {statistics.median([s for _, s, _ in got]):5.1f}  exit {codes}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
