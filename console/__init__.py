"""The operator side of gpuconsole: CLI, Textual app, job planning, local state, alerts.

``console`` imports ``remote``, never the reverse. Only ``console.app`` imports textual.

Imported first whenever the ``gpuconsole`` command starts (the installed script imports
``console.entry``; ``python -m console`` and ``python -m console.cli`` import this package
before their ``__main__``), so when this process is that command a Ctrl-C from here until
:func:`console.entry.main` takes over ends it as Ctrl-C does anywhere later: one
``interrupted`` line, exit status 130, no traceback of a half-done import (see
:func:`_interrupted_while_starting`); :mod:`console.entry` keeps that to the process's exit.
Other processes that import ``console`` (the log intake child, tests, a user's script) keep
their own SIGINT handling.

Before the first line of this file, the process is the interpreter's, and no package's code
can run there (pip writes the launcher, and Python imports ``site`` before it): a SIGINT that
comes before the interpreter installs its handler kills the process (the shell's 130, no
output); one that comes after, while ``site`` and the ``.pth`` files run (an editable
install's finder imports ``pathlib``), while the launcher imports ``re`` and the import system
looks for ``console``, or while ``runpy`` starts for ``-m``, gets Python's own report: a
``KeyboardInterrupt`` traceback and exit 1 ("Fatal Python error: init_import_site"), death
by SIGINT, or (taken by the interpreter's pending calls just before it reads the launcher) a
bare ``KeyboardInterrupt`` line and exit 1. That takes some 10 ms of an idle machine, tens of
ms of a busy one. Only a launcher that starts Python with SIGINT blocked closes it (``env
--block-signal=INT gpuconsole ...``: :func:`console.entry.main` lets the signal through
inside its ``try``). tests/unit/test_interrupt.py (``judge``) tells these apart from
gpuconsole's own outcomes.
"""

import _signal  # type: ignore[import-not-found]  # C: ``signal`` would import enum first
import os as _os
import sys as _sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """SIGINT before :func:`console.entry.main` runs: nothing has been done yet, so the
    command ends at once (``interrupted``, 130) rather than unwinding an import."""
    try:
        _os.write(2, b"interrupted\n")
    except OSError:
        pass
    _os._exit(130)


def _is_the_command() -> bool:
    """Whether this process is the ``gpuconsole`` command: the installed script (its name)
    or ``python -m console`` / ``python -m console.cli``."""
    if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "gpuconsole":
        return True
    argv = getattr(_sys, "orig_argv", [])
    for i, a in enumerate(argv[1:], 1):
        if a == "-m":
            return argv[i + 1 : i + 2] in (["console"], ["console.cli"])
        if a.startswith("-m"):
            return a[2:] in ("console", "console.cli")
        if a in ("-c", "-") or not a.startswith("-"):
            return False
    return False


if _is_the_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
