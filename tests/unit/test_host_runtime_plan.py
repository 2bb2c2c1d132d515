"""``runtime: host`` in the plan: which runtime a job gets, and what each node runs (the python
found on the host, torchrun as a module, per-node files in the node's folder, no container
settings), plus the id routing of :class:`remote.runtimes.RuntimeEngine`."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import ConfigError
from console.jobs.plan import (
    HOST_ERROR_FILE,
    HostFacts,
    build_plan,
    job_python,
    job_runtime,
    render_plan,
)
from console.jobs.spec import load_spec
from console.profiles import HostConfig, JobDefaults, Profile
from remote.agent.agent import HOST_NODE_ENV
from remote.gang import HOST_MARKER_NAME, MARKER_ENV
from remote.hostengine import node_dir
from remote.runtimes import is_docker_id

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


def profile(a: str = "docker", b: str = "docker") -> Profile:
    return Profile(
        name="t",
        hosts={
            "a": HostConfig(hostname="10.0.0.1", runtime=a, python="~/venv/bin/python"),
            "b": HostConfig(hostname="10.0.0.2", runtime=b),
        },
        defaults=JobDefaults.model_validate({"image": "img:1"}),
    )


def spec(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(f"name: hr\nscript: train_ddp.py\nworkdir: {EXAMPLES}\nenv: {{TOKEN: x}}\n{extra}")
    return p


def test_runtime_comes_from_spec_then_python_then_hosts(tmp_path: Path) -> None:
    assert job_runtime(load_spec(spec(tmp_path)), profile(), ["a", "b"]) == "docker"
    assert job_runtime(load_spec(spec(tmp_path)), profile("host", "host"), ["a", "b"]) == "host"
    assert job_runtime(load_spec(spec(tmp_path, "python: /x/python\n")), profile(), ["a"]) == "host"
    assert (
        job_runtime(load_spec(spec(tmp_path, "runtime: docker\n")), profile("host", "host"), ["a"])
        == "docker"
    )
    with pytest.raises(ConfigError) as e:
        job_runtime(load_spec(spec(tmp_path)), profile("host", "docker"), ["a", "b"])
    assert "a: host, b: docker" in str(e.value) and "runtime" in (e.value.hint or "")
    # the python: the spec's, else the host's in the profile, else python3
    assert job_python(load_spec(spec(tmp_path)), profile(), "a") == "~/venv/bin/python"
    assert job_python(load_spec(spec(tmp_path)), profile(), "b") == "python3"
    assert job_python(load_spec(spec(tmp_path, "python: py3.11\n")), profile(), "a") == "py3.11"


def test_a_notebook_never_takes_the_host_runtime(tmp_path: Path) -> None:
    p = tmp_path / "nb.yaml"
    p.write_text("kind: notebook\nname: nb\n")
    with pytest.raises(ConfigError) as e:
        job_runtime(load_spec(p), profile("host"), ["a"])
    assert "host a runs jobs without Docker" in str(e.value)
    assert job_runtime(load_spec(p), profile("docker", "host"), ["a"]) == "docker"


def test_docker_only_fields_are_refused_with_their_lines(tmp_path: Path) -> None:
    p = spec(tmp_path, "runtime: host\nimage: img:2\nmounts: ['/d:/d']\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    text = "\n".join(str(x) for x in e.value.problems)  # type: ignore[attr-defined]
    assert f"{p}:6: image: `image` needs Docker" in text
    assert f"{p}:7: mounts: `mounts` needs Docker" in text


def test_host_nodes_run_torchrun_as_a_module_in_the_workdir(tmp_path: Path) -> None:
    loaded = load_spec(spec(tmp_path, "runtime: host\ngpus_per_node: 2\nnodes: 2\n"))
    facts = {
        h: HostFacts(
            h,
            ip,
            2,
            "/home/u",
            "/home/u/.cache/gpuconsole/workdirs/abc",
            40000,
            python=f"/opt/{h}/bin/python",
        )
        for h, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2"))
    }
    plan = build_plan(
        loaded, profile(), ["a", "b"], facts, job_id="hr-1a2b3c", created_at=1.0, image=""
    )
    assert plan.runtime == "host"
    for n in plan.nodes:
        c = n.container
        folder = node_dir("/home/u", "hr-1a2b3c", c.name)
        assert c.runtime == "host" and c.image == f"/opt/{n.host}/bin/python"
        assert c.command[:3] == [c.image, "-m", "torch.distributed.run"]
        assert c.working_dir == "/home/u/.cache/gpuconsole/workdirs/abc" and not c.binds
        assert c.gpu_device_ids == ("0", "1")
        assert c.env[HOST_NODE_ENV] == c.name == f"gpuconsole-hr-1a2b3c-n{n.node_rank}"
        assert c.env["TORCHELASTIC_ERROR_FILE"] == f"{folder}/{HOST_ERROR_FILE}"
        assert c.env[MARKER_ENV] == f"{folder}/{HOST_MARKER_NAME}"
        assert c.command[c.command.index("--log-dir") + 1] == f"{folder}/torchelastic"
        assert not is_docker_id(c.name)
    text = render_plan(plan)
    assert "docker run" not in text
    assert "cd /home/u/.cache/gpuconsole/workdirs/abc && env CUDA_VISIBLE_DEVICES=0,1" in text
    assert "TOKEN=x" in text


def test_docker_ids_and_node_names_route_apart() -> None:
    assert is_docker_id("a" * 64) and is_docker_id("0123456789abcdef" * 4)
    assert not is_docker_id("gpuconsole-hr-1a2b3c-n0")
    assert not is_docker_id("A" * 64) and not is_docker_id("a" * 63)


def test_docker_only_fields_are_refused_when_the_profile_gives_the_host_runtime(
    tmp_path: Path,
) -> None:
    """The spec names no runtime; its hosts' profile says `runtime: host`: the same refusal
    as a spec saying `runtime: host` (they were dropped without a word)."""
    p = spec(tmp_path, "image: img:2\nshm_size: 1g\n")
    with pytest.raises(ConfigError) as e:
        job_runtime(load_spec(p), profile("host", "host"), ["a", "b"])
    said = [(x.line, x.field) for x in e.value.problems]  # type: ignore[attr-defined]
    assert said == [(5, "image"), (6, "shm_size")]
    assert "the profile says `runtime: host`" in str(e.value)
    assert job_runtime(load_spec(p), profile(), ["a", "b"]) == "docker"
