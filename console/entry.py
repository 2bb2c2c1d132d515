"""The ``gpuconsole`` entry point (``[project.scripts]``): :data:`console.cli.main`, imported
here so that Ctrl-C while the CLI is still importing ends the command like Ctrl-C anywhere
else (one ``interrupted`` line, exit status 130), not with a Python traceback.

Standard library only, so that nothing can be interrupted before the ``try`` is entered but
the interpreter's own start.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run the ``gpuconsole`` command line (``sys.argv``).

    Click's own handling is kept (usage errors: message and exit 2; ``--help``), except that
    Ctrl-C while click parses or a command starts is ``interrupted`` and 130, like Ctrl-C in a
    running command (click would print ``Aborted!`` and exit 1).

    Raises:
        SystemExit: always, with the command's exit status.
    """
    try:
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
    except KeyboardInterrupt:
        sys.unraisablehook = lambda _u: None  # finalizers of what the interrupt left half-built
        try:
            sys.stderr.write("interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        raise SystemExit(130) from None
