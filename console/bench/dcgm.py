"""``dcgmi diag -r 1|2`` (NVIDIA DCGM's diagnostic) read into a :class:`DcgmVerdict`.

dcgmi prints a two-column table, one test per row, its result in the second column
(https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html). The layout
moved between releases; all of these are read (real samples: ``tests/data/dcgm/``):

- Section rules (``|-----  Deployment  ---+---|``, ``+-----  Hardware  ---+---+``) and, from
  3.1, a ``Metadata`` section (``DCGM Version``, ``GPU Device IDs Detected``: one id per GPU).
- 2.x and 3.x results: ``Pass``, ``Fail``, ``Warn``, ``Skip`` (4.x also ``Not Run``), each
  with ``- All``, ``- GPU: 1`` or ``- GPUs: 0, 2, 3``; a test whose GPUs differ takes two
  rows, the second with an empty name column (``Pass - GPUs: 0, 2, 3`` then ``Fail - GPU: 1``).
- 4.x results: the test's own result (``| pcie | Fail |``), then one row per GPU with an empty
  name column (``|  | GPU0: Pass |``). The test's row decides: a test can fail on a check of
  no one GPU while every GPU row says ``Pass``, and a test that warns shows its GPUs as
  ``GPU0: Fail``.
- Detail rows under a test: ``Warning`` (why a test failed or warned; 4.x: ``Warning: GPU0``),
  ``Error`` (why a deployment check failed; also alone, before any test), ``Info`` (said of
  passing tests too: never a failure). Their text is cut into rows of the column's width,
  mid-word; the rows are joined back without adding spaces.

Lines outside the table (a shell prompt, ``Successfully ran diagnostic for group.``, a
wrapper's own lines) are skipped. When no test row is found, dcgmi could not run: its
``Error:`` lines say why (the host engine not running, the plugins missing). The run level is
``-r 1`` (quick, seconds) or ``-r 2`` (medium, about 2 minutes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from console.bench.model import DcgmOutcome, DcgmVerdict

#: A table row: two cells between bars.
_ROW = re.compile(r"^\s*\|([^|]*)\|([^|]*)\|\s*$")
#: A section rule or border (``|-----  Hardware  ---+...|``, ``+====+====+``).
_RULE = re.compile(r"^\s*[|+][-=]{3,}")
#: ``Fail - GPU: 1``, ``Pass - GPUs: 0, 2, 3``, ``Skip - All``, ``Pass``.
_RESULT = re.compile(r"^(Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(All|GPUs?:\s*([\d,\s]+)))?", re.I)
#: 4.x: ``GPU0: Pass``.
_PER_GPU = re.compile(r"^GPU\s*(\d+)\s*:\s*(Pass|Fail|Warn|Skip|Not Run)\b", re.I)
#: A GPU named in a detail's text (``GPU 1 Max power ...``, ``for GPU 0 is disabled``).
_GPU_IN_TEXT = re.compile(r"\bGPU\s?(\d+)\b")
_DETAIL_NAMES = ("warning", "error", "info")
_RANK = {"pass": 0, "skip": 0, "not run": 0, "warn": 1, "fail": 2}


@dataclass
class _Test:
    name: str
    status: str  # pass, fail, warn, skip, not run: the worst of the test's own rows
    gpus: set[int] = field(default_factory=set)  # GPUs its rows or details name as failing
    all_gpus: bool = False  # ``Fail - All``
    details: list[str] = field(default_factory=list)


@dataclass
class _Detail:
    kind: str  # warning, error, info
    test: _Test | None
    chunks: list[str] = field(default_factory=list)

    def text(self) -> str:
        return " ".join("".join(self.chunks).split())


def _chunk(cell: str) -> str:
    """A detail row's text as dcgmi cut it: the cell less its padding, one space on the left
    and two on the right (the column is 48 wide, the text 45); a row that starts or ends
    with a space of its own keeps it, so the rows join back into the words they split."""
    body = cell[1:] if cell.startswith(" ") else cell
    return body[:-2] if body.endswith("  ") else body.removesuffix(" ")


def _gpu_list(text: str | None) -> set[int]:
    return {int(x) for x in re.findall(r"\d+", text or "")}


def parse_diag(host: str, level: int, stdout: str, stderr: str, status: int) -> DcgmVerdict:
    """The verdict of one ``dcgmi diag -r LEVEL`` run from its output and exit status.

    ``fail`` when a test (or a deployment check) failed, ``warn`` when one warned, ``pass``
    when tests ran and none failed or warned (skipped tests are no failure) and dcgmi exited
    0; else ``error`` with dcgmi's own ``Error:`` lines. The verdict names the failed and
    warned tests as dcgmi does, the skipped ones, the GPUs said to fail (``Fail - All``: every
    GPU of the ``Metadata`` section), and the ``Warning``/``Error`` text of the failures.
    """
    tests: list[_Test] = []
    details: list[_Detail] = []
    section = ""
    gpu_count: int | None = None
    current: _Test | None = None
    last_detail: _Detail | None = None
    for line in stdout.splitlines():
        rule = _RULE.match(line)
        if rule:
            words = re.sub(r"[-=+|]", " ", line).split()
            if words:
                section = words[0].lower()
            last_detail = None
            continue
        m = _ROW.match(line)
        if not m:
            continue
        name, cell = m.group(1).strip(), m.group(2)
        result = cell.strip()
        if name.lower() == "diagnostic" and result.lower() == "result":
            continue  # the header
        if section == "metadata":
            if name.lower().startswith("gpu device ids"):
                gpu_count = len([x for x in result.split(",") if x.strip()])
            continue
        low = name.lower()
        if low.split(":")[0] in _DETAIL_NAMES:
            last_detail = _Detail(low.split(":")[0], current, [_chunk(cell)])
            details.append(last_detail)
            for g in _gpu_list(name.partition(":")[2]):  # 4.x ``Warning: GPU0``
                last_detail.chunks.insert(0, f"GPU {g} ")
            continue
        if name:
            r = _RESULT.match(result)
            if not r:
                current, last_detail = None, None
                continue
            current = _Test(name, r.group(1).lower())
            _take_gpus(current, r)
            tests.append(current)
            last_detail = None
            continue
        # an empty name column: a detail's next row, or the test's next result row
        if last_detail is not None and not (_RESULT.match(result) or _PER_GPU.match(result)):
            last_detail.chunks.append(_chunk(cell))
            continue
        last_detail = None
        if current is None:
            continue
        r = _RESULT.match(result)
        if r:  # 2.x/3.x: the test's GPUs split over rows
            if _RANK[r.group(1).lower()] > _RANK[current.status]:
                current.status = r.group(1).lower()
            _take_gpus(current, r)
            continue
        per = _PER_GPU.match(result)
        if per and per.group(2).lower() in ("fail", "warn"):  # 4.x: the test's row decides
            current.gpus.add(int(per.group(1)))
    return _verdict(host, level, stdout, stderr, status, tests, details, gpu_count)


def _take_gpus(test: _Test, r: re.Match[str]) -> None:
    """The GPUs a ``Fail``/``Warn`` result row names (``- All``, ``- GPU: 1``)."""
    if r.group(1).lower() not in ("fail", "warn"):
        return
    if (r.group(2) or "").lower() == "all":
        test.all_gpus = True
    else:
        test.gpus |= _gpu_list(r.group(3))


def _verdict(
    host: str,
    level: int,
    stdout: str,
    stderr: str,
    status: int,
    tests: list[_Test],
    details: list[_Detail],
    gpu_count: int | None,
) -> DcgmVerdict:
    failing = [t for t in tests if t.status in ("fail", "warn")]
    loose_errors = [d for d in details if d.kind == "error" and d.test is None]
    gpus: set[int] = set()
    texts: list[str] = []
    for d in details:
        if d.kind == "info" or (d.test is not None and d.test not in failing):
            continue
        text = d.text()
        gpus |= {int(x) for x in _GPU_IN_TEXT.findall(text)}
        texts.append(f"{d.test.name}: {text}" if d.test is not None else text)
    for t in failing:
        gpus |= t.gpus
        if t.all_gpus and gpu_count:
            gpus |= set(range(gpu_count))
    names = list(dict.fromkeys(t.name for t in tests if t.status == "fail"))
    warned = list(dict.fromkeys(t.name for t in tests if t.status == "warn"))
    skipped = list(dict.fromkeys(t.name for t in tests if t.status in ("skip", "not run")))
    detail = "; ".join(dict.fromkeys(texts))
    outcome: DcgmOutcome
    if names or loose_errors:
        outcome = "fail"
    elif warned:
        outcome = "warn"
    elif tests and status == 0:
        outcome = "pass"
    else:
        said = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip()]
        errors = [ln for ln in said if ln.lower().startswith("error")]
        why = "; ".join(errors or said[-1:])[:400] or f"exit status {status}, no result"
        return DcgmVerdict(host, level, "error", detail=f"dcgmi diag -r {level}: {why}")
    return DcgmVerdict(
        host,
        level,
        outcome,
        failed=tuple(names),
        detail=detail,
        warned=tuple(warned),
        skipped=tuple(skipped),
        gpus=tuple(sorted(gpus)),
    )
