"""``gpuconsole stacks JOB``: every rank's Python stack, grouped, the odd ones out first."""

from __future__ import annotations

import json

import click

from console.cli.base import command_service, main, out, run

#: exit status when some node, rank or process could not be read (the rest is printed)
EXIT_PARTIAL = 3


@main.command()
@click.argument("job_ref", metavar="JOB")
@click.option("--node", type=click.IntRange(min=0), help="Only this node (its node rank).")
@click.option("--rank", type=click.IntRange(min=0), help="Only this global rank.")
@click.option("--native", is_flag=True, help="Native (C/C++/CUDA) frames too (py-spy --native).")
@click.option("--json", "as_json", is_flag=True, help="Print the capture and its reading as JSON.")
@click.option(
    "--frames",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    help="Frames shown per stack group (innermost first).",
)
@click.pass_context
def stacks(
    ctx: click.Context,
    job_ref: str,
    node: int | None,
    rank: int | None,
    native: bool,
    as_json: bool,
    frames: int,
) -> None:
    """Show which rank is stuck and where: the Python stack of every rank of a running job
    (all nodes at once, py-spy), ranks with the same stack folded into one group, the odd
    ones out first and named as the likely cause; torchrun's agents and DataLoader workers
    apart. The job is paused only while py-spy reads each process (milliseconds).

    A job that no longer runs has no stacks; the Flight Recorder dumps its ranks left (the
    NCCL watchdog writes them on a timeout) are read instead, by PyTorch's analyser.

    Exit status: 0 every node was read, 3 some node, rank or process could not be (each
    named under "not read", the rest shown) or the job ended and only its dumps were read,
    1 the job does not run (and left no dump) or no node could be read, 2 bad flags.
    """
    raise SystemExit(run(_stacks(ctx, job_ref, node, rank, native, as_json, frames)))


async def _stacks(
    ctx: click.Context,
    ref: str,
    node: int | None,
    rank: int | None,
    native: bool,
    as_json: bool,
    frames: int,
) -> int:
    from console.stacks.render import analysis_json, render

    async with command_service(ctx) as svc:
        job = await svc.locate_job(ref)
        job = await svc.refresh_job(job, teardown=False)
        capture, analysis = await svc.stacks(job, node=node, rank=rank, native=native)
    if as_json:
        out(
            json.dumps(
                {"capture": capture.to_json(), "analysis": analysis_json(analysis)}, indent=2
            )
        )
    else:
        out(render(capture, analysis, frames=frames))
    fr = capture.fr_trace
    if not capture.processes("rank") and analysis.problems and (fr is None or fr.error):
        return 1
    return EXIT_PARTIAL if analysis.partial else 0
