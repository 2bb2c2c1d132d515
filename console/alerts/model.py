"""The alert types shared by the rule engine, the store, ``gpuconsole watch`` (printing,
notifications, Prometheus metrics) and the TUI's alerts view.

An :class:`Alert` is one condition on one subject (a host, a GPU, a job), identified by its
de-duplication :attr:`Alert.key`: while the condition holds the alert stays the same alert (one
page), and when it clears the alert is resolved. An :class:`AlertChanged` event is published on
the service's event bus (``console/events.py``) for every transition.

Times are Unix seconds (float). Severities follow Prometheus/Alertmanager practice: ``critical``
pages someone, ``warning`` needs a look during the day, ``info`` is a record.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeAlias

__all__ = [
    "RULE_IDS",
    "Alert",
    "AlertChange",
    "AlertChanged",
    "DetailValue",
    "RuleId",
    "Severity",
    "alert_key",
]

Severity: TypeAlias = Literal["critical", "warning", "info"]

#: Every rule the engine knows; the profile's ``alerts:`` section is keyed by these ids.
RuleId: TypeAlias = Literal[
    "host_unreachable",  # SSH/telemetry down for longer than `for_s`
    "gpu_lost",  # a GPU the host had is gone (fallen off the bus, NVML GPU_IS_LOST, count drop)
    "xid",  # a kernel/NVML Xid on a GPU (decoded, with NVIDIA's action)
    "ecc_uncorrected",  # volatile uncorrected ECC errors > 0
    "remapped_rows_pending",  # row remapping pending: the GPU needs a reset
    "gpu_temperature",  # temperature over a limit for `for_s`
    "gpu_throttle",  # thermal or power throttling sustained for `for_s`
    "gpu_memory_high",  # framebuffer used above a fraction of total for `for_s`
    "job_failed",  # a job ended failed (with its diagnosis)
    "job_hung",  # running, no log line and all its GPUs under 5 % for `for_s`
    "straggler",  # one node's/rank's GPUs idle while the job's others are busy
    "gpus_idle",  # GPUs held by a running job but idle, with the money they burn
]
RULE_IDS: tuple[RuleId, ...] = (
    "host_unreachable",
    "gpu_lost",
    "xid",
    "ecc_uncorrected",
    "remapped_rows_pending",
    "gpu_temperature",
    "gpu_throttle",
    "gpu_memory_high",
    "job_failed",
    "job_hung",
    "straggler",
    "gpus_idle",
)

DetailValue: TypeAlias = str | int | float | None

AlertChange: TypeAlias = Literal["fired", "resolved", "acknowledged", "silenced", "unsilenced"]


@dataclass(frozen=True)
class Alert:
    """One alert: a rule's condition on one subject.

    Attributes:
        key: de-duplication key, stable while the condition holds and across restarts of
            ``watch``: ``"<rule>/<host>"``, ``"<rule>/<host>/gpu<index>"`` or
            ``"<rule>/job/<job name>"``, optionally with one more component (see
            :func:`alert_key`).
        rule: the rule that raised it.
        severity: ``critical`` | ``warning`` | ``info``.
        summary: one line for a person (what, where, how long, the number that crossed).
        host: the host's name in the profile, when the subject is a host or a GPU.
        gpu: the GPU index on that host (NVML / nvidia-smi index), when the subject is a GPU.
        job: the job's name, when the subject is a job.
        since: when the condition was first seen true (Unix s).
        fired_at: when the alert fired (``since`` + the rule's ``for_s``; Unix s).
        resolved_at: when the condition cleared (Unix s), None while firing.
        acked_at: when someone acknowledged it (Unix s), None if nobody did.
        silenced_until: notifications suppressed until then (Unix s), None if not silenced.
        details: the values behind it (``temperature_c``, ``for_s``, ``xid``, ``diagnosis``,
            ``usd_per_hour`` ...; units in the key).
    """

    key: str
    rule: RuleId
    severity: Severity
    summary: str
    host: str | None = None
    gpu: int | None = None
    job: str | None = None
    since: float = 0.0
    fired_at: float = 0.0
    resolved_at: float | None = None
    acked_at: float | None = None
    silenced_until: float | None = None
    details: Mapping[str, DetailValue] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def firing(self) -> bool:
        """True until the condition clears."""
        return self.resolved_at is None

    def silenced(self, now: float) -> bool:
        """True while a silence holds at ``now`` (Unix s)."""
        return self.silenced_until is not None and now < self.silenced_until


def alert_key(
    rule: RuleId,
    *,
    host: str | None = None,
    gpu: int | None = None,
    job: str | None = None,
    part: str | None = None,
) -> str:
    """The de-duplication key of ``rule`` on a subject (see :attr:`Alert.key`).

    ``part`` narrows the subject further and is appended as one more ``/``-separated
    component: the Xid number (``"xid/a/gpu0/xid79"``: a new kind of Xid on a GPU is a new
    page) or the PCI bus id of a GPU whose index is unknown
    (``"gpu_lost/a/00000000:3D:00.0"``).

    Raises:
        ValueError: when no subject is given, or a GPU without its host.
    """
    if job is not None:
        base = f"{rule}/job/{job}"
    elif host is None:
        raise ValueError(f"alert {rule}: a host or a job is required")
    else:
        base = f"{rule}/{host}" if gpu is None else f"{rule}/{host}/gpu{gpu}"
    return base if part is None else f"{base}/{part}"


@dataclass(frozen=True)
class AlertChanged:
    """An alert fired, resolved, was acknowledged or (un)silenced; published on the event bus.

    Attributes:
        alert: the alert after the change.
        change: what happened.
        at: when (Unix s).
    """

    alert: Alert
    change: AlertChange
    at: float

    @property
    def key(self) -> Hashable:
        """Never coalesced: every transition matters (a page, a resolve)."""
        return ("alert", self.alert.key, self.change, self.at)
