"""The Xid catalogue (remote/telemetry/xid_catalog.py): NVIDIA's table as data, the agent's
copy, the classes faults.py derives, and chain roots with actions on real kernel logs.

Real inputs: tests/data/cases/dmesg-xid/ (rows xid-01, xid-02, xid-04 of
/work/shared/cases/README.md) and tests/data/diagnose/corpus/gpu/ (public reports, sources in
its expected.yaml). Variants made from them say what was changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import remote.agent.agent as agent_mod
from remote.telemetry import faults
from remote.telemetry.faults import (
    BLAME_APP,
    BLAME_LONE_TIMEOUT,
    BLAME_ROOT,
    XidEvent,
    chain_root,
    scan_kernel_log,
    summarize_xids,
    xid_headline,
)
from remote.telemetry.xid_catalog import (
    ACTION_RANK,
    ACTION_TEXT,
    CATALOG_ROWS,
    GSP_TIMEOUT_WORDS_RE,
    XID_CATALOG,
    agent_meanings,
    recovery_action,
    xid_info,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def _events(text: str) -> list[XidEvent]:
    """The Xid events of a kernel log, in log order."""
    return scan_kernel_log(text).events


def case(name: str) -> str:
    return (DATA / "cases" / "dmesg-xid" / f"{name}.txt").read_text()


def corpus(name: str) -> str:
    return (DATA / "diagnose" / "corpus" / "gpu" / f"{name}.txt").read_text()


def test_catalogue_has_every_number_once_with_known_buckets() -> None:
    codes = [r[0] for r in CATALOG_ROWS]
    assert codes == list(range(1, 173))
    assert set(XID_CATALOG) == set(codes)
    for info in XID_CATALOG.values():
        assert info.action in ACTION_TEXT and info.action in ACTION_RANK
        assert info.short and info.mnemonic
    # NVIDIA's columns as published (spot checks of the transcription)
    x79 = XID_CATALOG[79]
    assert (x79.mnemonic, x79.description, x79.immediate, x79.investigatory) == (
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        "RESTART_BM",
        "CONTACT_SUPPORT",
    )
    assert (XID_CATALOG[119].mnemonic, XID_CATALOG[119].immediate) == (
        "GSP_RPC_TIMEOUT",
        "RESET_GPU",
    )
    assert XID_CATALOG[45].immediate == "WORKFLOW_XID_45"
    assert XID_CATALOG[154].immediate == "XID_154"
    assert XID_CATALOG[1].description == "Unused" and not XID_CATALOG[1].used


def test_catalogue_agrees_with_the_saved_sources() -> None:
    """tests/data/diagnose/xid-catalog-sources.md: NVIDIA's page read by another helper."""
    rows: dict[int, list[str]] = {}
    for ln in (DATA / "diagnose" / "xid-catalog-sources.md").read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| ") and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert set(rows) == set(XID_CATALOG)
    for code, cells in rows.items():
        info = XID_CATALOG[code]
        assert cells[1] == info.mnemonic, code
        if cells[3].startswith("(no bucket; text)"):
            assert info.action == "unknown", code
        else:
            assert cells[3] == info.immediate, code


def test_actions_and_roles_follow_nvidia_buckets() -> None:
    assert XID_CATALOG[79].headline == "Xid 79 fallen off the bus: reboot"
    assert {
        c: XID_CATALOG[c].action for c in (13, 31, 48, 62, 95, 119, 120, 74, 149, 54, 45, 154, 63)
    } == {
        13: "restart_app",
        31: "restart_app",
        48: "reset_gpu",
        62: "reset_gpu",
        95: "reset_gpu",
        119: "reset_gpu",
        120: "reset_gpu",
        74: "nvlink",
        149: "nvlink",
        54: "check_mechanicals",
        45: "follow_root",
        154: "recovery_action",
        63: "ignore",
    }
    assert XID_CATALOG[45].role == "consequence" and XID_CATALOG[154].role == "summary"
    for starter in (74, *range(144, 151), 119, 120, 79, 48, 94, 95, 62, 63, 64, 92):
        assert XID_CATALOG[starter].role == "root", starter
    assert XID_CATALOG[13].role == "app" and XID_CATALOG[43].role == "app"
    unlisted = xid_info(999)
    assert (unlisted.action, unlisted.role) == ("unknown", "root")


def test_agent_table_is_the_catalogue() -> None:
    """The agent is shipped alone, so it carries a copy; it must be this catalogue."""
    assert agent_mod.XID_MEANINGS == agent_meanings()
    assert agent_mod.XID_MEANINGS[79] == "GPU has fallen off the bus"
    assert set(agent_mod.XID_MEANINGS) == {c for c, i in XID_CATALOG.items() if i.used}


def test_faults_classes_come_from_the_catalogue() -> None:
    assert set(faults.XID_INFO) == {c for c, i in XID_CATALOG.items() if i.used}
    cls = {
        c: faults.XID_INFO[c][1]
        for c in (79, 45, 154, 62, 119, 48, 13, 31, 43, 74, 149, 63, 92, 54, 38)
    }
    assert cls == {
        79: "lost",
        45: "consequence",
        154: "consequence",
        62: "reset",
        119: "reset",
        48: "reset",
        13: "app",
        31: "app",
        43: "app",
        74: "hw",
        149: "hw",
        63: "hw",
        92: "hw",
        54: "hw",
        38: "info",
    }


# ---------------------------------------------------------------------------------------------
# chain roots on real logs


def test_xid02_root_is_the_halt_not_its_cleanup() -> None:
    evs = _events(case("xid-02"))
    h = xid_headline(evs)
    assert h is not None
    assert h.text == "Xid 62 micro-controller halt: reset GPU"
    assert (h.xid, h.action, h.consequences, h.severe) == (62, "reset_gpu", 8, True)
    (s,) = summarize_xids(evs, {"0000:0a:00.0": 0})
    assert s.line == h.text and s.chain_root is not None and s.chain_root.pid == 13332


def test_xid04_fallen_off_the_bus_is_reboot() -> None:
    (s,) = summarize_xids(_events(case("xid-04")), {"00000000:B3:00.0": 3})
    assert s.gpu_index == 3 and s.line == "Xid 79 fallen off the bus: reboot"


def test_xid01_repeated_app_faults_say_drain() -> None:
    by_bus = {s.pci_bus_id: s for s in summarize_xids(_events(case("xid-01")))}
    assert by_bus["0000:3d:00"].line == (
        "Xid 43 GPU stopped processing: no action; 4 processes hit: drain, run diagnostics"
    )
    assert by_bus["0000:db:00"].line.startswith("Xid 31 GPU memory page fault: restart app")


def test_cleanup_lines_name_their_root() -> None:
    """gpu-002: only Xid 45 lines, each 'caused by previous Xid 149/145' (NVLink5)."""
    sums = {s.pci_bus_id: s for s in summarize_xids(_events(corpus("gpu-002")))}
    dc = sums["0000:dc:00"]
    assert {e.caused_by for e in dc.events} == {149}
    assert dc.line == (
        "Xid 149 NVLINK: NETIR Error: reset GPU if the link error is fatal (via Xid 45)"
    )
    assert sums["0000:ed:00"].headline is not None and sums["0000:ed:00"].headline.xid == 145


def test_recovery_action_of_xid_154_backs_the_root() -> None:
    """gpu-004: Xid 62, the GSP's PMU-halted notice, then Xid 154 (GPU Reset Required)."""
    evs = _events(corpus("gpu-004"))
    assert [e.xid for e in evs] == [62, 154]
    assert evs[1].recovery == "reset_gpu"
    h = xid_headline(evs)
    assert h is not None and h.text == "Xid 62 micro-controller halt: reset GPU"
    line = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    assert recovery_action(line) == (1, "GPU Reset Required", "reset_gpu")
    # the same line naming a node reboot (value 2 of nvmlDeviceGpuRecoveryAction_t) wins over
    # the root's own action
    reboot = corpus("gpu-004").replace("0x1 (GPU Reset Required)", "0x2 (Node Reboot Required)")
    h2 = xid_headline(_events(reboot))
    assert h2 is not None and h2.text == "Xid 62 micro-controller halt: reboot"


def test_gsp_rpc_timeouts() -> None:
    """gpu-001: repeated Xid 119 'Timeout waiting for RPC from GSP!'."""
    evs = _events(corpus("gpu-001"))
    assert {e.xid for e in evs} == {119} and not any(e.inferred for e in evs)
    h = xid_headline(evs)
    assert h is not None and h.text == "Xid 119 GSP RPC timeout: reset GPU"


# Lines of a real dmesg -T capture: leptonai/gpud, components/accelerator/nvidia/xid/testdata/
# dmesg-with-xid-119.log (commit 4a8de33a3f02e207f39e9023d67125592d599731), first four lines.
GPUD_119 = """\
[Sun Feb 23 16:24:18 2025] NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d
[Sun Feb 23 16:24:18 2025] NVRM: GPU Board Serial Number: 1650124014249
[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, \
Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 \
(GSP_RM_ALLOC) (0x2081 0x4).
[Sun Feb 23 16:24:18 2025] NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and \
data 0x0000000000002081 0x0000000000000004.
[Sun Feb 23 16:24:18 2025] NVRM: GPU4 RPC history (CPU -> GSP):
"""


def test_gsp_details_are_not_events_and_a_bare_timeout_is_119() -> None:
    evs = _events(GPUD_119)
    assert [(e.xid, e.pci_bus_id, e.inferred) for e in evs] == [(119, "0000:9b:00", False)]
    # variant: the same timeout printed without its Xid prefix (older drivers' wording)
    bare = GPUD_119.replace("Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, ", "")
    evs2 = _events(bare)
    assert [(e.xid, e.pci_bus_id, e.inferred) for e in evs2] == [(119, "GPU4", True)]
    (s,) = summarize_xids(evs2)
    assert s.gpu_index is None and s.line == "Xid 119 GSP RPC timeout: reset GPU"


def test_the_gsp_timeout_banner_is_119_and_leads_a_printed_one() -> None:
    """gpu-054 (open module 595): GPU6's heartbeat timed out, then the "GSP Timeout" banner,
    the excerpt cut before its Xid line: one inferred Xid 119 on GPU6 at the banner; the
    heartbeat lines are no event. gpu-031 (an older driver's ``_kgspLogXid119`` banner above
    each printed Xid 119): no extra event, the banner and its note lead the printed one."""
    evs = _events(corpus("gpu-054"))
    assert [(e.xid, e.pci_bus_id, e.inferred, e.uptime_s) for e in evs] == [
        (119, "GPU6", True, 84.300488)
    ]
    lines = corpus("gpu-031").splitlines()
    printed = _events(corpus("gpu-031"))
    assert [(e.xid, e.pci_bus_id, e.inferred) for e in printed] == [
        (119, "0001:6c:00", False),
        (119, "0001:96:00", False),
    ]
    first = printed[0]
    assert [lines[n - 1] for n in first.rows()][:2] == lines[:2]  # banner, note
    assert "GSP Timeout" in lines[first.lead_line_no - 1] and first.line_no == 3
    # heartbeat alone: a GSP timeout for the diagnosis (its words), no Xid event of its own
    beat = "\n".join(ln for ln in corpus("gpu-054").splitlines() if "Heartbeat" in ln)
    assert _events(beat) == []
    assert GSP_TIMEOUT_WORDS_RE.search(beat) is not None


@pytest.mark.parametrize("code", [13, 45, 79, 119, 149, 154])
def test_every_headline_names_an_action(code: int) -> None:
    info = XID_CATALOG[code]
    assert info.headline == f"Xid {code} {info.short}: {ACTION_TEXT[info.action]}"


# ---------------------------------------------------------------------------------------------
# the chain root: one picker (faults.chain_root) for top/gpus/TUI and `diagnose`


def test_ctx_switch_timeout_after_an_app_fault_is_not_the_root() -> None:
    """gpu-003: three Xid 13 (SM warp exceptions), five seconds later Xid 109: the catalogue
    lists 109 among the Xids that follow; the root is the first 13, and the line still says
    what the 109 asks."""
    evs = _events(corpus("gpu-003"))
    assert [e.xid for e in evs] == [13, 13, 13, 109]
    root, code = chain_root(evs)
    assert (root, code) == (evs[0], 13)  # the earliest of equal actions
    h = xid_headline(evs)
    assert h is not None and (h.xid, h.action, h.blame) == (13, "restart_app", BLAME_APP)
    (s,) = summarize_xids(evs)
    assert s.line == ("Xid 13 graphics engine exception: restart app; then Xid 109: reset GPU")
    assert s.drain  # the 109 still asks for a reset


def test_ctx_switch_timeout_with_nothing_before_it_is_the_root() -> None:
    """gpu-003's lines reordered (variant): the 109 first, the 13s after it."""
    lines = [ln for ln in corpus("gpu-003").splitlines() if "Xid" in ln]
    evs = _events("\n".join([lines[-1], *lines[:-1]]))
    assert [e.xid for e in evs] == [109, 13, 13, 13]
    h = xid_headline(evs)
    assert h is not None and (h.xid, h.event, h.blame) == (109, evs[0], BLAME_LONE_TIMEOUT)


def test_chain_starter_beats_an_earlier_app_fault_and_cleanup() -> None:
    evs = _events(case("xid-02"))  # 31, 62, 8x 45
    root, code = chain_root(evs)
    assert (root.xid, code) == (62, 62)
    h = xid_headline(evs)
    assert h is not None and h.blame == BLAME_ROOT and h.event is root


def test_repeated_root_names_its_first_event() -> None:
    """xid-01 GPU db:00: three Xid 31 for three pids: the first is shown (the old picker took
    the latest)."""
    evs = [e for e in _events(case("xid-01")) if e.pci_bus_id == "0000:db:00"]
    assert [e.xid for e in evs] == [31, 31, 31]
    h = xid_headline(evs)
    assert h is not None and h.event is evs[0] and h.event.pid == 13641


def test_cleanup_only_chain_takes_the_first_named_xid() -> None:
    evs = [e for e in _events(corpus("gpu-002")) if e.pci_bus_id == "0000:dc:00"]
    root, code = chain_root(evs)
    assert (root, code) == (evs[0], 149)
    h = xid_headline(evs)
    assert h is not None and h.blame == BLAME_ROOT
