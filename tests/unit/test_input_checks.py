"""Hostile values in profiles, specs and flags: each refused with the file, line and field
(or the flag) and a fix, never read as something else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from console.cli import main
from console.errors import ConfigError
from console.profiles import resolve_profile

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"
SPEC = f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\n"


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("GPUCONSOLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUCONSOLE_PROFILE", raising=False)
    (tmp_path / "cfg" / "profiles").mkdir(parents=True)
    return tmp_path / "cfg" / "profiles"


def profile_error(config_dir: Path, text: str) -> ConfigError:
    (config_dir / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        resolve_profile("bad")
    return e.value


# -- numbers: finite and bounded -------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e308", "601", "0", "-1"])
def test_connect_timeout_is_finite_and_bounded(config_dir: Path, value: str) -> None:
    e = profile_error(config_dir, f"hosts:\n  a: {{}}\nconnect_timeout: {value}\n")
    assert e.field == "connect_timeout" and e.line == 3, str(e)
    assert e.hint is not None and "at most 600" in e.hint


def test_connect_timeout_in_range_is_kept(config_dir: Path) -> None:
    (config_dir / "ok.yaml").write_text("hosts:\n  a: {}\nconnect_timeout: 600\n")
    assert resolve_profile("ok").connect_timeout == 600


@pytest.mark.parametrize("value", [".inf", "1e308", ".nan"])
def test_profile_numbers_refuse_infinity(config_dir: Path, value: str) -> None:
    for field, text in (
        ("price_per_gpu_hour", f"price_per_gpu_hour: {value}\n"),
        ("defaults.stop_grace", f"defaults:\n  stop_grace: {value}\n"),
    ):
        e = profile_error(config_dir, "hosts:\n  a: {}\n" + text)
        assert e.field == field and e.line is not None and e.line >= 3, str(e)


@pytest.mark.parametrize(
    "args",
    [
        ["top", "--once", "--timeout", "inf"],
        ["top", "--once", "--timeout", "1e308"],
        ["top", "--once", "--timeout", "nan"],
        ["top", "--interval", "inf"],
        ["top", "--speed", "nan"],
        ["gpus", "--timeout", "inf"],
        ["ps", "--deadline", "nan"],
        ["stop", "job", "--grace", "inf"],
        ["stop", "job", "--grace", "1e308"],
        ["watch", "--interval", "1e308"],
        ["watch", "--speed", "inf"],
        ["notebook", "--timeout", "nan"],
        ["logs", "job", "--since", "99999999999d"],
        ["bench", "--sustain", "nan"],
        ["bench", "--sustain", "inf"],
    ],
)
def test_duration_flags_refuse_infinite_and_huge_values(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    flag = args[-2]
    assert f"Invalid value for '{flag}'" in res.output


def test_bench_quick_and_full_are_alternatives() -> None:
    res = CliRunner().invoke(main, ["bench", "--quick", "--full"])
    assert res.exit_code == 2, res.output
    assert "--quick and --full are alternatives" in res.output


# -- booleans are not numbers; tags do not change types --------------------------------------


def spec_error(tmp_path: Path, extra: str) -> ConfigError:
    from console.jobs.spec import load_spec

    p = tmp_path / "job.yaml"
    p.write_text(SPEC + extra)
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    return e.value


@pytest.mark.parametrize(
    "field", ["nproc_per_node", "nodes", "gpus_per_node", "max_restarts", "rdzv_port"]
)
@pytest.mark.parametrize("value", ["true", "false", "yes"])
def test_a_boolean_is_not_a_count(tmp_path: Path, field: str, value: str) -> None:
    e = spec_error(tmp_path, f"{field}: {value}\n")
    assert e.field == field and e.line == 4, str(e)
    assert "(got True)" in str(e) or "(got False)" in str(e) or "(got 'yes')" in str(e)


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("hosts:\n  a: {port: true}\n", "hosts.a.port", 2),
        ("hosts:\n  a: {}\ndefaults:\n  rdzv_port: true\n", "defaults.rdzv_port", 4),
        ("hosts:\n  a: {}\nconnect_timeout: true\n", "connect_timeout", 3),
        ("hosts:\n  a: {}\naccept_new_host_keys: 1\n", "accept_new_host_keys", 3),
    ],
)
def test_profile_booleans_and_numbers_do_not_stand_in_for_each_other(
    config_dir: Path, text: str, field: str, line: int
) -> None:
    e = profile_error(config_dir, text)
    assert e.field == field and e.line == line, str(e)


def test_whole_numbers_still_read_as_seconds(config_dir: Path) -> None:
    (config_dir / "ok.yaml").write_text(
        "hosts:\n  a: {port: 2222}\nconnect_timeout: 5\ndefaults: {stop_grace: 3}\n"
    )
    p = resolve_profile("ok")
    assert (p.connect_timeout, p.defaults.stop_grace, p.hosts["a"].port) == (5.0, 3.0, 2222)


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!set {a, b}", "!!set"),
        ("!!omap [{a: 1}]", "!!omap"),
        ("!!pairs [{a: 1}]", "!!pairs"),
        ("!!python/tuple [a]", "!!python/tuple"),
        ("!!python/object:os.system {}", "!!python/object:os.system"),
        ("!custom [a]", "!custom"),
    ],
)
def test_tags_that_change_the_type_are_refused_with_the_line(
    tmp_path: Path, value: str, tag: str
) -> None:
    e = spec_error(tmp_path, f"args: {value}\n")
    assert e.line == 4 and f"the tag {tag} is not accepted" in str(e), str(e)
    assert e.hint is not None and "`[a, b]`" in e.hint


def test_args_keep_their_order_and_must_be_strings(tmp_path: Path) -> None:
    from console.jobs.spec import load_spec

    p = tmp_path / "job.yaml"
    p.write_text(SPEC + "args: [--b, --a, '3']\n")
    assert load_spec(p).spec.args == ["--b", "--a", "3"]
    e = spec_error(tmp_path, "args: [--steps, 3]\n")
    assert e.field == "args[1]" and e.line == 4


# -- an empty value is not the default ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ('known_hosts: ""\nhosts:\n  a: {}\n', "known_hosts", 1),
        ("known_hosts: '  '\nhosts:\n  a: {}\n", "known_hosts", 1),
        ('hosts:\n  a:\n    identity_file: ""\n', "hosts.a.identity_file", 3),
        ('hosts:\n  a:\n    address: ""\n', "hosts.a.address", 3),
        ('hosts:\n  a:\n    python: ""\n', "hosts.a.python", 3),
    ],
)
def test_an_empty_path_is_an_error_not_the_default(
    config_dir: Path, text: str, field: str, line: int
) -> None:
    e = profile_error(config_dir, text)
    assert e.field == field and e.line == line, str(e)
    assert e.detail.startswith("is empty"), e.detail
    assert e.hint  # the field's own example


@pytest.mark.parametrize("field", ["workdir", "script", "python"])
def test_an_empty_spec_field_is_an_error(tmp_path: Path, field: str) -> None:
    from console.jobs.spec import load_spec

    p = tmp_path / "job.yaml"
    p.write_text(f"name: demo\n{field}: ''\n")
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert e.value.field == field and e.value.line == 2, str(e.value)


# -- a spec or profile path that is not a regular file ---------------------------------------


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        ("fifo", "a FIFO (named pipe)"),
        ("dir", "a directory"),
        ("dev", "a character device"),
    ],
)
def test_a_spec_path_that_is_not_a_regular_file_says_what_it_is(
    tmp_path: Path, make: str, kind: str
) -> None:
    """Nothing is read from it: a FIFO without a writer would block for good, /dev/zero
    never ends."""
    import os

    path = tmp_path / "job.yaml"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dir":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    for args in (["submit", str(path), "--dry-run"], ["-p", str(path), "ps"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, res.output
        what = "job spec" if args[0] == "submit" else "profile"
        assert f"error: {path}: {what} is {kind}, not a regular file" in res.output
        assert "fix: give the path of a" in res.output


def test_read_source_never_blocks_on_a_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO put in place after the check is opened without blocking and refused."""
    import os

    from console import yamlsrc

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(yamlsrc, "source_problem", lambda path, what="file": None)
    with pytest.raises(ConfigError) as e:
        yamlsrc.read_source(fifo, "profile")
    assert "is a FIFO (named pipe), not a regular file" in str(e.value)


# -- mount targets as Docker compares them --------------------------------------------------


@pytest.mark.parametrize(
    ("target", "what"),
    [
        ("//workspace", "the synced workdir"),
        ("/workspace/.", "the synced workdir"),
        ("/workspace/../workspace", "the synced workdir"),
        ("/workspace/", "the synced workdir"),
        ("/opt/gpuconsole-gang", "the gang supervisor"),
        ("//opt//gpuconsole-gang/", "the gang supervisor"),
        ("/opt/gpuconsole-gang/sub", "the gang supervisor"),
    ],
)
def test_reserved_mount_targets_are_refused_however_written(
    tmp_path: Path, target: str, what: str
) -> None:
    e = spec_error(tmp_path, f"mounts: ['/data:{target}']\n")
    assert e.field == "mounts[0]" and e.line == 4, str(e)
    assert f"where gpuconsole mounts {what}" in e.detail
    assert e.hint is not None and "/opt/gpuconsole-gang" in e.hint


def test_container_paths_are_normalised() -> None:
    from console.fields import container_path, parse_mount

    assert container_path("//data//x/./y/../") == "/data/x"
    assert parse_mount("/d://data/.:ro") == ("/d", "/data", True)
    assert parse_mount("/d:/opt/gpuconsole-gang-other") == (
        "/d",
        "/opt/gpuconsole-gang-other",
        False,
    )


def test_two_mounts_at_one_point_are_refused_before_any_host(tmp_path: Path) -> None:
    from console.jobs.plan import select_hosts
    from console.jobs.spec import load_spec
    from console.profiles import HostConfig, JobDefaults, Profile

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC + "mounts:\n  - /a:/data\n  - /b:/out\n  - /c://out/.\n")
    prof = Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults(image="img:1", mounts=["/h:/data/"]),
    )
    with pytest.raises(ConfigError) as e:
        select_hosts(load_spec(spec), prof)
    found = [(p.field, p.line, p.detail) for p in getattr(e.value, "problems", (e.value,))]
    assert found == [
        (
            "mounts[0]",
            5,
            "mount '/a:/data': the container path /data is already mounted by "
            "defaults.mounts[0] '/h:/data/'",
        ),
        (
            "mounts[2]",
            7,
            "mount '/c://out/.': the container path /out is already mounted by mounts[1] '/b:/out'",
        ),
    ]
    assert e.value.hint is not None and "its own container path" in e.value.hint


# -- symbolic link loops ----------------------------------------------------------------------


def test_a_workdir_that_is_a_symlink_loop_names_the_link(tmp_path: Path) -> None:
    import os

    from console.jobs.spec import load_spec

    os.symlink("loop", tmp_path / "loop")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nscript: train.py\nworkdir: loop\n")
    with pytest.raises(ConfigError) as e:
        load_spec(spec)
    assert (e.value.field, e.value.line) == ("workdir", 3)
    assert f"the symbolic link {tmp_path / 'loop'} loops" in e.value.detail
    assert e.value.hint is not None and "change workdir" in e.value.hint


def test_a_script_that_is_a_symlink_loop_names_the_link(tmp_path: Path) -> None:
    import os

    from console.jobs.spec import load_spec

    wd = tmp_path / "w"
    wd.mkdir()
    os.symlink("b", wd / "a")
    os.symlink("a", wd / "b")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nscript: a\nworkdir: w\n")
    with pytest.raises(ConfigError) as e:
        load_spec(spec)
    assert (e.value.field, e.value.line) == ("script", 2)
    assert "the symbolic link" in e.value.detail and "loops" in e.value.detail


# -- workdir names the sync cannot copy -------------------------------------------------------


def test_backslash_names_are_found_in_files_and_folders_but_not_excluded_ones(
    tmp_path: Path,
) -> None:
    from remote.transport import unsyncable_names

    (tmp_path / "d\\x").mkdir()
    (tmp_path / "d\\x" / "inner\\y").write_text("")  # inside a refused folder: named once
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "f\\g.py").write_text("")
    (tmp_path / "data\\raw").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "h\\i").write_text("")  # never synced
    names = [name for name, _why in unsyncable_names(tmp_path)]
    assert names == ["d\\x", "data\\raw", "ok/f\\g.py"]
    assert [name for name, _why in unsyncable_names(tmp_path, ["d\\x", "data*"])] == ["ok/f\\g.py"]


def test_a_spec_whose_workdir_has_a_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """A file name of Latin-1 bytes (os.walk gives it with surrogates): refused at load, so at
    ``--dry-run`` too, naming the file readably; the digest of the workdir reads its bytes."""
    from console.jobs.spec import load_spec
    from remote.transport import workdir_digest

    wd = tmp_path / "w"
    wd.mkdir()
    (wd / "train.py").write_text("")
    (wd / os.fsdecode(b"lat\xe9n.txt")).write_text("")
    assert len(workdir_digest(wd)) == 64
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nscript: train.py\nworkdir: w\n")
    with pytest.raises(ConfigError) as e:
        load_spec(spec)
    assert (e.value.field, e.value.line) == ("workdir", 3)
    assert "lat\\xe9n.txt: a file name that is not UTF-8" in e.value.detail, e.value.detail
    spec.write_text("name: demo\nscript: train.py\nworkdir: w\nexclude: ['lat*']\n")
    assert load_spec(spec).spec.workdir is not None


def test_a_spec_whose_workdir_has_a_backslash_name_is_refused(tmp_path: Path) -> None:
    from console.jobs.spec import load_spec

    wd = tmp_path / "w"
    wd.mkdir()
    (wd / "train.py").write_text("")
    (wd / "a\\b.txt").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nscript: train.py\nworkdir: w\n")
    with pytest.raises(ConfigError) as e:
        load_spec(spec)
    assert (e.value.field, e.value.line) == ("workdir", 3)
    assert e.value.detail.startswith(f"{wd / 'a'}\\b.txt: a backslash in a file name")
    assert e.value.hint == "rename it, or leave it out: `exclude: ['a\\b.txt']`"
    spec.write_text("name: demo\nscript: train.py\nworkdir: w\nexclude: ['a\\b.txt']\n")
    assert load_spec(spec).spec.exclude == ["a\\b.txt"]


@pytest.mark.parametrize(
    ("text", "said"), [('{"bad json\n', "not a gpuconsole recording line"), ("", "no sample in it")]
)
def test_watch_replay_of_a_bad_recording_ends_with_exit_2(
    tmp_path: Path, config_dir: Path, text: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    rec = tmp_path / "rec.jsonl"
    rec.write_text(text)
    res = CliRunner().invoke(main, ["watch", "--replay", str(rec)])
    assert res.exit_code == 2, res.output
    assert (
        said in res.output and "fix: give a file written by `gpuconsole top --record`" in res.output
    )


@pytest.mark.parametrize("pattern", ["*.py", "train_ddp.py", "train*"])
def test_an_exclude_that_leaves_out_the_script_is_refused(tmp_path: Path, pattern: str) -> None:
    e = spec_error(tmp_path, f"exclude: ['{pattern}']\n")
    assert e.field == "exclude" and e.line == 4, str(e)
    assert "'train_ddp.py' is left out of the synced workdir by `exclude`" in str(e)


def test_an_exclude_of_the_scripts_folder_is_refused(tmp_path: Path) -> None:
    from console.jobs.spec import load_spec

    wd = tmp_path / "w"
    (wd / "src").mkdir(parents=True)
    (wd / "src" / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nscript: src/train.py\nworkdir: w\nexclude: ['src']\n")
    with pytest.raises(ConfigError) as e:
        load_spec(spec)
    assert e.value.field == "exclude" and "(it matches 'src')" in str(e.value)
    spec.write_text("name: demo\nscript: src/train.py\nworkdir: w\nexclude: ['*.ckpt']\n")
    assert load_spec(spec).spec.script == "src/train.py"
