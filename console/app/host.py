"""What a screen may ask of the app it runs in: :class:`AppHost`.

Screens import this, never :mod:`console.app.app` (which imports them): they reach the engine
and the app's operations through ``host(self.app)``, typed by this protocol; the app
(:class:`console.app.app.GpuConsoleApp`) implements it, checked by mypy where it is defined.
Every operation returns at once: what it starts runs in a worker, and its result comes back
as a message (:mod:`console.app.messages`) or a notification.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from textual.app import App

    from console.app.gcpolicy import GcPolicy
    from console.jobs.store import JobRecord
    from console.service import Service

__all__ = ["AppHost", "host"]


class AppHost(Protocol):
    """The app's side of a screen: the engine, the mode, the operations."""

    @property
    def service(self) -> Service:
        """The engine (store, follows, logs)."""

    @property
    def readonly(self) -> bool:
        """``--readonly``: the write actions are hidden."""

    @property
    def gc_policy(self) -> GcPolicy:
        """The cyclic-GC policy (a screen sweeps at its natural pauses)."""

    def open_logs(self, job: JobRecord) -> None:
        """Push the job's log panes."""

    def confirm_stop(self, job: JobRecord) -> None:
        """Ask, then stop the job."""

    def confirm_remove(self, job: JobRecord) -> None:
        """Ask, then remove a finished job's containers."""

    def describe(self, job: JobRecord) -> object:
        """Show the job's spec, hosts and commands (a worker)."""

    def ask_submit(self) -> None:
        """The submit modal."""

    def exec_shell(self, job: JobRecord, node: int | None = None) -> None:
        """A shell in a node of the job."""

    def show_stacks(self, job: JobRecord) -> None:
        """The job's stacks view (taken when it opens, again on ``r``)."""

    def open_notebook(self, job: JobRecord) -> None:
        """Show a notebook job's URL (opening its tunnel first)."""

    def ask_new_notebook(self) -> None:
        """The new-notebook modal."""

    def refresh_jobs(self) -> object:
        """Reconcile the jobs with the hosts now (a worker)."""

    def acknowledge_alert(self, key: str) -> object:
        """Acknowledge a firing alert (a worker)."""

    def silence_alert(self, key: str, seconds: float) -> object:
        """Silence an alert's notifications for ``seconds`` (a worker)."""

    def report_failure(self, error: Exception, title: str) -> None:
        """Say why a worker failed, under ``title`` (:mod:`console.app.failures`)."""


def host(app: App[Any]) -> AppHost:
    """``app`` as the screens see it (the console app: :class:`AppHost`)."""
    return cast("AppHost", app)
