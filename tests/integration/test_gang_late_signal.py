"""The gang supervisor (remote/agent/gang.py) under a SIGTERM that comes after it decided.

A console's gang teardown (``stop`` of the surviving nodes) and a node's own teardown cross:
the node's supervisor has already recorded ``teardown`` (exit 75) when the console's SIGTERM
arrives. Python's shutdown puts the default handlers back, so without care that late signal
kills the process and the host records 143, a ``stopped`` node, against the marker's 75.

Runs the real supervisor with the real ``torch.distributed.TCPStore`` (the Slurm test venv's
CPU torch); the command it supervises is a short Python sleep, not torchrun.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from remote import transport

TORCH_PYTHON = Path("/var/tmp/gpuconsole-slurm/venv/bin/python")  # scripts/lib/ensure-slurm
GANG = Path(transport.__file__).parent / "agent" / "gang.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("trial", range(3))
def test_signal_after_the_outcome_is_recorded_keeps_the_recorded_status(
    tmp_path: Path, trial: int
) -> None:
    """SIGTERM every millisecond from the moment the marker is written until the process is
    gone: its exit status is the marker's, every time."""
    if not TORCH_PYTHON.exists():
        pytest.fail(f"{TORCH_PYTHON} missing: run scripts/lib/ensure-slurm")
    marker = tmp_path / "gang.json"
    env = dict(os.environ, GPUCONSOLE_GANG_MARKER=str(marker))
    proc = subprocess.Popen(
        [
            str(TORCH_PYTHON),
            str(GANG),
            "--node-rank",
            "0",
            "--nnodes",
            "1",
            "--store",
            f"127.0.0.1:{free_port()}",
            "--run-id",
            f"late{trial}",
            "--host-store",
            "--linger",
            "0",
            "--",
            str(TORCH_PYTHON),
            "-c",
            "import time; time.sleep(0.2)",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        assert time.monotonic() < deadline, "no marker within 60 s"
        time.sleep(0.001)
    signals = 0
    while proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            signals += 1
        except ProcessLookupError:
            break
        time.sleep(0.001)
    code = proc.wait(timeout=30)
    recorded = json.loads(marker.read_text())
    assert recorded["outcome"] == "succeeded", recorded
    assert (code, recorded["exit_status"]) == (0, 0), (code, signals, recorded)
