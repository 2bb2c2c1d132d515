"""Prometheus metrics of ``gpuconsole watch``: the fleet under dcgm-exporter's names, plus
gpuconsole's own host and alert series.

GPU series use the metric and label names of NVIDIA's dcgm-exporter, so Grafana dashboards
built for it (e.g. Grafana dashboard 12239, "NVIDIA DCGM Exporter Dashboard") work unchanged.
Sources, github.com/NVIDIA/dcgm-exporter at tag ``4.5.3-4.8.2`` (commit 691c927):

- names, types and help texts: ``etc/default-counters.csv`` (clocks, temperatures, power,
  utilization, ``DCGM_FI_DEV_XID_ERRORS``, framebuffer, the commented-out
  ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``) and ``etc/dcp-metrics-included.csv`` (the profiling
  ``DCGM_FI_PROF_*`` ratios);
- labels: ``internal/pkg/rendermetrics/render_metrics.go`` (``gpu``, ``UUID``, ``pci_bus_id``,
  ``device``, ``modelName``, ``Hostname``), ``internal/pkg/collector/base_collector.go``
  (``device`` is ``nvidia<index>``), counters of type ``label`` such as
  ``DCGM_FI_DRIVER_VERSION`` become labels of every series;
  ``internal/pkg/transformation/const.go`` (``hpc_job``: the batch job holding the GPU, the
  label dcgm-exporter's HPC job mapping adds).

Deliberate differences:

- ``Hostname`` is the host's name in the gpuconsole profile (dcgm-exporter runs on the node
  and writes its ``os.Hostname()``). dcgm-exporter's unreleased main renamed the label to
  ``hostname`` (commit d5e5f51, May 2026); the released form is kept.
- No ``container`` / ``pod`` / ``namespace`` labels (those come from Kubernetes' pod-resources
  mapping). A GPU held by a gpuconsole job carries ``hpc_job`` (the job id; several joined
  by ``,`` when jobs share a GPU) and ``rank`` (torchrun's global ranks on it, joined by
  ``,``), only when known. ``job`` itself is not used: Prometheus sets ``job`` to the scrape
  job's name and would rename ours to ``exported_job``.
- ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` is exposed as a gauge: prometheus_client names a counter
  family ``<name>_total``, which would change the name dashboards query.
- ``DCGM_FI_DEV_FB_FREE`` is ``mem_total_mib - mem_used_mib``. gpuconsole's ``mem_used_mib``
  excludes the memory the driver reserves (NVML ``nvmlDeviceGetMemoryInfo_v2``), so this is
  larger than DCGM's free by that reserve (615 MiB on an H200, tests/data/traces/README.md).
- ``DCGM_FI_DEV_MEMORY_TEMP`` is never exposed: the sample schema has no memory temperature.
- ``DCGM_FI_DEV_XID_ERRORS`` is the last Xid seen on the GPU since ``watch`` started, 0
  while none was (as DCGM reports 0 before the first), and absent where the host could not
  register for Xid events (``errors["xid"]`` in its sample).

Unknown readings (``None`` in the sample) are omitted, never exposed as 0. Lost GPUs and hosts
whose samples cannot be trusted (driver down) expose no readings.

gpuconsole's own series: ``gpuconsole_host_up{Hostname}`` (1 streaming, 0 down or stale; absent
while connecting), ``gpuconsole_host_sample_age_seconds{Hostname}``, and the firing alerts as
Prometheus' own rule evaluator writes them: ``ALERTS{alertname, alertstate="firing",
severity, ...} 1`` and ``ALERTS_FOR_STATE{alertname, ...} <fired_at, Unix s>``.

Jobs' progress, read from their logs every ``jobs_refresh_s``
(:meth:`console.service.Service.progress`): ``gpuconsole_job_throughput{hpc_job, unit}``
(``unit`` ``steps/s``, and ``tokens/s`` or ``samples/s`` for the whole job when it reports
one), ``gpuconsole_job_eta_seconds``, ``gpuconsole_job_tflops_per_gpu`` and
``gpuconsole_job_mfu_percent`` (as the job reports them), ``gpuconsole_job_cost_usd_per_hour``
and ``gpuconsole_job_cost_usd`` (at ``price_per_gpu_hour``). A job whose log says nothing has
none of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from console.alerts.model import Alert
from console.fleet.state import FleetState, HostView
from console.throughput import JobProgress
from remote.telemetry.schema import DRIVER_DOWN_STATES, GpuRecord, Sample

__all__ = [
    "GPU_LABELS",
    "GPU_METRICS",
    "FleetCollector",
    "GpuMetric",
    "XidTracker",
    "make_registry",
]

#: Labels of every GPU series, in dcgm-exporter's order; then ``DCGM_FI_DRIVER_VERSION``,
#: ``hpc_job`` and ``rank`` where known.
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


def _pct_ratio(v: float | None) -> float | None:
    return None if v is None else v / 100.0


@dataclass(frozen=True)
class GpuMetric:
    """One dcgm-exporter series and how it is read from a GPU record.

    Attributes:
        name: dcgm-exporter's metric name.
        help: its help text (dcgm-exporter's CSV).
        read: the value from a GPU record, ``None`` when unknown.
    """

    name: str
    help: str
    read: Callable[[GpuRecord], float | None]


GpmKey = Literal["sm_activity_pct", "sm_occupancy_pct", "tensor_activity_pct", "dram_bw_util_pct"]


def _gpm(key: GpmKey) -> Callable[[GpuRecord], float | None]:
    """Reads a GPM percentage as DCGM's ratio (0-1)."""

    def read(g: GpuRecord) -> float | None:
        gpm = g["gpm"]
        return _pct_ratio(gpm[key] if gpm else None)

    return read


def _fb_free(g: GpuRecord) -> float | None:
    total, used = g["mem_total_mib"], g["mem_used_mib"]
    return None if total is None or used is None else float(total - used)


#: The GPU series, dcgm-exporter's names and help texts; units as DCGM's (%, MiB, C, W, MHz,
#: ratios 0-1 for ``DCGM_FI_PROF_*``).
GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g["sm_clock_mhz"]),
    GpuMetric(
        "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g["mem_clock_mhz"]
    ),
    GpuMetric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g["temp_c"]),
    GpuMetric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g["power_w"]),
    GpuMetric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g["util_gpu_pct"]),
    GpuMetric(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g["util_mem_pct"]
    ),
    GpuMetric("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    GpuMetric(
        "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g["mem_used_mib"]
    ),
    GpuMetric(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g["ecc_volatile_uncorrected"],
    ),
    GpuMetric(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        _gpm("sm_activity_pct"),
    ),
    GpuMetric(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        _gpm("sm_occupancy_pct"),
    ),
    GpuMetric(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        _gpm("tensor_activity_pct"),
    ),
    GpuMetric(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        _gpm("dram_bw_util_pct"),
    ),
)

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
XID_HELP = "Value of the last XID error encountered."


class XidTracker:
    """The last Xid of every GPU since it started: ``(host, gpu index) -> xid``.

    Feed it every sample (:meth:`on_sample`, on the loop); :meth:`last` is read from the
    metrics server's thread, under a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], int] = {}

    def on_sample(self, host: str, sample: Sample) -> None:
        """Take a sample's ``xid_events`` (a GPU named only by its PCI bus id is matched to
        its index through the sample's GPU list)."""
        if not sample["xid_events"]:
            return
        by_bus = {g["pci_bus_id"]: g["index"] for g in sample["gpus"] if g["pci_bus_id"]}
        with self._lock:
            for x in sample["xid_events"]:
                idx = x["gpu_index"]
                if idx is None and x["pci_bus_id"]:
                    idx = by_bus.get(x["pci_bus_id"])
                if idx is not None:
                    self._last[(host, idx)] = int(x["xid"])

    def last(self, host: str, gpu: int) -> int | None:
        """The last Xid of a GPU, ``None`` if none was seen."""
        with self._lock:
            return self._last.get((host, gpu))


def _gpu_holders(state: FleetState, v: HostView) -> dict[int, tuple[str, str]]:
    """GPU index -> (``hpc_job``, ``rank``) label values of the gpuconsole jobs on it."""
    jobs: dict[int, set[str]] = {}
    ranks: dict[int, set[int]] = {}
    for p in v.processes() or ():
        idx = p["gpu_index"]
        job = state.job_of(p["container_id"])
        if idx is None or job is None:
            continue
        jobs.setdefault(idx, set()).add(job.job_id)
        if p["rank"] is not None:
            ranks.setdefault(idx, set()).add(p["rank"])
    return {
        idx: (",".join(sorted(js)), ",".join(str(r) for r in sorted(ranks.get(idx, ()))))
        for idx, js in jobs.items()
    }


class FleetCollector(Collector):
    """A prometheus_client collector over the fleet state and the firing alerts (see the
    module docstring for the series).

    Args:
        fleet: returns the current fleet state (``None`` before the fleet started).
        alerts: returns the alerts that are firing now.
        xids: the last Xid per GPU.
        monotonic: clock of :attr:`HostView.last_rx` (s).
        progress: returns the running jobs' latest progress (``Service.last_progress``).
    """

    def __init__(
        self,
        fleet: Callable[[], FleetState | None],
        alerts: Callable[[], Iterable[Alert]],
        xids: XidTracker | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        progress: Callable[[], Mapping[str, JobProgress]] | None = None,
    ) -> None:
        self._fleet = fleet
        self._alerts = alerts
        self._xids = xids or XidTracker()
        self._monotonic = monotonic
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        """The series, read from the state at scrape time."""
        state = self._fleet()
        if state is not None:
            yield from self._gpu_series(state)
            yield from self._host_series(state)
        if self._progress is not None:
            yield from self._job_series(dict(self._progress()))
        yield from self._alert_series()

    def _job_series(self, progress: Mapping[str, JobProgress]) -> Iterator[Metric]:
        tput = GaugeMetricFamily(
            "gpuconsole_job_throughput",
            "A running job's training speed read from its log: unit steps/s, and tokens/s "
            "or samples/s (the whole job's) when it reports them.",
        )
        eta = GaugeMetricFamily(
            "gpuconsole_job_eta_seconds", "Seconds until the job's step reaches its total (s)."
        )
        tflops = GaugeMetricFamily(
            "gpuconsole_job_tflops_per_gpu", "TFLOP/s per GPU, as the job's log reports it."
        )
        mfu = GaugeMetricFamily(
            "gpuconsole_job_mfu_percent", "Model FLOPs utilization (%), as the job reports it."
        )
        usd_h = GaugeMetricFamily(
            "gpuconsole_job_cost_usd_per_hour",
            "GPUs held x the profile's price_per_gpu_hour (USD/h).",
        )
        usd = GaugeMetricFamily(
            "gpuconsole_job_cost_usd", "USD spent since the job's first node started."
        )
        for job_id, p in sorted(progress.items()):
            labels = {"hpc_job": job_id}
            tp = p.throughput
            if tp is not None:
                if tp.steps_per_s is not None:
                    _add(tput, {**labels, "unit": "steps/s"}, tp.steps_per_s)
                if tp.rate is not None and tp.rate_unit is not None:
                    _add(tput, {**labels, "unit": tp.rate_unit}, tp.rate)
                if tp.eta_s is not None:
                    _add(eta, labels, tp.eta_s)
                if tp.tflops is not None:
                    _add(tflops, labels, tp.tflops)
                if tp.mfu_pct is not None:
                    _add(mfu, labels, tp.mfu_pct)
            if p.cost is not None:
                _add(usd_h, labels, p.cost.usd_per_hour)
                _add(usd, labels, p.cost.usd_so_far)
        yield from (tput, eta, tflops, mfu, usd_h, usd)

    def _gpu_series(self, state: FleetState) -> Iterator[Metric]:
        fams = {m.name: GaugeMetricFamily(m.name, m.help) for m in GPU_METRICS}
        xid = GaugeMetricFamily(XID_METRIC, XID_HELP)
        for v in list(state.hosts.values()):
            sample = v.sample
            if sample is None or sample["state"] in DRIVER_DOWN_STATES:
                continue
            driver = sample["host"]["driver_version"]
            holders = _gpu_holders(state, v)
            xid_ok = "xid" not in sample["errors"]
            for g in sample["gpus"]:
                idx = g["index"]
                if idx is None or g["lost"]:
                    continue
                labels = {
                    "gpu": str(idx),
                    "UUID": g["uuid"] or "",
                    "pci_bus_id": g["pci_bus_id"] or "",
                    "device": f"nvidia{idx}",
                    "modelName": g["name"] or "",
                    "Hostname": v.name,
                }
                if driver:
                    labels["DCGM_FI_DRIVER_VERSION"] = driver
                job, ranks = holders.get(idx, ("", ""))
                if job:
                    labels["hpc_job"] = job
                if ranks:
                    labels["rank"] = ranks
                for m in GPU_METRICS:
                    value = m.read(g)
                    if value is not None:
                        _add(fams[m.name], labels, float(value))
                if xid_ok:
                    _add(xid, labels, float(self._xids.last(v.name, idx) or 0))
        yield from fams.values()
        yield xid

    def _host_series(self, state: FleetState) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "gpuconsole_host_up",
            "1 while the host streams telemetry, 0 when it is down (unreachable) or stale "
            "(3 intervals without a sample); absent while still connecting.",
        )
        age = GaugeMetricFamily(
            "gpuconsole_host_sample_age_seconds",
            "Seconds since the host's last sample arrived (s).",
        )
        now = self._monotonic()
        for v in list(state.hosts.values()):
            labels = {"Hostname": v.name}
            if v.status == "ok":
                _add(up, labels, 1.0)
            elif v.status in ("down", "stale"):
                _add(up, labels, 0.0)
            if v.last_rx is not None:
                _add(age, labels, max(now - v.last_rx, 0.0))
        yield up
        yield age

    def _alert_series(self) -> Iterator[Metric]:
        alerts = GaugeMetricFamily(
            "ALERTS",
            "Firing gpuconsole alerts (1 each), as Prometheus' rule evaluator writes them.",
        )
        since = GaugeMetricFamily(
            "ALERTS_FOR_STATE", "When each firing gpuconsole alert fired (Unix s)."
        )
        for a in self._alerts():
            if not a.firing:
                continue
            labels = alert_labels(a)
            _add(alerts, {"alertname": a.rule, "alertstate": "firing", **labels}, 1.0)
            _add(since, {"alertname": a.rule, **labels}, a.fired_at)
        yield alerts
        yield since


def alert_labels(a: Alert) -> dict[str, str]:
    """An alert's labels besides ``alertname``/``alertstate``: ``severity``, ``key`` and its
    subject (``Hostname``, ``gpu``, ``hpc_job``, as on the GPU series)."""
    labels = {"severity": a.severity, "key": a.key}
    if a.host is not None:
        labels["Hostname"] = a.host
    if a.gpu is not None:
        labels["gpu"] = str(a.gpu)
    if a.job is not None:
        # the job id, as on the GPU series (a job's alert is keyed by its name, and carries
        # the id of the job that raised it)
        job_id = a.details.get("job_id")
        labels["hpc_job"] = job_id if isinstance(job_id, str) and job_id else a.job
    return labels


def _add(fam: GaugeMetricFamily, labels: dict[str, str], value: float) -> None:
    """Add a sample with its own label set (series of one family may differ in labels, as
    dcgm-exporter's do)."""
    fam.add_sample(fam.name, labels, value)


def make_registry(collector: FleetCollector) -> CollectorRegistry:
    """A registry holding only ``collector`` (no process/platform collectors: the
    endpoint is the fleet's, not this Python process's)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
