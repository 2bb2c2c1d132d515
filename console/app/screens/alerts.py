"""The alerts view: every firing alert of the rule engine (``console/alerts``), most severe
first, with its state (firing, acknowledged, silenced), age, rule, subject and summary.

Keys: ``a`` acknowledge (keeps it listed, no more notifications), ``s`` silence it for an hour,
enter on a job's alert opens that job's log panes. The screen never calls the engine itself:
it asks the app, whose workers post typed messages back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from console.alerts.model import Alert
from console.alerts.rows import age_text, alert_state, subject
from console.app.host import AppHost, host
from console.app.lifecycle import can_draw, seen
from console.app.widgets.footer import FittedFooter
from console.app.widgets.status import StatusLine
from console.app.widgets.tables import cursor_key

COLUMNS = ("SEV", "STATE", "FOR", "RULE", "WHERE", "SUMMARY")
_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
#: How long ``s`` silences an alert, in seconds.
SILENCE_S = 3600.0


def row_cells(alert: Alert, now: float) -> tuple[Text | str, ...]:
    """The table cells of one alert (times from its ``since``, Unix s)."""
    state = alert_state(alert, now)
    return (
        Text(alert.severity, style=_SEVERITY_STYLE.get(alert.severity, "")),
        Text(state, style="bold" if state == "firing" else "dim"),
        age_text(now - alert.since),
        alert.rule,
        subject(alert),
        alert.summary,
    )


#: Details the detail lines show by name (the rest follow, sorted by key).
_LEAD = ("diagnosis", "fix", "cause")


def detail_text(alert: Alert, now: float) -> Text:
    """The selected alert in full under the table: its key and state, the diagnosis and fix
    of a job alert, then the other details sorted by name (``usd_per_hour 12.5``)."""
    text = Text(alert.key, style="bold")
    text.append(
        f"  {alert_state(alert, now)}, since "
        f"{time.strftime('%H:%M:%S', time.localtime(alert.since))}"
    )
    if alert.silenced_until is not None and alert.silenced(now):
        text.append(
            f", silenced until {time.strftime('%H:%M', time.localtime(alert.silenced_until))}"
        )
    details = alert.details
    if diagnosis := details.get("diagnosis"):
        text.append(f"\n{diagnosis}", style="red")
    if fix := details.get("fix"):
        text.append(f"\nfix: {fix}", style="yellow")
    rest = [
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in sorted(details.items())
        if v is not None and k not in _LEAD
    ]
    if rest:
        text.append("\n" + "  ".join(rest), style="dim")
    return text


#: The alerts view's footer keys, most important first (those left out are in ``?``).
ALERTS_FOOTER_KEEP = (
    "help",
    "quit",
    "ack",
    "silence",
    "logs",
    "show('fleet')",
    "show('jobs')",
    "show('alerts')",
)


class AlertsScreen(Screen[None]):
    """The alerts table (see the module docstring)."""

    BINDINGS = [
        Binding("a", "ack", "Acknowledge", id="alerts.ack"),
        Binding("s", "silence", "Silence 1h", id="alerts.silence"),
        Binding("enter,l", "logs", "Job logs", id="alerts.logs"),
    ]
    DEFAULT_CSS = """
    AlertsScreen DataTable { height: 1fr; }
    AlertsScreen #alerts-empty { height: auto; padding: 1 2; color: $text-muted; }
    AlertsScreen #alerts-detail { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="alerts")
        self.clock = clock
        self.alerts: list[Alert] = []
        self._composed = False

    @property
    def gc(self) -> AppHost:
        """The app, as a screen may use it (:class:`~console.app.host.AppHost`)."""
        return host(self.app)

    def compose(self) -> ComposeResult:
        table: DataTable[Text | str] = DataTable(
            cursor_type="row", zebra_stripes=True, id="alerts-table"
        )
        table.add_columns(*COLUMNS)
        yield table
        yield Static("no alerts firing", id="alerts-empty")
        yield Static(id="alerts-detail")
        yield StatusLine()
        yield FittedFooter(keep=ALERTS_FOOTER_KEEP)

    def on_mount(self) -> None:
        self._composed = True
        self.query_one(DataTable).focus()
        self._draw()

    def on_screen_resume(self) -> None:
        self._draw()

    def update_alerts(self, alerts: Sequence[Alert] | None = None) -> None:
        """Show ``alerts`` (``None``: the ones shown, re-rendered); the cursor stays on the
        same alert. Kept until the table is there (shown on mount) and never drawn while the
        screen is being removed."""
        if alerts is not None:
            self.alerts = list(alerts)
        self._draw()

    def _draw(self) -> None:
        if not can_draw(self, self._composed) or not seen(self):
            return  # under another screen: drawn by on_screen_resume when shown again
        table = self.query_one(DataTable)
        current = self.selected()
        now = self.clock()
        table.clear()
        for a in self.alerts:
            table.add_row(*row_cells(a, now), key=a.key)
        self.query_one("#alerts-empty").display = not self.alerts
        if current is not None and any(a.key == current.key for a in self.alerts):
            table.move_cursor(row=table.get_row_index(current.key))
        self._show_detail()

    def selected(self) -> Alert | None:
        """The alert under the cursor, or ``None`` (also while the table is not there)."""
        if not can_draw(self, self._composed):
            return None
        key = cursor_key(self.query_one(DataTable))
        return next((a for a in self.alerts if a.key == key), None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_logs()

    def _show_detail(self) -> None:
        if not can_draw(self, self._composed):
            return
        alert = self.selected()
        detail = self.query_one("#alerts-detail", Static)
        if alert is None:
            detail.update("")
            return
        detail.update(detail_text(alert, self.clock()))

    def _need(self) -> Alert | None:
        alert = self.selected()
        if alert is None:
            self.notify("no alert selected", severity="warning")
        return alert

    def action_ack(self) -> None:
        """Acknowledge the alert: it stays listed until it resolves, without more pages."""
        alert = self._need()
        if alert is not None:
            self.gc.acknowledge_alert(alert.key)

    def action_silence(self) -> None:
        """Silence the alert's notifications for an hour."""
        alert = self._need()
        if alert is not None:
            self.gc.silence_alert(alert.key, SILENCE_S)

    def action_logs(self) -> None:
        """The log panes of the alert's job (for job alerts)."""
        alert = self._need()
        if alert is None:
            return
        job = (
            next(
                (
                    j
                    for j in self.gc.service.store.jobs()
                    if j.name == alert.job and j.state in ("running", "failed", "pending")
                ),
                None,
            )
            if alert.job
            else None
        )
        if job is None:
            self.notify("this alert is not about a job", severity="information")
            return
        self.gc.open_logs(job)
