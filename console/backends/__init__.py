"""The runtimes behind the service, one module each (see :mod:`console.backends.base`).

:func:`backend_for` is the one place that looks at a job's runtime: the profile's
``scheduler`` picks Slurm, else the job's (or host's) ``runtime`` picks Docker or the host
runtime. A new runtime is one module here implementing :class:`~console.backends.base.JobBackend`
plus one line in :func:`backend_for`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from console.backends.base import JobBackend
    from console.jobs.store import Store
    from console.session import Session


def backend_for(session: Session, store: Store, runtime: str = "docker") -> JobBackend:
    """The backend of a job (or a host) of ``session``'s profile.

    Args:
        session: the connections of the job's profile.
        store: the job store.
        runtime: the job's ``runtime`` (:attr:`console.jobs.store.JobRecord.runtime`) or a
            host's (:meth:`console.profiles.Profile.host_runtime`): ``docker`` or ``host``;
            ignored on a Slurm profile, whose nodes run what the script says.
    """
    if session.profile.scheduler == "slurm":
        from console.backends.slurm import SlurmBackend

        return SlurmBackend(session, store)
    if runtime == "host":
        from console.backends.host import HostBackend

        return HostBackend(session, store)
    from console.backends.docker import DockerBackend

    return DockerBackend(session, store)
