"""Which env values are secret is written on each node (``io.gpuconsole.secret-env``), so a
run line read back from a host masks them whatever their source, also without the job's
record; a job container from before the label masks every value but gpuconsole's own."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from console.jobs.labels import K_JOB_ID, K_RUN_ENV, K_SECRET_ENV, secret_env_of
from console.jobs.plan import HostFacts, JobPlan, build_plan, run_line
from console.jobs.spec import load_spec
from console.profiles import HostConfig, JobDefaults, Profile
from remote.docker import RUN_ENV_LABEL, ContainerSpec, spec_from_attrs
from remote.hostengine import spec_from_node

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


def _plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str = "docker") -> JobPlan:
    monkeypatch.setenv("GC_T_A", "spec-secret-value")
    monkeypatch.setenv("GC_T_B", "profile-secret-value")
    p = tmp_path / "job.yaml"
    p.write_text(
        f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: 0\n"
        f"runtime: {runtime}\nenv: {{RUN_TOKEN: '${{GC_T_A}}', PLAIN: x}}\n"
    )
    prof = Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults.model_validate(
            {"image": "img:1", "env": {"P_KEY": "k-${GC_T_B}", "P_PLAIN": "y"}}
        ),
    )
    return build_plan(
        load_spec(p),
        prof,
        ["a"],
        {"a": HostFacts("a", "10.0.0.1", None, "/home/u", python="/usr/bin/py")},
        job_id="demo-000000",
        created_at=0.0,
        image="img:1",
    )


def test_plan_labels_name_every_secret_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for runtime in ("docker", "host"):
        c = _plan(tmp_path, monkeypatch, runtime).nodes[0].container
        assert c.labels[K_SECRET_ENV] == "P_KEY,RUN_TOKEN"
        assert secret_env_of(c.labels, c.env) == frozenset({"P_KEY", "RUN_TOKEN"})


def _inspected(c: ContainerSpec, image_env: list[str] | None = None) -> dict[str, Any]:
    """``docker inspect`` JSON of the planned container ``c`` (the image's env first)."""
    return {
        "Name": "/" + c.name,
        "Config": {
            "Image": c.image,
            "Cmd": c.command,
            "Labels": dict(c.labels),
            "Env": [*(image_env or []), *(f"{k}={v}" for k, v in c.env.items())],
        },
        "HostConfig": {},
    }


def test_a_container_read_back_masks_by_its_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``docker inspect`` JSON of the planned container, read back with no secret names
    given (a fresh state dir): its label alone masks the spec's and the profile's."""
    c = _plan(tmp_path, monkeypatch).nodes[0].container
    back = spec_from_attrs(_inspected(c))
    assert back.secret_env == frozenset()
    shown = run_line(dataclasses.replace(back, secret_env=secret_env_of(back.labels, back.env)))
    assert "'RUN_TOKEN=***'" in shown and "'P_KEY=***'" in shown
    assert "-e PLAIN=x" in shown and "-e P_PLAIN=y" in shown
    assert "secret-value" not in shown


def test_read_back_keeps_what_the_run_set_where_the_image_sets_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image sets ``PLAIN=x`` (as the spec does) and ``PATH``: the run line shows
    ``PLAIN=x`` (the run set it, :data:`K_RUN_ENV` says so) and not the image's ``PATH``; a
    container without the label (an older gpuconsole) leaves both out."""
    c = _plan(tmp_path, monkeypatch).nodes[0].container
    assert K_RUN_ENV == RUN_ENV_LABEL
    assert set(c.labels[K_RUN_ENV].split(",")) == set(c.env) and "PLAIN" in c.env
    image_env = ["PATH=/usr/local/bin:/usr/bin", "PLAIN=x"]
    attrs = _inspected(c, image_env[:1])
    back = spec_from_attrs(attrs, image_env=image_env)
    assert back.env == c.env
    shown = run_line(dataclasses.replace(back, secret_env=secret_env_of(back.labels, back.env)))
    assert "-e PLAIN=x" in shown and "PATH=" not in shown
    labels = {k: v for k, v in c.labels.items() if k != K_RUN_ENV}
    old = spec_from_attrs(
        {**attrs, "Config": {**attrs["Config"], "Labels": labels}}, image_env=image_env
    )
    assert "PLAIN" not in old.env and "PATH" not in old.env and "RUN_TOKEN" in old.env


def test_host_runtime_node_read_back_masks_by_its_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _plan(tmp_path, monkeypatch, "host").nodes[0].container
    # what remote/agent/hostjob.py keeps in spec.json: names, and the values it was told
    # are not secret
    stored = {
        "name": c.name,
        "argv": c.command,
        "env_names": sorted(c.env),
        "env_public": {k: v for k, v in c.env.items() if k not in c.secret_env},
    }
    back = spec_from_node(stored, dict(c.labels))
    shown = run_line(
        dataclasses.replace(back, secret_env=back.secret_env | secret_env_of(back.labels, back.env))
    )
    assert "RUN_TOKEN=***" in shown and "P_KEY=***" in shown and "PLAIN=x" in shown
    assert "secret-value" not in shown


def test_job_container_without_the_label_masks_all_but_gpuconsole_env() -> None:
    env = {
        "RUN_TOKEN": "t",
        "PLAIN": "x",
        "PYTHONUNBUFFERED": "1",
        "GPUCONSOLE_JOB_ID": "j",
        "GPUCONSOLE_NODE_RANK": "0",
        "TORCHELASTIC_ERROR_FILE": "/tmp/e.json",
    }
    assert secret_env_of({K_JOB_ID: "demo-000000"}, env) == frozenset({"RUN_TOKEN", "PLAIN"})
    assert secret_env_of({K_SECRET_ENV: ""}, env) == frozenset()
    assert secret_env_of({K_SECRET_ENV: "A,B"}, env) == frozenset({"A", "B"})
