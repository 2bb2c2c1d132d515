"""The normaliser (console/diagnosis/lines.py): collectors' decorations come off, the
process's own lines and rank prefixes stay; and every diagnosis is the same under any
decoration a real collector adds (the kind of input that got no diagnosis before)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from console.diagnosis import diagnose
from console.diagnosis.lines import normalize

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(
    ("line", "raw", "rank", "local_rank", "task"),
    [
        (
            "2024-05-01T12:00:00.123456789Z stderr F [rank3]: RuntimeError: x",
            "[rank3]: RuntimeError: x",
            3,
            None,
            None,
        ),
        ("2024-05-01 12:00:00,123 - RuntimeError: x", "RuntimeError: x", None, None, None),
        ("[2024-05-01 12:00:00] RuntimeError: x", "RuntimeError: x", None, None, None),
        ("> [default1]:ValueError: y", "[default1]:ValueError: y", None, 1, None),
        (">> quoted twice", "quoted twice", None, None, None),
        ("trainer-1  | [rank0]: boom", "[rank0]: boom", 0, None, "trainer-1"),
        (
            "[pod/trainer-0/pytorch] KeyError: 'a'",
            "KeyError: 'a'",
            None,
            None,
            "pod/trainer-0/pytorch",
        ),
        (
            "12: torch.OutOfMemoryError: CUDA out of memory.",
            "torch.OutOfMemoryError: CUDA out of memory.",
            None,
            None,
            "12",
        ),
        ("[1,3]<stderr>:NCCL WARN x", "NCCL WARN x", 3, None, None),
        ("[80746] [rank0]:[E321 02:07:08] w", "[rank0]:[E321 02:07:08] w", 0, None, None),
        (
            "Mar 21 02:07:08 gpu-node-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79",
            "NVRM: Xid (PCI:0000:3b:00): 79",
            None,
            None,
            None,
        ),
        (
            "[ 1843.308145] NVRM: GPU at PCI:0000:b3:00",
            "NVRM: GPU at PCI:0000:b3:00",
            None,
            None,
            None,
        ),
        ("\x1b[31mRuntimeError: red\x1b[0m", "RuntimeError: red", None, None, None),
        (
            "RuntimeError: a message that is not a prefix",
            "RuntimeError: a message that is not a prefix",
            None,
            None,
            None,
        ),
    ],
)
def test_one_line(
    line: str, raw: str, rank: int | None, local_rank: int | None, task: str | None
) -> None:
    (got,) = normalize(line)
    assert (got.raw, got.rank, got.local_rank, got.task) == (raw, rank, local_rank, task)


def test_glued_ranks_are_split() -> None:
    lines = normalize("[rank0]: step 3 done[rank1]: Traceback (most recent call last):")
    assert [(ln.rank, ln.text) for ln in lines] == [
        (0, "step 3 done"),
        (1, "Traceback (most recent call last):"),
    ]
    assert {ln.source_line for ln in lines} == {0}


def test_json_records_are_opened() -> None:
    record = {
        "message": {
            "message": "RuntimeError: boom",
            "extraInfo": {
                "py_callstack": 'Traceback (most recent call last):\n  File "t.py", line 3, in f\n'
                "RuntimeError: boom\n",
                "timestamp": "1700000000",
            },
        }
    }
    texts = [ln.text for ln in normalize(json.dumps(record))]
    assert texts[0] == "RuntimeError: boom"
    assert "Traceback (most recent call last):" in texts
    docker = json.dumps(
        {"log": "KeyError: 'x'\n", "stream": "stderr", "time": "2024-01-01T00:00:00Z"}
    )
    assert [ln.text for ln in normalize(docker)] == ["KeyError: 'x'"]


def test_pdsh_host_tags_only_when_they_repeat() -> None:
    text = "\n".join(f"gpu-node-07: line {i}" for i in range(4))
    assert {ln.task for ln in normalize(text)} == {"gpu-node-07"}
    assert normalize(text)[0].text == "line 0"
    # a Python exception name is never a host tag
    text = "\n".join("ValueError: bad value" for _ in range(4))
    assert all(ln.text == "ValueError: bad value" for ln in normalize(text))


@pytest.mark.parametrize(
    ("prefix", "task"),
    [
        ("stderr: ", "stderr"),  # accelerate test's relay (LlamaFactory#701, hold2-005)
        ("stdout: ", "stdout"),
        ("out: ", "out"),
        ("worker | ", "worker"),
        ("[worker-0] ", "worker-0"),
    ],
)
def test_a_relays_word_prefix_on_most_lines_comes_off(prefix: str, task: str) -> None:
    body = [
        "Traceback (most recent call last):",
        '  File "t.py", line 3, in f',
        "    raise RuntimeError(x)",
        "[rank1]: RuntimeError: boom",
        "  time      : 1",
    ]
    lines = normalize("\n".join(prefix + b for b in body) + "\nunprefixed tail")
    assert [ln.raw for ln in lines] == [*body, "unprefixed tail"]
    assert {ln.task for ln in lines[:5]} == {task}
    assert lines[3].rank == 1 and lines[3].text == "RuntimeError: boom"


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(["RuntimeError: CUDA error"] * 4),  # a crash loop: content, not a tag
        "\n".join(f"NVRM: Xid (PCI:0000:3b:00): 79, pid={i}" for i in range(4)),
        "\n".join(f"srun: error: task {i}: Exited with exit code 1" for i in range(4)),
        "\n".join(f"WARNING: line {i}" for i in range(4)),
        # a word on only half of the lines is not a relay's prefix
        "\n".join(f"stderr: a{i}\nplain {i}" for i in range(4)),
    ],
)
def test_a_words_own_message_is_never_taken_for_a_prefix(text: str) -> None:
    assert [ln.raw for ln in normalize(text)] == text.splitlines()


# --- the same diagnosis under every collector's decoration --------------------------------

Decorate = Callable[[int, str], str]

DECORATIONS: dict[str, Decorate] = {
    "cri": lambda i, s: f"2024-05-01T12:00:{i % 60:02d}.123456789Z stderr F {s}",
    "iso": lambda i, s: f"2024-05-01 12:00:{i % 60:02d},123 {s}",
    "iso-bracket": lambda i, s: f"[2024-05-01T12:00:{i % 60:02d}Z] {s}",
    "srun-label": lambda i, s: f"0: {s}",
    "compose": lambda i, s: f"trainer-1  | {s}",
    "kubectl": lambda i, s: f"[pod/trainer-0/pytorch] {s}",
    "markdown": lambda i, s: f"> {s}",
    "viewer-lineno": lambda i, s: f"[{10000 + i}] {s}",
    "pdsh": lambda i, s: f"gpu-node-07: {s}",
    "docker-json": lambda i, s: json.dumps(
        {"log": s + "\n", "stream": "stderr", "time": "2024-05-01T12:00:00Z"}
    ),
}


def _texts() -> list[tuple[str, str]]:
    out = [
        (p.stem, p.read_text(errors="replace"))
        for p in sorted((DATA / "cases" / "torchrun").glob("trun-*.txt"))
    ]
    for manifest in sorted((DATA / "diagnose" / "corpus").glob("*/expected.yaml")):
        for case in yaml.safe_load(manifest.read_text()) or []:
            if case["kind"] != "none":
                path = manifest.parent / f"{case['id']}.txt"
                out.append((str(case["id"]), path.read_text(errors="replace")))
    return out


TEXTS = _texts()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DECORATIONS))
def test_diagnosis_is_the_same_under_decoration(name: str) -> None:
    decorate = DECORATIONS[name]
    changed = []
    for case_id, text in TEXTS:
        plain = diagnose(text)
        if plain is None:
            continue
        dressed = "\n".join(decorate(i, ln) for i, ln in enumerate(text.splitlines()))
        got = diagnose(dressed)
        if got is None or (got.kind, got.ranks) != (plain.kind, plain.ranks):
            changed.append(
                f"{case_id}: {plain.kind} {plain.ranks} -> "
                f"{got.kind if got else None} {got.ranks if got else ''}"
            )
    assert not changed, "\n".join(changed)
