"""The stacks view: every rank's Python stack of one job, as ``gpuconsole stacks`` prints it
(the likely cause first, then the rank groups, torchrun's agents, the ranks' children and what
could not be read), scrollable; ``r`` takes them again, ``c`` copies the text to the
clipboard (the terminal's, OSC 52), ``s`` saves it in the state dir."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.app.failures import reported
from console.jobs.store import JobRecord

#: takes the job's stacks and returns them as text, with whether they are partial
Take = Callable[[JobRecord], Awaitable[tuple[str, bool]]]


class StacksScreen(ModalScreen[None]):
    """One job's stacks (see the module docstring)."""

    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 95%; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1; }
    """
    BINDINGS = [
        Binding("r", "take", "Take again", id="stacks.refresh"),
        Binding("c", "copy", "Copy", id="stacks.copy"),
        Binding("s", "save", "Save", id="stacks.save"),
        Binding("escape,q", "close", "Close", id="stacks.close"),
    ]

    def __init__(self, job: JobRecord, take: Take, save_dir: Path) -> None:
        super().__init__()
        self.job = job
        self._take = take
        self.save_dir = save_dir
        self.text = ""
        self.taking = False

    def compose(self) -> ComposeResult:
        with VerticalScroll() as v:
            v.border_title = f"stacks {self.job.id}"
            yield Static(Text(f"taking the stacks of every rank of {self.job.id}…"), id="stacks")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.action_take()

    def action_take(self) -> None:
        """Take every rank's stack again (py-spy on each node)."""
        if not self.taking:
            self.taking = True
            self.query_one(VerticalScroll).border_subtitle = "taking…"
            self._run()

    @work(group="stacks", exit_on_error=False)
    @reported("stacks")
    async def _run(self) -> None:
        try:
            text, partial = await self._take(self.job)
        finally:
            self.taking = False
        self.show(text, partial)

    def show(self, text: str, partial: bool) -> None:
        """Show a capture's text (``partial``: some node or rank could not be read)."""
        self.text = text
        if not self.is_mounted:
            return
        scroll = self.query_one(VerticalScroll)
        scroll.border_subtitle = time.strftime("taken %H:%M:%S") + (" · partial" if partial else "")
        self.query_one("#stacks", Static).update(Text(text))

    def action_copy(self) -> None:
        """Copy the text (OSC 52: the terminal's clipboard, also over SSH)."""
        if self.text:
            self.app.copy_to_clipboard(self.text)
            self.notify("stacks copied to the clipboard", title="stacks")

    def action_save(self) -> None:
        """Save the text as ``<state dir>/stacks/<job id>-<time>.txt`` and say where."""
        if not self.text:
            return
        path = self.save_dir / f"{self.job.id}-{time.strftime('%Y%m%d-%H%M%S')}.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.text + "\n")
        except OSError as e:
            self.notify(f"not saved to {path}: {e.strerror or e}", title="stacks", severity="error")
            return
        self.notify(f"saved to {path}", title="stacks")

    def action_close(self) -> None:
        """Close."""
        self.dismiss(None)
