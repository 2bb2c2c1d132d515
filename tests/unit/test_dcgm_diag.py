"""``dcgmi diag`` outputs from public reports, read by :func:`console.bench.dcgm.parse_diag`.

Each ``tests/data/dcgm/NN-*.txt`` is an output as it was pasted or committed (DCGM 1.x to 4.x,
with the paste's own noise); its ``.json`` names the source and holds the expected reading,
written from the output before the parser: the verdict, the failed, warned and skipped tests,
the GPUs DCGM said failed, and an excerpt of the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.bench.dcgm import parse_diag

DATA = Path(__file__).parents[1] / "data" / "dcgm"
CASES = sorted(p.stem for p in DATA.glob("*.txt"))
#: dcgmi's exit status for a run whose tests failed (nvvs: DCGM_ST_NVVS_ERROR, as 226 in a
#: shell) against one that passed; a run that could not start exits non-zero too.
EXIT = {"pass": 0, "fail": 226, "warn": 0, "error": 1}


def test_the_cases_are_there() -> None:
    assert len(CASES) >= 20, CASES


@pytest.mark.parametrize("case", CASES)
def test_real_dcgmi_diag_output(case: str) -> None:
    text = (DATA / f"{case}.txt").read_text(encoding="utf-8")
    want = json.loads((DATA / f"{case}.json").read_text(encoding="utf-8"))["expected"]
    v = parse_diag("h", 1, text, "", EXIT[want["verdict"]])
    assert v.verdict == want["verdict"], (v, want)
    assert list(v.failed) == want["failed_tests"]
    assert list(v.warned) == want["warned_tests"]
    assert list(v.skipped) == want["skipped_tests"]
    assert list(v.gpus) == want["failed_gpus"]
    if v.verdict == "error":
        first_error = next(ln for ln in want["reason"].splitlines() if ln.startswith("Error"))
        assert first_error[:60] in v.detail
    elif v.verdict == "fail" and want["reason"]:
        # the first detail row's opening words, as DCGM wrote them (45-character rows joined)
        rows = [
            r
            for r in want["reason"].splitlines()
            if r.startswith("| Warning") or r.startswith("| Error")
        ]
        if rows:
            opening = " ".join(rows[0].split("|")[2].split()[:5])
            assert opening in v.detail, (opening, v.detail)


def test_wrapped_detail_rows_are_joined_mid_word() -> None:
    text = (DATA / "10-sagemaker-3x-level3-targeted-power-fail-gpu1.txt").read_text()
    v = parse_diag("h", 3, text, "", 226)
    assert v.detail == (
        "Targeted Power: GPU 1 Max power of 224.1 did not reach desired power minimum "
        "target_power_min_ratio of 224.2 for GPU 1 Verify that the clock speeds and GPU "
        "utilization are high."
    )


def test_info_rows_are_no_failure() -> None:
    text = (DATA / "20-gcp-lab02-3x-level2-pass-with-info-row.txt").read_text()
    v = parse_diag("h", 2, text, "", 0)
    assert (v.verdict, v.detail, v.gpus) == ("pass", "", ())


def test_a_passing_table_with_a_failing_exit_status_is_an_error() -> None:
    text = (DATA / "05-dcgm124-4x-level2-pass-1gpu.txt").read_text()
    assert parse_diag("h", 2, text, "", 0).verdict == "pass"
    assert parse_diag("h", 2, text, "", 1).verdict == "error"
