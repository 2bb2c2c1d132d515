"""The in-container gang supervisor (remote/agent/gang.py) when another node's end arrives:
a node stopped from outside is said as such, and a node that got the user's stop itself
tears nothing down and says nothing (its torchrun already has the signal).

The supervisor is built without its store (``Gang`` needs torch, absent from the console's
venv): ``_StoreLessGang`` stands in for it, naming only the node."""

from __future__ import annotations

import argparse
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

import pytest

from remote.agent.gang import Supervisor


@dataclass
class _StoreLessGang:
    node: int


def _supervisor(proc: subprocess.Popen[bytes]) -> Supervisor:
    s = Supervisor.__new__(Supervisor)
    s.args = argparse.Namespace(grace=0.2)
    s.command = []
    s.gang = _StoreLessGang(0)  # type: ignore[assignment]
    s.proc = proc
    s.lock = threading.Lock()
    s.cause = None
    s.signalled = None
    s.finished = threading.Event()
    return s


def test_a_node_stopped_from_outside_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        s = _supervisor(proc)
        s.teardown({"node": 1, "exit_code": 1, "kind": "stopped"})
        assert proc.wait(timeout=10) == -signal.SIGTERM
        # nothing sets `finished` here (no torchrun watcher thread): the grace then ends
        assert capsys.readouterr().err.splitlines()[0] == (
            "[gpuconsole-gang] node 1 was stopped from outside (exit code 1): stopping node 0 "
            "(gang teardown)")
        assert s.cause == {"node": 1, "exit_code": 1, "kind": "stopped"}
    finally:
        proc.kill()


def test_a_node_the_user_stopped_too_tears_nothing_down(
        capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        s = _supervisor(proc)
        s.signalled = signal.SIGTERM  # docker stop reached this node as well
        s.teardown({"node": 1, "exit_code": 1, "kind": "stopped"})
        time.sleep(0.3)
        assert proc.poll() is None  # not signalled again, not killed after the grace
        assert capsys.readouterr().err == "" and s.cause is None
    finally:
        proc.kill()
