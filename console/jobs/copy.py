"""``cp``: files between this machine and a job node's container (``docker cp`` for jobs).

``JOB:PATH`` names a path in the container of one node of a job (``--node``, default 0);
the other operand is a local path. The copy streams a tar over the node's host connection
(:mod:`remote.archive`), on running and exited containers alike (not on removed ones), and
sees the container's mounts (a job's ``/out`` mount included).

Operands: an operand is remote when it has a ``:`` and does not start with ``/``, ``.`` or
``~`` (so ``./a:b`` is a local file); the text before the first ``:`` is the job (id, id
prefix or name). A container path that is not absolute is taken from the container's ``/``,
as ``docker cp`` does.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from console.errors import JobError, UsageError
from console.jobs.store import JobRecord, NodeRecord
from console.session import Session
from remote.archive import (
    ContainerPathNotFound,
    CopyStats,
    LocalPathNotFound,
    copy_from_container,
    copy_to_container,
)


class CopyPathNotFound(UsageError):
    """A path named by a ``cp`` operand does not exist (in the container or here): bad input,
    exit status 2. The message names the path.

    Attributes:
        path: the missing path.
    """

    def __init__(self, message: str, hint: str, path: str) -> None:
        super().__init__(message, hint)
        self.path = path


@dataclass(frozen=True)
class CopyRequest:
    """A parsed ``cp SRC DEST``.

    Attributes:
        job_ref: the job as given (id, id prefix or name).
        direction: ``from`` (container to here) or ``to`` (here to container).
        container_path: absolute path in the container.
        local_path: the local operand as given (a trailing ``/`` kept: it says "a directory").
    """

    job_ref: str
    direction: Literal["from", "to"]
    container_path: str
    local_path: str


@dataclass(frozen=True)
class CopyResult:
    """A finished copy.

    Attributes:
        job_id: the job.
        node_rank: the node whose container was used.
        host: its host.
        stats: files and bytes written, and the path the source was written as.
    """

    job_id: str
    node_rank: int
    host: str
    stats: CopyStats


def split_operand(text: str) -> tuple[str | None, str]:
    """``(job, path)`` for ``JOB:PATH``, ``(None, text)`` for a local path (module docstring).

    Raises:
        UsageError: ``JOB:`` with no path, or ``:PATH`` with no job.
    """
    if not text or text[0] in "/.~" or ":" not in text:
        return None, text
    job, _, path = text.partition(":")
    if not job or not path:
        raise UsageError(
            f"cp: {text!r} must be JOB:PATH with both parts",
            "e.g. `gpuconsole cp myjob:/out/checkpoint.pt .`",
        )
    return job, path


def parse_copy(src: str, dest: str) -> CopyRequest:
    """Parse ``cp SRC DEST``: exactly one operand is ``JOB:PATH``.

    Raises:
        UsageError: neither or both operands name a job, or one is malformed.
    """
    src_job, src_path = split_operand(src)
    dest_job, dest_path = split_operand(dest)
    if (src_job is None) == (dest_job is None):
        which = "both" if src_job is not None else "neither"
        raise UsageError(
            f"cp: {which} of {src!r} and {dest!r} name a job",
            "one side is JOB:PATH, the other a local path: "
            "`gpuconsole cp JOB:/out/ckpt.pt .` or `gpuconsole cp ./cfg.yaml "
            "JOB:/tmp/`",
        )
    if src_job is not None:
        return CopyRequest(src_job, "from", _absolute(src_path), dest_path)
    assert dest_job is not None
    return CopyRequest(dest_job, "to", _absolute(dest_path), src_path)


def _absolute(path: str) -> str:
    """A container path made absolute from ``/``; a trailing ``/`` is kept."""
    if path.startswith("/"):
        return path
    trailing = "/" if path.endswith("/") and path != "/" else ""
    return posixpath.normpath("/" + path) + trailing


def copy_node(job: JobRecord, node: int | None) -> NodeRecord:
    """The node whose container ``cp`` uses: ``node``, else node 0.

    Raises:
        UsageError: ``--node`` is not a node of the job (exit 2).
        JobError: the job was removed, or the node has no container.
    """
    ranks = sorted(n.node_rank for n in job.nodes)
    if node is not None and node not in ranks:
        raise UsageError(
            f"--node {node}: job {job.id} has no node {node}",
            f"nodes: {', '.join(map(str, ranks)) or 'none'}",
        )
    if job.removed_at is not None:
        raise JobError(
            f"job {job.id} was removed: its containers are gone",
            f"its logs are still archived: `gpuconsole logs {job.id}`",
        )
    want = node or 0
    n = next((n for n in job.nodes if n.node_rank == want), None)
    if n is None or not n.container_id:
        raise JobError(
            f"job {job.id}: node {want} has no container ({n.state if n else 'none'})",
            "see `gpuconsole ps`",
        )
    return n


async def copy_job_files(
    session: Session, job: JobRecord, node: int | None, request: CopyRequest
) -> CopyResult:
    """Copy between this machine and the container of one node of ``job``.

    Args:
        session: the session of the job's profile (``Service.session_for(job)``).
        job: the job (``request.job_ref`` resolved by the caller).
        node: ``--node``, or ``None`` for node 0.
        request: the parsed operands.

    Raises:
        UsageError: ``--node`` out of range.
        CopyPathNotFound: the source, or the destination's folder, does not exist (exit 2).
        JobError: the job or the node's container was removed.
        remote.archive.CopyRefused: the destination cannot receive the source (a directory
            onto a file, not writable) or a local file cannot be read.
        remote.archive.UnsafeArchiveMember: the archive tried to write outside the destination.
        TransportError: the host cannot be reached, or its engine refused (read-only mount).
    """
    n = copy_node(job, node)
    assert n.container_id is not None
    await session.connected(n.host)
    engine = session.engine(n.host)
    info = await engine.inspect(n.container_id)
    if info is None:
        raise JobError(
            f"job {job.id}: the container of node {n.node_rank} on {n.host} no longer exists",
            f"see `gpuconsole ps`; logs: `gpuconsole logs {job.id}`",
        )
    where = f"job {job.id} node {n.node_rank}"
    try:
        if request.direction == "from":
            stats = await copy_from_container(
                engine,
                n.container_id,
                request.container_path,
                os.path.expanduser(request.local_path),
            )
        else:
            stats = await copy_to_container(
                engine,
                n.container_id,
                Path(os.path.expanduser(request.local_path)),
                request.container_path,
            )
    except ContainerPathNotFound as e:
        raise CopyPathNotFound(
            f"{where} (container on {n.host}): {e.detail}",
            f"list it with `gpuconsole exec {job.id} --node {n.node_rank} "
            f"-- ls -la {posixpath.dirname(e.path.rstrip('/')) or '/'}`",
            e.path,
        ) from e
    except LocalPathNotFound as e:
        raise CopyPathNotFound(e.message, e.hint or "", e.path) from e
    return CopyResult(job.id, n.node_rank, n.host, stats)
