"""``gpuconsole top|gpus``: live and one-shot fleet telemetry."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from console.cli.base import command_profile, err, main, run
from console.errors import ConfigError, JobError
from console.profiles import Profile
from console.service import Service


def _hosts_opt(profile: Profile, hosts: str | None) -> list[str]:
    if not hosts:
        return list(profile.hosts)
    names = [h for h in hosts.split(",") if h]
    for h in names:
        if h not in profile.hosts:
            raise ConfigError(f"unknown host {h!r} in profile {profile.name!r}",
                              f"hosts in this profile: {', '.join(profile.hosts)}")
    return names


@main.command()
@click.option("--once", is_flag=True, help="Print one fleet table (or snapshot) and exit.")
@click.option("--json", "as_json", is_flag=True,
              help="JSON: one {host, sample} line per sample; with --once, one snapshot.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Sampling interval on the hosts (s), at least 0.1.")
@click.option("--hosts", help="Only these hosts (comma separated).")
@click.option("--record", "record", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every sample to FILE (JSON lines).")
@click.option("--replay", "replay", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Show a recording instead of live hosts.")
@click.option("--speed", type=float, default=1.0, show_default=True,
              help="Replay speed factor (0 = as fast as possible).")
@click.option("--source", type=click.Choice(["auto", "agent", "smi"]), default="auto",
              show_default=True, help="Telemetry source on the hosts.")
@click.pass_context
def top(ctx: click.Context, once: bool, as_json: bool, interval: float, hosts: str | None,
        record: Path | None, replay: Path | None, speed: float, source: str) -> None:
    """Live per-GPU utilization, memory and processes across the fleet."""
    run(_top(ctx, once, as_json, interval, hosts, record, replay, speed, source))


async def _top(ctx: click.Context, once: bool, as_json: bool, interval: float,
               hosts: str | None, record: Path | None, replay: Path | None, speed: float,
               source: str) -> None:
    from console.fleet.monitor import Recorder, read_recording
    from console.fleet.render import render_fleet
    from console.fleet.state import FleetState

    tty = sys.stdout.isatty() and not as_json

    def show(state: FleetState) -> None:
        if as_json:
            click.echo(json.dumps(state.snapshot()))
            return
        text = render_fleet(state)
        click.echo(("\x1b[H\x1b[2J" if tty else "") + text + ("" if tty else "\n"))

    if replay is not None:
        state = FleetState([], interval)
        last = 0.0
        try:
            async for host, sample in read_recording(replay, speed=0 if once else speed):
                state.on_sample(host, sample, rx=time.monotonic())
                if as_json and not once:
                    click.echo(json.dumps({"host": host, "sample": sample}))
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
        raise ConfigError(f"cannot write the recording: {e.strerror}",
                          "give a path in an existing, writable folder", path=str(record)) from e
    recorder = Recorder(rec_file) if rec_file else None

    def on_sample(host: str, sample: dict[str, Any]) -> None:
        if recorder:
            recorder(host, sample)
        if as_json and not once:
            click.echo(json.dumps({"host": host, "sample": sample}))

    async with Service(profile) as svc:
        state = svc.start_fleet(names, interval=interval, mode=source, on_sample=on_sample)
        try:
            if once:
                await svc.wait_fleet(timeout=max(15.0, 5 * interval))
                await svc.refresh_containers()
                show(state)
                if all(v.sample is None for v in state.hosts.values()):
                    raise JobError("no host answered", "see the errors above (`-v` for more)")
                return
            while True:
                await asyncio.sleep(interval)
                if not as_json:
                    show(state)
        finally:
            await svc.stop_fleet()
            if rec_file:
                rec_file.close()


@main.command()
@click.option("--free", is_flag=True, help="Only GPUs with no process on them.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--hosts", help="Only these hosts (comma separated).")
@click.pass_context
def gpus(ctx: click.Context, free: bool, as_json: bool, hosts: str | None) -> None:
    """List the fleet's GPUs (one sample of every host)."""
    run(_gpus(ctx, free, as_json, hosts))


async def _gpus(ctx: click.Context, free: bool, as_json: bool, hosts: str | None) -> None:
    from console.fleet.render import render_fleet, render_free
    from console.fleet.state import free_gpus

    profile = command_profile(ctx)
    names = _hosts_opt(profile, hosts)
    async with Service(profile) as svc:
        state = svc.start_fleet(names)
        try:
            await svc.wait_fleet(timeout=15.0)
            await svc.refresh_containers()
        finally:
            await svc.stop_fleet()
    for v in state.hosts.values():
        if v.sample is None:
            err(f"warning: {v.error or f'host {v.name}: {v.status}'}")
    if as_json:
        data: Any = free_gpus(state) if free else state.snapshot()
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render_free(state) if free else render_fleet(state))
        if free and not any(free_gpus(state).values()):
            err("no free GPU on the fleet (hosts without GPUs or NVIDIA driver have none)")
    if all(v.sample is None for v in state.hosts.values()):
        raise JobError("no host answered", "see the warnings above (`-v` for more)")
