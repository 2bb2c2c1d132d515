"""PyTorch's own Flight Recorder analyser (``torch.distributed.flight_recorder.fr_trace``,
also installed as ``torchfrtrace``): what it needs (every rank's dump in one folder) and what
it says, read into typed findings.

``fr_trace`` merges the ranks' ring buffers collective by collective (its ``builder.py``
``build_collectives``) and logs, for the first collectives where ranks disagree
(``utils.py`` ``error_analysis``; ``types.py`` ``EntryState.log``), one block each::

    Not all ranks joining collective, sequence number: 4
    internal record id: 3
    group info: 0:default_pg
    collective: gloo:all_reduce
    missing ranks: {1}
    input sizes: [[8]]
    output sizes: [[8]]
    world size: 2
    expected ranks: {0, 1}
    collective state: scheduled
    collective stack trace:
     all_reduce at /opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3245
    <module> at /w/mm.py:9

Other heads: ``Collective sequence number: N has errors`` (with ``error msg: Culprit rank R;
Error type: COLLECTIVE_TYPE_MISMATCH, ...``: ``types.py`` ``MatchInfo``), ``Input/output
mismatch in the collective sequence number: N`` (all_to_all sizes), ``We cannot decide what's
wrong with this collective entry because we missed FR dumps from ranks ({..})``, ``No errors
found for this collective entry``, ``Too many mismatches for process_group ...``. Nothing at
all when every collective matched. Each rank's ``Culprit rank`` is a rank whose entry differs
from the first rank's entry at that sequence number (the analyser's own caveat: the first
rank may be the odd one).

gloo dumps (PyTorch 2.13) leave the process group's name empty in ``pg_config`` while their
entries name it (``'0'``), and ``fr_trace`` then fails on a ``KeyError``: :func:`dump_files`
fills the name in from the entries where a dump records exactly one group.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from console.stacks.analysis import who

#: the analyser, as ``python -m`` runs it (PyTorch 2.6 on; 2.5 had ``tools/flight_recorder``)
MODULE = "torch.distributed.flight_recorder.fr_trace"
#: file names of the dumps handed to it: this prefix and the global rank
PREFIX = "gpuconsole_fr_rank_"
#: a dump larger than this is not handed over (the node script's ``FR_RAW_MAX`` too)
DUMP_MAX = 32 << 20

FindingKind = Literal[
    "not_joined", "mismatch", "size_mismatch", "dumps_missing", "no_error", "too_many", "other"
]
"""What one block of ``fr_trace`` says: ``not_joined`` (some ranks of the group never called
the collective), ``mismatch`` (ranks called different collectives, sizes, dtypes or states at
one sequence number), ``size_mismatch`` (all_to_all input/output totals differ),
``dumps_missing`` (no verdict: some ranks' dumps were not given), ``no_error`` (the collective
matched on every rank), ``too_many`` (the analyser stopped at its mismatch cap), ``other``."""

_SET = r"\{[^}]*\}"
#: each version's head lines (named groups: ``seq``, ``group``, ``op``, ``missing``,
#: ``errors``): 2.6 on; main between 2.5 and 2.6 (``... at entry N``, then ``collective:
#: sequence number:``); 2.5 and the first ``tools/flight_recorder`` (one line per block)
_HEADS: tuple[tuple[re.Pattern[str], FindingKind], ...] = (
    (
        re.compile(r"^Not all ranks joining collective[,:]? sequence number: (?P<seq>-?\d+)"),
        "not_joined",
    ),
    (re.compile(r"^Not all ranks joining collective (?P<seq>-?\d+) at entry \d+"), "not_joined"),
    (
        re.compile(
            r"^Not all ranks joining collective for group (?P<group>\S+) collective "
            rf"(?P<op>\S+)\s+Missing ranks are (?P<missing>{_SET})"
        ),
        "not_joined",
    ),
    (re.compile(r"^Collective sequence number: (?P<seq>-?\d+) has errors"), "mismatch"),
    (re.compile(r"^Collective (?P<seq>-?\d+) at entry \d+ errors"), "mismatch"),
    (
        re.compile(
            r"^Collective (?:\d+ )?errors for group (?P<group>\S+) collective (?P<op>\S+)"
            r"(?:.*?Found errors: (?P<errors>.*))?"
        ),
        "mismatch",
    ),
    (
        re.compile(
            r"^Input/output mismatch in the collective (?:sequence number: )?(?P<seq>-?\d+)"
        ),
        "size_mismatch",
    ),
    (
        re.compile(
            r"^Input/output mismatch in the collective (?:\d+ +)?for group (?P<group>\S+) "
            r"collective (?P<op>\S+)"
        ),
        "size_mismatch",
    ),
    (re.compile(r"^We cannot decide what's wrong with this collective entry"), "dumps_missing"),
    (re.compile(r"^No errors found for this collective entry"), "no_error"),
    (re.compile(r"^Too many mismatches for process_group (?P<group>[^:,]*)"), "too_many"),
)
#: what a launcher puts before each line (torchrun's ``[rank0]:``, ``[default0]:``)
_LOG_PREFIX = re.compile(r"^\s*\[(?:rank|default)?\d+\]:?\s?")
_FIELD = re.compile(r"^([A-Za-z][a-z /]+): ?(.*)$")
_FRAME = re.compile(r"^\s*(\S.*?) at (\S.*?):(\d+)\s*$")
_CULPRIT = re.compile(r"Culprit rank (\d+); Error type: (\w+)(?:, (.*?))?(?=, Culprit rank |$)")
#: 2.5's ``Found errors: Error rank r, Error type: X, Detail finding d``
_ERROR_RANK = re.compile(
    r"Error rank (\d+), Error type: (\w+)(?:, Detail finding (.*?))?(?=,? Error rank |$)"
)


@dataclass(frozen=True)
class FrTraceFinding:
    """One block of ``fr_trace``'s output.

    Attributes:
        kind: see :data:`FindingKind`.
        seq: the collective's sequence number in its process group.
        group: ``group info`` (``<pg id>:<pg description>``, e.g. ``0:default_pg``).
        op: ``collective`` (``<backend>:<op>``, e.g. ``nccl:all_reduce``).
        state: ``collective state`` (``scheduled``, ``started``, ``completed``).
        expected: ``expected ranks`` (the group's members).
        missing: ``missing ranks`` (never called it), or for ``dumps_missing`` the ranks whose
            dumps were not given.
        culprits: rank -> what differs (``Error type: X, detail``) for ``mismatch``.
        sizes: ``input sizes`` as printed (``[[1024]]``).
        where: the innermost frame of ``collective stack trace`` outside torch
            (``<func> (file:line)``), ``None`` if none.
        text: the head line as printed.
    """

    kind: FindingKind
    seq: int | None = None
    group: str | None = None
    op: str | None = None
    state: str | None = None
    expected: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    culprits: tuple[tuple[int, str], ...] = ()
    sizes: str | None = None
    where: str | None = None
    text: str = ""

    def line(self) -> str:
        """One line a person reads."""
        at = f"collective {self.seq}" if self.seq is not None else "a collective"
        if self.group:
            at += f" of process group {self.group}"
        op = self.op.split(":", 1)[-1] if self.op else None
        what = f" ({op}{', ' + self.state if self.state else ''})" if op else ""
        called = f"; called at {self.where}" if self.where else ""
        if self.kind == "not_joined":
            joined = [r for r in self.expected if r not in self.missing]
            them = f", which {who(joined)} entered" if joined else ""
            return f"{who(list(self.missing))} never joined {at}{what}{them}{called}"
        if self.kind == "mismatch":
            odd = sorted(r for r, _ in self.culprits)
            ref = [r for r in self.expected if r not in odd and r not in self.missing]
            by: dict[str, list[int]] = {}
            for r, d in self.culprits:
                by.setdefault(d, []).append(r)
            said = "; ".join(_mismatch_words(d, sorted(rs), ref) for d, rs in sorted(by.items()))
            state = f" ({self.state})" if self.state else ""
            return f"{said or who(odd) + ' differ'}, at {at}{state}{called}"
        if self.kind == "size_mismatch":
            return f"input/output sizes differ across ranks at {at}{what}{called}"
        if self.kind == "dumps_missing":
            return f"no verdict on {at}{what}: no dump from {who(list(self.missing))}"
        if self.kind == "no_error":
            return f"{at}{what} matched on every rank: the hang is elsewhere"
        if self.kind == "too_many":
            return f"stopped after too many mismatches in process group {self.group}"
        return self.text


_EXPECTED = re.compile(r"^Expected (.+?): '(.*?)' does not match found (.+?): '(.*)'$")
_WORDS = {
    "COLLECTIVE_TYPE_MISMATCH": "called a different collective",
    "SIZE_OR_SYNTAX_MISMATCH": "passed different sizes",
    "COLLECTIVE_DTYPE_MISMATCH": "passed different dtypes",
    "COLLECTIVE_STATE_MISMATCH": "is in a different state",
}


def _mismatch_words(detail: str, odd: Sequence[int], ref: Sequence[int]) -> str:
    """``rank 0 called all_reduce where rank 1 called broadcast`` from a ``MatchInfo``
    (``Error type: X, Expected <what>: 'a' does not match found <what>: 'b'``): the odd
    ranks' value is the found one, the reference ranks' the expected one."""
    kind, _, rest = detail.partition(": ")
    m = _EXPECTED.match(rest)
    there = who(list(ref)) if ref else "the first rank"
    if kind == "COLLECTIVE_TYPE_MISMATCH" and m:
        return f"{who(list(odd))} called {m.group(4)} where {there} called {m.group(2)}"
    if m:
        return f"{who(list(odd))} has {m.group(3)} {m.group(4)} where {there} has {m.group(2)}"
    words = _WORDS.get(kind, "differ")
    return f"{who(list(odd))} {words} than {there}" + (f" ({rest})" if rest else "")


@dataclass(frozen=True)
class FrTrace:
    """What PyTorch's analyser said about a job's dumps, or why it did not run.

    Attributes:
        ranks: the ranks whose dumps were given.
        findings: its blocks in order (none: every collective matched).
        error: why it did not run or failed, one line; ``None`` when it ran.
        where: where it ran (``on a, in the job's image``).
        pending: the collectives the dumps show enqueued and never completed (each process
            group's ``pg_status``), as (rank, process group, sequence number, op): what a
            verdict without findings still says about a hang.
    """

    ranks: tuple[int, ...] = ()
    findings: tuple[FrTraceFinding, ...] = ()
    error: str | None = None
    where: str | None = None
    pending: tuple[tuple[int, str, int, str], ...] = ()

    def lines(self) -> list[str]:
        """What to show, one line each."""
        if self.error:
            return [f"PyTorch's fr_trace: {self.error}"]
        at = f" ({self.where})" if self.where else ""
        head = f"PyTorch's fr_trace{at} over the dumps of {who(list(self.ranks))}"
        if self.findings:
            return [f"{head}:", *(f"  {f.line()}" for f in self.findings)]
        said = (
            "one rank: nothing to compare"
            if len(self.ranks) == 1
            else "every collective matched across the ranks"
        )
        if not self.pending:
            return [f"{head}: {said}, and every one completed"]
        by: dict[tuple[str, int, str], list[int]] = {}
        for rank, pg, seq, op in self.pending:
            by.setdefault((pg, seq, op), []).append(rank)
        (pg, seq, op), ranks = min(by.items(), key=lambda kv: kv[0][1])
        return [
            f"{head}: {said}; collective {seq} of process group {pg} "
            f"({op.split(':', 1)[-1]}) never completed on {who(sorted(ranks))}: every rank "
            "that should entered it, so it waits on something else (work queued before it on "
            "the GPU, the network, NCCL)"
        ]

    def to_json(self) -> dict[str, Any]:
        """JSON data (``stacks --json``, the saved capture)."""
        from dataclasses import asdict

        return asdict(self)


def from_json(data: object) -> FrTrace | None:
    """A :class:`FrTrace` saved by :meth:`FrTrace.to_json`, ``None`` if ``data`` is not one."""
    if not isinstance(data, Mapping):
        return None
    findings = []
    for f in data.get("findings") or ():
        if isinstance(f, Mapping):
            findings.append(
                FrTraceFinding(
                    **{
                        **f,
                        "expected": tuple(f.get("expected") or ()),
                        "missing": tuple(f.get("missing") or ()),
                        "culprits": tuple((int(r), str(d)) for r, d in f.get("culprits") or ()),
                    }
                )
            )
    return FrTrace(
        ranks=tuple(data.get("ranks") or ()),
        findings=tuple(findings),
        error=data.get("error"),
        where=data.get("where"),
        pending=tuple(
            (int(r), str(pg), int(seq), str(op)) for r, pg, seq, op in data.get("pending") or ()
        ),
    )


def looks_like_fr_trace(text: str) -> bool:
    """Whether ``text`` holds ``fr_trace`` output: a block (a head line and its fields or
    its group) or the ``-j`` table of the ranks' entries."""
    heads = any(p.search(text) for p in _HEAD_ANYWHERE)
    return (heads and ("group info:" in text or "for group " in text)) or bool(entries_table(text))


_TABLE_HEAD = re.compile(r"^\s*Rank \d+(?:\s{2,}Rank \d+)*\s*$")
_RULE = re.compile(r"^\s*-{3,}(?:\s{2,}-{3,})*\s*$")
_CELL = re.compile(r"\S(?:.*?\S)?(?=\s{2,}|\s*$)")


def entries_table(text: str) -> dict[int, list[str]]:
    """``fr_trace -j``'s table (``just_print_entries``: one column per rank, ``Rank N`` over a
    rule, each cell one entry as ``op(input_sizes=..., state=...)``, oldest first) as rank ->
    its entries' ops; ``{}`` when ``text`` has none. Each cell goes to the column whose head
    starts nearest it (a column may be empty where a rank has fewer entries)."""
    lines = [_LOG_PREFIX.sub("", ln).rstrip() for ln in text.splitlines()]
    for i, head in enumerate(lines[:-1]):
        if not (_TABLE_HEAD.match(head) and _RULE.match(lines[i + 1])):
            continue
        cols = [(m.start(), int(m.group(1))) for m in re.finditer(r"Rank (\d+)", head)]
        table: dict[int, list[str]] = {r: [] for _, r in cols}
        for row in lines[i + 2 :]:
            cells = list(_CELL.finditer(row))
            if not cells or not all("(" in c.group(0) for c in cells):
                break
            for c in cells:
                _, rank = min(cols, key=lambda col: abs(col[0] - c.start()))
                table[rank].append(c.group(0).split("(", 1)[0])
        return table
    return {}


def _table_finding(table: dict[int, list[str]]) -> FrTraceFinding | None:
    """The ranks whose buffers end before the others' (``-j``'s table): they never issued
    the next collective the others did; ``None`` when every rank shows as many entries
    (a full ring buffer, or ranks in step)."""
    counts = {r: len(ops) for r, ops in table.items()}
    if len(counts) < 2 or len(set(counts.values())) < 2:
        return None
    longest = max(counts, key=lambda r: (counts[r], -r))
    behind = sorted(r for r, n in counts.items() if n < counts[longest])
    first = min(counts[r] for r in behind)
    op = table[longest][first]
    return FrTraceFinding(
        kind="not_joined",
        op=op,
        expected=tuple(sorted(counts)),
        missing=tuple(behind),
        text=f"rank {longest}: {counts[longest]} entries; "
        + ", ".join(f"rank {r}: {counts[r]}" for r in behind),
    )


_HEAD_ANYWHERE = tuple(re.compile(p.pattern.lstrip("^"), re.M) for p, _ in _HEADS)


def _ranks(text: str) -> tuple[int, ...]:
    """``{0, 1}`` / ``[0, 1]`` / ``0,1`` as a tuple of ints."""
    return tuple(sorted({int(n) for n in re.findall(r"-?\d+", text)}))


def _where(frames: Sequence[tuple[str, str, int]]) -> str | None:
    for name, path, line in frames:
        if "/torch/" not in path and "site-packages/" not in path:
            return f"{name} ({path.rsplit('/', 1)[-1]}:{line})"
    return None


def parse_fr_trace(text: str) -> list[FrTraceFinding]:
    """Every block of ``fr_trace``'s output in ``text`` (other lines, e.g. a log prefix such
    as ``[rank0]:`` or ``tabulate is not installed``, are skipped)."""
    findings: list[FrTraceFinding] = []
    cur: dict[str, Any] | None = None
    frames: list[tuple[str, str, int]] = []
    in_stack = False

    def close() -> None:
        if cur is not None:
            findings.append(FrTraceFinding(**cur, where=_where(frames)))

    for raw in text.splitlines():
        line = _LOG_PREFIX.sub("", raw).rstrip()
        head = next(((m, k) for p, k in _HEADS if (m := p.match(line))), None)
        if head is not None:
            close()
            m, kind = head
            cur = {"kind": kind, "text": line}
            frames, in_stack = [], False
            named = m.groupdict()
            if named.get("seq") is not None:
                cur["seq"] = int(named["seq"])
            if named.get("group"):
                cur["group"] = named["group"]
            if named.get("op"):
                cur["op"] = named["op"]
            if named.get("missing"):
                cur["missing"] = _ranks(named["missing"])
            if named.get("errors"):
                cur["culprits"] = _error_ranks(named["errors"])
            if kind == "dumps_missing":
                found = re.search(r"ranks \(([^)]*)\)", line)
                cur["missing"] = _ranks(found.group(1)) if found else ()
            if "Collective stack traces:" in line:  # 2.5: the frames follow on this line
                in_stack = True
            continue
        if cur is None:
            continue
        if in_stack:
            fm = _FRAME.match(line)
            if fm:
                frames.append((fm.group(1), fm.group(2), int(fm.group(3))))
                continue
            in_stack = False
        fld = _FIELD.match(line.strip())
        if not fld:
            continue
        key, value = fld.group(1).lower(), fld.group(2).strip()
        if key == "group info":
            cur["group"] = value
        elif key == "collective":
            cur["op"] = value
        elif key == "collective state":
            cur["state"] = value
        elif key == "expected ranks":
            # a set of global ranks; between 2.5 and 2.6 the group's size (a bare number)
            cur["expected"] = _ranks(value) if "{" in value or "[" in value else ()
        elif key == "missing ranks":
            cur["missing"] = _ranks(value)
        elif key == "input sizes":
            cur["sizes"] = value
        elif key == "found errors":
            cur["culprits"] = _error_ranks(value)
        elif key in ("error msg", "error message"):
            cur["culprits"] = tuple(
                (int(m.group(1)), m.group(2) + (f": {m.group(3)}" if m.group(3) else ""))
                for m in _CULPRIT.finditer(value)
            )
        elif key in ("collective stack trace", "collective stack traces"):
            in_stack = True
            fm = _FRAME.match(value)
            if fm:
                frames.append((fm.group(1), fm.group(2), int(fm.group(3))))
    close()
    table = _table_finding(entries_table(text))
    if table is not None:
        findings.append(table)
    return findings


def _error_ranks(text: str) -> tuple[tuple[int, str], ...]:
    """2.5's ``Error rank r, Error type: X, Detail finding d`` as (rank, ``X: d``)."""
    return tuple(
        (int(m.group(1)), m.group(2) + (f": {m.group(3).strip()}" if m.group(3) else ""))
        for m in _ERROR_RANK.finditer(text)
    )


def pending_of(dumps: Mapping[int, bytes]) -> tuple[tuple[int, str, int, str], ...]:
    """The collectives each rank's dump shows enqueued and not completed: for each process
    group of its ``pg_status``, ``last_completed_collective + 1`` when the group's
    ``last_enqueued_collective`` is beyond it (entry states are not used: gloo leaves them
    ``scheduled``), with the op of that entry; as (rank, group, seq, op)."""
    from remote.agent.stacks import fr_summary

    out = []
    for rank, data in sorted(dumps.items()):
        try:
            summary = fr_summary(data)
        except Exception:  # a dump that cannot be read says nothing here
            continue
        for pg, st in (summary.get("pg_status") or {}).items():
            if not isinstance(st, dict):
                continue
            enq, done = st.get("last_enqueued_collective"), st.get("last_completed_collective")
            if not isinstance(enq, int) or not isinstance(done, int) or enq <= done:
                continue
            seq = done + 1
            op = next(
                (
                    str(e.get("op"))
                    for e in summary.get("entries") or []
                    if e.get("pg") == str(pg) and e.get("seq") == seq and not e.get("p2p")
                ),
                "?",
            )
            out.append((rank, str(pg), seq, op))
    return tuple(out)


def from_output(
    ranks: Sequence[int],
    status: int,
    out: str,
    where: str,
    pending: tuple[tuple[int, str, int, str], ...] = (),
) -> FrTrace:
    """The analyser's run (exit ``status``, its output ``out``, stdout and stderr together)
    as a :class:`FrTrace`; a failed run is one line: its last error line. ``pending``: see
    :func:`pending_of`."""
    findings = parse_fr_trace(out)
    if status != 0 and not findings:
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        last = next(
            (ln for ln in reversed(lines) if re.match(r"^\w*(Error|Exception)\b", ln)),
            lines[-1] if lines else "no output",
        )
        if "No module named" in last:
            last += " (PyTorch 2.6 or later has the analyser)"
        return FrTrace(tuple(ranks), error=f"failed (exit {status}): {last}", where=where)
    return FrTrace(tuple(ranks), tuple(findings), where=where, pending=pending)


def _named_groups(data: bytes) -> bytes:
    """``data`` with an unnamed sole process group named from its entries (gloo, module
    docstring); other dumps unchanged."""
    from remote.agent.stacks import PlainUnpickler  # builtin types only: any class refused

    try:
        dump = PlainUnpickler(io.BytesIO(data)).load()
    except Exception:  # not ours to judge: the analyser says what it cannot read
        return data
    if not isinstance(dump, dict):
        return data
    config = dump.get("pg_config")
    entries = dump.get("entries") or []
    groups = {
        tuple(e["process_group"][:2])
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("process_group"), list | tuple)
    }
    if not (isinstance(config, dict) and len(config) == 1 and len(groups) == 1):
        return data
    ((key, cfg),) = config.items()
    ((pg_id, desc),) = groups
    if key or not isinstance(cfg, dict) or cfg.get("name"):
        return data
    dump["pg_config"] = {str(pg_id): {**cfg, "name": str(pg_id), "desc": str(desc)}}
    return pickle.dumps(dump, protocol=2)


def dump_files(dumps: Mapping[int, bytes]) -> dict[str, bytes]:
    """The files to hand the analyser: one per rank, ``<PREFIX><rank>`` (what it reads with
    ``-p PREFIX``), gloo's unnamed group named (module docstring)."""
    return {f"{PREFIX}{rank}": _named_groups(data) for rank, data in sorted(dumps.items())}


def analyser_args(folder: str) -> list[str]:
    """The arguments after the interpreter: ``-m fr_trace FOLDER -p PREFIX``."""
    return ["-m", MODULE, folder, "-p", PREFIX]
