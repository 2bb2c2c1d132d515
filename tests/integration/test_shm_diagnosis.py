"""A job with a deliberately small ``shm_size`` whose DataLoader workers exhaust /dev/shm is
diagnosed as shared memory exhausted (real sshd, dockerd, torchrun and PyTorch; the handed
trun-10 shows the SIGBUS form of the same cause, PyTorch 2.13 reports ENOSPC)."""

from __future__ import annotations

import json

from tests.integration.conftest import CLI


def test_small_shm_is_diagnosed(cli: CLI) -> None:
    spec = cli.spec("shm", script="shm_loader.py", args=[], nproc_per_node=1, shm_size="8m")
    res = cli.run("submit", str(spec), "--follow")
    assert res.returncode == 1, res.stderr
    jobs = json.loads(cli.run("ps", "--json").stdout)
    (job,) = [j for j in jobs if j["name"] == "shm" and j["state"] == "failed"]
    failure = job["failure"]
    assert failure["kind"] == "shm_exhausted", failure
    assert "shared memory (/dev/shm) ran out" in failure["reason"]
    assert "--shm-size" in failure["fix"]
    assert any(
        "unable to allocate shared memory(shm)" in e or "Bus error" in e
        for e in failure["evidence"]
    )
    described = cli.run("describe", job["id"])
    # PyTorch 2.13 reports the full /dev/shm either as ENOSPC when a worker allocates its
    # shared-memory file or as SIGBUS when a page of it is touched; runs show either or both
    first = next(ln for ln in described.stdout.splitlines() if ln.startswith("first failure"))
    assert first.startswith(
        "first failure: node 0 on a rank 0, exit code 1: A DataLoader worker of rank 0 "
    ), first
    assert "shared memory (/dev/shm) ran out" in first
