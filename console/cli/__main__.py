"""``python -m console.cli``: the ``gpuconsole`` command (see :mod:`console.entry`)."""

from console.entry import main

main()
