"""The interactive Textual console (the only package that imports textual).

Textual reads its settings from the environment when it is first imported, which is through
this package: the screen is updated up to 240 times a second (Textual's ``TEXTUAL_FPS``),
unless the user set ``TEXTUAL_FPS`` themselves. A screen update waits for the next tick of
that rate after the last one; while the log panes draw a frame (one screen update per pane)
the ticks are busy, and at Textual's default, 60, a key waited up to 17 ms for the update
that shows what it did (4 ms at 240). Textual's ``Strip`` makes its caches on first
use (:mod:`console.app.strips`).
"""

import os

os.environ.setdefault("TEXTUAL_FPS", "240")

from console.app.strips import install  # after TEXTUAL_FPS: imports textual

install()
