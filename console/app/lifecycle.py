"""When a screen or widget may be queried and drawn.

The app pushes data into its screens from events, timers and workers, which run on their own
tasks and may reach a screen at any point of its life: installed but not composed yet, in its
``on_mount``, or while Textual removes it (its children go first, then its own ``Unmount``;
``is_mounted`` stays true the whole time). Every screen therefore keeps what it was given as
state, and draws it only while :func:`can_draw` holds; ``on_mount`` draws what arrived before.
A screen under another opaque one keeps what arrives and draws it when it is shown again
(:func:`seen`, ``on_screen_resume``).
"""

from __future__ import annotations

from typing import Any

from textual.dom import DOMNode
from textual.screen import Screen


def removing(node: DOMNode) -> bool:
    """Whether Textual is removing ``node`` (pruning it or its parent, closing it, or shutting
    the app down, which closes every node, children too, in no order): its children may
    already be gone. Reads Textual's own flags (``_pruning`` is set on the whole subtree before
    anything is removed; ``_closing``/``_closed`` when its message loop ends; the app stops
    running first thing in its shutdown)."""
    return node._pruning or node._closing or node._closed or not node.app.is_running


def can_draw(node: DOMNode, composed: bool) -> bool:
    """Whether ``node``'s children may be queried and updated now: ``composed`` (the node's
    own flag, set first thing in its ``on_mount``, as ``is_mounted`` turns true only after
    that handler) and not being removed."""
    return composed and not removing(node)


def seen(screen: Screen[Any]) -> bool:
    """Whether ``screen`` is on the terminal: the top screen, or the one under a translucent
    top screen (a dialog). Textual repaints the whole top screen whenever a screen under it
    changes (it may show through), so a screen under an opaque one (the fleet table under the
    log panes) draws nothing until it is shown again."""
    app = screen.app
    if not screen.is_current:  # Textual's: the top screen or one that may show through
        return False
    return app.screen is screen or app.screen.styles.background.a < 1
