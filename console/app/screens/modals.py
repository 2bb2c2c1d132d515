"""Modal screens shared by the views: confirm an action, show text, ask for a value, help,
a notebook's URL, a new notebook's host and GPUs, submit a spec. Each has its own footer, so
the footer shows the modal's keys, not those of the view under it."""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import Worker

from console.errors import UsageError


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
    AUTO_FOCUS = "#no"  # (Screen's own focus on mount: no query of a screen being torn down)

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
        yield Footer(compact=True)

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
        yield Footer(compact=True)

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
        yield Footer(compact=True)

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
        from console.config import config_dir

        text.append(
            f"\nRemap keys by binding id (the right column) in "
            f"{config_dir() / 'config.yaml'}: keymap: {{<binding id>: <keys>}}, e.g. "
            "keymap: {jobs.stop: ctrl+k}\n",
            style="dim",
        )
        with VerticalScroll() as v:
            v.border_title = "Keys (? or escape closes)"
            yield Static(text, id="help-text")
        yield Footer(compact=True)

    def action_close(self) -> None:
        """Close."""
        self.dismiss(None)


class NotebookScreen(ModalScreen[None]):
    """A notebook's URL (with its token) and how it is reached; ``c`` copies the URL (OSC 52:
    the terminal must allow clipboard writes), ``o`` opens it in a browser, escape closes (the
    tunnel stays open while the console runs)."""

    DEFAULT_CSS = """
    NotebookScreen { align: center middle; }
    NotebookScreen > Vertical { width: 90%; max-width: 120; height: auto;
        border: thick $success; background: $surface; padding: 1 2; }
    NotebookScreen #url { margin: 1 0; color: $text; text-style: bold; }
    NotebookScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    NotebookScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("c", "copy", "Copy URL", id="notebook.copy"),
        Binding("o", "open", "Open in browser", id="notebook.open"),
        Binding("escape,q", "close", "Close", id="notebook.close"),
    ]

    def __init__(
        self, title: str, url: str, detail: str, open_browser: Callable[[str], object]
    ) -> None:
        """``open_browser(url)`` is called when the user asks for the browser (``o``)."""
        super().__init__()
        self.title_text = title
        self.url = url
        self.detail = detail
        self.open_browser = open_browser

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.title_text, style="bold"))
            yield Static(Text(self.url), id="url")
            yield Static(Text(self.detail, style="dim"), id="notebook-detail")
            with Horizontal():
                yield Button("Copy URL (c)", variant="primary", id="copy")
                yield Button("Open in browser (o)", id="open")
                yield Button("Close (esc)", id="close")
        yield Footer(compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"copy": self.action_copy, "open": self.action_open, "close": self.action_close}[
            event.button.id or "close"
        ]()

    def action_copy(self) -> None:
        """Copy the URL to the terminal's clipboard."""
        self.app.copy_to_clipboard(self.url)
        self.notify(
            "URL copied (through the terminal: OSC 52; if your terminal blocks "
            "clipboard writes, select the URL with the mouse, shift held)",
            title="notebook",
        )

    def action_open(self) -> None:
        """Open the URL in a browser."""
        self.open_browser(self.url)

    def action_close(self) -> None:
        """Close (the tunnel stays open)."""
        self.dismiss(None)


@dataclass(frozen=True)
class NotebookRequest:
    """What the new-notebook modal asks for.

    Attributes:
        host: a host of the profile.
        gpus: as ``--gpus`` takes them (``all``, ``N``, ``0,1``); ``""``: the default (one
            GPU on a GPU host, none elsewhere).
        workdir: the folder on the host mounted at ``/workspace``, or ``None`` (the default).
    """

    host: str
    gpus: str
    workdir: str | None


class NewNotebookScreen(ModalScreen[NotebookRequest | None]):
    """Host, GPUs and workdir of a new notebook; enter (or Start) starts it, escape cancels.

    ``check_gpus(text)`` returns why the GPUs text is not valid (shown here, the modal stays),
    or ``None``.
    """

    DEFAULT_CSS = """
    NewNotebookScreen { align: center middle; }
    NewNotebookScreen > Vertical { width: 80%; max-width: 100; height: auto;
        border: thick $primary; background: $surface; padding: 1 2; }
    NewNotebookScreen Label { margin-top: 1; }
    NewNotebookScreen #nb-error { color: $error; height: auto; }
    NewNotebookScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    NewNotebookScreen Button { margin-left: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="new_notebook.cancel")]
    AUTO_FOCUS = "#nb-gpus"

    def __init__(self, hosts: Sequence[str], check_gpus: Callable[[str], str | None]) -> None:
        super().__init__()
        self.hosts = list(hosts)
        self.check_gpus = check_gpus

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text("New notebook (JupyterLab in a container)", style="bold"))
            yield Label("Host:")
            yield Select(
                [(h, h) for h in self.hosts], allow_blank=False, value=self.hosts[0], id="nb-host"
            )
            yield Label("GPUs (all, a count or indices 0,1; empty: one on a GPU host):")
            yield Input(placeholder="default", id="nb-gpus")
            yield Label("Workdir on the host (mounted at /workspace; empty: the default):")
            yield Input(placeholder="~/gpuconsole/notebooks", id="nb-workdir")
            yield Static("", id="nb-error")
            with Horizontal():
                yield Button("Start (enter)", variant="success", id="start")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer(compact=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self._start()
        else:
            self.action_cancel()

    def _start(self) -> None:
        gpus = self.query_one("#nb-gpus", Input).value.strip()
        problem = self.check_gpus(gpus) if gpus else None
        if problem:
            self.query_one("#nb-error", Static).update(problem)
            return
        host = self.query_one("#nb-host", Select).value
        workdir = self.query_one("#nb-workdir", Input).value.strip()
        self.dismiss(NotebookRequest(str(host), gpus, workdir or None))

    def action_cancel(self) -> None:
        """Dismiss with ``None``."""
        self.dismiss(None)


class PathSuggester(Suggester):
    """Completes a spec path from what is on disk (the Input shows the rest dimmed; right
    arrow takes it): the first folder, ``.yaml`` or ``.yml`` file, by name, in the
    typed folder whose name starts with what follows the last ``/``; a folder gets a
    trailing ``/``. ``~`` is expanded to look, kept as typed. Hidden entries only after a
    typed ``.``."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        """The completed path, or ``None``."""
        if not value or "\n" in value:
            return None
        return await asyncio.to_thread(complete_path, value)


def complete_path(value: str) -> str | None:
    """``value`` completed by the first matching entry (see :class:`PathSuggester`)."""
    expanded = os.path.expanduser(value)
    head, tail = os.path.split(expanded)
    try:
        with os.scandir(head or ".") as entries:
            found = sorted(
                (e.name, e.is_dir())
                for e in entries
                if e.name.startswith(tail)
                and e.name != tail
                and (tail.startswith(".") or not e.name.startswith("."))
            )
    except OSError:
        return None
    for name, is_dir in found:
        if is_dir or name.endswith((".yaml", ".yml")):
            return value + name[len(tail) :] + ("/" if is_dir else "")
    return None


@dataclass(frozen=True)
class SubmitRequest:
    """What the submit modal asks for, as typed (kept for the next ``n``).

    Attributes:
        path: the job spec (``~`` expanded when planned).
        nodes: as ``--nodes``: a count or host names separated by commas; ``""``: the
            spec's.
        args: as ``--arg`` (each replaces the script's arguments), written as a shell would
            split them: ``--lr 3e-4 --name 'a b'``; ``""``: the spec's.
    """

    path: str = ""
    nodes: str = ""
    args: str = ""

    def overrides(self) -> dict[str, Any]:
        """The spec fields to override, as ``gpuconsole submit``'s flags give them
        (``None``: the spec's own).

        Raises:
            UsageError: no path, host names with an empty one, unclosed quotes in args.
        """
        if not self.path.strip():
            raise UsageError("no job spec given", "type the path of a YAML job spec")
        nodes: int | list[str] | None = None
        text = self.nodes.strip()
        if text.isascii() and text.isdigit():
            nodes = int(text)
        elif text:
            nodes = [n.strip() for n in text.split(",")]
            if not all(nodes):
                raise UsageError(
                    f"nodes (--nodes): {text!r} has an empty host name",
                    "a count like `2`, or host names like `gpu1,gpu2`",
                )
        try:
            args = shlex.split(self.args) if self.args.strip() else None
        except ValueError as e:  # "No closing quotation"
            raise UsageError(f"args (--arg): {e}", "close the quote, e.g. `--name 'a b'`") from e
        return {"nodes": nodes, "args": args}


SubmitPhase = Literal["editing", "planning", "confirming", "launching"]


class SubmitScreen(ModalScreen[None]):
    """Submit a spec: its path (completed from the disk), nodes and args overrides (as the
    CLI's ``--nodes`` and ``--arg``). Enter plans it; the modal stays, busy, while the plan
    and then the launch run (keys typed then are dropped, never answered for the user; ``q``
    quits once it is done), so
    an error shows here with everything typed kept, and escape while planning cancels the
    plan (a launch, all nodes or none, cannot be interrupted).

    ``start(screen, request)`` is called on enter; the app then calls :meth:`set_phase` and
    :meth:`show_error`, and dismisses the modal once the job launched.
    """

    DEFAULT_CSS = """
    SubmitScreen { align: center middle; }
    SubmitScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 1 2; }
    SubmitScreen Label { margin-top: 1; }
    SubmitScreen #submit-status { height: auto; max-height: 16; margin-top: 1; }
    SubmitScreen #submit-status.-error { color: $error; }
    SubmitScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    SubmitScreen Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="submit.cancel"),
        # a modal hides the app's keys: q while busy quits once the plan or launch is done
        # (App.action_quit waits for it); while editing, the fields take the q
        Binding("q", "app.quit", "Quit", id="submit.quit"),
    ]
    AUTO_FOCUS = "#submit-path"

    def __init__(
        self, request: SubmitRequest | None, start: Callable[[SubmitScreen, SubmitRequest], None]
    ) -> None:
        super().__init__()
        self.request = request or SubmitRequest()
        self.start = start
        self.phase: SubmitPhase = "editing"
        self.worker: Worker[None] | None = None
        """The plan or launch in flight (set by the app)."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                Text("Submit a job spec (its plan is shown before anything runs)", style="bold")
            )
            yield Label("Spec (YAML; → completes the path):")
            yield Input(
                self.request.path,
                placeholder="path/to/job.yaml",
                suggester=PathSuggester(),
                id="submit-path",
            )
            yield Label("Nodes (as --nodes: a count or hosts a,b; empty: the spec's):")
            yield Input(self.request.nodes, placeholder="the spec's", id="submit-nodes")
            yield Label(
                "Args (as --arg, replacing the script's: --lr 3e-4 'a b'; empty: the spec's):"
            )
            yield Input(self.request.args, placeholder="the spec's", id="submit-args")
            yield Static("", id="submit-status")
            with Horizontal():
                yield Button("Plan (enter)", variant="success", id="plan")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer(compact=True)

    def typed(self) -> SubmitRequest:
        """The values as typed now."""
        return SubmitRequest(
            *(self.query_one(f"#submit-{k}", Input).value for k in ("path", "nodes", "args"))
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._plan()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "plan":
            self._plan()
        else:
            self.action_cancel()

    def _plan(self) -> None:
        if self.phase == "editing":
            self.start(self, self.typed())

    def set_phase(self, phase: SubmitPhase, status: str = "") -> None:
        """``editing`` enables the fields; the other phases disable them (keys typed then
        go nowhere) and show ``status``."""
        self.phase = phase
        for widget in self.query("Input, Button"):
            widget.disabled = phase != "editing"
        box = self.query_one("#submit-status", Static)
        box.remove_class("-error")
        box.update(Text(status, style="bold" if phase != "editing" else ""))
        if phase == "editing" and self.focused is None:  # disabled fields lost the focus
            self.query_one("#submit-path", Input).focus()

    def show_error(self, text: str) -> None:
        """Back to editing with what was typed, the error shown."""
        self.set_phase("editing")
        box = self.query_one("#submit-status", Static)
        box.add_class("-error")
        box.update(Text(text))

    def action_cancel(self) -> None:
        """Close (editing); cancel the plan (planning); a launch cannot be interrupted."""
        if self.phase == "planning" and self.worker is not None:
            self.worker.cancel()
            self.show_error(
                "planning cancelled (the hosts keep only the synced workdir, a reusable cache)"
            )
        elif self.phase == "launching":
            self.notify(
                "launching: all nodes or none, it cannot be interrupted; wait for it",
                severity="warning",
            )
        elif self.phase == "editing":
            self.dismiss(None)
