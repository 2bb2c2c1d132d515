"""One host's runtimes behind one engine: Docker containers and ``runtime: host`` nodes.

:class:`RuntimeEngine` is a :class:`remote.docker.Engine` that also holds the host's
:class:`remote.hostengine.HostEngine`. Every call about one node routes by the node's id: a
Docker container id is 64 lowercase hex digits (what the engine returns on create and lists);
a host-runtime node's id is its name (``gpuconsole-<job id>-n<rank>``, never 64 hex digits).
:meth:`RuntimeEngine.create` routes by :attr:`remote.docker.ContainerSpec.runtime`.
:meth:`RuntimeEngine.list` asks the runtimes the host is set up for (its profile's
``runtime``: ``docker`` asks Docker only, ``host`` the host runtime only); a job of the other
runtime on that host is listed with ``runtime=``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import AsyncIterator, Callable, Mapping

from remote.docker import ContainerInfo, ContainerSpec, Engine, LogLine
from remote.hostengine import HostEngine
from remote.transport import Transport

__all__ = ["RUNTIMES", "RuntimeEngine", "host_runtime_nodes", "is_docker_id"]

#: The runtimes a node can have.
RUNTIMES = ("docker", "host")

_DOCKER_ID = re.compile(r"[0-9a-f]{64}")


def is_docker_id(container_id: str) -> bool:
    """Whether ``container_id`` is a Docker container id (64 lowercase hex digits, as the
    engine returns them) rather than a host-runtime node's name."""
    return _DOCKER_ID.fullmatch(container_id) is not None


class RuntimeEngine(Engine):
    """The Docker engine of a host plus its host runtime (see the module docstring).

    Args:
        transport: the host.
        runtime: the host's default runtime (its profile's ``runtime``): what
            :meth:`list` asks.
        timeout: seconds for each non-streaming call.
    """

    def __init__(
        self, transport: Transport, runtime: str = "docker", timeout: float = 60.0
    ) -> None:
        super().__init__(transport, timeout)
        self.runtime = runtime
        self.hostrt = HostEngine(transport, timeout)

    async def close(self) -> None:
        await super().close()
        await self.hostrt.close()

    async def list(
        self,
        labels: Mapping[str, str | None],
        *,
        detail: Callable[[ContainerInfo], bool] | None = None,
        runtime: str | None = None,
    ) -> builtins.list[ContainerInfo]:
        """Nodes carrying all ``labels`` (see :meth:`remote.docker.Engine.list`) of
        ``runtime`` (default: the host's)."""
        if (runtime or self.runtime) == "host":
            return await self.hostrt.list(labels, detail=detail)
        return await super().list(labels, detail=detail)

    async def inspect(self, container_id: str) -> ContainerInfo | None:
        if not is_docker_id(container_id):
            return await self.hostrt.inspect(container_id)
        return await super().inspect(container_id)

    async def container_spec(
        self,
        container_id: str,
        secret_env: frozenset[str] | set[str] = frozenset(),
    ) -> ContainerSpec | None:
        if not is_docker_id(container_id):
            return await self.hostrt.container_spec(container_id, secret_env)
        return await super().container_spec(container_id, secret_env)

    async def create(self, spec: ContainerSpec) -> str:
        if spec.runtime == "host":
            return await self.hostrt.create(spec)
        return await super().create(spec)

    async def start(self, container_id: str) -> None:
        if not is_docker_id(container_id):
            return await self.hostrt.start(container_id)
        return await super().start(container_id)

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        if not is_docker_id(container_id):
            return await self.hostrt.stop(container_id, grace)
        return await super().stop(container_id, grace)

    async def remove(self, container_id: str) -> None:
        if not is_docker_id(container_id):
            return await self.hostrt.remove(container_id)
        return await super().remove(container_id)

    async def read_file(
        self,
        container_id: str,
        path: str,
        limit: int = 1 << 20,
    ) -> bytes | None:
        if not is_docker_id(container_id):
            return await self.hostrt.read_file(container_id, path, limit)
        return await super().read_file(container_id, path, limit)

    async def log_batches(
        self,
        container_id: str,
        *,
        since_ns: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[builtins.list[LogLine]]:
        if not is_docker_id(container_id):
            async for batch in self.hostrt.log_batches(
                container_id, since_ns=since_ns, tail=tail, follow=follow
            ):
                yield batch
            return
        async for batch in super().log_batches(
            container_id, since_ns=since_ns, tail=tail, follow=follow
        ):
            yield batch


async def host_runtime_nodes(
    engine: RuntimeEngine, labels: Mapping[str, str | None]
) -> builtins.list[ContainerInfo]:
    """On a host whose default runtime is Docker: the host runtime's nodes too, when it has
    any (one remote command that stops at once without a jobs folder:
    :meth:`remote.hostengine.HostEngine.list_if_any`; host nodes are always complete, so
    they need no ``detail``); empty on a host whose default is the host runtime (its
    :meth:`RuntimeEngine.list` already asks it)."""
    if engine.runtime != "docker":
        return []
    return await engine.hostrt.list_if_any(labels)
