"""``gpuconsole submit``: plan a spec, launch it, optionally follow it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from console.cli.base import command_service, err, follow_job, main, run


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
    async with command_service(ctx) as svc:
        sub = await svc.plan(spec_path, overrides, dry_run=dry_run, force=force)
        if dry_run:
            click.echo(sub.plan_text())
            return 0
        job = await svc.submit(sub)
        plan = sub.prepared.plan
        err(f"submitted {job.id}: {len(plan.nodes)} node(s) x {plan.nproc_per_node} "
             f"process(es), world size {plan.world_size}, on "
             f"{', '.join(n.host for n in plan.nodes)}")
        if not follow:
            click.echo(job.id)
            return 0
        return await follow_job(svc, job, tail=None, timestamps=False)
