"""Ctrl-C at any moment of a headless command: one ``interrupted`` line and exit status 130
(or the command's own result when it had already finished), never a Python traceback or a
"coroutine was never awaited" warning; also while the CLI is still importing
(:mod:`console.entry`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Runs ``gpuconsole ps`` through the entry point with a real SIGINT sent to itself after
#: ``argv[1]`` seconds, counted from just before the entry point starts importing the CLI
#: (:mod:`console.entry` itself is imported first: the interpreter's own start is not ours).
PROBE = """
import os, signal, sys
import console.entry
delay = float(sys.argv[1])
signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
sys.argv = ["gpuconsole", "ps"]
signal.setitimer(signal.ITIMER_REAL, delay)
try:
    console.entry.main()
finally:  # a timer still pending would fire in the interpreter's shutdown
    signal.setitimer(signal.ITIMER_REAL, 0)
"""


def test_ctrl_c_anywhere_ends_ps_cleanly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(PYTHONPATH=str(ROOT), GPUCONSOLE_STATE_DIR=str(tmp_path / "state"),
               GPUCONSOLE_CONFIG_DIR=str(tmp_path / "config"),
               GPUCONSOLE_CACHE_DIR=str(tmp_path / "cache"),
               DOCKER_HOST=f"unix://{tmp_path / 'no-docker.sock'}")
    codes = []
    for step in range(26):
        delay = 0.001 + step * 0.008
        p = subprocess.run([sys.executable, "-c", PROBE, str(delay)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        where = f"SIGINT after {delay * 1000:.0f} ms: exit {p.returncode}\n{p.stderr[-1500:]}"
        assert "Traceback" not in p.stderr and "never awaited" not in p.stderr, where
        assert p.returncode in (0, 130), where
        if p.returncode == 130:
            assert p.stderr.strip().splitlines()[-1] == "interrupted", where
        codes.append(p.returncode)
    assert 130 in codes  # the check can fail: some runs were interrupted


#: The SIGALRM handler of the launcher probes: SIGINT once the ``console`` package's own
#: module has run (the next module of ours, ``console.entry`` or ``console.cli``, has begun),
#: else again 0.2 ms later. What comes before (the interpreter's start, runpy's and the import
#: system's search for ``console``) runs no code of gpuconsole.
INTERRUPT_ONCE_OURS = """(lambda *_: os.kill(os.getpid(), signal.SIGINT)
    if "console.entry" in sys.modules or "console.cli" in sys.modules
    else signal.setitimer(signal.ITIMER_REAL, 0.0002))"""

#: The same, through the installed ``gpuconsole`` script itself (pip's console_scripts
#: launcher, which imports ``re`` and ``console.entry`` before it calls ``main``): its code is
#: run as ``__main__`` with ``sys.argv[0]`` its path, the timer started before its first line.
PROBE_SCRIPT = """
import os, signal, sys
delay = float(sys.argv[1])
script = sys.argv[2]
signal.signal(signal.SIGALRM, INTERRUPT_ONCE_OURS)
code = compile(open(script).read(), script, "exec")
sys.argv = [script, "ps"]
signal.setitimer(signal.ITIMER_REAL, delay)
try:
    exec(code, {"__name__": "__main__", "__file__": script})
finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
"""

#: ``python -m console.cli ps``: runpy imports the ``console`` and ``console.cli`` packages
#: (click, every command module) before ``console/cli/__main__.py`` reaches the entry point;
#: the command line is the interpreter's (``sys.orig_argv``) as ``-m`` would leave it.
PROBE_MODULE = """
import os, runpy, signal, sys
delay = float(sys.argv[1])
signal.signal(signal.SIGALRM, INTERRUPT_ONCE_OURS)
sys.orig_argv = [sys.executable, "-m", "console.cli", "ps"]
sys.argv = ["-m", "ps"]
signal.setitimer(signal.ITIMER_REAL, delay)
try:
    runpy.run_module("console.cli", run_name="__main__", alter_sys=True)
finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
"""


def installed_script() -> Path:
    """The ``gpuconsole`` launcher pip installed next to this interpreter."""
    script = Path(sys.executable).parent / "gpuconsole"
    assert script.is_file(), f"{script} missing: `pip install -e .` into this venv"
    return script


@pytest.mark.parametrize("launcher", ["installed script", "python -m console.cli"])
def test_ctrl_c_in_the_first_milliseconds_of_each_launcher(tmp_path: Path,
                                                           launcher: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(PYTHONPATH=str(ROOT), GPUCONSOLE_STATE_DIR=str(tmp_path / "state"),
               GPUCONSOLE_CONFIG_DIR=str(tmp_path / "config"),
               GPUCONSOLE_CACHE_DIR=str(tmp_path / "cache"),
               DOCKER_HOST=f"unix://{tmp_path / 'no-docker.sock'}")
    probe = [(PROBE_SCRIPT if launcher == "installed script" else PROBE_MODULE).replace(
        "INTERRUPT_ONCE_OURS", INTERRUPT_ONCE_OURS)]
    extra = [str(installed_script())] if launcher == "installed script" else []
    codes = []
    for step in range(26):
        delay = 0.0005 + step * 0.004  # the imports before the entry point's `try`
        p = subprocess.run([sys.executable, "-c", *probe, str(delay), *extra], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60, check=False)
        where = f"SIGINT after {delay * 1000:.1f} ms: exit {p.returncode}\n{p.stderr[-1500:]}"
        assert "Traceback" not in p.stderr and "never awaited" not in p.stderr, where
        assert p.returncode in (0, 130), where
        if p.returncode == 130:
            assert p.stderr.strip().splitlines()[-1] == "interrupted", where
            assert p.stderr.count("interrupted") == 1, where
        codes.append(p.returncode)
    assert codes.count(130) >= 13, codes  # the check can fail: most runs were interrupted


def test_importing_console_elsewhere_keeps_the_process_sigint_handling(
        tmp_path: Path) -> None:
    """Only the command itself ends at once on a Ctrl-C while it starts: a script or test
    that imports ``console`` keeps Python's KeyboardInterrupt."""
    code = ("import signal, console\n"
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "print('kept')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
                       check=False)
    assert p.returncode == 0 and p.stdout == "kept\n", p.stderr


class _InterruptedWhileNamed:
    """A descriptor whose ``__set_name__`` is hit by Ctrl-C, as a class attribute of a module
    being imported can be (``platform.uname_result`` under ``click``'s imports)."""

    def __set_name__(self, owner: type, name: str) -> None:
        raise KeyboardInterrupt


def _build_class_interrupted() -> None:
    class _Built:
        attr = _InterruptedWhileNamed()


def test_interrupt_wrapped_by_python_is_still_interrupted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import console.cli
    import console.entry

    # how the interpreter reports it on this version: 3.11 wraps it in RuntimeError,
    # later versions let the KeyboardInterrupt itself through
    with pytest.raises(BaseException) as raised:
        _build_class_interrupted()
    assert isinstance(raised.value, KeyboardInterrupt) or isinstance(
        raised.value.__cause__, KeyboardInterrupt)

    def interrupted_main(*a: object, **k: object) -> None:
        _build_class_interrupted()

    monkeypatch.setattr(sys, "argv", ["gpuconsole", "ps"])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(console.cli.main, "main", interrupted_main)
    with pytest.raises(SystemExit) as ended:
        console.entry.main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_other_errors_are_not_taken_for_interrupts(monkeypatch: pytest.MonkeyPatch) -> None:
    import console.cli
    import console.entry

    def failing_main(*a: object, **k: object) -> None:
        try:
            raise ValueError("first")
        except ValueError as e:
            raise RuntimeError("second") from e

    monkeypatch.setattr(sys, "argv", ["gpuconsole", "ps"])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(console.cli.main, "main", failing_main)
    with pytest.raises(RuntimeError, match="second"):
        console.entry.main()


class _InterruptedWhileFinalized:
    def __del__(self) -> None:
        raise KeyboardInterrupt


def test_interrupt_in_a_finalizer_is_not_lost(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import console.cli
    import console.entry

    def main_finalizing(*a: object, **k: object) -> int:
        _InterruptedWhileFinalized()  # dropped at once: __del__ runs here
        for _ in range(2000):  # the interrupt comes back within a thread switch (5 ms)
            time.sleep(0.001)
        return 0

    monkeypatch.setattr(sys, "argv", ["gpuconsole", "ps"])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(console.cli.main, "main", main_finalizing)
    with pytest.raises(SystemExit) as ended:
        console.entry.main()
    assert ended.value.code == 130
    err = capsys.readouterr().err
    assert err == "interrupted\n", err
