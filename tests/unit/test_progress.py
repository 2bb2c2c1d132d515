"""Training progress from log lines (:mod:`console.progress`) over real lines people posted
(tests/data/progress/cases.yaml: each line's expected reading was written from the line and
the code that prints it, before the parser), and lines that must never read as progress."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.progress import Progress, parse_progress

CASES = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "data" / "progress" / "cases.yaml").read_text()
)
FIELDS = (
    "step",
    "total",
    "epoch",
    "it_per_s",
    "samples_per_s",
    "tokens_per_s",
    "rate_scope",
    "tflops",
    "mfu_pct",
    "loss",
)


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(have, float) and math.isnan(have)
    if isinstance(want, int | float) and not isinstance(want, bool):
        return isinstance(have, int | float) and math.isclose(
            want, have, rel_tol=1e-3, abs_tol=1e-9
        )
    return bool(want == have)


def test_every_family_is_covered() -> None:
    families = {c["family"] for c in CASES}
    assert {"tqdm", "lightning", "hf_trainer", "torchtitan", "megatron", "deepspeed"} <= families
    assert sum(c["family"] == "negative" for c in CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_real_line(case: dict[str, Any]) -> None:
    got = parse_progress(case["line"])
    if case["expect"] in ("none", None):
        assert got is None, got
        return
    assert got is not None, case["line"]
    for f in FIELDS:
        want = case["expect"].get(f)
        have = getattr(got, f)
        if f == "loss" and want is None:
            continue  # a loss the case does not name (a "train loss" beside a "val loss")
        if want is None:
            assert have is None, (f, have)
        else:
            assert _same(want, have), (f, want, have)


@pytest.mark.parametrize(
    "line",
    [
        "loss 3.4",  # a loss is not a rate
        "batch size 32, 3.4 loss",
        "lr 3e-4",
        "Step 1/12 : FROM ubuntu:22.04",  # docker build
        "Downloading [=====>      ]  12.3MB/45.6MB",
        "Evaluating:  50%|█████     | 5/10 [00:01<00:01,  4.00it/s]",
        "Tokenizing:  10%|█         | 100/1000 [00:01<00:09, 99.00it/s]",
        "gpu0:1234:1234 [0] NCCL INFO Channel 01/32 :    0   1",
        "skipped iterations 4 7",
    ],
)
def test_not_progress(line: str) -> None:
    assert parse_progress(line) is None


def test_the_explicit_form() -> None:
    line = (
        '[rank0]: gpuconsole:progress {"step": 120, "total": 5000, "tokens_per_s": 51200, '
        '"rate_scope": "total", "mfu_pct": 41.5, "unknown": 1, "step_bad": "x"}'
    )
    assert parse_progress(line) == Progress(
        step=120, total=5000, tokens_per_s=51200.0, rate_scope="total", mfu_pct=41.5
    )
    # wrong types are dropped, not guessed
    assert parse_progress('gpuconsole:progress {"step": "12", "rate_scope": "node"}') is None
    assert parse_progress("gpuconsole:progress not json") is None


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # values no training has are unknown, never shown (nor written as Infinity in JSON)
        ('{"step": 3, "tokens_per_s": 1e309}', {"step": 3}),
        ('{"step": 3, "samples_per_s": -5, "tflops": -1, "epoch": -2}', {"step": 3}),
        ('{"step": 136, "total": 0, "mfu_pct": 250}', {"step": 136}),
        ('{"step": 136, "total": 100}', {"step": 136}),  # a total under the step
        ('{"step": 3, "mfu_pct": 41.5, "total": 10}', {"step": 3, "mfu_pct": 41.5, "total": 10}),
    ],
)
def test_impossible_values_are_unknown(payload: str, expected: dict[str, object]) -> None:
    from console.progress import EXPLICIT_PREFIX, Progress

    assert parse_progress(EXPLICIT_PREFIX + payload) == Progress(**expected)  # type: ignore[arg-type]


def test_an_unknown_rate_scope_makes_the_line_unreadable() -> None:
    from console.progress import EXPLICIT_PREFIX

    assert parse_progress(EXPLICIT_PREFIX + '{"tokens_per_s": 5, "rate_scope": "weird"}') is None
