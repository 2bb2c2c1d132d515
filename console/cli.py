"""The headless CLI: ``gpuconsole submit|ps|logs|stop|rm``.

Data goes to stdout (job ids, tables, JSON, log lines); diagnostics go to stderr. Every
deliberate error prints ``error: <what, where>`` and ``  fix: <how>`` on stderr and exits 2 for
bad input (spec, profile, flags) or 1 for everything else. ``submit --follow`` exits with the
job's exit code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from console.errors import ConfigError, JobError, PlanError, UsageError
from console.jobs.logs import JobLogLine
from console.jobs.rows import job_row
from console.jobs.status import JobView, format_node_state
from console.jobs.store import JobRecord
from console.profiles import Profile, resolve_profile
from console.service import Service
from remote.docker import format_ns
from remote.errors import GpuConsoleError

T = TypeVar("T")
log = logging.getLogger("gpuconsole")


def _err(msg: str) -> None:
    click.echo(msg, err=True)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; map gpuconsole errors to a message and an exit status."""
    try:
        return asyncio.run(coro)
    except GpuConsoleError as e:
        _err(f"error: {e.message}")
        if e.hint:
            _err(f"  fix: {e.hint}")
        raise SystemExit(2 if isinstance(e, (ConfigError, PlanError, UsageError)) else 1) from None
    except KeyboardInterrupt:
        _err("interrupted")
        raise SystemExit(130) from None


@click.group(invoke_without_command=True)
@click.option("--profile", "-p", "profile", metavar="NAME|PATH", default=None,
              help="Profile to use (default: $GPUCONSOLE_PROFILE, your default, then `local`).")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging (stderr; the app's log "
              "file while the app runs).")
@click.option("--readonly", is_flag=True, help="App: hide stop, submit and exec.")
@click.option("--replay", "replay", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="App: show a telemetry recording (`top --record`) instead of live hosts.")
@click.version_option(package_name="gpuconsole")
@click.pass_context
def main(ctx: click.Context, profile: str | None, verbose: bool, readonly: bool,
         replay: Path | None) -> None:
    """Launch torchrun jobs in containers on your GPU hosts, follow their logs, watch the fleet.

    Without a command: the interactive console (fleet, jobs, log panes).
    """
    ctx.obj = {"profile": profile}
    if ctx.invoked_subcommand is None:
        raise SystemExit(_app(ctx, verbose, readonly, replay))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not verbose:
        logging.getLogger("asyncssh").setLevel(logging.ERROR)


def _app(ctx: click.Context, verbose: bool, readonly: bool, replay: Path | None) -> int:
    """Run the Textual app; logging goes to ``<state dir>/gpuconsole.log`` meanwhile (stderr
    would corrupt the screen)."""
    from console.config import config_dir, load_config
    from console.jobs.store import state_dir

    try:
        config = load_config()
        profile = _profile(ctx)
        log_file = state_dir() / "gpuconsole.log"
    except GpuConsoleError as e:
        _err(f"error: {e.message}")
        if e.hint:
            _err(f"  fix: {e.hint}")
        return 2
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        filename=str(log_file),
    )
    logging.getLogger("asyncssh").setLevel(logging.DEBUG if verbose else logging.WARNING)
    from console.app.app import GpuConsoleApp, keymap_errors

    problems = keymap_errors(config.keymap)
    if problems:
        for p in problems:
            _err(f"error: {config_dir() / 'config.yaml'}: {p}")
        _err("  fix: use the binding ids listed by `?` in the console (or docs/architecture.md)")
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        _err("error: the interactive console needs a terminal")
        _err("  fix: run it in a terminal, or use the headless commands (`gpuconsole --help`)")
        return 2
    app = GpuConsoleApp(Service(profile), config=config, readonly=readonly, replay=replay)
    rc = app.run()
    return rc or 0


def _profile(ctx: click.Context) -> Profile:
    ref: str | None = ctx.obj["profile"]
    return resolve_profile(ref)


@asynccontextmanager
async def _service(ctx: click.Context) -> AsyncIterator[Service]:
    """The service of a command (its profile, the state dir's store), closed at the end."""
    async with Service(_profile(ctx)) as svc:
        yield svc


# -- submit ---------------------------------------------------------------------------------


def _parse_gpus(value: str | None) -> Any:
    if value is None:
        return None
    if value == "all":
        return "all"
    if "," in value or value.startswith("["):
        return [int(v) for v in value.strip("[]").split(",") if v.strip()]
    return int(value)


def _parse_nodes(value: str | None) -> Any:
    if value is None:
        return None
    return int(value) if value.isdigit() else [v for v in value.split(",") if v]


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--follow", "-f", is_flag=True, help="Follow the logs; exit with the job's code.")
@click.option("--dry-run", is_flag=True, help="Print the plan and `docker run` lines only.")
@click.option("--name", help="Override the job name.")
@click.option("--image", help="Override the image.")
@click.option("--nodes", help="Node count, or host names separated by commas.")
@click.option("--gpus-per-node", help="all, a count, indices like 0,1, or 0 for CPU (gloo).")
@click.option("--nproc-per-node", type=int, help="torchrun processes per node.")
@click.option("--max-restarts", type=int, help="torchrun --max-restarts.")
@click.option("--arg", "args", multiple=True, help="Replace the script's arguments (repeat).")
@click.option("--force", is_flag=True, help="Use GPUs that other processes hold.")
@click.pass_context
def submit(
    ctx: click.Context, spec: Path, follow: bool, dry_run: bool, name: str | None,
    image: str | None, nodes: str | None, gpus_per_node: str | None,
    nproc_per_node: int | None, max_restarts: int | None, args: tuple[str, ...], force: bool,
) -> None:
    """Launch the job described by SPEC (YAML); flags override its fields."""
    try:
        overrides = {
            "name": name, "image": image, "nodes": _parse_nodes(nodes),
            "gpus_per_node": _parse_gpus(gpus_per_node), "nproc_per_node": nproc_per_node,
            "max_restarts": max_restarts, "args": list(args) if args else None,
        }
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    code = run(_submit(ctx, spec, overrides, follow, dry_run, force))
    raise SystemExit(code)


async def _submit(
    ctx: click.Context, spec_path: Path, overrides: dict[str, Any], follow: bool, dry_run: bool,
    force: bool,
) -> int:
    async with _service(ctx) as svc:
        sub = await svc.plan(spec_path, overrides, dry_run=dry_run, force=force)
        if dry_run:
            click.echo(sub.plan_text())
            return 0
        job = await svc.submit(sub)
        plan = sub.prepared.plan
        _err(f"submitted {job.id}: {len(plan.nodes)} node(s) x {plan.nproc_per_node} "
             f"process(es), world size {plan.world_size}, on "
             f"{', '.join(n.host for n in plan.nodes)}")
        if not follow:
            click.echo(job.id)
            return 0
        return await _follow(svc, job, tail=None, timestamps=False)


def _print_line(line: JobLogLine, timestamps: bool) -> None:
    prefix = f"{format_ns(line.ts_ns)} " if timestamps else ""
    click.echo(f"{prefix}{line.tag()} {line.text}")


async def _follow(
    svc: Service, job: JobRecord, *, tail: int | None, timestamps: bool,
    node: int | None = None, since_ns: int | None = None,
) -> int:
    """Follow a job's logs to its end (gang teardown on a failure); return the exit code."""
    try:
        async for line in svc.follow(job, node=node, since_ns=since_ns, tail=tail):
            _print_line(line, timestamps)
    except (KeyboardInterrupt, asyncio.CancelledError):
        _err(f"stopped following; the job keeps running (`gpuconsole stop {job.id}`)")
        return 130
    job = await svc.refresh_job(job)
    _summary(job)
    if job.state == "succeeded":
        return 0
    if job.state == "stopped":
        return 143  # 128 + SIGTERM, as a shell reports a stopped process
    codes = [n.exit_code for n in job.nodes if n.exit_code]
    if job.failure and job.failure.get("exit_code"):
        return int(job.failure["exit_code"])
    return codes[0] if codes else 1


def _summary(job: JobRecord) -> None:
    nodes = ", ".join(f"n{n.node_rank} {format_node_state(n)}" for n in job.nodes)
    _err(f"job {job.id} {job.state} ({nodes})")
    if job.failure:
        f = job.failure
        rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
        _err(f"  first failure: node {f['node']} on {f['host']}{rank}, exit code "
             f"{f['exit_code']}: {f['reason']}")
        if f.get("fix"):
            _err(f"  fix: {f['fix']}")


# -- ps -------------------------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON list.")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include removed jobs.")
@click.pass_context
def ps(ctx: click.Context, as_json: bool, show_all: bool) -> None:
    """List jobs and each node's state (reconciled with the hosts' containers)."""
    run(_ps(ctx, as_json, show_all))


async def _ps(ctx: click.Context, as_json: bool, show_all: bool) -> None:
    async with _service(ctx) as svc:
        jobs = await svc.list_jobs(include_removed=show_all,
                                   warn=lambda m: _err(f"warning: {m}"))
    if as_json:
        click.echo(json.dumps([JobView(j).as_dict() for j in jobs], indent=2))
        return
    now = time.time()
    rows = [("JOB", "STATE", "NODES", "AGE", "REASON")]
    for j in jobs:
        jr = job_row(j, now)
        rows.append((jr.job_id, jr.state, jr.nodes, jr.age, jr.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])


# -- logs -----------------------------------------------------------------------------------


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(value: str) -> int:
    """``--since``: a duration back from now (``90s``, ``10m``, ``2h``, ``1d``) or an ISO 8601
    time; returns ns since the epoch.

    Raises:
        click.BadParameter: neither form.
    """
    m = _DURATION.match(value)
    if m:
        secs = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return int((time.time() - secs) * 1e9)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise click.BadParameter(
            f"{value!r} is neither a duration (10m, 2h) nor an ISO 8601 time"
        ) from e
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1e9)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option("--follow", "-f", is_flag=True, help="Keep following until the job ends.")
@click.option("--node", "-n", type=int, help="Only this node rank.")
@click.option("--since", help="Only lines newer than a duration (10m) or an ISO time.")
@click.option("--tail", type=int, help="Only the last N lines.")
@click.option("--timestamps", "-t", is_flag=True, help="Show Docker's timestamps.")
@click.pass_context
def logs(ctx: click.Context, job_ref: str, follow: bool, node: int | None, since: str | None,
         tail: int | None, timestamps: bool) -> None:
    """Print a job's logs, every node merged in time order, tagged [node rank]."""
    since_ns = parse_since(since) if since else None
    raise SystemExit(run(_logs(ctx, job_ref, follow, node, since_ns, tail, timestamps)))


async def _logs(ctx: click.Context, ref: str, follow: bool, node: int | None,
                since_ns: int | None, tail: int | None, timestamps: bool) -> int:
    async with _service(ctx) as svc:
        job = svc.find_job(ref)
        svc.check_node(job, node)
        if follow and job.removed_at is None:
            return await _follow(svc, job, tail=tail, timestamps=timestamps, node=node,
                                 since_ns=since_ns)
        lines = await svc.read_logs(job, node=node, since_ns=since_ns, tail=tail)
        for line in lines:
            _print_line(line, timestamps)
        for host, why in job.unreachable.items():
            _err(f"warning: {why}; showed the lines archived from {host} so far")
        return 0


# -- stop / rm ------------------------------------------------------------------------------


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option("--grace", type=float, help="Seconds between SIGTERM and SIGKILL "
              "(default: the profile's stop_grace).")
@click.pass_context
def stop(ctx: click.Context, job_ref: str, grace: float | None) -> None:
    """Stop a job: SIGTERM every node's container, SIGKILL after the grace period."""
    run(_stop(ctx, job_ref, grace))


async def _stop(ctx: click.Context, ref: str, grace: float | None) -> None:
    async with _service(ctx) as svc:
        job = svc.find_job(ref)
        out = await svc.stop(job, grace)
        if not out.stopped:
            _err(f"job {out.job.id} is not running ({out.job.state})")
            return
        _summary(out.job)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option("--force", is_flag=True, help="Stop the job first if it is running.")
@click.pass_context
def rm(ctx: click.Context, job_ref: str, force: bool) -> None:
    """Remove a job's containers (its logs stay archived locally)."""
    run(_rm(ctx, job_ref, force))


async def _rm(ctx: click.Context, ref: str, force: bool) -> None:
    async with _service(ctx) as svc:
        job = await svc.remove(svc.find_job(ref), force=force)
        click.echo(job.id)


@main.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("job_ref", metavar="JOB")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--node", "-n", type=int, help="Node rank (default 0).")
@click.pass_context
def exec_(ctx: click.Context, job_ref: str, command: tuple[str, ...], node: int | None) -> None:
    """Run COMMAND (default: a shell) in a job's container: `exec JOB [--node N] -- CMD...`.

    With a terminal it gets a TTY (docker exec -it through an SSH PTY); else stdin and output
    are piped. Exits with the command's exit code.
    """
    raise SystemExit(run(_exec(ctx, job_ref, list(command), node)))


async def _exec(ctx: click.Context, ref: str, command: list[str], node: int | None) -> int:
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    async with _service(ctx) as svc:
        return await svc.exec(svc.find_job(ref), node, command, tty=tty)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.pass_context
def describe(ctx: click.Context, job_ref: str) -> None:
    """Show a job: spec, hosts, containers, each node's docker run and torchrun lines."""
    run(_describe(ctx, job_ref))


async def _describe(ctx: click.Context, ref: str) -> None:
    async with _service(ctx) as svc:
        job = svc.find_job(ref)
        if job.removed_at is None:
            job = await svc.refresh_job(job, teardown=False)
        click.echo((await svc.describe(job)).render())


# -- top / gpus -----------------------------------------------------------------------------


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

    profile = _profile(ctx)
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

    profile = _profile(ctx)
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
            _err(f"warning: {v.error or f'host {v.name}: {v.status}'}")
    if as_json:
        data: Any = free_gpus(state) if free else state.snapshot()
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render_free(state) if free else render_fleet(state))
        if free and not any(free_gpus(state).values()):
            _err("no free GPU on the fleet (hosts without GPUs or NVIDIA driver have none)")
    if all(v.sample is None for v in state.hosts.values()):
        raise JobError("no host answered", "see the warnings above (`-v` for more)")


if __name__ == "__main__":
    main()
