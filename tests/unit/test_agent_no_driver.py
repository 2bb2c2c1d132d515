"""A host without an NVIDIA driver is still a host: the agent streams host samples.

Where NVML cannot be loaded and ``nvidia-smi`` is not on PATH either (nothing could read the
GPUs), the agent does not exit 3 (which sent the console to the nvidia-smi fallback, which
failed, and the host's stream restarted every 10 s with ``seq 0`` and no CPU %): it streams
one sample per interval with zero GPUs, state ``no_driver`` and the NVML reason, CPU % from
the second sample on. Where ``nvidia-smi`` exists the old hand-over stands (one
``nvml_unavailable`` sample, exit 3: ``tests/unit/test_agent.py``, with a stand-in
``nvidia-smi`` on PATH).

What is real: the agent as a process, with the repo's nvidia-ml-py ``pynvml.py`` next to it
(what the console uploads) on this machine, which has no NVIDIA driver; the console's
``host_samples`` over :class:`LocalTransport` (the same start command as over SSH, the bundle
under a temporary ``$HOME``). What stands in: ``FakeNVML`` (tests/fakes/fake_nvml.py) where a
driver must appear later or a kernel module must be present, and ``FakeAgentProcess`` where
the console must see an agent that streams ``nvml_unavailable`` samples (a host whose kernel
module is loaded but whose user-space driver is missing: not reproducible here).
"""

from __future__ import annotations

import asyncio
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from console.fleet.rows import fleet_rows
from console.fleet.state import FleetState
from remote.agent import agent as agent_mod
from remote.telemetry.schema import Sample, read_sample
from remote.telemetry.stream import PHASE_SMI_FALLBACK, host_samples
from remote.transport import LocalTransport
from tests.fakes.fake_nvml import FakeNVML

ROOT = Path(__file__).resolve().parents[2]
AGENT_PY = ROOT / "remote" / "agent" / "agent.py"
#: PATH for the agent: the system's folders, where nvidia-smi would be
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: what the repo's pynvml says when libnvidia-ml.so.1 is missing
NVML_MISSING = "libnvidia-ml.so.1 could not be loaded (NVML Shared Library Not Found)"
NO_DRIVER = f"no NVIDIA driver: nvidia-smi not found (NVML: {NVML_MISSING})"

no_driver_here = pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None
    or shutil.which("nvidia-smi", path=SYSTEM_PATH) is not None
    or shutil.which("nvidia-smi") is not None,
    reason="this machine has an NVIDIA driver (libnvidia-ml or nvidia-smi)",
)


def upload(work: Path) -> Path:
    """``agent.py`` and the repo's ``pynvml.py`` in one folder, as the console uploads them."""
    import pynvml

    work.mkdir()
    (work / "agent.py").write_bytes(AGENT_PY.read_bytes())
    (work / "pynvml.py").write_bytes(Path(pynvml.__file__).read_bytes())
    return work


# ---------------------------------------------------------------------------------------------
# the real agent, as a process, on this machine (no driver)


@no_driver_here
def test_real_agent_without_driver_streams_host_samples(tmp_path: Path) -> None:
    work = upload(tmp_path / "upload")
    proc = subprocess.Popen(
        [sys.executable, "agent.py", "--interval", "0.3"],
        cwd=work,
        env=dict(os.environ, PATH=SYSTEM_PATH),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    guard = threading.Timer(30, proc.kill)  # a hung agent fails the test, never hangs it
    guard.start()
    try:
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        samples = []
        for _ in range(5):
            line = proc.stdout.readline()
            assert line, f"the agent ended (status {proc.wait()}): {proc.stderr.read()!r}"
            samples.append(read_sample(json.loads(line)))
        assert proc.poll() is None  # still streaming: no exit 3, no hand-over
        proc.stdin.close()
        rc = proc.wait(timeout=5)
        err = proc.stderr.read()
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    assert rc == 0 and err == b""
    assert [s["seq"] for s in samples] == [0, 1, 2, 3, 4]
    for s in samples:
        assert (s["source"], s["state"], s["state_detail"]) == ("nvml", "no_driver", NO_DRIVER)
        assert s["gpus"] == [] and s["processes"] is None
        assert s["errors"]["processes"] == NO_DRIVER
        assert s["host"]["mem_total_mib"] is not None and s["host"]["mem_total_mib"] > 0
        assert s["host"]["driver_version"] is None
        assert s["host"]["errors"]["driver_version"] == NO_DRIVER
    for s in samples[1:]:  # after the first interval: CPU % over that interval
        cpu = s["host"]["cpu_pct"]
        assert isinstance(cpu, float) and 0.0 <= cpu <= 100.0, s["host"]
        assert "cpu_pct" not in s["host"]["errors"]
    # one per interval, not one per restart
    assert samples[4]["host_time"] - samples[1]["host_time"] == pytest.approx(0.9, abs=0.3)


# ---------------------------------------------------------------------------------------------
# the agent's states without nvidia-smi (in process, FakeNVML)


def proc_root(tmp_path: Path, kernel_module: bool) -> Path:
    """A ``/proc`` stand-in: ``stat`` and ``meminfo`` for the host fields, and
    ``driver/nvidia/version`` when the NVIDIA kernel module is to look loaded."""
    root = tmp_path / "proc"
    root.mkdir()
    shutil.copy("/proc/stat", root / "stat")
    shutil.copy("/proc/meminfo", root / "meminfo")
    if kernel_module:
        (root / "driver" / "nvidia").mkdir(parents=True)
        (root / "driver" / "nvidia" / "version").write_text(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n"
        )
    return root


def test_driver_installed_later_is_picked_up(tmp_path: Path) -> None:
    fake = FakeNVML(
        {
            "init_error": "LibraryNotFound",
            "gpus": [{"name": "NVIDIA H200", "pci_bus_id": "00000000:19:00.0"}],
        }
    )
    agent = agent_mod.Agent(
        fake, 1.0, slow_every=3, proc_root=str(proc_root(tmp_path, kernel_module=False))
    )
    assert agent.state == "nvml_unavailable"
    agent.without_nvidia_smi()
    first = [agent.sample() for _ in range(3)]
    assert [(s["state"], s["state_detail"]) for s in first] == [("no_driver", NO_DRIVER)] * 3
    fake.scenario["init_error"] = None  # the driver was installed meanwhile
    s = agent.sample()  # seq 3: nvmlInit asked again
    assert s["state"] == "ok" and [g["name"] for g in s["gpus"]] == ["NVIDIA H200"]


def test_kernel_module_without_user_space_driver_is_nvml_unavailable(tmp_path: Path) -> None:
    agent = agent_mod.Agent(
        FakeNVML({"init_error": "LibraryNotFound"}),
        1.0,
        slow_every=2,
        proc_root=str(proc_root(tmp_path, kernel_module=True)),
    )
    agent.without_nvidia_smi()
    states = {(s["state"], s["state_detail"]) for s in (agent.sample() for _ in range(4))}
    assert states == {
        (
            "nvml_unavailable",
            f"{NVML_MISSING}; nvidia-smi not found either, "
            "although the NVIDIA kernel module is loaded "
            "(/proc/driver/nvidia/version): the driver's user-space part "
            "(libnvidia-ml.so.1, nvidia-smi) is missing",
        )
    }  # retries included
    assert agent.seq == 4


# ---------------------------------------------------------------------------------------------
# the console's side: host_samples keeps a streaming agent


@no_driver_here
async def test_host_samples_over_the_real_start_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the bundle goes under it, as on a host
    phases: list[str] = []
    got: list[Sample] = []

    async def take(n: int) -> None:
        stream = host_samples(LocalTransport("local"), 0.3, on_phase=phases.append)
        try:
            async for s in stream:
                got.append(s)
                if len(got) == n:
                    return
        finally:
            await stream.aclose()

    await asyncio.wait_for(take(4), 60)
    assert [s["seq"] for s in got] == [0, 1, 2, 3]
    assert {(s["state"], s["state_detail"]) for s in got} == {("no_driver", NO_DRIVER)}
    assert all(s["host"]["cpu_pct"] is not None for s in got[1:])
    assert PHASE_SMI_FALLBACK not in phases
    # the fleet shows it as a host with CPU %, not "via nvidia-smi"
    state = FleetState(["local"])
    for s in got:
        state.on_sample("local", s)
    (group,) = fleet_rows(state)
    row = group.host
    assert (row.problem, row.cpu_pct is not None, row.source, row.gpu_count) == (
        "no_driver",
        True,
        None,
        None,
    )


class FakeAgentProcess:
    """An agent's process as ``host_samples`` sees it: ``lines``, then its exit ``rc``."""

    def __init__(self, lines: list[str], rc: int) -> None:
        self.lines = list(lines)
        self.rc = rc

    async def readline(self) -> str | None:
        return self.lines.pop(0) if self.lines else None

    async def wait(self) -> int:
        return self.rc

    async def stderr(self) -> str:
        return ""

    async def close(self) -> None:
        pass


class FakeTransport:
    """Hands out one :class:`FakeAgentProcess`; a second process (the fallback) is refused."""

    name = "h"

    def __init__(self, proc: FakeAgentProcess) -> None:
        self.procs = [proc]

    async def open_process(self, argv: list[str]) -> FakeAgentProcess:
        assert self.procs, f"no fallback expected: {argv[:3]}"
        return self.procs.pop()


def nvml_unavailable_line(seq: int) -> str:
    s: dict[str, Any] = agent_mod.empty_sample("nvml", seq, 1.0 + seq, 1.0)
    s["state"], s["state_detail"] = "nvml_unavailable", "kernel module loaded, no NVML"
    s["errors"]["processes"] = s["state_detail"]
    return json.dumps(s)


async def test_a_streaming_nvml_unavailable_agent_is_not_held_back() -> None:
    t = FakeTransport(FakeAgentProcess([nvml_unavailable_line(i) for i in range(3)], rc=0))
    got = [s async for s in host_samples(t, 1.0)]  # type: ignore[arg-type]
    assert [(s["seq"], s["state"]) for s in got] == [(i, "nvml_unavailable") for i in range(3)]
