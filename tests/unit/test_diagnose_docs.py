"""docs/diagnose.md lists every cause id the corpus expects and the engine ranks."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from console.diagnosis.engine import PRECEDENCE

ROOT = Path(__file__).resolve().parents[2]


def _documented() -> set[str]:
    text = (ROOT / "docs" / "diagnose.md").read_text()
    return set(re.findall(r"^\| `([a-z_0-9]+)` \|", text, re.M))


def test_every_expected_kind_is_documented() -> None:
    documented = _documented()
    used: set[str] = set()
    for manifest in (ROOT / "tests" / "data" / "diagnose" / "corpus").glob("*/expected.yaml"):
        for case in yaml.safe_load(manifest.read_text()) or []:
            used.add(case["kind"])
            used.update(case.get("consequences") or [])
    assert used - documented == set()


def test_every_ranked_kind_is_documented() -> None:
    assert set(PRECEDENCE) - {"xid_app"} - _documented() == set()
