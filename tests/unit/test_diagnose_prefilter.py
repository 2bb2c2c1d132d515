"""The engine's pre-filter (console/diagnosis/engine.py ``kept_text``) never changes a diagnosis.

Each rule declares the words a line it matches holds (its module's ``NEEDS``); the engine runs
the rules on the lines holding one and their declared context. A rule whose words miss a line
it matches would give another answer on a big log, where that line falls outside every kept
window. To see that on the corpus's small texts, every case is run twice more, each way with
the pre-filter and without it, and the answers must be equal:

- as it is, with the pre-filter made to apply to every size and keep no fixed head or tail;
- diluted: every physical line followed by 60 lines of a training loop's step output (no
  declared word in them), so that no line of the case is inside another's context window and
  only the lines the words find survive, exactly what a 100 MiB log does to them. What is
  one thing stays together: a line wrapped at a fixed width, torchelastic's summary (a
  record whose context has its own test, ``test_summary_amid_noise``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from console.diagnosis import engine
from console.diagnosis.common import TERMINAL_WIDTHS
from console.diagnosis.lines import _repeated_host_tags, _repeated_word_tags, _strip_decorations

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"
CASES = sorted(CORPUS.glob("*/*.txt"))
#: A training loop's step lines: more of them than any declared context plus the kept part of a
#: dropped stretch (engine.GAP_LINES), so that dilution leaves each case line on its own.
_NOISE = "".join(f"step {n} loss 0.{5123 + n}\n" for n in range(60))
_NOISE_LINE = re.compile(r"^step \d+ loss 0\.\d+$")


_KEPT = engine.kept_text


def _strict(text: str) -> str:
    return _KEPT(text, head=0, tail=0, small=0)


def _strictly(m: pytest.MonkeyPatch) -> None:
    """The pre-filter applied to every size, with no fixed head or tail kept (as :func:`_strict`),
    in :func:`engine.diagnose`: for every rule's lines and each rule's own."""
    m.setattr(engine, "HEAD_LINES", 0)
    m.setattr(engine, "TAIL_LINES", 0)
    m.setattr(engine, "SMALL_TEXT", 0)


def _answer(text: str, monkeypatch: pytest.MonkeyPatch, prefilter: bool) -> Any:
    """The diagnosis as comparable values; evidence without noise lines (a rule that shows a
    message with its continuation lines takes the step lines after it as those)."""
    with monkeypatch.context() as m:
        _strictly(m)
        d = engine.diagnose(text, prefilter=prefilter)
    if d is None:
        return None
    evidence = [e for e in d.evidence if not _NOISE_LINE.match(e)]
    return (
        d.kind,
        d.summary,
        d.ranks,
        d.fix,
        dict(d.facts),
        evidence,
        d.failure,
        d.inputs,
        [
            (c.kind, c.summary, [e for e in c.evidence if not _NOISE_LINE.match(e)])
            for c in d.consequences
        ],
    )


#: The lines of torchelastic's failure summary (console/diagnosis/elastic.py's grammar).
_RECORD = re.compile(
    r"^\s*(?:\[\d+\]:\s*$|(?:time|host|rank|exitcode|error_file|traceback|msg)\s*:|Root Cause"
    r"|(?:Other )?Failures:|[=*-]{8,}|\S.* FAILED\s*$|<NO_OTHER_FAILURES>)"
)


_BORDER = re.compile(r"^\s*[=*-]{8,}\s*$")


def _wrap_widths(text: str) -> set[int]:
    """Lengths (60 columns or more) that at least 3 lines of ``text`` have exactly: a hard wrap
    at that width (a paste whose rows end padded with blanks)."""
    counts = Counter(len(line) for line in text.split("\n") if len(line) >= 60)
    return {n for n, k in counts.items() if k >= 3}


def _dilute(text: str) -> str:
    """``text`` with :data:`_NOISE` after each line, except inside what is one thing: a line
    wrapped at a fixed width (the rules join its rows) and torchelastic's summary up to its
    closing border (one record; its context is test_summary_amid_noise's)."""
    widths = set(TERMINAL_WIDTHS) | _wrap_widths(text)
    out: list[str] = []
    in_summary = seen_root = False
    for line in text.split("\n"):
        body = _strip_decorations(line)[0]
        if _RECORD.match(body) and not _BORDER.match(body):
            in_summary = True
        seen_root = seen_root or (in_summary and "Root Cause" in body)
        if in_summary and seen_root and _BORDER.match(body) and body.strip().startswith("="):
            in_summary = seen_root = False
        out.append(line + "\n" + ("" if len(line) in widths or in_summary else _NOISE))
    return "".join(out)


def _tagged(text: str) -> bool:
    """The normaliser strips a relay's tag only when it starts most lines: diluting such a text
    changes its own answer, whatever the pre-filter does."""
    bodies = [_strip_decorations(line)[0] for line in text.splitlines()]
    return bool(_repeated_host_tags(bodies) or _repeated_word_tags(bodies))


def test_noise_holds_no_declared_word() -> None:
    assert engine.keywords(), "no pre-filter: google-re2 is missing (scripts/lib/ensure-venv)"
    assert _strict(_NOISE * 3) == "".join(_NOISE.splitlines(True)[: engine.GAP_LINES])


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_same_answer_with_and_without_prefilter(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    assert _answer(text, monkeypatch, True) == _answer(text, monkeypatch, False)


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_same_answer_diluted(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if _tagged(text):
        pytest.skip("a relay's tag on most lines: dilution changes the answer itself")
    diluted = _dilute(text)
    assert _answer(diluted, monkeypatch, True) == _answer(diluted, monkeypatch, False)


def _steps(n: int, start: int = 0) -> list[str]:
    return [f"step {i} loss 0.{i:04d}\n" for i in range(start, start + n)]


def test_keeps_the_hit_its_context_and_the_start_of_each_dropped_stretch() -> None:
    hit = "RuntimeError: CUDA error: an illegal memory access\n"
    lines = _steps(200) + [hit] + _steps(200, 200)
    kept = _KEPT("".join(lines), head=0, tail=0, small=0)
    gap, before, after = engine.GAP_LINES, 4, 8  # Needs' defaults, the rules' words
    assert kept == "".join(lines[:gap] + lines[200 - before : 201 + after + gap])


def test_head_and_tail_are_kept() -> None:
    lines = _steps(1000)
    kept = _KEPT("".join(lines), head=5, tail=7, small=0)
    assert kept == "".join(lines[: 5 + engine.GAP_LINES] + lines[-7:])


@pytest.mark.slow
def test_without_re2_every_line_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without google-re2 there is no pre-filter (Python's ``re`` over every word is slower
    than the rules themselves): the same text, the same answer."""
    text = "".join(_steps(50_000)) + (CORPUS / "torch" / "trc-015.txt").read_text()
    assert _KEPT(text) != text
    real_import = engine.importlib.import_module

    def no_re2(name: str) -> object:
        if name == "re2":
            raise ImportError(name)
        return real_import(name)

    engine._matcher.cache_clear()
    monkeypatch.setattr(engine.importlib, "import_module", no_re2)
    try:
        assert engine._matcher() is None
        assert _KEPT(text) is text
        d = engine.diagnose(text)
    finally:
        monkeypatch.undo()
        engine._matcher.cache_clear()
    assert d is not None and d.kind == "cuda_oom"


def test_summary_amid_noise() -> None:
    """torchelastic's summary (a record of lines, most without a declared word) in the middle
    of 600 KiB of step lines reads as it does alone."""
    summary = (CORPUS / "torch" / "trc-014.txt").read_text(encoding="utf-8")
    assert "Root Cause" in summary
    noise = "".join(_steps(20_000))
    text = noise + summary + noise
    assert len(engine.kept_text(text)) < len(text) // 10
    alone, amid = engine.diagnose(summary), engine.diagnose(text)
    assert alone is not None and amid is not None
    assert (amid.kind, amid.ranks, dict(amid.facts), amid.failure) == (
        alone.kind,
        alone.ranks,
        dict(alone.facts),
        alone.failure,
    )
