"""docs/diagnose.md lists every cause id: those the corpus expects, the engine ranks and the
type :data:`console.diagnosis.model.CauseKind` names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import yaml

from console.diagnosis.engine import PRECEDENCE
from console.diagnosis.model import CauseKind
from console.slurm.state import STATE_KINDS, STATE_REASONS

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


def test_every_cause_id_is_documented_and_ranked_ids_are_cause_ids() -> None:
    kinds = set(get_args(CauseKind))
    assert kinds - _documented() == set()
    assert set(PRECEDENCE) - {"xid_app"} <= kinds
    assert STATE_KINDS.keys() == STATE_REASONS.keys()
