"""Job state: reconcile the store with the containers' labels, gang teardown, first failure.

Node states (shown by ``ps``):

- ``pending``: container created, not started;
- ``running``;
- ``succeeded``: exited 0;
- ``failed``: exited non-zero by itself (``failed(<code>)``);
- ``stopped``: exited after gpuconsole stopped it (``stop``, or gang teardown);
- ``lost``: the container is gone although the job was not removed;
- ``unreachable``: its host could not be asked (last known values kept).

A job is ``failed`` when any node failed, else ``running``/``pending`` while any node is, else
``stopped``, ``succeeded``, ``lost`` or ``unknown``. When one node fails while others still
run, the others are stopped (gang teardown) and the first failure is explained once: the node
that finished first with a non-zero code, the torchrun rank from its failure summary or error
file, and one reason from :mod:`console.jobs.diagnose`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from console.jobs.diagnose import diagnose, parse_torchelastic_failure, signal_name
from console.jobs.labels import K_JOB_ID, NodeLabels
from console.jobs.plan import ERROR_FILE
from console.jobs.store import JobRecord, NodeRecord, Store
from console.session import Session
from remote.docker import ContainerInfo, parse_rfc3339_ns
from remote.errors import GpuConsoleError

log = logging.getLogger("gpuconsole.status")

ACTIVE_STATES = ("pending", "running")
FINAL_JOB_STATES = ("succeeded", "failed", "stopped", "lost")


def node_state(info: ContainerInfo, stop_requested: bool) -> str:
    """The node state of one container (see the module docstring)."""
    if info.status == "created":
        return "pending"
    if info.status in ("running", "restarting", "paused", "removing"):
        return "running"
    if info.exit_code == 0:
        return "succeeded"
    return "stopped" if stop_requested else "failed"


def job_state(nodes: list[NodeRecord]) -> str:
    """Aggregate node states into the job state."""
    states = [n.state for n in nodes]
    if "failed" in states:
        return "failed"
    if "running" in states:
        return "running"
    if "pending" in states:
        return "pending"
    if "unreachable" in states:
        return "unknown"
    if "stopped" in states:
        return "stopped"
    if states and all(s == "succeeded" for s in states):
        return "succeeded"
    if "lost" in states:
        return "lost"
    return "unknown"


def format_node_state(n: NodeRecord) -> str:
    """``failed(1)``, ``running``, ..."""
    if n.state == "failed" and n.exit_code is not None:
        return f"failed({n.exit_code})"
    return n.state


def first_failed(nodes: list[NodeRecord]) -> NodeRecord | None:
    """The failed node that finished first (by Docker's FinishedAt), or ``None``."""
    failed = [n for n in nodes if n.state == "failed"]
    if not failed:
        return None

    def key(n: NodeRecord) -> tuple[int, int]:
        try:
            return (parse_rfc3339_ns(n.finished_at or ""), n.node_rank)
        except ValueError:
            return (1 << 62, n.node_rank)

    return min(failed, key=key)


async def _containers(session: Session, job: JobRecord) -> dict[str, list[ContainerInfo] | None]:
    hosts = list(dict.fromkeys(n.host for n in job.nodes))
    job.unreachable = {}

    async def one(host: str) -> list[ContainerInfo] | None:
        try:
            await session.connected(host)
            return await session.engine(host).list({K_JOB_ID: job.id})
        except GpuConsoleError as e:
            log.debug("[%s] cannot list containers of %s: %s", host, job.id, e)
            job.unreachable[host] = e.message
            return None

    results = await asyncio.gather(*(one(h) for h in hosts))
    return dict(zip(hosts, results))


async def refresh(
    session: Session, store: Store, job: JobRecord, *, teardown: bool = True
) -> JobRecord:
    """Reconcile one job with its containers, tear down a half-failed gang, explain a failure.

    Returns the updated record (also written to the store).
    """
    if job.removed_at is not None:
        return job
    stored = await store.call(store.get, job.id)
    if stored is not None:  # `stop` in another terminal: its intent wins over ours
        flags = {n.node_rank: n.stop_requested for n in stored.nodes}
        for n in job.nodes:
            n.stop_requested = n.stop_requested or flags.get(n.node_rank, False)
        job.stop_requested_at = job.stop_requested_at or stored.stop_requested_at
        job.removed_at = stored.removed_at
        if job.removed_at is not None:
            return job
    per_host = await _containers(session, job)
    by_rank: dict[int, ContainerInfo] = {}
    for infos in per_host.values():
        for info in infos or []:
            try:
                rank = NodeLabels.parse(info.labels).node_rank
            except ValueError:
                continue
            by_rank.setdefault(rank, info)
    for n in job.nodes:
        found = by_rank.get(n.node_rank)
        if found is not None:
            n.container_id = found.id
            n.state = node_state(found, n.stop_requested)
            n.exit_code = found.exit_code
            n.started_at = found.started_at
            n.finished_at = found.finished_at
        elif per_host.get(n.host) is None:
            if n.state in ACTIVE_STATES:
                n.state = "unreachable"
        elif n.container_id is not None:
            n.state = "lost"
    failed = first_failed(job.nodes)
    if teardown and failed is not None:
        running = [n for n in job.nodes if n.state in ACTIVE_STATES]
        if running:
            grace = session.profile.defaults.stop_grace
            await stop_nodes(session, store, job, running, grace=min(grace, 10.0))
            return await refresh(session, store, job, teardown=False)
    await store.call(store.update_nodes, job.nodes)
    state = job_state(job.nodes)
    fields: dict[str, Any] = {"state": state}
    if failed is not None:
        fields["exit_code"] = failed.exit_code
        if job.failure is None or job.failure.get("node") != failed.node_rank:
            job.failure = await explain_failure(session, failed)
            fields["failure"] = job.failure
    elif state == "succeeded":
        fields["exit_code"] = 0
    await store.call(store.update_job, job.id, **fields)
    job.state = state
    job.exit_code = fields.get("exit_code", job.exit_code)
    return job


async def stop_nodes(
    session: Session, store: Store, job: JobRecord, nodes: list[NodeRecord], grace: float
) -> None:
    """``docker stop`` (SIGTERM, then SIGKILL after ``grace`` s) the nodes, all at once."""
    for n in nodes:
        n.stop_requested = True
    await store.call(store.update_nodes, job.nodes)

    async def one(n: NodeRecord) -> None:
        if n.container_id:
            await session.engine(n.host).stop(n.container_id, grace=grace)

    results = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
    for n, r in zip(nodes, results):
        if isinstance(r, BaseException):
            log.warning("could not stop node %d on %s: %s", n.node_rank, n.host, r)


async def explain_failure(session: Session, node: NodeRecord) -> dict[str, Any]:
    """The first failure, explained: node, host, exit code, rank, reason, fix.

    Sources, best first: torchrun's error file (``TORCHELASTIC_ERROR_FILE``, written when the
    failing worker's entry point is wrapped by ``@record``), the failure summary torchrun
    prints, and the rest of the node's log (see :func:`console.jobs.diagnose.diagnose`).
    """
    out: dict[str, Any] = {
        "node": node.node_rank,
        "host": node.host,
        "exit_code": node.exit_code,
        "rank": None,
        "reason": f"node {node.node_rank} exited with code {node.exit_code}",
        "fix": None,
    }
    if node.container_id is None:
        return out
    text = ""
    try:
        engine = session.engine(node.host)
        info = await engine.inspect(node.container_id)
        if info is not None and info.oom_killed:
            out["reason"] = "the container was killed by the OOM killer (host or cgroup memory)"
            out["fix"] = "lower host memory use (DataLoader workers, batch size) or raise the limit"
        lines = [ln.text async for ln in engine.logs(node.container_id, tail=400)]
        text = "\n".join(lines)
        raw = await engine.read_file(node.container_id, ERROR_FILE)
    except GpuConsoleError as e:
        log.debug("cannot read failure details of node %d: %s", node.node_rank, e)
        raw = None
    failure = parse_torchelastic_failure(text) if text else None
    if failure is not None and failure.root_cause is not None:
        rc = failure.root_cause
        out["rank"] = rc.rank
        sig = signal_name(rc.exitcode)
        code = f"exit code {rc.exitcode}" + (f" ({sig})" if sig else "")
        out["reason"] = f"rank {rc.rank} failed with {code}"
        if rc.exception:
            out["reason"] += f": {rc.exception}"
    if raw:
        message = _error_file_message(raw)
        if message:
            out["reason"] = message
    diag = diagnose(text) if text else None
    if diag is not None and diag.kind != "exception":
        out["reason"] = diag.summary
        out["fix"] = diag.fix
        if out["rank"] is None and diag.ranks:
            out["rank"] = diag.ranks[0]
    elif diag is not None and out["fix"] is None:
        out["fix"] = diag.fix
    return out


def _error_file_message(raw: bytes) -> str | None:
    """The one-line message of a torchelastic error file (``{"message": {"message": ...}}``)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, dict):
        msg = msg.get("message")
    if not isinstance(msg, str) or not msg.strip():
        return None
    return msg.strip().splitlines()[-1]


@dataclass(frozen=True)
class JobView:
    """One row of ``ps``: the job and each node's state, ready to print or dump as JSON."""

    job: JobRecord

    def as_dict(self) -> dict[str, Any]:
        """The documented ``ps --json`` object."""
        j = self.job
        return {
            "id": j.id,
            "name": j.name,
            "profile": j.profile,
            "state": j.state,
            "exit_code": j.exit_code,
            "created_at": j.created_at,
            "failure": j.failure,
            "nodes": [
                {
                    "node_rank": n.node_rank,
                    "host": n.host,
                    "container": n.container_name,
                    "container_id": n.container_id,
                    "state": n.state,
                    "exit_code": n.exit_code,
                    "started_at": n.started_at,
                    "finished_at": n.finished_at,
                }
                for n in j.nodes
            ],
        }


async def adopt_unknown(session: Session, store: Store, hosts: list[str]) -> list[str]:
    """Record jobs found by label on the hosts but missing from the store; returns their ids.

    A console restarted on another machine, or with its state dir lost, recovers every job
    this way.
    """
    from console.jobs.labels import K_JOB_NAME

    found: dict[str, list[tuple[str, ContainerInfo, NodeLabels]]] = {}
    for host in hosts:
        try:
            await session.connected(host)
            infos = await session.engine(host).list({K_JOB_NAME: None})
        except GpuConsoleError:
            continue
        for info in infos:
            try:
                labels = NodeLabels.parse(info.labels)
            except ValueError:
                continue
            # a container labelled for a host this profile does not name belongs to another
            # profile (or another console's name for this machine): leave it alone
            if labels.host not in session.profile.hosts:
                continue
            if await store.call(store.get, labels.job_id) is None:
                found.setdefault(labels.job_id, []).append((host, info, labels))
    adopted = []
    for job_id, items in found.items():
        lab = items[0][2]
        nodes: dict[int, NodeRecord] = {}
        for host, info, labels in items:
            nodes.setdefault(labels.node_rank, NodeRecord(
                job_id, labels.node_rank, labels.host or host, info.name, info.id,
                node_state(info, False), info.exit_code, info.started_at, info.finished_at,
            ))
        rec = JobRecord(
            id=job_id, name=lab.job_name, profile=session.profile.name,
            profile_source=session.profile.source, spec={}, spec_hash=lab.spec_hash,
            created_at=lab.created_at or time.time(), node_count=lab.node_count,
            nodes=[nodes[r] for r in sorted(nodes)],
        )
        await store.call(store.add_job, rec)
        adopted.append(job_id)
    return adopted
