"""``gpuconsole watch``: headless, long-running alerting over the fleet and its jobs.

Starts the fleet monitor and job reconciles through the service, evaluates the alert rules,
prints each alert transition (a text line, or a JSON line with ``--json``), pages the
profile's ``notify:`` URLs and ``--notify`` (Apprise, :mod:`console.watch.notify`) and, with
``--metrics-port``, serves the fleet as Prometheus metrics under dcgm-exporter's names
(:mod:`console.watch.metrics`; loopback only unless ``--metrics-addr`` says otherwise).

Ctrl-C and SIGTERM end it cleanly with exit 0; a closed stdout too (like ``top``).
"""

from __future__ import annotations

import ipaddress
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from console.cli.base import command_profile, err, main, out, run, while_stdout_open
from console.cli.params import FiniteFloat

if TYPE_CHECKING:  # the watch stack is imported when `watch` runs (start-up)
    from console.watch.runner import Watch, WatchOptions

_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")


@main.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per alert transition: {type, change, at, alert}; "
    "first one per alert already firing (change firing, initial true).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics (dcgm-exporter names) on this port; 0 picks a "
    "free one (the address is said on stderr).",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server binds; give 0.0.0.0 or :: to let other machines scrape it.",
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="URL",
    help="Also page this Apprise URL (repeatable; added to the profile's notify:).",
)
@click.option(
    "--interval",
    type=FiniteFloat(0.1, 3600),
    default=1.0,
    show_default=True,
    help="Sampling interval on the hosts (s), 0.1-3600.",
)
@click.option(
    "--replay",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Watch a telemetry recording (`top --record`) instead of live hosts.",
)
@click.option(
    "--speed",
    type=FiniteFloat(0, 1000),
    default=1.0,
    show_default=True,
    help="Replay speed factor, up to 1000 (0 = as fast as possible).",
)
@click.pass_context
def watch(
    ctx: click.Context,
    as_json: bool,
    metrics_port: int | None,
    metrics_addr: str,
    notify: tuple[str, ...],
    interval: float,
    replay: Path | None,
    speed: float,
) -> None:
    """Alert on the fleet and its jobs: print, page (Apprise) and serve metrics.

    Rules, delays and thresholds come from the profile's `alerts:`, the pages go to its
    `notify:` URLs (and --notify). Runs until Ctrl-C or SIGTERM (exit 0).
    """
    try:
        ipaddress.ip_address(metrics_addr)
    except ValueError:
        if not _HOSTNAME.fullmatch(metrics_addr) or metrics_addr.replace(".", "").isdigit():
            raise click.BadParameter(
                f"{metrics_addr!r} is not an IP address or host name (127.0.0.1, 0.0.0.0, ::)",
                param_hint="--metrics-addr",
            ) from None
    from console.watch.runner import WatchOptions

    opts = WatchOptions(
        as_json=as_json,
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
        notify_urls=list(notify),
        interval=interval,
        replay=replay,
        speed=speed,
    )
    run(_watch(ctx, opts))


async def _watch(ctx: click.Context, opts: WatchOptions) -> None:
    import asyncio

    from console.service import Service
    from console.watch.notify import check_urls
    from console.watch.runner import Watch

    profile = command_profile(ctx)
    opts.notify_urls = list(dict.fromkeys([*profile.notify, *opts.notify_urls]))
    from_profile = len(dict.fromkeys(profile.notify))

    def where(i: int) -> tuple[str, str | None, int | None]:
        if i < from_profile:
            return (f"notify[{i}]", profile.source, profile.lines.get(("notify", i)))
        return ("--notify", None, None)

    check_urls(opts.notify_urls, where)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Service(profile) as svc:
            w = Watch(svc, opts, emit=out, say=err)
            await while_stdout_open(
                w.run(stop, on_started=lambda: _say_started(w, profile.name, len(profile.hosts)))
            )
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _say_started(w: Watch, profile: str, hosts: int) -> None:
    from console.watch.notify import redact_url

    what = (
        f"replaying {w.opts.replay}"
        if w.opts.replay is not None
        else f"watching {hosts} host{'s' if hosts != 1 else ''} of profile {profile}"
    )
    err(what)
    if w.metrics_url:
        err(f"metrics: {w.metrics_url}")
    if w.opts.notify_urls:
        err("notifying: " + ", ".join(redact_url(u) for u in w.opts.notify_urls))
