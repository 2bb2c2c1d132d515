"""The telemetry sample schema (version 1): one JSON object per line, per host, per interval.

Produced by the host agent (``remote/agent/agent.py``, NVML) and by the nvidia-smi fallback
parser (``remote/telemetry/smi.py``); consumed by ``console/fleet``. Unknown is ``null``, never
0: a field NVML does not support or that failed is ``null`` and its reason is kept in the
record's ``errors`` map (field name -> reason). Units are in the key names: ``_pct`` (percent,
0-100), ``_mib`` (MiB), ``_c`` (degrees C), ``_w`` (W), ``_mhz`` (MHz), ``_s`` (seconds).

Sample::

    {
      "schema": 1, "type": "sample", "source": "nvml" | "nvidia-smi",
      "seq": 17, "host_time": 1795971600.25, "interval_s": 1.0,
      "state": "ok" | "no_driver" | "nvml_unavailable" | "driver_unreachable"
               | "version_mismatch" | "no_gpus" | "gpu_lost" | "error",
      "state_detail": "human-readable reason, or null",
      "host": {"hostname": str, "cpu_pct": float, "load1": float, "load5": float,
               "load15": float, "mem_used_mib": int, "mem_total_mib": int, "uptime_s": float,
               "driver_version": str, "cuda_version": str, "nvml_version": str,
               "errors": {field: reason}},
      "gpus": [{
          "index": int, "uuid": str, "name": str, "pci_bus_id": "00000000:3D:00.0",
          "lost": bool,
          "util_gpu_pct": int, "util_mem_pct": int, "mem_used_mib": int, "mem_total_mib": int,
          "temp_c": int, "power_w": float, "power_limit_w": float, "sm_clock_mhz": int,
          "mem_clock_mhz": int, "fan_pct": int, "pstate": "P0",
          "throttle_reasons": ["sw_power_cap", ...], "ecc_volatile_uncorrected": int,
          "remapped_rows_pending": bool, "persistence_mode": bool, "mig_mode": bool,
          "gpm": {"sm_activity_pct": float, "sm_occupancy_pct": float,
                  "tensor_activity_pct": float, "dram_bw_util_pct": float} | null,
          "errors": {field: reason}
      }],
      "processes": [{"gpu_index": int, "gpu_uuid": str, "pid": int, "used_mib": int | null,
                     "type": "compute" | "graphics", "user": str | null,
                     "command": str | null, "container_id": str | null,
                     "rank": int | null, "local_rank": int | null}] | null,
      "xid_events": [{"time": float, "gpu_index": int | null, "pci_bus_id": str | null,
                      "xid": int, "pid": int | null, "detail": str | null}],
      "errors": {"processes": reason, "xid": reason, ...}
    }

``processes`` is ``null`` when the list could not be read (never reported as "no processes").
``mig_mode``: ``false`` also when the GPU does not support MIG (nvidia-smi ``[N/A]``).
``pid`` is the host PID; ``container_id`` (64 hex) comes from ``/proc/PID/cgroup``; ``rank``
and ``local_rank`` are the ``RANK``/``LOCAL_RANK`` torchrun set for the worker
(``/proc/PID/environ``; absent in the nvidia-smi fallback).
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1

#: Host states (``state``): everything but ``ok`` means the host is unhealthy.
HOST_STATES = (
    "ok",
    "no_driver",  # no NVIDIA driver / nvidia-smi on the host
    "nvml_unavailable",  # libnvidia-ml.so.1 cannot be loaded (no user-space driver)
    "driver_unreachable",  # nvidia-smi/NVML cannot talk to the kernel driver
    "version_mismatch",  # driver/library version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    "no_gpus",  # the driver answers but enumerates 0 GPUs
    "gpu_lost",  # at least one GPU fell off the bus / is lost
    "error",  # anything else; see state_detail
)

GPU_FIELDS = (
    "util_gpu_pct", "util_mem_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w",
    "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "fan_pct", "pstate", "throttle_reasons",
    "ecc_volatile_uncorrected", "remapped_rows_pending", "persistence_mode", "mig_mode", "gpm",
)


def empty_gpu(index: int) -> dict[str, Any]:
    """A GPU record with every reading unknown (``None``)."""
    rec: dict[str, Any] = {"index": index, "uuid": None, "name": None, "pci_bus_id": None,
                           "lost": False}
    rec.update({f: None for f in GPU_FIELDS})
    rec["errors"] = {}
    return rec


def empty_sample(source: str, seq: int, host_time: float, interval_s: float) -> dict[str, Any]:
    """A sample with no GPUs and state ``ok`` (fill in ``host``, ``gpus``, ...)."""
    return {
        "schema": SCHEMA_VERSION, "type": "sample", "source": source, "seq": seq,
        "host_time": host_time, "interval_s": interval_s, "state": "ok", "state_detail": None,
        "host": {"errors": {}}, "gpus": [], "processes": None, "xid_events": [], "errors": {},
    }
