"""The headless CLI's shared parts: the command group, error mapping, the service of a command
and the job output every command prints the same way.

Data goes to stdout (job ids, tables, JSON, log lines); diagnostics go to stderr. Every
deliberate error prints ``error: <what, where>`` and ``  fix: <how>`` on stderr and exits 2 for
bad input (spec, profile, flags) or 1 for everything else. ``submit --follow`` exits with the
job's exit code.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from console.errors import ConfigError, PlanError, UsageError
from console.jobs.logs import JobLogLine
from console.jobs.status import format_node_state
from console.jobs.store import JobRecord
from console.profiles import Profile, resolve_profile
from console.service import Service
from remote.docker import format_ns
from remote.errors import GpuConsoleError

T = TypeVar("T")
log = logging.getLogger("gpuconsole")


def err(msg: str) -> None:
    """Print a diagnostic line on stderr (data goes to stdout)."""
    click.echo(msg, err=True)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; map gpuconsole errors to a message and an exit status."""
    try:
        return asyncio.run(coro)
    except GpuConsoleError as e:
        err(f"error: {e.message}")
        if e.hint:
            err(f"  fix: {e.hint}")
        raise SystemExit(2 if isinstance(e, (ConfigError, PlanError, UsageError)) else 1) from None
    except KeyboardInterrupt:
        err("interrupted")
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
        profile = command_profile(ctx)
        log_file = state_dir() / "gpuconsole.log"
    except GpuConsoleError as e:
        err(f"error: {e.message}")
        if e.hint:
            err(f"  fix: {e.hint}")
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
            err(f"error: {config_dir() / 'config.yaml'}: {p}")
        err("  fix: use the binding ids listed by `?` in the console (or docs/architecture.md)")
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        err("error: the interactive console needs a terminal")
        err("  fix: run it in a terminal, or use the headless commands (`gpuconsole --help`)")
        return 2
    app = GpuConsoleApp(Service(profile), config=config, readonly=readonly, replay=replay)
    rc = app.run()
    return rc or 0


def command_profile(ctx: click.Context) -> Profile:
    """The profile named by ``--profile`` (else ``$GPUCONSOLE_PROFILE``, the default, ``local``).

    Raises:
        ConfigError: the profile cannot be found or read.
    """
    ref: str | None = ctx.obj["profile"]
    return resolve_profile(ref)


@asynccontextmanager
async def command_service(ctx: click.Context) -> AsyncIterator[Service]:
    """The service of a command (its profile, the state dir's store), closed at the end."""
    async with Service(command_profile(ctx)) as svc:
        yield svc


def print_line(line: JobLogLine, timestamps: bool) -> None:
    """One log line on stdout: ``[node:rank] text``, after Docker's timestamp if asked."""
    prefix = f"{format_ns(line.ts_ns)} " if timestamps else ""
    click.echo(f"{prefix}{line.tag()} {line.text}")


async def follow_job(
    svc: Service, job: JobRecord, *, tail: int | None, timestamps: bool,
    node: int | None = None, since_ns: int | None = None,
) -> int:
    """Follow a job's logs to its end (gang teardown on a failure); return the exit code."""
    try:
        async for line in svc.follow(job, node=node, since_ns=since_ns, tail=tail):
            print_line(line, timestamps)
    except (KeyboardInterrupt, asyncio.CancelledError):
        err(f"stopped following; the job keeps running (`gpuconsole stop {job.id}`)")
        return 130
    job = await svc.refresh_job(job)
    print_summary(job)
    if job.state == "succeeded":
        return 0
    if job.state == "stopped":
        return 143  # 128 + SIGTERM, as a shell reports a stopped process
    codes = [n.exit_code for n in job.nodes if n.exit_code]
    if job.failure and job.failure.get("exit_code"):
        return int(job.failure["exit_code"])
    return codes[0] if codes else 1


def print_summary(job: JobRecord) -> None:
    """The job's end state per node and its first failure (reason, fix) on stderr."""
    nodes = ", ".join(f"n{n.node_rank} {format_node_state(n)}" for n in job.nodes)
    err(f"job {job.id} {job.state} ({nodes})")
    if job.failure:
        f = job.failure
        rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
        err(f"  first failure: node {f['node']} on {f['host']}{rank}, exit code "
             f"{f['exit_code']}: {f['reason']}")
        if f.get("fix"):
            err(f"  fix: {f['fix']}")
