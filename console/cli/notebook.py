"""``gpuconsole notebook``: JupyterLab in a container on a GPU host, reached through SSH.

``notebook [SPEC] [--host H] [--gpus all|N|0,1] [--image IMG] [--workdir DIR]`` starts a
notebook job (``kind: notebook``: the same launch path, labels and busy-GPU refusal as
``submit``) whose JupyterLab listens on the host's 127.0.0.1 only, with a token passed by
environment; forwards a local port over the SSH connection; waits until JupyterLab answers;
prints the URL (stdout, one line: scripts read it) and keeps the tunnel open until Ctrl-C.
The notebook keeps running afterwards: ``notebook JOB`` re-attaches (the same local port
when free, so the same URL), ``stop``/``rm`` end it.

Exit status: 0 after Ctrl-C (the tunnel closed, the notebook runs on), 1 when the notebook
ended or could not be reached, 2 for bad input (see :mod:`console.cli.base`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from console.cli.base import command_service, err, main, note_done, out, run
from console.cli.params import FiniteFloat
from remote.errors import GpuConsoleError

if TYPE_CHECKING:  # the service stack is imported when the command runs (start-up)
    from console.jobs.store import JobRecord
    from console.notebook.attach import NotebookTunnel
    from console.service import Service

#: How often the open tunnel checks that the notebook still runs and the SSH connection
#: still carries the forward (s).
CHECK_EVERY_S = 5.0


@main.command()
@click.argument("target", required=False, metavar="[SPEC | JOB]")
@click.option(
    "--host",
    "-H",
    metavar="HOST",
    help="Host to start it on (default: the spec's, else the profile's first).",
)
@click.option(
    "--gpus",
    "--gpus-per-node",
    "gpus",
    metavar="all|N|0,1",
    help="GPUs; busy ones are refused (default: 1 on a GPU host, else none).",
)
@click.option(
    "--image",
    metavar="IMAGE",
    help="Image with JupyterLab (default: the spec's, else the profile's).",
)
@click.option(
    "--workdir",
    "-w",
    metavar="DIR",
    help="Folder on the host mounted at "
    "/workspace, created if missing (default: ~/gpuconsole/notebooks).",
)
@click.option("--name", help="Job name (default: the spec's, else `notebook`).")
@click.option(
    "--port",
    "local_port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="Local port of the URL (default: the host's port number when free here).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in your browser.")
@click.option("--dry-run", is_flag=True, help="Print the plan and `docker run` line only.")
@click.option("--force", is_flag=True, help="Use GPUs that other processes hold.")
@click.option(
    "--timeout",
    type=FiniteFloat(1, 3600),
    default=180.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for JupyterLab to answer.",
)
@click.pass_context
def notebook(
    ctx: click.Context,
    target: str | None,
    host: str | None,
    gpus: str | None,
    image: str | None,
    workdir: str | None,
    name: str | None,
    local_port: int | None,
    open_browser: bool,
    dry_run: bool,
    force: bool,
    timeout: float,
) -> None:
    """Start JupyterLab on a GPU host and open a tunnel to it, or re-attach to notebook JOB.

    Prints the URL with its token and keeps the tunnel open until Ctrl-C; the notebook keeps
    running (`gpuconsole stop JOB` ends it).
    """
    spec: Path | None = None
    job_ref: str | None = None
    if target is not None:
        if Path(target).is_file() or target.endswith((".yaml", ".yml")):
            spec = Path(target)
        else:
            job_ref = target
    if job_ref is not None:
        given = [
            f
            for f, v in (
                ("--host", host),
                ("--gpus", gpus),
                ("--image", image),
                ("--workdir", workdir),
                ("--name", name),
            )
            if v is not None
        ]
        if given or dry_run or force:
            raise click.UsageError(
                f"{', '.join(given) or '--dry-run/--force'}: re-attaching "
                f"to {job_ref} starts nothing; leave them out"
            )
    raise SystemExit(
        run(
            _notebook(
                ctx,
                spec,
                job_ref,
                host,
                gpus,
                image,
                workdir,
                name,
                local_port,
                open_browser,
                dry_run,
                force,
                timeout,
            )
        )
    )


async def _notebook(
    ctx: click.Context,
    spec: Path | None,
    job_ref: str | None,
    host: str | None,
    gpus: str | None,
    image: str | None,
    workdir: str | None,
    name: str | None,
    local_port: int | None,
    open_browser: bool,
    dry_run: bool,
    force: bool,
    timeout: float,
) -> int:
    import asyncio

    from console.fields import parse_gpus

    # inside run(): a bad --gpus is an error line naming the flag, exit 2 (not a traceback)
    wanted = parse_gpus(gpus) if gpus is not None else None
    async with command_service(ctx) as svc:
        if job_ref is not None:
            job = await svc.find_notebook(job_ref)
        else:
            sub = await svc.plan_notebook(
                spec,
                host=host,
                gpus=wanted,
                image=image,
                workdir=workdir,
                name=name,
                dry_run=dry_run,
                force=force,
            )
            if dry_run:
                click.echo(sub.plan_text())
                return 0
            job = await svc.submit(
                sub,
                lambda job_id: note_done(
                    f"notebook {job_id} keeps running: `gpuconsole notebook {job_id}` "
                    f"re-attaches, `gpuconsole stop {job_id}` ends it"
                ),
            )
            plan = sub.prepared.plan
            node = plan.nodes[0]
            gpu_text = ",".join(map(str, node.gpu_ids)) or "none"
            err(
                f"started notebook {job.id} on {node.host} (GPUs: {gpu_text}); JupyterLab on "
                f"the host's 127.0.0.1:{plan.port}, waiting for it to answer"
            )
        try:
            tunnel = await svc.attach_notebook(job, local_port=local_port, timeout=timeout)
        except asyncio.CancelledError:
            err(
                f"interrupted; notebook {job.id} keeps running: `gpuconsole notebook "
                f"{job.id}` re-attaches, `gpuconsole stop {job.id}` ends it"
            )
            return 130
        return await _hold(svc, job, tunnel, open_browser)


async def _hold(
    svc: Service,
    job: JobRecord,
    tunnel: NotebookTunnel,
    open_browser: bool,
) -> int:
    """Show the URL and keep the tunnel open until Ctrl-C or the notebook ends."""
    import asyncio
    import webbrowser

    server = tunnel.server
    out(tunnel.url)
    sys.stdout.flush()
    version = f"Jupyter Server {tunnel.version}, " if tunnel.version else ""
    err(
        f"notebook {job.id}: {version}forwarding 127.0.0.1:{tunnel.local_port} -> "
        f"{server.host}:127.0.0.1:{server.port} over SSH. Ctrl-C closes the tunnel; the "
        f"notebook keeps running (`gpuconsole notebook {job.id}` re-attaches, "
        f"`gpuconsole stop {job.id}` ends it)."
    )
    if open_browser and not webbrowser.open(tunnel.url):
        err("warning: no browser could be started here; open the URL above yourself")
    try:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            fresh = await svc.refresh_job(job, teardown=False)
            if fresh.state not in ("running", "pending"):
                from console.jobs.status import job_summary

                err(f"notebook {job.id} ended: {job_summary(fresh) or fresh.state}")
                return 1
            if tunnel.forward.closed:
                err(
                    f"notebook {job.id}: the SSH connection to {server.host} dropped; "
                    "forwarding again"
                )
                await tunnel.close()
                tunnel = await _reforward(svc, fresh, tunnel.local_port)
                err(f"notebook {job.id}: forwarding again on 127.0.0.1:{tunnel.local_port}")
    except asyncio.CancelledError:
        err(
            f"tunnel closed; notebook {job.id} keeps running: `gpuconsole notebook {job.id}` "
            f"re-attaches, `gpuconsole stop {job.id}` ends it"
        )
        return 0
    finally:
        await asyncio.shield(tunnel.close())


async def _reforward(svc: Service, job: JobRecord, local_port: int) -> NotebookTunnel:
    """A new tunnel on the same local port after the connection dropped (retried for up to
    a minute while the host is unreachable)."""
    import asyncio

    last: GpuConsoleError | None = None
    for _ in range(12):
        try:
            return await svc.attach_notebook(job, local_port=local_port, timeout=60)
        except GpuConsoleError as e:
            last = e
            await asyncio.sleep(CHECK_EVERY_S)
    assert last is not None
    raise last
