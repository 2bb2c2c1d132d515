"""``python -m console``: the ``gpuconsole`` command (see :mod:`console.entry`), with nothing
imported before the entry point's Ctrl-C handling but the ``console`` package docstring."""

from console.entry import main

main()
