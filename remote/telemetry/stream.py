"""One host's telemetry stream: the agent shipped over the connection, or nvidia-smi.

The agent (``remote/agent/agent.py``, stdlib only), its NVML binding (``remote/agent/nvmlc.py``)
and the ``pynvml.py`` of the console's own nvidia-ml-py (the agent's fallback binding) are
uploaded into ``~/.cache/gpuconsole/agent/<sha256[:16]>/`` (re-uploaded only
when they change) and run with the host's ``python3``. Its stdin stays open as the liveness
link: when the connection or the console goes away, stdin closes and the agent exits, so
nothing outlives the connection.

Start-up, paid once per connection (see docs/benchmarks.md, "First fleet snapshot"): one
command, no SFTP session, when the host already has this bundle (:func:`agent_argv`): ``sh``
enters the bundle's folder (status :data:`LAUNCH_MISSING` when it is not there: the bundle is
uploaded and the command run again) and hands over (``exec``) to the interpreter, run with
``-I -S`` (no site, no user site, no ``PYTHON*`` variables), which imports ``agent`` from its
folder (byte code cached there after the first start) instead of compiling the script. The
interpreter is the one the agent linked as ``py`` in its folder on its first start
(``--link-python``), else ``python3`` from PATH: a PATH shim such as pyenv's (a shell script
that starts several processes) is paid once per host and bundle, not once per connection.
Each GPU's highest clocks and PCIe link, fixed until the next boot or driver, are kept in the
folder (:data:`BOOT_FIXED_FILE`): a start reads them from there instead of the driver
(``nvmlDeviceGetMaxClockInfo`` alone costs 1.4-2.7 ms of CPU a call).

When the host has no ``python3`` (exit 127) or NVML cannot load while ``nvidia-smi`` is there
(the agent exits :data:`AGENT_EXIT_NO_NVML` after one sample saying why), the stream falls back
to ``nvidia-smi --query-gpu=... -lms`` over the same connection, parsed into the same schema,
with ``nvidia-smi --query-compute-apps`` run once per interval beside it for the processes. A
host with neither NVML nor ``nvidia-smi`` (no driver) keeps the agent: it streams host samples
with zero GPUs and state ``no_driver`` every interval, never a fallback or a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from remote.errors import TransportError
from remote.telemetry.schema import Sample, read_sample
from remote.transport import Transport

log = logging.getLogger("gpuconsole.remote.telemetry")

AGENT_BASE = ".cache/gpuconsole/agent"
#: The agent's exit status when NVML cannot be used (the console falls back to nvidia-smi).
AGENT_EXIT_NO_NVML = 3
_AGENT_DIR = Path(__file__).resolve().parent.parent / "agent"


def agent_bundle() -> dict[str, bytes]:
    """The files uploaded to a host: ``agent.py``, its NVML binding ``nvmlc.py`` (what it reads
    NVML with) and nvidia-ml-py's ``pynvml.py`` (its fallback, ``--nvml pynvml``)."""
    import pynvml

    return {
        "agent.py": (_AGENT_DIR / "agent.py").read_bytes(),
        "nvmlc.py": (_AGENT_DIR / "nvmlc.py").read_bytes(),
        "pynvml.py": Path(pynvml.__file__).read_bytes(),
    }


async def deploy_agent(transport: Transport) -> str:
    """Upload the agent bundle unless the host has this version; returns its folder."""
    return await transport.put_bundle(agent_bundle(), AGENT_BASE)


#: ``sh`` exits with this when the host has no copy of the bundle (the agent never does).
LAUNCH_MISSING = 97
#: The agent's file of each GPU's highest clocks and PCIe link for this boot, in its bundle's
#: folder (``--boot-fixed-cache``: a start does not ask the driver for them again).
BOOT_FIXED_FILE = "boot-fixed.txt"
#: Run by ``python3 -I -S -c``: argv[1] is the agent's path (so ``ps`` shows it); ``agent``
#: is imported from there, its byte code cached in the folder, then run with the rest.
_AGENT_MAIN = (
    "import sys;p=sys.argv.pop(1);sys.path.insert(0,p.rpartition('/')[0]);import agent;agent.run()"
)
#: ``sh -c`` script: $0 is :data:`_AGENT_MAIN`, $1 the folder (absolute, or under $HOME),
#: the rest the agent's options.
_LAUNCH = (
    'case "$1" in /*) d="$1";; *) d="$HOME/$1";; esac; shift; '
    'cd "$d" 2>/dev/null || exit ' + str(LAUNCH_MISSING) + "; "
    'if [ -x py ]; then exec ./py -I -S -c "$0" "$d/agent.py" "$@"; fi; '
    'exec python3 -I -S -c "$0" "$d/agent.py" --link-python "$@"'
)


def agent_argv(
    interval: float,
    replay: str | None = None,
    folder: str | None = None,
) -> list[str]:
    """The one command that starts this console's agent bundle on a host that has it
    (exit :data:`LAUNCH_MISSING` when it does not; 127 when there is no ``python3``).

    Args:
        folder: the bundle's folder on the host (default: where :func:`deploy_agent` puts
            it, under ``$HOME``).
    """
    folder = folder or f"{AGENT_BASE}/{_bundle_digest()}"
    argv = ["sh", "-c", _LAUNCH, _AGENT_MAIN, folder, "--interval", f"{interval:g}"]
    if replay:
        argv += ["--replay", replay]
    else:  # in the bundle's folder (the agent's working folder): one per user and version
        argv += ["--boot-fixed-cache", BOOT_FIXED_FILE]
    return argv


_digest: str | None = None


def _bundle_digest() -> str:
    """The bundle's folder name (:func:`remote.transport.bundle_digest`), computed once."""
    global _digest
    if _digest is None:
        from remote.transport import bundle_digest

        _digest = bundle_digest(agent_bundle())
    return _digest


async def agent_samples(
    transport: Transport, interval: float, *, replay: str | None = None
) -> AsyncGenerator[Sample, None]:
    """Samples from the agent until its stream ends.

    Started with :func:`agent_argv`; only when the host lacks the bundle is it uploaded
    (:func:`deploy_agent`) and the agent started again.

    Args:
        replay: a trace path on the host: the agent replays it instead of reading NVML
            (benchmarks, demos).

    The generator returns normally when the agent exits; the caller reads
    :attr:`last_exit` semantics through :func:`host_samples`.
    """
    argv = agent_argv(interval, replay)
    proc = await transport.open_process(argv)
    try:
        first = await proc.readline()
        if first is None and await proc.wait() == LAUNCH_MISSING:
            await proc.close()
            # the absolute folder: right even where SFTP's home is not the shell's $HOME
            argv = agent_argv(interval, replay, await deploy_agent(transport))
            proc = await transport.open_process(argv)
            first = await proc.readline()
        line = first
        while True:
            if line is None:
                break
            try:
                sample = read_sample(json.loads(line))
            except ValueError:  # not JSON, or not a schema-1 sample
                log.debug("[%s] agent wrote a non-sample line: %.200s", transport.name, line)
            else:
                yield sample
            line = await proc.readline()
        rc = await proc.wait()
        if rc not in (0, AGENT_EXIT_NO_NVML):
            err = (await proc.stderr()).strip().splitlines()
            raise AgentExited(rc, err[-1] if err else "")
        if rc == AGENT_EXIT_NO_NVML:
            raise AgentExited(rc, "NVML unavailable")
    finally:
        await proc.close()


class AgentExited(Exception):
    """The agent ended with a status that calls for the nvidia-smi fallback or a restart."""

    def __init__(self, returncode: int, detail: str) -> None:
        super().__init__(f"agent exited {returncode}: {detail}")
        self.returncode = returncode
        self.detail = detail


async def smi_samples(transport: Transport, interval: float) -> AsyncGenerator[Sample, None]:
    """Samples from ``nvidia-smi --query-gpu ... -lms`` until it exits.

    When nvidia-smi fails at once (no driver, driver unreachable, version mismatch, no
    devices), one sample carrying that host state is yielded, then the generator returns.
    A driver that rejects a query field before the first sample ("Field X is not a valid
    field to query": drivers before R535 know ``clocks_event_reasons.active`` as
    ``clocks_throttle_reasons.active``) is asked again with the field renamed or, when it is
    optional, left out (:func:`remote.telemetry.smi.fields_without`).
    """
    from remote.telemetry.smi import QUERY_FIELDS

    fields: tuple[str, ...] | None = QUERY_FIELDS
    while fields is not None:
        retry: list[tuple[str, ...]] = []
        async for sample in _smi_query(transport, interval, fields, retry):
            yield sample
        fields = retry[0] if retry else None


async def _smi_query(
    transport: Transport, interval: float, fields: tuple[str, ...], retry: list[tuple[str, ...]]
) -> AsyncGenerator[Sample, None]:
    """One ``nvidia-smi --query-gpu`` stream of ``fields`` (see :func:`smi_samples`); when the
    driver rejected one of them before any sample, the query to try next goes to ``retry``
    instead of the fault sample."""
    from remote.telemetry.smi import (
        COMPUTE_APPS_FIELDS,
        SmiStreamParser,
        classify_smi_failure,
        compute_apps_argv,
        fields_without,
        parse_csv_rows,
        smi_argv,
    )

    parser = SmiStreamParser(fields, interval_s=interval)
    try:
        proc = await transport.open_process(smi_argv(int(interval * 1000), fields))
    except TransportError as e:
        if "command not found" not in e.detail:
            raise
        yield parser.fault_sample(
            classify_smi_failure("nvidia-smi: command not found", 127), time.time()
        )
        return
    produced = False

    async def poll_processes() -> None:
        # -lms streams GPU rows only; the process list needs its own query each round
        while True:
            try:
                res = await transport.run(compute_apps_argv(), timeout=max(10.0, interval * 5))
            except TransportError:
                return
            if res.returncode != 0:
                return
            parser.set_compute_apps(parse_csv_rows(res.stdout, COMPUTE_APPS_FIELDS))
            await asyncio.sleep(interval)

    poller = asyncio.create_task(poll_processes(), name=f"smi-processes-{transport.name}")
    try:
        while True:
            line = await proc.readline()
            if line is None:
                break
            for sample in parser.feed(line, time.time()):
                produced = True
                yield sample
        for sample in parser.flush(time.time()):
            produced = True
            yield sample
        rc = await proc.wait()
        if not produced or rc != 0:
            text = "\n".join(parser.unparsed) + "\n" + await proc.stderr()
            if rc == 127:
                text += "\nnvidia-smi: command not found"
            fault = classify_smi_failure(text)
            if not produced and fault is not None and fault.invalid_field is not None:
                if (narrower := fields_without(fields, fault.invalid_field)) is not None:
                    log.info(
                        "[%s] nvidia-smi does not know %s: asking again without it",
                        transport.name,
                        fault.invalid_field,
                    )
                    retry.append(narrower)
                    return
            yield parser.fault_sample(fault, time.time())
    finally:
        await end_task(poller)
        await proc.close()


#: Phases of a host's stream, reported through ``host_samples(on_phase=...)``.
PHASE_AGENT_STARTING = "agent starting"
PHASE_SMI_FALLBACK = "nvidia-smi fallback"


async def end_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every 0.5 s while it
    runs (a cancellation can be lost: Python 3.11's ``asyncio.wait_for`` returns the inner
    result when it completes in the same loop turn as the cancel). Never raises the task's
    exception; a cancellation of the caller cancels the task once more and propagates."""
    try:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not task.cancelled():
        task.exception()  # retrieved: never "exception was never retrieved"


async def host_samples(
    transport: Transport,
    interval: float = 1.0,
    *,
    mode: str = "auto",
    replay: str | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> AsyncGenerator[Sample, None]:
    """A host's samples for as long as the connection lasts.

    Args:
        mode: ``auto`` (agent, then nvidia-smi when the agent cannot run), ``agent`` or
            ``smi``.
        replay: see :func:`agent_samples`.
        on_phase: called with :data:`PHASE_AGENT_STARTING` before the agent is uploaded and
            started and with :data:`PHASE_SMI_FALLBACK` before nvidia-smi is started.

    Closing this generator closes the stream under it at once (each inner stream is closed
    by ``aclosing``, never left to the garbage collector's finalizer task).
    """
    held: Sample | None = None
    if mode in ("auto", "agent"):
        if on_phase is not None:
            on_phase(PHASE_AGENT_STARTING)
        try:
            async with aclosing(agent_samples(transport, interval, replay=replay)) as agent:
                async for s in agent:
                    if held is not None:  # the agent streams on (no nvidia-smi): no fallback
                        yield held
                        held = None
                    if mode == "auto" and s["state"] == "nvml_unavailable" and s["seq"] == 0:
                        # it may exit AGENT_EXIT_NO_NVML next: then the fallback decides the
                        # GPU state; keep the host record
                        held = s
                        continue
                    yield s
            if held is not None:
                yield held
            return
        except AgentExited as e:
            if mode == "agent" or e.returncode not in (127, AGENT_EXIT_NO_NVML):
                if held is not None:
                    yield held
                raise
            log.info("[%s] agent unavailable (%s); using nvidia-smi", transport.name, e)
    if on_phase is not None:
        on_phase(PHASE_SMI_FALLBACK)
    async with aclosing(smi_samples(transport, interval)) as smi:
        async for s in smi:
            if held is not None:
                if not any(v is not None for k, v in s["host"].items() if k != "errors"):
                    s["host"] = held["host"]
                if s["state"] != "ok" and held["state_detail"]:
                    s["state_detail"] = (
                        f"{s.get('state_detail') or ''} (NVML: {held['state_detail']})".strip()
                    )
            yield s
