"""The bad-input corpus (tests/data/fuzz/, written by scripts/gen_fuzz_corpus.py): every spec
and profile in it is refused by the real CLI, ``gpuconsole submit FILE --dry-run``, with one
``error:`` line naming the place, a ``fix:``, exit 2, no traceback, and nothing recorded.

The CLI runs in-process (click's CliRunner over the same ``main`` group the ``gpuconsole``
entry point runs); every file fails before any host or engine is contacted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from console.cli import main
from console.jobs.spec import load_spec
from console.profiles import load_profile_file

REPO = Path(__file__).resolve().parents[2]
FUZZ = REPO / "tests" / "data" / "fuzz"
SPECS = sorted((FUZZ / "spec").glob("*.yaml"))
PROFILES = sorted((FUZZ / "profile").glob("*.yaml"))
VALID_SPEC = FUZZ / "valid-spec.yaml"

#: The named cases of issue 7 and what their one error line must say (besides file:line).
NAMED_SPEC_ERRORS: dict[str, tuple[str, ...]] = {
    "image-slash": (":2: image: '/' is not a Docker image reference",),
    "deep-nesting": (":23: nested deeper than 64 levels",),
    "self-alias": (":23: alias *loop is inside the node &loop it names (a cycle)",),
    "billion-laughs": (":5: the document expands to more than 100,000 values",),
    "nul-in-args": (":13: contains U+0000 (NUL), which no field accepts",),
    "nul-in-name": (":1: contains U+0000 (NUL)",),
    "nul-raw-byte": (":10: the file contains the control character U+0000",),
    "duplicate-key": (":23: duplicate key 'name' (first at line 1)",),
    "nproc-too-many": (":5: nproc_per_node: Input should be less than or equal to 1024",),
    "script-escapes": (":10: script: '../../../../etc/passwd' leaves the workdir",),
    "script-absolute": (":10: script: '/etc/passwd' is an absolute path",),
    "relative-mount": (
        ":19: mounts[0]: mount './checkpoints:/workspace/checkpoints': the "
        "host path './checkpoints' is relative",
    ),
    "all-errors": (":1: name: must be lowercase", "(and 2 more)"),
    "unknown-host": (":4: nodes[0]: unknown host 'gpu1' (profile 'local')", "(and 1 more)"),
    "env-unset": (":17: env.TOKEN: references ${GPUCONSOLE_FUZZ_UNSET_VAR}",),
    "user-newline-in-env-name": (":16: env: 'A\\nB'", "is not a valid environment variable name"),
}
NAMED_PROFILE_ERRORS: dict[str, tuple[str, ...]] = {
    "jump-notaport": (
        ":12: hosts.gpu2.jump: jump host 'bastion:notaport': port 'notaport' is not a number",
    ),
    "jump-port-99999": (
        ":12: hosts.gpu2.jump: jump host 'bastion:99999': port 99999 is not in 1-65535",
    ),
    "user-newline": (":7: hosts.gpu1.user: contains U+000A (line feed)",),
    "identity-not-a-key": (
        ":9: hosts.gpu1.identity_file: tests/data/fuzz/files/not-a-key is not a private key",
    ),
    "host-key-5000": (
        ":4: hosts: host name 'hhhhhhhhhhhhhhhhhhhh'... (5000 characters) must be 1-63 letters",
    ),
    "known-hosts-binary": (
        ":1: known_hosts: tests/data/fuzz/files/known_hosts.bin is not a known_hosts file",
    ),
    "defaults-mounts-relative": (
        ":18: defaults.mounts[0]: mount './data:/data': the host path './data' is relative",
    ),
    "defaults-env-unset": (":21: defaults.env.TOKEN: references ${GPUCONSOLE_FUZZ_UNSET_VAR}",),
    "image-slash": (":15: defaults.image: '/' is not a Docker image reference",),
    "nul-in-user": (":7: contains U+0000 (NUL)",),
    "duplicate-key": (":25: duplicate key 'known_hosts' (first at line 1)",),
    "billion-laughs": (":5: the document expands to more than 100,000 values",),
    "deep-nesting": (":25: nested deeper than 64 levels",),
    "self-alias": (":25: alias *loop is inside the node &loop it names (a cycle)",),
}


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.chdir(REPO)  # the profiles' helper files are relative to the repository
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("GPUCONSOLE_PROFILE", raising=False)
    monkeypatch.delenv("GPUCONSOLE_FUZZ_UNSET_VAR", raising=False)
    root = logging.getLogger()
    handlers = list(root.handlers)
    yield CliRunner()
    # main() calls logging.basicConfig on the runner's stderr; later runs must not log there
    for h in root.handlers[:]:
        if h not in handlers:
            root.removeHandler(h)


def refused(runner: CliRunner, argv: list[str]) -> Result:
    res = runner.invoke(main, argv, catch_exceptions=True)
    shown = f"{argv}\nexit {res.exit_code}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    assert res.exception is None or isinstance(res.exception, SystemExit), (shown, res.exc_info)
    assert res.exit_code == 2, shown
    assert res.stdout == "", shown
    assert "Traceback" not in res.stderr, shown
    assert res.stderr.startswith("error: "), shown
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("error:")]) == 1, shown
    assert "\n  fix: " in res.stderr, shown
    assert "Usage:" not in res.stderr, shown
    # no control character reaches the terminal unescaped (the message quotes values)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", res.stderr), shown
    return res


def nothing_recorded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db = state / "jobs.sqlite3"
    if db.exists():
        import sqlite3

        con = sqlite3.connect(db)
        try:
            assert con.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
        finally:
            con.close()


def test_the_corpus_is_there() -> None:
    assert len(SPECS) >= 200 and len(PROFILES) >= 100
    assert {f"named-{n}.yaml" for n in NAMED_SPEC_ERRORS} <= {p.name for p in SPECS}
    assert {f"named-{n}.yaml" for n in NAMED_PROFILE_ERRORS} <= {p.name for p in PROFILES}


def test_the_bases_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutations start from valid files, so each refusal is the mutation's doing."""
    monkeypatch.chdir(REPO)
    loaded = load_spec(VALID_SPEC)
    assert loaded.spec.name == "fuzz-base" and loaded.workdir == REPO / "scripts" / "examples"
    profile = load_profile_file(FUZZ / "valid-profile.yaml")
    assert list(profile.hosts) == ["gpu1", "gpu2"]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_bad_spec_is_refused(runner: CliRunner, tmp_path: Path, path: Path) -> None:
    res = refused(runner, ["-p", "local", "submit", str(path), "--dry-run"])
    first = res.stderr.splitlines()[0]
    assert first.startswith(f"error: {path}") or first.startswith("error: --"), first
    name = path.stem.removeprefix("named-")
    for needle in NAMED_SPEC_ERRORS.get(name, ()) if path.stem.startswith("named-") else ():
        assert needle in res.stderr, (needle, res.stderr)
    nothing_recorded(tmp_path)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_bad_profile_is_refused(runner: CliRunner, tmp_path: Path, path: Path) -> None:
    res = refused(runner, ["-p", str(path), "submit", str(VALID_SPEC), "--dry-run"])
    first = res.stderr.splitlines()[0]
    assert first.startswith(f"error: {path}"), first
    name = path.stem.removeprefix("named-")
    for needle in NAMED_PROFILE_ERRORS.get(name, ()) if path.stem.startswith("named-") else ():
        assert needle in res.stderr, (needle, res.stderr)
    nothing_recorded(tmp_path)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--gpus-per-node", "x"],
            "error: --gpus-per-node: 'x' is not `all`, a GPU count or GPU indices",
        ),
        (["--gpus-per-node", "0,x"], "error: --gpus-per-node: '0,x'"),
        (
            ["--nproc-per-node", "x"],
            "error: --nproc-per-node: 'x' is not a whole number from 1 to 1024",
        ),
        (["--nproc-per-node", "5000"], "error: --nproc-per-node: '5000'"),
        (
            ["--max-restarts", "-1"],
            "error: --max-restarts: '-1' is not a whole number from 0 to 1000",
        ),
        (["--nodes", "a,,b"], "error: --nodes: 'a,,b' has an empty host name"),
        (["--nodes", "0"], "error: --nodes: must be from 1 to 1024"),
        (["--nodes", "zz"], "error: --nodes: unknown host 'zz' (profile 'local')"),
        (["--name", "Bad Name"], "error: --name: must be lowercase"),
        (["--image", "/"], "error: --image: '/' is not a Docker image reference"),
        (
            ["--gpus-per-node", "4", "--nproc-per-node", "8"],
            "error: --nproc-per-node: more processes than GPUs",
        ),
    ],
)
def test_flag_errors_blame_the_flag(runner: CliRunner, argv: list[str], needle: str) -> None:
    res = refused(runner, ["-p", "local", "submit", str(VALID_SPEC), "--dry-run", *argv])
    assert res.stderr.startswith(needle), res.stderr
    assert str(VALID_SPEC) not in res.stderr.splitlines()[0]
