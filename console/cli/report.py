"""``gpuconsole report``: GPU-hours held, busy and idle, utilization, money and throughput per
job, host or user, from the history that ``watch``, the app, ``top`` and ``ps`` record."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from console.cli.base import command_service, err, main, run


@main.command()
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="How far back: a duration (90m, 12h, 7d, 2w) or an ISO 8601 time.",
)
@click.option(
    "--by",
    type=click.Choice(["job", "host", "user"]),
    default="job",
    show_default=True,
    help="One row per gpuconsole job, host, or user owning the GPU processes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    metavar="FILE",
    help="Also write one self-contained HTML page (the table and a chart per row).",
)
@click.pass_context
def report(
    ctx: click.Context,
    since: str,
    by: str,
    as_json: bool,
    as_csv: bool,
    html_file: Path | None,
) -> None:
    """GPU-hours held, busy and idle, mean utilization, their cost at the profile's
    price_per_gpu_hour and the jobs' throughput, from the per-minute history that watch, the
    app, top and ps keep (history.sqlite3 in the state dir)."""
    from console.cli.jobs import parse_since

    if as_json and as_csv:
        raise click.UsageError("--json and --csv: pick one")
    since_s = _since(since, parse_since)
    run(_report(ctx, since_s, by, as_json, as_csv, html_file))


def _since(value: str, parse: object) -> float:
    """``--since`` as Unix s (the same forms as ``logs --since``)."""
    try:
        ns = parse(value)  # type: ignore[operator]
    except click.BadParameter as e:
        raise click.BadParameter(e.message, param_hint="'--since'") from e
    secs = float(ns) / 1e9
    if secs > time.time():
        raise click.BadParameter(f"{value!r} is in the future", param_hint="'--since'")
    return secs


async def _report(
    ctx: click.Context,
    since: float,
    by: str,
    as_json: bool,
    as_csv: bool,
    html_file: Path | None,
) -> None:
    from console.report import render_csv, render_html, render_text

    async with command_service(ctx) as svc:
        rep = await svc.report(
            since, by="job" if by == "job" else "host" if by == "host" else "user"
        )
    if html_file is not None:
        try:
            html_file.write_text(render_html(rep), encoding="utf-8")
        except OSError as e:
            from console.errors import UsageError

            raise UsageError(
                f"--html {html_file}: cannot write it: {e.strerror or e}",
                "pick a file in a folder you can write",
            ) from e
        err(f"wrote {html_file}")
    if as_json:
        click.echo(json.dumps(rep.as_dict(), indent=2))
    elif as_csv:
        click.echo(render_csv(rep), nl=False)
    else:
        if not rep.total.observed_h:
            err(
                "no GPU time recorded in that window: GPU time is recorded while `watch`, the "
                "app or `top` runs; `ps` and `watch` record the jobs' progress"
            )
        for line in render_text(rep):
            click.echo(line)
