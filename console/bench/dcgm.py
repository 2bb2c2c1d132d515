"""``dcgmi diag -r 1|2`` (NVIDIA DCGM's diagnostic) read into a :class:`DcgmVerdict`.

dcgmi prints a table, one test per row, its result in the second column (DCGM 2.x and 3.x,
https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html)::

    |-----  Deployment  --------+------------------------------------------------|
    | Denylist                  | Pass                                           |
    | Environment Variables     | Pass                                           |
    | PCIe                      | Fail - All                                     |
    | Warning                   | GPU 0 ...                                      |

A test that fails gives ``Fail`` (``Fail - All``, ``Fail - GPU: 0``), one with a warning
``Warn``; the lines under it (``| Warning | ...``, ``| Info | ...``) say why. The run level is
``-r 1`` (quick, seconds) or ``-r 2`` (medium, ~2 minutes).
"""

from __future__ import annotations

import re

from console.bench.model import DcgmVerdict

_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*([^|]*?)\s*\|\s*$")
_DETAIL_ROWS = ("warning", "info", "error")


def parse_diag(host: str, level: int, stdout: str, stderr: str, status: int) -> DcgmVerdict:
    """The verdict of one ``dcgmi diag -r LEVEL`` run from its output and exit status: ``fail``
    when a test failed, ``warn`` when one warned, ``pass`` when tests ran and passed, else
    ``error`` with dcgmi's own words (the host engine not running, no permission)."""
    failed: list[str] = []
    warned: list[str] = []
    details: list[str] = []
    passed = 0
    last = ""
    for line in stdout.splitlines():
        m = _ROW.match(line.strip())
        if not m:
            continue
        name, result = m.group(1), m.group(2)
        low = result.lower()
        if name.lower() in _DETAIL_ROWS:
            if result and last:
                details.append(f"{last}: {result}")
            continue
        if low.startswith("fail"):
            failed.append(name)
            last = name
        elif low.startswith("warn"):
            warned.append(name)
            last = name
        elif low.startswith("pass"):
            passed += 1
            last = ""
        else:
            last = ""
    if failed:
        return DcgmVerdict(host, level, "fail", tuple(failed + warned), "; ".join(details))
    if warned:
        return DcgmVerdict(host, level, "warn", tuple(warned), "; ".join(details))
    if passed and status == 0:
        return DcgmVerdict(host, level, "pass")
    said = (stderr.strip() or stdout.strip()).splitlines()
    why = said[-1][:300] if said else f"exit status {status}, no result"
    return DcgmVerdict(host, level, "error", (), f"dcgmi diag -r {level}: {why}")
