"""The engine's pre-filter (console/diagnosis/engine.py ``kept_text``) never changes a diagnosis.

Each rule declares the words a line it matches holds (its module's ``NEEDS``); the engine runs
the rules on the lines holding one and their declared context. A rule whose words miss a line
it matches would give another answer on a big log, where that line falls outside every kept
window. To see that on the corpus's small texts, every case is run twice more, each way with
the pre-filter and without it, and the answers must be equal:

- as it is, with the pre-filter made to apply to every size and keep no fixed head or tail;
- diluted: every physical line followed by 40 lines of a training loop's step output (no
  declared word in them), so that no line of the case is inside another's context window and
  only the lines the words find survive, exactly what a 100 MiB log does to them.
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


def _answer(text: str, monkeypatch: pytest.MonkeyPatch, prefilter: bool) -> Any:
    """The diagnosis as comparable values; evidence without noise lines (a rule that shows a
    message with its continuation lines takes the step lines after it as those)."""
    with monkeypatch.context() as m:
        m.setattr(engine, "kept_text", lambda t: _strict(t))
        d = engine.diagnose(text, prefilter=prefilter)
    if d is None:
        return None
    evidence = [e for e in d.evidence if not _NOISE_LINE.match(e)]
    return (d.kind, d.summary, d.ranks, d.fix, dict(d.facts), evidence, d.failure, d.inputs,
            [(c.kind, c.summary, [e for e in c.evidence if not _NOISE_LINE.match(e)])
             for c in d.consequences])


def _wrap_widths(text: str) -> set[int]:
    """Lengths (60 columns or more) that at least 3 lines of ``text`` have exactly: a hard wrap
    at that width (a paste whose rows end padded with blanks)."""
    counts = Counter(len(line) for line in text.split("\n") if len(line) >= 60)
    return {n for n, k in counts.items() if k >= 3}


def _tagged(text: str) -> bool:
    """The normaliser strips a relay's tag only when it starts most lines: diluting such a text
    changes its own answer, whatever the pre-filter does."""
    bodies = [_strip_decorations(line)[0] for line in text.splitlines()]
    return bool(_repeated_host_tags(bodies) or _repeated_word_tags(bodies))


def test_noise_holds_no_declared_word() -> None:
    assert engine.keywords()
    assert _strict(_NOISE * 3) == "".join(_NOISE.splitlines(True)[:engine.GAP_LINES])


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_same_answer_with_and_without_prefilter(path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    assert _answer(text, monkeypatch, True) == _answer(text, monkeypatch, False)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_same_answer_diluted(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if _tagged(text):
        pytest.skip("a relay's tag on most lines: dilution changes the answer itself")
    # a row of a line wrapped at a fixed width stays with the next (the rules join the two)
    widths = set(TERMINAL_WIDTHS) | _wrap_widths(text)
    diluted = "".join(line + "\n" + ("" if len(line) in widths else _NOISE)
                      for line in text.split("\n"))
    assert _answer(diluted, monkeypatch, True) == _answer(diluted, monkeypatch, False)
