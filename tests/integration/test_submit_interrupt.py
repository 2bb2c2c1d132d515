"""Ctrl-C during ``submit`` over real SSH and Docker, at many moments of the launch: a submit
interrupted before its launch is complete undoes it (no container left, nothing said to keep
running); one interrupted once the launch is complete says the job keeps running and names it.
Never a job left running after a bare ``interrupted`` (found by a fresh user at about one
moment in forty: the store's bookkeeping after the containers started was outside the launch's
all-or-none)."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid

import docker

from tests.integration.conftest import CLI, REPO, job_containers


def test_ctrl_c_during_submit_undoes_the_launch_or_says_it_keeps_running(
    cli: CLI, engine: docker.DockerClient
) -> None:
    base = f"int{uuid.uuid4().hex[:4]}"
    spec = cli.spec(base, args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out"])
    # how long a whole submit takes here: the moments are spread over it
    t0 = time.monotonic()
    whole = cli.run("submit", str(spec), "--name", f"{base}-w")
    took = time.monotonic() - t0
    assert whole.returncode == 0, whole.stderr
    cli.run("stop", whole.stdout.strip())
    seen = {"undone": 0, "keeps running": 0, "finished": 0}
    for i in range(16):
        name = f"{base}-{i}"
        delay = 0.25 + took * i / 15
        proc = subprocess.Popen(
            cli.argv("submit", str(spec), "--name", name),
            env=cli.env(),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        running = job_containers(engine, job_name=name)
        if proc.returncode == 0:
            seen["finished"] += 1
            job_id = out.strip()
        else:
            assert proc.returncode == 130, (delay, proc.returncode, err)
            assert "interrupted" in err.splitlines(), err
            if running:
                seen["keeps running"] += 1
                assert "was submitted and keeps running (`gpuconsole stop " in err, (delay, err)
                job_id = err.split("job ", 1)[1].split(" ", 1)[0]
            else:
                seen["undone"] += 1
                assert "keeps running" not in err, (delay, err)
                continue
        assert job_id.startswith(name + "-"), (delay, job_id)
        stopped = cli.run("stop", job_id)
        assert stopped.returncode == 0, stopped.stderr
    assert seen["undone"] + seen["keeps running"] > 0, seen  # the check can fail: runs were cut
