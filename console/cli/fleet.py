"""``gpuconsole top|gpus``: live and one-shot fleet telemetry.

One-shot reads (``top --once``, ``gpus``) wait up to ``--timeout`` for every host's first
sample, print what came, name each host that gave none (with its state) on stderr and exit 1
when any did. They return as soon as the last host answered: the container -> job map is
read per host beside the samples (:class:`console.fleet.monitor.FleetMonitor`), and only where
a GPU process runs in a container. On a terminal, ``top --once`` draws the table as hosts
answer, the ones still pending named under it. Live ``top`` writes from its own task, never
from the monitor's: a closed stdout ends it (exit 0) and is never a host failure; its text
table is drawn at once, then again as each host answers, then every ``--interval``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from console.cli.base import command_profile, err, main, out, run, while_stdout_open
from console.cli.params import FiniteFloat
from console.errors import ConfigError, JobError

if TYPE_CHECKING:  # the fleet stack is imported when `top` or `gpus` runs (start-up)
    from console.fleet.state import FleetState
    from console.profiles import Profile
    from console.service import Service
    from remote.telemetry.schema import Sample

#: Default of ``--timeout``: seconds a one-shot read waits for every host's first sample.
ONCE_TIMEOUT_S = 15.0
#: The container -> job map is read after the samples within what is left of ``--timeout``,
#: but gets at least this long (s).
MIN_MAP_S = 2.0
#: While hosts are still arriving, the text table is redrawn when one answered, at most this
#: often (s).
ARRIVAL_REDRAW_S = 0.1

_TIMEOUT_HELP = (
    "With --once: seconds to wait for every host's first sample (connect, "
    "agent start, first reading); hosts without one are named on stderr and the "
    "exit status is 1."
)


def _hosts_opt(profile: Profile, hosts: str | None) -> list[str]:
    if not hosts:
        return list(profile.hosts)
    names = [h for h in hosts.split(",") if h]
    for h in names:
        if h not in profile.hosts:
            raise ConfigError(
                f"unknown host {h!r} in profile {profile.name!r}",
                f"hosts in this profile: {', '.join(profile.hosts)}",
            )
    return names


@main.command()
@click.option("--once", is_flag=True, help="Print one fleet table (or snapshot) and exit.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON: one {host, sample} line per sample; with --once, one snapshot.",
)
@click.option(
    "--interval",
    type=FiniteFloat(0.1, 3600),
    default=1.0,
    show_default=True,
    help="Sampling interval on the hosts (s), 0.1-3600.",
)
@click.option("--hosts", help="Only these hosts (comma separated).")
@click.option(
    "--record",
    "record",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write every sample to FILE (JSON lines).",
)
@click.option(
    "--replay",
    "replay",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Show a recording instead of live hosts.",
)
@click.option(
    "--speed",
    type=FiniteFloat(0, 1000),
    default=1.0,
    show_default=True,
    help="Replay speed factor, up to 1000 (0 = as fast as possible).",
)
@click.option(
    "--source",
    type=click.Choice(["auto", "agent", "smi"]),
    default="auto",
    show_default=True,
    help="Telemetry source on the hosts.",
)
@click.option(
    "--timeout",
    type=FiniteFloat(0.1, 3600),
    default=ONCE_TIMEOUT_S,
    show_default=True,
    help=_TIMEOUT_HELP,
)
# benchmarks only: the hosts' agents replay this trace (a path on the hosts) instead of NVML
@click.option("--agent-replay", "agent_replay", default=None, hidden=True)
@click.pass_context
def top(
    ctx: click.Context,
    once: bool,
    as_json: bool,
    interval: float,
    hosts: str | None,
    record: Path | None,
    replay: Path | None,
    speed: float,
    source: str,
    timeout: float,
    agent_replay: str | None,
) -> None:
    """Live per-GPU utilization, memory and processes across the fleet.

    Stops when its output is closed (`top --json | head -n 1`), with exit status 0.
    """
    run(
        _top(
            ctx,
            once,
            as_json,
            interval,
            hosts,
            record,
            replay,
            speed,
            source,
            timeout,
            agent_replay,
        )
    )


def missing_hosts(
    state: FleetState, timeout: float, phases: dict[str, str] | None = None
) -> list[str]:
    """One line per host that gave no sample: its name and state (``down`` and why, or
    still ``connecting`` after ``timeout`` s, with the step it was in when that is more
    precise: ``agent starting``, ``nvidia-smi fallback``, ``backoff``)."""
    lines = []
    for v in state.hosts.values():
        if v.sample is not None:
            continue
        if v.status == "down":
            why = (v.error or "unreachable").removeprefix(f"host {v.name}: ")
            lines.append(f"host {v.name}: down: {why}")
        else:
            phase = (phases or {}).get(v.name)
            step = f" ({phase})" if phase and phase != v.status else ""
            lines.append(f"host {v.name}: still {v.status} after {timeout:g} s{step}")
    return lines


def answered(state: FleetState) -> int:
    """How many hosts gave a sample or are down (what a one-shot read waits for)."""
    return sum(1 for v in state.hosts.values() if v.sample is not None or v.status == "down")


def pending_line(state: FleetState, phases: dict[str, str]) -> str:
    """``waiting for N of M hosts: NAME (PHASE), ...`` for the hosts that have not answered
    (at most 8 named), or ``""`` when none is left."""
    left = [v.name for v in state.hosts.values() if v.sample is None and v.status != "down"]
    if not left:
        return ""
    named = ", ".join(f"{h} ({phases.get(h, 'connecting')})" for h in left[:8])
    more = f" and {len(left) - 8} more" if len(left) > 8 else ""
    return f"waiting for {len(left)} of {len(state.hosts)} hosts: {named}{more}"


async def read_fleet_once(
    svc: Service, state: FleetState, timeout: float, progress: Callable[[], None] | None = None
) -> dict[str, str]:
    """Wait up to ``timeout`` s for every host's first sample, then for the container -> job
    map (read per host beside the samples) in what is left of it (at least
    :data:`MIN_MAP_S`).

    Args:
        progress: called at the start and whenever another host answered (at most every
            :data:`ARRIVAL_REDRAW_S` s) while the wait lasts.

    Returns:
        each host's phase when the wait ended (:meth:`Service.fleet_phases`), for
        :func:`raise_if_missing`.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if progress is None:
        await svc.wait_fleet(timeout=timeout)
    else:
        waiting = asyncio.ensure_future(svc.wait_fleet(timeout=timeout))
        try:
            shown = -1
            while not waiting.done():
                if answered(state) != shown:
                    shown = answered(state)
                    progress()
                await asyncio.wait({waiting}, timeout=ARRIVAL_REDRAW_S)
            waiting.result()  # what the wait raised, if anything
        finally:
            waiting.cancel()
    phases = svc.fleet_phases()
    try:
        await asyncio.wait_for(svc.refresh_containers(), max(deadline - loop.time(), MIN_MAP_S))
    except asyncio.TimeoutError:
        err(
            f"warning: the hosts' container labels were not read within --timeout "
            f"{timeout:g} s: GPU processes are not matched to jobs"
        )
    return phases


def raise_if_missing(
    state: FleetState, timeout: float, phases: dict[str, str] | None = None
) -> None:
    """Say on stderr which hosts gave no sample, then fail.

    Raises:
        JobError: at least one host gave no sample (exit 1).
    """
    lines = missing_hosts(state, timeout, phases)
    if not lines:
        return
    for line in lines:
        err(line)
    names = [v.name for v in state.hosts.values() if v.sample is None]
    late = [v.name for v in state.hosts.values() if v.sample is None and v.status != "down"]
    if late:
        raise JobError(
            f"{len(names)} of {len(state.hosts)} hosts gave no sample within {timeout:g} s: "
            f"{', '.join(names)}",
            "see each host's state above; `-v` shows the connection steps; a slow host may "
            "need a longer --timeout",
        )
    raise JobError(  # every one failed at once: waiting longer would not help
        f"{len(names)} of {len(state.hosts)} hosts gave no sample: {', '.join(names)} (down)",
        "see each host's reason above; `-v` shows the connection steps",
    )


async def _top(
    ctx: click.Context,
    once: bool,
    as_json: bool,
    interval: float,
    hosts: str | None,
    record: Path | None,
    replay: Path | None,
    speed: float,
    source: str,
    timeout: float,
    agent_replay: str | None = None,
) -> None:
    import asyncio

    from console.fleet.monitor import Recorder, read_recording
    from console.fleet.render import render_fleet
    from console.fleet.state import FleetState
    from console.service import Service

    tty = sys.stdout.isatty() and not as_json

    def show(state: FleetState, footer: str = "") -> None:
        if as_json:
            out(json.dumps(state.snapshot()))
            return
        text = render_fleet(state) + (f"\n{footer}" if footer else "")
        out(("\x1b[H\x1b[2J" if tty else "") + text + ("" if tty else "\n"))

    if replay is not None:
        state = FleetState([], interval)
        last = 0.0
        try:
            async for host, sample in read_recording(replay, speed=0 if once else speed):
                state.on_sample(host, sample, rx=time.monotonic())
                if as_json and not once:
                    out(json.dumps({"host": host, "sample": sample}))
                elif not once and time.monotonic() - last >= 1.0:
                    last = time.monotonic()
                    show(state)
        except ValueError as e:
            raise ConfigError(str(e), "give a file written by `gpuconsole top --record`") from e
        if not state.hosts:
            raise ConfigError("the recording holds no samples", path=str(replay))
        if once or not as_json:
            show(state)
        return

    profile = command_profile(ctx)
    names = _hosts_opt(profile, hosts)
    try:
        rec_file = open(record, "a", encoding="utf-8") if record else None
    except OSError as e:
        raise ConfigError(
            f"cannot write the recording: {e.strerror}",
            "give a path in an existing, writable folder",
            path=str(record),
        ) from e
    recorder = Recorder(rec_file) if rec_file else None
    # the monitor only queues samples; this command's own task records and prints them, so
    # a failed write (a closed stdout, a full disk) ends the command, never a host's stream
    queue: asyncio.Queue[tuple[str, Sample]] = asyncio.Queue()

    def on_sample(host: str, sample: Sample) -> None:
        queue.put_nowait((host, sample))

    def write(batch: list[tuple[str, Sample]]) -> None:
        for host, sample in batch:
            if recorder:
                try:
                    recorder(host, sample)
                except OSError as e:
                    raise JobError(
                        f"{record}: cannot write the recording: {e.strerror}",
                        "free space or give another --record path",
                    ) from e
            if as_json:
                out(json.dumps({"host": host, "sample": sample}))

    async def stream(state: FleetState) -> None:
        shown = -1
        while True:
            if as_json:
                batch = [await queue.get()]
            elif answered(state) < len(state.hosts):
                # hosts still arriving: each one drawn as soon as it answered
                await asyncio.sleep(ARRIVAL_REDRAW_S)
                if answered(state) == shown:
                    continue
                batch = []
            else:
                await asyncio.sleep(interval)
                batch = []
            shown = answered(state)
            while not queue.empty():
                batch.append(queue.get_nowait())
            write(batch)
            if not as_json:
                show(state)

    hook = on_sample if (recorder or (as_json and not once)) else None
    async with Service(profile) as svc:
        state = svc.start_fleet(
            names, interval=interval, mode=source, on_sample=hook, replay_path=agent_replay
        )

        def progress() -> None:  # a terminal sees the hosts that answered, the rest named
            show(state, pending_line(state, svc.fleet_phases()))

        try:
            if once:
                phases = await read_fleet_once(svc, state, timeout, progress if tty else None)
                batch = []
                while not queue.empty():
                    batch.append(queue.get_nowait())
                write(batch)
                show(state)
                raise_if_missing(state, timeout, phases)
                return
            await while_stdout_open(stream(state))
        finally:
            await svc.stop_fleet()
            if rec_file:
                rec_file.close()


@main.command()
@click.option("--free", is_flag=True, help="Only GPUs with no process on them.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--hosts", help="Only these hosts (comma separated).")
@click.option(
    "--timeout",
    type=FiniteFloat(0.1, 3600),
    default=ONCE_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for every host's sample (connect, agent start, first "
    "reading); hosts without one are named on stderr and the exit status is 1.",
)
@click.pass_context
def gpus(ctx: click.Context, free: bool, as_json: bool, hosts: str | None, timeout: float) -> None:
    """List the fleet's GPUs (one sample of every host)."""
    run(_gpus(ctx, free, as_json, hosts, timeout))


async def _gpus(
    ctx: click.Context, free: bool, as_json: bool, hosts: str | None, timeout: float
) -> None:
    from console.fleet.render import render_fleet, render_free
    from console.fleet.state import free_gpus
    from console.service import Service

    profile = command_profile(ctx)
    names = _hosts_opt(profile, hosts)
    async with Service(profile) as svc:
        state = svc.start_fleet(names)
        try:
            phases = await read_fleet_once(svc, state, timeout)
        finally:
            await svc.stop_fleet()
    if as_json:
        data: Any = free_gpus(state) if free else state.snapshot()
        out(json.dumps(data, indent=2))
    else:
        out(render_free(state) if free else render_fleet(state))
        if free and not any(free_gpus(state).values()):
            err("no free GPU on the fleet (hosts without GPUs or NVIDIA driver have none)")
    raise_if_missing(state, timeout, phases)
