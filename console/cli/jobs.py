"""``gpuconsole ps|logs|stop|rm|exec|describe``: the jobs in the state dir and on the hosts."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import click

from console.cli.base import command_service, err, follow_job, main, print_line, print_summary, run
from console.cli.params import FiniteFloat

if TYPE_CHECKING:
    from console.jobs.logs import JobLogLine
    from console.jobs.store import JobRecord
    from console.throughput import JobProgress


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON list.")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include removed jobs.")
@click.option(
    "--hosts",
    "with_hosts",
    is_flag=True,
    help='With --json: print {"jobs": [...], "hosts": [...]}, each host '
    "answered, pending (no answer within the deadline) or failed, with the reason.",
)
@click.option(
    "--deadline",
    type=FiniteFloat(0.1, 3600),
    help="Seconds to wait for the hosts (default 30); a host that has not answered "
    "by then is pending and its jobs show their last known state.",
)
@click.pass_context
def ps(
    ctx: click.Context, as_json: bool, show_all: bool, with_hosts: bool, deadline: float | None
) -> None:
    """List jobs and each node's state (reconciled with the hosts' containers)."""
    run(_ps(ctx, as_json, show_all, with_hosts, deadline))


async def _ps(
    ctx: click.Context, as_json: bool, show_all: bool, with_hosts: bool, deadline: float | None
) -> None:
    async with command_service(ctx) as svc:  # imports the service stack, GC paused
        from console.jobs.status import LIST_DEADLINE_S, JobView
        from console.texttable import text_table

        jobs = await svc.list_jobs(
            include_removed=show_all,
            warn=lambda m: err(f"warning: {m}"),
            deadline_s=LIST_DEADLINE_S if deadline is None else deadline,
        )
        hosts = svc.host_status
        progress = await svc.progress(jobs)
    if as_json:
        out = [JobView(j).as_dict() for j in jobs]
        for job in out:
            p = progress.get(job["id"])
            job["progress"] = p.as_dict() if p is not None else None
            for node in job["nodes"]:
                h = hosts.get(node["host"])
                node["host_status"] = h.status if h is not None else None
        if with_hosts:
            click.echo(
                json.dumps({"jobs": out, "hosts": [h.as_dict() for h in hosts.values()]}, indent=2)
            )
        else:
            click.echo(json.dumps(out, indent=2))
        return
    for line in text_table(ps_rows(jobs, progress, time.time())):
        click.echo(line)


def ps_rows(
    jobs: Sequence[JobRecord], progress: Mapping[str, JobProgress], now: float
) -> list[tuple[str, ...]]:
    """``ps``'s table: a header, then a row per job at ``now`` (Unix s). A PROFILE column
    after JOB when the jobs come from more than one profile (the state dir is shared)."""
    from console.jobs.rows import job_row
    from console.throughput import eta_text, rate_text, spec_gpus, step_text, usd

    profiles = len({j.profile for j in jobs}) > 1
    head = ("JOB", "KIND", "STATE", "NODES", "AGE", "STEP", "RATE", "ETA", "$/H", "REASON")
    rows: list[tuple[str, ...]] = [(head[0], "PROFILE", *head[1:]) if profiles else head]
    for j in jobs:
        jr = job_row(j, now)
        p = progress.get(j.id)
        if p is None:  # not running (or its log not read in time): nothing applies
            cells: tuple[str, ...] = ("-", "-", "-", "-")
        else:
            tp = p.throughput
            cost = (
                usd(p.cost.usd_per_hour)
                if p.cost is not None
                else "-"
                if spec_gpus(j) == 0 or jr.cpu_only
                else "?"
            )
            cells = (step_text(tp), rate_text(tp), eta_text(tp), cost)
        first = (jr.job_id, j.profile) if profiles else (jr.job_id,)
        rows.append((*first, jr.kind, jr.state, jr.nodes, jr.age, *cells, jr.reason))
    return rows


# -- logs -----------------------------------------------------------------------------------


#: Longest ``--since`` duration (s): 100 years, before any log line.
MAX_SINCE_S = 100 * 365 * 86400


def parse_since(value: str) -> int:
    """``--since``: a duration back from now (``90s``, ``10m``, ``2h``, ``1d``) or an ISO 8601
    time; returns ns since the epoch.

    Raises:
        click.BadParameter: neither form.
    """
    from console.fields import duration_s

    secs = duration_s(value)
    if secs is not None:
        if secs > MAX_SINCE_S:
            raise click.BadParameter(
                f"{value!r} reaches back more than 100 years", param_hint="'--since'"
            )
        return int((time.time() - secs) * 1e9)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise click.BadParameter(
            f"{value!r} is neither a duration (10m, 2h) nor an ISO 8601 time",
            param_hint="'--since'",
        ) from e
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1e9)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option("--follow", "-f", is_flag=True, help="Keep following until the job ends.")
@click.option("--node", "-n", type=int, help="Only this node rank.")
@click.option("--since", help="Only lines newer than a duration (10m) or an ISO time.")
@click.option(
    "--tail",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only the last N lines of the merged log.",
)
@click.option(
    "--timestamps",
    "-t",
    is_flag=True,
    help="Show each line's time: Docker's timestamp (a Slurm job's: when it was read).",
)
@click.pass_context
def logs(
    ctx: click.Context,
    job_ref: str,
    follow: bool,
    node: int | None,
    since: str | None,
    tail: int | None,
    timestamps: bool,
) -> None:
    """Print a job's logs, every node merged in time order, tagged [node rank]."""
    since_ns = parse_since(since) if since else None
    raise SystemExit(run(_logs(ctx, job_ref, follow, node, since_ns, tail, timestamps)))


async def _logs(
    ctx: click.Context,
    ref: str,
    follow: bool,
    node: int | None,
    since_ns: int | None,
    tail: int | None,
    timestamps: bool,
) -> int:
    async with command_service(ctx) as svc:
        job = await svc.locate_job(ref)
        svc.check_node(job, node)
        if follow and job.removed_at is None:
            return await follow_job(
                svc, job, tail=tail, timestamps=timestamps, node=node, since_ns=since_ns
            )
        lines = await svc.read_logs(job, node=node, since_ns=since_ns, tail=tail)
        for line in lines:
            print_line(line, timestamps)
        for host, why in job.unreachable.items():
            err(f"warning: {why}; showed the lines archived from {host} so far")
        missing = (
            _missing(job, node, lines) if since_ns is None and (tail is None or tail > 0) else []
        )
        if tail is not None and lines and missing:
            # --tail cut the node's lines away, they were not missing: ask for its own last one
            import asyncio

            had = await asyncio.gather(
                *(svc.read_logs(job, node=rank, tail=1) for rank, _, _ in missing)
            )
            missing = [m for m, last in zip(missing, had) if not last]
        if missing and not lines:
            from console.errors import JobError

            raise JobError(
                f"job {job.id}: no lines to show: " + "; ".join(text for _, _, text in missing),
                "the archive keeps what gpuconsole read (a follow, logs, the app); "
                "read a job's logs before its containers are removed",
            )
        hosts = {n.node_rank: n.host for n in job.nodes}
        for rank, why in sorted(job.log_problems.items()):
            err(f"warning: n{rank} on {hosts.get(rank, '?')}: {why}")
        for rank, kind, text in missing:
            if kind != "unreachable" and rank not in job.log_problems:  # not said above
                err(f"warning: {text}")
        return 0


def _missing(
    job: JobRecord, node: int | None, lines: list[JobLogLine]
) -> list[tuple[int, str, str]]:
    """(node rank, kind, why) of each node shown without a single line for a reason
    (container gone and nothing archived, job removed...; :func:`~console.jobs.logs
    .no_lines_reason`), not a node that only wrote nothing or may still write."""
    from console.jobs.logs import no_lines_reason

    have = {ln.node_rank for ln in lines}
    return [
        (n.node_rank, r[0], r[1])
        for n in job.nodes
        if (node is None or n.node_rank == node)
        and n.node_rank not in have
        and (r := no_lines_reason(job, n)) is not None
        and r[0] != "silent"
    ]


# -- stop / rm ------------------------------------------------------------------------------


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option(
    "--grace",
    type=FiniteFloat(0, 3600),
    help="Seconds between SIGTERM and SIGKILL, 0-3600 (default: the profile's stop_grace).",
)
@click.pass_context
def stop(ctx: click.Context, job_ref: str, grace: float | None) -> None:
    """Stop a job: SIGTERM every node's container, SIGKILL after the grace period."""
    run(_stop(ctx, job_ref, grace))


async def _stop(ctx: click.Context, ref: str, grace: float | None) -> None:
    from console.jobs.status import shown_state

    async with command_service(ctx) as svc:
        job = await svc.locate_job(ref)
        out = await svc.stop(job, grace)
        if not out.stopped:
            err(f"job {out.job.id} is not running ({shown_state(out.job)})")
            return
        print_summary(out.job)  # the end state and why (once)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option(
    "--force",
    is_flag=True,
    help="Stop the job first if it is running; forget a job whose hosts are "
    "no longer in its profile.",
)
@click.pass_context
def rm(ctx: click.Context, job_ref: str, force: bool) -> None:
    """Remove a job's containers (its logs stay archived locally)."""
    run(_rm(ctx, job_ref, force))


async def _rm(ctx: click.Context, ref: str, force: bool) -> None:
    async with command_service(ctx) as svc:
        job = await svc.remove(await svc.locate_job(ref), force=force)
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
    async with command_service(ctx) as svc:
        return await svc.exec(await svc.locate_job(ref), node, command, tty=tty)


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.pass_context
def describe(ctx: click.Context, job_ref: str) -> None:
    """Show a job: spec, hosts, containers, each node's docker run and torchrun lines."""
    run(_describe(ctx, job_ref))


async def _describe(ctx: click.Context, ref: str) -> None:
    async with command_service(ctx) as svc:
        job = await svc.locate_job(ref)
        if job.removed_at is None:
            job = await svc.refresh_job(job, teardown=False)
        click.echo((await svc.describe(job)).render())
