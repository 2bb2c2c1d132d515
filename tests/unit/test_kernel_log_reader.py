"""The agent's kernel log reader (remote/agent/agent.py KernelLogReader) and the console side
of the Xid path (FleetState -> rows -> top/gpus text and JSON).

``FakeRunner`` stands in for running journalctl/dmesg: it answers with text built from the
real kernel logs in tests/data/cases/dmesg-xid/ (what dmesg would print as the ring buffer
fills), and with util-linux's and systemd's own refusal messages. ``FakeNVML`` is the named
stand-in for pynvml (tests/fakes/fake_nvml.py). tests/integration/test_xid_path.py runs the
reader on a real host.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from console.diagnosis import diagnose
from console.fleet.render import render_fleet
from console.fleet.rows import fleet_rows
from console.fleet.state import FleetState
from remote.agent.agent import KMSG_PATH, Agent, KernelLogReader, kmsg_lines, nvrm_lines
from remote.telemetry.faults import pci_key, scan_kernel_log
from remote.telemetry.schema import read_sample
from remote.telemetry.xid_catalog import ACTION_TEXT
from tests.fakes.fake_nvml import FakeNVML

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "dmesg-xid"
# util-linux dmesg and systemd journalctl, as they refuse a user without the rights
DMESG_EPERM = "dmesg: read kernel buffer failed: Operation not permitted\n"
JOURNAL_HINT = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    "      Pass -q to turn off this notice.\n"
)


def case(name: str) -> str:
    return (CASES / f"{name}.txt").read_text()


class FakeRunner:
    """Answers journalctl/dmesg command lines from scripted (rc, stdout, stderr) per program;
    records every argv."""

    def __init__(self, **answers: tuple[int, str, str]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], (127, "", f"{argv[0]}: not installed"))


def kmsg_refused(path: str, flags: int) -> int:
    """``open("/dev/kmsg")`` as the kernel answers it under ``kernel.dmesg_restrict=1`` for a
    user without CAP_SYSLOG (devkmsg_open -> check_syslog_permissions: EPERM)."""
    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_nvrm_lines_keep_messages_whole() -> None:
    text = case("xid-02") + case("xid-04")
    kept = nvrm_lines(text.splitlines())
    assert "sched: RT throttling activated" not in "\n".join(kept)
    assert len(kept) == len(text.splitlines()) - 1  # every other line is NVRM or its continuation
    assert kept[-5:-2] == case("xid-04").splitlines()[:3]  # continuation lines follow their head


def test_dmesg_cursor_no_repeats_no_loss(tmp_path: Path) -> None:
    """The ring buffer grows between two reads: the second read ships only the new lines."""
    full = case("xid-02")
    lines = full.splitlines()
    no_journal = (1, "", "No journal files were found.\n")
    run = FakeRunner(journalctl=no_journal, dmesg=(0, "\n".join(lines[:4]) + "\n", ""))
    clock = Clock()
    r = KernelLogReader(every_s=10, run=run, clock=clock, kmsg_path=None)
    assert r.due()
    first = r.read()
    assert first is not None and first["source"] == "dmesg" and first["since_boot"]
    assert first["lines"] == lines[:4] and not first["gap"]
    assert not r.due()
    clock.t = 10.0
    run.answers["dmesg"] = (0, full, "")
    second = r.read()
    assert second is not None and not second["since_boot"] and not second["gap"]
    new = [ln for ln in lines[4:] if "NVRM" in ln]
    assert second["lines"] == new
    assert first["lines"] + second["lines"] == [ln for ln in lines if "NVRM" in ln]
    # nothing new: nothing shipped; dmesg stays the source (journalctl is not asked again)
    calls = len(run.calls)
    third = r.read()
    assert third is not None and third["lines"] == [] and run.calls[calls:] == [["dmesg"]]


def test_dmesg_same_stamp_and_wrapped_buffer() -> None:
    msg = "[  100.000001] NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch "
    two = f"{msg}00000008\n{msg}00000009\n"
    run = FakeRunner(journalctl=(1, "", "No journal files were found.\n"), dmesg=(0, two, ""))
    r = KernelLogReader(run=run, clock=Clock(), kmsg_path=None)
    assert r.read() is not None
    run.answers["dmesg"] = (0, two + f"{msg}0000000a\n", "")  # a third line, same stamp
    got = r.read()
    assert got is not None and got["lines"] == [f"{msg}0000000a"]
    # the buffer wrapped past the cursor: what is left is shipped, flagged as a gap
    later = case("xid-02").splitlines()[-1]  # stamp 14397.3 > 100.0
    run.answers["dmesg"] = (0, later + "\n", "")
    got = r.read()
    assert got is not None and got["gap"] and got["lines"] == [later]


def test_journalctl_cursor() -> None:
    lines = [
        f"[14328.198504] gpu-node-01 kernel: {ln.split('] ', 1)[1]}"
        for ln in case("xid-02").splitlines()
    ]  # the short-monotonic spelling
    out1 = "\n".join(lines[:3]) + "\n-- cursor: s=aa;i=1\n"
    run = FakeRunner(journalctl=(0, out1, ""))
    r = KernelLogReader(run=run, clock=Clock(), kmsg_path=None)
    first = r.read()
    assert first is not None and first["source"] == "journalctl" and first["lines"] == lines[:3]
    assert run.calls[0][:3] == ["journalctl", "-k", "-b"]
    assert not any(a.startswith("--after-cursor") for a in run.calls[0])
    run.answers["journalctl"] = (0, "\n".join(lines[3:]) + "\n-- cursor: s=aa;i=2\n", "")
    second = r.read()
    assert "--after-cursor=s=aa;i=1" in run.calls[1]
    assert second is not None and not second["since_boot"]
    assert second["lines"] == [ln for ln in lines[3:] if "NVRM" in ln]
    run.answers["journalctl"] = (0, "-- No entries --\n", "")  # nothing new, no new cursor
    assert r.read() == {
        "source": "journalctl",
        "lines": [],
        "since_boot": False,
        "dropped": 0,
        "gap": False,
    }
    r.read()
    assert "--after-cursor=s=aa;i=2" in run.calls[3]


def test_permission_denied_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    restrict = tmp_path / "dmesg_restrict"
    restrict.write_text("1\n")
    run = FakeRunner(journalctl=(0, "-- No entries --\n", JOURNAL_HINT), dmesg=(1, "", DMESG_EPERM))
    reader = KernelLogReader(
        run=run, clock=Clock(), restrict_path=str(restrict), open_fd=kmsg_refused
    )
    agent = Agent(FakeNVML({"gpus": [{}]}), kernel_log=reader)
    s = agent.sample()
    assert s["kernel_log"] is None and s["state"] == "ok"
    why = s["errors"]["kernel_log"]
    assert why.startswith(
        "kernel log unreadable: kmsg: /dev/kmsg: Operation not permitted; "
        "journalctl: Hint: You are currently not "
        "seeing messages from other users and the system.; "
    )
    assert "; dmesg: read kernel buffer failed: Operation not permitted" in why
    assert "kernel.dmesg_restrict=1" in why
    s2 = agent.sample()  # not due: still says why
    assert s2["kernel_log"] is None and s2["errors"]["kernel_log"] == why
    state = FleetState(["h"])
    state.on_sample("h", read_sample(s))
    assert state.hosts["h"].kernel_log_error == why
    assert "h: Xids from NVML events only: kernel log unreadable" in render_fleet(state)
    assert state.snapshot()["hosts"][0]["kernel_log"] == {"source": None, "error": why}


def test_file_source_offsets(tmp_path: Path) -> None:
    f = tmp_path / "kmsg"
    lines = case("xid-02").splitlines()
    f.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])  # the last line half written
    r = KernelLogReader(file=str(f), clock=Clock())
    got = r.read()
    assert got is not None and got["source"] == "file" and got["lines"] == lines[:2]
    with f.open("a") as fh:
        fh.write(lines[2][30:] + "\n")
    got = r.read()
    assert got is not None and got["lines"] == [lines[2]] and not got["since_boot"]
    f.write_text(lines[0] + "\n")  # replaced by a shorter file
    got = r.read()
    assert got is not None and got["since_boot"] and got["gap"] and got["lines"] == [lines[0]]
    f.unlink()
    assert r.read() is None and r.error is not None and "No such file" in r.error


# -- /dev/kmsg ---------------------------------------------------------------------------------
# Records in the format of Documentation/ABI/testing/dev-kmsg: "prio,seq,usec,flags;text\n",
# non-printable bytes and "\\" escaped as \\xNN, dictionary lines after it starting with a space.


def kmsg_records(text: str, first_seq: int = 1) -> list[bytes]:
    """The records the kernel held for a dmesg text (a message: a stamped line and the
    indented lines under it, which the kernel holds as one text with \\x0a escapes)."""
    messages: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        if line[:1].isspace() and messages:
            messages[-1][1].append(line.strip())
            continue
        stamp, _, msg = line.partition("] ")
        whole, _, frac = stamp.lstrip("[ ").partition(".")
        messages.append((int(whole) * 1_000_000 + int(frac), [msg]))
    newline = "\\x0a"  # the kernel's escape of a newline inside one record
    return [
        f"4,{first_seq + i},{usec},-;{newline.join(msg)}\n SUBSYSTEM=pci\n".encode()
        for i, (usec, msg) in enumerate(messages)
    ]


def test_kmsg_record_as_dmesg_prints_it() -> None:
    """Each record as dmesg prints it, the NVRM lines of real reports byte for byte."""
    for name in ("xid-02", "xid-04"):
        text = case(name)
        got = [ln for rec in kmsg_records(text) for ln in kmsg_lines(rec)]
        assert got == text.splitlines()
    # the kernel's own example (dev-kmsg), and its escapes: "\\" itself, ESC, a stray "\\x"
    doc = (
        b"7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] "
        b"(ignored)\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n"
    )
    assert kmsg_lines(doc) == [
        "[    0.424069] pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)"
    ]
    assert kmsg_lines(b"6,3,12345678901,c;a\\x5cb \\x1b[0m \\x5cxzz \\xzz\n") == [
        "[12345.678901] a\\b \x1b[0m \\xzz \\xzz"
    ]
    assert kmsg_lines(b"no header here\n") == [] and kmsg_lines(b"6,1,x,-;text\n") == []


class FakeKmsg:
    """Stands in for /dev/kmsg's reads: scripted records, an exception where the kernel
    answers with one (EPIPE: overwritten before read), EAGAIN once nothing is left. The file
    descriptor is a real one (/dev/null) so that closing it is real."""

    def __init__(self) -> None:
        self.queue: list[bytes | OSError] = []
        self.opened: list[int] = []

    def open(self, path: str, flags: int) -> int:
        assert flags & os.O_NONBLOCK and flags & os.O_CLOEXEC
        fd = os.open(os.devnull, os.O_RDONLY)
        self.opened.append(fd)
        return fd

    def read(self, fd: int, n: int) -> bytes:
        assert fd == self.opened[-1] and n >= 8192
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        item = self.queue.pop(0)
        if isinstance(item, OSError):
            raise item
        return item


def test_kmsg_source_keeps_its_position_and_says_gap() -> None:
    """No program is started; the device stays open, each read goes on where the last ended;
    records overwritten before they were read (EPIPE) make a gap."""
    lines = case("xid-02").splitlines()
    records = kmsg_records(case("xid-02"))
    fake = FakeKmsg()
    fake.queue = records[:4]
    run = FakeRunner()
    clock = Clock()
    r = KernelLogReader(run=run, clock=clock, open_fd=fake.open, read_fd=fake.read)
    first = r.read()
    assert first == {
        "source": "kmsg",
        "lines": lines[:4],
        "since_boot": True,
        "dropped": 0,
        "gap": False,
    }
    assert run.calls == [] and len(fake.opened) == 1
    clock.t = 10.0
    fake.queue = [BrokenPipeError(errno.EPIPE, "Broken pipe"), *records[5:]]
    second = r.read()
    assert second is not None and second["gap"] and not second["since_boot"]
    assert second["lines"] == [ln for ln in lines[5:] if "NVRM" in ln]  # sched: line left out
    assert r.read() == {**first, "lines": [], "since_boot": False}
    assert len(fake.opened) == 1 and run.calls == []
    fd = fake.opened[0]
    r.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_kmsg_read_error_falls_back_to_the_programs() -> None:
    fake = FakeKmsg()
    fake.queue = [OSError(errno.EIO, "Input/output error")]
    run = FakeRunner(
        journalctl=(1, "", "No journal files were found.\n"), dmesg=(0, case("xid-02"), "")
    )
    r = KernelLogReader(run=run, clock=Clock(), open_fd=fake.open, read_fd=fake.read)
    got = r.read()
    assert got is not None and got["source"] == "dmesg" and len(got["lines"]) == 11
    with pytest.raises(OSError):
        os.fstat(fake.opened[0])  # closed: the next read opens it again
    assert r.read() is not None and len(fake.opened) == 1  # dmesg stays first while it works


def test_real_kmsg_reads_what_dmesg_prints() -> None:
    """This machine's own /dev/kmsg, every record (not only NVRM), against util-linux dmesg
    run right after: each one-line record reads as the line dmesg prints for it."""
    try:
        fd = os.open(KMSG_PATH, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        pytest.skip(f"{KMSG_PATH} cannot be read here: {e.strerror}")
    mine: list[str] = []
    try:
        while True:
            try:
                rec = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue
            if b"\\x0a" not in rec.partition(b"\n")[0]:
                mine.extend(kmsg_lines(rec))
    finally:
        os.close(fd)
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    assert mine and set(mine) <= set(dmesg.splitlines())
    assert all(re.match(r"^\[ *\d+\.\d{6}\] ", ln) for ln in mine)


def agent_with_log(f: Path, text: str, buses: list[str]) -> tuple[Agent, Clock]:
    """An agent over FakeNVML GPUs at ``buses`` whose kernel log is the file ``f``."""
    f.write_text(text)
    nv = FakeNVML({"gpus": [{"pci_bus_id": b, "name": "NVIDIA H200"} for b in buses]})
    clock = Clock()
    return Agent(nv, kernel_log=KernelLogReader(file=str(f), clock=clock)), clock


def test_sample_to_fleet_rows_and_text(tmp_path: Path) -> None:
    """xid-02 on GPU 1 of a two-GPU host: the row shows Xid 62 and its action, not the 45s."""
    buses = ["00000000:19:00.0", "00000000:0A:00.0"]
    agent, _ = agent_with_log(tmp_path / "kmsg", case("xid-02"), buses)
    s = json.loads(json.dumps(agent.sample()))  # as it travels
    assert s["kernel_log"]["since_boot"] and len(s["kernel_log"]["lines"]) == 11
    state = FleetState(["h"])
    state.on_sample("h", s)
    (group,) = fleet_rows(state)
    g0, g1 = group.gpus
    assert (g0.xid, g0.xid_severe) == (None, False)
    assert (g1.xid, g1.xid_code, g1.xid_severe) == (
        "Xid 62 micro-controller halt: reset GPU",
        62,
        True,
    )
    text = render_fleet(state)
    assert "h GPU 1: Xid 62 micro-controller halt: reset GPU" in text
    (x,) = state.snapshot()["hosts"][0]["xids"]
    assert (x["gpu_index"], x["xid"], x["action"], x["verdict"]) == (
        1,
        62,
        "reset_gpu",
        "needs_reset",
    )
    assert x["counts"] == {"31": 1, "62": 1, "45": 8}
    # the next sample carries nothing new; a new agent re-reads the boot: no double count
    state.on_sample("h", json.loads(json.dumps(agent.sample())))
    again, _ = agent_with_log(tmp_path / "kmsg2", case("xid-02"), buses)
    state.on_sample("h", json.loads(json.dumps(again.sample())))
    assert len(state.hosts["h"].xid_events) == 10


def test_lost_gpu_keeps_its_index(tmp_path: Path) -> None:
    """xid-04: the GPU at b3:00.0 was GPU 1; after it fell off the bus the sample lists one
    GPU, and its Xid 79 still reads as GPU 1 with 'reboot'."""
    f = tmp_path / "kmsg"
    agent, clock = agent_with_log(f, "", ["00000000:19:00.0", "00000000:B3:00.0"])
    state = FleetState(["h"])
    state.on_sample("h", read_sample(agent.sample()))
    f.write_text(case("xid-04"))
    clock.t = 10.0  # the next read is due
    lost = read_sample(json.loads(json.dumps(agent.sample())))
    lost["gpus"] = lost["gpus"][:1]  # the driver no longer lists it
    state.on_sample("h", lost)
    text = render_fleet(state)
    assert "h GPU 1: Xid 79 fallen off the bus: reboot" in text
    (group,) = fleet_rows(state)
    assert group.host.xid_notes == ("0000:b3:00.0: Xid 79 fallen off the bus: reboot",)


def test_nvml_events_only_while_the_kernel_log_is_unread() -> None:
    nv = FakeNVML({"gpus": [{}, {}], "xid_events": [{"gpu": 1, "xid": 79}]})
    agent = Agent(nv)
    agent.arm_xid()  # as the agent's loop does once its first sample is out
    s = read_sample(agent.sample())
    assert s["kernel_log"] is None and s["xid_events"][0]["xid"] == 79
    state = FleetState(["h"])
    state.on_sample("h", s)
    (group,) = fleet_rows(state)
    assert group.gpus[1].xid == "Xid 79 fallen off the bus: reboot"


# -- the live headline and `gpuconsole diagnose` name the same root --------------------------

DATA = Path(__file__).resolve().parents[1] / "data"
KERNEL_CASES = sorted(
    [p for p in (DATA / "cases" / "dmesg-xid").glob("*.txt")]
    + [
        p
        for p in (DATA / "diagnose" / "corpus" / "gpu").glob("gpu-*.txt")
        if re.search(r"NVRM: Xid|NVRM: .*fallen off the bus", p.read_text())
    ],
    key=lambda p: p.name,
)


def test_kernel_cases_are_all_there() -> None:
    names = {p.stem for p in KERNEL_CASES}
    assert {
        "xid-01",
        "xid-02",
        "xid-04",
        "gpu-001",
        "gpu-002",
        "gpu-003",
        "gpu-004",
        "gpu-005",
        "gpu-017",
        "gpu-018",
        "gpu-019",
        "gpu-031",
    } <= names


@pytest.mark.parametrize("path", KERNEL_CASES, ids=lambda p: p.stem)
def test_live_headline_and_diagnosis_name_the_same_root(path: Path, tmp_path: Path) -> None:
    """The text as a host's kernel log: agent -> sample -> FleetState (what top/gpus/the TUI
    show) against ``diagnose`` of the same text: the diagnosed GPU's headline is the root the
    diagnosis names, and every other GPU's root is named beside it (in its summary, not as a
    consequence: another GPU's chain does not follow from this one's)."""
    text = path.read_text()
    agent, _ = agent_with_log(tmp_path / "kmsg", text, [])
    state = FleetState(["h"])
    state.on_sample("h", json.loads(json.dumps(agent.sample())))
    live = {pci_key(s.pci_bus_id): s for s in state.hosts["h"].xid_summaries()}
    d = diagnose(text)
    assert d is not None and d.kind in ("xid", "gpu_lost", "gsp_timeout"), d
    key = pci_key(str(d.facts["pci"]))
    assert key in live, (d.facts["pci"], list(live))
    head = live[key].headline
    assert head is not None and head.xid == d.facts["xid"], head
    if d.kind == "gsp_timeout":  # the Xid 154 after the timeout is its summary, live too
        assert head.event.xid == 154 and head.text.endswith("(via Xid 154)"), head.text
        assert [c.kind for c in d.consequences] == ["xid"]
    if d.kind == "xid":
        assert ACTION_TEXT.get(head.action, head.action) == d.facts["action"]
    others = [s for k, s in live.items() if k != key]
    for s in others:
        assert s.headline is not None
        assert f"Xid {s.headline.xid}" in d.summary and s.pci_bus_id in d.summary, (
            s.pci_bus_id,
            s.headline.text,
        )
        assert not any(s.pci_bus_id in c.summary for c in d.consequences)


def test_kmsg_records_of_real_driver_lines_read_as_their_xids() -> None:
    """Driver lines from public reports (leptonai/gpud #1174: the NVLink Xids 149 and 145 as
    its /dev/kmsg reader got them; #46: Xid 13 and 109), each held by the kernel as one
    record: read through the kmsg source, the console finds each Xid on its GPU, stamped
    with the record's time. Expected, written first: 149 on 0019:01:00, 145 on 0018:01:00,
    13 and 109 on 0000:cb:00, at 5.000001, 6.5, 7.25 and 8.0 s."""
    texts = [
        (
            5_000_001,
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 "
            "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        ),
        (
            6_500_000,
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
            "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
        ),
        (
            7_250_000,
            "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics "
            "SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        ),
        (
            8_000_000,
            "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch "
            "00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
        ),
    ]
    fake = FakeKmsg()
    fake.queue = [
        f"4,{i},{usec},-;{text}\n SUBSYSTEM=pci\n".encode() for i, (usec, text) in enumerate(texts)
    ]
    r = KernelLogReader(run=FakeRunner(), clock=Clock(), open_fd=fake.open, read_fd=fake.read)
    got = r.read()
    assert got is not None and got["source"] == "kmsg"
    scan = scan_kernel_log("\n".join(got["lines"]))
    assert [(e.xid, e.pci_bus_id, e.uptime_s) for e in scan.events] == [
        (149, "0019:01:00", 5.000001),
        (145, "0018:01:00", 6.5),
        (13, "0000:cb:00", 7.25),
        (109, "0000:cb:00", 8.0),
    ]
    r.close()
