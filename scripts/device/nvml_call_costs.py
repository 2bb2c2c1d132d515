"""What each of the agent's slow NVML calls costs, first call and again, and what the process's
end costs, on a GPU.

    python3 scripts/device/nvml_call_costs.py OUT_DIR [RUNS]

Needs nvidia-ml-py's pynvml in this interpreter (``scripts/device/prepare.sh``): it has every
call measured here, ``nvmlDeviceGetFieldValues`` among them. Each variant runs RUNS times
(default 7, the variants interleaved run by run) as a fresh ``python3 -I -S -c SNIPPET``
child: NVML init (``nvmlInitWithFlags(0)``) and GPU 0's handle, then the variant's calls in
order, each timed with ``time.process_time_ns`` (CPU of the whole process, ms). The parent
reads the child's total CPU from ``os.wait4``'s rusage. Writes into OUT_DIR:

* ``calls.txt``: per variant, each call's CPU (median over the runs; a call made twice shows
  both), and the child's total;
* ``ends.txt``: the child's total CPU for the same reader (init, handle, the six fast fields)
  ending four ways: ``nvmlShutdown`` then a normal exit; a normal exit without it;
  ``os._exit(0)`` after ``nvmlShutdown``; ``os._exit(0)`` without it (``NVML_INIT_FLAG_NO_ATTACH``
  is not among them: after it, ``nvmlDeviceGetHandleByIndex`` fails with Invalid Argument, H100,
  driver 580);
* ``costs.json``: every run's numbers.

Field ids and calls are nvml.h's (``NVML_FI_DEV_POWER_CURRENT_LIMIT`` 190,
``NVML_FI_DEV_ECC_DBE_VOL_TOTAL`` 4, ``NVML_CLOCK_ID_CUSTOMER_BOOST_MAX`` 3).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

PY = sys.executable
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_nvml_ab import FAST_FIELDS  # noqa: E402  # the same six fields as the A/B's floor

HEAD = """
import json, os, sys, time
import pynvml as nv
T = []
def t(name, fn, *a):
    c = time.process_time_ns()
    try:
        r = fn(*a)
        if hasattr(r, "__len__") and len(r) and hasattr(r[0], "fieldId"):
            r = [(v.fieldId, v.nvmlReturn, v.value.ullVal) for v in r]
        ok = "ok " + repr(r)[:80]
    except nv.NVMLError as e:
        ok = str(e)
    T.append((name, (time.process_time_ns() - c) / 1e6, ok))
t("init", nv.nvmlInitWithFlags, FLAGS)
h = nv.nvmlDeviceGetHandleByIndex(0)
"""
FAST = FAST_FIELDS
TAIL = """
sys.stdout.write(json.dumps(T) + "\\n")
sys.stdout.flush()
"""

# (name, python lines after HEAD): each line one timed call
CALLS: dict[str, list[str]] = {
    "max clocks SM, SM again, MEM, MEM again": [
        't("MaxClockInfo SM", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)',
        't("MaxClockInfo SM again", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)',
        't("MaxClockInfo MEM", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)',
        't("MaxClockInfo MEM again", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)',
    ],
    "enforced power limit twice": [
        't("EnforcedPowerLimit", nv.nvmlDeviceGetEnforcedPowerLimit, h)',
        't("EnforcedPowerLimit again", nv.nvmlDeviceGetEnforcedPowerLimit, h)',
    ],
    "ECC total twice": [
        't("TotalEccErrors", nv.nvmlDeviceGetTotalEccErrors, h, 1, 0)',
        't("TotalEccErrors again", nv.nvmlDeviceGetTotalEccErrors, h, 1, 0)',
    ],
    "field values: power limit, ECC, both": [
        't("FieldValues [190]", nv.nvmlDeviceGetFieldValues, h, [190])',
        't("FieldValues [4]", nv.nvmlDeviceGetFieldValues, h, [4])',
        't("FieldValues [190, 4]", nv.nvmlDeviceGetFieldValues, h, [190, 4])',
    ],
    "field values both first": [
        't("FieldValues [190, 4]", nv.nvmlDeviceGetFieldValues, h, [190, 4])',
    ],
    "other max clocks": [
        't("GetClock SM boost max", nv.nvmlDeviceGetClock, h, 1, 3)',
        't("MaxCustomerBoostClock SM", nv.nvmlDeviceGetMaxCustomerBoostClock, h, 1)',
        't("PowerManagementLimit", nv.nvmlDeviceGetPowerManagementLimit, h)',
        't("MaxClockInfo SM", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)',
    ],
    "after the fast fields: the agent's slow calls in its order": [
        *(f't("fast", lambda: ({line}))' for line in FAST.strip().splitlines()),
        't("EnforcedPowerLimit", nv.nvmlDeviceGetEnforcedPowerLimit, h)',
        't("MaxClockInfo SM", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)',
        't("MaxClockInfo MEM", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)',
        't("TotalEccErrors", nv.nvmlDeviceGetTotalEccErrors, h, 1, 0)',
        't("shutdown", nv.nvmlShutdown)',
    ],
}

# (name, init flags, python after the fast fields)
ENDS: list[tuple[str, int, str]] = [
    ("shutdown, exit", 0, "nv.nvmlShutdown()\n"),
    ("no shutdown, exit", 0, ""),
    ("shutdown, os._exit", 0, "nv.nvmlShutdown()\nos._exit(0)\n"),
    ("no shutdown, os._exit", 0, "os._exit(0)\n"),
]


def run(snippet: str) -> tuple[float, str]:
    """One child: (CPU user + sys in ms from wait4's rusage, its stdout)."""
    p = subprocess.Popen([PY, "-I", "-S", "-c", snippet], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode}): {snippet}")
    return (ru.ru_utime + ru.ru_stime) * 1000, out


def main() -> int:
    out_dir = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    os.makedirs(out_dir, exist_ok=True)
    import pynvml

    where = os.path.dirname(pynvml.__file__)
    path = f"import sys; sys.path.insert(0, {where!r})\n"
    calls: dict[str, list[tuple[float, list[list[object]]]]] = {k: [] for k in CALLS}
    ends: dict[str, list[float]] = {k: [] for k, _, _ in ENDS}
    run(path + HEAD.replace("FLAGS", "0") + TAIL)  # byte code and page cache warm
    for _ in range(runs):
        for name, lines in CALLS.items():
            snippet = path + HEAD.replace("FLAGS", "0") + "\n".join(lines) + "\n" + TAIL
            total, out = run(snippet)
            calls[name].append((total, json.loads(out)))
        for name, flags, end in ENDS:
            snippet = path + HEAD.replace("FLAGS", str(flags)) + FAST + end
            ends[name].append(run(snippet)[0])
    with open(os.path.join(out_dir, "costs.json"), "w") as f:
        json.dump({"calls": calls, "ends": ends, "runs": runs}, f, indent=1)

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):6.2f} [{min(xs):6.2f}-{max(xs):6.2f}]"

    with open(os.path.join(out_dir, "calls.txt"), "w") as f:
        f.write(f"CPU ms, median [range] over {runs} fresh processes (process_time_ns per call)\n")
        for name, rs in calls.items():
            f.write(f"\n{name}: child total {med([r[0] for r in rs])}\n")
            for i, (call, _, ok) in enumerate(rs[0][1]):
                f.write(f"  {call:32s} {med([float(r[1][i][1]) for r in rs])}  {ok}\n")
    with open(os.path.join(out_dir, "ends.txt"), "w") as f:
        f.write(f"init + handle + 6 fast fields, child total CPU ms (wait4), {runs} runs\n")
        for name, xs in ends.items():
            f.write(f"  {name:34s} {med(xs)}\n")
    for name in ("calls.txt", "ends.txt"):
        with open(os.path.join(out_dir, name)) as f:
            print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
