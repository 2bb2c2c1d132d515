"""Env values: ``${VAR}`` from the local environment (secret), ``$$`` a literal ``$``, so
``$${VAR}`` passes the text ``${VAR}`` (as Docker Compose and Kubernetes read them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import ConfigError
from console.jobs.plan import HostFacts, build_plan, render_plan
from console.jobs.spec import env_references, interpolate, load_spec, resolve_env
from console.profiles import HostConfig, JobDefaults, Profile

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GC_T_X", "val")
    monkeypatch.setenv("GC_T_Y", "why")
    monkeypatch.delenv("GC_T_UNSET", raising=False)


@pytest.mark.parametrize(
    ("raw", "resolved", "secret"),
    [
        ("${GC_T_X}", "val", True),
        ("$${GC_T_X}", "${GC_T_X}", False),  # the escape: the literal text
        ("$$", "$", False),
        ("a$$b", "a$b", False),
        ("$$$${GC_T_X}", "$${GC_T_X}", False),  # two escapes, then plain text
        ("$$${GC_T_X}", "$val", True),  # an escape, then a reference
        ("pre-${GC_T_X}-$${GC_T_Y}-${GC_T_Y}", "pre-val-${GC_T_Y}-why", True),
        ("$HOME $ ${ ${1X} $", "$HOME $ ${ ${1X} $", False),  # other `$` stay as written
        ("$${GC_T_UNSET}", "${GC_T_UNSET}", False),  # escaped: an unset name is no error
        ("plain", "plain", False),
    ],
)
def test_resolve_env_escapes_and_references(raw: str, resolved: str, secret: bool) -> None:
    env, secrets = resolve_env({"K": raw}, "job.yaml", {("env", "K"): 3})
    assert env == {"K": resolved}
    assert secrets == (frozenset({"K"}) if secret else frozenset())


def test_references_and_interpolate_skip_escaped_names() -> None:
    assert env_references("$${A}${B}$$${C}") == ["B", "C"]
    assert interpolate("$${A}${B}$$${C}", {"A": "1", "B": "2", "C": "3"}) == "${A}2$3"


def test_unset_reference_names_the_escape_in_its_fix() -> None:
    with pytest.raises(ConfigError) as e:
        resolve_env({"K": "$${GC_T_X}${GC_T_UNSET}"}, "job.yaml", {("env", "K"): 3})
    assert str(e.value) == (
        "job.yaml:3: env.K: references ${GC_T_UNSET}, which is not set in your environment"
    )
    assert e.value.hint == (
        "export GC_T_UNSET=... before submitting, remove the reference, or "
        "write $${GC_T_UNSET} for the literal text ${GC_T_UNSET}"
    )


def test_literal_value_reaches_the_container_and_is_shown(tmp_path: Path) -> None:
    """A spec's ``$${X}`` and a profile's ``$$`` arrive as written once, are not secret
    (shown in the dry run) and enter the spec hash as text."""
    p = tmp_path / "job.yaml"
    p.write_text(
        f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: 0\n"
        "env: {TEMPLATE: 'run-$${GC_T_X}', TOKEN: '${GC_T_X}'}\n"
    )
    loaded = load_spec(p)
    assert loaded.env == {"TEMPLATE": "run-${GC_T_X}", "TOKEN": "val"}
    assert loaded.secret_env == frozenset({"TOKEN"})
    prof = Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults.model_validate(
            {"image": "img:1", "env": {"PRICE": "5$$", "P_TOKEN": "${GC_T_Y}"}}
        ),
    )
    plan = build_plan(
        loaded,
        prof,
        ["a"],
        {"a": HostFacts("a", "10.0.0.1", None, "/home/u")},
        job_id="demo-000000",
        created_at=0.0,
        image="img:1",
    )
    c = plan.nodes[0].container
    assert c.env["TEMPLATE"] == "run-${GC_T_X}" and c.env["PRICE"] == "5$"
    assert c.secret_env == frozenset({"TOKEN", "P_TOKEN"})
    text = render_plan(plan)
    assert "-e 'TEMPLATE=run-${GC_T_X}'" in text and "-e 'PRICE=5$'" in text
    assert "TOKEN=***" in text and "val" not in text.replace("GC_T_X", "") and "why" not in text
