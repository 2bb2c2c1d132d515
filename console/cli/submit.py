"""``gpuconsole submit``: plan a spec, launch it, optionally follow it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from console.cli.base import command_service, err, follow_job, main, note_done, run
from console.errors import UsageError


def _flag_int(flag: str, value: str | None, low: int, high: int) -> int | None:
    if value is None:
        return None
    v = value.strip()
    if not (v.isascii() and v.isdigit()) or not low <= int(v) <= high:
        raise UsageError(
            f"{flag}: {value!r} is not a whole number from {low} to {high}",
            f"e.g. `{flag} {max(low, 1)}`",
        )
    return int(v)


def _parse_gpus(value: str | None) -> Any:
    """``--gpus-per-node``: ``all``, a count, or indices like ``0,1`` (or ``[0,1]``).

    Raises:
        UsageError: anything else, naming the flag.
    """
    if value is None:
        return None
    if value == "all":
        return "all"
    parts = [p.strip() for p in value.strip("[]").split(",")]
    if all(p.isascii() and p.isdigit() for p in parts if p) and any(parts):
        ints = [int(p) for p in parts if p]
        return ints if ("," in value or value.startswith("[")) else ints[0]
    raise UsageError(
        f"--gpus-per-node: {value!r} is not `all`, a GPU count or GPU indices",
        "e.g. `--gpus-per-node all`, `--gpus-per-node 2`, `--gpus-per-node 0,1` (0 = a CPU job)",
    )


def _parse_nodes(value: str | None) -> Any:
    """``--nodes``: a count, or host names separated by commas.

    Raises:
        UsageError: empty, or an empty host name between commas.
    """
    if value is None:
        return None
    if value.isascii() and value.isdigit():
        return int(value)
    names = [v.strip() for v in value.split(",")]
    if not all(names):
        raise UsageError(
            f"--nodes: {value!r} has an empty host name", "e.g. `--nodes 2` or `--nodes gpu1,gpu2`"
        )
    return names


def _overrides(
    name: str | None,
    image: str | None,
    nodes: str | None,
    gpus_per_node: str | None,
    nproc_per_node: str | None,
    max_restarts: str | None,
    args: tuple[str, ...],
    runtime: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The spec fields the flags override (``None``: not given).

    Raises:
        UsageError: a flag's value cannot be parsed (naming the flag).
    """
    from console.jobs.spec import MAX_NPROC

    return {
        "name": name,
        "image": image,
        "nodes": _parse_nodes(nodes),
        "gpus_per_node": _parse_gpus(gpus_per_node),
        "nproc_per_node": _flag_int("--nproc-per-node", nproc_per_node, 1, MAX_NPROC),
        "max_restarts": _flag_int("--max-restarts", max_restarts, 0, 1000),
        "args": list(args) if args else None,
        "runtime": runtime,
        "python": python,
    }


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))  # what it is: Service.plan says
@click.option("--follow", "-f", is_flag=True, help="Follow the logs; exit with the job's code.")
@click.option("--dry-run", is_flag=True, help="Print the plan and `docker run` lines only.")
@click.option("--name", help="Override the job name.")
@click.option("--image", help="Override the image.")
@click.option("--nodes", help="Node count, or host names separated by commas.")
@click.option("--gpus-per-node", help="all, a count, indices like 0,1, or 0 for CPU (gloo).")
@click.option("--nproc-per-node", help="torchrun processes per node (1-1024).")
@click.option("--max-restarts", help="torchrun --max-restarts (0-1000).")
@click.option("--arg", "args", multiple=True, help="Replace the script's arguments (repeat).")
@click.option("--force", is_flag=True, help="Use GPUs that other processes hold.")
@click.option(
    "--exclude-slow",
    is_flag=True,
    default=None,
    help="Leave out the GPUs the last `gpuconsole bench` flagged (default: the profile's "
    "defaults.exclude_slow).",
)
@click.option(
    "--runtime",
    type=click.Choice(["docker", "host"]),
    help="docker containers, or host: torchrun in the hosts' own Python.",
)
@click.option(
    "--python",
    "python",
    metavar="PYTHON",
    help="runtime host: the python with torch (a path, or a conda env name).",
)
@click.pass_context
def submit(
    ctx: click.Context,
    spec: Path,
    follow: bool,
    dry_run: bool,
    name: str | None,
    image: str | None,
    nodes: str | None,
    gpus_per_node: str | None,
    nproc_per_node: str | None,
    max_restarts: str | None,
    args: tuple[str, ...],
    force: bool,
    exclude_slow: bool | None,
    runtime: str | None,
    python: str | None,
) -> None:
    """Launch the job described by SPEC (YAML); flags override its fields."""
    flags = (name, image, nodes, gpus_per_node, nproc_per_node, max_restarts, args, runtime, python)
    code = run(_submit(ctx, spec, flags, follow, dry_run, force, exclude_slow or None))
    raise SystemExit(code)


async def _submit(
    ctx: click.Context,
    spec_path: Path,
    flags: tuple[Any, ...],
    follow: bool,
    dry_run: bool,
    force: bool,
    exclude_slow: bool | None = None,
) -> int:
    overrides = _overrides(*flags)  # before the service: a bad flag touches nothing
    async with command_service(ctx) as svc:
        sub = await svc.plan(
            spec_path, overrides, dry_run=dry_run, force=force, exclude_slow=exclude_slow
        )
        if dry_run:
            click.echo(sub.plan_text())
            return 0
        # said from the moment the launch is complete, even if Ctrl-C comes before submit
        # returns (an interrupt before it undoes the launch)
        job = await svc.submit(
            sub,
            lambda job_id: note_done(
                f"job {job_id} was submitted and keeps running (`gpuconsole stop {job_id}`)"
            ),
        )
        err(sub.submitted_line(job))
        if not follow:
            click.echo(job.id)
            return 0
        return await follow_job(svc, job, tail=None, timestamps=False)
