"""Spec validation (file:line:field errors), secrets, and the containers a plan describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import ConfigError, PlanError
from console.jobs.plan import HostFacts, build_plan, check_spec_against_gpus, select_hosts
from console.jobs.spec import LoadedSpec, load_spec
from console.profiles import HostConfig, JobDefaults, Profile

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


BASE = f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\n"


def profile(**defaults: object) -> Profile:
    return Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1"), "b": HostConfig(hostname="10.0.0.2")},
        defaults=JobDefaults.model_validate({"image": "img:1", **defaults}),
    )


def facts(host: str, ip: str, gpus: int | None) -> HostFacts:
    return HostFacts(host, ip, gpus, "/home/u", "/home/u/.cache/gpuconsole/workdirs/abc", 40000)


def test_unknown_field_names_line_and_suggests(tmp_path: Path) -> None:
    p = write(tmp_path, BASE + "gpus_per_nod: 2\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert str(e.value) == f"{p}:4: gpus_per_nod: unknown field"
    assert e.value.hint is not None and e.value.hint.startswith("did you mean `gpus_per_node`?")


def test_nested_bad_value_points_at_its_line(tmp_path: Path) -> None:
    p = write(tmp_path, BASE + "env:\n  GOOD: x\n  9BAD: y\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.line == 4
    assert "9BAD" in str(e.value)


def test_malformed_yaml_line(tmp_path: Path) -> None:
    p = write(tmp_path, "name: a\nargs: ['x'\nscript: y\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.line == 3
    assert "malformed YAML" in str(e.value)


def test_missing_script_in_workdir(tmp_path: Path) -> None:
    p = write(tmp_path, f"name: demo\nscript: nope.py\nworkdir: {EXAMPLES}\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.field == "script" and e.value.line == 2


@pytest.mark.parametrize("mount", ["rel/path:/x", "/abs:rel", "/a:/b:rx", "/a"])
def test_bad_mounts(tmp_path: Path, mount: str) -> None:
    p = write(tmp_path, BASE + f"mounts: ['{mount}']\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.field == "mounts[0]" or e.value.field == "mounts"


def test_secret_env_resolved_and_not_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TOKEN", "abc")
    p = write(tmp_path, BASE + "env:\n  TOKEN: 'Bearer ${MY_TOKEN}'\n  PLAIN: v\n")
    loaded = load_spec(p)
    assert loaded.env == {"TOKEN": "Bearer abc", "PLAIN": "v"}
    assert loaded.secret_env == frozenset({"TOKEN"})
    h1 = loaded.spec_hash()
    monkeypatch.setenv("MY_TOKEN", "other")
    assert load_spec(p).spec_hash() == h1  # the secret's value never enters the hash


def test_cli_overrides_win(tmp_path: Path) -> None:
    p = write(tmp_path, BASE + "nodes: 1\n")
    loaded = load_spec(p, {"nodes": ["b", "a"], "name": None})
    assert loaded.spec.nodes == ["b", "a"]
    assert loaded.spec.name == "demo"


def _loaded(tmp_path: Path, extra: str = "") -> LoadedSpec:
    return load_spec(write(tmp_path, BASE + extra))


def test_select_hosts(tmp_path: Path) -> None:
    assert select_hosts(_loaded(tmp_path, "nodes: 2\n"), profile()) == ["a", "b"]
    with pytest.raises(ConfigError) as e:
        select_hosts(_loaded(tmp_path, "nodes: 3\n"), profile())
    assert "3 nodes asked, but profile 't' has 2 host(s)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        select_hosts(_loaded(tmp_path, "nodes: [a, c]\n"), profile())
    assert e.value.field == "nodes[1]"


def test_more_processes_than_gpus_is_caught_before_any_host(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        check_spec_against_gpus(_loaded(tmp_path, "gpus_per_node: [0, 1]\nnproc_per_node: 3\n"))
    assert e.value.field == "nproc_per_node"


def test_plan_two_gpu_nodes(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "nodes: 2\ngpus_per_node: all\nargs: ['--lr', '0.1']\n")
    f = {"a": facts("a", "10.0.0.1", 4), "b": facts("b", "10.0.0.2", 4)}
    plan = build_plan(
        loaded, profile(), ["a", "b"], f, job_id="demo-abc123", created_at=1.0, image="img:1"
    )
    assert plan.world_size == 8 and plan.nproc_per_node == 4 and plan.backend == "nccl"
    assert plan.rdzv_endpoint == "10.0.0.1:40000"
    n1 = plan.nodes[1].container
    assert n1.gpu_device_ids == ("0", "1", "2", "3")
    cmd = n1.command
    assert cmd[:2] == ["torchrun", "--nnodes"]
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "10.0.0.1:40000"
    assert cmd[cmd.index("--rdzv-id") + 1] == "demo-abc123"
    assert cmd[cmd.index("--rdzv-conf") + 1] == "is_host=0"
    assert plan.nodes[0].container.command[cmd.index("--rdzv-conf") + 1] == "is_host=1"
    assert cmd[cmd.index("--local-addr") + 1] == "10.0.0.2"
    assert cmd[-3:] == ["train_ddp.py", "--lr", "0.1"]
    assert n1.labels["io.gpuconsole.node-rank"] == "1"
    assert n1.labels["io.gpuconsole.node-count"] == "2"
    assert n1.labels["io.gpuconsole.job-id"] == "demo-abc123"
    assert n1.env["TORCHELASTIC_ERROR_FILE"] == "/tmp/gpuconsole-error.json"
    kw = n1.create_kwargs()
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges"]
    assert "privileged" not in kw
    assert kw["network_mode"] == "host"
    assert kw["shm_size"] == "1g"
    assert kw["device_requests"][0]["DeviceIDs"] == ["0", "1", "2", "3"]
    assert kw["volumes"]["/home/u/.cache/gpuconsole/workdirs/abc"] == {
        "bind": "/workspace",
        "mode": "ro",
    }
    line = n1.docker_run_line()
    assert "--gpus '\"device=0,1,2,3\"'" in line
    assert "--privileged" not in line


def test_plan_cpu_job_ipc_host_mounts_and_caps(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "gpus_per_node: 0\nipc: host\nmounts: ['~/data:/data:ro']\n")
    prof = profile(cap_add=["SYS_PTRACE"], mounts=["/scratch:/scratch"])
    plan = build_plan(
        loaded,
        prof,
        ["a"],
        {"a": facts("a", "10.0.0.1", None)},
        job_id="demo-1",
        created_at=1.0,
        image="img:1",
    )
    c = plan.nodes[0].container
    assert plan.backend == "gloo" and plan.world_size == 1 and c.gpu_device_ids == ()
    kw = c.create_kwargs()
    assert kw["ipc_mode"] == "host" and "shm_size" not in kw
    assert kw["cap_add"] == ["SYS_PTRACE"]
    assert kw["volumes"]["/home/u/data"] == {"bind": "/data", "mode": "ro"}
    assert kw["volumes"]["/scratch"] == {"bind": "/scratch", "mode": "rw"}


def test_plan_gpu_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="host a has no NVIDIA driver"):
        build_plan(
            _loaded(tmp_path, "gpus_per_node: 1\n"),
            profile(),
            ["a"],
            {"a": facts("a", "1.1.1.1", None)},
            job_id="x",
            created_at=0,
            image="i",
        )
    with pytest.raises(PlanError, match="GPU index 5 does not exist"):
        build_plan(
            _loaded(tmp_path, "gpus_per_node: [0, 5]\n"),
            profile(),
            ["a"],
            {"a": facts("a", "1.1.1.1", 2)},
            job_id="x",
            created_at=0,
            image="i",
        )
    with pytest.raises(PlanError, match="more processes than GPUs: nproc_per_node 4 > 2"):
        build_plan(
            _loaded(tmp_path, "gpus_per_node: all\nnproc_per_node: 4\n"),
            profile(),
            ["a"],
            {"a": facts("a", "1.1.1.1", 2)},
            job_id="x",
            created_at=0,
            image="i",
        )


def test_count_takes_free_gpus_and_busy_ones_are_refused_with_holders(tmp_path: Path) -> None:
    from dataclasses import replace

    from console.jobs.plan import pick_gpus

    holder = "pid 4242 (bob: python x.py) in container 0123456789ab"
    f = replace(
        facts("a", "1.1.1.1", 4), holders={0: [holder], 1: [], 2: [], 3: []}, lost=frozenset({3})
    )
    assert pick_gpus(_loaded(tmp_path, "gpus_per_node: 2\n"), f) == (1, 2)
    with pytest.raises(PlanError) as e:
        pick_gpus(_loaded(tmp_path, "gpus_per_node: 3\n"), f)
    assert str(e.value) == (
        f"{tmp_path / 'job.yaml'}:4: gpus_per_node: host a: GPU(s) 0 in use (GPU 0: {holder})"
    )
    assert e.value.hint is not None and "--force" in e.value.hint
    assert "stop those processes" in e.value.hint
    # held by a gpuconsole job: the hint names it
    job_holder = "pid 736 (root: python -u train_ddp.py) on the host (job big-29db99 n0 r0)"
    g = replace(f, holders={0: [job_holder], 1: [job_holder], 2: [], 3: []})
    with pytest.raises(PlanError) as e:
        pick_gpus(_loaded(tmp_path, "gpus_per_node: 3\n"), g)
    assert e.value.hint is not None
    assert "stop job big-29db99 (`gpuconsole stop big-29db99`)" in e.value.hint
    assert pick_gpus(_loaded(tmp_path, "gpus_per_node: [0, 1]\n"), f, force=True) == (0, 1)
    with pytest.raises(PlanError, match="GPU 0: pid 4242"):
        pick_gpus(_loaded(tmp_path, "gpus_per_node: [0, 1]\n"), f)
    # a lost GPU is refused even with --force
    with pytest.raises(PlanError, match="GPU 3: lost"):
        pick_gpus(_loaded(tmp_path, "gpus_per_node: all\n"), f, force=True)


# -- issue 7: bad input never tracebacks ---------------------------------------------------------


def test_all_errors_of_a_file_are_reported_each_with_its_line_and_fix(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        f"name: Bad Name\nscript: train_ddp.py\nworkdir: {EXAMPLES}\nnodes: 0\nmax_restarts: -1\n",
    )
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"{p}:1: name: must be lowercase") and lines[0].endswith(
        "(and 2 more)"
    )
    assert lines[1] == ("  fix: lowercase letters, digits, '.', '_', '-'; e.g. `name: resnet-ddp`")
    assert lines[2] == f"  also: {p}:4: nodes: must be from 1 to 1024"
    assert lines[4] == (
        f"  also: {p}:5: max_restarts: Input should be greater than or equal to 0 (got -1)"
    )
    assert e.value.hint == "a whole number from 0 to 1000"


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("nvcr.io/nvidia/pytorch:24.10-py3", True),
        ("localhost:5000/team/img@sha256:" + "a" * 64, True),
        ("ubuntu", True),
        ("my_org/img__x:v1.2-rc", True),
        ("[::1]:5000/x", True),
        ("/", False),
        ("UPPER/x", False),
        ("Ubuntu", False),
        ("a b", False),
        ("x:", False),
        ("a//b", False),
        ("a@sha256:12", False),
        ("a" * 256, False),
        ("img:" + "t" * 129, False),
    ],
)
def test_image_reference_grammar(tmp_path: Path, image: str, ok: bool) -> None:
    p = write(tmp_path, BASE + f"image: '{image}'\n")
    if ok:
        assert load_spec(p).spec.image == image
        return
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.field == "image" and e.value.line == 4


def test_script_must_stay_inside_the_workdir(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "train.py").write_text("")
    (tmp_path / "outside.py").write_text("")
    (wd / "link.py").symlink_to(tmp_path / "outside.py")
    base = f"name: a\nworkdir: {wd}\n"
    for script, msg in [
        ("../outside.py", "'../outside.py' leaves the workdir"),
        ("sub/../../outside.py", "leaves the workdir"),
        ("/etc/passwd", "'/etc/passwd' is an absolute path"),
        ("link.py", "'link.py' leads outside the workdir"),
    ]:
        p = write(tmp_path, base + f"script: {script}\n")
        with pytest.raises(ConfigError) as e:
            load_spec(p)
        assert e.value.field == "script" and e.value.line == 3 and msg in str(e.value), script
    assert load_spec(write(tmp_path, base + "script: ./train.py\n")).spec.script == "./train.py"


def test_relative_mount_is_refused_with_its_meaning(tmp_path: Path) -> None:
    p = write(
        tmp_path, BASE + "mounts:\n  - /data:/data:ro\n  - ./checkpoints:/workspace/checkpoints\n"
    )
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert str(e.value).startswith(
        f"{p}:6: mounts[1]: mount './checkpoints:/workspace/checkpoints': the host path "
        "'./checkpoints' is relative; a mount's host path is a folder on the GPU host"
    )
    ok = load_spec(write(tmp_path, BASE + "mounts: ['~/ckpt:/workspace/checkpoints']\n"))
    assert ok.spec.mounts == ["~/ckpt:/workspace/checkpoints"]


def test_nproc_per_node_has_an_upper_bound(tmp_path: Path) -> None:
    assert load_spec(write(tmp_path, BASE + "nproc_per_node: 1024\n")).spec.nproc_per_node == 1024
    with pytest.raises(ConfigError) as e:
        load_spec(write(tmp_path, BASE + "nproc_per_node: 1025\n"))
    assert e.value.field == "nproc_per_node" and e.value.line == 4


def test_flag_values_blame_the_flag_not_the_file(tmp_path: Path) -> None:
    p = write(tmp_path, BASE)
    with pytest.raises(ConfigError) as e:
        load_spec(p, {"name": "Bad Name"})
    assert str(e.value).startswith("--name: must be lowercase")
    loaded = load_spec(p, {"nodes": ["a", "zz"]})
    with pytest.raises(ConfigError) as e2:
        select_hosts(loaded, profile())
    assert str(e2.value) == "--nodes: unknown host 'zz' (profile 't')"


def test_plan_errors_carry_the_spec_line(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "nodes: [a, zz]\n")
    with pytest.raises(ConfigError) as e:
        select_hosts(loaded, profile())
    assert str(e.value) == f"{tmp_path / 'job.yaml'}:4: nodes[1]: unknown host 'zz' (profile 't')"
    loaded = _loaded(tmp_path, "gpus_per_node: 2\nnproc_per_node: 4\n")
    with pytest.raises(ConfigError) as e:
        check_spec_against_gpus(loaded)
    assert e.value.line == 5 and e.value.field == "nproc_per_node"
    loaded = _loaded(tmp_path, "gpus_per_node: 8\n")
    with pytest.raises(PlanError) as e3:
        build_plan(
            loaded,
            profile(),
            ["a"],
            {"a": facts("a", "10.0.0.1", 4)},
            job_id="demo-000000",
            created_at=0.0,
            image="img:1",
        )
    assert str(e3.value) == (
        f"{tmp_path / 'job.yaml'}:4: gpus_per_node: host a has 4 GPU(s), "
        "the job asks for 8 per node"
    )


def test_profile_env_references_are_resolved_and_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console.jobs.plan import render_plan

    monkeypatch.setenv("GPUCONSOLE_T_KEY", "s3cr3t")
    monkeypatch.delenv("GPUCONSOLE_T_UNSET", raising=False)
    prof = profile(env={"WANDB_API_KEY": "${GPUCONSOLE_T_KEY}", "LEVEL": "x"})
    loaded = _loaded(tmp_path, "gpus_per_node: 0\nenv: {LEVEL: mine}\n")
    plan = build_plan(
        loaded,
        prof,
        ["a"],
        {"a": facts("a", "10.0.0.1", None)},
        job_id="demo-000000",
        created_at=0.0,
        image="img:1",
    )
    c = plan.nodes[0].container
    assert c.env["WANDB_API_KEY"] == "s3cr3t" and c.env["LEVEL"] == "mine"
    assert c.secret_env == frozenset({"WANDB_API_KEY"})
    text = render_plan(plan)
    assert "WANDB_API_KEY=***" in text and "s3cr3t" not in text
    with pytest.raises(ConfigError) as e:
        select_hosts(loaded, profile(env={"T": "${GPUCONSOLE_T_UNSET}"}))
    assert str(e.value) == (
        "defaults.env.T: references ${GPUCONSOLE_T_UNSET}, which is not set in your environment"
    )


def test_dry_run_escapes_control_characters_and_notes_local_rank(tmp_path: Path) -> None:
    from console.jobs.plan import render_plan

    loaded = _loaded(
        tmp_path,
        'gpus_per_node: 0\nargs: ["--local-rank=${local_rank}", '
        '"a\\rEVIL\\a", "x\\u202ey", "it\'s\\nnew", "${HOME}", '
        '"\\e[31mred"]\n',
    )
    plan = build_plan(
        loaded,
        profile(),
        ["a"],
        {"a": facts("a", "10.0.0.1", None)},
        job_id="demo-000000",
        created_at=0.0,
        image="img:1",
    )
    text = render_plan(plan)
    assert not any(c in text for c in "\r\x07\x1b\u202e")
    run = text.splitlines()[2]
    assert run.endswith(
        "train_ddp.py '--local-rank=${local_rank}' $'a\\rEVIL\\a' "
        "$'x\\u202ey' $'it\\'s\\nnew' '${HOME}' $'\\E[31mred'"
    )
    notes = text.splitlines()[3:]
    assert notes == [
        "note: torchrun replaces ${local_rank} in args[0] '--local-rank=${local_rank}' with "
        "each process's local rank (0..0)",
        "note: no shell runs the script: args[4] '${HOME}' reach(es) it as written (only env "
        "values take ${VAR} from your environment)",
    ]


def test_yaml_guards(tmp_path: Path) -> None:
    from console.yamlsrc import MAX_DEPTH, parse_yaml

    cases = {
        "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1): "nested deeper than 64 levels",
        "a: 1\nb: 2\na: 3\n": "duplicate key 'a' (first at line 1)",
        "a: &x [1, *x]\n": "alias *x is inside the node &x it names (a cycle)",
        "a: !!binary AAAA\n": "binary values (!!binary) are not accepted",
        'a: "x\\0"\n': "contains U+0000 (NUL)",
        "a: b\x00\n": "the file contains the control character U+0000",
    }
    for text, msg in cases.items():
        with pytest.raises(ConfigError) as e:
            parse_yaml(text, "f.yaml")
        assert msg in str(e.value) and e.value.hint and str(e.value).startswith("f.yaml:"), text
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\nON: 1\nb: &x {c: 1}\nd: *x\n"
    data, _ = parse_yaml(ok, "f.yaml")
    assert data["ON"] == 1 and data["d"] == {"c": 1}  # plain keys are names, not booleans


def test_file_problems_come_with_field_problems(tmp_path: Path) -> None:
    """A script that leaves the workdir is reported together with bad fields, in file
    order, not only once the fields are fixed."""
    p = write(tmp_path, f"name: demo\nscript: ../escape.py\nworkdir: {EXAMPLES}\nnodes: 0\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    said = [(q.line, q.field) for q in getattr(e.value, "problems", (e.value,))]
    assert said == [(2, "script"), (4, "nodes")]
    assert "'../escape.py' leaves the workdir" in str(e.value)
    # a bad script field itself: only its own problem, no guess at the file
    p = write(tmp_path, f"name: demo\nscript: [a, b]\nworkdir: {EXAMPLES}\nnodes: 0\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    said = [(q.line, q.field) for q in getattr(e.value, "problems", (e.value,))]
    assert [f for _, f in said if f and f.startswith("script")] and (4, "nodes") in said


@pytest.mark.parametrize(
    ("written", "read"), [("30", "30"), ("1:30:00", "1:30:00"), ("'2-00:00:00'", "2-00:00:00")]
)
def test_time_limit_as_written(tmp_path: Path, written: str, read: str) -> None:
    """A bare number is minutes; `1:30:00` is not YAML 1.1's base-60 integer 5400."""
    p = write(tmp_path, BASE + f"time_limit: {written}\n")
    assert load_spec(p).spec.time_limit == read


def test_colon_numbers_stay_text(tmp_path: Path) -> None:
    """YAML 1.1 reads `8080:80` as 484880; the loader reads numbers as YAML 1.2 does."""
    from console.yamlparse import parse

    data, _ = parse(b"ports: [8080:80]\nt: 1:30\nn: 30\nf: 1.5\nx: 0x10\n", "f.yaml")
    assert data == {"ports": ["8080:80"], "t": "1:30", "n": 30, "f": 1.5, "x": 16}
