"""Modal screens shared by the views: confirm an action, show text, ask for a value, help."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    """Ask yes/no before an effect, showing exactly what will run where.

    Dismisses with ``True`` for yes (``y``/enter on Yes), ``False`` for no (``n``/escape).
    """

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 90%; max-width: 120; height: auto; max-height: 80%;
        border: thick $warning; background: $surface; padding: 1 2; }
    ConfirmScreen #detail { height: auto; max-height: 30; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; margin: 1 0; }
    ConfirmScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, title: str, detail: str, *, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        # the buttons come before the (scrolling) detail, so a long detail on a small
        # terminal never pushes them off the screen
        with Vertical():
            yield Label(Text(self.title_text, style="bold"))
            with Horizontal():
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")
            with VerticalScroll(id="detail"):
                yield Static(Text(self.detail), id="detail-text")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """Dismiss with the answer."""
        self.dismiss(yes)


class TextScreen(ModalScreen[None]):
    """A scrollable text (describe, errors); escape or q closes."""

    DEFAULT_CSS = """
    TextScreen { align: center middle; }
    TextScreen > VerticalScroll { width: 95%; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q", "close", "Close", id="text.close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll() as v:
            v.border_title = self.title_text
            yield Static(Text(self.text), id="text")

    def action_close(self) -> None:
        """Close."""
        self.dismiss(None)


class AskScreen(ModalScreen[str | None]):
    """Ask for one value (a spec path, ...); enter submits, escape cancels (``None``)."""

    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    AskScreen > Vertical { width: 80%; max-width: 100; height: auto; border: thick $primary;
        background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="ask.cancel")]

    def __init__(self, prompt: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.prompt)
            yield Input(self.value, placeholder=self.placeholder, id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        """Dismiss with ``None``."""
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every binding that applies here: keys, what it does and its id (for the keymap)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 110; height: 90%;
        border: thick $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str, str]]) -> None:
        """``rows``: (section, keys, description, binding id)."""
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        text = Text()
        section = None
        for sec, keys, desc, bid in self.rows:
            if sec != section:
                section = sec
                text.append(f"\n{sec}\n", style="bold underline")
            text.append(f"  {keys:<18}", style="bold cyan")
            text.append(f"{desc:<40}")
            text.append(f"{bid}\n", style="dim")
        text.append("\nRemap keys in config.yaml: keymap: {<binding id>: <keys>}\n", style="dim")
        with VerticalScroll() as v:
            v.border_title = "Keys (? or escape closes)"
            yield Static(text, id="help-text")

    def action_close(self) -> None:
        """Close."""
        self.dismiss(None)
