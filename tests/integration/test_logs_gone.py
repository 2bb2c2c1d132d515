"""A job whose containers vanished (removed outside gpuconsole) before anything was archived:
``logs`` says so on stderr and exits 1, node by node, instead of printing nothing and 0."""

from __future__ import annotations

import docker

from tests.integration.conftest import CLI, job_containers, wait_for


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

    def exited() -> bool:
        found = job_containers(engine, job_id=job_id)
        return len(found) == 2 and all(c.status == "exited" for c in found)

    wait_for(exited, timeout=180)
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
