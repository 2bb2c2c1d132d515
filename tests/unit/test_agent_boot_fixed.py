"""The agent's file of boot-fixed fields (``--boot-fixed-cache``): a GPU's highest clocks and
PCIe link are read from it at the start instead of the driver (``nvmlDeviceGetMaxClockInfo``
costs 1.4-2.7 ms of CPU a call on an H100), only for the same boot, driver version, UUID and
PCI bus id; the slow refreshes ask the driver again and correct it. NVML is the fake of
``tests/fakes/fake_nvml.py`` (no GPU here); the files are real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote.telemetry.stream import BOOT_FIXED_FILE, agent_argv
from tests.unit.test_agent import FakeNVML, TickingClock, agent_mod, scenario_two_gpus

FIXED_CALLS = (
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
)
BOOT = "5e1c2a9e-1d7b-4c55-9f0e-8c3b2a1d0f9e"


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A /proc with only the kernel's boot id."""
    p = tmp_path / "proc"
    (p / "sys/kernel/random").mkdir(parents=True)
    (p / "sys/kernel/random/boot_id").write_text(BOOT + "\n")
    return p


def start(sc: dict[str, Any], path: Path, proc: Path, slow_every: int = 10) -> tuple[Any, Any]:
    """(agent, fake) started with the boot-fixed file at ``path``."""
    fake = FakeNVML(sc)
    store = agent_mod.BootFixedCache(str(path), proc_root=str(proc))
    agent = agent_mod.Agent(
        fake, 1.0, slow_every=slow_every, clock=TickingClock(), boot_fixed=store
    )
    return agent, fake


def fixed_calls(fake: Any) -> int:
    return sum(fake.calls[f] for f in FIXED_CALLS)


def maxima(gpu: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(gpu[k] for k in agent_mod.BOOT_FIXED)


def test_a_second_start_reads_the_maxima_from_the_file_not_the_driver(
    tmp_path: Path, proc: Path
) -> None:
    path = tmp_path / "boot-fixed.txt"
    sc = scenario_two_gpus()
    sc["gpus"][1].update(sm_clock_max=1755, mem_clock_max=2619, pcie_gen_max=4, pcie_width_max=8)
    first, fake1 = start(sc, path, proc)
    s1 = first.sample()
    # 2 GPUs: SM and memory clock, PCIe generation and width each
    assert fake1.calls["nvmlDeviceGetMaxClockInfo"] == 4 and fixed_calls(fake1) == 8
    assert path.read_text().splitlines() == [
        f"gpuconsole-boot-fixed 1 {BOOT} 580.159.04",
        "GPU-aaaa 00000000:19:00.0 1980 3201 5 16",
        "GPU-bbbb 00000000:2A:00.0 1755 2619 4 8",
    ]
    second, fake2 = start(sc, path, proc)
    s2 = second.sample()
    assert fixed_calls(fake2) == 0
    assert [maxima(g) for g in s2["gpus"]] == [maxima(g) for g in s1["gpus"]]
    assert [maxima(g) for g in s2["gpus"]] == [(1980, 3201, 5, 16), (1755, 2619, 4, 8)]
    assert all(not set(agent_mod.BOOT_FIXED) & set(g["errors"]) for g in s2["gpus"])
    # the fields that can change are still asked
    assert fake2.calls["nvmlDeviceGetTotalEccErrors"] == 2
    assert fake2.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2


def test_the_slow_refresh_asks_the_driver_and_corrects_the_file(tmp_path: Path, proc: Path) -> None:
    path = tmp_path / "boot-fixed.txt"
    sc = scenario_two_gpus()
    start(sc, path, proc)[0].sample()
    agent, fake = start(sc, path, proc, slow_every=3)
    fake.set_gpu(0, sm_clock_max=1785)  # what the file says is wrong from now on
    assert agent.sample()["gpus"][0]["sm_clock_max_mhz"] == 1980  # the file's, at the start
    assert fixed_calls(fake) == 0
    agent.sample(), agent.sample()
    assert agent.sample()["gpus"][0]["sm_clock_max_mhz"] == 1785  # seq 3: the driver's
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 4
    assert "GPU-aaaa 00000000:19:00.0 1785 3201 5 16" in path.read_text().splitlines()
    third, fake3 = start(sc, path, proc)
    assert third.sample()["gpus"][0]["sm_clock_max_mhz"] == 1785 and fixed_calls(fake3) == 0


@pytest.mark.parametrize(
    "change",
    ["another boot", "another driver", "GPU moved to another bus", "another GPU in the slot"],
)
def test_the_file_holds_only_for_the_same_boot_driver_and_gpu(
    tmp_path: Path, proc: Path, change: str
) -> None:
    path = tmp_path / "boot-fixed.txt"
    sc = scenario_two_gpus()
    start(sc, path, proc)[0].sample()
    if change == "another boot":
        (proc / "sys/kernel/random/boot_id").write_text("0f0e0d0c-0b0a-4909-8807-060504030201\n")
    elif change == "another driver":
        sc = scenario_two_gpus(driver_version="580.95.05")
    elif change == "GPU moved to another bus":
        sc["gpus"][0]["pci_bus_id"] = "00000000:9B:00.0"
    else:
        sc["gpus"][0]["uuid"] = "GPU-cccc"
    sc["gpus"][0]["sm_clock_max"] = 1410
    agent, fake = start(sc, path, proc)
    assert agent.sample()["gpus"][0]["sm_clock_max_mhz"] == 1410
    asked = 8 if change in ("another boot", "another driver") else 4
    assert fixed_calls(fake) == asked
    lines = path.read_text().splitlines()
    assert any(
        line.split()[:3] == [sc["gpus"][0]["uuid"], sc["gpus"][0]["pci_bus_id"], "1410"]
        for line in lines[1:]
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a cache\n",
        f"gpuconsole-boot-fixed 1 {BOOT} 580.159.04\nGPU-aaaa 00000000:19:00.0 1980 x 5 16\n",
        f"gpuconsole-boot-fixed 1 {BOOT} 580.159.04\nGPU-aaaa 00000000:19:00.0 1980\n",
    ],
    ids=["empty", "another format", "not a number", "too few values"],
)
def test_a_damaged_file_is_ignored_and_replaced(tmp_path: Path, proc: Path, text: str) -> None:
    path = tmp_path / "boot-fixed.txt"
    path.write_text(text)
    agent, fake = start(scenario_two_gpus(), path, proc)
    assert maxima(agent.sample()["gpus"][0]) == (1980, 3201, 5, 16)
    assert fixed_calls(fake) == 8
    assert path.read_text().splitlines()[1] == "GPU-aaaa 00000000:19:00.0 1980 3201 5 16"


def test_a_gpu_the_driver_gives_no_maximum_for_is_not_kept(tmp_path: Path, proc: Path) -> None:
    path = tmp_path / "boot-fixed.txt"
    sc = scenario_two_gpus()
    sc["gpus"][1]["fail"]["nvmlDeviceGetMaxClockInfo"] = "NotSupported"
    s = start(sc, path, proc)[0].sample()
    assert s["gpus"][1]["sm_clock_max_mhz"] is None
    assert s["gpus"][1]["errors"]["sm_clock_max_mhz"] == "Not Supported"
    assert [line.split()[0] for line in path.read_text().splitlines()[1:]] == ["GPU-aaaa"]
    again, fake = start(sc, path, proc)
    s2 = again.sample()
    assert s2["gpus"][1]["errors"]["sm_clock_max_mhz"] == "Not Supported"  # asked again
    assert "sm_clock_max_mhz" in s2["gpus"][1]["unsupported"]
    assert fixed_calls(fake) == 4  # GPU 1's, GPU 0's from the file


def test_no_boot_id_or_an_unwritable_file_leaves_the_agent_as_it_was(tmp_path: Path) -> None:
    sc = scenario_two_gpus()
    no_boot = tmp_path / "empty-proc"
    no_boot.mkdir()
    for path, proc in (
        (tmp_path / "cache.txt", no_boot),
        (tmp_path / "no-such-folder" / "cache.txt", tmp_path / "proc-ok"),
    ):
        (tmp_path / "proc-ok/sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (tmp_path / "proc-ok/sys/kernel/random/boot_id").write_text(BOOT + "\n")
        for _ in range(2):
            agent, fake = start(sc, path, proc)
            assert maxima(agent.sample()["gpus"][0]) == (1980, 3201, 5, 16)
            assert fixed_calls(fake) == 8
        assert not path.exists()
    assert not list((tmp_path / "proc-ok").parent.glob("**/*.tmp"))


def test_the_console_starts_the_agent_with_the_file_in_its_bundle_folder() -> None:
    argv = agent_argv(2.0, folder=".cache/gpuconsole/agent/0123456789abcdef")
    assert argv[-2:] == ["--boot-fixed-cache", BOOT_FIXED_FILE]
    opts = agent_mod._parse_fast(argv[5:])  # what the agent reads after its folder
    assert opts is not None and opts.boot_fixed_cache == "boot-fixed.txt"
    assert opts.interval == 2.0
    assert "--boot-fixed-cache" not in agent_argv(2.0, replay="/tmp/trace.jsonl")


DEVICE = Path(__file__).resolve().parents[2] / "tests" / "data" / "device" / "agent-bootfixed-h100"


def test_device_record_the_file_written_and_read_on_an_h100() -> None:
    """scripts/device/agent_nvml_ab.py on an H100: a start without the file, the one that
    writes it and the one that reads it gave the same four fields; the file holds the GPU's
    own UUID and bus id (as its records name them) and the driver's version."""
    ab = json.loads((DEVICE / "ab.json").read_text())
    fixed = ab["boot_fixed"]
    assert [r["exit"] for r in fixed["runs"]] == [0, 0, 0] and fixed["agree"] is True
    fields = [r["fields"] for r in fixed["runs"]]
    assert fields[0] == fields[1] == fields[2]
    (gpu,) = fields[0]
    g = ab["runs"][0]["samples"][0]["gpus"][0]
    assert {k: g[k] for k in agent_mod.BOOT_FIXED} == gpu
    head, line = fixed["text"].splitlines()
    driver = ab["runs"][0]["samples"][0]["host"]["driver_version"]
    assert head.startswith("gpuconsole-boot-fixed 1 ") and head.endswith(" " + driver)
    values = " ".join(str(gpu[k]) for k in agent_mod.BOOT_FIXED)
    assert line == f"{g['uuid']} {g['pci_bus_id']} {values}"


def test_device_phases_a_start_with_the_file_asks_no_maximum() -> None:
    """scripts/device/agent_phases.py on the same H100, as before and ``--console`` (the file
    there, no NVML teardown): every run of the first asks nvmlDeviceGetMaxClockInfo twice and
    the maximum PCIe link; no run of the second asks any of them, nor nvmlShutdown."""
    plain = json.loads((DEVICE / "phases.json").read_text())["runs"]
    console = json.loads((DEVICE / "phases-console.json").read_text())["runs"]
    assert len(plain) == len(console) >= 5
    for run in plain:
        assert run["steps"]["nvml nvmlDeviceGetMaxClockInfo"][2] == 2
        assert run["steps"]["nvml nvmlDeviceGetMaxPcieLinkGeneration"][2] == 1
        assert run["steps"]["nvml nvmlShutdown"][2] == 1
    for run in console:
        asked = {k for k in run["steps"] if k.startswith("nvml ")}
        assert not asked & {"nvml " + f for f in (*FIXED_CALLS, "nvmlShutdown")}
        assert run["steps"]["nvml nvmlDeviceGetTotalEccErrors"][2] == 1  # still asked
