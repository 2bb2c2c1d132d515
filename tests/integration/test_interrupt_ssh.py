"""Ctrl-C while ``ps`` connects to and lists real SSH hosts: ``interrupted`` and exit 130, or
the finished listing; never asyncio's "unhandled exception during asyncio.run() shutdown" with
a traceback (a listing cut off mid-answer ends with its host's error, not a cancellation)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import CLI, REPO


def test_ctrl_c_during_an_ssh_listing(cli: CLI) -> None:
    """Through the installed ``gpuconsole`` script (``console.entry``); its first
    milliseconds and those of ``python -m console.cli`` are tests/unit/test_interrupt.py's."""
    script = Path(sys.executable).parent / "gpuconsole"
    argv = [str(script), "-p", str(cli.profile), "ps", "--json", "--hosts"]
    codes = []
    for ms in range(150, 460, 15):
        p = subprocess.Popen(argv, env=cli.env(), cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(ms / 1000)
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=120)
        where = f"SIGINT after {ms} ms: exit {p.returncode}\n{err[-2000:]}"
        for noise in ("Traceback", "ERROR", "Exception ignored", "never awaited", "Aborted"):
            assert noise not in err, where
        # -2: the signal came while the interpreter was exiting, after the output (a shell
        # reports it as 130)
        assert p.returncode in (0, 130, -signal.SIGINT), where
        if p.returncode == 130:
            assert err.strip().splitlines()[-1] == "interrupted", where
        codes.append(p.returncode)
    assert 130 in codes
