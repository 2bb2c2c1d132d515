"""`gpuconsole exec` (headless: piped, exit code passed through) and `describe` on a real job
over SSH."""

from __future__ import annotations

import uuid

from tests.integration.conftest import CLI


def test_exec_and_describe(cli: CLI) -> None:
    spec = cli.spec(
        f"exec-{uuid.uuid4().hex[:4]}",
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
        env={"RUN_TOKEN": "${GC_TEST_TOKEN}"},
    )
    env_token = "s3cret-" + uuid.uuid4().hex[:6]
    import os

    os.environ["GC_TEST_TOKEN"] = env_token
    try:
        res = cli.run("submit", str(spec))
    finally:
        del os.environ["GC_TEST_TOKEN"]
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    try:
        # a command with its own arguments, no shell on our side; its exit code comes back
        res = cli.run(
            "exec",
            job_id,
            "--",
            "sh",
            "-c",
            'echo "in $GPUCONSOLE_JOB_ID node $GPUCONSOLE_NODE_RANK"; exit 3',
        )
        assert res.returncode == 3, res.stderr
        assert res.stdout.strip() == f"in {job_id} node 0"
        # arguments are passed as words: no shell on the host re-splits or expands them
        res = cli.run(
            "exec",
            job_id,
            "--",
            "python3",
            "-c",
            "import sys; print(sys.argv[1:])",
            "a b",
            "$HOME",
            "*",
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "['a b', '$HOME', '*']"
        res = cli.run("exec", job_id, "--node", "4", "--", "true")
        assert res.returncode == 2 and f"job {job_id} has no node 4" in res.stderr

        res = cli.run("describe", job_id)
        assert res.returncode == 0, res.stderr
        out = res.stdout
        assert out.startswith(f"job {job_id}")
        assert f"node 0 on a: running  container gpuconsole-{job_id}-n0" in out
        assert "docker run -d --init --name" in out and "--cap-drop ALL" in out
        assert "--security-opt no-new-privileges" in out
        assert "torchrun: torchrun --nnodes 1 --nproc-per-node 2" in out
        assert "RUN_TOKEN=***" in out  # a ${VAR} secret is masked...
        assert env_token not in out and env_token not in res.stderr  # ...and never printed
        assert "PATH=" not in out  # the image's own environment is not part of the run line
        # ...but what the run set is, also where the image sets the same value (its ENV has
        # PYTHONUNBUFFERED=1, scripts/image/Dockerfile)
        assert "-e PYTHONUNBUFFERED=1" in out
    finally:
        cli.run("stop", job_id, "--grace", "1")
    res = cli.run("exec", job_id, "--", "true")
    assert res.returncode == 1
    assert "is not running" in res.stderr
    # what to do instead: its output, and its files out of the exited container
    assert f"`gpuconsole logs {job_id}`" in res.stderr
    assert f"`gpuconsole cp {job_id}:PATH .`" in res.stderr
