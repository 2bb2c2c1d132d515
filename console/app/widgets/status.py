"""The status line every screen shows: each host's connection state."""

from __future__ import annotations

from rich.text import Text

from console.app.widgets.oneline import OneLine

_HOST_STYLE = {"ok": "green", "stale": "yellow", "down": "red", "connecting": "cyan"}


class StatusLine(OneLine):
    """One line: each host's connection state (``a ● ok  b ● down: connection refused``)."""

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text; padding: 0 1; }
    """

    def on_mount(self) -> None:
        if not hasattr(self.app, "host_status"):  # an app without hosts (widget tests)
            self.display = False
            return
        self.watch(self.app, "host_status", self._show, init=True)

    def _show(self, value: tuple[tuple[str, str, str | None], ...]) -> None:
        text = Text()
        for host, status, reason in value:
            text.append(f"{host} ", style="bold")
            text.append("● ", style=_HOST_STYLE.get(status, ""))
            text.append(
                status + (f": {reason[:40]}" if reason and status == "down" else ""),
                style=_HOST_STYLE.get(status, ""),
            )
            text.append("   ")
        self.show(text)
