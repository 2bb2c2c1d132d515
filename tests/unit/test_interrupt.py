"""Ctrl-C at any moment of a headless command: one ``interrupted`` line and exit status 130
(or the command's own result when it had already finished), never a Python traceback or a
"coroutine was never awaited" warning; also while the CLI is still importing
(:mod:`console.entry`) and while the process exits.

The launcher tests send real SIGINTs to the installed ``gpuconsole`` script and to ``python -m
console`` at delays spread from their exec to past their end, and judge each run by
:func:`judge` (no timed assertions: a run is judged by what it printed and its status, never
by when the signal came).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The line of ``console/__init__.py`` that sets the start-up handler: gpuconsole's first
#: line that a SIGINT cannot get past as a traceback.
_HANDLER_LINE = next(
    n
    for n, line in enumerate((ROOT / "console" / "__init__.py").read_text().splitlines(), 1)
    if line.strip().startswith("_signal.signal(_signal.SIGINT")
)


@dataclass
class SigintRun:
    """One run of a command that got a SIGINT ``delay_ms`` after its exec."""

    delay_ms: float
    returncode: int
    stdout: str
    #: stderr without the interpreter's ``-X importtime`` lines
    stderr: str
    #: the modules whose import had finished (``PYTHONPROFILEIMPORTTIME``), in order
    imported: list[str]

    def where(self) -> str:
        return (
            f"SIGINT {self.delay_ms:.1f} ms after exec: exit {self.returncode}\n"
            f"stderr: {self.stderr[-2500:]}\nstdout: {self.stdout[-300:]}"
        )


def _default_sigint() -> None:
    """In the child before exec: SIGINT as a shell leaves it (a test run as a background job
    would otherwise hand on an ignored SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sigint_run(
    argv: list[str], env: dict[str, str], cwd: Path, delay_ms: float, again_ms: float | None = None
) -> SigintRun:
    """Start ``argv``, send it SIGINT after ``delay_ms`` (and again ``again_ms`` later), and
    collect how it ended. The interpreter reports each finished import on stderr
    (``PYTHONPROFILEIMPORTTIME``), so a run tells how far the interpreter's start had got."""
    env = {**env, "PYTHONPROFILEIMPORTTIME": "1"}
    p = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    for wait_ms in (delay_ms, again_ms):
        if wait_ms is None:
            continue
        time.sleep(wait_ms / 1000)
        try:
            p.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
    out, err = p.communicate(timeout=120)
    imported: list[str] = []
    kept: list[str] = []
    for line in err.splitlines(keepends=True):
        if line.startswith("import time:"):
            imported.append(line.rsplit("|", 1)[-1].strip())
        else:
            kept.append(line)
    return SigintRun(delay_ms, p.returncode, out, "".join(kept), imported)


#: What :func:`judge` found a run to be.
INTERRUPTED = "interrupted"
FINISHED = "finished"
BEFORE_PYTHON_HANDLER = "killed before the interpreter's SIGINT handler"
INTERPRETER_START = "the interpreter's start, before gpuconsole's first line"

_NOISE = (
    "Traceback",
    "Exception ignored",
    "Fatal Python error",
    "never awaited",
    "Aborted",
    "Error processing line",
)


def _gpuconsole_frames(stderr: str) -> list[tuple[Path, int]]:
    """The frames of a traceback in gpuconsole's own files (console/, remote/)."""
    frames = []
    for f, line in re.findall(r'File "([^"]+)", line (\d+)', stderr):
        path = Path(f)
        if path.is_absolute() and any(path.is_relative_to(ROOT / d) for d in ("console", "remote")):
            frames.append((path, int(line)))
    return frames


#: CPython's report when checking the script path for zipimport fails (``pymain_run_python``)
_ARGV0_CHECK = "Failed checking if argv[0] is an import path entry\n"


def judge(run: SigintRun, finished: tuple[int, str | None]) -> str:
    """Assert that ``run`` ended as a Ctrl-C of gpuconsole may, and say which way.

    - :data:`INTERRUPTED`: exit 130 and one ``interrupted`` line, the last on stderr;
    - :data:`FINISHED`: the command's own result, ``finished`` (status, and stdout unless
      None), when the signal came too late to matter;
    - :data:`BEFORE_PYTHON_HANDLER`: killed by SIGINT (-2) with no output at all, and the
      import report shows the interpreter had not yet imported ``_signal`` (where it installs
      its SIGINT handler). Before that, SIGINT's action is the default one; after it, a SIGINT
      never kills gpuconsole (the end of the command blocks it, :mod:`console.entry`);
    - :data:`INTERPRETER_START`: Python's own report of a ``KeyboardInterrupt`` in its start,
      between installing its handler and running gpuconsole's first line (site and the
      ``.pth`` files, an editable install's finder, the launcher's ``import re``, runpy, the
      import system's search for ``console`` and its reading of ``console/__init__.py``).
      Its frames prove where: none is in gpuconsole's files but the top of
      ``console/__init__.py``, before its handler is set. From there on every interrupt of
      gpuconsole's code is raised under :func:`console.entry.main` (its frame is in the
      traceback), and an interrupt that a finalizer swallowed is printed ("Exception ignored
      in") only by Python's own hook, which ``main`` replaces first. Python then exits 1
      ("Fatal Python error: init_import_site") or dies by SIGINT, with no stdout; or, where
      its own code swallowed the interrupt ("Error processing line" of a ``.pth``,
      "Exception ignored in" an import lock's callback), carries on into gpuconsole, which
      must end as above. The same report without a traceback, exit 1 and nothing else, is
      an interrupt taken by the interpreter between its start and the script's first line:
      CPython's ``pymain_run_file_obj`` runs pending signal handlers (``Py_MakePendingCalls``)
      before it reads the launcher, and prints what they raised with no frame (exit 1, or
      death by a second SIGINT after the interpreter's exit reset its handler); the import
      report then shows that no import of ``console`` had begun. Before that, it asks
      zipimport whether the launcher is an archive: an interrupt there is printed as
      "Failed checking if argv[0] is an import path entry" and Python goes on into
      gpuconsole, which must end as above. No code of a package runs
      there, so no package can turn it into ``interrupted`` (module docstring of
      :mod:`console`).

    Anything else fails the test with the run's output.
    """
    where = run.where()
    status, stdout = finished
    if run.returncode == -signal.SIGINT and not run.stdout and not run.stderr:
        assert "_signal" not in run.imported, where
        return BEFORE_PYTHON_HANDLER
    if run.stderr.startswith(_ARGV0_CHECK):
        # CPython's pymain_run_python asked zipimport whether the launcher is an archive; the
        # interrupt landed there, Python printed it and went on to run the launcher
        assert "_signal" in run.imported, where
        lines = run.stderr.splitlines(keepends=True)
        end = next(i for i, ln in enumerate(lines) if ln.startswith("KeyboardInterrupt"))
        rest = "".join(lines[end + 1 :])
        judge(SigintRun(run.delay_ms, run.returncode, run.stdout, rest, run.imported), finished)
        return INTERPRETER_START
    if "Traceback" in run.stderr and all(
        path == ROOT / "console" / "__init__.py" and line < _HANDLER_LINE
        for path, line in _gpuconsole_frames(run.stderr)
    ):
        assert "_signal" in run.imported and "KeyboardInterrupt" in run.stderr, where
        report_end = max(
            run.stderr.rfind("Remainder of file ignored\n"),
            run.stderr.rfind("KeyboardInterrupt: \n"),
        )
        if report_end < 0:  # Python gave up
            assert run.returncode in (1, -signal.SIGINT) and not run.stdout, where
        else:  # Python carried on: what follows is gpuconsole's
            rest = run.stderr[run.stderr.index("\n", report_end) + 1 :]
            judge(SigintRun(run.delay_ms, run.returncode, run.stdout, rest, run.imported), finished)
        return INTERPRETER_START
    if run.stderr == "KeyboardInterrupt\n" and run.returncode in (1, -signal.SIGINT):
        # exit 1; or killed by a second SIGINT once the interpreter's exit had reset its handler
        assert not run.stdout and "_signal" in run.imported, where
        assert not any(m == "console" or m.startswith("console.") for m in run.imported), where
        return INTERPRETER_START
    for noise in _NOISE:
        assert noise not in run.stderr, where
    if run.returncode == 130:
        assert run.stderr.rstrip().splitlines()[-1:] == ["interrupted"], where
        assert run.stderr.count("interrupted") == 1, where
        return INTERRUPTED
    assert run.returncode == status, where
    assert stdout is None or run.stdout == stdout, where
    return FINISHED


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(
        PYTHONPATH=str(ROOT),
        GPUCONSOLE_STATE_DIR=str(tmp_path / "state"),
        GPUCONSOLE_CONFIG_DIR=str(tmp_path / "config"),
        GPUCONSOLE_CACHE_DIR=str(tmp_path / "cache"),
        DOCKER_HOST=f"unix://{tmp_path / 'no-docker.sock'}",
    )
    return env


def installed_script() -> Path:
    """The ``gpuconsole`` launcher pip installed next to this interpreter."""
    script = Path(sys.executable).parent / "gpuconsole"
    assert script.is_file(), f"{script} missing: `pip install -e .` into this venv"
    return script


def launcher_argv(launcher: str, *args: str) -> list[str]:
    """The command line of ``gpuconsole ARGS`` through ``launcher``."""
    if launcher == "installed script":
        return [str(installed_script()), *args]
    return [sys.executable, "-m", launcher.removeprefix("python -m "), *args]


def sweep(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    delays_ms: list[float],
    again_ms: float | None = None,
    same_stdout: bool = True,
) -> dict[str, list[float]]:
    """Judge a run of ``argv`` interrupted at each delay (each run judged by :func:`judge`
    against an uninterrupted run: its status, and its stdout if ``same_stdout``); the delays
    of each outcome."""
    plain = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    finished = (plain.returncode, plain.stdout if same_stdout else None)
    outcomes: dict[str, list[float]] = {}
    for d in delays_ms:
        run = sigint_run(argv, env, cwd, d, again_ms)
        outcomes.setdefault(judge(run, finished), []).append(d)
    return outcomes


#: From the exec to past the end of ``gpuconsole -p MISSING ps`` (about 150 ms on an idle
#: 2-core machine): every 4 ms, in an order that does not sweep the start monotonically.
DELAYS_MS = sorted((i * 4.0 for i in range(75)), key=lambda d: (d * 37) % 300)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["installed script", "python -m console"])
def test_ctrl_c_at_any_moment_of_each_launcher(tmp_path: Path, launcher: str) -> None:
    """``ps`` of a profile file that does not exist (exit 2, no hosts needed): start, imports,
    the command, its error and the process's exit all get a SIGINT."""
    argv = launcher_argv(launcher, "-p", str(tmp_path / "missing.yaml"), "ps")
    outcomes = sweep(argv, _env(tmp_path), tmp_path, DELAYS_MS)
    assert INTERRUPTED in outcomes, outcomes  # the check can fail: runs were interrupted


@pytest.mark.slow
def test_a_launcher_that_blocks_sigint_closes_the_interpreters_start(tmp_path: Path) -> None:
    """``env --block-signal=INT gpuconsole``: the interpreter starts with SIGINT blocked and
    :func:`console.entry.main` lets it through inside its ``try``, so no run gets Python's own
    report; a SIGINT before ``env`` blocks it kills ``env`` (no output, no imports)."""
    argv = [
        "env",
        "--block-signal=INT",
        *launcher_argv("installed script", "-p", str(tmp_path / "missing.yaml"), "ps"),
    ]
    outcomes = sweep(argv, _env(tmp_path), tmp_path, DELAYS_MS[::2])
    assert INTERPRETER_START not in outcomes, outcomes
    assert INTERRUPTED in outcomes, outcomes


def test_a_second_ctrl_c_while_the_first_is_handled(tmp_path: Path) -> None:
    """Two SIGINTs 1 ms apart: still one ``interrupted`` line and 130 (the second one ends
    the process at once)."""
    argv = launcher_argv("installed script", "-p", str(tmp_path / "missing.yaml"), "ps")
    outcomes = sweep(argv, _env(tmp_path), tmp_path, DELAYS_MS[::3], again_ms=1.0)
    assert INTERRUPTED in outcomes, outcomes


#: ``python -c`` probes that run the entry point as the command (``sys.argv[0]`` is
#: ``gpuconsole`` before :mod:`console` is imported) and send themselves a SIGINT at a point
#: of the process's end.
PROBE_END = """
import atexit, os, signal, sys, threading, time
sys.argv = ["gpuconsole", *sys.argv[2:]]
import console.entry
where = %r

class Late:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)

if where == "finalization":  # a module global: dropped in the interpreter's teardown
    late = Late()
elif where == "atexit":
    atexit.register(os.kill, os.getpid(), signal.SIGINT)
elif where == "thread join":  # a thread still running when the command returns
    def linger():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
    threading.Thread(target=linger).start()
console.entry.main()
"""


@pytest.mark.parametrize("where", ["finalization", "atexit", "thread join"])
def test_ctrl_c_while_the_process_exits(tmp_path: Path, where: str) -> None:
    """After the command's output: a SIGINT in the interpreter's finalization (its own handler
    removed by then) is dropped, exit 0; one while atexit callbacks run or while the exit
    waits for a thread is ``interrupted``, 130. Never killed by the signal (-2, which a shell
    shows as 130 with no ``interrupted`` line) and never "Exception ignored"."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE_END % where, "-", "--version"],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_default_sigint,
    )
    assert p.stdout == "gpuconsole, version 0.1.0\n", p.stderr
    if where == "finalization":
        assert (p.returncode, p.stderr) == (0, ""), p.stderr
    else:
        assert (p.returncode, p.stderr) == (130, "interrupted\n"), p.stderr


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


@pytest.mark.slow
def test_ctrl_c_anywhere_ends_ps_cleanly(tmp_path: Path) -> None:
    env = _env(tmp_path)
    codes = []
    for step in range(26):
        delay = 0.001 + step * 0.008
        p = subprocess.run(
            [sys.executable, "-c", PROBE, str(delay)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=_default_sigint,
        )
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


@pytest.mark.parametrize("launcher", ["installed script", "python -m console.cli"])
def test_ctrl_c_once_gpuconsole_code_runs(tmp_path: Path, launcher: str) -> None:
    """Each launcher, interrupted only once its first module of gpuconsole has run (what
    comes before is :data:`INTERPRETER_START`), at 26 moments of its imports."""
    env = _env(tmp_path)
    probe = [
        (PROBE_SCRIPT if launcher == "installed script" else PROBE_MODULE).replace(
            "INTERRUPT_ONCE_OURS", INTERRUPT_ONCE_OURS
        )
    ]
    extra = [str(installed_script())] if launcher == "installed script" else []
    codes = []
    for step in range(26):
        delay = 0.0005 + step * 0.004  # the imports before the entry point's `try`
        p = subprocess.run(
            [sys.executable, "-c", *probe, str(delay), *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=_default_sigint,
        )
        where = f"SIGINT after {delay * 1000:.1f} ms: exit {p.returncode}\n{p.stderr[-1500:]}"
        assert "Traceback" not in p.stderr and "never awaited" not in p.stderr, where
        assert p.returncode in (0, 130), where
        if p.returncode == 130:
            assert p.stderr.strip().splitlines()[-1] == "interrupted", where
            assert p.stderr.count("interrupted") == 1, where
        codes.append(p.returncode)
    assert codes.count(130) >= 13, codes  # the check can fail: most runs were interrupted


def test_importing_console_elsewhere_keeps_the_process_sigint_handling(tmp_path: Path) -> None:
    """Only the command itself ends at once on a Ctrl-C while it starts: a script or test
    that imports ``console`` keeps Python's KeyboardInterrupt."""
    code = (
        "import signal, console\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "print('kept')\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
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
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import console.cli
    import console.entry

    # how the interpreter reports it on this version: 3.11 wraps it in RuntimeError,
    # later versions let the KeyboardInterrupt itself through
    with pytest.raises(BaseException) as raised:
        _build_class_interrupted()
    assert isinstance(raised.value, KeyboardInterrupt) or isinstance(
        raised.value.__cause__, KeyboardInterrupt
    )

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
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
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


#: What a real run printed when its SIGINT was taken by CPython's pending calls just before it
#: read the launcher (CI, 15 ms after exec of ``gpuconsole ps``; imports in completion order).
_BARE_REPORT = SigintRun(
    15.0,
    1,
    "",
    "KeyboardInterrupt\n",
    [
        "_signal",
        "_io",
        "urllib.parse",
        "pathlib",
        "__editable___gpuconsole_0_1_0_finder",
        "_distutils_hack",
        "sitecustomize",
        "site",
    ],
)


def test_the_interpreters_frameless_report_before_the_launcher_runs() -> None:
    """Exit 1 and a bare ``KeyboardInterrupt`` is the interpreter's start while no import of
    ``console`` had begun; the same report once gpuconsole's code was being imported, or with
    output, is a failure of gpuconsole."""
    assert judge(_BARE_REPORT, (0, None)) == INTERPRETER_START
    for imported in (["console"], ["console.entry", "console"]):
        late = SigintRun(15.0, 1, "", "KeyboardInterrupt\n", _BARE_REPORT.imported + imported)
        with pytest.raises(AssertionError):
            judge(late, (0, None))
    with pytest.raises(AssertionError):
        judge(SigintRun(15.0, 1, "{}", "KeyboardInterrupt\n", _BARE_REPORT.imported), (0, None))


def test_the_interpreters_report_of_its_archive_check_then_gpuconsoles_own_result() -> None:
    """A real run (CI, 16 ms after exec of the launcher with a missing profile): the
    interrupt landed in zipimport's check of argv[0], Python printed it and went on, and
    gpuconsole ended with its own error (exit 2). Judged by what follows the report; the
    same report followed by a gpuconsole traceback fails."""
    report = (
        "Failed checking if argv[0] is an import path entry\n"
        "Traceback (most recent call last):\n"
        '  File "<frozen zipimport>", line 92, in __init__\n'
        "KeyError: '/tmp/ci8/.venv/bin/gpuconsole'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "<frozen zipimport>", line 94, in __init__\n'
        '  File "<frozen zipimport>", line 416, in _read_directory\n'
        "KeyboardInterrupt\n"
    )
    own = "error: profile file /x/missing.yaml does not exist\n  fix: give an existing YAML file\n"
    run = SigintRun(16.0, 2, "", report + own, _BARE_REPORT.imported + ["console"])
    assert judge(run, (2, "")) == INTERPRETER_START
    broken = SigintRun(16.0, 1, "", report + "Traceback (most recent call last):\n", [])
    with pytest.raises(AssertionError):
        judge(broken, (2, ""))


def test_a_second_sigint_after_the_frameless_report_kills_the_interpreter() -> None:
    """A real run (CI, a second SIGINT 1 ms after the first, 24 ms after exec): the bare
    report, then death by the second signal once the interpreter's exit reset its handler."""
    run = SigintRun(24.0, -signal.SIGINT, "", "KeyboardInterrupt\n", _BARE_REPORT.imported)
    assert judge(run, (2, "")) == INTERPRETER_START
