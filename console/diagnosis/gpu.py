"""Rules for GPU, driver and NVML failures: kernel Xids, lost GPUs, GSP timeouts, nvidia-smi's
and NVML's failures, Fabric Manager, and the apt upgrade behind a broken driver.

The parsing is :mod:`remote.telemetry.faults` (kernel log: :func:`scan_kernel_log`; each
GPU's chain root, the same one ``top``/``gpus``/the TUI show: :func:`summarize_xids` /
``chain_root``; the ``API mismatch`` notice: ``find_api_mismatch``; pynvml tracebacks:
:func:`classify_nvml_traceback`; apt history: :func:`classify_driver_upgrade`) and
:func:`remote.telemetry.smi.classify_smi_failure` (nvidia-smi's messages); the Xid meanings and
actions are NVIDIA's catalogue as data (:mod:`remote.telemetry.xid_catalog`). This module feeds
them text they accept (collector decorations removed by the normaliser, the kernel log's own
timestamps put back) and turns what they find into :class:`Diagnosis` values.

Primary sources of the wording matched here:

* Xid lines, ``fallen off the bus``, GSP timeouts, ``RmInitAdapter failed``, the wrapped
  ``API mismatch`` notice: NVIDIA's kernel module (``open-gpu-kernel-modules``:
  ``kernel-open/nvidia/nv.c``, ``src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c``) and NVIDIA's Xid
  catalogue, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (chain roots,
  immediate actions; saved in ``tests/data/diagnose/xid-catalog-sources.md``).
* nvidia-smi / NVML: ``nvmlErrorString`` texts (``Driver/library version mismatch``, ``GPU is
  lost``, ``Unknown Error``, ``Function Not Found``; NVML API reference, ``nvmlReturn_t``) and
  pynvml's ``NVMLError_*`` classes (``nvidia-ml-py`` ``pynvml.py``). nvidia-smi's per-GPU
  ``Unable to determine the device handle for GPU <bus id>: <nvmlErrorString>`` (older
  releases and nvidia-smi.exe: ``detect``) is a lost GPU when it says ``GPU is lost`` or the
  text shows the GPU leaving the bus (Xid 79, ``fallen off the bus``, the kernel's PCIe AER
  ``PCIe Bus Error`` lines); otherwise it is the NVML return code it names (``nvml_error``,
  ``faults.NVML_RETURNS``: ``Unknown Error`` is ``NVML_ERROR_UNKNOWN``).
* ``Failed to initialize NVML: Unknown Error`` in a running container after a systemd reload:
  NVIDIA's notice https://github.com/NVIDIA/nvidia-container-toolkit/issues/48.
* CUDA error 802 ``system not yet initialized`` (``cudaErrorSystemNotReady``,
  ``CUDA_ERROR_SYSTEM_NOT_READY``): CUDA Runtime API ``cudaError_t``, "This error indicates that
  the system is not yet ready to start any CUDA work ... the fabric manager"; NVIDIA Fabric
  Manager user guide (``nvidia-fabricmanager`` must run at the driver's version on NVSwitch
  systems).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from console.diagnosis.common import NCCL_INFO, own_words
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Consequence, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag
from remote.telemetry.faults import (
    NVML_RETURNS,
    DriverLoadProblem,
    DriverUpgrade,
    GpuXidSummary,
    NvmlFault,
    NvmlReturn,
    XidEvent,
    XidHeadline,
    classify_driver_upgrade,
    classify_nvml_traceback,
    find_api_mismatch,
    find_driver_load_problems,
    nvml_return,
    parse_plugin_discovery,
    pci_key,
    scan_kernel_log,
    scan_xid_records,
    summarize_xids,
)
from remote.telemetry.smi import SMI_MESSAGE_RE, classify_smi_failure
from remote.telemetry.xid_catalog import (
    ACTION_RANK,
    ACTION_TEXT,
    GSP_DETAIL_RE,
    GSP_TIMEOUT_WORDS_RE,
    xid_info,
)

__all__ = ["RULES", "kernel_text"]


# ---------------------------------------------------------------------------------------------
# kernel log: the text faults.scan_kernel_log reads, rebuilt from the normalised lines

# The kernel's own stamps inside a stripped prefix: dmesg ``[ 1843.308145]``, ``dmesg -T``
# ``[Fri Mar  3 04:44:24 2023]``, ISO (``dmesg --time-format=iso``, journalctl ``short-iso``).
_UPTIME = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]")
_CTIME = re.compile(r"\[(?P<ctime>[A-Za-z]{3,9} [A-Za-z]{3,9} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_NVRM = "NVRM:"


def kernel_text(lines: Sequence[Line], text: str) -> str:
    """The ``NVRM:`` messages of ``lines`` as a kernel log :func:`scan_kernel_log` reads.

    One output line per normalised line (so ``XidEvent.line_no - 1`` is a :class:`Line`
    index; other lines are left empty). Each line gets back the kernel stamp the normaliser
    stripped (uptime, ``dmesg -T`` or ISO; syslog stamps carry no year and are dropped);
    ``scan_kernel_log`` itself joins wrapped messages and removes a block's indentation.
    """
    physical = text.splitlines()
    out: list[str] = []
    for ln in lines:
        body = ln.raw.strip()
        if _NVRM not in ln.raw or not body:
            out.append("")
            continue
        stamp: str | None = None
        if 0 <= ln.source_line < len(physical):
            row = physical[ln.source_line]
            cut = row.find(body)
            prefix = row[:cut] if cut > 0 else ""
            if m := _UPTIME.search(prefix):
                stamp = f"[{m['up']}]"
            elif m := _CTIME.search(prefix):
                stamp = f"[{m['ctime']}]"
            elif m := _ISO.search(prefix):
                stamp = m.group(0)
        out.append(f"{stamp} {body}" if stamp is not None else ln.raw.rstrip())
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Xid chains


def _chains(events: Sequence[XidEvent]) -> list[GpuXidSummary]:
    """One summary per GPU (``faults.summarize_xids``), each with its chain's root
    (``headline``: ``faults.chain_root``, NVIDIA's catalogue order)."""
    return [s for s in summarize_xids(events) if s.headline is not None]


def _head(chain: GpuXidSummary) -> XidHeadline:
    assert chain.headline is not None  # _chains keeps only GPUs with events
    return chain.headline


def _evidence_of(
    event: XidEvent, lines: Sequence[Line], kernel: list[str], extras: int = 2
) -> list[str]:
    """The lines of ``event``'s message (continuations included), and the driver's non-Xid
    ``NVRM:`` lines right after it (``PMU has halted``, ``GPU has fallen off the bus.``)."""
    i = event.line_no - 1
    if not 0 <= i < len(lines):
        return []
    j = max(i + 1, min(event.end_line_no, len(lines)))
    out = [ln.raw for ln in lines[i:j] if ln.raw.strip()]
    extra = 0
    while j < len(lines) and extra < extras:
        k = kernel[j] if j < len(kernel) else ""
        if not k.strip():
            j += 1
            if j - i > 6:
                break
            continue
        if "Xid" in k or _NOT_DETAIL.search(k):
            break
        out.append(lines[j].raw)
        extra += 1
        j += 1
    return out


#: Driver lines after an Xid that are not about it (the next GPU's banner, the module loading).
_NOT_DETAIL = re.compile(r"Board Serial|serial number|loading NVIDIA|GPU at PCI:|probe routine")


def _where(e: XidEvent, group: Sequence[XidEvent] = ()) -> str:
    """``pid 13332 (name) at <time>``; for a repeated Xid its pids and first/last times."""
    evs = list(group) or [e]
    pids = list(dict.fromkeys(x.pid for x in evs if x.pid is not None))
    who = []
    if len(pids) > 1:
        who.append("pids " + ", ".join(map(str, pids)))
    elif e.pid is not None:
        who.append(f"pid {e.pid}" + (f" ({e.process_name})" if e.process_name else ""))
    first, last = evs[0].time_text, evs[-1].time_text
    if first and last and last != first:
        who.append(f"from {first} to {last}")
    elif first:
        who.append(f"at {first}")
    return " ".join(who)


_FIXES: dict[str, str] = {
    "reboot": (
        "Drain the node and reboot (power-cycle) it: only that brings the GPU back; if it "
        "falls off again, check its PCIe seating, riser, power cables and cooling, then "
        "RMA"
    ),
    "reset_gpu": (
        "Drain GPU {pci} and reset it once idle (`nvidia-smi -r -i <index>`) or reboot "
        "the node before reuse; if it recurs, run `dcgmi diag -r 3` and contact NVIDIA "
        "support / RMA"
    ),
    "restart_vm": "Restart the VM (or reset the GPU from the host) before reuse",
    "nvlink": (
        "Drain the node; read the NVLink errors (`nvidia-smi nvlink -e`, the Xid's "
        "details) and reset the GPUs if a link is down; persistent link errors: contact "
        "NVIDIA support / RMA"
    ),
    "check_mechanicals": (
        "Check the GPU's power cables, seating and cooling, then reset the GPU or reboot"
    ),
    "restart_app": (
        "Restart the application: its kernel faulted on GPU {pci} (debug with "
        "compute-sanitizer / CUDA_LAUNCH_BLOCKING=1); the GPU stays usable unless "
        "other processes fault on it too"
    ),
    "ignore": (
        "No action on the GPU; if it repeats for other processes, run `dcgmi diag -r 3` on it"
    ),
    "contact_support": "Collect `nvidia-bug-report.sh` and contact NVIDIA support",
    "update_sw": "Update the NVIDIA driver / GPU firmware",
    "check_uvm": "Check the nvidia-uvm module and the application's unified memory use",
    "unknown": "Look the Xid up in NVIDIA's Xid catalogue; collect `nvidia-bug-report.sh`",
}


def _xid_findings(ctx: Context) -> list[Diagnosis]:
    """Kernel Xids (``kind: xid``), and a GPU lost (``gpu_lost``) or a GSP RPC timeout
    (``gsp_timeout``) printed without an Xid number."""
    if _NVRM not in ctx.text:
        return _xid_records(ctx)
    kernel = kernel_text(ctx.lines, ctx.text)
    scan = scan_kernel_log(kernel)
    printed = [e for e in scan.events if not e.inferred]
    inferred = [e for e in scan.events if e.inferred]
    kernel_lines = kernel.split("\n")
    found: list[Diagnosis] = []
    if printed:
        found.append(_xid_diagnosis(printed, ctx.lines, kernel_lines))
    elif not inferred:
        found.extend(_xid_records(ctx))
    lost = [e for e in inferred if e.xid == 79]
    if lost:
        e = lost[0]
        evidence = _evidence_of(e, ctx.lines, kernel_lines, extras=0)
        missing = scan.probe_failed_devices
        if missing:
            evidence += [ln.raw for ln in ctx.lines if "probe routine failed" in ln.text]
        more = f"; the driver's probe then failed for {missing} device(s)" if missing else ""
        others = ", ".join(x.pci_bus_id for x in lost[1:])
        found.append(
            _diag(
                "gpu_lost",
                f"GPU {e.pci_bus_id}"
                + (f" (PCI ID {e.pci_device_id})" if e.pci_device_id else "")
                + f" fell off the bus{' at ' + e.time_text if e.time_text else ''} and no longer "
                "responds (the kernel names no Xid: it is Xid 79, fallen off the bus)"
                + more
                + (f"; also lost: {others}" if others else ""),
                (),
                _FIXES["reboot"],
                evidence,
                {
                    "pci": e.pci_bus_id,
                    "xid": 79,
                    "action": ACTION_TEXT["reboot"],
                    "pci_device_id": e.pci_device_id,
                    "gpus_missing": missing,
                    "driver_version": scan.driver_version,
                },
            )
        )
    gsp = [e for e in inferred if e.xid == 119]
    if gsp:
        e = gsp[0]
        gpu = int(e.pci_bus_id[3:]) if e.pci_bus_id[3:].isdigit() else None
        dump = (
            "; only its RPC history dump is in the text, which the driver prints after an "
            "RPC to the GSP timed out or failed (the timeout line is above the excerpt)"
            if GSP_DETAIL_RE.search(e.detail or "")
            else ""
        )
        found.append(
            _diag(
                "gsp_timeout",
                f"the GPU's GSP firmware stopped answering the driver's RPCs"
                f"{' on GPU' + str(gpu) if gpu is not None else ''}"
                f"{' at ' + e.time_text if e.time_text else ''} ({len(gsp)}x, no Xid printed: "
                f"what Xid 119, GSP RPC timeout, means){dump}; NVIDIA's action: reset the GPU",
                (),
                (
                    "Reset the GPU or reboot the node; if it recurs, update the driver, or load "
                    "the "
                    "proprietary module with NVreg_EnableGpuFirmware=0 (GSP off)"
                ),
                _evidence_of(e, ctx.lines, kernel_lines)[:1],
                {"gpu": gpu, "count": len(gsp), "xid": 119, "action": ACTION_TEXT["reset_gpu"]},
            )
        )
    return _gsp_before_recovery(ctx, printed, found)


def _gsp_before_recovery(
    ctx: Context, printed: Sequence[XidEvent], found: list[Diagnosis]
) -> list[Diagnosis]:
    """Xid 154 ("GPU recovery action changed") only summarises what the driver decided; when
    the only Xids printed are 154s and the GSP firmware timed out before the first of them,
    the timeout starts the chain and the 154 is its consequence."""
    if not printed or any(e.xid != 154 for e in printed):
        return found
    first = min(e.line_no for e in printed) - 1
    timeouts = [
        ln for ln in ctx.lines[:first] if "NVRM" in ln.text and GSP_TIMEOUT_WORDS_RE.search(ln.text)
    ]
    gsp = next((d for d in found if d.kind == "gsp_timeout"), None)
    xid = next((d for d in found if d.kind == "xid"), None)
    if xid is None or (gsp is None and not timeouts):
        return found
    pci = printed[0].pci_bus_id
    said = Consequence(
        "xid", xid.summary + " (the driver's summary of the GSP timeout)", xid.evidence
    )
    if gsp is None:
        gsp = _diag(
            "gsp_timeout",
            f"the GSP firmware of GPU {pci} stopped answering the driver's RPCs "
            f"({len(timeouts)} timeout line{'s' if len(timeouts) > 1 else ''}), so the driver "
            "marked it for reset: the Xid 154 after it only records that recovery action; "
            "NVIDIA's action: reset the GPU",
            (),
            f"Drain GPU {pci} and reset it (`nvidia-smi -r`) or reboot the node; if it recurs, "
            "update the driver (its GSP firmware) and send `nvidia-bug-report.sh` to NVIDIA",
            [ln.raw for ln in timeouts[:2]],
            {"pci": pci, "xid": 119, "action": ACTION_TEXT["reset_gpu"]},
        )
    rest = [d for d in found if d.kind not in ("xid", "gsp_timeout")]
    return [replace(gsp, consequences=(*gsp.consequences, said)), *rest]


def _xid_records(ctx: Context) -> list[Diagnosis]:
    """Xid events other tools recorded (the NVIDIA device plugin, DCGM, gpud, a table of kernel
    records without their ``NVRM:`` prefix: ``faults.scan_xid_records``), for a text holding
    no kernel Xid line."""
    if "xid" not in ctx.text.lower():
        return []
    events = scan_xid_records("\n".join(ln.text for ln in ctx.lines))
    if not events:
        return []
    return [_xid_diagnosis(events, ctx.lines, [""] * len(ctx.lines))]


def _gpu_name(pci: str) -> str:
    """How a summary names the GPU of an Xid record: its bus id or the device id the tool
    printed (UUID, DCGM's ``GPU0``); a record naming none says so."""
    return pci or "(the record names no GPU)"


def _group_text(evs: Sequence[XidEvent]) -> str:
    code = evs[0].xid
    info = xid_info(code)
    n = f"{len(evs)}x " if len(evs) > 1 else ""
    when = evs[0].time_text
    if len(evs) > 1 and evs[-1].time_text and evs[-1].time_text != when:
        when = f"{when} to {evs[-1].time_text}"
    return f"{n}Xid {code} ({info.short}) on {_gpu_name(evs[0].pci_bus_id)}" + (
        f" {'from' if ' to ' in when else 'at'} {when}" if when else ""
    )


def _xid_diagnosis(events: list[XidEvent], lines: Sequence[Line], kernel: list[str]) -> Diagnosis:
    chains = _chains(events)
    order = {id(e): i for i, e in enumerate(events)}

    def severity(c: GpuXidSummary) -> tuple[int, int, int]:
        h = _head(c)
        return (h.blame, ACTION_RANK.get(h.action, 0), -order[id(h.event)])

    chain = max(chains, key=severity)
    head = _head(chain)
    root, code, action, pci = head.event, head.xid, head.action, chain.pci_bus_id
    info = xid_info(code)
    suspect = [c for c in chains if c.verdict == "suspect_hardware"]
    root_group = [e for e in chain.events if e.xid == root.xid]
    if root.xid != code:  # only cleanup lines that name the root
        root_group = [e for e in chain.events if e.caused_by == code]
    via = f" (named by Xid {root.xid} 'caused by previous Xid {code}')" if root.xid != code else ""
    n = f"{len(root_group)}x " if len(root_group) > 1 else ""
    where = _where(root, root_group)
    summary = (
        f"{n}Xid {code} ({info.short}, {info.mnemonic.split(' /')[0]}) on GPU "
        f"{_gpu_name(pci)}{' ' + where if where else ''}{via}; NVIDIA's action: "
        f"{ACTION_TEXT.get(action, action)}"
    )
    facts: dict[str, FactValue | None] = {
        "xid": code,
        "pci": pci if pci_key(pci) is not None else None,
        "action": ACTION_TEXT.get(action, action),
        "xid_name": info.mnemonic.split(" /")[0] or None,
        "count": len(root_group),
        "pid": root.pid,
        "uuid": root.uuid,
        "verdict": chain.verdict,
        "gpus": len(chains) if len(chains) > 1 else None,
    }
    # the application's fault that began a reset-class chain (faults.summarize_xids)
    first = chain.chain_root
    earlier = [
        e
        for e in chain.events
        if order[id(e)] < order[id(root)]
        and e.xid != root.xid
        and xid_info(e.xid).role not in ("consequence", "summary")
    ]
    if first is None and earlier:
        first = earlier[0]
    if first is not None and first.xid != code:
        summary += f"; it followed Xid {first.xid} ({xid_info(first.xid).short})"
        summary += f" {_where(first)}" if _where(first) else ""
        facts["chain_xid"] = first.xid
        facts["chain_pid"] = first.pid
    fix = _FIXES.get(action, _FIXES["unknown"]).format(pci=pci or "<the faulting GPU>")
    if info.role == "app" and chain in suspect:
        facts["xid_class"] = "hw"
    elif info.role == "app":
        facts["xid_class"] = "app"
        harder = [
            e
            for e in chain.events
            if ACTION_RANK.get(xid_info(e.xid).action, 0) > ACTION_RANK.get(action, 0)
            and e.xid != code
            and xid_info(e.xid).role not in ("consequence", "summary")
        ]
        if harder:
            after = harder[0]
            summary += (
                f"; an application fault, followed by Xid {after.xid} ({xid_info(after.xid).short})"
            )
            fix += (
                f"; the Xid {after.xid} after it asks to "
                f"{ACTION_TEXT.get(xid_info(after.xid).action, 'act')}: do so if the GPU "
                "does not recover"
            )
        else:
            summary += "; an application fault, the GPU stays usable"
    else:
        facts["xid_class"] = "hw"
    if suspect:
        names = ", ".join(c.pci_bus_id for c in suspect)
        pids = sorted({p for c in suspect for p in c.pids})
        summary += (
            f"; the same fault repeats for {len(pids)} processes on {names}: suspect hardware"
        )
        fix = (
            f"Drain GPU {names} and run diagnostics (`dcgmi diag -r 3`, field diagnostics); "
            "replace the GPU if they fail"
        )
    evidence = _evidence_of(root, lines, kernel)
    if root.xid != code:
        evidence = [lines[root.line_no - 1].raw] if 0 < root.line_no <= len(lines) else []
    # what follows: the other Xids of this GPU, then the other GPUs' chains
    consequences: list[Consequence] = []
    by_code: dict[int, list[XidEvent]] = {}
    for e in chain.events:
        if e.xid != root.xid and (first is None or e is not first):
            by_code.setdefault(e.xid, []).append(e)
    for xid, evs in by_code.items():
        text = _group_text(evs)
        if xid == 45:
            text += f": channels torn down after Xid {code}"
        elif xid == 154 and evs[-1].recovery:
            text += (
                f": the driver now asks to {ACTION_TEXT.get(evs[-1].recovery, evs[-1].recovery)}"
            )
        consequences.append(Consequence("xid", text, tuple(_line(lines, e) for e in evs[:1])))
    # the other GPUs' chains: their own events, never consequences of this GPU's root; named
    # in the summary and the evidence so every faulting GPU is on the report
    others: list[str] = []
    for other in chains:
        if other is chain:
            continue
        oh = _head(other)
        text = _group_text([e for e in other.events if e.xid == oh.event.xid])
        if oh.xid != oh.event.xid:
            text += f" caused by previous Xid {oh.xid}"
        if other.verdict == "suspect_hardware":
            text += f", {len(other.pids)} processes: suspect hardware"
        else:
            text += f" ({ACTION_TEXT.get(oh.action, oh.action)})"
        others.append(text)
        evidence.append(_line(lines, oh.event))
    if others:
        summary += (
            "; on the other GPU" + ("s" if len(others) > 1 else "") + ": " + "; ".join(others)
        )
        facts["other_gpus"] = ", ".join(c.pci_bus_id for c in chains if c is not chain)
    d = _diag("xid", summary, (), fix, evidence, facts)
    return Diagnosis(
        d.kind, d.summary, d.ranks, d.fix, d.evidence, d.facts, consequences=tuple(consequences)
    )


def _line(lines: Sequence[Line], e: XidEvent) -> str:
    i = e.line_no - 1
    return lines[i].raw.strip() if 0 <= i < len(lines) else e.detail


# ---------------------------------------------------------------------------------------------
# nvidia-smi, NVML, apt history


#: A wrapper's own timestamp (``WARNING: Tue Mar  5 15:17:06 +0330 2019 - ...``): passed on
#: alone so ``classify_smi_failure`` can date the messages after it.
_WRAPPER_STAMP = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d"
    r"(?: [+-]\d{4}| [A-Z]{2,5})? \d{4}|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[+-]\d\d:?\d\d)?"
)


def _smi_lines(lines: Sequence[Line]) -> list[tuple[int, str]]:
    """nvidia-smi's messages cut from their wrappers, and the wrappers' bare timestamps
    (index -1: not evidence)."""
    out: list[tuple[int, str]] = []
    for ln in lines:
        t = ln.text
        if m := SMI_MESSAGE_RE.search(t):
            out.append((ln.index, t[m.start() :].strip()))
        elif st := _WRAPPER_STAMP.search(t):
            out.append((-1, st.group(0)))
    return out


_HANDLE_LOST = re.compile(r"GPU is lost|fallen off the bus|Unknown Error|GPU requires reset", re.I)
# nvmlInit's NVML_ERROR_UNKNOWN as nvidia-smi prints it ("Failed to initialize NVML: Unknown
# Error"), also as people retype it: no colon, lower case, the words turned round ("NVML
# initialize failed: Unknow"), "initialize" misspelt
_NVML_UNKNOWN = re.compile(
    r"(?:fail\w*\s+to\s+init\w*\s+NVML|NVML\s+init\w*\s+fail\w*)\s*:?\s*Unknown?\b", re.I
)
#: What shows a GPU left the bus, beside NVML's own "GPU is lost": the driver's "fallen off the
#: bus", the kernel's PCIe AER reports (``drivers/pci/pcie/aer.c``: "PCIe Bus Error:
#: severity=...", "AER: Corrected error received"), an Xid 79. A device-handle failure with one
#: of these is a lost GPU; without, it is the NVML return code it names (``nvml_error``).
_BUS_LOST = re.compile(
    r"fallen off the bus|PCIe Bus Error|\bAER: (?:Corrected|Uncorrected|"
    r"Multiple)|\bXid\b.{0,40}: 79\b",
    re.I,
)
#: An NVML call and the ``nvmlErrorString`` it got, as tools print it (``nvdebugdump``:
#: "Error: nvmlDeviceGetHandleByIndex(): Unknown Error"; "nvmlInit() failed: ...").
_NVML_CALL = re.compile(
    r"\b(?P<fn>nvml[A-Z]\w*)\(\)(?: failed)?: (?P<msg>[A-Za-z][\w /-]*?)\.?\s*$"
)
#: NVML return codes with no cause id of their own (``nvml_error``; NVML_RETURNS): reset
#: required, corrupted infoROM, insufficient power, IRQ issue, timeout, unknown.
_NVML_ERROR_CODES = frozenset({8, 10, 11, 14, 16, 999})
_CONTAINER_HINT = re.compile(
    r"docker|container|podman|kubectl|\bpod\b|root@[0-9a-f]{12}\b|daemon-reload", re.I
)


def _upgrade(ctx: Context) -> tuple[DriverUpgrade | None, list[str]]:
    """The apt history entry that changed NVIDIA packages, and its lines, when the text has one."""
    if "Start-Date:" not in ctx.text:
        return None, []
    upgrade = classify_driver_upgrade("\n".join(ln.text.strip() for ln in ctx.lines))
    if upgrade is None:
        return None, []
    names = [c.name for c in upgrade.changes]
    evidence = [
        ln.raw
        for ln in ctx.lines
        if ln.text.strip().startswith("Start-Date:")
        or (
            re.match(r"\s*(?:Upgrade|Install|Remove|Purge|Downgrade|Reinstall): ", ln.text)
            and any(n in ln.text for n in names)
        )
    ]
    return upgrade, evidence


def _with_upgrade(
    ctx: Context,
    kind: CauseKind,
    summary: str,
    fix: str,
    evidence: list[str],
    facts: dict[str, FactValue | None],
) -> Diagnosis:
    upgrade, lines = _upgrade(ctx)
    if upgrade is not None:
        summary += f": {upgrade.root_cause}"
        fix = upgrade.fix[0].upper() + upgrade.fix[1:]
        evidence = evidence + lines
        moved = next((c for c in upgrade.changes if c.new_driver or c.old_driver), None)
        facts.update(
            {
                "upgrade_time": f"{upgrade.start:%Y-%m-%d %H:%M:%S}",
                "unattended": "yes" if upgrade.unattended else "no",
                "package": moved.name if moved else None,
                "old_driver": moved.old_driver if moved else None,
                "new_driver": moved.new_driver if moved else None,
            }
        )
    return _diag(kind, summary, (), fix, evidence, facts)


#: The NVIDIA Kubernetes device plugin: its name (pod, image, prose), its own hint after an
#: NVML failure ("If this is a GPU node, did you set the docker default runtime to
#: `nvidia`?"), or the Go NVML bindings' wording it prints (``could not load NVML library``,
#: never nvidia-smi's).
_DEVICE_PLUGIN = re.compile(
    r"device[- ]?plugin|did you set the docker default runtime to|could not load NVML library", re.I
)


def _smi_findings(ctx: Context) -> list[Diagnosis]:
    """nvidia-smi's failures (``faults``' :class:`HostFault` states) as cause ids."""
    picked = _smi_lines(ctx.lines)
    unknown = [ln.raw for ln in ctx.lines if _NVML_UNKNOWN.search(ln.text)]
    fault = (
        classify_smi_failure("\n".join(t for _, t in picked))
        if any(i >= 0 for i, _ in picked)
        else None
    )
    if fault is None:
        # NVML's "Unknown Error" retyped in prose is not nvidia-smi's own output
        return [_nvml_lost(ctx, unknown)] if unknown else []
    raws = {i: ctx.lines[i].raw for i, _ in picked if i >= 0}
    found: list[Diagnosis] = []

    def lines_with(pattern: str) -> list[str]:
        return [raws[i] for i, t in picked if i >= 0 and re.search(pattern, t, re.I)]

    if fault.state == "version_mismatch":
        lib = fault.library_version
        found.append(
            _with_upgrade(
                ctx,
                "driver_version_mismatch",
                "NVML cannot start: Driver/library version mismatch, the user-space NVIDIA library"
                + (f" ({lib})" if lib else "")
                + " differs from the loaded kernel module"
                + (f" ({fault.kernel_module_version})" if fault.kernel_module_version else "")
                + "; every GPU reading is unknown",
                "Run a kernel module of the user-space driver's version"
                + (f" ({lib})" if lib else "")
                + ": reboot the node (or reload the nvidia modules); compare "
                "/proc/driver/nvidia/version",
                lines_with(r"version mismatch|NVML library version"),
                {"library_version": lib, "kernel_module_version": fault.kernel_module_version},
            )
        )
    elif fault.state == "driver_unreachable":
        summary = (
            "nvidia-smi couldn't communicate with the NVIDIA driver: the kernel module is "
            "not loaded (or not built for the running kernel); every GPU reading is "
            "unknown"
        )
        fix = (
            "Check `lsmod | grep nvidia` and `dmesg | grep NVRM`; rebuild / reinstall the "
            "driver for the running kernel (DKMS) and reboot"
        )
        evidence = lines_with(r"couldn.t communicate")
        facts: dict[str, FactValue | None] = {}
        why = _unreachable_why(ctx)
        if why is not None:
            summary = (
                "nvidia-smi couldn't communicate with the NVIDIA driver: "
                + why[0]
                + "; every GPU reading is unknown"
            )
            fix, evidence, facts = why[1], evidence + why[2], why[3]
        found.append(_with_upgrade(ctx, "driver_unreachable", summary, fix, evidence, facts))
    elif fault.state == "nvml_unavailable":
        plugin = _DEVICE_PLUGIN.search(ctx.text) is not None
        found.append(
            _diag(
                "nvml_library_not_found",
                (
                    "the Kubernetes GPU device plugin cannot load the NVML library "
                    "(libnvidia-ml.so) "
                    "in its container, so the node advertises no nvidia.com/gpu: the container "
                    "runtime did not inject the NVIDIA driver (the default runtime is not nvidia), "
                    "or the host has no NVIDIA user-space driver"
                )
                if plugin
                else (
                    "nvidia-smi cannot load the NVML library (libnvidia-ml.so): no NVIDIA "
                    "user-space "
                    "driver on this host or in this container"
                ),
                (),
                (
                    "Make nvidia the default runtime of the node's container runtime (nvidia-ctk "
                    "runtime configure --set-as-default) or use a RuntimeClass for the plugin; "
                    "check "
                    "`nvidia-smi` on the node, then restart the plugin pod"
                )
                if plugin
                else (
                    "Install the NVIDIA driver (user-space libraries) or run the container with "
                    "the "
                    "NVIDIA runtime (`--gpus`)"
                ),
                lines_with(
                    r"libnvidia-ml|NVML Shared Library|could not load NVML|"
                    r"LIBRARY_NOT_FOUND"
                ),
                {"component": "k8s-device-plugin" if plugin else None},
            )
        )
    if fault.state in ("gpu_lost", "error") and fault.gpu_errors:
        errs = [e for e in fault.gpu_errors if e.lost or _HANDLE_LOST.search(e.reason)]
        bus = [ln.raw for ln in ctx.lines if _BUS_LOST.search(ln.text)]
        handle = lines_with(r"Unable to (?:determine|detect) the device handle")
        e = errs[0] if errs else None
        ret = nvml_return(None, e.reason) if e is not None else None
        unset = [
            x
            for x in fault.gpu_errors
            if (r := nvml_return(None, x.reason)) is not None and r.code in _NVML_NOT_FOUND
        ]
        if e is None and unset and not bus:
            found.append(_handle_not_found(ctx, unset[0].pci_bus_id, unset[0].reason, handle))
        if (
            e is not None
            and not e.lost
            and not bus
            and ret is not None
            and ret.host_fault
            and ret.code in _NVML_ERROR_CODES
        ):
            # NVML's own return code, and nothing in the text says the GPU left the bus
            found.append(_nvml_error(ctx, ret, handle, e.pci_bus_id))
        elif e is not None:
            when = f" at {e.first_seen:%Y-%m-%d %H:%M:%S %z}".rstrip() if e.first_seen else ""
            rep = f" ({e.repeats} identical messages, one event)" if e.repeats > 1 else ""
            proof = (
                ""
                if e.lost or not bus
                else (
                    f"; the kernel log shows the link to it failing ({len(bus)} PCIe bus error "
                    "lines)"
                )
            )
            found.append(
                _diag(
                    "gpu_lost",
                    f"GPU {e.pci_bus_id} is lost: nvidia-smi cannot open it ('{e.reason}'){when}"
                    f"{rep}{proof}; only a reboot brings it back",
                    (),
                    _FIXES["reboot"],
                    handle + bus[:2],
                    {
                        "pci": e.pci_bus_id,
                        "reason": e.reason,
                        "action": ACTION_TEXT["reboot"],
                        "repeats": e.repeats if e.repeats > 1 else None,
                        "lost": ", ".join(x.pci_bus_id for x in errs) if len(errs) > 1 else None,
                    },
                )
            )
    if fault.state == "no_gpus" or any(
        re.match(r"No devices (?:were )?found", t, re.I) for _, t in picked
    ):
        found.append(_no_gpus(ctx, lines_with(r"No devices")))
    if unknown:
        found.append(_nvml_lost(ctx, unknown))
    return found


#: What to do for each reason the kernel gives (:class:`faults.DriverLoadProblem`).
_UNREACHABLE_FIXES: dict[str, str] = {
    "other_driver": (
        "Blacklist nouveau (`/etc/modprobe.d/blacklist-nouveau.conf`: `blacklist nouveau`, "
        "`options nouveau modeset=0`), rebuild the initramfs (`update-initramfs -u` / `dracut "
        "-f`) and reboot so nvidia binds the GPUs"
    ),
    "no_device": (
        "Check that the GPUs are visible (`lspci -d 10de:`) and not bound to another driver "
        "(`lspci -k`); blacklist nouveau / vfio if they hold them, then reload nvidia"
    ),
    "unsupported_gpu": (
        "Install the proprietary kernel module (the open nvidia.ko drives only GPUs with a GSP, "
        "Turing and newer)"
    ),
    "signature": (
        "Sign the nvidia modules with an enrolled key (enroll the DKMS MOK: `mokutil --import "
        "/var/lib/shim-signed/mok/MOK.der`, confirm at the next boot) or disable Secure Boot, "
        "then `modprobe nvidia`"
    ),
    "wrong_kernel": (
        "Rebuild the nvidia module for the running kernel (`dkms autoinstall` with that "
        "kernel's headers, or reinstall the driver package) and reboot"
    ),
    "not_installed": (
        "Install the driver's kernel module for the running kernel (`uname -r`: its headers and "
        "`dkms autoinstall`, or the distribution's prebuilt nvidia module) and reboot"
    ),
    "load_failed": (
        "Read `dmesg | grep -i nvidia` for why the module did not load; reinstall the driver for "
        "the running kernel and reboot"
    ),
    "driver_failed": (
        "Read `dmesg | grep NVRM` around that line; reinstall the driver for the running kernel "
        "and reboot"
    ),
}
#: Which reason explains the failure when the kernel gives several (the first one here wins).
_UNREACHABLE_ORDER = (
    "signature",
    "wrong_kernel",
    "not_installed",
    "other_driver",
    "unsupported_gpu",
    "load_failed",
    "no_device",
    "driver_failed",
)


def _unreachable_why(
    ctx: Context,
) -> tuple[str, str, list[str], dict[str, FactValue | None]] | None:
    """Why the driver cannot be reached, when the text holds the kernel's or modprobe's lines
    that say so (``faults.find_driver_load_problems``): (summary clause, fix, evidence lines,
    facts); None without such lines."""
    problems = find_driver_load_problems("\n".join(ln.text for ln in ctx.lines))
    if not problems:
        return None
    top: DriverLoadProblem = min(problems, key=lambda p: _UNREACHABLE_ORDER.index(p.reason))
    same = [p for p in problems if p.reason == top.reason]
    evidence = [ctx.lines[p.line_no - 1].raw for p in problems if 0 < p.line_no <= len(ctx.lines)][
        :6
    ]
    devices = next((p.devices for p in same if p.devices is not None), None)
    module = next((p.module for p in same if p.module), None)
    clause = {
        "other_driver": "the nvidia module never bound the GPUs: another driver owns them",
        "no_device": "the nvidia module loaded but probed no GPU",
        "unsupported_gpu": "the open nvidia module does not support this GPU (no GSP)",
        "signature": "the kernel refused to load the nvidia module (Secure Boot / module "
        "signature)",
        "wrong_kernel": "the nvidia module does not match the running kernel",
        "not_installed": "there is no nvidia module for the running kernel",
        "load_failed": "the nvidia module failed to load",
        "driver_failed": "the nvidia module failed",
    }[top.reason]
    count = f" ({devices} GPU(s))" if devices else ""
    return (
        f"{clause}{count}; the kernel says: {top.detail}",
        _UNREACHABLE_FIXES[top.reason],
        evidence,
        {"reason": top.reason, "gpus_unbound": devices, "module": module},
    )


_RM_INIT = re.compile(
    r"RmInitAdapter failed|rm_init_adapter failed|probe routine failed|"
    r"None of the NVIDIA devices were initialized",
    re.I,
)


def _no_gpus(ctx: Context, evidence: list[str]) -> Diagnosis:
    kernel = [ln.raw for ln in ctx.lines if _RM_INIT.search(ln.text)]
    why = ""
    if m := re.search(
        r"GPU (?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d): "
        r"RmInitAdapter failed! \((?P<code>[^)]*)\)",
        "\n".join(ln.text for ln in ctx.lines),
    ):
        why = (
            f"; the driver could not initialise GPU {m['pci']} (RmInitAdapter failed, {m['code']})"
        )
    plugin = [ln.raw for ln in ctx.lines if "Discovering GPU devices" in ln.text]
    return _diag(
        "no_gpus",
        (
            "the NVIDIA driver answers but finds no GPU (nvidia-smi: No devices were found)"
            + why
            + (
                "; nvidia-docker-plugin's GPU discovery never finished (the same fault)"
                if plugin
                else ""
            )
        )
        if evidence
        else (
            "nvidia-docker-plugin began discovering GPUs and never finished: the driver finds no "
            "GPU (the fault nvidia-smi shows as 'No devices were found')" + why
        )
        if plugin
        else ("the NVIDIA driver brings up no GPU" + why),
        (),
        (
            "Look for the GPUs in `lspci -d 10de:` and the kernel log (`dmesg | grep NVRM`): an "
            "RmInitAdapter failure points at BIOS PCIe settings (Above 4G decoding / Resizable "
            "BAR), power or a driver too old for the GPU"
        ),
        evidence + kernel + plugin,
        {"pci": m["pci"] if m else None, "rm_init_code": m["code"] if m else None},
    )


def _nvml_lost(ctx: Context, evidence: list[str]) -> Diagnosis:
    """``Failed to initialize NVML: Unknown Error``: a running container lost its GPU devices."""
    first = next(ln for ln in ctx.lines if ln.raw in evidence)
    cmd = next(
        (
            ln.raw
            for ln in reversed(ctx.lines[max(0, first.index - 3) : first.index])
            if "nvidia-smi" in ln.text
        ),
        None,
    )
    contained = _CONTAINER_HINT.search(ctx.text) is not None
    where = "in a running container" if contained else "(typically inside a running container)"
    return _diag(
        "nvml_lost_in_container",
        f"NVML cannot start {where}: 'Failed to initialize NVML: Unknown Error'; the container "
        "lost access to /dev/nvidia* (its device cgroup rewritten, e.g. by `systemctl "
        "daemon-reload` on the host)",
        (),
        (
            "Recreate the container; stop it recurring with NVIDIA's workaround: `nvidia-ctk "
            "system "
            "create-dev-char-symlinks --create-all` (or the cgroupfs driver / a fixed toolkit), "
            "see "
            "NVIDIA/nvidia-container-toolkit#48"
        ),
        ([cmd] if cmd else []) + evidence,
        {"in_container": "yes" if contained else None},
    )


#: NVML_ERROR_NOT_FOUND (6) and NVML_ERROR_GPU_NOT_FOUND (28) for a GPU nvidia-smi found on the
#: PCI bus: the driver has no initialised device there.
_NVML_NOT_FOUND = frozenset({6, 28})


def _handle_not_found(ctx: Context, pci: str, reason: str, handle: list[str]) -> Diagnosis:
    """nvidia-smi's ``Unable to determine the device handle for GPU <bus>: Not Found``: the GPU
    is on the bus but the driver did not initialise it (``RmInitAdapter failed``)."""
    ret = nvml_return(None, reason)
    assert ret is not None
    init = [ln.raw for ln in ctx.lines if _RM_INIT.search(ln.text)][:2]
    return _diag(
        "nvml_error",
        f"NVML cannot get a handle for GPU {pci}: it returned {ret.name} ({ret.code}, "
        f"'{ret.message}'): the GPU is on the PCI bus but the driver did not initialise it "
        "(the kernel log shows why, usually `RmInitAdapter failed`); nothing in the text says "
        "it left the bus (no Xid 79, no PCIe bus errors)",
        (),
        "Read `dmesg | grep NVRM` for that GPU's init error and fix it (with the open kernel "
        "module: GSP firmware of the driver's own version in /lib/firmware/nvidia, or the "
        "proprietary module for a GPU it does not support), then reload the driver or reboot",
        handle + init,
        {"nvml_return": ret.name, "nvml_code": ret.code, "pci": pci},
    )


def _nvml_error(ctx: Context, ret: NvmlReturn, handle: list[str], pci: str | None) -> Diagnosis:
    """An NVML return code that blames the GPU or the driver but not the bus (see
    :data:`_BUS_LOST`), from nvidia-smi's device-handle failure and/or the NVML calls other
    tools print (:data:`_NVML_CALL`)."""
    calls = [
        (ln, m)
        for ln in ctx.lines
        if (m := _NVML_CALL.search(ln.text)) and nvml_return(None, m["msg"]) is ret
    ]
    fn = calls[0][1]["fn"] if calls else None
    on = f" for GPU {pci}" if pci else ""
    via = f" ({fn})" if fn else ""
    return _diag(
        "nvml_error",
        f"NVML cannot get a handle{on}: it returned {ret.name} ({ret.code}, "
        f"'{ret.message}'){via}: {ret.meaning}; nothing in the text says the GPU left the bus "
        "(no Xid 79, no PCIe bus errors)",
        (),
        f"{ret.action[0].upper() + ret.action[1:] if ret.action else 'Check the driver'}; in a "
        "VM (passthrough / GPU-PV) check that the guest's driver matches what the host exposes; "
        "if the kernel log shows Xid 79 or PCIe bus errors for it, the GPU is lost: reboot",
        handle + [_shown_call(ln, m) for ln, m in calls[:2]],
        {"nvml_return": ret.name, "nvml_code": ret.code, "pci": pci, "nvml_function": fn},
    )


def _shown_call(ln: Line, m: re.Match[str]) -> str:
    return ln.raw if len(ln.raw) <= 200 else ln.raw[m.start() :].strip()


def _nvml_calls(ctx: Context) -> Diagnosis | None:
    """NVML calls a tool printed failing with a GPU/driver return code (``nvdebugdump``'s
    ``nvmlDeviceGetHandleByIndex(): Unknown Error``) when no nvidia-smi message names the
    GPU (:func:`_smi_findings` takes them as its evidence then)."""
    if "nvml" not in ctx.text or any(SMI_MESSAGE_RE.search(ln.text) for ln in ctx.lines):
        return None
    for ln in ctx.lines:
        if (
            (m := _NVML_CALL.search(ln.text))
            and (ret := nvml_return(None, m["msg"]))
            and ret.host_fault
            and ret.code in _NVML_ERROR_CODES
            and not any(_BUS_LOST.search(x.text) for x in ctx.lines)
        ):
            return _nvml_error(ctx, ret, [], None)
    return None


def _kernel_mismatch(ctx: Context) -> Diagnosis | None:
    """The kernel's own notice (``faults.find_api_mismatch``): ``NVRM: API mismatch: the
    client has the version X, but NVRM: this kernel module has the version Y``."""
    if "API mismatch" not in ctx.text:
        return None
    m = find_api_mismatch("\n".join(ln.text for ln in ctx.lines))
    if m is None:
        return None
    evidence = [
        ln.raw
        for ln in ctx.lines
        if "API mismatch" in ln.text or "this kernel module has the version" in ln.text
    ]
    return _with_upgrade(
        ctx,
        "driver_version_mismatch",
        f"Driver/library version mismatch: the user-space driver is {m.client_version} but the "
        f"loaded kernel module is {m.kernel_module_version}",
        f"Reboot the node (or reload the nvidia modules) so the kernel module is "
        f"{m.client_version}; reinstall one consistent driver version if the reboot does not "
        "fix it",
        evidence,
        {"library_version": m.client_version, "kernel_module_version": m.kernel_module_version},
    )


_NVML_KINDS: dict[str, CauseKind] = {
    "library_not_found": "nvml_library_not_found",
    "function_not_found": "nvml_function_not_found",
    "gpu_lost": "gpu_lost",
    "driver_not_loaded": "driver_unreachable",
    "version_mismatch": "driver_version_mismatch",
}
_NVML_TRACE = re.compile(
    r"pynvml|nvml\.py|NVMLError|_nvmlGetFunctionPointer|_LoadNvmlLibrary|"
    r"libnvidia-ml\.so"
)


def _nvml_return_finding(ctx: Context, fault: NvmlFault) -> list[Diagnosis]:
    """Another NVML return code that blames the GPU or the driver (``NVML_RETURNS``:
    reset required, corrupted infoROM, insufficient external power, IRQ issue, timeout,
    unknown error); a code that blames the caller is no diagnosis."""
    ret = fault.returned
    if ret is None or not ret.host_fault or ret.action is None:
        return []
    evidence = [
        ln.raw
        for ln in ctx.lines
        if ret.suffix in ln.text or ret.message.lower() in ln.text.lower()
    ]
    call = f" in {fault.nvml_function}" if fault.nvml_function else ""
    return [
        _diag(
            "nvml_error",
            f"NVML returned {ret.name} ({ret.code}, '{ret.message}'){call}: {ret.meaning}",
            (),
            ret.action[0].upper() + ret.action[1:],
            evidence[:3],
            {
                "nvml_return": ret.name,
                "nvml_code": ret.code,
                "nvml_function": fault.nvml_function,
                "exception": fault.exception,
            },
        )
    ]


def _nvml_findings(ctx: Context) -> list[Diagnosis]:
    """A pynvml traceback: what NVML's failure says about the host."""
    if _NVML_TRACE.search(ctx.text) is None:
        return []
    fault = classify_nvml_traceback("\n".join(ln.raw for ln in ctx.lines))
    kind = _NVML_KINDS.get(fault.kind)
    if kind is None:
        return _nvml_return_finding(ctx, fault)
    pattern = {
        "nvml_library_not_found": r"libnvidia-ml\.so|LibraryNotFound|NVML Shared Library",
        "nvml_function_not_found": r"_nvmlGetFunctionPointer|undefined symbol: nvml|"
        r"FunctionNotFound|Function Not Found",
        "gpu_lost": r"GpuIsLost|GPU is lost",
        "driver_unreachable": r"DriverNotLoaded|Driver Not Loaded",
        "driver_version_mismatch": r"LibRmVersionMismatch|version mismatch",
    }[kind]
    evidence = [ln.raw for ln in ctx.lines if re.search(pattern, ln.text, re.I)]
    call = fault.nvml_function
    texts = {
        "nvml_library_not_found": (
            "NVML cannot be loaded: libnvidia-ml.so.1 is not on this host's loader path (no "
            "NVIDIA user-space driver here, or not mounted into the container)",
            "Install the NVIDIA driver (or run with the NVIDIA container runtime, `--gpus`); the "
            "tool itself is fine",
        ),
        "nvml_function_not_found": (
            f"the NVML binding (pynvml / nvidia-ml-py) is newer than the driver: "
            f"{call or 'an NVML function'} is missing from libnvidia-ml (Function Not Found)",
            "Install an nvidia-ml-py / pynvml release that matches the driver, or upgrade the "
            "driver; meanwhile read processes with `nvidia-smi --query-compute-apps`",
        ),
        "gpu_lost": (
            f"NVML reports a GPU lost (NVML_ERROR_GPU_IS_LOST) in {call or 'an NVML call'}: it "
            "stopped answering on the bus; the text does not say which",
            "Find the lost GPU in the kernel log (`dmesg | grep -e NVRM -e Xid`, Xid 79) and "
            "reboot the node; if it recurs check PCIe seating, power and cooling",
        ),
        "driver_unreachable": (
            "NVML cannot reach the NVIDIA kernel driver (Driver Not Loaded)",
            "Load the nvidia kernel module (`modprobe nvidia`) or reinstall the driver for the "
            "running kernel; check `dmesg | grep NVRM`",
        ),
        "driver_version_mismatch": (
            "NVML: the user-space library and the loaded kernel module differ (RM version "
            "mismatch)",
            "Reboot the node (or reload the nvidia modules) so module and library match",
        ),
    }
    summary, fix = texts[kind]
    facts: dict[str, FactValue | None] = {"nvml_function": call, "exception": fault.exception}
    if kind == "gpu_lost":
        facts["action"] = ACTION_TEXT["reboot"]
    if kind == "driver_unreachable" and (why := _unreachable_why(ctx)) is not None:
        summary = f"NVML cannot reach the NVIDIA kernel driver (Driver Not Loaded): {why[0]}"
        fix, evidence = why[1], evidence + why[2]
        facts.update(why[3])
    if kind in ("driver_unreachable", "driver_version_mismatch"):
        return [_with_upgrade(ctx, kind, summary, fix, evidence, facts)]
    return [_diag(kind, summary, (), fix, evidence, facts)]


# ---------------------------------------------------------------------------------------------
# Fabric Manager

#: CUDA error 802 in its spellings: ``Error 802: system not yet initialized`` (PyTorch's
#: cudaGetDeviceCount warning), ``CUDA error: system not yet initialized``,
#: ``cudaErrorSystemNotReady``, ``CUDA_ERROR_SYSTEM_NOT_READY``, ``cuInit ... 802``.
_ERR_802 = re.compile(
    r"system not yet initiali[sz]ed|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY|"
    r"\bcuInit\b.{0,40}\b802\b",
    re.I,
)
#: Fabric Manager's own failure (its log / ``systemctl status nvidia-fabricmanager``).
#: Fabric Manager's own refusal to start at another version than the driver's: "fabric manager
#: NVIDIA GPU driver interface version X don't match with driver version Y".
_FM_DOWN = re.compile(r"fabric ?manager.{0,80}(?:don't|does not) match with driver version", re.I)


#: Fabric Manager's own failure, in the shapes its programs print it (NVIDIA Fabric Manager
#: user guide; the package's ``nvidia-fabricmanager-start.sh`` and systemd unit): its config
#: parser's ``fabric manager config file item: <KEY> has an invalid value`` (a path in
#: fabricmanager.cfg that does not exist: FABRIC_NODE_CONFIG_FILE, DATABASE_PATH,
#: LOG_FILE_NAME, the topology directory), the start script's ``"<nv-fabricmanager command>"
#: failed! Exit code: N``, systemd's ``nvidia-fabricmanager.service: Main/Control process
#: exited, code=exited, status=N/FAILURE`` / ``Failed to start ... fabric manager`` / ``Job for
#: nvidia-fabricmanager.service failed``, and a line of its own log naming it and an error.
_FM_OWN = re.compile(
    r"config file item:?\s*(?P<item>[A-Z][A-Z0-9_]+)\s+has an invalid value"
    r"|nv-fabricmanager\b[^\n]{0,160}?\bfailed! Exit code:\s*[1-9]"
    r"|nvidia-fabricmanager(?:\.service)?: (?:Main|Control) process exited, code=exited, "
    r"status=[1-9]"
    r"|nvidia-fabricmanager(?:\.service)?: Failed with result"
    r"|Failed to start (?:NVIDIA fabric ?manager|nvidia-fabricmanager)"
    r"|Job for nvidia-fabricmanager\.service failed"
    r"|^(?:\[[^\]]*\]\s*)*(?:nv-fabricmanager|fabric ?manager)\b[^\n]{0,120}?"
    r"\b(?:failed|error)\b",
    re.I,
)
#: The journal tag of Fabric Manager's own lines (the normaliser drops syslog tags).
_FM_TAGGED = re.compile(r"\bnv-fabricmanager\[\d+\]: (?P<msg>.*\b(?:failed|error)\b.*)", re.I)
#: Fabric Manager finding no NVSwitch to manage (``NV_WARN_NOTHING_TO_DO``): a host without
#: NVSwitches (PCIe GPUs, NVLink bridges) needs no Fabric Manager, its failure to start there
#: breaks nothing (the service should be disabled); only CUDA's error 802 makes it a fault.
_FM_NOTHING = re.compile(r"NV_WARN_NOTHING_TO_DO")


def _fabric_manager_down(ctx: Context) -> Diagnosis | None:
    """Fabric Manager's own failure lines (:data:`_FM_OWN`) without CUDA's error 802."""
    if _FM_NOTHING.search(ctx.text):
        return None
    hits: list[tuple[str, re.Match[str] | None]] = [
        (ln.raw, m) for ln in ctx.lines if (m := _FM_OWN.search(ln.text))
    ]
    hits += [(t.group(0), None) for t in _FM_TAGGED.finditer(ctx.text)]
    if not hits:
        return None
    item = next((m["item"] for _, m in hits if m is not None and m["item"]), None)
    if item:
        what = (
            f"its config file's {item} has an invalid value (usually a path in "
            "fabricmanager.cfg that does not exist on this host)"
        )
        fix = (
            f"Fix {item} in fabricmanager.cfg (every path it names must exist: "
            "FABRIC_NODE_CONFIG_FILE, DATABASE_PATH, LOG_FILE_NAME, TOPOLOGY_FILE_PATH), "
            "then restart nvidia-fabricmanager and check `nvidia-smi -q | grep -A2 Fabric`"
        )
    else:
        what = "it exited with an error"
        fix = (
            "Read `journalctl -u nvidia-fabricmanager` and /var/log/fabricmanager.log; run "
            "nvidia-fabricmanager at exactly the driver's version, then restart it and "
            "check `nvidia-smi -q | grep -A2 Fabric`"
        )
    return _diag(
        "fabric_manager",
        f"nvidia-fabricmanager failed: {what}. On an NVSwitch system (HGX/DGX) the NVLink "
        "fabric then stays uninitialised and CUDA fails with error 802 'system not yet "
        "initialized'",
        (),
        fix,
        [raw for raw, _ in hits[:3]],
        {"config_item": item},
    )


def _fabric_manager(ctx: Context) -> Diagnosis | None:
    hits = [ln for ln in ctx.lines if _ERR_802.search(ln.text) or _FM_DOWN.search(ln.text)]
    if not hits:
        return _fabric_manager_down(ctx)
    return _diag(
        "fabric_manager",
        "CUDA cannot start on this NVSwitch system: error 802 'system not yet initialized' "
        "(cudaErrorSystemNotReady): the NVLink fabric is not initialised because "
        "nvidia-fabricmanager is not running or not at the driver's exact version",
        (),
        (
            "Install nvidia-fabricmanager of exactly the driver's version and start it "
            "(`systemctl enable --now nvidia-fabricmanager`); check `nvidia-smi -q | grep -A2 "
            "Fabric`, then rerun"
        ),
        [ln.raw for ln in hits[:3]],
        {},
    )


def _kernel_no_gpus(ctx: Context) -> Diagnosis | None:
    """The driver failed to bring up its GPUs (``RmInitAdapter failed``), with no nvidia-smi
    output in the text (that case is :func:`_smi_findings`)."""
    if not any(
        _RM_INIT.search(ln.text)
        and "RmInitAdapter" in ln.text.replace("rm_init_adapter", "RmInitAdapter")
        for ln in ctx.lines
    ):
        return None
    if any(SMI_MESSAGE_RE.search(ln.text) for ln in ctx.lines):
        return None
    return _no_gpus(ctx, [])


def _plugin_stalled(ctx: Context) -> Diagnosis | None:
    """nvidia-docker-plugin (1.x) began discovering GPUs and never finished: the same fault as
    nvidia-smi's ``No devices were found`` (:func:`faults.parse_plugin_discovery`)."""
    if "nvidia-docker-plugin" not in ctx.text or any(
        SMI_MESSAGE_RE.search(ln.text) for ln in ctx.lines
    ):
        return None
    disc = parse_plugin_discovery("\n".join(r.strip() for r in ctx.text.splitlines()))
    if not disc.stalled:
        return None
    return _no_gpus(ctx, [])


#: NVML_ERROR_OPERATING_SYSTEM (17): nvidia-smi's "Failed to initialize NVML: GPU access blocked
#: by the operating system" (WSL2's libnvidia-ml), nvml.h's "The operating system has blocked
#: the request.", pynvml's ``NVMLError_OperatingSystem``.
_NVML_BLOCKED = re.compile(
    r"GPU access blocked by the operating system|NVMLError_OperatingSystem"
    r"|operating system has blocked the request",
    re.I,
)
_WSL = re.compile(r"\bWSL|/usr/lib/wsl|microsoft-standard|nvidia-smi\.exe|Windows", re.I)


def _nvml_blocked(ctx: Context) -> Diagnosis | None:
    """NVML blocked by the host OS: under WSL2, Windows does not expose the GPU to the VM."""
    hits = [ln.raw for ln in ctx.lines if _NVML_BLOCKED.search(ln.text)]
    if not hits:
        return None
    ret = NVML_RETURNS[17]
    return _diag(
        "nvml_blocked_by_host",
        f"NVML cannot start: the operating system blocked its access to the GPU ({ret.name}, "
        f"{ret.code}). This is WSL2's message when Windows does not hand the GPU to the Linux VM "
        "(GPU paravirtualisation): a data-center GPU in TCC mode, a Windows (Server) build or "
        "driver without WSL GPU support, or Linux NVIDIA driver packages installed inside the "
        "distribution over /usr/lib/wsl/lib; the GPU itself is not faulty",
        (),
        "Use the Windows NVIDIA driver with WSL support (on Windows: `nvidia-smi -dm` to move a "
        "TCC GPU to WDDM/MCDM), `wsl --update`, and remove Linux nvidia-driver / nvidia-utils "
        "packages from the distribution (use /usr/lib/wsl/lib/nvidia-smi); outside WSL, a "
        "container's device cgroup blocked /dev/nvidia*: start it with --gpus",
        hits[:2],
        {
            "nvml_return": ret.name,
            "nvml_code": ret.code,
            "wsl": "yes" if _WSL.search(ctx.text) else None,
        },
    )


#: NVML_ERROR_NO_PERMISSION for one reading: a tool's "error getting <reading>: Insufficient
#: Permissions" (the Go bindings' callers: the device plugin, DCGM exporter), or pynvml's
#: ``NVMLError_NoPermission`` (:func:`classify_nvml_traceback` names the call and its fields).
_NO_PERMISSION = re.compile(
    r"error getting (?P<what>[\w ]+?): Insufficient P\w*ssions|NVMLError_NoPermission"
)
_READING_OF: dict[str, str] = {
    "nvmlDeviceGetMemoryInfo": "memory info",
    "nvmlDeviceGetMemoryInfo_v2": "memory info",
    "nvmlDeviceGetComputeRunningProcesses": "the process list",
    "nvmlDeviceGetPowerUsage": "power",
    "nvmlDeviceGetClockInfo": "clocks",
}
_MIG = re.compile(r"\bMIG\b|\bmig-|MigDevice", re.I)


def _nvml_permission(ctx: Context) -> Diagnosis | None:
    """NVML refused one reading (``Insufficient Permissions``); the GPU is fine. Under MIG a
    container given a MIG instance may not read the parent GPU's memory totals."""
    hits = [(ln, m) for ln in ctx.lines if (m := _NO_PERMISSION.search(ln.text))]
    if not hits:
        return None
    fn = None
    reading = next((m["what"] for _, m in hits if m["what"]), None)
    if _NVML_TRACE.search(ctx.text):
        fault = classify_nvml_traceback("\n".join(ln.raw for ln in ctx.lines))
        if fault.kind == "no_permission":
            fn = fault.nvml_function
            reading = reading or _READING_OF.get(fn or "", fn)
    mig = _MIG.search(ctx.text) is not None
    ret = NVML_RETURNS[4]
    if fn and fn.startswith("nvmlInit"):
        # refused at its start, NVML gives the process no reading at all
        return _diag(
            "nvml_permission",
            f"NVML refused to start ({fn}) with {ret.name} ({ret.code}, '{ret.message}'): "
            "this user may not open the GPUs' device files, so every reading fails (not one "
            "refused field; the GPUs themselves may be fine)",
            (),
            "Run it as a user with access to /dev/nvidia* (the video group, or the driver's "
            "device-file permissions: NVreg_DeviceFileMode / NVreg_DeviceFileGID); on Windows, "
            "as an administrator",
            [ln.raw for ln, _ in hits[:2]],
            {
                "nvml_return": ret.name,
                "nvml_code": ret.code,
                "nvml_function": fn,
                "reading": "every reading",
            },
        )
    what = reading or "a reading"
    return _diag(
        "nvml_permission",
        f"NVML refused one reading, {what}{f' ({fn})' if fn else ''}, with {ret.name} "
        f"({ret.code}, '{ret.message}')"
        + (
            "; the GPU has MIG enabled: a container given a MIG instance may not read the "
            "parent GPU's totals"
            if mig
            else ": the caller may not make this call"
        )
        + ". The GPU is fine: only this reading was refused",
        (),
        (
            "Read the MIG device's own values (nvmlDeviceGetMigDeviceHandleByIndex, or "
            "torch.cuda.mem_get_info in the process), or give the container MIG monitoring "
            "access (NVIDIA_MIG_MONITOR_DEVICES=all; for the NVIDIA device plugin on its "
            "DaemonSet) and restart it"
        )
        if mig
        else (
            "Make the call as root or with access to /dev/nvidia* and /dev/nvidia-caps, or skip "
            "that reading (the tool should treat it as unavailable)"
        ),
        [ln.raw for ln, _ in hits[:2]],
        {
            "nvml_return": ret.name,
            "nvml_code": ret.code,
            "nvml_function": fn,
            "reading": reading,
            "mig": "yes" if mig else None,
        },
    )


def _rules_xid(ctx: Context) -> Iterable[Diagnosis]:
    return _xid_findings(ctx)


def _rules_smi(ctx: Context) -> Iterable[Diagnosis]:
    return _smi_findings(ctx)


def _rules_nvml(ctx: Context) -> Iterable[Diagnosis]:
    return _nvml_findings(ctx)


#: The rules of this module (the engine ranks what they find).
#: A line that states the fault in words, with no kernel line of it in the text (a reply in an
#: issue: "You're getting a XID 79, fallen off the bus."): the Xid and the words together.
_SAID_LOST = re.compile(
    r"\bXid\W{0,3}79\b.{0,40}fallen off the bus|fallen off the bus.{0,40}"
    r"\bXid\W{0,3}79\b",
    re.I,
)


def _said_lost(ctx: Context) -> Diagnosis | None:
    """Xid 79 named with its words on a line that is not the kernel's (see :data:`_SAID_LOST`),
    when no kernel line shows it: the text says the GPU fell off the bus."""
    if any("NVRM" in ln.text for ln in ctx.lines):
        return None  # the kernel's own lines are _rules_xid's
    hit = next((ln for ln in ctx.lines if _SAID_LOST.search(ln.text)), None)
    if hit is None:
        return None
    return _diag(
        "gpu_lost",
        "The text says the GPU fell off the bus (Xid 79), with no kernel line of it: the GPU "
        "stopped answering on PCIe and stays lost until a reboot (power, overheating, the "
        "slot or riser, the board's firmware)",
        (),
        _FIXES["reboot"],
        [hit.raw],
        {"xid": 79, "action": ACTION_TEXT["reboot"]},
    )


#: A hardware Xid named in words beside what it means, on a line that is not the kernel's (a
#: report's summary of its dmesg: "`Xid 48 / 171`: uncorrectable double-bit ECC (DBE) in
#: HBM"): the number, then within the line the fault's words.
_SAID_XID = re.compile(r"\bXid\W{0,3}(?P<xid>\d{2,3})\b(?P<rest>.*)$", re.I)
_FAULT_WORDS = re.compile(
    r"\bECC\b|\bDBE\b|double[- ]bit|uncorrectable|row remap|remapp|NVLink|\bGSP\b|\bHBM\b"
    r"|memory error|page retire",
    re.I,
)
#: The text says where the Xids came from: the kernel's log, or a GPU's PCI bus id.
_FROM_KERNEL = re.compile(r"\bdmesg\b|kernel log|journalctl|/var/log/(?:syslog|messages|kern)")
_PCI_ANY = re.compile(r"\b(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\b")


def _said_xid(ctx: Context) -> Diagnosis | None:
    """A hardware Xid (one whose action is more than restarting the application) stated in
    words with its fault on the same line, in a text that names the kernel's log or a GPU's
    PCI bus id and has no kernel line of it: the report's own summary of its dmesg. The first
    one stated is the root (Xid 79 in words: :func:`_said_lost`)."""
    if any("NVRM" in ln.text for ln in ctx.lines):
        return None  # the kernel's own lines are _rules_xid's
    text_pci = next((m["pci"] for ln in ctx.lines if (m := _PCI_ANY.search(ln.text))), None)
    if text_pci is None and not any(_FROM_KERNEL.search(ln.text) for ln in ctx.lines):
        return None
    for ln in ctx.lines:
        m = _SAID_XID.search(ln.text)
        if m is None or not _FAULT_WORDS.search(m["rest"]):
            continue
        code = int(m["xid"])
        info = xid_info(code)
        if (
            code == 79
            or info.role != "root"
            or ACTION_RANK.get(info.action, 0) <= ACTION_RANK.get("restart_app", 0)
        ):
            continue
        on = f"GPU {text_pci}" if text_pci else "a GPU"
        return _diag(
            "xid",
            f"The text reports Xid {code} ({info.short}) on {on}, with no kernel line of it; "
            f"NVIDIA's action: {ACTION_TEXT.get(info.action, info.action)}",
            (),
            _FIXES.get(info.action, _FIXES["unknown"]).format(pci=text_pci or "<the faulting GPU>"),
            [ln.raw],
            {
                "xid": code,
                "pci": text_pci,
                "action": ACTION_TEXT.get(info.action, info.action),
                "xid_name": info.mnemonic.split(" /")[0] or None,
            },
        )
    return None


RULES = (
    _said_lost,
    _said_xid,
    _rules_xid,
    _rules_smi,
    _rules_nvml,
    _nvml_calls,
    _kernel_mismatch,
    _fabric_manager,
    _kernel_no_gpus,
    _plugin_stalled,
    _nvml_blocked,
    _nvml_permission,
)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: the failure words less PyTorch's chatter (``device``, ``process``, ``torch``,
#: ``warning``), with the few lines of this module that hold one of those and no other word:
#: nvidia-smi's ``No devices were found``, the Kubernetes device plugin's name, a wrapper's
#: bare timestamp (:data:`_WRAPPER_STAMP`: ``WARNING: Tue Mar  5 ...``, ``WARNING: 2019-03-05
#: ...``). Never NCCL's INFO lines.
_WORDS = own_words(
    added=(
        "no devices",
        "device plugin",
        "device-plugin",
        "deviceplugin",
        *(f"warning: {day}" for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")),
        "warning: 1",
        "warning: 2",
    )
)
NEEDS = {rule: Needs(_WORDS, alone=True, unless=(NCCL_INFO,)) for rule in RULES}
NEEDS[_nvml_blocked] = Needs((*_WORDS, "operating"), alone=True, unless=(NCCL_INFO,))
NEEDS[_nvml_permission] = Needs(
    (*_WORDS, "insufficient p", "nvmlerror_nopermission"), alone=True, unless=(NCCL_INFO,)
)
