"""A job whose containers vanished (removed outside gpuconsole) before anything was archived:
``logs`` says so on stderr and exits 1, node by node, instead of printing nothing and 0."""

from __future__ import annotations

import docker

from console.jobs.labels import K_NODE_RANK
from tests.integration.conftest import CLI, job_containers, wait_for


def wait_exited(engine: docker.DockerClient, job_id: str) -> None:
    """Until both of the two-node job's containers have exited."""

    def exited() -> bool:
        found = job_containers(engine, job_id=job_id)
        return len(found) == 2 and all(c.status == "exited" for c in found)

    wait_for(exited, timeout=180)


def test_logs_of_a_job_whose_containers_are_gone_says_why(
    cli: CLI, engine: docker.DockerClient
) -> None:
    spec = cli.spec(
        "gonejob",
        nodes=["a", "b"],
        nproc_per_node=1,
        args=["--steps", "1", "--out", "/out", "--workers", "1"],
    )
    sub = cli.run("submit", str(spec))  # no --follow: nothing read, nothing archived
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    wait_exited(engine, job_id)
    for c in job_containers(engine, job_id=job_id):
        c.remove(force=True)
    assert not (cli.state_dir / "logs" / job_id).exists() or not any(
        (cli.state_dir / "logs" / job_id).iterdir()
    )

    res = cli.run("logs", job_id)
    assert res.returncode == 1
    assert res.stdout == ""
    assert res.stderr.startswith(f"error: job {job_id}: no lines to show: ")
    for node, host in ((0, "a"), (1, "b")):
        assert (
            f"node {node} ({host}): its container is gone (removed outside gpuconsole) "
            "and nothing was archived from it"
        ) in res.stderr
    assert "\n  fix: " in res.stderr
    assert "Traceback" not in res.stderr
    # one node asked alone says the same of it
    one = cli.run("logs", job_id, "--node", "1")
    assert one.returncode == 1 and "node 1 (b): its container is gone" in one.stderr
    assert "node 0" not in one.stderr


def test_follow_of_a_job_with_a_removed_container_gives_its_archived_lines(
    cli: CLI, engine: docker.DockerClient
) -> None:
    """``logs -f`` of a finished job whose node 1 container was removed after its lines were
    archived prints them as ``logs`` does (it printed node 0's only)."""
    spec = cli.spec(
        "gonefollow",
        nodes=["a", "b"],
        nproc_per_node=1,
        args=["--steps", "3", "--out", "/out", "--workers", "0"],
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    wait_exited(engine, job_id)
    before = cli.run("logs", job_id)  # archives every line
    assert before.returncode == 0, before.stderr
    n1 = [ln for ln in before.stdout.splitlines() if ln.startswith("[n1")]
    assert len(n1) >= 4, before.stdout  # rank lines of node 1, steps included
    (gone,) = [c for c in job_containers(engine, job_id=job_id) if c.labels[K_NODE_RANK] == "1"]
    gone.remove(force=True)

    res = cli.run("logs", "-f", job_id, timeout=120)
    assert "Traceback" not in res.stderr
    got = [ln for ln in res.stdout.splitlines() if ln.startswith("[n1")]
    assert got == n1
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("[n0")] == [
        ln for ln in before.stdout.splitlines() if ln.startswith("[n0")
    ]


def test_a_followed_container_removed_ends_its_stream_without_a_false_resume(
    cli: CLI, engine: docker.DockerClient
) -> None:
    """``docker rm -f`` of a followed node's container: its stream ends; the follow neither
    says the stream "ended while the container runs" nor that it "resumed"."""
    spec = cli.spec(
        "rmfollow",
        nodes=["a"],
        nproc_per_node=1,
        args=["--steps", "300", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    proc = cli.popen("logs", "-f", job_id)
    try:
        assert proc.stdout is not None
        for _ in range(400):  # until a training step is on screen
            if "step " in proc.stdout.readline():
                break
        (c,) = job_containers(engine, job_id=job_id)
        c.remove(force=True)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err
    assert "resumed" not in err and "while the container runs" not in err, err
    assert proc.returncode != 0, err
