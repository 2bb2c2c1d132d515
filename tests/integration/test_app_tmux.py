"""The app in a real terminal: tmux runs `gpuconsole` on the test profile; keys are sent with
`send-keys` and the screen is read with `capture-pane`, as a person would see it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CLI, REPO


class Tmux:
    """One detached tmux session (its own server socket) running a shell."""

    def __init__(self, tmp: Path, width: int = 160, height: int = 45) -> None:
        self.sock = str(tmp / f"tmux-{uuid.uuid4().hex[:8]}")
        self.target = "gc:0.0"
        self.width, self.height = width, height

    def tmux(self, *args: str) -> str:
        res = subprocess.run(
            ["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=30
        )
        if res.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {res.stderr}")
        return res.stdout

    def start(self, env: dict[str, str]) -> None:
        envs = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "gc",
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            *envs,
            "bash --norc --noprofile",
        )
        self.tmux("set-option", "-g", "status", "off")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.target, *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.target)

    def fmt(self, f: str) -> str:
        return self.tmux("display-message", "-p", "-t", self.target, f).strip()

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{text!r} not on screen after {timeout} s:\n{screen}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    yield t
    t.kill()


def test_app_in_tmux_logs_help_and_clean_exit(cli: CLI, tmux: Tmux) -> None:
    spec = cli.spec(
        f"tmux-{uuid.uuid4().hex[:4]}",
        args=["--steps", "300", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()

    env = {
        k: v for k, v in cli.env().items() if k.startswith(("GPUCONSOLE_", "PATH", "HOME", "LANG"))
    }
    tmux.start(env | {"TERM": "xterm-256color"})
    cmd = shlex.join([sys.executable, "-m", "console.cli", "-p", str(cli.profile)])
    tmux.type(f"cd {shlex.quote(str(REPO))} && {cmd}")
    tmux.keys("Enter")
    # the fleet view comes first (its footer offers the jobs view, not itself), with both
    # test hosts in the status line
    screen = tmux.wait_for("2 Jobs", timeout=60)
    tmux.wait_for("a ●", timeout=60)
    assert tmux.fmt("#{alternate_on}") == "1"

    tmux.keys("2")
    screen = tmux.wait_for(job_id, timeout=60)
    screen = tmux.wait_for("running", timeout=90)  # pending until its first line

    tmux.keys("Enter")
    screen = tmux.wait_for("step ", timeout=90)
    assert "node 0" in screen
    assert "following" in screen

    tmux.keys("?")
    screen = tmux.wait_for("Keys (? or escape closes)", timeout=20)
    for binding_id in ("logs.search", "logs.follow", "logs.filter", "logs.zoom"):
        assert binding_id in screen, screen
    tmux.keys("Escape")
    time.sleep(0.5)

    # x: the app suspends, a shell runs in the job's container through an SSH PTY
    tmux.keys("x")
    tmux.wait_for("/workspace#", timeout=30)
    assert tmux.fmt("#{alternate_on}") == "0"
    tmux.type("echo exec-$((6*7)) $GPUCONSOLE_JOB_ID; tty")
    tmux.keys("Enter")
    tmux.wait_for(f"exec-42 {job_id}", timeout=15)
    tmux.wait_for("/dev/pts/", timeout=15)  # a real terminal in the container
    tmux.type("exit")
    tmux.keys("Enter")
    screen = tmux.wait_for(f"shell in {job_id} exited 0", timeout=30)
    assert tmux.fmt("#{alternate_on}") == "1"

    tmux.keys("q")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and tmux.fmt("#{alternate_on}") != "0":
        time.sleep(0.2)
    assert tmux.fmt("#{alternate_on}") == "0", tmux.screen()
    # the shell is back, in a sane mode: echo and canonical input restored
    tmux.type("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo | sort | tr '\\n' ,; echo END")
    tmux.keys("Enter")
    screen = tmux.wait_for("echo,icanon,END", timeout=10)
    assert "\x1b" not in screen and "^[[" not in screen
    assert tmux.fmt("#{cursor_flag}") == "1"
    cli.run("stop", job_id, "--grace", "1")


def _start_app(cli: CLI, tmux: Tmux) -> None:
    """The outer shell in tmux, then the app in it (the fleet view with both hosts)."""
    env = {
        k: v for k, v in cli.env().items() if k.startswith(("GPUCONSOLE_", "PATH", "HOME", "LANG"))
    }
    tmux.start(env | {"TERM": "xterm-256color"})
    cmd = shlex.join([sys.executable, "-m", "console.cli", "-p", str(cli.profile)])
    tmux.type(f"cd {shlex.quote(str(REPO))} && {cmd}")
    tmux.keys("Enter")
    tmux.wait_for("hosts:", timeout=60)
    tmux.wait_for("a ●", timeout=60)
    assert tmux.fmt("#{alternate_on}") == "1"


def _open_logs(tmux: Tmux, job_id: str) -> str:
    """The job's log panes through the command palette (``Logs <id>``): the test hosts may
    run other jobs, newer ones on top of the jobs view."""
    tmux.keys("2")
    tmux.wait_for(job_id, timeout=60)
    tmux.keys("C-p")
    tmux.wait_for("Search for commands", timeout=10)
    tmux.type(f"Logs {job_id}")
    time.sleep(1)
    tmux.keys("Enter")
    return tmux.wait_for(f" {job_id} ", timeout=30)


def _quit_to_outer_shell(tmux: Tmux) -> str:
    """``q``, then the outer shell's screen once the app left the alternate screen."""
    tmux.keys("q")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and tmux.fmt("#{alternate_on}") != "0":
        time.sleep(0.2)
    assert tmux.fmt("#{alternate_on}") == "0", tmux.screen()
    tmux.type("echo outer-$((6*7))")
    tmux.keys("Enter")
    return tmux.wait_for("outer-42", timeout=10)


def _select_row(tmux: Tmux, job_id: str) -> None:
    """Move the jobs view's cursor onto ``job_id``'s row (other jobs may be listed above)."""
    tmux.tmux("send-keys", "-t", tmux.target, "-N", "200", "Up")  # to the first row
    time.sleep(1)
    # one screen with both the table's header and the row (a screen taken while the 200 keys
    # are still being handled may be mid-redraw)
    deadline = time.monotonic() + 30
    screen = tmux.screen()
    while not (" KIND " in screen and f" {job_id} " in screen) and time.monotonic() < deadline:
        time.sleep(0.3)
        screen = tmux.screen()
    lines = screen.splitlines()
    header = next((i for i, ln in enumerate(lines) if " KIND " in ln), None)
    assert header is not None and f" {job_id} " in screen, screen
    row = next(i for i, ln in enumerate(lines) if f" {job_id} " in ln)
    for _ in range(row - header - 1):
        tmux.keys("Down")
    time.sleep(0.5)


def _shell_round(tmux: Tmux, job_id: str, leak: Path, ticks: int) -> str:
    """``x``, a loop printing a line a second, ``exit``; the app's screen after it."""
    tmux.keys("x")
    tmux.wait_for("/workspace#", timeout=30)
    assert tmux.fmt("#{alternate_on}") == "0"
    tmux.type(
        f"for i in $(seq 1 {ticks}); do echo tick-$i-of-{ticks}; sleep 1; done; "
        f"touch {leak} 2>/dev/null; echo loop-done"
    )
    tmux.keys("Enter")
    screen = tmux.wait_for(f"tick-{ticks}-of-{ticks}", timeout=ticks + 30)
    assert all(f"tick-{i}-of-{ticks}" in screen for i in range(1, ticks + 1)), screen
    tmux.wait_for("loop-done", timeout=10)
    tmux.type("exit")
    tmux.keys("Enter")
    screen = tmux.wait_for(f"shell in {job_id} exited 0", timeout=30)
    assert tmux.fmt("#{alternate_on}") == "1"
    assert "tick-" not in screen  # drawn anew, not over the shell's screen
    return screen


def test_x_on_a_running_job_hands_the_terminal_over_and_back(cli: CLI, tmux: Tmux) -> None:
    """A shell in the container, from the log panes (lines keep arriving) and from the jobs
    view (its 2 Hz refresh): a loop printing a line a second keeps printing (the app draws
    nothing while suspended, so its loop, which carries the shell's I/O, never blocks),
    ``exit`` returns to a fully drawn app that answers keys, and nothing typed for the
    container ever reaches the outer shell."""
    spec = cli.spec(
        f"tmux-x-{uuid.uuid4().hex[:4]}",
        args=["--steps", "900", "--step-sleep", "0.1", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    # were the container's command run by the outer shell, this file would appear here
    leak = cli.tmp / "ran-in-the-outer-shell"

    _start_app(cli, tmux)
    _open_logs(tmux, job_id)
    tmux.wait_for("step ", timeout=90)
    screen = _shell_round(tmux, job_id, leak, ticks=8)
    # drawn in full again: the panes' header, the status line and the footer
    assert f" {job_id} " in screen and "a ●" in screen and "x Shell" in screen, screen
    # and it answers keys: the help, then the jobs view
    tmux.keys("?")
    tmux.wait_for("Keys (? or escape closes)", timeout=20)
    tmux.keys("Escape")
    tmux.wait_for("x Shell", timeout=10)
    time.sleep(0.5)
    tmux.keys("2")
    tmux.wait_for(" KIND ", timeout=20)
    _select_row(tmux, job_id)
    screen = _shell_round(tmux, job_id, leak, ticks=6)
    assert " KIND " in screen and job_id in screen, screen
    tmux.keys("1")
    tmux.wait_for("sort host", timeout=20)
    screen = _quit_to_outer_shell(tmux)
    assert "command not found" not in screen
    assert "tick-" not in screen.split("outer-42")[-1]
    assert not leak.exists()
    cli.run("stop", job_id, "--grace", "1")


def test_x_on_a_finished_job_says_so_and_keeps_the_app(cli: CLI, tmux: Tmux) -> None:
    """``x`` on a job that ended: no suspend (the app stays on its alternate screen), a toast
    says it is not running and what to do instead, and the app keeps answering keys."""
    tmux.width, tmux.height = 100, 30
    spec = cli.spec(f"tmux-done-{uuid.uuid4().hex[:4]}")
    res = cli.run("submit", str(spec), "--follow")
    assert res.returncode == 0, res.stderr
    (job,) = [j for j in json.loads(cli.run("ps", "--json").stdout) if j["name"] == spec.stem]
    assert job["state"] == "succeeded", job
    job_id = job["id"]
    _start_app(cli, tmux)
    _open_logs(tmux, job_id)
    tmux.wait_for("exited 0", timeout=30)
    tmux.keys("x")
    screen = tmux.wait_for("is not running", timeout=20)
    assert tmux.fmt("#{alternate_on}") == "1"
    assert job_id in screen
    screen = tmux.wait_for("gpuconsole logs", timeout=5)
    tmux.keys("1")
    tmux.wait_for("GPU", timeout=20)
    tmux.keys("2")
    tmux.wait_for("succeeded", timeout=20)
    _quit_to_outer_shell(tmux)
