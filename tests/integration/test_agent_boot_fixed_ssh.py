"""The agent's boot-fixed file over a real SSH host, started by the console's own launch
command (``agent_argv``: ``sh`` enters the bundle's folder, ``python3 -I -S`` imports the
agent): the first start writes ``boot-fixed.txt`` in that folder with the host's real boot id,
and the next start's first record takes its highest clocks from it.

What is real: the OpenSSH test host ``a``, the launch command, the host's python3, its
``/proc/sys/kernel/random/boot_id``, the files. What stands in: the test hosts have no GPU, so
NVML is FakeNVML (tests/fakes/fake_nvml.py, through its pynvml shim)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.profiles import load_profile_file
from console.session import Session
from remote.telemetry.schema import read_sample
from remote.telemetry.stream import BOOT_FIXED_FILE, agent_argv
from tests.fakes import fake_nvml

from .conftest import CLI

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle() -> Iterator[Path]:
    """A bundle folder of its own (the agent, its binding, the fake's pynvml shim), so the
    shared one under the test user's home keeps no fake GPU."""
    d = Path(tempfile.mkdtemp(prefix="gpuconsole-bootfixed-"))
    os.chmod(d, 0o755)
    for name in ("agent.py", "nvmlc.py"):
        shutil.copy(REPO / "remote" / "agent" / name, d / name)
    fake_nvml.write_shim(str(d))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def test_the_second_start_takes_the_maxima_from_the_bundle_folder(
    cli: CLI, bundle: Path
) -> None:
    scenario = bundle / "scenario.json"
    gpu = {"uuid": "GPU-5b0f-bootfixed", "pci_bus_id": "00000000:19:00.0", "sm_clock_max": 1980}
    session = Session(load_profile_file(cli.profile))
    firsts = []
    try:
        t = await session.connected("a")
        boot = (await t.run(["cat", "/proc/sys/kernel/random/boot_id"])).stdout.strip()
        for sm_max in (1980, 1410):  # the driver "says" 1410 at the second start
            gpu["sm_clock_max"] = sm_max
            scenario.write_text(json.dumps({"driver_version": "580.159.04", "gpus": [gpu]}))
            argv = agent_argv(1.0, folder=str(bundle))
            extra = ["--count", "1", "--no-stdin-watch", "--pynvml-dir", str(bundle)]
            res = await t.run(["env", f"FAKE_NVML_SCENARIO={scenario}", *argv, *extra], timeout=60)
            assert res.returncode == 0, res.stderr
            firsts.append(read_sample(json.loads(res.stdout.splitlines()[0]))["gpus"][0])
    finally:
        await session.close()
    assert (bundle / BOOT_FIXED_FILE).read_text().splitlines() == [
        f"gpuconsole-boot-fixed 1 {boot} 580.159.04",
        "GPU-5b0f-bootfixed 00000000:19:00.0 1980 3201 5 16",
    ]
    # the second start did not ask: its record holds the file's 1980, not the fake's 1410
    assert [g["sm_clock_max_mhz"] for g in firsts] == [1980, 1980]
    assert [g["mem_clock_max_mhz"] for g in firsts] == [3201, 3201]
    assert not list(bundle.glob("*.tmp"))
