"""The Xid path over a real SSH host: the agent shipped as in production, run by the host's
python3, reading its kernel log with a cursor; the console parsing what it ships.

What is real: the OpenSSH test host ``a``, the upload (``deploy_agent``), the agent process and
its kernel log reader, ``/dev/kmsg``, ``journalctl``/``dmesg`` and ``kernel.dmesg_restrict`` on
the host, an unprivileged user (``setpriv`` to uid 65534), the console's FleetState, rows and
text.
What stands in: the test hosts have no GPU and no NVIDIA driver, so NVML is FakeNVML
(tests/fakes/fake_nvml.py, through its pynvml shim) and the kernel log is a file on the host
(``--kernel-log-file``, the agent's test-only source) holding a real kernel log
(tests/data/cases/dmesg-xid/xid-02.txt) that the test appends to between reads.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.fleet.render import render_fleet
from console.fleet.rows import fleet_rows
from console.fleet.state import FleetState
from console.profiles import load_profile_file
from console.session import Session
from remote.telemetry.schema import Sample, read_sample
from remote.telemetry.stream import deploy_agent
from tests.fakes import fake_nvml

from .conftest import CLI

REPO = Path(__file__).resolve().parents[2]
XID_02 = (REPO / "tests" / "data" / "cases" / "dmesg-xid" / "xid-02.txt").read_text()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder the host's processes (also uid 65534) can read: the hosts share this disk."""
    d = Path(tempfile.mkdtemp(prefix="gpuconsole-xidpath-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def test_agent_ships_new_xid_lines_once_over_ssh(cli: CLI, scratch: Path) -> None:
    fake_nvml.write_shim(str(scratch))
    scenario = scratch / "scenario.json"
    scenario.write_text(
        json.dumps(
            {
                "gpus": [
                    {"name": "NVIDIA H200", "pci_bus_id": "00000000:19:00.0"},
                    {"name": "NVIDIA H200", "pci_bus_id": "00000000:0A:00.0"},
                ]
            }
        )
    )
    kmsg = scratch / "kmsg"
    lines = XID_02.splitlines()
    kmsg.write_text("\n".join(lines[:2]) + "\n")  # Xid 31 so far
    session = Session(load_profile_file(cli.profile))
    state = FleetState(["a"])
    shipped: list[str] = []
    try:
        t = await session.connected("a")
        folder = await deploy_agent(t)
        proc = await t.open_process(
            [
                "env",
                f"FAKE_NVML_SCENARIO={scenario}",
                "python3",
                f"{folder}/agent.py",
                "--interval",
                "0.2",
                "--pynvml-dir",
                str(scratch),
                "--kernel-log-file",
                str(kmsg),
                "--kernel-log-every",
                "0.4",
            ]
        )
        try:
            appended = False
            for _ in range(60):
                line = await proc.readline()
                assert line is not None, await proc.stderr()
                s: Sample = read_sample(json.loads(line))
                state.on_sample("a", s)
                kl = s["kernel_log"]
                if kl is not None:
                    assert kl["source"] == "file" and kl["since_boot"] == (not shipped)
                    shipped.extend(kl["lines"])
                if shipped and not appended:  # the halt and its cleanup arrive later
                    with kmsg.open("a") as f:
                        f.write("\n".join(lines[2:]) + "\n")
                    appended = True
                if len(shipped) >= 11:
                    break
        finally:
            await proc.close()
    finally:
        await session.close()
    # every NVRM line once, in order; the unrelated scheduler line filtered on the host
    assert shipped == [ln for ln in lines if "NVRM" in ln]
    (group,) = fleet_rows(state)
    assert [r.xid for r in group.gpus] == [None, "Xid 62 micro-controller halt: reset GPU"]
    assert "a GPU 1: Xid 62 micro-controller halt: reset GPU" in render_fleet(state)


async def test_unprivileged_user_gets_a_reason(cli: CLI, scratch: Path) -> None:
    """The real /dev/kmsg, journalctl and dmesg of the host, read by uid 65534 (no NVML and no
    nvidia-smi there: the agent streams no_driver host samples, as on a host without a driver;
    one here)."""
    shutil.copy(REPO / "remote" / "agent" / "agent.py", scratch / "agent.py")
    os.chmod(scratch / "agent.py", 0o644)
    session = Session(load_profile_file(cli.profile))
    try:
        t = await session.connected("a")
        restrict = (await t.run(["cat", "/proc/sys/kernel/dmesg_restrict"])).stdout.strip()
        # the system python3: root's pyenv shims are not readable by uid 65534
        res = await t.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                str(scratch / "agent.py"),
                "--count",
                "1",
                "--no-stdin-watch",
                "--pynvml-dir",
                str(scratch),
            ],
            timeout=60,
        )
    finally:
        await session.close()
    assert res.returncode == 0, res.stderr
    s = read_sample(json.loads(res.stdout.splitlines()[0]))
    assert s["state"] == "no_driver"
    if restrict == "1":  # /dev/kmsg and dmesg refused to users without CAP_SYSLOG
        assert s["kernel_log"] is None
        why = s["errors"]["kernel_log"]
        assert why.startswith("kernel log unreadable: kmsg: /dev/kmsg: ")
        assert "; journalctl: " in why and "; dmesg: " in why
        assert "Operation not permitted" in why and "kernel.dmesg_restrict=1" in why
    else:  # the host lets anyone read it: /dev/kmsg (or dmesg, or the journal) is the source
        assert s["kernel_log"] is not None and s["kernel_log"]["since_boot"]
        assert "kernel_log" not in s["errors"]
