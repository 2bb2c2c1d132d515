"""Gang teardown without a console: every node of a multi-node job runs under the supervisor.

:func:`attach` takes a built :class:`~console.jobs.plan.JobPlan` and returns it with each
node's torchrun wrapped by :func:`remote.gang.wrap` and the supervisor's folder bind-mounted
read-only at :data:`remote.gang.MOUNT_DIR` (``runtime: host``: run from the uploaded folder by
the job's python); the folder is uploaded to each host first (content-addressed, like the
workdir). A single-node job has no peers and is left unchanged.
"""

from __future__ import annotations

import dataclasses

from console.jobs.plan import JobPlan
from console.session import Session
from remote.docker import Bind
from remote.gang import BUNDLE_BASE, MOUNT_DIR, bundle_dir, supervisor_files, wrap


async def attach(session: Session, plan: JobPlan, *, dry_run: bool = False) -> JobPlan:
    """The plan with every node's container under the gang supervisor (multi-node only).

    Uploads the supervisor to each host unless ``dry_run`` (then the folder it would have
    is shown).

    Raises:
        TransportError: a host could not be reached or the upload failed.
    """
    if len(plan.nodes) < 2:
        return plan
    grace = min(session.profile.defaults.stop_grace, 10.0)
    dirs: dict[str, str] = {}
    for host in dict.fromkeys(n.host for n in plan.nodes):
        t = await session.connected(host)
        dirs[host] = (
            bundle_dir(await t.home())
            if dry_run
            else await t.put_bundle(supervisor_files(), BUNDLE_BASE)
        )
    nodes = []
    for n in plan.nodes:
        c = n.container
        command = wrap(
            c.command,
            node_rank=n.node_rank,
            nnodes=len(plan.nodes),
            endpoint=plan.rdzv_endpoint,
            run_id=plan.job_id,
            grace=grace,
        )
        if c.runtime == "host":  # no container: the job's python runs the uploaded copy
            command = [c.image, f"{dirs[n.host]}/gang.py", *command[2:]]
            nodes.append(dataclasses.replace(n, container=dataclasses.replace(c, command=command)))
            continue
        binds = (*c.binds, Bind(dirs[n.host], MOUNT_DIR, read_only=True))
        nodes.append(
            dataclasses.replace(n, container=dataclasses.replace(c, command=command, binds=binds))
        )
    return dataclasses.replace(plan, nodes=tuple(nodes))
