"""One alert as the faces show it (the app's alerts view, ``gpuconsole alerts``): its state,
subject and age, the same words everywhere."""

from __future__ import annotations

from console.alerts.model import Alert

__all__ = ["age_text", "alert_state", "subject"]


def age_text(seconds: float) -> str:
    """``42s``, ``17m``, ``3h05m`` (negative ages count as 0)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def alert_state(alert: Alert, now: float) -> str:
    """``resolved``, ``silenced``, ``acked`` or ``firing`` at ``now`` (Unix s)."""
    if not alert.firing:
        return "resolved"
    if alert.silenced(now):
        return "silenced"
    return "acked" if alert.acked_at is not None else "firing"


def subject(alert: Alert) -> str:
    """The alert's subject: ``job NAME``, ``HOST GPU N`` or ``HOST``."""
    if alert.job is not None:
        return f"job {alert.job}"
    if alert.gpu is not None:
        return f"{alert.host} GPU {alert.gpu}"
    return alert.host or "?"
