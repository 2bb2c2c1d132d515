"""Collecting what jobs leave on the hosts: synced workdirs that no container uses any more.

A workdir is synced once per content hash (``~/.cache/gpuconsole/workdirs/<sha256[:16]>``)
and shared by every job with the same content. :func:`collect_after_remove` runs when a job
is removed: on each of its hosts it removes that job's workdir unless a container there
(of any job, in any state) still bind-mounts it or a submit synced the same content after
this job's containers were created (it may be between its sync and its containers: a sync
that finds the copy there touches it), and any other synced workdir that no container uses and
nobody synced for :data:`remote.transport.WORKDIR_IDLE_S` (the age sweep).

Limit: "uses" is what the host's own engine sees; hosts that share a home folder (NFS) but
not an engine would see each other's workdirs as unused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from console.jobs.plan import WORKSPACE
from console.jobs.store import JobRecord
from console.session import Session
from remote.docker import parse_rfc3339_ns
from remote.errors import GpuConsoleError
from remote.runtimes import is_docker_id

log = logging.getLogger("gpuconsole.leftovers")

#: A removed job's workdir synced (or reused by a sync) less than this long ago is kept.
OWN_IDLE_S = 30.0


def _inspector(cid: str) -> Callable[[Any], dict[str, Any]]:
    def get(c: Any) -> dict[str, Any]:
        return dict(c.api.inspect_container(cid))

    return get


async def mounted_sources(session: Session, host: str) -> set[str]:
    """Host paths that any container on the host bind-mounts (running or not), and the
    working folders of the host runtime's nodes (``runtime: host`` runs in the synced
    workdir itself).

    Raises:
        GpuConsoleError: the host's default runtime cannot be asked.
    """

    def get(c: Any) -> set[str]:
        return {
            str(m.get("Source"))
            for ct in c.api.containers(all=True)
            for m in ct.get("Mounts") or []
            if m.get("Source")
        }

    engine = session.engine(host)
    used: set[str] = set()
    try:
        used |= await engine.call(get)
    except GpuConsoleError:
        if engine.runtime == "docker":
            raise  # a host without Docker has no containers to ask
    t = await session.connected(host)
    probe = await t.run(["test", "-d", f"{await t.home()}/.cache/gpuconsole/jobs"], timeout=30)
    if probe.returncode == 0 or engine.runtime == "host":
        for info in await engine.hostrt.list({}):
            spec = await engine.hostrt.container_spec(info.id)
            if spec is not None and spec.working_dir:
                used.add(spec.working_dir)
    return used


async def remove_containers(session: Session, job: JobRecord) -> dict[str, list[str]]:
    """Remove the job's containers, then its synced workdir on each host unless a container
    there still uses it, plus the workdirs idle past the age limit (:func:`collect`).

    Returns:
        host -> synced workdirs removed there.

    Raises:
        DockerError: a container could not be removed (nothing is collected then).
    """
    own: dict[str, set[str]] = {}
    created: dict[str, float] = {}
    for n in job.nodes:
        if not n.container_id:
            continue
        cid = n.container_id
        if not is_docker_id(cid):  # a host-runtime node: it runs in the synced workdir
            try:
                spec = await session.engine(n.host).container_spec(cid)
                info = await session.engine(n.host).inspect(cid)
            except GpuConsoleError as e:
                log.debug("[%s] cannot read node %s: %s", n.host, cid, e)
                continue
            if spec is not None and spec.working_dir:
                own.setdefault(n.host, set()).add(spec.working_dir)
            if info is not None and info.created_s is not None:
                created[n.host] = min(created.get(n.host, info.created_s), info.created_s)
            continue
        try:
            attrs = await session.engine(n.host).call(_inspector(cid))
        except GpuConsoleError as e:
            log.debug("[%s] cannot read the mounts of %s: %s", n.host, cid, e)
            continue
        except Exception as e:  # docker.errors.NotFound: gone already
            log.debug("[%s] cannot inspect %s: %s", n.host, cid, e)
            continue
        own.setdefault(n.host, set()).update(
            str(m.get("Source"))
            for m in attrs.get("Mounts") or []
            if m.get("Destination") == WORKSPACE and m.get("Source")
        )
        try:
            t = parse_rfc3339_ns(str(attrs.get("Created") or "")) / 1e9
        except ValueError:
            continue
        created[n.host] = min(created.get(n.host, t), t)
    for n in job.nodes:
        if n.container_id:
            await session.engine(n.host).remove(n.container_id)
    hosts = list(dict.fromkeys(n.host for n in job.nodes))
    results = await asyncio.gather(
        *(collect(session, h, own.get(h, set()), created.get(h)) for h in hosts)
    )
    return dict(zip(hosts, results))


async def collect(
    session: Session, host: str, own: set[str], created: float | None = None
) -> list[str]:
    """On one host: remove the workdirs in ``own`` that no container uses and no sync touched
    after ``created`` (the job's containers' creation, host Unix seconds; without it, those
    idle :data:`OWN_IDLE_S`), and every synced workdir no container uses and idle for
    :data:`remote.transport.WORKDIR_IDLE_S`; returns the paths removed. Errors are logged,
    never raised."""
    try:
        t = await session.connected(host)
        in_use = await mounted_sources(session, host)
        removed = (
            await t.collect_workdirs(in_use, only=own, idle_s=OWN_IDLE_S, synced_before=created)
            if own
            else []
        )
        return removed + await t.collect_workdirs(in_use)
    except GpuConsoleError as e:
        log.warning("[%s] could not collect synced workdirs: %s", host, e)
        return []


#: A dev container of ``shell --host`` with no ``docker exec`` session this long after its
#: creation was left behind (s): a shell's ``docker exec`` starts within seconds of the create.
DEV_CONTAINER_IDLE_S = 120.0


async def sweep_dev_containers(
    session: Session,
    host: str,
    *,
    now: float | None = None,
) -> list[str]:
    """Remove the dev containers (label ``io.gpuconsole.kind=shell``) on ``host`` that no
    shell uses any more: not running, or running with no ``docker exec`` session (Docker's
    ``ExecIDs`` empty) :data:`DEV_CONTAINER_IDLE_S` after their creation. ``shell --host``
    removes its container when it ends; this collects those whose removal could not happen
    (the connection was gone, the process was killed). Returns the names removed.

    Raises:
        DockerError: the host's containers cannot be listed.
    """
    import time

    import docker.errors

    from console.jobs.labels import K_KIND

    now = time.time() if now is None else now

    def sweep(c: Any) -> list[str]:
        removed = []
        for ct in c.api.containers(all=True, filters={"label": [f"{K_KIND}=shell"]}):
            try:
                attrs = c.api.inspect_container(ct["Id"])
            except docker.errors.NotFound:  # removed meanwhile
                continue
            created = parse_rfc3339_ns(str(attrs.get("Created"))) / 1e9
            running = bool((attrs.get("State") or {}).get("Running"))
            if running and (attrs.get("ExecIDs") or now - created < DEV_CONTAINER_IDLE_S):
                continue
            try:
                c.api.remove_container(ct["Id"], force=True)
            except docker.errors.APIError as e:  # best effort, said in the log
                log.warning("host %s: dev container %s not removed: %s", host, ct["Id"], e)
                continue
            removed.append(str(attrs.get("Name", "")).lstrip("/"))
        return removed

    names = await session.engine(host).call(sweep)
    for name in names:
        log.info("host %s: removed dev container %s left by an ended shell", host, name)
    return names
