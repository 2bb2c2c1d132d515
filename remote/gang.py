"""Gang teardown on the hosts: the supervisor script shipped with a job, and its command line.

The supervisor (``remote/agent/gang.py``, read here as a file, never imported) wraps torchrun
in every node's container of a multi-node job; see its docstring for the protocol over the
job's rendezvous TCPStore. This module is what the console side needs: the files to upload
(:func:`supervisor_files`, content-addressed under :data:`BUNDLE_BASE`), the wrapped command
(:func:`wrap`, :func:`unwrap`) and the outcome a node leaves behind (:func:`parse_marker`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal, get_args

from remote.transport import bundle_digest

#: Exit status of a node that the supervisor ended because another node failed or stopped.
TEARDOWN_EXIT_CODE = 75
#: The supervisor's outcome file in the container (JSON), read back after exit.
MARKER_FILE = "/tmp/gpuconsole-gang.json"
#: Where a host-runtime node's supervisor writes it instead (the node's folder; the
#: variable is read by remote/agent/gang.py).
MARKER_ENV = "GPUCONSOLE_GANG_MARKER"
HOST_MARKER_NAME = "gang.json"
#: Where the supervisor folder is mounted (read-only) in the container.
MOUNT_DIR = "/opt/gpuconsole-gang"
#: Where bundles are uploaded, relative to the host user's home (``<sha256[:16]>/gang.py``).
BUNDLE_BASE = ".cache/gpuconsole/gang"
#: First element of a wrapped command (how :func:`unwrap` recognises one).
_SCRIPT = f"{MOUNT_DIR}/gang.py"


def supervisor_files() -> dict[str, bytes]:
    """The files of the supervisor bundle: ``{"gang.py": <bytes>}``."""
    data = resources.files("remote.agent").joinpath("gang.py").read_bytes()
    return {"gang.py": data}


def bundle_dir(home: str) -> str:
    """The bundle's folder on a host whose user's home is ``home`` (what
    :meth:`remote.transport.Transport.put_bundle` returns for :func:`supervisor_files`)."""
    return f"{home.rstrip('/')}/{BUNDLE_BASE}/{bundle_digest(supervisor_files())}"


def _host_off(torchrun: list[str]) -> list[str]:
    """``torchrun`` with ``is_host=0`` in its ``--rdzv-conf`` (the supervisor hosts the store)."""
    out = list(torchrun)
    for i, a in enumerate(out[:-1]):
        if a == "--rdzv-conf":
            pairs = [p for p in out[i + 1].split(",") if p and not p.startswith("is_host=")]
            out[i + 1] = ",".join([*pairs, "is_host=0"])
            return out
    return [out[0], "--rdzv-conf", "is_host=0", *out[1:]]


def wrap(
    torchrun: list[str],
    *,
    node_rank: int,
    nnodes: int,
    endpoint: str,
    run_id: str,
    grace: float = 10.0,
) -> list[str]:
    """The container command that runs ``torchrun`` under the gang supervisor.

    Node 0's supervisor hosts the rendezvous store at ``endpoint`` (``host:port``), so
    torchrun there gets ``is_host=0``; every node watches that store for another node's end.

    Args:
        torchrun: the torchrun argv (``["torchrun", ...]``).
        node_rank: this node's index (0 hosts the store).
        nnodes: nodes in the job.
        endpoint: the rendezvous endpoint, ``<node 0 address>:<port>``.
        run_id: the rendezvous id (the job id); names the store keys.
        grace: seconds between the SIGTERM of a teardown and the SIGKILL.
    """
    cmd = _host_off(torchrun) if node_rank == 0 else list(torchrun)
    opts = [
        "--node-rank",
        str(node_rank),
        "--nnodes",
        str(nnodes),
        "--store",
        endpoint,
        "--run-id",
        run_id,
        "--grace",
        f"{grace:g}",
    ]
    if node_rank == 0:
        opts.append("--host-store")
    return ["python3", _SCRIPT, *opts, "--", *cmd]


def unwrap(command: list[str]) -> list[str]:
    """The torchrun argv inside a wrapped command (a command not wrapped comes back as is;
    node 0's ``is_host=0`` stays as the container runs it). A host-runtime node runs the
    supervisor from its uploaded folder (``<python> <dir>/gang.py ...``)."""
    if len(command) > 1 and command[1].endswith("/gang.py") and "--" in command:
        return command[command.index("--") + 1 :]
    return list(command)


#: How a node of a gang ended (the marker's ``outcome``, remote/agent/gang.py).
GangOutcomeKind = Literal["first_failure", "teardown", "succeeded", "stopped", "failed"]
#: What ended the node that came first (the marker's ``cause.kind``).
GangCauseKind = Literal["failed", "stopped", "store_lost"]


@dataclass(frozen=True)
class GangOutcome:
    """How a node of a gang ended, from its :data:`MARKER_FILE`.

    Attributes:
        node: the node's rank.
        outcome: ``first_failure``, ``teardown``, ``succeeded``, ``stopped`` or ``failed``.
        torchrun_exit: torchrun's own exit status (128+N for signal N).
        exit_status: the container's exit status.
        cause_node: for ``teardown``: the node whose end caused it.
        cause_kind: for ``teardown``: ``failed``, ``stopped`` or ``store_lost``.
        cause_exit_code: for ``teardown``: that node's exit status, if known.
    """

    node: int
    outcome: GangOutcomeKind
    torchrun_exit: int | None
    exit_status: int | None
    cause_node: int | None = None
    cause_kind: GangCauseKind | None = None
    cause_exit_code: int | None = None

    def describe(self) -> str:
        """One line for people: ``stopped by gang teardown: node 1 failed (exit code 1)``."""
        if self.outcome != "teardown":
            return f"node {self.node}: {self.outcome} (torchrun exit {self.torchrun_exit})"
        if self.cause_kind == "store_lost":
            return "stopped by gang teardown: node 0's rendezvous store went away"
        return (
            f"stopped by gang teardown: node {self.cause_node} {self.cause_kind} "
            f"(exit code {self.cause_exit_code})"
        )


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_marker(raw: bytes) -> GangOutcome | None:
    """Parse a :data:`MARKER_FILE`; ``None`` when it is not one (not JSON, no node rank, an
    outcome the supervisor does not write). A cause kind it does not write reads as ``None``."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    outcome = next((k for k in get_args(GangOutcomeKind) if k == data.get("outcome")), None)
    node = _int(data.get("node"))
    if outcome is None or node is None:
        return None
    raw_cause = data.get("cause")
    cause: dict[str, object] = raw_cause if isinstance(raw_cause, dict) else {}
    kind = next((k for k in get_args(GangCauseKind) if k == cause.get("kind")), None)
    return GangOutcome(
        node=node,
        outcome=outcome,
        torchrun_exit=_int(data.get("torchrun_exit")),
        exit_status=_int(data.get("exit_status")),
        cause_node=_int(cause.get("node")),
        cause_kind=kind,
        cause_exit_code=_int(cause.get("exit_code")),
    )
