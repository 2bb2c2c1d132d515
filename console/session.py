"""A session: the profile's hosts, connected on demand and shared by every operation.

One :class:`Session` per CLI command (or per app). Transports and engines are created lazily,
connected concurrently by :meth:`Session.connect_all`, and closed together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType

from console.profiles import Profile
from remote.runtimes import RuntimeEngine
from remote.transport import Transport


class Session:
    """Connections to the hosts of one profile.

    Args:
        profile: the profile whose hosts may be used.
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._transports: dict[str, Transport] = {}
        self._engines: dict[str, RuntimeEngine] = {}

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def transport(self, host: str) -> Transport:
        """The (possibly unconnected) transport of a host.

        Raises:
            ConfigError: the host is not in the profile.
        """
        t = self._transports.get(host)
        if t is None:
            t = self.profile.transport(host)
            self._transports[host] = t
        return t

    async def connected(self, host: str) -> Transport:
        """The transport of a host, connected (reconnects after a drop).

        Raises:
            TransportError: see :meth:`remote.transport.Transport.connect`.
        """
        t = self.transport(host)
        await t.connect()
        return t

    def engine(self, host: str) -> RuntimeEngine:
        """The engine of a host (connects on first use): its Docker engine and its host
        runtime, see :class:`remote.runtimes.RuntimeEngine`; it lists the runtime the profile
        gives the host (``runtime``, default ``docker``)."""
        e = self._engines.get(host)
        if e is None:
            e = RuntimeEngine(self.transport(host), self.profile.host_runtime(host))
            self._engines[host] = e
        return e

    async def connect_all(self, hosts: Iterable[str]) -> None:
        """Connect to several hosts at once; the first error (in host order) is raised."""
        hosts = list(dict.fromkeys(hosts))
        results = await asyncio.gather(*(self.connected(h) for h in hosts), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def close(self) -> None:
        """Close every engine client and connection."""
        for e in self._engines.values():
            await e.close()
        await asyncio.gather(
            *(t.close() for t in self._transports.values()), return_exceptions=True
        )
        self._engines.clear()
        self._transports.clear()
