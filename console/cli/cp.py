"""``gpuconsole cp``: files out of (and into) a job node's container, like ``docker cp``."""

from __future__ import annotations

import click

from console.cli.base import command_service, err, main, run


def format_size(n: int) -> str:
    """Bytes for people: ``512 B``, ``77.2 KiB``, ``1.5 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@main.command(
    epilog="""\b
Exit status:
  0  copied
  1  the job is unknown or removed, the host or engine failed or refused (a
     read-only mount), DEST cannot take SRC (a directory onto a file, not
     writable), or an archive member would land outside DEST (refused)
  2  bad input: not exactly one JOB:PATH operand, --node out of range, or
     SRC (or DEST's folder) does not exist"""
)
@click.argument("src", metavar="SRC")
@click.argument("dest", metavar="DEST")
@click.option("--node", "-n", type=int, help="Node rank whose container is used (default 0).")
@click.pass_context
def cp(ctx: click.Context, src: str, dest: str, node: int | None) -> None:
    """Copy files between a job's container and this machine: `cp JOB:SRC DEST` or
    `cp SRC JOB:DEST`.

    JOB is a job id, id prefix or name; the container is node 0's unless --node. Works on
    running and exited containers (not removed ones) and sees their mounts. Folders are
    copied recursively. As with `docker cp`: an existing folder DEST receives SRC under its
    own name, any other DEST is SRC's new name (its folder must exist); SRC/. copies a
    folder's contents. A SRC that is a link is followed; links inside a folder are copied as
    links, and members that would land outside DEST (.., absolute paths, links pointing
    outside) stop the copy. Files copied in are owned by root.
    """
    run(_cp(ctx, src, dest, node))


async def _cp(ctx: click.Context, src: str, dest: str, node: int | None) -> None:
    from console.jobs.copy import parse_copy

    request = parse_copy(src, dest)
    async with command_service(ctx) as svc:
        job = await svc.locate_job(request.job_ref)
        out = await svc.copy(job, node, request)
    where = f"{out.job_id}:{request.container_path} (node {out.node_rank} on {out.host})"
    what = f"{out.stats.files} file(s), {format_size(out.stats.bytes)}"
    if request.direction == "from":
        err(f"copied {what} from {where} to {out.stats.dest}")
    else:
        err(
            f"copied {what} from {request.local_path} to {out.job_id}:{out.stats.dest} "
            f"(node {out.node_rank} on {out.host})"
        )
