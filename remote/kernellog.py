"""A host's NVIDIA kernel messages over a time window, and which of them hit a node's GPUs.

A failed job's diagnosis reads the host's kernel log (``console/jobs/status.explain_failure``):
a GPU that fell off the bus (Xid 79), a GSP timeout (Xid 119) or an NVLink error explains the
CUDA and NCCL errors the training printed. Only the events on the GPUs the job's container used
may become its root cause; the others are context.

* :func:`read_gpu_kernel_lines`: the ``NVRM:`` messages between two Unix times. The sources and
  their flags are the host agent's (:class:`remote.agent.agent.KernelLogReader`): ``journalctl
  -k`` first (here with ``--since @<unix>``/``--until @<unix>`` and ``-o short-iso``, so the
  journal does the window), then ``dmesg`` (``--time-format=iso``, util-linux 2.26+, else plain
  ``dmesg`` with seconds since boot placed with the host's ``/proc/uptime`` and ``date``). Each
  command runs with a time limit and its output is bounded; a refusal (no journal group,
  ``kernel.dmesg_restrict=1``) or a missing tool is a :attr:`KernelLines.reason`, never an
  exception.
* :func:`node_gpus`: the container's GPUs (``NVIDIA_VISIBLE_DEVICES`` as Docker derives it,
  :attr:`remote.docker.ContainerInfo.gpu_devices`) as PCI bus ids, from ``nvidia-smi
  --query-gpu=index,uuid,pci.bus_id`` on the host.
* :func:`split_by_gpu`: the window's Xid events on those GPUs (their kernel lines, to diagnose
  with the node's log) and one context line per other GPU.

Parsing the kernel log stays :func:`remote.telemetry.faults.scan_kernel_log` (stamps, wrapped
messages, Xid lines, "fallen off the bus", GSP timeouts); this module only chooses lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from remote.agent.agent import _JOURNAL_REFUSALS, KERNEL_LOG_TIMEOUT_S, nvrm_lines
from remote.errors import GpuConsoleError
from remote.telemetry.faults import XidEvent, chain_root, pci_key, scan_kernel_log
from remote.telemetry.smi import parse_csv_rows
from remote.transport import Transport

__all__ = [
    "KERNEL_READ_BUDGET_S",
    "SMI_GPU_FIELDS",
    "KernelLines",
    "NodeGpus",
    "NodeKernelEvents",
    "describe",
    "event_time_s",
    "node_gpus",
    "node_kernel_events",
    "read_gpu_kernel_lines",
    "split_by_gpu",
]

log = logging.getLogger("gpuconsole.kernellog")

#: Seconds one command (journalctl, dmesg, nvidia-smi) may run: the agent's limit.
COMMAND_TIMEOUT_S = KERNEL_LOG_TIMEOUT_S
#: Seconds everything :func:`node_kernel_events` does may take (a slow host must not hold up
#: ``ps``); past it the kernel log counts as unreadable.
KERNEL_READ_BUDGET_S = 12.0
#: Kernel messages journalctl may print for one window (``--lines``): bounds the output of a
#: long job on a host whose kernel logs a lot; the newest are kept by journalctl.
JOURNAL_MAX_LINES = 50000
#: nvidia-smi's columns for :func:`node_gpus`.
SMI_GPU_FIELDS = ("index", "uuid", "pci.bus_id")
_RESTRICT_PATH = "/proc/sys/kernel/dmesg_restrict"
_PERMISSION = ("Operation not permitted", "Permission denied")


@dataclass(frozen=True)
class KernelLines:
    """The NVIDIA kernel messages of one host over a window.

    Attributes:
        lines: the ``NVRM`` messages' lines as the source printed them (stamps included),
            oldest first; a wrapped message keeps all its lines.
        source: ``journalctl`` or ``dmesg``; ``None`` when no source could be read.
        reason: why the kernel log could not be read (every source's answer), else ``None``.
        dropped: messages' lines left out over the ``limit`` (the latest ones).
        outside: Xid events the source printed outside the window, or at a time that could
            not be placed in it (left out).
    """

    lines: tuple[str, ...] = ()
    source: str | None = None
    reason: str | None = None
    dropped: int = 0
    outside: int = 0

    @property
    def text(self) -> str:
        """The lines joined, for :func:`remote.telemetry.faults.scan_kernel_log`."""
        return "\n".join(self.lines)


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs one container used, as PCI bus ids of its host.

    Attributes:
        bus_ids: nvidia-smi's ``pci.bus_id`` of each (``00000000:3B:00.0``); empty for a
            container without GPUs; ``None`` when not known (see ``reason``).
        all_gpus: the container saw every GPU of the host (``all``): every event is its own,
            also a GSP timeout that names only the driver's GPU number.
        uuids: their UUIDs, where nvidia-smi printed them.
        reason: why the mapping is unknown, else ``None``.
    """

    bus_ids: tuple[str, ...] | None
    all_gpus: bool = False
    uuids: tuple[str, ...] = ()
    reason: str | None = None

    def owns(self, ev: XidEvent) -> bool | None:
        """Whether ``ev`` is on one of these GPUs; ``None`` when that cannot be told."""
        if self.all_gpus:
            return True
        if self.bus_ids is None:
            return None
        if ev.uuid is not None and ev.uuid in self.uuids:
            return True
        key = pci_key(ev.pci_bus_id)
        if key is None:
            return None  # a GSP message naming the driver's GPU number (GPU4), not a bus
        return key in {pci_key(b) for b in self.bus_ids}


@dataclass(frozen=True)
class NodeKernelEvents:
    """The host's kernel messages over a node's lifetime, split by the node's GPUs.

    Attributes:
        own_lines: the kernel lines of the Xid events on the node's GPUs (each event's whole
            message), in log order: diagnosed together with the node's log.
        context: one line per other GPU (or per GPU whose owner is unknown) with events:
            ``the host logged Xid 79 on 0000:3b:00 during the job (...)``.
        reason: why the kernel log could not be read, else ``None``.
        gpus: the node's GPUs as found.
        source: the kernel log's source, or ``None``.
        events: how many Xid events the window holds (all GPUs).
    """

    own_lines: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    reason: str | None = None
    gpus: NodeGpus | None = None
    source: str | None = None
    events: int = 0


# ---------------------------------------------------------------------------------------------
# reading


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


async def _run(transport: Transport, argv: list[str]) -> tuple[int, str, str]:
    """``argv`` on the host: ``(returncode, stdout, stderr)``; a transport error (no answer
    within :data:`COMMAND_TIMEOUT_S`, a lost connection) is ``(-1, "", why)``."""
    try:
        res = await transport.run(argv, timeout=COMMAND_TIMEOUT_S)
    except GpuConsoleError as e:
        return -1, "", e.message
    return res.returncode, res.stdout, res.stderr


async def _journalctl(
    transport: Transport, since_s: float, until_s: float
) -> tuple[list[str], bool] | str:
    """The window's kernel messages from the journal (``(lines, any_entry)``) or the reason it
    cannot show them."""
    argv = [
        "journalctl",
        "-k",
        "--since",
        f"@{int(since_s)}",
        "--until",
        f"@{int(until_s) + 1}",
        "-o",
        "short-iso",
        "--no-pager",
        f"--lines={JOURNAL_MAX_LINES}",
    ]
    rc, out, err = await _run(transport, argv)
    if rc != 0:
        return "journalctl: " + (_last_line(err) or f"exit status {rc}")
    refused = next((r for r in _JOURNAL_REFUSALS if r in err or r in out), None)
    if refused is not None:  # the line that says so ("Hint: You are currently not ...")
        return "journalctl: " + next(
            (ln.strip() for ln in (err + "\n" + out).splitlines() if refused in ln), refused
        )
    lines = [ln for ln in out.splitlines() if not ln.startswith("-- ")]
    return lines, bool(lines)


async def _dmesg(transport: Transport) -> tuple[list[str], bool] | str:
    """The kernel ring buffer (``(lines, iso_stamps)``) or the reason it cannot be read."""
    why: list[str] = []
    for argv, iso in ((["dmesg", "--time-format=iso"], True), (["dmesg"], False)):
        rc, out, err = await _run(transport, argv)
        if rc == 0:
            return out.splitlines(), iso
        said = _last_line(err)
        said = said[len("dmesg: ") :] if said.startswith("dmesg: ") else said
        why.append(said or f"exit status {rc}")
        if rc == -1 or rc == 127 or any(p in err for p in _PERMISSION):
            break  # no answer, not installed, or refused: the plain form fares no better
    text = "dmesg: " + why[-1]
    rc, out, _ = await _run(transport, ["cat", _RESTRICT_PATH])
    if rc == 0 and out.strip() == "1" and any(p in why[-1] for p in _PERMISSION):
        text += (
            " (kernel.dmesg_restrict=1: only root or CAP_SYSLOG may read the kernel log; "
            "journalctl needs the adm or systemd-journal group)"
        )
    return text


async def _host_clock(transport: Transport) -> tuple[float | None, int | None]:
    """The host's boot time (Unix s, from ``date +%s`` minus ``/proc/uptime``) and its UTC
    offset (s, ``date +%z``), to place ``dmesg``'s seconds since boot and a wall time printed
    without a zone; ``None`` where not known."""
    (rc_d, out_d, _), (rc_u, out_u, _) = await asyncio.gather(
        _run(transport, ["date", "+%s %z"]), _run(transport, ["cat", "/proc/uptime"])
    )
    now: float | None = None
    offset: int | None = None
    parts = out_d.split()
    if rc_d == 0 and len(parts) == 2 and parts[0].isdigit() and len(parts[1]) == 5:
        now = float(parts[0])
        z = parts[1]
        sign = -1 if z[0] == "-" else 1
        try:
            offset = sign * (int(z[1:3]) * 3600 + int(z[3:5]) * 60)
        except ValueError:
            offset = None
    boot: float | None = None
    try:
        if now is not None and rc_u == 0:
            boot = now - float(out_u.split()[0])
    except (IndexError, ValueError):
        boot = None
    return boot, offset


def event_time_s(ev: XidEvent, boot_s: float | None, utc_offset_s: int | None) -> float | None:
    """When ``ev`` happened, Unix s: its zoned wall time; a wall time without a zone in the
    host's zone (``utc_offset_s``); seconds since boot after ``boot_s``; else ``None``."""
    if ev.wall_time is not None:
        wall = ev.wall_time
        if wall.tzinfo is None:
            if utc_offset_s is None:
                return None
            wall = wall.replace(tzinfo=timezone(timedelta(seconds=utc_offset_s)))
        return wall.timestamp()
    if ev.uptime_s is not None and boot_s is not None:
        return boot_s + ev.uptime_s
    return None


def _aware(ev: XidEvent) -> bool:
    return ev.wall_time is not None and ev.wall_time.tzinfo is not None


async def read_gpu_kernel_lines(
    transport: Transport, since_s: float, until_s: float, *, limit: int = 2000
) -> KernelLines:
    """The host's NVIDIA kernel messages between ``since_s`` and ``until_s`` (Unix s).

    ``journalctl -k`` first (the journal keeps the window), then ``dmesg`` when the journal is
    refused, missing or holds no kernel message in the window (a journal that does not store
    the kernel's messages says nothing either). ``dmesg`` has no window of its own: its Xid
    events are kept when their stamps fall in it (seconds since boot and zone-less times are
    placed with the host's clock; an event that cannot be placed is left out and counted in
    :attr:`KernelLines.outside`). At most ``limit`` lines are kept, the oldest first (the root
    of a chain comes first). Never raises: an unreadable log comes back with
    :attr:`KernelLines.reason` (e.g. ``dmesg: read kernel buffer failed: Operation not
    permitted (kernel.dmesg_restrict=1: ...)``).
    """
    why: list[str] = []
    journal = await _journalctl(transport, since_s, until_s)
    if isinstance(journal, str):
        why.append(journal)
    elif journal[1]:
        return _bounded(nvrm_lines(journal[0]), "journalctl", limit)
    ring = await _dmesg(transport)
    if isinstance(ring, str):
        if not why:  # the journal answered (nothing in the window): that is the answer
            return KernelLines(source="journalctl")
        why.append(ring)
        return KernelLines(reason="kernel log unreadable: " + "; ".join(why))
    lines, _ = ring
    keep = nvrm_lines(lines)
    if not keep:
        return KernelLines(source="dmesg")
    scan = scan_kernel_log("\n".join(keep))
    boot: float | None = None
    offset: int | None = None
    if not all(_aware(e) for e in scan.events):
        boot, offset = await _host_clock(transport)
    out_rows: set[int] = set()
    outside = 0
    for ev in scan.events:
        t = event_time_s(ev, boot, offset)
        if t is None or not since_s <= t <= until_s:
            outside += 1
            out_rows.update(ev.rows())
    kept = [ln for no, ln in enumerate(keep, 1) if no not in out_rows]
    return _bounded(kept, "dmesg", limit, outside)


def _bounded(lines: Sequence[str], source: str, limit: int, outside: int = 0) -> KernelLines:
    dropped = max(0, len(lines) - limit)
    return KernelLines(lines=tuple(lines[:limit]), source=source, dropped=dropped, outside=outside)


# ---------------------------------------------------------------------------------------------
# the node's GPUs


async def node_gpus(transport: Transport, devices: str | None) -> NodeGpus:
    """The GPUs named by ``devices`` (``NVIDIA_VISIBLE_DEVICES``: ``all``, ``none``,
    indices ``0,1``, UUIDs ``GPU-...``, MIG ``0:1``) as the host's PCI bus ids, from
    ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader``.

    ``None`` devices (the container's GPUs are not known), a MIG device UUID, a device
    nvidia-smi does not list, or nvidia-smi failing give an unknown mapping with the reason.
    """
    if devices is None:
        return NodeGpus(
            None, reason="the container's GPUs are not known (docker inspect shows no GPU request)"
        )
    spec = devices.strip()
    if spec == "all":
        return NodeGpus((), all_gpus=True)
    if spec in ("", "none", "void"):
        return NodeGpus(())
    argv = ["nvidia-smi", f"--query-gpu={','.join(SMI_GPU_FIELDS)}", "--format=csv,noheader"]
    rc, out, err = await _run(transport, argv)
    if rc != 0:
        said = _last_line(err) or _last_line(out) or f"exit status {rc}"
        return NodeGpus(None, reason=f"nvidia-smi: {said}")
    rows = parse_csv_rows(out, SMI_GPU_FIELDS)
    by_index = {str(r["index"]): r for r in rows if r["index"] is not None}
    by_uuid = {str(r["uuid"]): r for r in rows if r["uuid"] is not None}
    bus: list[str] = []
    uuids: list[str] = []
    for dev in (d.strip() for d in spec.split(",") if d.strip()):
        row = by_uuid.get(dev) if dev.startswith("GPU-") else by_index.get(dev.split(":")[0])
        if row is None or row["pci.bus_id"] is None:
            return NodeGpus(None, reason=f"device {dev} is not among the GPUs nvidia-smi lists")
        bus.append(str(row["pci.bus_id"]))
        if row["uuid"] is not None:
            uuids.append(str(row["uuid"]))
    return NodeGpus(tuple(bus), uuids=tuple(uuids))


# ---------------------------------------------------------------------------------------------
# the split


def split_by_gpu(kernel: KernelLines, gpus: NodeGpus) -> NodeKernelEvents:
    """The events of ``kernel`` on ``gpus`` (their lines) and a context line per other GPU.

    An event whose GPU cannot be told apart (unknown mapping, a GSP message naming only the
    driver's GPU number) is context, never the node's own."""
    if kernel.reason is not None:
        return NodeKernelEvents(reason=kernel.reason, gpus=gpus)
    scan = scan_kernel_log(kernel.text)
    own_rows: set[int] = set()
    others: dict[str, list[XidEvent]] = {}
    for ev in scan.events:
        if gpus.owns(ev):
            own_rows.update(ev.rows())
        else:
            key = pci_key(ev.pci_bus_id)
            name = ev.pci_bus_id if key is None else "{:04x}:{:02x}:{:02x}".format(*key[:3])
            others.setdefault(name, []).append(ev)
    if gpus.bus_ids is None:
        why = f"which GPUs the node used is unknown: {gpus.reason}"
    else:
        why = "not a GPU of this node"
    context = []
    for name, evs in others.items():
        _, xid = chain_root(evs)
        more = f" and {len(evs) - 1} more event(s)" if len(evs) > 1 else ""
        context.append(f"the host logged Xid {xid}{more} on {name} during the job ({why})")
    own = tuple(ln for no, ln in enumerate(kernel.lines, 1) if no in own_rows)
    return NodeKernelEvents(
        own_lines=own,
        context=tuple(context),
        gpus=gpus,
        source=kernel.source,
        events=len(scan.events),
    )


async def node_kernel_events(
    transport: Transport, devices: str | None, since_s: float, until_s: float
) -> NodeKernelEvents:
    """:func:`read_gpu_kernel_lines` and :func:`node_gpus` at once, then
    :func:`split_by_gpu`; within :data:`KERNEL_READ_BUDGET_S` (past it: unreadable). Never
    raises for the host's answers."""
    try:
        kernel, gpus = await asyncio.wait_for(
            asyncio.gather(
                read_gpu_kernel_lines(transport, since_s, until_s), node_gpus(transport, devices)
            ),
            KERNEL_READ_BUDGET_S,
        )
    except asyncio.TimeoutError:
        return NodeKernelEvents(
            reason=f"kernel log unreadable: no answer within {KERNEL_READ_BUDGET_S:g} s"
        )
    return split_by_gpu(kernel, gpus)


def describe(events: NodeKernelEvents, since_s: float, until_s: float) -> str:
    """One line for the log: what the kernel log said about the window."""
    span = (
        f"{datetime.fromtimestamp(since_s, timezone.utc):%Y-%m-%dT%H:%M:%SZ} .. "
        f"{datetime.fromtimestamp(until_s, timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
    )
    if events.reason is not None:
        return f"host kernel log {span}: {events.reason}"
    gpus = events.gpus
    mapping = (
        "unknown"
        if gpus is None
        else "all"
        if gpus.all_gpus
        else f"unknown: {gpus.reason}"
        if gpus.bus_ids is None
        else ", ".join(gpus.bus_ids) or "none"
    )
    return (
        f"host kernel log {span} ({events.source}): {events.events} Xid event(s), "
        f"{len(events.own_lines)} line(s) on the node's GPUs ({mapping}), "
        f"{len(events.context)} other GPU(s)"
    )
