"""Saved stacks and Flight Recorder analyses of a hung job: which rank is not where the others are.

Two inputs. PyTorch's Flight Recorder analyser's output (``fr_trace``/``torchfrtrace``, every
version's blocks and its ``-j`` table, as :mod:`console.stacks.frtrace` reads them): ranks that
never joined a collective the others entered hold them (``stuck_rank``), ranks that called a
different collective at one sequence number are out of step (``collective_mismatch``). And
``py-spy dump`` text (py-spy's ``src/dump.rs``: ``Process N: cmd``, ``Thread N (idle):
"MainThread"`` and one ``    func (file:line)`` line per frame, innermost first), one process or
many, as :mod:`console.stacks.pyspy_text` reads it (also folded by hand and with ``[rankN]:``
prefixes). The reading is ``gpuconsole stacks``' own (:func:`console.stacks.analysis.analyse`):
the main threads grouped by their frames, the collectives of ``torch.distributed``
(``distributed_c10d.py``) that ranks wait in until every rank of the group calls them too.

Cause ids:

- ``stuck_rank``: some processes are not in the collective the others wait in (they hold it),
  or elsewhere than a majority;
- ``collective_mismatch``: groups wait in different collectives (the ranks called collectives
  in different orders: none completes);
- ``collective_wait``: every process read waits in the same collective at the same place (the
  collective itself is stuck: the network, NCCL, or a rank that was not dumped);
- ``process_stack``: stacks that show no collective to compare with (one process): where it is.
"""

from __future__ import annotations

import re

from console.diagnosis.model import CauseKind, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag
from console.stacks.analysis import Analysis, StackGroup, analyse
from console.stacks.model import ProcessStack
from console.stacks.pyspy_text import looks_like_pyspy, parse_pyspy_text

__all__ = ["RULES"]

_KIND: dict[str, CauseKind] = {
    "outside_collective": "stuck_rank",
    "elsewhere": "stuck_rank",
    "mismatch": "collective_mismatch",
    "all_in_collective": "collective_wait",
}


def _evidence(groups: list[StackGroup], limit: int = 6) -> list[str]:
    out = []
    for g in groups:
        head = g.frames[0].where() if g.frames else g.where
        out.append(f"{g.title()}")
        out.append(head)
    return out[: limit * 2]


def _ranks(processes: tuple[ProcessStack, ...]) -> tuple[int, ...]:
    return tuple(sorted({p.rank for p in processes if p.rank is not None}))


def _group_of(a: Analysis, processes: tuple[ProcessStack, ...]) -> StackGroup | None:
    return next((g for g in a.groups if set(g.processes) & set(processes)), None)


def _where(g: StackGroup | None) -> str | None:
    """The group's key frame as the stack prints it (``fn (file:line)``)."""
    if g is None or not g.frames:
        return None
    return g.where.removeprefix("in ").split(" <- ", 1)[0]


def _pyspy(ctx: Context) -> list[Diagnosis]:
    """The reading of a py-spy dump in the text, if it holds one (read from the normalised
    lines: a collector's prefixes are gone, a ``[rankN]:`` prefix is kept)."""
    text = "\n".join(ln.raw for ln in ctx.lines)
    if not looks_like_pyspy(text):
        return []
    capture = parse_pyspy_text(text)
    a = analyse(capture)
    if not a.groups:
        return []
    main = a.groups[-1]
    if not a.findings:
        if main.collective is not None:
            return []  # one process in a collective: no cause without its peers
        facts: dict[str, FactValue | None] = {"where": _where(main)}
        return [
            _diag(
                "process_stack",
                f"{main.title()} (no collective to compare with: dump every rank to see "
                "which one the others wait for)",
                _ranks(main.processes),
                "dump every rank at once (`gpuconsole stacks JOB`, or `py-spy dump --pid` for "
                "each rank) and compare where each one is",
                _evidence([main]),
                facts,
            )
        ]
    first = a.findings[0]
    kind = _KIND.get(first.kind)
    if kind is None:
        return []
    blamed = _group_of(a, first.processes) if first.processes else None
    facts = {"where": _where(blamed)}
    if kind == "collective_mismatch" and blamed is not None:
        facts = {"collective": main.collective, "other_collective": blamed.collective}
    elif kind == "stuck_rank":
        waiting = next((g.collective for g in a.groups if g.collective), None)
        facts["collective"] = waiting
        pids = tuple(sorted(p.pid for p in first.processes if p.pid >= 0))
        if pids and len(pids) == len(first.processes):
            facts["pids"] = pids
    elif kind == "collective_wait":
        facts = {"collective": main.collective, "where": _where(main)}
    fixes = {
        "stuck_rank": "look at what that rank does there (its data loading, I/O, a branch "
        "the others did not take): the ranks that wait in the collective only wait for it",
        "collective_mismatch": "make every rank call the same collectives in the same order "
        "(a collective under a rank-dependent branch, or hooks that fire on some ranks only)",
        "collective_wait": "every rank is in the collective: check the network and NCCL "
        "(NCCL_DEBUG=INFO, a rank or node not dumped here), or take the Flight Recorder's view",
    }
    return [
        _diag(
            kind,
            first.text,
            _ranks(first.processes),
            fixes[kind],
            _evidence(a.groups),
            facts,
        )
    ]


def _fr_trace(ctx: Context) -> list[Diagnosis]:
    """The first verdict of PyTorch's Flight Recorder analyser in the text, if it holds one."""
    from console.stacks.frtrace import FrTraceFinding, looks_like_fr_trace, parse_fr_trace

    text = "\n".join(ln.raw for ln in ctx.lines)
    if not looks_like_fr_trace(text):
        return []
    found: list[FrTraceFinding] = [
        f for f in parse_fr_trace(text) if f.kind in ("not_joined", "mismatch")
    ]
    if not found:
        return []
    f = found[0]
    op = f.op.split(":", 1)[-1] if f.op else None
    evidence = [f.text] + [v for v in (f.group and f"group info: {f.group}",) if v]
    if f.kind == "not_joined":
        facts: dict[str, FactValue | None] = {
            "collective": op,
            "seq": f.seq,
            "group": f.group,
            "where": f.where,
        }
        return [
            _diag(
                "stuck_rank",
                f"PyTorch's Flight Recorder analyser: {f.line()}",
                f.missing,
                "look at what those ranks do instead of that collective (their data loading, "
                "I/O, a branch the others did not take): the ranks in it only wait for them "
                "(`gpuconsole stacks JOB` shows where each rank is)",
                evidence,
                facts,
            )
        ]
    other = None
    for _, detail in f.culprits:
        m = re.search(r"found collective type: '(\w+)'", detail) or re.search(
            r"^\w+: Type '\w+' and '(\w+)' do not match", detail
        )
        if m:
            other = m.group(1)
            break
    return [
        _diag(
            "collective_mismatch",
            f"PyTorch's Flight Recorder analyser: {f.line()}",
            tuple(sorted(r for r, _ in f.culprits)),
            "make every rank call the same collectives in the same order with the same "
            "sizes (a collective under a rank-dependent branch, or hooks that fire on some "
            "ranks only)",
            evidence,
            {"collective": op, "other_collective": other, "seq": f.seq, "group": f.group},
        )
    ]


_WHO = r"(?:ranks? \d+(?:(?:, |-)\d+)*|\d+ processes(?: \([^)]*\))?|process \d+)"
_CAUSE = re.compile(r"^likely cause: (?P<text>.+)$", re.M)
_OUTSIDE = re.compile(
    rf"^(?P<who>{_WHO}) (?:is|are) not in the collective \((?P<coll>\w+)\) that .+? waits? "
    r"in: in (?P<where>.+)$"
)
_MISMATCH = re.compile(
    rf"^mismatched collectives: (?P<who>{_WHO}) (?:is|are) in (?P<c1>\w+) while .+? (?:is|are) "
    r"in (?P<c2>\w+)"
)
_ALL_IN = re.compile(r"^every (?:rank|process) read \((?P<r>[^)]*)\) is in (?P<coll>\w+)")
_ELSEWHERE = re.compile(rf"^(?P<who>{_WHO}) (?:is|are) elsewhere than .+?: in (?P<where>.+)$")
_NEVER_JOINED = re.compile(
    rf"^\s*(?P<who>{_WHO}) never joined collective (?P<seq>\d+) of process group "
    r"(?P<group>\S+) \((?P<op>\w+)"
)


def _ranks_in(who: str) -> tuple[int, ...]:
    """``rank 1`` / ``ranks 0, 2-3`` as ranks; ``()`` for processes by pid."""
    if not who.startswith("rank"):
        return ()
    out: list[int] = []
    for part in who.split(" ", 1)[1].split(","):
        a, _, b = part.strip().partition("-")
        out += range(int(a), int(b) + 1) if b else [int(a)]
    return tuple(out)


def _stacks_text(ctx: Context) -> list[Diagnosis]:
    """``gpuconsole stacks`` output as saved (``stacks JOB > file``, the app's stacks view):
    its own first ``likely cause`` line, or for a job that ended the Flight Recorder's
    ``never joined`` line, read back into the cause it names."""
    text = "\n".join(ln.raw for ln in ctx.lines)
    if not re.search(r"^job \S+: (?:\d+ ranks? on \d+ nodes?, taken|no rank runs)", text, re.M):
        return []
    cause = _CAUSE.search(text)
    said = cause.group("text") if cause else ""
    evidence = [cause.group(0)] if cause else []
    fix_stuck = (
        "look at what that rank does there (its data loading, I/O, a branch the others did not "
        "take): the ranks that wait in the collective only wait for it"
    )
    if (m := _OUTSIDE.match(said)) or (m := _ELSEWHERE.match(said)):
        where = m.group("where").split(" <- ", 1)[0]
        facts: dict[str, FactValue | None] = {
            "collective": m.groupdict().get("coll"),
            "where": where,
        }
        return [_diag("stuck_rank", said, _ranks_in(m.group("who")), fix_stuck, evidence, facts)]
    if (m := _MISMATCH.match(said)) is not None:
        return [
            _diag(
                "collective_mismatch",
                said,
                _ranks_in(m.group("who")),
                "make every rank call the same collectives in the same order (a collective under "
                "a rank-dependent branch, or hooks that fire on some ranks only)",
                evidence,
                {"collective": m.group("c2"), "other_collective": m.group("c1")},
            )
        ]
    if (m := _ALL_IN.match(said)) is not None:
        return [
            _diag(
                "collective_wait",
                said,
                _ranks_in("ranks " + m.group("r")) if m.group("r")[:1].isdigit() else (),
                "every rank is in the collective: check the network and NCCL (NCCL_DEBUG=INFO), "
                "or take the Flight Recorder's view",
                evidence,
                {"collective": m.group("coll")},
            )
        ]
    for line in text.splitlines():
        if (j := _NEVER_JOINED.match(line)) is not None:
            facts = {
                "collective": j.group("op"),
                "seq": int(j.group("seq")),
                "group": j.group("group"),
            }
            return [
                _diag(
                    "stuck_rank",
                    line.strip(),
                    _ranks_in(j.group("who")),
                    fix_stuck,
                    [line.strip()],
                    facts,
                )
            ]
    return []


#: The rules of this module (the engine ranks what they find).
RULES = (_stacks_text, _fr_trace, _pyspy)

#: py-spy's thread header and frame lines, and the lines of a pasted dump around them; the
#: analyser's head lines (every version's) and its ``-j`` table's cells, with the fields
#: after them. Each rule reads these lines alone (not the failure words' lines).
NEEDS = {
    # a block's lines may lie far apart in a log (other processes' lines between them)
    _stacks_text: Needs(("likely cause:", "no rank runs"), before=300, after=2500, alone=True),
    _pyspy: Needs(("thread ",), before=8, after=200, alone=True),
    _fr_trace: Needs(
        ("not all ranks joining", "has errors", "errors for group", "at entry", "input_sizes="),
        before=150,
        after=2500,
        alone=True,
    ),
}
