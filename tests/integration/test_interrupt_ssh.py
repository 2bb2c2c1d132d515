"""Ctrl-C while ``ps`` connects to and lists real SSH hosts: ``interrupted`` and exit 130, or
the finished listing; never asyncio's "unhandled exception during asyncio.run() shutdown" with
a traceback (a listing cut off mid-answer ends with its host's error, not a cancellation),
and never a death by the signal after the output (each run is judged by
``tests.unit.test_interrupt.judge``)."""

from __future__ import annotations

from tests.integration.conftest import CLI, REPO
from tests.unit.test_interrupt import INTERRUPTED, launcher_argv, sweep


def test_ctrl_c_during_an_ssh_listing(cli: CLI) -> None:
    """Through the installed ``gpuconsole`` script, from its exec to past the end of the
    listing (about 1 s); the listing's text changes between runs (ages), so a finished run
    is held to ``ps``'s status only."""
    argv = launcher_argv("installed script", "-p", str(cli.profile), "ps", "--json", "--hosts")
    delays = sorted((i * 15.0 for i in range(100)), key=lambda d: (d * 37) % 1500)
    outcomes = sweep(argv, cli.env(), REPO, delays, same_stdout=False)
    assert INTERRUPTED in outcomes, outcomes  # the check can fail: runs were interrupted


def test_ctrl_c_during_top_once(cli: CLI) -> None:
    """``top --once`` (the agent shipped over SSH, its first sample) with ``python -m
    console``, interrupted at 60 moments of its first second."""
    argv = launcher_argv("python -m console", "-p", str(cli.profile), "top", "--once")
    delays = sorted((i * 17.0 for i in range(60)), key=lambda d: (d * 37) % 1020)
    outcomes = sweep(argv, cli.env(), REPO, delays, same_stdout=False)
    assert INTERRUPTED in outcomes, outcomes
