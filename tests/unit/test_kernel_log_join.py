"""The host's kernel log joins a failed job's diagnosis (remote/kernellog.py,
console/backends/containers.explain_failure), only for the GPUs the failed node's container used.

The kernel logs are real reports (tests/data/cases/dmesg-xid/, tests/data/diagnose/corpus/gpu/)
and so are the training logs (tests/data/cases/torchrun/, a CUDA illegal memory access); no
host or container exists here, so ``FakeTransportServingKernelLog`` answers the commands
(journalctl, dmesg, nvidia-smi, date, /proc files) and ``FakeEngineServingLog`` the container.
The refusals are util-linux's and systemd's own words (as in test_kernel_log_reader.py). A fake
answers a kernel text whatever stamp format the command line asked for: the reader never
depends on it, :func:`remote.telemetry.faults.scan_kernel_log` reads them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import cast

import pytest

from console.backends.containers import KERNEL_MARGIN_S, explain_failure
from console.jobs.status import failure_lines
from console.jobs.store import FailureRecord, NodeRecord
from console.session import Session
from remote import kernellog
from remote.docker import ContainerInfo, gpu_devices_of
from remote.errors import TransportError
from remote.kernellog import (
    KernelLines,
    NodeGpus,
    node_gpus,
    node_kernel_events,
    read_gpu_kernel_lines,
    split_by_gpu,
)
from remote.transport import CommandResult, Transport

DATA = Path(__file__).resolve().parents[1] / "data"
XID_04 = (DATA / "cases" / "dmesg-xid" / "xid-04.txt").read_text()  # 0000:b3:00 off the bus
XID_02 = (DATA / "cases" / "dmesg-xid" / "xid-02.txt").read_text()  # 0000:0a:00 31, 62, 45s
GSP_TWO = (DATA / "diagnose" / "corpus" / "gpu" / "gpu-031.txt").read_text()  # 119 on 2 GPUs
CUDA_LOG = (DATA / "cases" / "torchrun" / "trun-12.txt").read_text()  # illegal memory access

DMESG_EPERM = "dmesg: read kernel buffer failed: Operation not permitted\n"
JOURNAL_HINT = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    "      Pass -q to turn off this notice.\n"
)
NO_JOURNAL = (1, "", "No journal files were found.\n")
NOT_INSTALLED = (127, "", "bash: line 1: nvidia-smi: command not found\n")
NO_ISO = (1, "", "dmesg: unrecognized option '--time-format=iso'\n")

Answer = tuple[int, str, str]


class FakeTransportServingKernelLog:
    """Answers command lines by their first words (the longest scripted prefix wins); a
    prefix scripted with an exception raises it (a command that timed out); records every
    argv. Unscripted commands are "not installed" (127)."""

    name = "h"

    def __init__(self, answers: dict[tuple[str, ...], Answer | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    async def run(
        self, argv: list[str], *, input: bytes | None = None, timeout: float | None = 60.0
    ) -> CommandResult:
        self.calls.append(list(argv))
        best = max((p for p in self.answers if tuple(argv[: len(p)]) == p), key=len, default=None)
        if best is None:
            return CommandResult(127, "", f"bash: line 1: {argv[0]}: command not found\n")
        got = self.answers[best]
        if isinstance(got, Exception):
            raise got
        return CommandResult(*got)

    async def connect(self) -> None:
        return None

    def ran(self, program: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == program]


@dataclass
class _Line:
    text: str


class FakeEngineServingLog:
    """Serves one container: its inspect (with the GPUs it was given) and its log."""

    def __init__(self, log: str, info: ContainerInfo) -> None:
        self._log, self._info = log, info

    async def inspect(self, container_id: str) -> ContainerInfo:
        return self._info

    async def logs(self, container_id: str, *, tail: int | None = None) -> AsyncIterator[_Line]:
        for line in self._log.splitlines()[-(tail or 10**9) :]:
            yield _Line(line)

    async def read_file(self, container_id: str, path: str) -> bytes | None:
        return None


class FakeSessionOfOneHost:
    def __init__(
        self, engine: FakeEngineServingLog, transport: FakeTransportServingKernelLog
    ) -> None:
        self._engine, self._transport = engine, transport

    def engine(self, host: str) -> FakeEngineServingLog:
        return self._engine

    async def connected(self, host: str) -> FakeTransportServingKernelLog:
        return self._transport


def _rfc3339(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _info(devices: str | None) -> ContainerInfo:
    return ContainerInfo(
        id="c0",
        name="j1-n0",
        labels={},
        status="exited",
        exit_code=1,
        started_at=None,
        finished_at=None,
        gpu_devices=devices,
    )


def _node(started_s: float | None, finished_s: float | None) -> NodeRecord:
    return NodeRecord(
        job_id="j1",
        node_rank=0,
        host="h",
        container_name="j1-n0",
        container_id="c0",
        state="failed",
        exit_code=1,
        started_at=_rfc3339(started_s) if started_s is not None else None,
        finished_at=_rfc3339(finished_s) if finished_s is not None else None,
    )


def _smi(*rows: tuple[int, str, str]) -> Answer:
    """nvidia-smi's ``index, uuid, pci.bus_id`` CSV (noheader) for these GPUs."""
    return 0, "".join(f"{i}, {u}, {b}\n" for i, u, b in rows), ""


# 2026-04-26 23:12:26 and 23:13:11: the two GSP timeouts of gpu-031 (stamps without a zone,
# placed in UTC by the fake host's `date +%z`)
GSP_FIRST = datetime(2026, 4, 26, 23, 12, 26, tzinfo=timezone.utc).timestamp()
GSP_GPUS = _smi(
    (5, "GPU-00000000-0000-0000-0000-000000000005", "00000001:6C:00.0"),
    (6, "GPU-00000000-0000-0000-0000-000000000006", "00000001:96:00.0"),
)
CLOCK_UTC: dict[tuple[str, ...], Answer | Exception] = {
    ("date",): (0, f"{int(GSP_FIRST) + 3600} +0000\n", ""),
    ("cat", "/proc/uptime"): (0, "3600000.00 1000.00\n", ""),
}


def _tr(fake: FakeTransportServingKernelLog) -> Transport:
    """The fake where a transport is expected (it answers only ``run``)."""
    return cast(Transport, fake)


def _explain(session: FakeSessionOfOneHost, node: NodeRecord) -> FailureRecord:
    return asyncio.run(explain_failure(cast(Session, session), node))


def _log_only() -> FailureRecord:
    """The failure explained from the log alone (no start time: no kernel read)."""
    t = FakeTransportServingKernelLog({})
    got = _explain(
        FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("0")), t), _node(None, None)
    )
    assert t.calls == []
    return got


def test_xid_on_the_nodes_gpu_is_the_root_and_the_cuda_error_its_consequence() -> None:
    t = FakeTransportServingKernelLog(
        {("journalctl",): (0, GSP_TWO, ""), ("nvidia-smi",): GSP_GPUS}
    )
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("5")), t)
    start, end = GSP_FIRST - 600, GSP_FIRST + 30
    got = _explain(session, _node(start, end))
    assert got["kind"] == "xid"
    assert str(got["reason"]).startswith(
        "Xid 119 (GSP RPC timeout, GSP_RPC_TIMEOUT) on GPU 0001:6c:00"
    )
    consequences = got["consequences"]
    assert any(c.startswith("cuda_illegal_memory_access: ") for c in consequences)
    # the other GPU's timeout is context, never the root
    assert consequences[-1] == (
        "the host logged Xid 119 on 0001:96:00 during the job (not a GPU of this node)"
    )
    assert not any("0001:96:00" in e for e in got["evidence"])
    # the journal was asked for the container's lifetime +- the margin, by argv
    (journal,) = t.ran("journalctl")
    assert journal[:2] == ["journalctl", "-k"]
    since = journal[journal.index("--since") + 1]
    until = journal[journal.index("--until") + 1]
    assert since == f"@{int(start - KERNEL_MARGIN_S)}"
    assert until == f"@{int(end + KERNEL_MARGIN_S) + 1}"
    assert journal[journal.index("-o") + 1] == "short-iso"
    assert t.ran("nvidia-smi") == [
        ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"]
    ]
    assert failure_lines(got)[0].startswith("first failure: node 0 on h, exit code 1: Xid 119")


def test_gpu_off_the_bus_is_the_root_with_all_gpus() -> None:
    # `--gpus all`: every GPU of the host is the node's, no nvidia-smi needed
    t = FakeTransportServingKernelLog({("journalctl",): (0, XID_04, "")})
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("all")), t)
    got = _explain(session, _node(1000.0, 2000.0))
    assert got["kind"] == "gpu_lost"
    assert "0000:b3:00.0" in str(got["reason"])
    assert any(c.startswith("cuda_illegal_memory_access: ") for c in got["consequences"])
    assert t.ran("nvidia-smi") == []


def test_xid_on_another_gpu_is_context_only() -> None:
    t = FakeTransportServingKernelLog(
        {
            ("journalctl",): (0, XID_04, ""),
            ("nvidia-smi",): _smi(
                (0, "GPU-00000000-0000-0000-0000-00000000003b", "00000000:3B:00.0")
            ),
        }
    )
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("0")), t)
    got = _explain(session, _node(1000.0, 2000.0))
    alone = _log_only()
    assert got["kind"] == alone["kind"] == "cuda_illegal_memory_access"
    assert got["consequences"] == [
        *alone.get("consequences", []),
        "the host logged Xid 79 on 0000:b3:00 during the job (not a GPU of this node)",
    ]
    assert {k: v for k, v in got.items() if k != "consequences"} == {
        k: v for k, v in alone.items() if k != "consequences"
    }


def test_unknown_gpus_make_kernel_events_context_and_say_why() -> None:
    t = FakeTransportServingKernelLog(
        {("journalctl",): (0, XID_04, ""), ("nvidia-smi",): NOT_INSTALLED}
    )
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("0")), t)
    got = _explain(session, _node(1000.0, 2000.0))
    assert got["kind"] == "cuda_illegal_memory_access"
    assert got["consequences"][-1] == (
        "the host logged Xid 79 on 0000:b3:00 during the job (which GPUs the node used is "
        "unknown: nvidia-smi: bash: line 1: nvidia-smi: command not found)"
    )


def test_unreadable_kernel_log_gives_the_log_only_diagnosis() -> None:
    t = FakeTransportServingKernelLog(
        {
            ("journalctl",): (0, "-- No entries --\n", JOURNAL_HINT),
            ("dmesg",): (1, "", DMESG_EPERM),
            ("cat", "/proc/sys/kernel/dmesg_restrict"): (0, "1\n", ""),
            ("nvidia-smi",): GSP_GPUS,
        }
    )
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("5")), t)
    assert _explain(session, _node(1000.0, 2000.0)) == _log_only()
    # the plain dmesg is not tried after a refusal; the reason names both answers
    assert t.ran("dmesg") == [["dmesg", "--time-format=iso"]]
    got = asyncio.run(read_gpu_kernel_lines(_tr(t), 1000.0, 2000.0))
    assert got.lines == () and got.source is None
    assert got.reason is not None
    assert got.reason.startswith(
        "kernel log unreadable: journalctl: Hint: You are currently "
        "not seeing messages from other users and the system.; dmesg: "
        "read kernel buffer failed: Operation not permitted "
        "(kernel.dmesg_restrict=1"
    )


def test_dmesg_window_keeps_only_the_events_in_it() -> None:
    # no journal, a dmesg without --time-format (seconds since boot): boot at 1e6 (host clock)
    t = FakeTransportServingKernelLog(
        {
            ("journalctl",): NO_JOURNAL,
            ("dmesg", "--time-format=iso"): NO_ISO,
            ("dmesg",): (0, XID_02, ""),
            ("date",): (0, "1010000 +0000\n", ""),
            ("cat", "/proc/uptime"): (0, "10000.00 1.00\n", ""),
        }
    )
    boot = 1_000_000.0
    got = asyncio.run(read_gpu_kernel_lines(_tr(t), boot + 14300, boot + 14371))
    assert got.source == "dmesg" and got.reason is None
    kept = "\n".join(got.lines)
    assert "): 31, pid=13332" in kept and "): 62, pid=" in kept and "Ch 00000008" in kept
    assert "Ch 00000009" not in kept and "Ch 0000000f" not in kept
    assert got.outside == 7  # the later Xid 45 lines
    assert "NVRM: GPU at PCI:0000:0a:00" in kept  # not an event: kept for the bus -> UUID map
    # a window before every event: nothing is the node's
    early = asyncio.run(read_gpu_kernel_lines(_tr(t), boot + 1000, boot + 2000))
    assert split_by_gpu(early, NodeGpus((), all_gpus=True)).own_lines == ()
    assert early.outside == 10


def test_window_places_zone_less_stamps_with_the_hosts_zone() -> None:
    t = FakeTransportServingKernelLog(
        {
            ("journalctl",): NO_JOURNAL,
            ("dmesg", "--time-format=iso"): NO_ISO,
            ("dmesg",): (0, GSP_TWO, ""),
            **CLOCK_UTC,
        }
    )
    got = asyncio.run(read_gpu_kernel_lines(_tr(t), GSP_FIRST - 5, GSP_FIRST + 5))
    split = split_by_gpu(got, NodeGpus((), all_gpus=True))
    assert [ln for ln in split.own_lines if "NVRM: Xid (" in ln] == [
        ln for ln in GSP_TWO.splitlines() if "Xid (PCI:0001:6c:00): 119" in ln
    ]
    # the driver's "GSP Timeout" banner above it is part of that event, in the window with it
    assert [ln for ln in split.own_lines if "GSP Timeout" in ln] == [GSP_TWO.splitlines()[0]]
    assert got.outside == 1
    # the same stamps, the host 2 h east of UTC: 23:12:26 there is 21:12:26Z, out of window
    t.answers[("date",)] = (0, f"{int(GSP_FIRST)} +0200\n", "")
    east = asyncio.run(read_gpu_kernel_lines(_tr(t), GSP_FIRST - 5, GSP_FIRST + 5))
    assert east.outside == 2 and not any("NVRM: Xid (" in ln for ln in east.lines)


def test_explain_with_a_window_before_the_xid_is_the_log_only_diagnosis() -> None:
    t = FakeTransportServingKernelLog(
        {
            ("journalctl",): NO_JOURNAL,
            ("dmesg", "--time-format=iso"): NO_ISO,
            ("dmesg",): (0, GSP_TWO, ""),
            ("nvidia-smi",): GSP_GPUS,
            **CLOCK_UTC,
        }
    )
    session = FakeSessionOfOneHost(FakeEngineServingLog(CUDA_LOG, _info("5")), t)
    got = _explain(session, _node(GSP_FIRST - 7200, GSP_FIRST - 3600))
    assert got == _log_only()


def test_limit_and_journal_without_kernel_lines() -> None:
    t = FakeTransportServingKernelLog({("journalctl",): (0, XID_02, "")})
    got = asyncio.run(read_gpu_kernel_lines(_tr(t), 0.0, 1.0, limit=3))
    assert got.lines == tuple(XID_02.splitlines()[:3])
    assert got.dropped == len([ln for ln in XID_02.splitlines() if "NVRM" in ln]) - 3
    # a journal with kernel messages but no NVRM line in the window: read, nothing found
    quiet = FakeTransportServingKernelLog(
        {
            ("journalctl",): (
                0,
                "2026-12-01T10:35:28+0000 h kernel: docker0: port 1(veth6d355c9) entered "
                "disabled state\n",
                "",
            )
        }
    )
    got = asyncio.run(read_gpu_kernel_lines(_tr(quiet), 0.0, 1.0))
    assert (got.lines, got.source, got.reason) == ((), "journalctl", None)
    assert quiet.ran("dmesg") == []


def test_commands_that_time_out_are_a_reason_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = TransportError("h", "`journalctl -k` timed out after 5.0 s")
    t = FakeTransportServingKernelLog(
        {("journalctl",): slow, ("dmesg",): TransportError("h", "`dmesg` timed out")}
    )
    got = asyncio.run(read_gpu_kernel_lines(_tr(t), 0.0, 1.0))
    assert got.reason == (
        "kernel log unreadable: journalctl: host h: `journalctl -k` timed "
        "out after 5.0 s; dmesg: host h: `dmesg` timed out"
    )

    class FakeTransportThatHangs(FakeTransportServingKernelLog):
        async def run(
            self, argv: list[str], *, input: bytes | None = None, timeout: float | None = 60.0
        ) -> CommandResult:
            await asyncio.sleep(10)
            raise AssertionError("not reached")

    monkeypatch.setattr(kernellog, "KERNEL_READ_BUDGET_S", 0.2)
    hung = asyncio.run(node_kernel_events(_tr(FakeTransportThatHangs({})), "all", 0.0, 1.0))
    assert hung.reason == "kernel log unreadable: no answer within 0.2 s"
    assert hung.own_lines == () and hung.context == ()


def test_node_gpus_from_indices_uuids_and_mig() -> None:
    t = FakeTransportServingKernelLog({("nvidia-smi",): GSP_GPUS})
    run = asyncio.run
    assert run(node_gpus(_tr(t), "6")).bus_ids == ("00000001:96:00.0",)
    by_uuid = run(node_gpus(_tr(t), "GPU-00000000-0000-0000-0000-000000000005"))
    assert by_uuid.bus_ids == ("00000001:6C:00.0",)
    assert run(node_gpus(_tr(t), "5:1")).bus_ids == ("00000001:6C:00.0",)
    missing = run(node_gpus(_tr(t), "7"))
    assert missing.bus_ids is None
    assert missing.reason == "device 7 is not among the GPUs nvidia-smi lists"
    assert run(node_gpus(_tr(t), "none")).bus_ids == ()
    assert run(node_gpus(_tr(t), None)).bus_ids is None
    assert len(t.ran("nvidia-smi")) == 4


def test_split_keeps_the_events_of_the_nodes_gpu_only() -> None:
    # gpu-031: a GSP timeout on 0001:6c:00 and one on 0001:96:00; the node owns the second
    got = split_by_gpu(
        KernelLines(lines=tuple(GSP_TWO.splitlines()), source="x"), NodeGpus(("00000001:96:00.0",))
    )
    assert [ln for ln in got.own_lines if "NVRM: Xid (" in ln] == [
        ln for ln in GSP_TWO.splitlines() if "Xid (PCI:0001:96:00)" in ln
    ]
    assert sum("GSP Timeout" in ln for ln in got.own_lines) == 1  # its banner, not the other's
    assert got.context == (
        "the host logged Xid 119 on 0001:6c:00 during the job (not a GPU of this node)",
    )


def test_gpu_devices_from_docker_inspect() -> None:
    def req(**kw: object) -> dict[str, object]:
        return {
            "HostConfig": {
                "Runtime": "runc",
                "DeviceRequests": [{"Driver": "", "Capabilities": [["gpu"]], **kw}],
            }
        }

    assert gpu_devices_of(req(DeviceIDs=["0", "3"], Count=0)) == "0,3"
    assert gpu_devices_of(req(DeviceIDs=None, Count=-1)) == "all"
    assert gpu_devices_of(req(DeviceIDs=None, Count=2)) == "0,1"
    cdi = {
        "HostConfig": {
            "DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=1"], "Count": 0}]
        }
    }
    assert gpu_devices_of(cdi) == "1"
    env = {
        "HostConfig": {"Runtime": "nvidia"},
        "Config": {"Env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=2,5"]},
    }
    assert gpu_devices_of(env) == "2,5"
    assert (
        gpu_devices_of(
            {"HostConfig": {"Runtime": "runc"}, "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
        )
        == "none"
    )
    assert (
        gpu_devices_of(
            {
                "HostConfig": {
                    "Runtime": "runc",
                    "Devices": [{"PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0"}],
                }
            }
        )
        is None
    )
