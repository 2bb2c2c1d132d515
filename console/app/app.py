"""The interactive console: ``gpuconsole`` with no subcommand.

Screens: fleet (default, ``1``), jobs (``2``), alerts (``3``; a toast for each new alert), log
panes of a job (pushed from jobs or fleet).
The app owns one :class:`console.service.Service`; it subscribes to the service's events
(coalesced: latest per host/job per burst) and turns them into typed Textual messages. Calls
into the engine run in workers; results come back as messages; no worker touches a widget.

Bindings carry ids (``app.fleet``, ``jobs.stop``, ``logs.search``...) so ``config.yaml``'s
``keymap`` can remap them; ``?`` lists them all. ``--readonly`` hides stop, submit, exec and
the notebooks (opening one exposes a shell-capable Jupyter; starting one starts a container).

Notebooks (jobs of kind ``notebook``): ``o`` in the jobs view opens a tunnel to the selected
one's JupyterLab over SSH (:meth:`console.service.Service.attach_notebook`, in a worker) and
shows its URL; the tunnel is kept, one per notebook, until the notebook ends or the app exits
(a second ``o`` shows the same URL). ``N`` asks for host, GPUs and workdir, then plans, submits
and opens a new one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time
import webbrowser
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen

from console.alerts.engine import AlertWatcher
from console.alerts.model import AlertChanged
from console.app.failures import reported
from console.app.gcpolicy import GcPolicy
from console.app.host import AppHost
from console.app.messages import (
    AlertsUpdated,
    ArchiveUpdated,
    FollowStateUpdated,
    HostStatusUpdated,
    JobsListed,
    JobUpdated,
    LogLinesArrived,
    NotebookOpened,
    ProgressUpdated,
)
from console.app.screens.alerts import AlertsScreen
from console.app.screens.fleet import FleetScreen
from console.app.screens.jobs import JobsScreen, JobsTable
from console.app.screens.modals import (
    AskScreen,
    ConfirmScreen,
    HelpScreen,
    NewNotebookScreen,
    NotebookRequest,
    NotebookScreen,
    SubmitRequest,
    SubmitScreen,
    TextScreen,
)
from console.config import AppConfig
from console.events import (
    ArchiveStateChanged,
    ContainersMapped,
    Event,
    FollowStateChanged,
    HostStateChanged,
    JobChanged,
    LogLinesReceived,
    ProgressRead,
    SampleReceived,
    Subscription,
)
from console.jobs.store import JobRecord
from console.service import Service, Submission, not_running_hint
from remote.errors import GpuConsoleError

if TYPE_CHECKING:
    from console.notebook.attach import NotebookTunnel

log = logging.getLogger("gpuconsole.app")

T = TypeVar("T")

INPUT_SWITCH_INTERVAL_S = 0.001
"""``sys.setswitchinterval`` while the app runs (CPython's default: 0.005 s): how long Textual's
input thread may wait for the GIL while the event loop runs Python."""

BENCH_POLL_S = 5.0
"""Seconds between two looks at the bench results file (a stat; re-read when it changed)."""

#: Actions that change remote state or expose a shell on a host, hidden by ``--readonly``
#: (``notebook`` opens a notebook's JupyterLab, which runs code in its container).
WRITE_ACTIONS = frozenset({"stop", "submit", "exec", "remove", "notebook", "new_notebook"})

_MODIFIERS = ("ctrl+", "shift+", "alt+", "super+", "meta+", "hyper+")


def valid_key(key: str) -> bool:
    """Whether Textual knows ``key`` (``j``, ``ctrl+f``, ``f5``, ``question_mark``...)."""
    from textual.keys import Keys, _character_to_key, key_to_character

    base = key.strip()
    while base.startswith(_MODIFIERS):
        base = base.split("+", 1)[1]
    if len(base) == 1:
        return base.isprintable() and not base.isspace()
    if base in {_character_to_key(chr(c)) for c in range(33, 127)}:
        return True  # a printable character by the name Textual gives it: slash, question_mark
    return (
        base in {k.value for k in Keys}
        or key_to_character(base) is not None
        or (base in ("space", "tab", "enter", "escape", "backspace", "delete", "insert"))
    )


def _binding_scopes() -> list[tuple[type, ...]]:
    """The classes whose bindings are active together (the app's, a screen's, its
    widgets'): a key may be bound once per scope."""
    from console.app.screens.logs import LogsScreen
    from console.app.screens.stacks import StacksScreen
    from console.app.widgets.fleet import FleetTable
    from console.app.widgets.logpane import LogPane, LogPrompt
    from console.app.widgets.logpanes import LogPanes

    screens: list[tuple[type, ...]] = [
        (FleetScreen, FleetTable),
        (JobsScreen, JobsTable),
        (AlertsScreen,),
        (LogsScreen, LogPanes, LogPane),
        (LogsScreen, LogPanes, LogPrompt),
    ]
    # a modal hides the app's bindings (Textual's modal binding chain)
    modals: list[tuple[type, ...]] = [
        (ConfirmScreen,),
        (TextScreen,),
        (AskScreen,),
        (SubmitScreen,),
        (HelpScreen,),
        (NotebookScreen,),
        (NewNotebookScreen,),
        (StacksScreen,),
    ]
    return [(GpuConsoleApp, *classes) for classes in screens] + modals


def _bindings(cls: type) -> list[Binding]:
    return [b for b in getattr(cls, "BINDINGS", []) if isinstance(b, Binding) and b.id]


def binding_ids() -> set[str]:
    """Every binding id of the app's screens and widgets (what a keymap may name)."""
    return {b.id for scope in _binding_scopes() for cls in scope for b in _bindings(cls) if b.id}


def _key_name(key: str) -> str:
    """``?`` and ``question_mark`` are one key: Textual's name for it."""
    from textual.keys import _character_to_key

    key = key.strip()
    return _character_to_key(key) if len(key) == 1 else key


def _default_keys(b: Binding) -> set[str]:
    return {_key_name(k) for k in b.key.split(",")}


def keymap_errors(keymap: dict[str, str]) -> list[tuple[str, str]]:
    """Problems of a ``config.yaml`` keymap as ``(binding id, message)``: unknown binding ids
    (with the closest id), keys Textual does not know, and a key given to a binding while
    another binding of the same screen (or the app's) keeps it, which would silently take
    that binding's place (both ids named). Empty when it is fine."""
    import difflib

    known = binding_ids()
    errors: list[tuple[str, str]] = []
    for bid, keys in keymap.items():
        if bid not in known:
            close = difflib.get_close_matches(bid, sorted(known), n=1)
            errors.append(
                (
                    bid,
                    f"keymap: unknown binding id {bid!r}"
                    + (f" (did you mean {close[0]!r}?)" if close else ""),
                )
            )
        for key in keys.split(","):
            if not valid_key(key):
                errors.append(
                    (
                        bid,
                        f"keymap: {bid}: {key.strip()!r} is not a key "
                        "(examples: j, ctrl+f, f5, question_mark)",
                    )
                )
    said: set[tuple[str, str]] = set()
    for scope in _binding_scopes():
        owner: dict[str, Binding] = {}
        for b in (b for cls in scope for b in _bindings(cls)):
            assert b.id is not None
            for key in keymap.get(b.id, b.key).split(","):
                name = _key_name(key)
                other = owner.setdefault(name, b)
                if (
                    other is b
                    or other.id == b.id
                    or name in _default_keys(b) & _default_keys(other)
                ):  # no clash, or one the defaults mean (a modal's q closes it)
                    continue
                moved, kept = (b, other) if b.id in keymap else (other, b)
                pair = (str(moved.id), str(kept.id))
                if pair in said:
                    continue
                said.add(pair)
                errors.append(
                    (
                        pair[0],
                        (
                            f"keymap: {moved.id}: {key.strip()!r} is already the key of {kept.id} "
                            f"({kept.description or kept.action}), which it would replace; give "
                            f"{moved.id} another key, or move {kept.id} as well "
                            f"(e.g. {kept.id}: ctrl+{name if len(name) == 1 else 'x'})"
                        ),
                    )
                )
    return errors


class GpuConsoleApp(App[int]):
    """The console (see the module docstring).

    Args:
        service: the engine (the app closes it on exit).
        config: settings (keymap, intervals, buffer sizes).
        readonly: hide the actions that change remote state or expose a shell (stop, submit,
            exec, open and start notebooks).
        replay: show a telemetry recording instead of live hosts (``top --record``). A
            recording holds the fleet's telemetry and nothing else: the jobs view shows no
            job (not the local store's live ones; it says why), no alert rule runs, and the
            app is read-only (a submit or stop would act on live hosts the view does not
            show).
        replay_speed: pace of the replay (0: as fast as possible).
        clock: wall clock (Unix s) for job ages; frozen in snapshot tests.
        monotonic: the clock samples are received on (host ages in the fleet view).
        live: poll the hosts (jobs, telemetry); ``False`` only in tests that feed data.
    """

    TITLE = "gpuconsole"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("1", "show('fleet')", "Fleet", id="app.fleet"),
        Binding("2", "show('jobs')", "Jobs", id="app.jobs"),
        Binding("3", "show('alerts')", "Alerts", id="app.alerts"),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="app.interrupt"),
    ]

    host_status: reactive[tuple[tuple[str, str, str | None], ...]] = reactive(())

    def __init__(
        self,
        service: Service,
        *,
        config: AppConfig | None = None,
        readonly: bool = False,
        replay: Path | None = None,
        replay_speed: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        live: bool = True,
    ) -> None:
        super().__init__()
        self.service = service
        self.config = config or AppConfig()
        self.readonly = readonly or replay is not None
        self.replay = replay
        self.replay_speed = replay_speed
        self.gc_policy = GcPolicy()
        self._switch_interval: float | None = None  # the interpreter's, while the app runs
        """The cyclic-GC policy (:mod:`console.app.gcpolicy`), started after the first
        screen; screens call its ``sweep`` at natural pauses."""
        self.replay_ended = False
        """The replay fed its last sample (``--replay``)."""
        self.clock = clock
        self.monotonic = monotonic
        self.live = live
        self._sub: Subscription | None = None
        self.alerts: AlertWatcher | None = None
        """The alert rule engine over the live fleet (``None`` in replays and tests that
        feed data)."""
        self._fleet_dirty = False
        self.handed_over = False
        """The terminal belongs to a child (a shell, a console browser): the app is suspended
        and draws nothing (:meth:`hand_terminal`)."""
        self.tunnels: dict[str, NotebookTunnel] = {}
        """Open notebook tunnels by job id (one per notebook; closed when it ends and at
        exit)."""
        self._attaching: set[str] = set()
        self._submit_request: SubmitRequest | None = None
        """What the submit modal had when last used (an error keeps it for the next try)."""
        self._tunnels_closed = False
        self._hosts: dict[str, tuple[str, str | None]] = {
            h: ("connecting", None) for h in ([] if replay else service.profile.hosts)
        }
        # the three installed screens, held here: data is pushed into them from events,
        # timers and workers at any point of their life (they keep it until they can draw
        # it), also while Textual shuts down and no longer lists them
        self.fleet_screen = FleetScreen(clock=monotonic)
        self._bench_stamp: int | None = None
        if not replay:  # the last bench of each GPU: a line under the table
            self._bench_stamp = service.bench_stamp()
            self.fleet_screen.set_bench(service.bench_lines())
        self.jobs_screen = JobsScreen(clock=clock)
        self.alerts_screen = AlertsScreen(clock=clock)
        if self.config.theme:
            self.theme = self.config.theme
        if self.config.keymap:
            self.set_keymap(self.config.keymap)

    # -- lifecycle --------------------------------------------------------------------------

    def on_mount(self) -> None:
        self._sub = self.service.bus.subscribe(self._on_event, coalesce=True)
        self.install_screen(self.fleet_screen, name="fleet")
        self.install_screen(self.jobs_screen, name="jobs")
        self.install_screen(self.alerts_screen, name="alerts")
        self.push_screen("fleet")
        self._publish_hosts()
        if self.replay is not None:
            self.service.start_replay(self.replay, speed=self.replay_speed)
            self._announce_replay_end()
        elif self.live:
            self.service.start_fleet(interval=self.config.interval)
            self.start_alerts()
        self._fleet_timer = self.set_interval(0.5, self.refresh_fleet_view)
        if self.replay is None:
            self.set_timer(BENCH_POLL_S, self._poll_bench)
        if self.replay is not None:  # a recording has no jobs: the store's are live ones
            self.jobs_screen.set_empty_text(
                f"replay of {self.replay}: a recording (`top --record`) holds the fleet's "
                "telemetry, not its jobs, so none is shown here (the live jobs: gpuconsole "
                "without --replay, or `gpuconsole ps`)"
            )
        else:
            # what is known first (the store: last known states); a live reconcile, which
            # waits for every host up to its deadline, replaces it when it is done
            self.post_message(JobsListed(self.service.store.jobs()))
            if self.live:
                self.refresh_jobs()
        self.call_after_refresh(self.gc_policy.start)
        # Textual reads keys on a thread of its own: while the event loop runs Python (a log
        # frame, a drain), that thread waits for the GIL up to the switch interval (5 ms by
        # default) before it can pass a key on; 1 ms keeps a key's wait short
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(INPUT_SWITCH_INTERVAL_S)

    @work(group="replay", exit_on_error=False)
    @reported("replay")
    async def _announce_replay_end(self) -> None:
        """Say when the recording is over: the view then holds its last samples."""
        try:
            n = await self.service.replay_finished()
        except ValueError as e:
            self.notify(f"replay stopped: {e}", title="replay", severity="error", timeout=30)
            return
        self.replay_ended = True
        self.sub_title = "replay ended"
        self.notify(
            f"replay ended after {n} samples: the view shows the last ones",
            title="replay",
            timeout=30,
        )

    @work(group="alerts", exit_on_error=False)
    @reported("alerts")
    async def start_alerts(self) -> None:
        """Run the profile's alert rules over the live fleet and the jobs (``console/alerts``);
        a store that cannot be opened is said once, the app runs on without alerts."""
        watcher = AlertWatcher(self.service)
        try:
            await watcher.start()
        except GpuConsoleError as e:
            self.notify(f"alerts are off: {e.message}", title="alerts", severity="error")
            return
        self.alerts = watcher
        self.alerts_screen.update_alerts(watcher.active())

    async def on_unmount(self) -> None:
        await self.close_tunnels()
        if self.alerts is not None:
            await self.alerts.close()
        self.gc_policy.stop()
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
        if self._sub is not None:
            self._sub.close()
        await self.service.close()

    async def close_tunnels(self) -> None:
        """Close every notebook tunnel (the notebooks keep running on their hosts); at exit,
        and no tunnel is kept after it."""
        self._tunnels_closed = True
        tunnels, self.tunnels = list(self.tunnels.items()), {}
        for job_id, tunnel in tunnels:
            try:
                await asyncio.wait_for(tunnel.close(), 5.0)
            except Exception as e:  # a dead connection: nothing left to close
                log.info("notebook %s: closing its tunnel: %r", job_id, e)

    def _on_event(self, ev: Event) -> None:
        """Service events -> messages (runs on the loop; never raises into the service)."""
        if isinstance(ev, (SampleReceived, ContainersMapped)):
            self._fleet_dirty = True
        elif isinstance(ev, HostStateChanged):
            self._fleet_dirty = True
            self.post_message(HostStatusUpdated(ev.host, ev.status, ev.reason))
        elif isinstance(ev, JobChanged):
            self.post_message(JobUpdated(ev.job))
        elif isinstance(ev, LogLinesReceived):
            self.post_message(LogLinesArrived(ev.job_id, ev.lines, ev.shown))
        elif isinstance(ev, FollowStateChanged):
            self.post_message(FollowStateUpdated(ev.job_id, ev.node_rank, ev.state, ev.detail))
        elif isinstance(ev, ArchiveStateChanged):
            self.post_message(ArchiveUpdated(ev.job_id, ev.node_rank, ev.error, ev.hint))
        elif isinstance(ev, AlertChanged) and self.alerts is not None:
            self.post_message(AlertsUpdated(ev, self.alerts.active()))
        elif isinstance(ev, ProgressRead):
            self.post_message(ProgressUpdated(ev.progress))

    def report_failure(self, error: Exception, title: str) -> None:
        """Say why a worker failed (:mod:`console.app.failures`: the one place for every
        worker of the app and its screens)."""
        if isinstance(error, GpuConsoleError):
            self.notify(
                f"{error.message}\nfix: {error.hint}" if error.hint else error.message,
                title=title,
                severity="error",
                timeout=15,
            )
            return
        log.error("%s: a worker failed", title, exc_info=error)
        self.notify(
            f"{type(error).__name__}: {error} (details in the log)",
            title=title,
            severity="error",
            timeout=15,
        )

    def _publish_hosts(self) -> None:
        self.host_status = tuple((h, s, r) for h, (s, r) in self._hosts.items())

    def refresh_fleet_view(self, *, force: bool = False) -> None:
        """Show the fleet state if anything arrived (the app calls it twice a second)."""
        if not (self._fleet_dirty or force) or self.service.fleet is None:
            return
        self._fleet_dirty = False
        state = self.service.fleet
        self.fleet_screen.update_fleet(state)
        self.jobs_screen.update_jobs(usage=state.job_usage())
        for name, v in state.hosts.items():  # the fleet state is the truth for the line
            self._hosts[name] = (v.status, v.error)
        self._publish_hosts()

    def _poll_bench(self) -> None:
        """Show a bench that ended since (``gpuconsole bench`` in another terminal): the
        results file is re-read when its mtime moved; then the poll re-arms."""
        stamp = self.service.bench_stamp()
        if stamp != self._bench_stamp:
            self._bench_stamp = stamp
            self.fleet_screen.set_bench(self.service.bench_lines())
        self.set_timer(BENCH_POLL_S, self._poll_bench)

    # -- messages ---------------------------------------------------------------------------

    def on_fleet_screen_job_selected(self, m: FleetScreen.JobSelected) -> None:
        """A GPU row of a job was chosen in the fleet view: open that job's log panes."""
        self._with_job(m.job_id, self.open_logs)

    def on_fleet_screen_stop_job(self, m: FleetScreen.StopJob) -> None:
        """``S`` on a job's process in the fleet view: stop that job, confirmed as from the
        jobs view (``--readonly`` never gets here: the key is hidden)."""
        self._with_job(m.job_id, self.confirm_stop)

    @work(group="locate", exit_on_error=False)
    @reported("job")
    async def _with_job(self, job_id: str, then: Callable[[JobRecord], None]) -> None:
        """``then(job)`` for the job with this id: from the store, else adopted from the
        hosts (a job another console submitted: :meth:`Service.locate_job`)."""
        job = self.service.store.get(job_id)
        if job is None:
            try:
                job = await self.service.locate_job(job_id)
            except GpuConsoleError as e:
                self.notify(e.message, title="job", severity="warning")
                return
            self.post_message(JobUpdated(job))
        then(job)

    def on_alerts_updated(self, m: AlertsUpdated) -> None:
        """Refresh the alerts view; a new alert (not silenced) pops a toast."""
        self.alerts_screen.update_alerts(m.active)
        self.jobs_screen.update_alerts(m.active)
        alert = m.change.alert
        if m.change.change != "fired" or alert.silenced(m.change.at) or alert.acked_at:
            return
        self.notify(
            f"{alert.summary}\n(3: alerts, a: acknowledge)",
            title=f"{alert.severity} alert: {alert.rule}",
            severity="error" if alert.severity == "critical" else "warning",
            timeout=15,
        )

    def on_host_status_updated(self, m: HostStatusUpdated) -> None:
        self._hosts[m.host] = (m.status, m.reason)
        self._publish_hosts()

    def on_progress_updated(self, m: ProgressUpdated) -> None:
        self.jobs_screen.update_progress({p.job_id: p for p in m.progress})

    def on_jobs_listed(self, m: JobsListed) -> None:
        self.jobs_screen.update_jobs(m.jobs)
        self._close_ended_tunnels(m.jobs)

    def on_job_updated(self, m: JobUpdated) -> None:
        self.jobs_screen.update_job(m.job)
        self._forward_to_logs(m)
        self._close_ended_tunnels([m.job])

    def on_notebook_opened(self, m: NotebookOpened) -> None:
        """Show the notebook's URL (copy, open in a browser)."""
        t = m.tunnel
        server = t.server
        version = f"; Jupyter Server {t.version}" if t.version else ""
        detail = (
            f"Forwarding 127.0.0.1:{t.local_port} -> {server.host}:127.0.0.1:{server.port} "
            f"over SSH{version}. The tunnel stays open while the console runs (o shows "
            f"this again); the notebook keeps running after you quit: `gpuconsole "
            f"notebook {m.job_id}` re-attaches, S stops it."
        )
        if isinstance(self.screen, NotebookScreen):
            self.pop_screen()
        self.push_screen(
            NotebookScreen(
                f"Notebook {m.job_id} on {server.host}", t.url, detail, self.open_browser
            )
        )

    def _close_ended_tunnels(self, jobs: Iterable[JobRecord]) -> None:
        """Close the tunnels of notebooks that are no longer running (said once)."""
        for j in jobs:
            if j.id in self.tunnels and (j.state not in ("running", "pending") or j.removed_at):
                tunnel = self.tunnels.pop(j.id)
                self.notify(
                    f"notebook {j.id} is {j.state}: its tunnel is closed",
                    title="notebook",
                    severity="warning",
                )
                self.run_worker(tunnel.close(), group="notebook-close", exit_on_error=False)

    def on_log_lines_arrived(self, m: LogLinesArrived) -> None:
        self._forward_to_logs(m)

    def on_follow_state_updated(self, m: FollowStateUpdated) -> None:
        self._forward_to_logs(m)

    def on_archive_updated(self, m: ArchiveUpdated) -> None:
        """Say that a node's log archive cannot be written (a toast that stays 30 s, and the
        job's log panes say it in their header until it is written again), or that it is
        written again."""
        self._forward_to_logs(m)
        where = f"job {m.job_id} node {m.node_rank}"
        if m.error is None:
            self.notify(f"{where}: its log is archived again", title="log archive")
            return
        fix = f"\nfix: {m.hint}" if m.hint else ""
        self.notify(
            f"{where}: its log cannot be archived: {m.error}\nthe panes go on; its "
            f"lines are kept and archived once the state dir can be written{fix}",
            title="log archive",
            severity="error",
            timeout=30,
        )

    def _forward_to_logs(
        self, m: LogLinesArrived | JobUpdated | FollowStateUpdated | ArchiveUpdated
    ) -> None:
        """Post ``m`` to every log screen in the stack (a copy each: a message is handled
        once); their handlers take what concerns their jobs."""
        from console.app.screens.logs import LogsScreen

        for screen in self.screen_stack:
            if isinstance(screen, LogsScreen):
                screen.post_message(dataclasses.replace(m))

    # -- actions ----------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Quit; a submit or stop in flight finishes first (a launch is all or nothing, and
        leaving in its middle would leave the hosts half-made or the job unrecorded)."""
        busy = [w for w in self.workers if w.group in ("submit", "stop") and not w.is_finished]
        if not busy:
            self.exit()
            return
        self.notify("waiting for the submit/stop in flight to finish…", timeout=30)

        async def finish_then_exit() -> None:
            for w in busy:
                try:
                    await w.wait()
                except Exception as e:  # its own failure was already shown
                    log.info("worker %s ended with %s", w.name, e)
            self.exit()

        self.run_worker(finish_then_exit(), group="quit", exclusive=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide the write actions in ``--readonly`` mode, and the key of the view shown
        (``2`` on the jobs view: the footer has no room for a key that does nothing)."""
        if self.readonly and action in WRITE_ACTIONS:
            return False
        if self.replay is not None and action == "reconcile":
            return False  # no live jobs in a replay
        if action == "show" and parameters and self.is_running:
            try:
                return self.screen is not self.get_screen(str(parameters[0]))
            except KeyError:
                return True
        return True

    def action_show(self, name: str) -> None:
        """Switch to the fleet, jobs or alerts screen (closing log panes)."""
        while len(self.screen_stack) > 2:
            self.pop_screen()
        if self.screen is not self.get_screen(name):
            self.switch_screen(name)

    def help_rows(self) -> list[tuple[str, str, str, str]]:
        """(section, keys, description, id) of every binding that applies on this screen,
        focused widget first, the app's last; a key is listed once for what it does here.

        A priority binding (the app's ctrl+c) takes its key before any other: bindings of
        that key elsewhere in the chain never run, so they are not listed. A Textual
        widget's or screen's own binding (no id) of a key that one of the console's
        bindings (with an id) also has is not listed either: the console's says what the
        key does here (a table's enter, ``select_cursor``, selects the row, which the
        screen turns into its ``enter,l`` Logs; the log panes' tab moves between panes).
        Bindings with ids are all listed, also two of one key: the first may pass it on
        (escape clears a pane's search, else goes back)."""
        chain = self.screen._binding_chain
        priority = {
            key
            for _, bindings in chain
            for key, blist in bindings.key_to_bindings.items()
            if any(b.priority for b in blist)
        }
        ours = {
            key
            for _, bindings in chain
            for key, blist in bindings.key_to_bindings.items()
            if any(b.id for b in blist)
        }
        grouped: dict[tuple[str, str], tuple[list[str], Binding]] = {}
        for node, bindings in chain:
            section = type(node).__name__.removesuffix("Screen")
            if section == type(self).__name__:
                section = "App"
            for key, blist in bindings.key_to_bindings.items():
                for b in blist:
                    if self.check_action(b.action.split("(")[0], ()) is False:
                        continue  # hidden here (--readonly, a replay)
                    if key in priority and not b.priority:
                        continue
                    if not b.id and key in ours:
                        continue
                    keys, _ = grouped.setdefault((section, b.id or b.action), ([], b))
                    display = self.get_key_display(Binding(key, b.action))
                    if display not in keys:
                        keys.append(display)
        return [
            (sec, ",".join(keys), b.description or b.action, b.id or "")
            for (sec, _), (keys, b) in grouped.items()
        ]

    def action_help(self) -> None:
        """Show every binding of this screen with its id."""
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.help_rows()))

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """Save an SVG screenshot (the palette's Screenshot, ``App.action_screenshot``) to
        ``path``, else :func:`screenshot_dir`, and say where; a failure says the full path
        and the OS's reason. Returns the file's path, or ``None`` when it was not saved."""
        try:
            directory = Path(path).expanduser() if path else screenshot_dir()
        except GpuConsoleError as e:  # no state dir to fall back on
            self.notify(
                f"screenshot not saved: {e.message}",
                title="screenshot",
                severity="error",
                timeout=15,
            )
            return None
        stamp = time.strftime(time_format or "%Y-%m-%dT%H_%M_%S")
        target = (directory / (filename or f"gpuconsole_{stamp}.svg")).absolute()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            target.write_text(self.export_screenshot(), encoding="utf-8")
        except OSError as e:
            self.notify(
                f"screenshot not saved to {target}: {e.strerror or e}",
                title="screenshot",
                severity="error",
                timeout=15,
            )
            return None
        self.notify(f"saved {target}", title="screenshot", timeout=10)
        return str(target)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette: Textual's own commands plus the views and job actions."""
        yield from super().get_system_commands(screen)
        yield SystemCommand("Fleet", "GPUs of every host", lambda: self.action_show("fleet"))
        yield SystemCommand("Jobs", "jobs and their state", lambda: self.action_show("jobs"))
        yield SystemCommand(
            "Alerts", "firing alerts (acknowledge, silence)", lambda: self.action_show("alerts")
        )
        if self.replay is None:
            yield SystemCommand("Refresh jobs", "reconcile with the hosts", self.refresh_jobs)
        for j in sorted(self.jobs_screen.jobs.values(), key=lambda j: -j.created_at)[:20]:
            yield SystemCommand(
                f"Logs {j.id}", f"{j.state}: log panes of {j.name}", lambda j=j: self.open_logs(j)
            )
            if not self.readonly and j.state in ("running", "pending"):
                yield SystemCommand(
                    f"Stop {j.id}",
                    "SIGTERM, then SIGKILL after the grace",
                    lambda j=j: self.confirm_stop(j),
                )
                if j.kind == "notebook":
                    yield SystemCommand(
                        f"Open notebook {j.id}",
                        "a tunnel and its URL",
                        lambda j=j: self.open_notebook(j),
                    )
        if not self.readonly:
            yield SystemCommand(
                "New notebook", "JupyterLab in a container on a host", self.ask_new_notebook
            )

    # -- operations (workers; results come back as messages or notifications) ---------------

    @work(exclusive=True, group="jobs-refresh", exit_on_error=False)
    @reported("jobs")
    async def refresh_jobs(self) -> None:
        """Reconcile the jobs with the hosts; re-arms itself after it finished (a failure
        is said by :meth:`report_failure`, and retried; never in a replay: it shows the
        recording's fleet only)."""
        if self.replay is not None:
            return
        warnings: list[str] = []
        try:
            jobs = await self.service.list_jobs(warn=warnings.append)
            self.post_message(JobsListed(jobs))
            for w in warnings[:3]:
                log.info("jobs: %s", w)
        finally:
            if self.live and self.replay is None:
                self.set_timer(self.config.jobs_refresh_s, self.refresh_jobs)

    @work(group="alerts-ack", exit_on_error=False)
    @reported("alerts")
    async def acknowledge_alert(self, key: str) -> None:
        """Acknowledge a firing alert: no more notifications for it (stored: ``watch`` in
        another process sees it too)."""
        if self.alerts is None:
            return
        try:
            await self.alerts.acknowledge(key, by="gpuconsole app")
        except KeyError:
            self.notify(f"{key} is no longer firing", severity="warning")

    @work(group="alerts-ack", exit_on_error=False)
    @reported("alerts")
    async def silence_alert(self, key: str, seconds: float) -> None:
        """Silence an alert's notifications for ``seconds``."""
        if self.alerts is not None:
            await self.alerts.silence(duration_s=seconds, key=key, comment="from the app")
            self.notify(f"{key} silenced for {seconds / 3600:g} h")

    def open_logs(self, job: JobRecord) -> None:
        """Push the log panes of a job."""
        from console.app.screens.logs import LogsScreen

        self.push_screen(LogsScreen(job, buffer_lines=self.config.log_buffer_lines))

    def confirm_stop(self, job: JobRecord) -> None:
        """Ask, showing each ``docker stop`` that will run, then stop the job."""
        if self.readonly:
            return
        preview = self.service.stop_preview(job)
        if not preview:
            self.notify(f"job {job.id} is not running ({job.state})", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(job)

        self.push_screen(
            ConfirmScreen(f"Stop job {job.id}?", "\n".join(preview), yes="Stop"), answered
        )

    @work(group="stop", exit_on_error=False)
    @reported("stop failed")
    async def _stop(self, job: JobRecord) -> None:
        self.notify(f"stopping {job.id}…")
        out = await self.service.stop(job)
        if out.stopped:
            self.notify(f"job {out.job.id} {out.job.state}", title="stopped")
        else:
            self.notify(f"job {out.job.id} was not running ({out.job.state})")

    def confirm_remove(self, job: JobRecord) -> None:
        """Ask, listing what ``rm`` removes where, then remove a finished job's containers
        (as ``gpuconsole rm``); a running (or starting) job is refused: stop it first."""
        if self.readonly:
            return
        if job.removed_at is not None:
            self.notify(
                f"job {job.id} was already removed (its logs stay readable)", severity="warning"
            )
            return
        if job.state in ("running", "pending"):
            what = "running" if job.state == "running" else "starting"
            self.notify(
                f"job {job.id} is {what}: stop it first (S), then remove it",
                title="remove",
                severity="warning",
            )
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._remove(job)

        self.push_screen(
            ConfirmScreen(
                f"Remove job {job.id}?", "\n".join(self.service.remove_preview(job)), yes="Remove"
            ),
            answered,
        )

    @work(group="stop", exit_on_error=False)
    @reported("remove failed")
    async def _remove(self, job: JobRecord) -> None:
        self.notify(f"removing {job.id}…")
        out = await self.service.remove(job)
        self.notify(
            f"job {out.id} removed; `gpuconsole logs {out.id}` still shows its lines",
            title="removed",
        )
        self.post_message(JobUpdated(out))

    def show_stacks(self, job: JobRecord) -> None:
        """Push the stacks view of a running job (a finished one is told at once, with what
        to read instead); the view takes them (:meth:`Service.stacks`)."""
        from console.app.screens.stacks import StacksScreen

        if not any(n.state == "running" for n in job.nodes):
            self.notify(
                f"job {job.id} is not running ({job.state}): a process that ended has no "
                f"stack; `gpuconsole logs {job.id}` shows how it ended",
                title="stacks",
                severity="warning",
                timeout=15,
            )
            return

        async def take(j: JobRecord) -> tuple[str, bool]:
            from console.stacks.render import render

            capture, analysis = await self.service.stacks(j)
            return render(capture, analysis), analysis.partial

        self.push_screen(StacksScreen(job, take, self.service.store.root / "stacks"))

    @work(group="describe", exit_on_error=False)
    @reported("describe")
    async def describe(self, job: JobRecord) -> None:
        """Show the job's spec, hosts, containers and command lines."""
        d = await self.service.describe(job)
        self.push_screen(TextScreen(f"describe {job.id}", d.render()))

    def ask_submit(self) -> None:
        """Ask for a spec path (completed from the disk), nodes and args, plan it, show the
        dry-run plan, confirm, launch: all in one modal that stays (busy) until the job is
        launched, so an error keeps what was typed and no key is taken for an answer."""
        if self.readonly:
            return
        self.push_screen(SubmitScreen(self._submit_request, self._start_plan))

    def _start_plan(self, screen: SubmitScreen, request: SubmitRequest) -> None:
        self._submit_request = request  # what the next `n` starts from
        try:
            overrides = request.overrides()
        except GpuConsoleError as e:
            screen.show_error(_error_text(e))
            return
        path = Path(request.path.strip()).expanduser()
        screen.set_phase("planning", f"planning {path} on the hosts… (escape cancels)")
        screen.worker = self._plan(screen, path, overrides)

    @work(group="submit", exit_on_error=False)
    @reported("submit")
    async def _plan(self, screen: SubmitScreen, path: Path, overrides: dict[str, Any]) -> None:
        """Preflight the spec on the hosts (the workdir is synced into the hosts'
        content-addressed cache; no container is created) and show the exact plan that
        confirming launches: the same job id, hosts, ports and ``docker run`` lines."""
        try:
            sub = await self.service.plan(path, overrides)
        except GpuConsoleError as e:
            if screen in self.screen_stack:
                screen.show_error(_error_text(e))
            return
        except Exception as e:  # a bug: the modal leaves "planning" (the toast and log follow)
            if screen in self.screen_stack:
                screen.show_error(f"planning failed: {type(e).__name__}: {e} (details in the log)")
            raise
        if screen not in self.screen_stack:
            return

        def answered(yes: bool | None) -> None:
            if screen not in self.screen_stack:
                return
            if yes:
                screen.set_phase("launching", f"launching {path}… (all nodes or none)")
                screen.worker = self._submit(screen, sub)
            else:
                screen.set_phase("editing", "not submitted: change it and press enter, or escape")

        screen.set_phase("confirming")
        self.push_screen(
            ConfirmScreen(
                f"Submit {path}? Nothing runs until you confirm.", sub.plan_text(), yes="Submit"
            ),
            answered,
        )

    @work(group="submit", exit_on_error=False)
    @reported("submit")
    async def _submit(self, screen: SubmitScreen, sub: Submission) -> None:
        try:
            job = await self.service.submit(sub)
        except GpuConsoleError as e:
            if screen in self.screen_stack:
                screen.show_error("submit failed: " + _error_text(e))
            return
        except Exception as e:  # a bug: the modal leaves "launching" (the toast and log follow)
            if screen in self.screen_stack:
                screen.show_error(f"submit failed: {type(e).__name__}: {e} (details in the log)")
            raise
        self.notify(f"submitted {job.id}", title="submit")
        self.post_message(JobUpdated(job))
        if screen in self.screen_stack:
            screen.dismiss(None)
            self.open_logs(job)

    def exec_shell(self, job: JobRecord, node: int | None = None) -> None:
        """A shell in a node's container: the app suspends until it exits. A job whose
        runtime has no container (its backend's capabilities) or whose record shows no running
        node is told at once, without suspending (what to do instead)."""
        if self.readonly:
            return
        if (refused := self.service.refusal(job, "exec")) is not None:
            self.report_failure(refused, "shell")  # the runtime has no container to enter
            return
        running = [n.node_rank for n in job.nodes if n.state == "running"]
        if not running and job.state not in ("running", "pending"):
            self.notify(
                f"job {job.id} is not running ({job.state}): {not_running_hint(job)}",
                title="shell",
                severity="warning",
                timeout=15,
            )
            return
        if node is None and len(running) > 1:

            def got(value: str | None) -> None:
                if value is not None and value.strip().isdigit():
                    self._exec(job, int(value))

            self.push_screen(
                AskScreen(f"Node of {job.id} ({', '.join(map(str, running))}):", str(running[0])),
                got,
            )
            return
        self._exec(job, node)

    @work(exclusive=True, group="exec", exit_on_error=False)
    @reported("shell")
    async def _exec(self, job: JobRecord, node: int | None) -> None:
        """Check the node runs and connect (on the app's screen: a refusal is said there),
        then hand the terminal to the shell until it exits (SuspendNotSupported: no
        terminal)."""
        attach = await self.service.prepare_exec(job, node, [], tty=True)
        rc = await self.hand_terminal(attach)
        self.notify(f"shell in {job.id} exited {rc}")

    async def hand_terminal(self, child: Callable[[], Awaitable[T]]) -> T:
        """Run ``child`` (a shell, a console browser) with the terminal handed to it, and take
        the terminal back after it, whatever it raised (raised here once the app is back).

        Textual's :meth:`App.suspend` stops the driver's writer thread, and every write
        while suspended would queue for it: the loop blocks on the full queue (30 writes) and
        the child's own I/O, which runs on this loop, with it. So nothing is drawn while the
        child has the terminal (one batch update: refreshes, log panes, toasts and timers
        keep their state and are drawn once the app is back, in full), the fleet view's
        timer is paused, and the body of ``suspend`` never raises (Textual resumes only when
        it ends normally). The input thread is stopped meanwhile: keys go to the child.

        Raises:
            SuspendNotSupported: no terminal to hand over (tests, Textual Web).
        """
        result: list[T] = []
        error: BaseException | None = None
        with self.batch_update():
            self.handed_over = True
            self._fleet_timer.pause()
            try:
                with self.suspend():
                    try:
                        result.append(await child())
                    except BaseException as e:  # the app is resumed first, then it is raised
                        error = e
            finally:
                self.handed_over = False
                self._fleet_timer.resume()
        self.refresh(layout=True)
        self.refresh_fleet_view(force=True)
        if error is not None:
            raise error
        return result[0]

    def bell(self) -> None:
        """Ring the terminal's bell, unless a child has the terminal."""
        if not self.handed_over:
            super().bell()

    # -- notebooks --------------------------------------------------------------------------

    def open_notebook(self, job: JobRecord) -> None:
        """Show a notebook job's URL: through its open tunnel, else open one in a worker; a
        training job gets a note saying what to do instead."""
        if self.readonly:
            return
        if job.kind != "notebook":
            self.notify(
                f"{job.id} is a {job.kind} job, not a notebook: x opens a shell in its "
                "container, N starts a notebook",
                title="notebook",
                severity="warning",
            )
            return
        tunnel = self.tunnels.get(job.id)
        if tunnel is not None and not tunnel.forward.closed:
            self.post_message(NotebookOpened(job.id, tunnel))
            return
        if job.id in self._attaching:
            self.notify(f"still opening notebook {job.id}…", title="notebook")
            return
        self._attaching.add(job.id)
        self._attach_notebook(job)

    @work(group="notebook", exit_on_error=False)
    @reported("notebook")
    async def _attach_notebook(self, job: JobRecord) -> None:
        """Open a tunnel to the notebook (waiting until JupyterLab answers) and keep it."""
        old = self.tunnels.pop(job.id, None)
        try:
            if old is not None:  # its SSH connection dropped: forward anew
                await old.close()
            self.notify(f"opening notebook {job.id}: waiting for JupyterLab…", title="notebook")
            tunnel = await self.service.attach_notebook(job)
        finally:
            self._attaching.discard(job.id)
        if self._tunnels_closed:  # the app is exiting: keep nothing open
            await asyncio.shield(tunnel.close())
            return
        self.tunnels[job.id] = tunnel
        self.post_message(NotebookOpened(job.id, tunnel))

    @work(group="browser", exit_on_error=False)
    @reported("browser")
    async def open_browser(self, url: str) -> None:
        """Open ``url`` with :func:`webbrowser.open` (asked for in the URL modal). A console
        browser (lynx, w3m) needs the terminal: the app suspends as for a shell."""
        if _console_browser():
            ok = await self.hand_terminal(lambda: asyncio.to_thread(webbrowser.open, url))
        else:
            ok = await asyncio.to_thread(webbrowser.open, url)
        if not ok:
            self.notify(
                "no browser could be started here: copy the URL (c) and open it yourself",
                title="browser",
                severity="warning",
            )

    def ask_new_notebook(self) -> None:
        """Ask for host, GPUs and workdir, then start a notebook and open it."""
        if self.readonly:
            return
        hosts = list(self.service.profile.hosts)
        if not hosts:
            self.notify(f"profile {self.service.profile.name} has no hosts", severity="error")
            return

        def got(req: NotebookRequest | None) -> None:
            if req is not None:
                self._new_notebook(req)

        self.push_screen(NewNotebookScreen(hosts, gpus_problem), got)

    @work(group="submit", exit_on_error=False)
    @reported("notebook")
    async def _new_notebook(self, req: NotebookRequest) -> None:
        """Plan and launch a notebook (the busy-GPU refusal and all-or-nothing launch of every
        job), then open it; a refusal is shown with its fix."""
        self.notify(f"starting a notebook on {req.host}…", title="notebook")
        try:
            gpus = parse_gpus(req.gpus) if req.gpus else None
            sub = await self.service.plan_notebook(host=req.host, gpus=gpus, workdir=req.workdir)
            job = await self.service.submit(sub)
        except GpuConsoleError as e:
            self.push_screen(
                TextScreen("cannot start the notebook (escape closes)", _error_text(e))
            )
            return
        self.notify(f"started notebook {job.id} on {req.host}", title="notebook")
        self.post_message(JobUpdated(job))
        self.action_show("jobs")
        self._attaching.add(job.id)
        self._attach_notebook(job)


def screenshot_dir() -> Path:
    """Where screenshots go: the user's downloads folder (``~/Downloads``) when it exists,
    else ``screenshots/`` in the state dir (a server often has no downloads folder)."""
    import platformdirs

    from console.jobs.store import state_dir

    downloads = Path(platformdirs.user_downloads_dir())
    return downloads if downloads.is_dir() else state_dir() / "screenshots"


def parse_gpus(text: str) -> Literal["all"] | int | list[int]:
    """GPUs as ``--gpus`` takes them (``all``, ``N``, ``0,1``): the CLI's one grammar.

    Raises:
        UsageError: anything else (with an example in its hint).
    """
    from console.fields import parse_gpus as parse

    return parse(text)


def gpus_problem(text: str) -> str | None:
    """Why ``text`` is not a valid GPUs value, or ``None``."""
    try:
        parse_gpus(text)
    except GpuConsoleError as e:
        return e.message + (f" ({e.hint})" if e.hint else "")
    return None


def _console_browser() -> bool:
    """Whether :func:`webbrowser.open` would start a browser that runs in this terminal (and
    waits for it), e.g. ``www-browser``/lynx on a host without a display."""
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    return isinstance(browser, webbrowser.GenericBrowser) and not isinstance(
        browser, webbrowser.BackgroundBrowser
    )


def _error_text(e: GpuConsoleError) -> str:
    return f"error: {e.message}" + (f"\n  fix: {e.hint}" if e.hint else "")


if TYPE_CHECKING:

    def _implements_host(app: GpuConsoleApp) -> AppHost:
        """mypy checks here that the app is what its screens take it for
        (:class:`console.app.host.AppHost`)."""
        return app
