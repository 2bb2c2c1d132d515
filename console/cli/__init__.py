"""The headless CLI: ``gpuconsole submit|notebook|ps|logs|stop|rm|exec|shell|describe|cp``,
``stacks``, ``top``, ``gpus``, ``report``, and ``watch|alerts|diagnose`` for on-call.

:data:`main` is the click group (the ``gpuconsole`` entry point); each module below adds its
commands to it. The CLI only parses, calls :class:`console.service.Service` and prints (see
:mod:`console.cli.base` for the output and exit-code conventions).
"""

from __future__ import annotations

from console.cli import (  # noqa: F401  (each registers its commands)
    alerts,
    bench,
    cp,
    diagnose,
    fleet,
    jobs,
    notebook,
    report,
    shell,
    stacks,
    submit,
    watch,
)
from console.cli.base import main, run

__all__ = ["main", "run"]
