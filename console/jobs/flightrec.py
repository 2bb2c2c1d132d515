"""PyTorch's Flight Recorder, on for every training job unless its spec says
``flight_recorder: false``.

Flight Recorder (``torch/csrc/distributed/c10d/FlightRecorder.hpp``; PyTorch's "Flight
Recorder for Debugging Stuck Jobs" tutorial) keeps each rank's last collectives (op, sizes,
sequence ids, state: scheduled/started/completed, the Python stack that called it) in a ring
buffer. It is read by ``torch.distributed.flight_recorder`` (``torchfrtrace``), which finds
where the ranks diverge: a collective that some ranks never entered, or ranks calling
different collectives at one sequence number.

The variables set (the spec's own ``env`` wins over each), by their current names only:
PyTorch warns on every rank at start-up for a deprecated name (``TORCH_NCCL_TRACE_BUFFER_SIZE
is deprecated; use TORCH_FR_BUFFER_SIZE``, PyTorch 2.13), so a release that predates the
``TORCH_FR_*`` names records nothing unless the spec sets ``TORCH_NCCL_TRACE_BUFFER_SIZE``:

- ``TORCH_FR_BUFFER_SIZE``: :data:`BUFFER_ENTRIES` entries per rank (PyTorch's tutorial's
  suggestion), every backend (gloo records too).
- ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``: the NCCL watchdog writes every rank's buffer when a
  collective times out, to ``TORCH_FR_DUMP_TEMP_FILE<rank>``.
- ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``: each rank's watchdog makes a named pipe
  ``<prefix><rank>.pipe``; writing to it dumps that rank's buffer while the job runs (NCCL
  process groups only).

Where: ``/tmp/`` in a container (the container's own); the node's folder on a host
(``runtime: host``: several jobs share a host's ``/tmp``); the job's folder for Slurm.
"""

from __future__ import annotations

#: ring buffer entries per rank (PyTorch's tutorial uses 2000)
BUFFER_ENTRIES = 2000
#: file name prefixes, followed by the global rank
DUMP_PREFIX = "gpuconsole_fr_rank_"
PIPE_PREFIX = "gpuconsole_fr_pipe_"


def flight_recorder_env(folder: str) -> dict[str, str]:
    """The variables that turn the Flight Recorder on, its dumps and pipes in ``folder`` (a
    path on the node: ``/tmp`` in a container, the node's folder on a host)."""
    folder = folder.rstrip("/") or "/"
    dump = f"{folder}/{DUMP_PREFIX}"
    return {
        "TORCH_FR_BUFFER_SIZE": str(BUFFER_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": dump,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{folder}/{PIPE_PREFIX}",
    }
