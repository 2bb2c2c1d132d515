"""The app in a real terminal: tmux runs `gpuconsole` on the test profile; keys are sent with
`send-keys` and the screen is read with `capture-pane`, as a person would see it."""

from __future__ import annotations

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
        res = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {res.stderr}")
        return res.stdout

    def start(self, env: dict[str, str]) -> None:
        envs = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        self.tmux("new-session", "-d", "-s", "gc", "-x", str(self.width), "-y",
                  str(self.height), *envs, "bash --norc --noprofile")
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
    spec = cli.spec(f"tmux-{uuid.uuid4().hex[:4]}",
                    args=["--steps", "300", "--step-sleep", "0.2", "--out", "/out",
                          "--workers", "0"])
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()

    env = {k: v for k, v in cli.env().items()
           if k.startswith(("GPUCONSOLE_", "PATH", "HOME", "LANG"))}
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
