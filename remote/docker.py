"""The Docker engine of one host, driven through the Docker SDK over the transport's socket.

Listing and inspecting containers (every refresh, on every host) are requests on the event
loop itself (:mod:`remote.dockerapi`: no SDK, no thread), as are log streams, read in bulk
(:mod:`remote.dockerlogs`). Everything else goes through the Docker SDK, imported on first use
(a command that only lists does not pay for its import): the SDK is synchronous, so each of
its calls runs in a worker thread (``asyncio.to_thread``) while the loop keeps serving the
SSH-forwarded socket the call talks to.

Every container gpuconsole starts is described by a :class:`ContainerSpec`, which can also be
rendered as the equivalent ``docker run`` command line (secrets masked) for dry runs and logs.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import logging
import math
import os
import re
import shlex
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from remote import dockerapi
from remote.dockerlogs import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
)
from remote.dockerlogs import (
    PARTIAL_CHUNK_BYTES as PARTIAL_CHUNK_BYTES,
)
from remote.dockerlogs import (
    LogLine as LogLine,
)
from remote.dockerlogs import (
    LogsRequestError,
    read_log_batches,
)
from remote.dockerlogs import (
    format_ns as format_ns,
)
from remote.dockerlogs import (
    join_partial_chunks as join_partial_chunks,
)
from remote.dockerlogs import (
    parse_rfc3339_ns as parse_rfc3339_ns,
)
from remote.dockerlogs import (
    split_log_line as split_log_line,
)
from remote.errors import ConnectionLost, DockerError, ImageNotFound
from remote.transport import Transport

if TYPE_CHECKING:
    import docker
    import docker.errors

log = logging.getLogger("gpuconsole.remote.docker")

T = TypeVar("T")


@dataclass(frozen=True)
class Bind:
    """A bind mount: host path ``source`` at ``target`` in the container."""

    source: str
    target: str
    read_only: bool = False

    def render(self) -> str:
        """``source:target[:ro]``, as ``docker run -v`` takes it."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to create one container.

    Attributes:
        name: container name.
        image: image reference.
        command: argv run in the container (no shell).
        env: environment; values of keys in ``secret_env`` are never printed.
        secret_env: keys whose values come from the operator's secrets.
        labels: container labels (the job's data contract, see docs/architecture.md).
        gpu_device_ids: GPU indices given to the container (``--gpus device=...``); empty = none.
        shm_size: ``/dev/shm`` size (``1g``), or ``None`` for Docker's 64 MB default.
        ipc_mode: ``host`` to share the host's IPC namespace (then shm_size is ignored).
        binds: bind mounts.
        cap_add: capabilities added back after dropping all.
        privileged: only when a profile asks for it.
        network_mode: ``host`` (torchrun nodes reach each other on the hosts' addresses).
        working_dir: working directory in the container.
        user: ``uid:gid`` the container runs as, or ``None`` for the image's user.
        init: run Docker's init (``--init``, tini) as PID 1, so signals reach the command:
            without it torchrun is PID 1, and the kernel drops a SIGTERM that PID 1 has no
            handler for yet (a ``docker stop`` in torchrun's first second waits out the
            whole grace period).
        runtime: ``docker``, or ``host`` for a node run by the host runtime
            (:mod:`remote.hostengine`: ``image`` is then the python, ``working_dir`` a host
            folder, no binds).
    """

    name: str
    image: str
    command: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_device_ids: tuple[str, ...] = ()
    shm_size: str | None = None
    ipc_mode: str | None = None
    binds: tuple[Bind, ...] = ()
    cap_add: tuple[str, ...] = ()
    privileged: bool = False
    network_mode: str = "host"
    working_dir: str | None = None
    user: str | None = None
    init: bool = True
    runtime: str = "docker"

    def docker_run_argv(self) -> list[str]:
        """The equivalent ``docker run`` argv; secret values are shown as ``***``."""
        argv = [
            "docker",
            "run",
            "-d",
            *(["--init"] if self.init else []),
            "--name",
            self.name,
            "--network",
            self.network_mode,
        ]
        for k, v in sorted(self.labels.items()):
            argv += ["--label", f"{k}={v}"]
        if self.gpu_device_ids:
            argv += ["--gpus", f'"device={",".join(self.gpu_device_ids)}"']
        if self.ipc_mode:
            argv += ["--ipc", self.ipc_mode]
        elif self.shm_size:
            argv += ["--shm-size", self.shm_size]
        if self.privileged:
            argv += ["--privileged"]
        else:
            argv += ["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
            for cap in self.cap_add:
                argv += ["--cap-add", cap]
        if self.user:
            argv += ["--user", self.user]
        for b in self.binds:
            argv += ["-v", b.render()]
        if self.working_dir:
            argv += ["-w", self.working_dir]
        for k, v in sorted(self.env.items()):
            argv += ["-e", f"{k}=***" if k in self.secret_env else f"{k}={v}"]
        return [*argv, self.image, *self.command]

    def docker_run_line(self) -> str:
        """:meth:`docker_run_argv` quoted for a POSIX shell."""
        return shlex.join(self.docker_run_argv())

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``docker.DockerClient.containers.create``."""
        kw: dict[str, Any] = {
            "name": self.name,
            "command": list(self.command),
            "environment": dict(self.env),
            "labels": dict(self.labels),
            "network_mode": self.network_mode,
            "detach": True,
        }
        if self.init:
            kw["init"] = True
        if self.gpu_device_ids:
            from docker.types import DeviceRequest

            kw["device_requests"] = [
                DeviceRequest(device_ids=list(self.gpu_device_ids), capabilities=[["gpu"]])
            ]
        if self.ipc_mode:
            kw["ipc_mode"] = self.ipc_mode
        elif self.shm_size:
            kw["shm_size"] = self.shm_size
        if self.privileged:
            kw["privileged"] = True
        else:
            kw["security_opt"] = ["no-new-privileges"]
            kw["cap_drop"] = ["ALL"]
            if self.cap_add:
                kw["cap_add"] = list(self.cap_add)
        if self.binds:
            kw["volumes"] = {
                b.source: {"bind": b.target, "mode": "ro" if b.read_only else "rw"}
                for b in self.binds
            }
        if self.working_dir:
            kw["working_dir"] = self.working_dir
        if self.user:
            kw["user"] = self.user
        return kw


@dataclass(frozen=True)
class ContainerInfo:
    """A container as the engine reports it (``docker inspect``).

    Attributes:
        id: full container id.
        name: container name without the leading ``/``.
        labels: its labels.
        status: Docker's state: ``created``, ``running``, ``paused``, ``restarting``,
            ``removing``, ``exited`` or ``dead``.
        exit_code: exit status once exited (Docker's ``State.ExitCode``), else ``None``.
        started_at: RFC 3339 start time, or ``None`` before start.
        finished_at: RFC 3339 finish time, or ``None`` while running.
        oom_killed: Docker's ``State.OOMKilled``.
        error: Docker's ``State.Error`` (why it could not start), or ``""``.
        created_s: when the container was created (Unix s), or ``None`` if unknown.
        detailed: built from ``docker inspect`` (every field known); ``False`` when built from
            the container list (:meth:`from_summary`): ``started_at``, ``finished_at``,
            ``oom_killed`` and ``error`` are then unknown (``None``/``False``/``""``) and the
            exit code is read from the list's status text.
        gpu_devices: the GPUs given to the container, as ``NVIDIA_VISIBLE_DEVICES`` names them
            (:func:`gpu_devices_of`): ``0,1``, UUIDs, ``all``, ``none``; ``None`` when not
            known (not inspected, or GPUs passed another way).
    """

    id: str
    name: str
    labels: Mapping[str, str]
    status: str
    exit_code: int | None
    started_at: str | None
    finished_at: str | None
    oom_killed: bool = False
    error: str = ""
    created_s: float | None = None
    detailed: bool = True
    gpu_devices: str | None = None

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> ContainerInfo:
        """Build from one entry of the engine's container list (``GET /containers/json``:
        ``Id``, ``Names``, ``Labels``, ``State``, ``Status``, ``Created``), without an inspect.

        The exit code of an exited container comes from its status text
        (``Exited (137) 3 seconds ago``); it is ``None`` when the text has none (``dead``).
        """
        status = str(summary.get("State") or "unknown")
        code = None
        if status in ("exited", "dead"):
            m = _EXITED.match(str(summary.get("Status") or ""))
            code = int(m.group(1)) if m else None
        names = summary.get("Names") or [""]
        created = summary.get("Created")
        return cls(
            id=str(summary["Id"]),
            name=str(names[0]).lstrip("/"),
            labels=dict(summary.get("Labels") or {}),
            status=status,
            exit_code=code,
            started_at=None,
            finished_at=None,
            created_s=float(created) if isinstance(created, (int, float)) else None,
            detailed=False,
        )

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> ContainerInfo:
        """Build from the engine's inspect JSON (``Container.attrs``)."""
        state = attrs.get("State") or {}
        status = str(state.get("Status", "unknown"))
        started = _docker_time(state.get("StartedAt"))
        finished = _docker_time(state.get("FinishedAt"))
        exited = status in ("exited", "dead")
        return cls(
            id=str(attrs["Id"]),
            name=str(attrs.get("Name", "")).lstrip("/"),
            labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
            status=status,
            exit_code=int(state.get("ExitCode", 0)) if exited else None,
            started_at=started,
            finished_at=finished if exited else None,
            oom_killed=bool(state.get("OOMKilled", False)),
            error=str(state.get("Error") or ""),
            created_s=_docker_time_s(attrs.get("Created")),
            gpu_devices=gpu_devices_of(attrs),
        )


def gpu_devices_of(attrs: Mapping[str, Any]) -> str | None:
    """The GPUs a container was given, from ``docker inspect`` JSON, spelled the way the
    NVIDIA Container Toolkit reads ``NVIDIA_VISIBLE_DEVICES`` (indices ``0,1``, UUIDs, ``all``,
    ``none``).

    ``HostConfig.DeviceRequests`` first (``--gpus``; the engine turns a request into that
    variable, moby ``daemon/nvidia_linux.go`` ``setNvidiaGPUs``: ``DeviceIDs`` joined, ``Count``
    N as ``0,...,N-1``, ``Count`` -1 as ``all``; a CDI request ``nvidia.com/gpu=X`` names X);
    then, under the ``nvidia`` runtime, ``NVIDIA_VISIBLE_DEVICES`` in ``Config.Env``. A
    container with neither and no ``/dev/nvidia<N>`` device is ``none``; one with such a
    device (GPUs passed by hand) is ``None``: which GPUs, inspect does not say.
    """
    host = attrs.get("HostConfig") or {}
    for req in host.get("DeviceRequests") or []:
        caps = {str(c) for group in req.get("Capabilities") or [] for c in group or []}
        ids = [str(d) for d in req.get("DeviceIDs") or []]
        cdi = [d.split("=", 1)[1] for d in ids if d.startswith("nvidia.com/gpu=")]
        if cdi:
            return ",".join(cdi)
        if req.get("Driver") != "nvidia" and "gpu" not in caps:
            continue
        if ids:
            return ",".join(ids)
        count = int(req.get("Count") or 0)
        if count < 0:
            return "all"
        if count > 0:
            return ",".join(str(i) for i in range(count))
    if host.get("Runtime") == "nvidia":
        for item in (attrs.get("Config") or {}).get("Env") or []:
            key, _, value = str(item).partition("=")
            if key == "NVIDIA_VISIBLE_DEVICES":
                return value
        return None
    for dev in host.get("Devices") or []:
        path = str((dev or {}).get("PathOnHost") or "")
        if path.startswith("/dev/nvidia") and path[len("/dev/nvidia") :].isdigit():
            return None
    return "none"


def _docker_size(n: int) -> str:
    """Bytes as ``docker run``'s size flags take them: the largest unit that divides them
    exactly (``1g``, ``1536m``, ``64k``; ``b`` for bytes)."""
    for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}b"


#: Container label naming the environment variables the run itself set, comma-separated
#: (written by console/jobs/plan.py): :func:`spec_from_attrs` keeps them in the environment
#: also where the image sets the same value.
RUN_ENV_LABEL = "io.gpuconsole.env"


def spec_from_attrs(
    attrs: Mapping[str, Any],
    secret_env: frozenset[str] = frozenset(),
    image_env: Sequence[str] = (),
    image_labels: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """Rebuild a :class:`ContainerSpec` from ``docker inspect`` JSON (the fields gpuconsole
    sets: name, image, command, env, labels, GPUs, shm/ipc, binds, capabilities, privileges,
    network, workdir, user). ``image_env`` (the image's ``KEY=value`` list) is left out of
    the environment (unless :data:`RUN_ENV_LABEL` names it: the run set it too) and
    ``image_labels`` (the image's ``Config.Labels``, which Docker copies into every
    container's) out of the labels, unless the run set another value."""
    cfg = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    env: dict[str, str] = {}
    inherited = set(image_env)
    run_set = set(str((cfg.get("Labels") or {}).get(RUN_ENV_LABEL) or "").split(","))
    for item in cfg.get("Env") or []:
        k, _, v = str(item).partition("=")
        if item in inherited and k not in run_set:
            continue
        env[k] = v
    gpus: list[str] = []
    for req in host.get("DeviceRequests") or []:
        gpus += [str(d) for d in req.get("DeviceIDs") or []]
    binds = []
    for b in host.get("Binds") or []:
        parts = str(b).split(":")
        if len(parts) >= 2:
            binds.append(Bind(parts[0], parts[1], read_only="ro" in parts[2:]))
    shm = host.get("ShmSize")
    ipc = host.get("IpcMode")
    command = [*(cfg.get("Entrypoint") or []), *(cfg.get("Cmd") or [])]
    return ContainerSpec(
        name=str(attrs.get("Name", "")).lstrip("/"),
        image=str(cfg.get("Image", "")),
        command=[str(c) for c in command],
        env=env,
        secret_env=secret_env,
        labels={
            k: v for k, v in (cfg.get("Labels") or {}).items() if (image_labels or {}).get(k) != v
        },
        gpu_device_ids=tuple(gpus),
        shm_size=_docker_size(int(shm)) if isinstance(shm, int) and shm else None,
        ipc_mode="host" if ipc == "host" else None,
        binds=tuple(binds),
        cap_add=tuple(host.get("CapAdd") or ()),
        privileged=bool(host.get("Privileged")),
        network_mode=str(host.get("NetworkMode") or "default"),
        working_dir=cfg.get("WorkingDir") or None,
        user=cfg.get("User") or None,
        init=bool(host.get("Init")),
    )


_EXITED = re.compile(r"^Exited \((-?\d+)\)")


def _docker_time_s(value: object) -> float | None:
    """An RFC 3339 time from Docker as Unix seconds, or ``None``."""
    t = _docker_time(value)
    if t is None:
        return None
    try:
        return parse_rfc3339_ns(t) / 1e9
    except ValueError:
        return None


def _docker_time(value: object) -> str | None:
    """Docker reports 'never' as ``0001-01-01T00:00:00Z``; map that to ``None``."""
    if not isinstance(value, str) or value.startswith("0001-01-01"):
        return None
    return value


def _sweep_sidecars(c: docker.DockerClient, kind: str, older_than_s: float) -> None:
    """Remove the ended sidecars labelled ``io.gpuconsole.kind=<kind>`` made more than
    ``older_than_s`` seconds ago (by its creation time): their console was killed before it
    removed them. A console waits for its sidecar at most its timeout and removes it at once
    when it ends, so a running one, or a younger one just ended, is still another console's."""
    import docker.errors

    now = time.time()
    for summary in c.api.containers(all=True, filters={"label": f"io.gpuconsole.kind={kind}"}):
        created = summary.get("Created")
        old = isinstance(created, int | float) and now - created > older_than_s
        if old and summary.get("State") in ("exited", "dead"):
            try:
                c.api.remove_container(summary["Id"], force=True)
            except docker.errors.APIError:  # another console removed it first
                pass


class Engine:
    """The Docker engine of one host (see module docstring for the threading model).

    Args:
        transport: the host; its :meth:`~remote.transport.Transport.docker_socket` is used.
        timeout: seconds for each non-streaming API call.
    """

    def __init__(self, transport: Transport, timeout: float = 60.0) -> None:
        self.transport = transport
        self.timeout = timeout
        self._client: docker.DockerClient | None = None
        self._api: str | None = None

    @property
    def host(self) -> str:
        """The host's profile name."""
        return self.transport.name

    def _not_answering(self, detail: str) -> DockerError:
        sock = self.transport.engine_socket_path()
        return DockerError(
            self.host,
            f"the Docker engine does not answer on {self.transport.describe()} "
            f"(socket {sock}): {detail}",
            f"check that dockerd runs on the host, that its socket is {sock} (the profile's "
            "`docker_socket`) and that the SSH user may use it (docker group)",
        )

    async def _get_client(self) -> docker.DockerClient:
        import docker
        import docker.errors

        if self._client is not None and not self.transport.connected:
            self._client.close()
            self._client = None
        path = await self.transport.docker_socket()
        if self._client is None:
            # The client asks the engine for its API version on construction: do it off the
            # loop, which must stay free to serve the SSH-forwarded socket.
            try:
                self._client = await asyncio.to_thread(
                    docker.DockerClient, base_url=f"unix://{path}", timeout=int(self.timeout)
                )
            except docker.errors.DockerException as e:
                raise self._not_answering(str(e)) from e
        return self._client

    async def call(self, fn: Callable[[docker.DockerClient], T]) -> T:
        """Run ``fn(client)`` in a worker thread, mapping SDK errors to gpuconsole errors.

        Raises:
            ConnectionLost: the engine could not be reached (socket or connection dropped).
            DockerError: the engine refused the request.
        """
        import docker.errors
        import requests.exceptions

        client = await self._get_client()
        try:
            return await asyncio.to_thread(fn, client)
        except docker.errors.ImageNotFound as e:
            raise ImageNotFound(self.host, _api_message(e)) from e
        except docker.errors.APIError as e:
            # the engine's own words: console explains them (console.diagnosis, at launch)
            raise DockerError(self.host, f"Docker engine: {_api_message(e)}") from e
        except (requests.exceptions.ConnectionError, ConnectionError, OSError) as e:
            self._drop_client()
            raise ConnectionLost(self.host, f"Docker engine unreachable: {e}") from e
        except docker.errors.DockerException as e:
            raise DockerError(self.host, f"Docker engine: {e}") from e

    async def _api_socket(self) -> tuple[str, str]:
        """(socket path, the engine's API version), the version asked once per connection
        (:func:`remote.dockerapi.api_version`).

        Raises:
            DockerError: the engine does not answer (socket named, with the fix).
        """
        if self._api is not None and not self.transport.connected:
            self._api = None
        path = await self.transport.docker_socket()
        if self._api is None:
            try:
                self._api = await asyncio.wait_for(dockerapi.api_version(path), self.timeout)
            except dockerapi.EngineRequestError as e:
                raise self._not_answering(e.message) from e
            except TimeoutError as e:
                raise self._not_answering(f"no answer to /_ping within {self.timeout:g} s") from e
        return path, self._api

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any | None:
        """``GET`` one read-only Engine API ``path`` on the loop (:mod:`remote.dockerapi`):
        the decoded JSON answer, or ``None`` for a 404.

        Raises:
            ConnectionLost: the engine could not be reached, the connection dropped, or no
                answer came within the engine's timeout.
            DockerError: the engine refused the request (its message), or does not answer.
        """
        socket_path, version = await self._api_socket()
        try:
            return await asyncio.wait_for(
                dockerapi.get_json(socket_path, version, path, params), self.timeout
            )
        except dockerapi.EngineRequestError as e:
            if e.unreachable:
                self._api = None
                raise ConnectionLost(self.host, f"Docker engine unreachable: {e.message}") from e
            raise DockerError(self.host, f"Docker engine: {e.message}") from e
        except TimeoutError as e:
            self._api = None
            raise ConnectionLost(
                self.host, f"Docker engine: no answer to {path} within {self.timeout:g} s"
            ) from e

    def _drop_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None

    async def close(self) -> None:
        """Close the SDK client (the transport stays open)."""
        self._drop_client()

    # -- queries ----------------------------------------------------------------------------

    async def ping(self) -> None:
        """Check the engine answers (``GET /_ping``, on the loop).

        Raises:
            DockerError: it does not, with the socket named.
        """
        self._api = None
        await self._api_socket()

    async def has_image(self, image: str) -> bool:
        """Whether ``image`` is present on the host."""
        import docker.errors

        def probe(c: docker.DockerClient) -> bool:
            try:
                c.images.get(image)
            except docker.errors.ImageNotFound:
                return False
            return True

        return await self.call(probe)

    async def ensure_image(self, image: str, pull: str = "missing") -> None:
        """Make sure ``image`` is on the host, pulling it when ``pull`` is ``missing``.

        Raises:
            ImageNotFound: absent and not pulled, or the pull failed (the reason is kept).
        """
        if await self.has_image(image):
            return
        if pull == "never":
            raise ImageNotFound(
                self.host,
                f"image {image!r} is not on the host",
                "build or load it there, or set `pull: missing`",
            )
        try:
            await self.call(lambda c: c.images.pull(image))
        except (DockerError, ConnectionLost) as e:
            raise ImageNotFound(
                self.host,
                f"image {image!r} is not on the host and could not be pulled: {e.detail}",
                "check the image name and tag, or build/load the image on the host",
            ) from e

    async def list(
        self,
        labels: Mapping[str, str | None],
        *,
        detail: Callable[[ContainerInfo], bool] | None = None,
    ) -> builtins.list[ContainerInfo]:
        """Containers (running or not) carrying all ``labels`` (a ``None`` value = key only).

        One list request (on the loop, :meth:`get`): each container comes from the list's own
        data (id, name, labels, state, exit code from the status text, creation time; see
        :meth:`ContainerInfo.from_summary`). Only those for which ``detail(info)`` is true are
        inspected (start and finish times, OOM flag, start error); a container removed
        between the list and its inspect is left out.
        """
        filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
        out = await self.get("/containers/json", dockerapi.containers_params(filters))
        infos = []
        for summary in out or ():
            info = ContainerInfo.from_summary(summary)
            if detail is not None and detail(info):
                attrs = await self.get(dockerapi.container_path(info.id))
                if attrs is None:  # removed since the list
                    continue
                info = ContainerInfo.from_attrs(attrs)
            infos.append(info)
        return infos

    async def inspect(self, container_id: str) -> ContainerInfo | None:
        """The container's state, or ``None`` if it no longer exists."""
        attrs = await self.get(dockerapi.container_path(container_id))
        return None if attrs is None else ContainerInfo.from_attrs(attrs)

    async def container_spec(
        self,
        container_id: str,
        secret_env: frozenset[str] | set[str] = frozenset(),
    ) -> ContainerSpec | None:
        """The container's configuration read back as a :class:`ContainerSpec` (to show the
        equivalent ``docker run`` line; ``secret_env`` values are masked there), or ``None``
        if the container no longer exists."""
        import docker.errors

        def get(c: docker.DockerClient) -> ContainerSpec | None:
            try:
                attrs = c.api.inspect_container(container_id)
            except docker.errors.NotFound:
                return None
            try:  # the image's own environment (PATH, ...) is not part of the run line
                image = c.api.inspect_image(attrs["Image"])  # type: ignore[no-untyped-call]
                image_env = (image.get("Config") or {}).get("Env")
                image_labels = (image.get("Config") or {}).get("Labels")
            except docker.errors.APIError:
                image_env = image_labels = None
            return spec_from_attrs(
                attrs, frozenset(secret_env), image_env or (), image_labels or {}
            )

        return await self.call(get)

    # -- effects ----------------------------------------------------------------------------

    async def create(self, spec: ContainerSpec) -> str:
        """Create (not start) a container; returns its id."""
        log.debug("[%s] %s", self.host, spec.docker_run_line())
        kw = spec.create_kwargs()
        return await self.call(lambda c: str(c.containers.create(spec.image, **kw).id))

    async def start(self, container_id: str) -> None:
        """Start a created container."""
        await self.call(lambda c: c.api.start(container_id))

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds (``docker stop -t``, whole seconds,
        rounded up); gone is fine.

        Raises:
            ValueError: ``grace`` is negative, infinite or NaN (callers validate input first).
        """
        if not math.isfinite(grace) or grace < 0:
            raise ValueError(f"stop grace must be a finite number >= 0, not {grace!r}")
        seconds = math.ceil(grace)

        import docker.errors

        def stop(c: docker.DockerClient) -> None:
            try:
                c.api.stop(container_id, timeout=seconds)
            except docker.errors.NotFound:
                pass

        # docker-py extends the HTTP timeout of this request by ``timeout`` itself
        await self.call(stop)

    async def remove(self, container_id: str) -> None:
        """Remove a container, force-killing it if it runs; a missing one is fine."""
        import docker.errors

        def rm(c: docker.DockerClient) -> None:
            try:
                c.api.remove_container(container_id, force=True)
            except docker.errors.NotFound:
                pass

        await self.call(rm)

    async def read_file(self, container_id: str, path: str, limit: int = 1 << 20) -> bytes | None:
        """Read one file from a container, running or exited (``docker cp``); ``None`` if absent.

        Args:
            limit: at most this many bytes are returned.
        """
        import docker.errors

        def get(c: docker.DockerClient) -> bytes | None:
            try:
                stream, _stat = c.api.get_archive(container_id, path)
            except docker.errors.NotFound:
                return None
            buf = io.BytesIO()
            for chunk in stream:
                buf.write(chunk)
                if buf.tell() > limit + 65536:
                    break
            buf.seek(0)
            try:
                with tarfile.open(fileobj=buf) as tar:
                    member = tar.next()
                    if member is None or not member.isfile():
                        return None
                    f = tar.extractfile(member)
                    return f.read(limit) if f else None
            except tarfile.TarError:
                return None

        return await self.call(get)

    async def run_sidecar(
        self,
        target: str,
        argv: Sequence[str],
        *,
        binds: dict[str, str],
        cap_add: str | None,
        labels: dict[str, str],
        timeout: float,
        join_pid: bool = True,
    ) -> tuple[int, bytes, bytes]:
        """Run ``argv`` to its end in a short-lived container of ``target``'s own image
        (running or exited) that joins ``target``'s PID namespace (``--pid container:ID``,
        unless ``join_pid`` is off), and return ``(exit status, stdout, stderr)``; the
        container is removed in every case, and sidecars with the same
        ``io.gpuconsole.kind`` label that an earlier console left behind (killed mid-run)
        are removed first.

        It gets at most the one capability ``cap_add`` (e.g. ``SYS_PTRACE``):
        ``--cap-drop ALL``, ``no-new-privileges``, no network, a read-only root file system
        (a 64 MiB ``/tmp``), 512 MiB, 64 processes, user root (the capability is checked
        against the target's processes, whatever their user); ``binds`` (host path ->
        container path) are read-only.

        Raises:
            DockerError: the engine refused it (the target is gone, the image lacks ``argv[0]``).
            ConnectionLost: the engine could not be reached.
        """
        import docker.errors

        kind = labels.get("io.gpuconsole.kind") or "sidecar"
        name = f"gpuconsole-{kind}-{os.urandom(6).hex()}"

        def run(c: docker.DockerClient) -> tuple[int, bytes, bytes]:
            info = c.api.inspect_container(target)
            _sweep_sidecars(c, kind, timeout + 30.0)
            host_config = c.api.create_host_config(
                pid_mode=f"container:{info['Id']}" if join_pid else None,
                cap_drop=["ALL"],
                cap_add=[cap_add] if cap_add else None,
                tmpfs={"/tmp": "rw,noexec,nosuid,size=64m"},
                security_opt=["no-new-privileges"],
                network_mode="none",
                read_only=True,
                mem_limit="512m",
                pids_limit=64,
                binds={src: {"bind": dst, "mode": "ro"} for src, dst in binds.items()},
            )
            made = c.api.create_container(
                info["Image"],
                name=name,
                command=[*argv[1:]],
                entrypoint=[argv[0]],
                user="0:0",
                labels=labels,
                host_config=host_config,
                network_disabled=True,
                # no GPU where nvidia is the engine's default runtime
                environment={"NVIDIA_VISIBLE_DEVICES": "void"},
            )
            cid = made["Id"]
            try:
                c.api.start(cid)
                try:
                    status = c.api.wait(cid, timeout=math.ceil(timeout)).get("StatusCode", -1)
                except Exception as e:  # requests' ReadTimeout: it did not end in time
                    c.api.kill(cid)
                    raise docker.errors.DockerException(
                        f"the sidecar did not end within {timeout:g} s"
                    ) from e
                out = c.api.logs(cid, stdout=True, stderr=False)
                err = c.api.logs(cid, stdout=False, stderr=True)
                return int(status), bytes(out), bytes(err)
            finally:
                try:
                    c.api.remove_container(cid, force=True)
                except docker.errors.NotFound:
                    pass

        def remove(c: docker.DockerClient) -> None:
            try:
                c.api.remove_container(name, force=True)
            except docker.errors.APIError:  # never made, or already removed
                pass

        try:
            return await self.call(run)
        except asyncio.CancelledError:  # Ctrl-C: the container goes now, not at the next sweep
            try:
                await asyncio.wait_for(asyncio.shield(self.call(remove)), 5.0)
            except Exception:  # the next sidecar's sweep removes it
                pass
            raise

    async def logs(
        self,
        container_id: str,
        *,
        since_ns: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogLine]:
        """Yield a container's log lines (stdout and stderr), oldest first, with timestamps.

        One line at a time over :meth:`log_batches` (same arguments, same ending).
        """
        async for batch in self.log_batches(
            container_id, since_ns=since_ns, tail=tail, follow=follow
        ):
            for line in batch:
                yield line

    async def log_batches(
        self,
        container_id: str,
        *,
        since_ns: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[builtins.list[LogLine]]:
        """Yield a container's log lines (stdout and stderr), oldest first, in batches (one
        per socket read; see :mod:`remote.dockerlogs`: no thread, no per-line wake-up).

        Args:
            since_ns: only lines at or after this time (ns since the epoch). Docker may send
                a few lines at the cursor again; callers dedupe with the cursor (see
                :mod:`remote.logs`).
            tail: only the last N lines.
            follow: keep streaming until the container stops or the connection drops.

        The stream simply ends when the connection drops or the container does not exist;
        the caller decides whether to resume. Closing the iterator closes the connection. A
        followed stream that ends in the middle of a line does not yield that unfinished line
        (the connection may have been cut); :func:`remote.logs.follow_container_batches`
        reads once more without follow after the container exited.

        Raises:
            DockerError: the engine refused the request (with its message).
        """
        try:
            opened = await self.transport.open_engine_stream()
        except OSError as e:  # the stream ends at once; the caller decides whether to resume
            log.debug("[%s] logs of %s: cannot reach the engine: %s", self.host, container_id, e)
            return
        stream = read_log_batches(opened, container_id, since_ns=since_ns, tail=tail, follow=follow)
        try:
            async for batch in stream:
                yield batch
        except LogsRequestError as e:
            raise DockerError(self.host, f"logs of {container_id[:12]}: {e.message}") from e
        finally:
            await stream.aclose()


def _api_message(e: docker.errors.APIError) -> str:
    """The engine's explanation of an SDK API error (its ``explanation``, else the text)."""
    explanation = getattr(e, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode(errors="replace")
    return str(explanation or e).strip()
