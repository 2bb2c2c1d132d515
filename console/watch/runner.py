"""The ``gpuconsole watch`` loop: fleet monitor and job reconciles through the
:class:`~console.service.Service`, an alert source on its event bus, alert lines printed,
transitions paged (:mod:`console.watch.notify`), the fleet served as Prometheus metrics
(:mod:`console.watch.metrics`).

Threads: everything here runs on the command's loop except the metrics server (its own
thread; it reads the fleet state and a copy of the firing alerts) and the notifier (one
thread per URL). Subscribers only queue: the printer task writes, so a closed stdout ends
the command (``OutputClosed``) and never becomes a subscriber error.

The alert source is the rule engine's live adapter,
:class:`console.alerts.engine.AlertWatcher` (rules, ``for_s`` delays, the alert store across
restarts, job reconciles and last-log probes); ``watch`` needs only :class:`AlertSource` of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from console.alerts.engine import AlertWatcher
from console.alerts.model import Alert, AlertChanged
from console.alerts.store import alert_to_json
from console.errors import ConfigError
from console.events import SampleReceived
from console.service import Service
from console.watch.metrics import FleetCollector, XidTracker, make_registry
from console.watch.notify import Delivery, Ledger, Notifier

__all__ = [
    "AlertSource",
    "Watch",
    "WatchOptions",
    "alert_json",
    "alert_line",
    "firing_json",
    "firing_line",
]

log = logging.getLogger("gpuconsole.watch")


class AlertSource(Protocol):
    """What ``watch`` needs from the rule engine (:class:`~console.alerts.engine.AlertWatcher`
    has it): transitions are published as ``AlertChanged`` on the service's bus."""

    async def start(self) -> None:
        """Load the stored alerts and begin evaluating (the fleet is already started)."""

    async def close(self) -> None:
        """Stop evaluating; nothing is published after this returns."""

    def active(self) -> list[Alert]:
        """The alerts firing now (also those loaded from the store at start)."""


def alert_json(ev: AlertChanged) -> dict[str, Any]:
    """A transition as a JSON object: ``{"type": "alert", "change", "at", "alert": {...}}``
    (times Unix s; the alert as the alert store writes it, ``alert_to_json``)."""
    alert: dict[str, Any] = json.loads(alert_to_json(ev.alert))
    return {"type": "alert", "change": ev.change, "at": ev.at, "alert": alert}


def alert_line(ev: AlertChanged) -> str:
    """A transition for people: ``2026-11-29 12:00:01  CRITICAL  fired     <summary>  [key]``."""
    sev = "RESOLVED" if ev.change == "resolved" else ev.alert.severity.upper()
    return _line(ev.at, sev, ev.change, ev.alert)


def firing_json(alert: Alert) -> dict[str, Any]:
    """An alert already firing when ``watch`` started (carried over from the alert store), as
    the JSON object of a transition: ``"change": "firing"``, ``"at"``: when it fired (Unix s),
    and ``"initial": true`` (no transition happened now; it is not paged again)."""
    data: dict[str, Any] = json.loads(alert_to_json(alert))
    return {
        "type": "alert",
        "change": "firing",
        "at": alert.fired_at,
        "alert": data,
        "initial": True,
    }


def firing_line(alert: Alert) -> str:
    """An alert already firing when ``watch`` started, for people: the line of a transition
    at the time it fired, with ``firing`` for the change."""
    return _line(alert.fired_at, alert.severity.upper(), "firing", alert)


def _line(at: float, sev: str, change: str, alert: Alert) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    return f"{when}  {sev:<8}  {change:<9} {alert.summary}  [{alert.key}]"


@dataclass
class WatchOptions:
    """What ``watch`` was asked to do.

    Attributes:
        as_json: JSON lines instead of text lines.
        metrics_port: serve metrics on this port (0: any free one; ``None``: no server).
        metrics_addr: the address the server binds (default loopback only).
        notify_urls: Apprise URLs to page.
        interval: telemetry sampling interval (s).
        replay: a recording to feed instead of live hosts (no job reconciles then).
        speed: replay speed (0: as fast as possible).
        ledger: the notification ledger's file.
        notify_attempts: tries per notification.
        notify_backoff_s: first retry delay (s).
    """

    as_json: bool = False
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    notify_urls: list[str] = field(default_factory=list)
    interval: float = 1.0
    replay: Path | None = None
    speed: float = 1.0
    ledger: Path | None = None
    notify_attempts: int = 5
    notify_backoff_s: float = 1.0


class Watch:
    """One ``watch`` run over a service.

    Args:
        service: the service (its profile's hosts are watched; its ``alerts:``, ``notify:``).
        options: what to do.
        source: the alert source (default: the rule engine's
            :class:`~console.alerts.engine.AlertWatcher` over ``service``).
        emit: writes one line of data (stdout; may raise ``OutputClosed``).
        say: writes one diagnostic line (stderr).
    """

    def __init__(
        self,
        service: Service,
        options: WatchOptions,
        *,
        emit: Callable[[str], None],
        say: Callable[[str], None],
        source: AlertSource | None = None,
    ) -> None:
        self.svc = service
        self.opts = options
        self.source = source
        self.emit = emit
        self.say = say
        self.xids = XidTracker()
        self._alerts_lock = threading.Lock()
        self._alerts: dict[str, Alert] = {}
        self._queue: asyncio.Queue[AlertChanged] = asyncio.Queue()
        self.notifier: Notifier | None = None
        self.metrics_url: str | None = None
        self._server: Any = None
        self._replay_error: ConfigError | None = None  # a recording that is not one

    # -- what the metrics thread reads ------------------------------------------------------

    def firing(self) -> list[Alert]:
        """A copy of the alerts firing now (any thread)."""
        with self._alerts_lock:
            return list(self._alerts.values())

    def _on_alert(self, ev: object) -> None:
        if not isinstance(ev, AlertChanged):
            return
        with self._alerts_lock:
            if ev.change == "resolved":
                self._alerts.pop(ev.alert.key, None)
            else:
                self._alerts[ev.alert.key] = ev.alert
        if self.notifier is not None:
            self.notifier.submit(ev)
        self._queue.put_nowait(ev)

    def _on_sample(self, ev: object) -> None:
        if isinstance(ev, SampleReceived):
            self.xids.on_sample(ev.host, ev.sample)

    # -- run --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, on_started: Callable[[], None] | None = None) -> None:
        """Watch until ``stop`` is set; then end everything started here.

        Args:
            stop: set to end the watch.
            on_started: called once the fleet, the server and the notifier are up.

        Raises:
            OutputClosed: stdout's reader went away (from :attr:`emit`).
            GpuConsoleError: the metrics port cannot be bound.
        """
        loop = asyncio.get_running_loop()
        subs = [
            self.svc.bus.subscribe(self._on_alert, kinds=(AlertChanged,)),
            self.svc.bus.subscribe(self._on_sample, kinds=(SampleReceived,)),
        ]
        tasks: list[asyncio.Task[Any]] = []
        try:
            if self.opts.notify_urls:
                self._start_notifier(loop)
            if self.opts.metrics_port is not None:
                self._start_metrics()
            replay = self.opts.replay
            if replay is None:
                self.svc.start_fleet(interval=self.opts.interval)
            if self.source is None:
                self.source = AlertWatcher(self.svc) if replay is None else _ReplayWatcher(self.svc)
            await self.source.start()
            if on_started is not None:
                on_started()
            self._carried_over(self.source.active())
            if replay is not None:  # after the start lines: at speed 0 it is over at once
                self.svc.start_replay(replay, speed=self.opts.speed)
                tasks.append(asyncio.create_task(self._replay_done(stop), name="watch-replay"))
            printer = asyncio.create_task(self._print_loop(), name="watch-print")
            stopper = asyncio.create_task(stop.wait(), name="watch-stop")
            done, _ = await asyncio.wait({printer, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if printer in done:
                printer.result()  # OutputClosed or a bug: raised here
            printer.cancel()
            await asyncio.gather(printer, return_exceptions=True)
            self._drain_printed()
            if self._replay_error is not None:
                raise self._replay_error
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.source is not None:
                await self.source.close()
            for s in subs:
                s.close()
            await self.svc.stop_fleet()
            if self._server is not None:
                await asyncio.to_thread(self._stop_metrics)
            if self.notifier is not None:
                await asyncio.to_thread(self.notifier.close)

    def _carried_over(self, firing: list[Alert]) -> None:
        """Alerts still firing from the last run (the alert store): kept for the metrics,
        printed first (:func:`firing_json` / :func:`firing_line`: their state, not a
        transition) and said on stderr; not paged again.

        Raises:
            OutputClosed: stdout's reader went away (from :attr:`emit`).
        """
        with self._alerts_lock:
            for a in firing:
                self._alerts.setdefault(a.key, a)
        for a in firing:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.fired_at))
            self.say(f"still firing since {when}: {a.summary} [{a.key}]")
            self.emit(json.dumps(firing_json(a)) if self.opts.as_json else firing_line(a))

    def _drain_printed(self) -> None:
        """Print the transitions still queued (stop came right after them)."""
        while not self._queue.empty():
            self._print(self._queue.get_nowait())

    async def _print_loop(self) -> None:
        while True:
            self._print(await self._queue.get())

    def _print(self, ev: AlertChanged) -> None:
        self.emit(json.dumps(alert_json(ev)) if self.opts.as_json else alert_line(ev))

    def _start_notifier(self, loop: asyncio.AbstractEventLoop) -> None:
        from console.jobs.store import state_dir

        path = self.opts.ledger or state_dir() / "notify.sqlite3"

        def report(d: Delivery) -> None:  # on a worker thread
            if d.outcome in ("failed", "retrying"):
                text = (
                    f"notify {d.url}: {d.message.change} {d.message.key}: attempt "
                    f"{d.attempts} failed ({d.error})"
                    + ("; retrying" if d.outcome == "retrying" else "; giving up")
                )
            else:
                text = f"notify {d.url}: {d.message.change} {d.message.key}: {d.outcome}"
                if d.outcome == "duplicate":
                    text += " (already paged)"
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                loop.call_soon_threadsafe(self.say, text)

        self.notifier = Notifier(
            self.opts.notify_urls,
            Ledger(path),
            report=report,
            attempts=self.opts.notify_attempts,
            backoff_s=self.opts.notify_backoff_s,
        )
        self.notifier.start()

    def _start_metrics(self) -> None:
        from prometheus_client import start_http_server

        from remote.errors import GpuConsoleError

        collector = FleetCollector(
            lambda: self.svc.fleet,
            self.firing,
            self.xids,
            progress=lambda: dict(self.svc.last_progress),
        )
        port = self.opts.metrics_port or 0
        try:
            server, _thread = start_http_server(
                port, addr=self.opts.metrics_addr, registry=make_registry(collector)
            )
        except OSError as e:
            raise GpuConsoleError(
                f"cannot serve metrics on {self.opts.metrics_addr}:{port}: {e.strerror or e}",
                "pick a free --metrics-port (or 0 for any free port)",
            ) from e
        self._server = server
        host, bound = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        self.metrics_url = f"http://{shown}:{bound}/metrics"

    def _stop_metrics(self) -> None:
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()

    async def _replay_done(self, stop: asyncio.Event) -> None:
        """Say when the replay has fed its last sample (the watch goes on: its alerts and
        metrics stay up until it is stopped); a recording that is not one, or holds no
        sample, ends the watch with a :class:`ConfigError` (exit 2) instead."""
        fix = "give a file written by `gpuconsole top --record`"
        try:
            n = await self.svc.replay_finished()
        except ValueError as e:
            self._replay_error = ConfigError(str(e), fix)
            stop.set()
            return
        if n == 0:
            self._replay_error = ConfigError(f"{self.opts.replay}: no sample in it", fix)
            stop.set()
            return
        self.say(f"replay finished: {n} samples")


class _ReplayWatcher(AlertWatcher):
    """The engine over a replayed recording: the recording's hosts only, no job reconciles
    (the profile's hosts are not the recording's)."""

    async def refresh_jobs(self) -> None:
        """Nothing to reconcile during a replay."""
