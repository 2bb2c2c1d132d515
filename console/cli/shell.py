"""``gpuconsole shell``: a shell (or one command) in a running job's container, or in a fresh
dev container on a host.

``shell JOB [--node N] [-- CMD...]`` is ``exec`` (same code). ``shell --host H [--image IMG]
[--gpus all|N|0,1] [--workdir DIR] [-- CMD...]`` creates a dev container with the profile's
image, mounts and security options (see :meth:`console.service.Service.shell_on_host`), runs
the shell or CMD in it and removes it afterwards. With a terminal the command gets a TTY
(window size changes forwarded); else stdin and output are piped. The exit code passes
through.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from console.cli.base import command_service, err, main, run
from console.cli.jobs import _exec
from console.errors import JobNotFound

if TYPE_CHECKING:
    from console.service import Service


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[JOB] [-- CMD...]")
@click.option(
    "--host",
    "-H",
    "host",
    metavar="HOST",
    help="Start a dev container on HOST instead of entering a job's container.",
)
@click.option("--node", "-n", type=int, help="Node rank of JOB (default 0).")
@click.option("--image", metavar="IMAGE", help="Dev container image (default: the profile's).")
@click.option(
    "--gpus",
    metavar="all|N|0,1",
    default="0",
    show_default=True,
    help="GPUs of the dev container; busy ones are refused.",
)
@click.option("--workdir", "-w", metavar="DIR", help="Working directory in the dev container.")
@click.pass_context
def shell(
    ctx: click.Context,
    args: tuple[str, ...],
    host: str | None,
    node: int | None,
    image: str | None,
    gpus: str,
    workdir: str | None,
) -> None:
    """A shell or COMMAND in a job's container (as `exec`), or with --host in a dev container
    removed when it exits. Exits with the command's exit code.
    """
    if host is None:
        if not args:
            raise click.UsageError("give a JOB, or --host HOST for a dev container")
        if image is not None or workdir is not None or gpus != "0":
            raise click.UsageError("--image, --gpus and --workdir need --host")
        raise SystemExit(run(_exec(ctx, args[0], list(args[1:]), node)))
    if node is not None:
        raise click.UsageError("--node needs a JOB, not --host")
    raise SystemExit(run(_dev_shell(ctx, host, list(args), image, gpus, workdir)))


async def _dev_shell(
    ctx: click.Context,
    host: str,
    command: list[str],
    image: str | None,
    gpus: str,
    workdir: str | None,
) -> int:
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    from console.fields import parse_gpus

    wanted = parse_gpus(gpus)
    async with command_service(ctx) as svc:
        if command and _is_job(svc, command[0]):
            # `shell JOB --host H`: click cannot tell JOB from a command given without `--`
            raise click.UsageError(
                f"{command[0]!r} is a job: give a JOB (its container) or --host HOST (a dev "
                "container), not both; with --host, put a command after `--`"
            )
        return await svc.shell_on_host(
            host,
            command,
            tty=tty,
            image=image,
            gpus=wanted,
            workdir=workdir,
            warn=lambda m: err(f"warning: {m}"),
        )


def _is_job(svc: Service, ref: str) -> bool:
    """Whether ``ref`` is exactly a known job's id or name."""
    try:
        job = svc.find_job(ref)
    except JobNotFound:
        return False
    return ref in (job.id, job.name)
