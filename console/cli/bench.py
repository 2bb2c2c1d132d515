"""``gpuconsole bench``: is every GPU of the fleet as fast as it should be?"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from console.cli.base import command_service, err, main, out, run
from console.cli.params import FiniteFloat

if TYPE_CHECKING:
    from console.bench.model import BenchMode


@main.command()
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="HOST",
    help="Bench this host (repeat; default: every host of the profile).",
)
@click.option("--quick", is_flag=True, help="Under 30 s a host (the default).")
@click.option("--full", is_flag=True, help="Larger sizes, 60 s sustained load.")
@click.option(
    "--cross", is_flag=True, help="Also the NCCL all-reduce across the hosts (after the hosts)."
)
@click.option(
    "--dcgm",
    is_flag=True,
    help="Also `dcgmi diag -r 1` (-r 2 with --full) where DCGM is installed, shown beside.",
)
@click.option(
    "--sustain",
    type=FiniteFloat(min=1, max=3600),
    metavar="SECONDS",
    help="The sustained load's length (default: 6 s quick, 60 s full).",
)
@click.option("--force", is_flag=True, help="Bench GPUs that other processes hold.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--last", is_flag=True, help="Show the last stored results of every GPU; bench nothing."
)
@click.pass_context
def bench(
    ctx: click.Context,
    hosts: tuple[str, ...],
    quick: bool,
    full: bool,
    cross: bool,
    dcgm: bool,
    sustain: float | None,
    force: bool,
    as_json: bool,
    last: bool,
) -> None:
    """Bench every GPU of the fleet through the same launch path as jobs (the profile's
    image and runtime): bf16 and fp8 matmul TFLOP/s, device copy TB/s, PCIe both ways, a
    sustained load with clocks, power, temperature and throttle reasons sampled, NCCL
    all-reduce busbw over each host's GPUs (and across hosts with --cross). Each GPU is
    compared with its model's fleet median and datasheet; one more than 10% below is flagged
    with the likely reason. Results are kept: `submit` names flagged GPUs, `--exclude-slow`
    leaves them out.

    Exit status: 0 every GPU benched and none flagged, 3 a GPU flagged (by gpuconsole or
    DCGM), 4 nothing to bench (no host asked has a GPU), 1 a host could not be benched,
    2 bad flags.
    """
    if quick and full:
        raise click.UsageError("--quick and --full are alternatives: give one of them")
    mode: BenchMode = "full" if full else "quick"
    raise SystemExit(
        run(_bench(ctx, list(hosts), mode, cross, dcgm, sustain, force, as_json, last))
    )


async def _bench(
    ctx: click.Context,
    hosts: list[str],
    mode: BenchMode,
    cross: bool,
    dcgm: bool,
    sustain: float | None,
    force: bool,
    as_json: bool,
    last: bool,
) -> int:
    from console.bench.render import last_table, render, report_json
    from console.bench.store import verdict_json

    async with command_service(ctx) as svc:
        if last:
            stored = svc.bench_results()
            if hosts:
                stored = [s for s in stored if s.result.host in hosts]
            if as_json:
                out(
                    json.dumps(
                        [
                            {**s.result.to_json(), "verdict": verdict_json(s.verdict)}
                            for s in stored
                        ],
                        indent=2,
                    )
                )
            else:
                out(last_table(stored))
            return 0
        report = await svc.bench(
            hosts or None,
            mode=mode,
            cross=cross,
            dcgm=dcgm,
            force=force,
            sustain_s=sustain,
            say=err,
        )
    out(json.dumps(report_json(report), indent=2) if as_json else render(report))
    return report.exit_code
