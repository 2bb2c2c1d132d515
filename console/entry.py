"""The ``gpuconsole`` entry point (``[project.scripts]``): :data:`console.cli.main`, imported
here so that Ctrl-C while the CLI is still importing ends the command like Ctrl-C anywhere
else (one ``interrupted`` line, exit status 130), not with a Python traceback.

Standard library only, so that nothing can be interrupted before the ``try`` is entered but
the interpreter's own start.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is imported later, inside the ``try``
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> None:
    """Run the ``gpuconsole`` command line (``sys.argv``).

    Click's own handling is kept (usage errors: message and exit 2; ``--help``), except that
    Ctrl-C while click parses or a command starts is ``interrupted`` and 130, like Ctrl-C in a
    running command (click would print ``Aborted!`` and exit 1).

    Raises:
        SystemExit: always, with the command's exit status.
    """
    sys.unraisablehook = _redeliver_interrupt
    try:
        _take_over_interrupts()
        from click.exceptions import Abort, ClickException

        from console.cli import main as cli

        try:
            rv = cli.main(prog_name="gpuconsole", standalone_mode=False)
        except ClickException as e:
            e.show()
            raise SystemExit(e.exit_code) from None
        except Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            sys.stderr.write("Aborted!\n")  # end of input at a prompt
            raise SystemExit(1) from None
        # standalone click exits 0 after a command returns; ``--help`` and ``ctx.exit(n)``
        # return their status here
        raise SystemExit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
    except Exception as e:
        if not _caused_by_interrupt(e):
            raise
        _interrupted()
    except KeyboardInterrupt:
        _interrupted()


def _take_over_interrupts() -> None:
    """From here on a Ctrl-C is a :class:`KeyboardInterrupt` that :func:`main` catches: the
    start-up handler of :mod:`console` (set while the command's modules were imported) is
    replaced by Python's own, and a SIGINT that a launcher kept blocked while the interpreter
    started (``env --block-signal=INT gpuconsole ...``) is let through now, inside the
    ``try``."""
    import signal

    import console

    if signal.getsignal(signal.SIGINT) is console._interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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
    and lost; it is raised again in the main thread as the signal would have been.

    The interrupt is sent from another thread: sent from here, it would be taken inside this
    hook, which would print it as a failure of the hook."""
    if u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
        import _thread

        _thread.start_new_thread(_thread.interrupt_main, ())
    else:
        sys.__unraisablehook__(u)


def _interrupted() -> NoReturn:
    """End the command as interrupted: one ``interrupted`` line on stderr, exit status 130.

    Raises:
        SystemExit: always, status 130.
    """
    sys.unraisablehook = lambda _u: None  # finalizers of what the interrupt left half-built
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(130) from None
