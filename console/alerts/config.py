"""The profile's ``alerts:`` section (one block per rule); the notification URL type
(:data:`console.fields.AppriseUrl`) is re-exported here.

Every rule has ``enabled``, ``severity`` and ``for_s`` (how long its condition must hold,
continuously, before the alert fires; seconds), plus its own thresholds. The defaults are
meant for on-call: ``critical`` pages (a host gone, a GPU lost, a job dead or hung),
``warning`` needs a look during the day (heat, throttling, idle money).

Example (every key optional)::

    price_per_gpu_hour: 3.50          # USD, for gpus_idle's usd_per_hour / usd_so_far
    notify: ["slack://T000/B000/XXXX", "mailto://ops@example.org"]
    alerts:
      interval_s: 5
      host_unreachable: {for_s: 60}
      gpu_temperature: {limit_c: 83, for_s: 120, severity: critical}
      gpu_throttle: {reasons: [sw_thermal, hw_thermal, hw_slowdown, hw_power_brake]}
      job_hung: {for_s: 300}
      gpus_idle: {enabled: false}
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from console.alerts.model import RuleId, Severity
from console.fields import AppriseUrl
from remote.telemetry.schema import THROTTLE_REASONS

__all__ = [
    "AlertsConfig",
    "AppriseUrl",
    "GpuMemoryHighRule",
    "GpuTemperatureRule",
    "GpuThrottleRule",
    "GpusIdleRule",
    "JobFailedRule",
    "JobHungRule",
    "RuleConfig",
    "StragglerRule",
    "XidRule",
]

_Strict = ConfigDict(extra="forbid", strict=True)

#: Seconds: finite, >= 0, at most 7 days.
Seconds = Annotated[float, Field(ge=0, le=7 * 86400, allow_inf_nan=False)]
#: A percentage (0-100).
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]


class RuleConfig(BaseModel):
    """What every rule has.

    Attributes:
        enabled: evaluate the rule at all.
        severity: the alerts' severity.
        for_s: the condition must hold this long (s) before the alert fires.
    """

    model_config = _Strict

    enabled: bool = True
    severity: Severity = "warning"
    for_s: Seconds = 0.0


class HostUnreachableRule(RuleConfig):
    """A host's SSH/telemetry stream is ``down`` (or ``stale``: no sample for 3 intervals)."""

    severity: Severity = "critical"
    for_s: Seconds = 60.0


class GpuLostRule(RuleConfig):
    """A GPU the host reported is gone from its samples, or NVML says it is lost."""

    severity: Severity = "critical"


class XidRule(RuleConfig):
    """An Xid on a GPU (from the samples' ``xid_events``).

    Attributes:
        severity: for Xids whose class is not ``reset``/``lost``/``hw`` (application faults,
            informational ones); ``reset`` and ``lost`` Xids are always ``critical``, ``hw``
            ones at least ``warning``.
        hold_s: the alert stays firing this long (s) after the GPU's last Xid of that number
            (Xids are events: nothing else says it is over).
        ignore: Xid numbers never raised.
    """

    severity: Severity = "warning"
    hold_s: Seconds = 3600.0
    ignore: list[int] = Field(default_factory=list)


class EccRule(RuleConfig):
    """Volatile uncorrected ECC errors > 0 (since the driver loaded)."""

    severity: Severity = "critical"


class RemappedRowsRule(RuleConfig):
    """Row remapping pending: the GPU needs a reset to apply it."""

    severity: Severity = "warning"


class GpuTemperatureRule(RuleConfig):
    """GPU die temperature over ``limit_c`` (degrees C) for ``for_s``."""

    for_s: Seconds = 60.0
    limit_c: float = Field(85.0, ge=0, le=150, allow_inf_nan=False)


class GpuThrottleRule(RuleConfig):
    """Clocks held down by one of ``reasons`` for ``for_s``.

    The default reasons are the thermal and hardware slowdowns (including the power brake).
    ``sw_power_cap`` is left out: a GPU under full load sits at its power cap by design
    (the recorded H200 traces show it on every loaded sample); add it to be told anyway.
    """

    for_s: Seconds = 120.0
    reasons: list[str] = Field(
        default_factory=lambda: ["hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"]
    )

    @field_validator("reasons")
    @classmethod
    def _reasons(cls, v: list[str]) -> list[str]:
        for r in v:
            if r not in THROTTLE_REASONS:
                raise ValueError(
                    f"{r[:40]!r} is not a throttle reason; known: {', '.join(THROTTLE_REASONS)}"
                )
        return v


class GpuMemoryHighRule(RuleConfig):
    """Framebuffer used above ``used_pct`` % of total for ``for_s``."""

    for_s: Seconds = 300.0
    used_pct: Percent = 95.0


class JobFailedRule(RuleConfig):
    """A job ended ``failed``; the alert carries its diagnosis.

    Attributes:
        max_age_s: failures that ended longer ago than this when first seen are history, not
            news (a first ``watch`` over an old store pages nobody).
    """

    severity: Severity = "critical"
    max_age_s: Seconds = 3600.0


class JobHungRule(RuleConfig):
    """A running job wrote no log line and all its GPUs stayed under ``idle_pct`` % for
    ``for_s`` (default 5 min, well before NCCL's 10-minute collective timeout)."""

    severity: Severity = "critical"
    for_s: Seconds = 300.0
    idle_pct: Percent = 5.0


class StragglerRule(RuleConfig):
    """A rank of a running job slows the others for ``for_s``: its load (GPM SM activity,
    else power, else a CPU rank's CPU; averaged over ``window_s``) is at least
    ``slower_pct`` % above the median of the job's other ranks, or its GPU idles (<
    ``idle_pct``) while the others are busy (> ``busy_pct``: an input-bound rank). The
    alert names the rank and what its GPU and host show (console/fleet/straggler.py)."""

    for_s: Seconds = 120.0
    slower_pct: Percent = 10.0
    window_s: Seconds = 60.0
    idle_pct: Percent = 5.0
    busy_pct: Percent = 50.0


class GpusIdleRule(RuleConfig):
    """Every GPU a running job holds idle (< ``idle_pct``) for ``for_s``; with the money it
    burns (``price_per_gpu_hour`` of the profile)."""

    for_s: Seconds = 600.0
    idle_pct: Percent = 5.0


class AlertsConfig(BaseModel):
    """The profile's ``alerts:`` section.

    Attributes:
        interval_s: how often the live engine re-evaluates (s; the next round is armed after
            the previous one finished).
        jobs_refresh_s: how often the live engine reconciles the jobs with the hosts and
            probes silent running jobs for their last log line (s).
    """

    model_config = _Strict

    interval_s: float = Field(5.0, ge=0.1, le=3600, allow_inf_nan=False)
    jobs_refresh_s: float = Field(15.0, ge=1, le=3600, allow_inf_nan=False)
    host_unreachable: HostUnreachableRule = Field(default_factory=HostUnreachableRule)
    gpu_lost: GpuLostRule = Field(default_factory=GpuLostRule)
    xid: XidRule = Field(default_factory=XidRule)
    ecc_uncorrected: EccRule = Field(default_factory=EccRule)
    remapped_rows_pending: RemappedRowsRule = Field(default_factory=RemappedRowsRule)
    gpu_temperature: GpuTemperatureRule = Field(default_factory=GpuTemperatureRule)
    gpu_throttle: GpuThrottleRule = Field(default_factory=GpuThrottleRule)
    gpu_memory_high: GpuMemoryHighRule = Field(default_factory=GpuMemoryHighRule)
    job_failed: JobFailedRule = Field(default_factory=JobFailedRule)
    job_hung: JobHungRule = Field(default_factory=JobHungRule)
    straggler: StragglerRule = Field(default_factory=StragglerRule)
    gpus_idle: GpusIdleRule = Field(default_factory=GpusIdleRule)

    def rule(self, rule: RuleId) -> RuleConfig:
        """The block of one rule."""
        cfg = getattr(self, rule)
        assert isinstance(cfg, RuleConfig)
        return cfg
