"""The nvidia-smi fallback asks again when the driver rejects a query field (drivers before
R535 know ``clocks_event_reasons.active`` only as ``clocks_throttle_reasons.active``).

``nvidia-smi`` here is a fake (a script on PATH printing what an R470 driver prints): no GPU
or driver runs on this machine."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from remote.telemetry.schema import Sample
from remote.telemetry.smi import QUERY_FIELDS, QUERY_FIELDS_LEGACY
from remote.telemetry.stream import smi_samples
from remote.transport import LocalTransport

HEAD = (
    "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA A100-SXM4-40GB, 00000000:07:00.0, "
    "87, 40, 30000, 40960, 61, 310.50, 400.00, 1410, 1215, [N/A], P0, 0x0000000000000000, "
    "0, Enabled"
)

FAKE = """#!/bin/sh
# fake_nvidia_smi_r470: answers as a driver before R535 does
echo "$@" >> "{calls}"
case "$*" in
  *--query-compute-apps*) exit 0 ;;
  *clocks_event_reasons.active*)
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2
    exit 2 ;;
  *{bad}*)
    echo 'Field "{bad}" is not a valid field to query.' >&2
    exit 2 ;;
  *mig.mode.current*) echo "{head}, Disabled, 470.182.03" ;;
  *) echo "{head}, 470.182.03" ;;
esac
"""


def fake_smi(tmp_path: Path, bad: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    calls = tmp_path / "calls"
    script.write_text(FAKE.format(calls=calls, bad=bad, head=HEAD))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return calls


async def first_samples(n: int) -> list[Sample]:
    out: list[Sample] = []
    async for s in smi_samples(LocalTransport(), 0.2):
        out.append(s)
        if len(out) >= n:
            break
    return out


def test_a_rejected_field_is_asked_again_by_its_older_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_smi(tmp_path, "no-such-field-at-all")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (sample,) = asyncio.run(first_samples(1))
    gpu = sample["gpus"][0]
    assert gpu["util_gpu_pct"] == 87 and gpu["mem_used_mib"] == 30000
    queries = [c for c in calls.read_text().splitlines() if "--query-gpu" in c]
    assert "clocks_event_reasons.active" in queries[0]
    assert f"--query-gpu={','.join(QUERY_FIELDS_LEGACY)}" in queries[1]
    assert len(queries) == 2


def test_an_optional_field_the_driver_lacks_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mig.mode.current (no MIG before R450) is dropped after the rename; the row then has
    one value fewer, read by the narrower field list."""
    calls = fake_smi(tmp_path, "mig.mode.current")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (sample,) = asyncio.run(first_samples(1))
    gpu = sample["gpus"][0]
    assert gpu["util_gpu_pct"] == 87 and gpu["power_w"] == 310.5
    assert gpu["mig_mode"] is None  # not asked: unknown, never a default
    queries = [c for c in calls.read_text().splitlines() if "--query-gpu" in c]
    assert len(queries) == 3
    assert queries[2] != queries[1]
    assert "mig.mode.current" not in queries[2] and "clocks_throttle_reasons" in queries[2]


def test_a_field_without_another_name_ends_in_the_fault_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index`` cannot be renamed or left out: one fault sample says which field."""
    calls = fake_smi(tmp_path, "index")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (sample,) = asyncio.run(first_samples(1))
    assert sample["state"] == "error"
    assert sample["state_detail"] == 'nvidia-smi does not know the query field "index"'
    assert len([c for c in calls.read_text().splitlines() if "--query-gpu" in c]) == 2
    assert "index" in QUERY_FIELDS
