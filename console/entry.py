"""The ``gpuconsole`` entry point (``[project.scripts]``): :data:`console.cli.main`, imported
here so that Ctrl-C while the CLI is still importing ends the command like Ctrl-C anywhere
else (one ``interrupted`` line, exit status 130), not with a Python traceback.

Standard library only, so that nothing can be interrupted before the ``try`` is entered but
the interpreter's own start.

When this process is the command (:mod:`console` set its start-up handler), the end is ours
too: the interpreter's exit work that runs Python code (waiting for threads, :mod:`atexit`,
the last flush of stdout) is done inside the ``try``, where a Ctrl-C is handled, and SIGINT
is then blocked. The interpreter's finalization, which follows, removes its own SIGINT handler
early (CPython's ``_PySignal_Fini``): a SIGINT after that would kill the process (a shell's
130, but no ``interrupted`` line, and after the command's output). Blocked, it is dropped at
exit: the command ends with the status it had.

What comes before gpuconsole's first line is the interpreter's (see :mod:`console`).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # C: ``signal`` would import enum first
import sys

import console

TYPE_CHECKING = False  # typing itself is imported later, inside the ``try``
if TYPE_CHECKING:
    from typing import NoReturn

#: Exit status of a command ended by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED_EXIT = 130

_said_interrupted = False
#: Whether this process is the command (:func:`main` found the start-up handler).
_ours = False
#: Set by :func:`_end_of_command`: an interrupt caught in a finalizer or an :mod:`atexit`
#: callback from then on is raised by :func:`_end_of_command` itself, not sent again.
_ending = False
_interrupt_at_end = False


def main() -> None:
    """Run the ``gpuconsole`` command line (``sys.argv``).

    Click's own handling is kept (usage errors: message and exit 2; ``--help``), except that
    Ctrl-C while click parses or a command starts is ``interrupted`` and 130, like Ctrl-C in a
    running command (click would print ``Aborted!`` and exit 1). A second Ctrl-C while the
    first one is being handled ends the process at once, also 130.

    Raises:
        SystemExit: always, with the command's exit status.
    """
    global _said_interrupted, _ending, _interrupt_at_end, _ours
    _said_interrupted = _ending = _interrupt_at_end = False  # (a test calls main again)
    sys.unraisablehook = _redeliver_interrupt
    # decided while the start-up handler still holds SIGINT: nothing can interrupt this
    ours = _ours = _signal.getsignal(_signal.SIGINT) is console._interrupted_while_starting
    try:
        code = _main(ours)
    except KeyboardInterrupt:  # a second one, before _interrupted() took SIGINT over
        if ours:
            _interrupted_again()
        code = INTERRUPTED_EXIT
    raise SystemExit(code)


def _main(ours: bool) -> object:
    """:func:`main` but the second interrupt; returns the exit status (``SystemExit.code``)."""
    try:
        _take_over_interrupts()
        code = _command()
        if _said_interrupted:  # the command's run() was interrupted and said so
            return _interrupted(ours)
        if ours:
            _end_of_command()
        return code
    except Exception as e:
        if not _caused_by_interrupt(e):
            raise
        return _interrupted(ours)
    except KeyboardInterrupt:
        return _interrupted(ours)


def _command() -> object:
    """Parse ``sys.argv`` and run the command; its exit status (``SystemExit.code``)."""
    from click.exceptions import Abort, ClickException

    from console.cli import main as cli

    try:
        rv = cli.main(prog_name="gpuconsole", standalone_mode=False)
    except SystemExit as e:  # the app's status, a command's run()
        return e.code
    except ClickException as e:
        e.show()
        if _profile_after_command(e):
            sys.stderr.write(
                "  fix: -p/--profile goes before the command: gpuconsole -p PROFILE COMMAND ...\n"
            )
        return e.exit_code
    except Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        sys.stderr.write("Aborted!\n")  # end of input at a prompt
        return 1
    # standalone click exits 0 after a command returns; ``--help`` and ``ctx.exit(n)``
    # return their status here
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _take_over_interrupts() -> None:
    """From here on a Ctrl-C is a :class:`KeyboardInterrupt` that :func:`main` catches: the
    start-up handler of :mod:`console` (set while the command's modules were imported) is
    replaced by Python's own, and a SIGINT that a launcher kept blocked while the interpreter
    started (``env --block-signal=INT gpuconsole ...``) is let through now, inside the
    ``try``."""
    import signal

    if signal.getsignal(signal.SIGINT) is console._interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _end_of_command() -> None:
    """Do the interpreter's exit work that runs Python code here, where a Ctrl-C is handled:
    flush stdout and stderr, wait for the threads that are not daemons (``threading``'s own
    shutdown, with its exit hooks: executors join their workers), run the :mod:`atexit`
    callbacks, flush again; then block SIGINT for the finalization (module docstring).

    Run once more after an interrupt (handled by then by :func:`_interrupted_again`); each
    step is safe to repeat: the thread shutdown returns at once the second time, and
    :mod:`atexit` drops its callbacks once run.
    """
    global _ending, _interrupt_at_end
    _ending = True
    _flush_stdio()
    threading = sys.modules.get("threading")
    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx calls first
    if shutdown is not None:
        shutdown()
    import atexit

    atexit._run_exitfuncs()  # a callback's exception goes to sys.unraisablehook
    if _interrupt_at_end:
        _interrupt_at_end = False
        raise KeyboardInterrupt
    _flush_stdio()
    if sys.unraisablehook is _redeliver_interrupt:
        sys.unraisablehook = _ignore_late_interrupt
    import signal

    if hasattr(signal, "pthread_sigmask"):
        # runs the Python handler of a SIGINT that came just before the block takes effect
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _flush_stdio() -> None:
    """Flush stdout and stderr; a failure is left to the interpreter's own last flush (a
    closed stdout: see :mod:`console.cli.base`)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` was raised because of a Ctrl-C: a :class:`KeyboardInterrupt` in its
    ``__cause__``/``__context__`` chain. Python wraps what is raised inside some hooks, so an
    interrupt that lands there surfaces as another error: e.g. 3.11 re-raises an exception from
    ``__set_name__`` (run while a class body is built, so during imports) as ``RuntimeError``.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _redeliver_interrupt(u: sys.UnraisableHookArgs) -> None:
    """:data:`sys.unraisablehook` until the command is interrupted: a Ctrl-C that lands in a
    finalizer (``__del__``, a generator's close) would otherwise be printed with a traceback
    and lost; it is raised again in the main thread as the signal would have been (at the end
    of the command, by :func:`_end_of_command`).

    The interrupt is sent from another thread: sent from here, it would be taken inside this
    hook, which would print it as a failure of the hook."""
    global _interrupt_at_end
    if u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
        if _ending:
            _interrupt_at_end = True
            return
        import _thread

        _thread.start_new_thread(_thread.interrupt_main, ())
    else:
        sys.__unraisablehook__(u)


def _ignore_late_interrupt(u: sys.UnraisableHookArgs) -> None:
    """:data:`sys.unraisablehook` once the command has ended: an interrupt redelivered by
    :func:`_redeliver_interrupt` that lands in a finalizer has nothing left to stop."""
    if u.exc_type is None or not issubclass(u.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(u)


def say_interrupted() -> None:
    """Say ``interrupted`` on stderr, once per command (:func:`console.cli.base.run` says it
    where a command's coroutine was interrupted). When this process is the command, a further
    Ctrl-C from here on ends it at once (:func:`_interrupted_again`)."""
    global _said_interrupted
    if _ours:
        import signal

        signal.signal(signal.SIGINT, _interrupted_again)
    if not (_said_interrupted and _ours):  # (in-process tests call run() again and again)
        _said_interrupted = True
        try:
            sys.stderr.write("interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _interrupted(ours: bool) -> int:
    """End the command as interrupted: one ``interrupted`` line on stderr (:func:`say_interrupted`),
    exit status 130; when this process is the command, its end is run as after a normal one
    (:func:`_end_of_command`)."""
    say_interrupted()
    sys.unraisablehook = lambda _u: None  # finalizers of what the interrupt left half-built
    if ours:
        _end_of_command()
    return INTERRUPTED_EXIT


def _interrupted_again(signum: int = 0, frame: object = None) -> NoReturn:
    """SIGINT handler of the command once a first Ctrl-C is ending it (and what :func:`main`
    does with a second one that came before this handler was set): say ``interrupted`` unless
    said, and end the process at once with 130, without waiting for the end of the first
    (stdout's unwritten buffer is dropped)."""
    import os

    global _said_interrupted
    if not _said_interrupted:
        _said_interrupted = True
        try:
            os.write(2, b"interrupted\n")
        except OSError:
            pass
    os._exit(INTERRUPTED_EXIT)


def _profile_after_command(e: Exception) -> bool:
    """Whether click refused ``-p``/``--profile`` given after the command (``gpuconsole ps -p
    X``): the profile is the group's option, before the command."""
    from click.exceptions import NoSuchOption

    return isinstance(e, NoSuchOption) and e.option_name in ("-p", "--profile")
