"""The interactive Textual console (the only package that imports textual).

Textual reads its settings from the environment when it is first imported, which is through
this package: the screen is updated up to 120 times a second (Textual's ``TEXTUAL_FPS``; at
its default, 60, a key waits 8 ms on average for the screen update that shows what it did),
unless the user set ``TEXTUAL_FPS`` themselves. Textual's ``Strip`` makes its caches on first
use (:mod:`console.app.strips`).
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "120")

from console.app.strips import install  # after TEXTUAL_FPS: imports textual

install()
