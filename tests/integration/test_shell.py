"""`gpuconsole shell`: in a running job's container (as exec), and in a dev container on host
``a`` that is removed afterwards: piped (arguments byte-identical, exit code passed through,
Ctrl-C), and interactive in a real terminal (tmux: PTY, window size, exit code)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import CLI, IMAGE, REPO, wait_for
from tests.integration.test_app_tmux import Tmux

KIND = "io.gpuconsole.kind=shell"


def shell_containers(engine: docker.DockerClient, since: float) -> list[Any]:
    """The dev containers on host ``a`` created since ``since`` (Unix s; other runs share
    the engine)."""
    found = engine.containers.list(all=True, filters={"label": [KIND, "io.gpuconsole.host=a"]})
    return [c for c in found if float(c.labels.get("io.gpuconsole.created-at", "0")) >= since]


@pytest.fixture
def since(engine: docker.DockerClient) -> Iterator[float]:
    """The test's start; the dev containers it left (a failure) are removed afterwards."""
    t = time.time() - 1.0
    yield t
    for c in shell_containers(engine, t):
        c.remove(force=True)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(tmp_path, width=120, height=40)
    yield t
    t.kill()


AWKWARD = [
    "a b",
    "'single'",
    '"double"',
    "$HOME",
    "`id`",
    "a;b",
    "x\ny",
    "tab\there",
    "ünï©ødé ✓",
    "",
    "*",
    "\\",
    "--",
    "-c",
]


def test_dev_shell_piped(cli: CLI, engine: docker.DockerClient, since: float) -> None:
    code = "import sys; sys.stdout.buffer.write(repr(sys.argv[1:]).encode())"
    res = cli.run("shell", "--host", "a", "--", "python", "-c", code, *AWKWARD)
    assert res.returncode == 0, res.stderr
    assert res.stdout == repr(AWKWARD)  # every word as given: no shell re-split or expanded it
    assert shell_containers(engine, since) == []

    res = cli.run("shell", "--host", "a", "--", "sh", "-c", "exit 7")
    assert res.returncode == 7, res.stderr
    # stdin is piped through; the container has the job containers' security options
    res = subprocess_input(
        cli,
        "hello from stdin\n",
        "shell",
        "--host",
        "a",
        "--workdir",
        "/tmp",
        "--",
        "sh",
        "-c",
        "cat; pwd; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status",
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[:2] == ["hello from stdin", "/tmp"]
    assert "NoNewPrivs:\t1" in lines and "CapEff:\t0000000000000000" in lines
    assert shell_containers(engine, since) == []


def subprocess_input(cli: CLI, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cli.run`` with ``stdin`` piped in."""
    return subprocess.run(
        cli.argv(*args),
        env=cli.env(),
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_dev_shell_refusals(cli: CLI, engine: docker.DockerClient, since: float) -> None:
    res = cli.run("shell", "--host", "nope", "--", "true")
    assert res.returncode == 2 and "unknown host 'nope'" in res.stderr
    res = cli.run("shell", "--host", "a", "--gpus", "x", "--", "true")
    assert res.returncode == 2 and "--gpus 'x'" in res.stderr
    res = cli.run("shell", "--host", "a", "--gpus", "1", "--", "true")  # a has no GPUs
    assert res.returncode == 2 and "--gpus: host a has no NVIDIA driver" in res.stderr
    assert "leave out --gpus" in res.stderr
    res = cli.run("shell", "--", "true")  # `true` taken as a JOB that does not exist
    assert res.returncode != 0
    res = cli.run("shell", "somejob", "--image", IMAGE)
    assert res.returncode == 2 and "need --host" in res.stderr
    assert shell_containers(engine, since) == []


def test_dev_shell_interrupted_is_removed(
    cli: CLI, engine: docker.DockerClient, since: float
) -> None:
    proc = cli.popen("shell", "--host", "a", "--", "sleep", "120")
    try:
        running = wait_for(
            lambda: [c for c in shell_containers(engine, since) if c.status == "running"],
            timeout=60,
        )
        assert running[0].name.startswith("gpuconsole-shell-a-")
        assert running[0].attrs["HostConfig"]["Init"] is True
        time.sleep(1.0)  # the exec is attached
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert shell_containers(engine, since) == []


def test_dev_shell_interactive_tmux(
    cli: CLI, engine: docker.DockerClient, since: float, tmux: Tmux
) -> None:
    tmux.start(cli.env() | {"TERM": "xterm-256color", "PS1": "local$ "})
    cmd = shlex.join(cli.argv("shell", "--host", "a"))
    tmux.type(f'cd {shlex.quote(str(REPO))} && {cmd}; echo "shell-rc=$?"')
    tmux.keys("Enter")
    c = wait_for(lambda: shell_containers(engine, since), timeout=60)[0]
    time.sleep(1.5)  # the shell's prompt
    # the markers are split on the typed line, so only the output matches; pid1= comes last
    tmux.type(r'''hostname; stty size; echo "pid""1=$(tr '\0' ' ' </proc/1/cmdline)"''')
    tmux.keys("Enter")
    screen = tmux.wait_for("pid1=", timeout=30)
    c.reload()
    lines = screen.splitlines()
    # `hostname` as the container sees it (host network: the host's name, as Docker says)
    assert c.attrs["Config"]["Hostname"] in lines
    assert any(line.startswith("pid1=/sbin/docker-init -- sleep infinity") for line in lines), (
        screen
    )
    assert "40 120" in lines  # the PTY has the terminal's size
    tmux.tmux("resize-window", "-t", "gc", "-x", "100", "-y", "30")
    time.sleep(0.5)
    tmux.type(r'''echo "size""=$(stty size)"''')
    tmux.keys("Enter")
    tmux.wait_for("size=30 100", timeout=30)  # the size change reached the container's PTY
    tmux.type("exit 3")
    tmux.keys("Enter")
    screen = tmux.wait_for("shell-rc=3", timeout=60)
    assert "shell-rc=3" in screen.splitlines()
    assert shell_containers(engine, since) == []


def test_shell_job_is_exec(cli: CLI) -> None:
    spec = cli.spec(
        f"shell-{uuid.uuid4().hex[:4]}",
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    try:
        res = cli.run(
            "shell",
            job_id,
            "--",
            "sh",
            "-c",
            'echo "in $GPUCONSOLE_JOB_ID node $GPUCONSOLE_NODE_RANK"; exit 4',
        )
        assert res.returncode == 4, res.stderr
        assert res.stdout.strip() == f"in {job_id} node 0"
        res = cli.run(
            "shell",
            job_id,
            "--node",
            "0",
            "--",
            "python3",
            "-c",
            "import sys; print(sys.argv[1:])",
            "a b",
            "$HOME",
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "['a b', '$HOME']"
        res = cli.run("shell", job_id, "--node", "4", "--", "true")
        assert res.returncode == 2 and f"job {job_id} has no node 4" in res.stderr
        # a job and --host: no dev container runs the job's id as its command
        res = cli.run("shell", job_id, "--host", "a")
        assert res.returncode == 2, (res.stdout, res.stderr)
        assert f"{job_id!r} is a job: give a JOB (its container) or --host HOST" in res.stderr
    finally:
        cli.run("stop", job_id, "--grace", "1")


def test_dev_containers_left_behind_are_swept(
    cli: CLI, engine: docker.DockerClient, since: float
) -> None:
    """A dev container whose shell ended without removing it (exited, or running with no
    ``docker exec`` session past the idle limit) is removed by the next ``shell --host`` on
    that host; one with a shell in it is kept."""
    import asyncio

    from console.jobs.leftovers import DEV_CONTAINER_IDLE_S, sweep_dev_containers
    from console.jobs.store import Store
    from console.profiles import load_profile_file
    from console.service import Service

    tag = uuid.uuid4().hex[:6]

    def dev(name: str) -> Any:
        return engine.containers.run(
            IMAGE,
            ["sleep", "infinity"],
            name=f"gpuconsole-shell-a-{tag}{name}",
            detach=True,
            init=True,
            labels={
                "io.gpuconsole.kind": "shell",
                "io.gpuconsole.host": "a",
                "io.gpuconsole.created-at": f"{time.time():.3f}",
            },
        )

    exited, idle, busy = dev("x"), dev("i"), dev("b")
    exited.kill()
    wait_for(lambda: (exited.reload(), exited.status)[1] == "exited")
    busy.exec_run(["sleep", "300"], detach=True)  # a shell session in it
    wait_for(lambda: bool(engine.api.inspect_container(busy.id)["ExecIDs"]))

    # the next shell on host a sweeps the exited one; the idle one is younger than the limit
    res = cli.run("shell", "--host", "a", "--", "true")
    assert res.returncode == 0, res.stderr
    names = {c.name for c in shell_containers(engine, since)}
    assert exited.name not in names and {idle.name, busy.name} <= names

    async def sweep_later() -> list[str]:
        async with Service(load_profile_file(cli.profile), store=Store(cli.state_dir)) as svc:
            session = svc.session()
            await session.connected("a")
            return await sweep_dev_containers(
                session, "a", now=time.time() + DEV_CONTAINER_IDLE_S + 1
            )

    removed = asyncio.run(sweep_later())
    assert idle.name in removed and busy.name not in removed
    names = {c.name for c in shell_containers(engine, since)}
    assert idle.name not in names and busy.name in names
