"""``python -m console.cli``: the ``gpuconsole`` command."""

from console.cli import main

main()
