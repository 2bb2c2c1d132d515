"""``kind: notebook`` specs: what they may say (file:line:field errors) and the container a
notebook's plan describes (JupyterLab on the host's 127.0.0.1, token by environment only,
host workdir read-write, labels)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from console.errors import ConfigError, PlanError
from console.jobs.labels import K_KIND, K_PORT, NodeLabels
from console.jobs.plan import (
    TOKEN_ENV,
    HostFacts,
    JobPlan,
    build_plan,
    expand_home,
    pick_gpus,
    render_plan,
)
from console.jobs.spec import NOTEBOOK_FLAGS, NOTEBOOK_WORKDIR, load_spec, validate_spec
from console.jobs.store import JobRecord
from console.profiles import HostConfig, JobDefaults, Profile
from console.service import JobDescription, NodeDescription


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "nb.yaml"
    p.write_text(text)
    return p


def profile() -> Profile:
    return Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults.model_validate({"image": "img:1", "user": "1000:1000"}),
    )


def plan_of(
    tmp_path: Path,
    text: str,
    gpus: int | None = 2,
    port: int = 41234,
) -> JobPlan:
    loaded = load_spec(write(tmp_path, text))
    assert loaded.host_workdir is not None
    f = HostFacts(
        "a", "10.0.0.1", gpus, "/home/u", expand_home(loaded.host_workdir, "/home/u"), port
    )
    plan = build_plan(
        loaded, profile(), ["a"], {"a": f}, job_id="nb-abc123", created_at=1.0, image="img:1"
    )
    return plan


def test_notebook_spec_needs_no_script_and_defaults_its_host_workdir(tmp_path: Path) -> None:
    loaded = load_spec(write(tmp_path, "kind: notebook\nname: nb\n"))
    assert loaded.spec.script is None
    assert loaded.workdir is None  # nothing is synced from here
    assert loaded.host_workdir == NOTEBOOK_WORKDIR


def test_training_spec_without_script_names_the_field(tmp_path: Path) -> None:
    p = write(tmp_path, "name: t\nimage: x\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.field == "script" and e.value.path == str(p)
    assert "kind: notebook" in (e.value.hint or "")


def test_notebook_refuses_torchrun_fields_multi_node_and_local_workdir(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "kind: notebook\nname: nb\nscript: a.py\nnodes: 2\nworkdir: notebooks\nmax_restarts: 3\n",
    )
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    text = "\n".join(str(x) for x in e.value.problems)  # type: ignore[attr-defined]
    assert f"{p}:3: script: a notebook takes no `script`" in text
    assert f"{p}:4: nodes: a notebook runs on one node" in text
    assert f"{p}:5: workdir: 'notebooks': a notebook's workdir is a folder on the host" in text
    assert f"{p}:6: max_restarts: a notebook takes no `max_restarts`" in text


def test_notebook_plan_runs_jupyterlab_on_loopback_with_token_by_env(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path, "kind: notebook\nname: nb\ngpus_per_node: 1\nworkdir: ~/nb/explore\nenv: {A: b}\n"
    )
    node = plan.nodes[0]
    c = node.container
    assert node.gpu_ids == (0,)
    assert c.command[:2] == ["jupyter", "lab"]
    assert "--ip=127.0.0.1" in c.command and "--port=41234" in c.command
    assert "--ServerApp.port_retries=0" in c.command
    token = c.env[TOKEN_ENV]
    assert len(token) == 48 and all(ch in "0123456789abcdef" for ch in token)
    assert all(token not in w for w in c.command)
    assert TOKEN_ENV in c.secret_env and c.env["A"] == "b"
    assert c.network_mode == "host" and not c.privileged
    [bind] = c.binds
    assert (bind.source, bind.target, bind.read_only) == ("/home/u/nb/explore", "/workspace", False)
    labels = NodeLabels.parse(c.labels)
    assert (labels.kind, labels.port, labels.node_count) == ("notebook", 41234, 1)
    assert c.labels[K_KIND] == "notebook" and c.labels[K_PORT] == "41234"
    text = render_plan(plan)
    assert token not in text and "JUPYTER_TOKEN=***" in text
    assert text.startswith("notebook nb-abc123: JupyterLab on 127.0.0.1:41234 of a")


def test_each_notebook_gets_its_own_token(tmp_path: Path) -> None:
    text = "kind: notebook\nname: nb\ngpus_per_node: 0\n"
    p1 = plan_of(tmp_path, text, gpus=None)
    p2 = plan_of(tmp_path, text, gpus=None)
    t1 = p1.nodes[0].container.env[TOKEN_ENV]
    t2 = p2.nodes[0].container.env[TOKEN_ENV]
    assert t1 != t2


def test_training_labels_say_train_and_old_containers_read_as_train() -> None:
    lab = NodeLabels("j-0a1b2c", "j", 0, 1, 2, "a", "h", 1.0)
    d = lab.to_labels()
    assert d[K_KIND] == "train" and K_PORT not in d
    old = {k: v for k, v in d.items() if k != K_KIND}  # written before kinds existed
    assert NodeLabels.parse(old).kind == "train"
    assert dataclasses.replace(lab, kind="notebook", port=9).to_labels()[K_PORT] == "9"


def test_job_record_kind_comes_from_its_spec() -> None:
    rec = JobRecord("nb-1", "nb", "p", None, {"kind": "notebook"}, "h", 1.0, 1)
    assert rec.kind == "notebook"
    assert dataclasses.replace(rec, spec={}).kind == "train"


def test_notebook_gpu_errors_name_the_flag_typed(tmp_path: Path) -> None:
    """`notebook --gpus 5`: the error and its fix name `--gpus` (the flag typed), not the
    spec field `gpus_per_node` nor submit's `--gpus-per-node`; a file's value keeps its
    file:line: field and a fix in the file's terms."""
    data = {"kind": "notebook", "name": "nb", "nodes": ["a"], "gpus_per_node": 5}
    loaded = validate_spec(
        dict(data), "(flags)", tmp_path, {}, frozenset({"nodes", "gpus_per_node"}), NOTEBOOK_FLAGS
    )
    two = HostFacts("a", "10.0.0.1", 2, "/home/u")
    with pytest.raises(PlanError) as e:
        pick_gpus(loaded, two)
    assert str(e.value) == "--gpus: host a has 2 GPU(s), the job asks for 5 per node"
    assert e.value.hint == "pass `--gpus 2` or fewer"
    with pytest.raises(PlanError) as e:
        pick_gpus(loaded, HostFacts("a", "10.0.0.1", None, "/home/u"))
    assert str(e.value).startswith("--gpus: host a has no NVIDIA driver")
    assert "gpus_per_node" not in (e.value.hint or "") and "`--gpus 0`" in (e.value.hint or "")
    ids = validate_spec(
        {**data, "gpus_per_node": [0, 7]},
        "(flags)",
        tmp_path,
        {},
        frozenset({"gpus_per_node"}),
        NOTEBOOK_FLAGS,
    )
    with pytest.raises(PlanError) as e:
        pick_gpus(ids, two)
    assert str(e.value).startswith("--gpus: host a has GPUs 0..1; GPU index 7")
    assert e.value.hint == "fix --gpus (indices 0..1)"
    p = write(tmp_path, "kind: notebook\nname: nb\ngpus_per_node: 5\n")
    with pytest.raises(PlanError) as e:
        pick_gpus(load_spec(p), two)
    assert str(e.value).startswith(f"{p}:3: gpus_per_node: host a has 2 GPU(s)")
    assert e.value.hint == "set `gpus_per_node: 2` or fewer"
    with pytest.raises(PlanError) as e:  # submit's flag keeps its own name
        pick_gpus(load_spec(p, {"gpus_per_node": 5}), two)
    assert e.value.hint == "pass `--gpus-per-node 2` or fewer"


def test_describe_labels_a_notebooks_command_by_its_kind() -> None:
    """``describe``: JupyterLab's line is the notebook's `command:`; a training job's stays
    `torchrun:` (lines as :meth:`Service.describe` reads them back from the container)."""
    jupyter = "jupyter lab --ip=127.0.0.1 --port=41234 --no-browser"
    torchrun = "torchrun --nnodes=1 --nproc-per-node=1 train.py"

    def text(kind: str, command: str) -> str:
        rec = JobRecord("j-1", "j", "p", None, {"kind": kind}, "h", 1.0, 1, state="running")
        node = NodeDescription(
            0, "a", "gpuconsole-j-1-n0", "c" * 64, "running", None, "docker run ...", command
        )
        return JobDescription(rec, "", (node,)).render()

    nb = text("notebook", jupyter)
    assert f"  command: {jupyter}" in nb.splitlines() and "torchrun:" not in nb
    assert f"  torchrun: {torchrun}" in text("train", torchrun).splitlines()
