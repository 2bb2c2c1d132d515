"""Start-up hygiene (issue 11): the CLI's help and its command modules import no heavy stack.

``gpuconsole --help`` (and each command's ``--help``) must not pay for asyncssh, the Docker
SDK, pydantic, textual or the service: each command imports what it needs when it runs. The
modules a child interpreter imported are read from ``python -X importtime`` (one stderr line
per module imported), so this checks what happened, not how long it took (timings are in
``scripts/bench/startup.py`` and docs/benchmarks.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What no help text needs (top-level packages, plus the service layer itself).
HEAVY = (
    "asyncssh",
    "docker",
    "pydantic",
    "textual",
    "yaml",
    "requests",
    "cryptography",
    "sqlite3",
    "asyncio",
    "apprise",
    "prometheus_client",
    "console.service",
    "console.profiles",
    "console.jobs.store",
    "remote.ssh",
)


#: What ``ps`` must not import: the launch path (plan, job-spec models, gang wrapper), the
#: failure path (diagnosis, the kernel log and its fault parser), the Docker SDK and its HTTP
#: stack (the engine is listed over its socket by :mod:`remote.dockerapi`), SSH and the app.
NOT_FOR_PS = (
    "console.jobs.launch",
    "console.jobs.plan",
    "console.jobs.spec",
    "console.jobs.gang",
    "console.diagnosis",
    "remote.telemetry.faults",
    "remote.kernellog",
    "docker",
    "requests",
    "urllib3",
    "asyncssh",
    "cryptography",
    "textual",
    "prometheus_client",
)


def imported(args: list[str], tmp_path: Path, **extra_env: str) -> set[str]:
    """The modules ``python -X importtime ARGS`` imported (names as the interpreter printed
    them), run in ``tmp_path`` with an empty state and config dir (and ``extra_env``).

    Raises:
        AssertionError: the command failed.
    """
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(
        GPUCONSOLE_STATE_DIR=str(tmp_path / "state"),
        GPUCONSOLE_CONFIG_DIR=str(tmp_path / "config"),
        PYTHONPATH=str(ROOT),
        **extra_env,
    )
    p = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in p.stderr.splitlines()
        if line.startswith("import time:")
    }


def heavy(mods: set[str]) -> list[str]:
    """The :data:`HEAVY` names among ``mods`` (a package counts if any submodule is in)."""
    return [h for h in HEAVY if h in mods or any(m.startswith(h + ".") for m in mods)]


def test_importtime_sees_heavy_imports(tmp_path: Path) -> None:
    """The check can fail: a command that runs the service imports its stack."""
    mods = imported(["-c", "import console.service, remote.ssh"], tmp_path)
    assert {"asyncssh", "pydantic", "console.service"} <= set(heavy(mods))


def test_local_profile_needs_no_ssh(tmp_path: Path) -> None:
    """The service and a local host's transport leave asyncssh alone (it is imported when
    a profile names an SSH host: validation, known_hosts and key checks, its transport)."""
    code = (
        "import console.service\n"
        "from console.profiles import resolve_profile\n"
        "resolve_profile('local').transport('local')"
    )
    mods = imported(["-c", code], tmp_path)
    assert "console.service" in mods
    assert "asyncssh" not in heavy(mods)
    ssh = imported(
        ["-c", "from console.profiles import resolve_profile\nresolve_profile('example-cluster')"],
        tmp_path,
    )
    assert "asyncssh" in heavy(ssh)


def test_import_console_cli_is_light(tmp_path: Path) -> None:
    mods = imported(["-c", "import console.cli"], tmp_path)
    assert "console.cli.jobs" in mods  # every command module was imported
    assert heavy(mods) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["ps", "--help"],
        ["submit", "--help"],
        ["top", "--help"],
        ["alerts", "--help"],
        ["watch", "--help"],
        ["notebook", "--help"],
        ["--version"],
    ],
)
def test_help_is_light(tmp_path: Path, args: list[str]) -> None:
    assert heavy(imported(["-m", "console.cli", *args], tmp_path)) == []


def test_help_lists_every_command() -> None:
    """Lazy imports must not drop a command from the group's help."""
    from click.testing import CliRunner

    from console.cli import main

    res = CliRunner().invoke(main, ["--help"], prog_name="gpuconsole")
    assert res.exit_code == 0
    listed = {
        line.split()[0] for line in res.output.split("Commands:")[1].splitlines() if line.strip()
    }
    assert listed == set(main.commands)
    assert {
        "ps",
        "submit",
        "logs",
        "top",
        "gpus",
        "watch",
        "alerts",
        "diagnose",
        "notebook",
        "cp",
        "shell",
        "exec",
        "describe",
        "stop",
        "rm",
    } <= listed


def named(names: tuple[str, ...], mods: set[str]) -> list[str]:
    """The ``names`` among ``mods`` (a package counts if any submodule is in)."""
    return [h for h in names if h in mods or any(m.startswith(h + ".") for m in mods)]


def test_ps_imports_no_launch_or_failure_path(tmp_path: Path) -> None:
    """``ps`` on an empty state dir with the bundled ``local`` profile, its engine socket
    missing (``$DOCKER_HOST``: the host is reported failed, exit 0), imports the service and
    the profile but not the launch path, the diagnosis or the fault parser."""
    missing = tmp_path / "no-docker.sock"
    mods = imported(["-m", "console.cli", "ps"], tmp_path, DOCKER_HOST=f"unix://{missing}")
    assert {"console.service", "console.jobs.status", "console.profiles"} <= mods
    assert named(NOT_FOR_PS, mods) == []


#: What ``ps`` does not import once its profile is in :mod:`console.profilecache`: PyYAML,
#: pydantic's plugin lookup (``importlib.metadata``), the alert rules' models (validated on
#: use), the fleet state and the log views' buffers.
NOT_FOR_CACHED_PS = (
    "yaml",
    "pydantic.plugin._loader",
    "importlib.metadata",
    "console.alerts.config",
    "console.fleet.state",
    "console.jobs.logbuffer",
    "rich",
)


def test_ps_with_a_cached_profile_validates_nothing(tmp_path: Path) -> None:
    """The first ``ps`` parses and validates the bundled profile and keeps it; the second
    takes it from the cache and imports none of :data:`NOT_FOR_CACHED_PS`."""
    env = {
        "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}",
        "GPUCONSOLE_CACHE_DIR": str(tmp_path / "cache"),
    }
    first = imported(["-m", "console.cli", "ps"], tmp_path, **env)
    assert {"yaml", "pydantic.plugin._loader", "importlib.metadata"} <= set(
        named(NOT_FOR_CACHED_PS, first)
    )
    assert len(list((tmp_path / "cache" / "profiles").glob("*.pickle"))) == 1
    second = imported(["-m", "console.cli", "ps"], tmp_path, **env)
    assert {"console.service", "console.profiles", "console.profilecache"} <= second
    assert named(NOT_FOR_CACHED_PS, second) == []


def test_named_sees_the_launch_path(tmp_path: Path) -> None:
    """The check above can fail: importing the launcher's module imports what it guards."""
    mods = imported(["-c", "import console.jobs.launch, console.jobs.status"], tmp_path)
    assert {"console.jobs.plan", "console.jobs.spec", "console.jobs.gang"} <= set(
        named(NOT_FOR_PS, mods)
    )


def test_gc_freeze_runs_after_the_commands_exit_handlers(tmp_path: Path) -> None:
    """A headless command registers :func:`console.cli.base.freeze_heap_at_exit` when it
    starts: exit handlers the command registers later run before it (heap not frozen yet),
    ones registered before the command after it, and what the command printed is flushed."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('before-command handler, frozen:',"
        " gc.get_freeze_count() > 0))\n"
        "from console.cli import main\n"
        "@main.command('x-probe')\n"
        "def probe() -> None:\n"
        "    atexit.register(lambda: print('command handler, frozen:',"
        " gc.get_freeze_count() > 0))\n"
        "    sys.stdout.write('command output, unflushed')\n"
        "main(['x-probe'], prog_name='gpuconsole')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(
        PYTHONPATH=str(ROOT),
        GPUCONSOLE_STATE_DIR=str(tmp_path / "state"),
        GPUCONSOLE_CONFIG_DIR=str(tmp_path / "config"),
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == [
        "command output, unflushedcommand handler, frozen: False",
        "before-command handler, frozen: True",
    ]


def test_collector_paused_restores_the_collector() -> None:
    """:func:`console.cli.base.collector_paused`: no collection inside, what was allocated
    there frozen after, the collector on again only if it was on (also when the block
    raises)."""
    import gc

    from console.cli.base import collector_paused

    was = gc.isenabled()
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
            kept = [{"n": i} for i in range(100)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)
        with pytest.raises(ValueError), collector_paused():
            raise ValueError("boom")
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()
