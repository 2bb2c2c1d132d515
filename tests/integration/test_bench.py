"""``gpuconsole bench`` on the CPU-only test hosts (real sshd, real Docker with the PyTorch CPU
image, and ``runtime: host`` with the Slurm venv's torch): nothing to bench, said with its exit
status; and the bench script launched through the real job path (plan, submit, follow, rm)
says there is no CUDA device, read back from its log."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import yaml

from console.bench.model import EXIT_NOTHING
from console.jobs.store import Store
from console.profiles import load_profile_file
from console.service import Service
from tests.integration.conftest import CLI

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"


def host_profile(cli: CLI) -> Path:
    """The test profile with every host on ``runtime: host`` and the venv's torch."""
    data = yaml.safe_load(cli.profile.read_text())
    for h in data["hosts"].values():
        h["runtime"], h["python"] = "host", VENV_PYTHON
    path = cli.tmp / "host-profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cpu_hosts_have_nothing_to_bench(cli: CLI) -> None:
    res = cli.run("bench")
    assert res.returncode == EXIT_NOTHING, res.stderr
    assert "host a: nothing to bench (no NVIDIA driver)" in res.stdout
    assert "host b: nothing to bench (no NVIDIA driver)" in res.stdout
    res = cli.run("bench", "--json", "--host", "a", "--dcgm")
    assert res.returncode == EXIT_NOTHING, res.stderr
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == EXIT_NOTHING and doc["gpus"] == [] and doc["dcgm"] == []
    assert [(h["host"], h["state"], h["reason"]) for h in doc["hosts"]] == [
        ("a", "no_gpu", "no NVIDIA driver")
    ]
    res = cli.run("bench", "--host", "nope")
    assert res.returncode == 2 and "not a host of profile" in res.stderr


@pytest.mark.skipif(not os.access(VENV_PYTHON, os.X_OK), reason=f"{VENV_PYTHON} missing")
def test_cpu_hosts_have_nothing_to_bench_on_the_host_runtime(cli: CLI) -> None:
    res = cli.run("bench", "--host", "b", profile=host_profile(cli))
    assert res.returncode == EXIT_NOTHING, res.stderr
    assert "host b: nothing to bench (no NVIDIA driver)" in res.stdout


@pytest.mark.parametrize("runtime", ["docker", "host"])
def test_the_bench_script_runs_as_a_job_and_says_no_cuda(
    cli: CLI, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runtime == "host" and not os.access(VENV_PYTHON, os.X_OK):
        pytest.skip(f"{VENV_PYTHON} missing")
    path = cli.profile if runtime == "docker" else host_profile(cli)
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(cli.state_dir))

    async def go() -> None:
        store = Store(cli.state_dir)
        async with Service(load_profile_file(path), store=store) as svc:
            # no GPU on the test hosts: the launch path with gpus_per_node 0
            gpus, hosts = await svc._bench_job(["a"], 0, ["--mode", "quick"], "quick", False)
            assert gpus == []
            (h,) = hosts
            assert (h.host, h.state, h.cuda, h.runtime) == ("a", "no_gpu", False, runtime)
            assert h.reason == "torch was built without CUDA"
            assert h.torch is not None and h.torch.startswith("2.")
            (job,) = [j for j in store.jobs(include_removed=True) if j.name == "gpubench"]
            assert job.state == "succeeded" and job.removed_at is not None

    asyncio.run(go())
