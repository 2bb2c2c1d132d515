"""``runtime: host``: a host's jobs without Docker, behind the same interface as
:class:`remote.docker.Engine`.

Each node is a process tree started by ``remote/agent/hostjob.py`` on the host (a
stdlib-only script, uploaded once per host as a content-addressed bundle under
:data:`BUNDLE_BASE` and run with the host's ``python3 -I -S``); see that script's docstring
for the node folder (``~/.cache/gpuconsole/jobs/<job id>/<name>/``), the supervisor and the
log record format. This module maps Engine's calls onto its subcommands:

========================  ==================================================================
Engine                    host runtime
========================  ==================================================================
ping                      ``hostjob.py ping`` (python3 >= 3.8 answers)
has_image / ensure_image  ``<python> -c 'import torch'`` (the "image" is a python)
list / inspect            ``hostjob.py list [--label k=v] [--name N]`` -> ContainerInfo
container_spec            spec.json read back -> ContainerSpec (secret values never stored)
create / start            ``create`` (request JSON on stdin) / ``start`` (supervisor detached)
stop / remove             ``stop NAME GRACE`` / ``rm --force NAME``
read_file                 ``read NAME PATH --limit N`` (base64 in JSON)
logs / log_batches        ``logs NAME [--since-ns N] [--tail N] [--follow]`` -> LogLine
========================  ==================================================================

A container id is the node's name (unique on a host, like a container name). Timestamps of
log lines are the supervisor's receive times in ns, ordered within a node's log, and
``--since-ns`` is inclusive, so :class:`remote.logs.LogCursor` resumes exactly.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import functools
import json
import logging
import math
import shlex
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import resources
from typing import Any

from remote.docker import ContainerInfo, ContainerSpec, LogLine
from remote.errors import DockerError, RuntimeUnavailable
from remote.transport import CommandResult, Transport, bundle_digest

log = logging.getLogger("gpuconsole.remote.hostengine")

#: Where the hostjob bundle is uploaded, relative to the host user's home.
BUNDLE_BASE = ".cache/gpuconsole/hostjob"
#: The module a job's python must import.
REQUIRED_MODULE = "torch"
#: hostjob.py's exit status for "no such node" and for a refused request.
EXIT_NOT_FOUND = 4
EXIT_REFUSED = 3
#: Lines per batch of a non-followed read.
BATCH_LINES = 5000


class HostJobError(DockerError):
    """The host runtime refused or failed a request (the counterpart of an engine's error,
    so callers that handle :class:`DockerError` handle it too)."""


#: The host runtime's jobs folder, relative to the host user's home.
JOBS_DIR = ".cache/gpuconsole/jobs"

#: Exit status of :data:`_LIST_IF_JOBS` when the jobs folder exists but this version's
#: bundle is not on the host yet (then it is uploaded and the listing asked again).
_EXIT_NO_BUNDLE = 98

#: One remote command for a fleet listing: ``[]`` unless the jobs folder holds a job folder
#: (no upload, no python; the glob is the shell's own, no other process), else
#: ``hostjob.py list`` from the bundle already there. A constant: the bundle path, the python
#: and the list arguments come as positional parameters.
_LIST_IF_JOBS = (
    'cd || { echo "[]"; exit 0; }; any=; for d in "$1"/*/; do [ -d "$d" ] && any=1; break; done; '
    '[ -n "$any" ] || { echo "[]"; exit 0; }; [ -f "$2" ] || exit '
    f"{_EXIT_NO_BUNDLE}; "
    'script=$2 py=$3; shift 3; exec "$py" -I -S "$script" list "$@"'
)


def node_dir(home: str, job_id: str, name: str) -> str:
    """A node's folder on the host (``~/.cache/gpuconsole/jobs/<job id>/<name>``, see
    ``remote/agent/hostjob.py``), for a host user whose home is ``home``."""
    return f"{home.rstrip('/')}/.cache/gpuconsole/jobs/{job_id}/{name}"


@functools.cache
def hostjob_files() -> dict[str, bytes]:
    """The files of the bundle: ``{"hostjob.py": <bytes>}`` (read once per process)."""
    return {"hostjob.py": resources.files("remote.agent").joinpath("hostjob.py").read_bytes()}


@functools.cache
def hostjob_script() -> str:
    """The bundle's ``hostjob.py`` relative to the host user's home (content-addressed folder
    of :meth:`remote.transport.Transport.put_bundle`; computed once per process, not per
    host of a fleet listing)."""
    return f"{BUNDLE_BASE}/{bundle_digest(hostjob_files())}/hostjob.py"


def parse_record(line: str) -> LogLine | None:
    """One hostjob log record (``<ts ns> <o|e> <text>``, newline removed) as a LogLine, or
    ``None`` when it is not one. A trailing ``\\r`` is dropped, as
    :class:`remote.dockerlogs.LogStreamParser` drops it from Docker's lines."""
    ts, sep, rest = line.partition(" ")
    if not sep or not ts.isdigit() or len(rest) < 2 or rest[1] != " " or rest[0] not in "oe":
        return None
    text = rest[2:]
    if text.endswith("\r"):
        text = text.rstrip("\r")
    return LogLine(int(ts), text)


def info_from_node(node: Mapping[str, Any]) -> ContainerInfo:
    """A ContainerInfo from one entry of ``hostjob.py list``."""
    gpus = [str(g) for g in node.get("gpu_ids") or []]
    code = node.get("exit_code")
    created = node.get("created")
    return ContainerInfo(
        id=str(node["name"]),
        name=str(node["name"]),
        labels={str(k): str(v) for k, v in (node.get("labels") or {}).items()},
        status=str(node.get("status") or "unknown"),
        exit_code=int(code) if isinstance(code, int) else None,
        started_at=node.get("started_at") or None,
        finished_at=node.get("finished_at") or None,
        error=str(node.get("error") or ""),
        created_s=float(created) if isinstance(created, (int, float)) else None,
        gpu_devices=",".join(gpus) if gpus else "none",
    )


def spec_from_node(
    spec: Mapping[str, Any], labels: Mapping[str, str], secret_env: frozenset[str] = frozenset()
) -> ContainerSpec:
    """A ContainerSpec rebuilt from a node's spec.json and labels. Secret values were never
    stored: those variables come back empty and listed in ``secret_env`` (rendered ``***``)."""
    public = {str(k): str(v) for k, v in (spec.get("env_public") or {}).items()}
    names = [str(n) for n in spec.get("env_names") or []]
    hidden = frozenset(n for n in names if n not in public)
    return ContainerSpec(
        name=str(spec.get("name", "")),
        image=str(spec.get("python") or "python3"),
        command=[str(a) for a in spec.get("argv") or []],
        env={n: public.get(n, "") for n in names},
        secret_env=frozenset(secret_env) | hidden,
        labels=dict(labels),
        gpu_device_ids=tuple(str(g) for g in spec.get("gpu_ids") or []),
        network_mode="host",
        working_dir=spec.get("cwd") or None,
        init=False,
        runtime="host",
    )


class HostEngine:
    """The jobs of one host run without Docker (see the module docstring).

    Args:
        transport: the host.
        timeout: seconds for each non-streaming call.
        agent_python: the host's python that runs hostjob.py (3.8+; not the job's python).
    """

    def __init__(
        self, transport: Transport, timeout: float = 60.0, agent_python: str = "python3"
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        self.agent_python = agent_python
        self._script: str | None = None

    @property
    def host(self) -> str:
        """The host's profile name."""
        return self.transport.name

    async def close(self) -> None:
        """Nothing to close (the transport stays open)."""

    async def _argv(self, *args: str) -> list[str]:
        if self._script is None:
            folder = await self.transport.put_bundle(hostjob_files(), BUNDLE_BASE)
            self._script = f"{folder}/hostjob.py"
        return [self.agent_python, "-I", "-S", self._script, *args]

    async def _call(
        self, *args: str, input: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        argv = await self._argv(*args)
        res = await self.transport.run(
            argv, input=input, timeout=timeout if timeout is not None else self.timeout
        )
        if res.returncode == 127:
            raise RuntimeUnavailable(
                self.host,
                f"{self.agent_python} is not on the host",
                "install Python 3.8 or newer there (runtime: host runs jobs with it)",
            )
        return res

    def _fail(self, what: str, res: CommandResult) -> HostJobError:
        tail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no output"
        return HostJobError(self.host, f"{what}: {tail}")

    async def _json(
        self, what: str, *args: str, input: bytes | None = None, timeout: float | None = None
    ) -> Any:
        """Run a subcommand answering JSON; ``None`` when the node does not exist."""
        res = await self._call(*args, input=input, timeout=timeout)
        if res.returncode == EXIT_NOT_FOUND:
            return None
        if res.returncode != 0:
            raise self._fail(what, res)
        try:
            return json.loads(res.stdout)
        except ValueError as e:
            raise HostJobError(self.host, f"{what}: unreadable answer {res.stdout[:200]!r}") from e

    # -- queries ----------------------------------------------------------------------------

    async def ping(self) -> None:
        """Check that the host's python3 runs hostjob.py.

        Raises:
            RuntimeUnavailable: no python3, or one older than 3.8.
        """
        res = await self._call("ping")
        if res.returncode != 0:
            tail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no output"
            raise RuntimeUnavailable(
                self.host,
                f"{self.agent_python} cannot run the host runtime: {tail}",
                "install Python 3.8 or newer on the host",
            )

    async def has_image(self, image: str) -> bool:
        """Whether the python ``image`` (a path, or a name on the host's PATH) imports
        :data:`REQUIRED_MODULE`."""
        return (await self._probe(image)).returncode == 0

    async def _probe(self, python: str) -> CommandResult:
        return await self.transport.run(
            [python, "-c", f"import {REQUIRED_MODULE}"], timeout=self.timeout
        )

    async def ensure_image(self, image: str, pull: str = "missing") -> None:
        """Make sure the python ``image`` exists on the host and imports torch (``pull`` is
        ignored: a python cannot be pulled).

        Raises:
            RuntimeUnavailable: it does not, in one line naming the python, with the fix.
        """
        res = await self._probe(image)
        if res.returncode == 0:
            return
        if res.returncode == 127:
            # the shell's "not found" is also what a non-Python (sh -c 'import torch') says
            missing = (
                "No such file" in res.stderr
                or f"{image}: not found" in res.stderr
                or "command not found" in res.stderr
            )
            said = (res.stderr.strip().splitlines() or ["?"])[-1]
            raise RuntimeUnavailable(
                self.host,
                f"python {image!r} is not on the host"
                if missing
                else f"{image!r} is not a Python ({said})",
                f"set the job's python (`python:` in the spec or the profile's host, or "
                f"--python) to an interpreter with torch on {self.host}",
            )
        lines = res.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit status {res.returncode}"
        raise RuntimeUnavailable(
            self.host,
            f"python {image!r} cannot import {REQUIRED_MODULE} ({why})",
            f"install it there (`{shlex.quote(image)} -m pip install {REQUIRED_MODULE}`) or "
            f"point the job at a python that has it",
        )

    async def list(
        self,
        labels: Mapping[str, str | None],
        *,
        detail: Callable[[ContainerInfo], bool] | None = None,
    ) -> builtins.list[ContainerInfo]:
        """Nodes (any state) carrying all ``labels`` (a ``None`` value = key only). Every
        entry is complete (start and finish times included); ``detail`` is not needed."""
        args = ["list"]
        for k, v in labels.items():
            args += ["--label", k if v is None else f"{k}={v}"]
        nodes = await self._json("list", *args)
        return [info_from_node(n) for n in nodes or []]

    async def list_if_any(self, labels: Mapping[str, str | None]) -> builtins.list[ContainerInfo]:
        """:meth:`list`, in one remote command that stops at once, starting no python and
        uploading nothing, on a host without a job in its jobs folder (:data:`JOBS_DIR`):
        what a fleet listing asks every host whose default runtime is Docker.

        Raises:
            RuntimeUnavailable: the jobs folder exists and the host's python is missing.
            HostJobError: ``hostjob.py list`` failed or answered something unreadable.
        """
        args: builtins.list[str] = []
        for k, v in labels.items():
            args += ["--label", k if v is None else f"{k}={v}"]
        script = hostjob_script()
        res = await self.transport.run(
            ["sh", "-c", _LIST_IF_JOBS, "sh", JOBS_DIR, script, self.agent_python, *args],
            timeout=self.timeout,
        )
        if res.returncode == _EXIT_NO_BUNDLE:
            return await self.list(labels)
        if res.returncode == 127:
            raise RuntimeUnavailable(
                self.host,
                f"{self.agent_python} is not on the host",
                "install Python 3.8 or newer there (runtime: host runs jobs with it)",
            )
        if res.returncode != 0:
            raise self._fail("list", res)
        # "[]" without a job; hostjob.py always answers JSON: nothing at all is a broken
        # bundle or host, never "no jobs" (a running node would then read as lost)
        if not res.stdout.strip():
            raise HostJobError(self.host, "list: no answer from hostjob.py (exit 0, no output)")
        try:
            nodes = json.loads(res.stdout)
        except ValueError as e:
            raise HostJobError(self.host, f"list: unreadable answer {res.stdout[:200]!r}") from e
        return [info_from_node(n) for n in nodes or []]

    async def inspect(self, container_id: str) -> ContainerInfo | None:
        """The node's state, or ``None`` if it does not exist."""
        nodes = await self._json("inspect", "list", "--name", container_id)
        return info_from_node(nodes[0]) if nodes else None

    async def container_spec(
        self,
        container_id: str,
        secret_env: frozenset[str] | set[str] = frozenset(),
    ) -> ContainerSpec | None:
        """The node's configuration as a ContainerSpec, or ``None`` if it does not exist."""
        data = await self._json("spec", "spec", container_id)
        if data is None:
            return None
        return spec_from_node(
            data.get("spec") or {}, data.get("labels") or {}, frozenset(secret_env)
        )

    # -- effects ----------------------------------------------------------------------------

    async def create(self, spec: ContainerSpec) -> str:
        """Create (not start) a node from ``spec``; returns its id (the name).

        ``image`` is the python, ``command`` the argv, ``working_dir`` the cwd,
        ``gpu_device_ids`` become ``CUDA_VISIBLE_DEVICES``. Container-only settings (shm,
        ipc, capabilities, network, init) do not apply and are ignored.

        Raises:
            HostJobError: binds or a user were asked for (no container to mount into or to
                switch users in), or the name is taken.
        """
        if spec.binds:
            raise HostJobError(
                self.host,
                "runtime host cannot mount folders ("
                + ", ".join(b.render() for b in spec.binds)
                + ")",
                "remove the mounts: the job runs in the synced workdir on the host",
            )
        if spec.user:
            raise HostJobError(
                self.host,
                f"runtime host cannot run as user {spec.user!r}",
                "remove `user:`; host jobs run as the SSH user",
            )
        log.debug("[%s] host job %s: %s", self.host, spec.name, shlex.join(spec.command))
        req = {
            "name": spec.name,
            "labels": dict(spec.labels),
            "argv": list(spec.command),
            "env": dict(spec.env),
            "secret_env": sorted(spec.secret_env),
            "cwd": spec.working_dir,
            "gpu_ids": list(spec.gpu_device_ids),
            "python": spec.image,
        }
        res = await self._call("create", input=json.dumps(req).encode())
        if res.returncode != 0:
            raise self._fail(f"create {spec.name}", res)
        return spec.name

    async def start(self, container_id: str) -> None:
        """Start a created node (its supervisor detached from this connection).

        Raises:
            HostJobError: it does not exist, already ran, or its command could not be run.
        """
        res = await self._call("start", container_id, timeout=self.timeout + 30)
        if res.returncode != 0:
            raise self._fail(f"start {container_id}", res)

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        """SIGTERM the node's process group, SIGKILL it after ``grace`` s; returns once none
        of it is left. Gone or never started is fine.

        Raises:
            ValueError: ``grace`` is negative, infinite or NaN.
        """
        if not math.isfinite(grace) or grace < 0:
            raise ValueError(f"stop grace must be a finite number >= 0, not {grace!r}")
        res = await self._call("stop", container_id, f"{grace:g}", timeout=grace + 60)
        if res.returncode not in (0, EXIT_NOT_FOUND):
            raise self._fail(f"stop {container_id}", res)

    async def remove(self, container_id: str) -> None:
        """Remove a node, killing it if it runs; a missing one is fine."""
        res = await self._call("rm", "--force", container_id, timeout=self.timeout + 30)
        if res.returncode not in (0, EXIT_NOT_FOUND):
            raise self._fail(f"rm {container_id}", res)

    async def read_file(self, container_id: str, path: str, limit: int = 1 << 20) -> bytes | None:
        """Up to ``limit`` bytes of a file (absolute, or relative to the node's folder:
        :func:`node_dir`); ``None`` if the node or the file is missing."""
        data = await self._json("read", "read", container_id, path, "--limit", str(limit))
        if not data:
            return None
        return base64.b64decode(data["data"])

    async def logs(
        self,
        container_id: str,
        *,
        since_ns: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogLine]:
        """The node's log lines, oldest first: one at a time over :meth:`log_batches`."""
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
        """The node's log lines (stdout and stderr), oldest first, in batches.

        Args:
            since_ns: only lines with a timestamp at or after this (ns since the epoch).
            tail: only the last N lines.
            follow: keep streaming until the node's exit is recorded and its log drained,
                or the connection drops (the stream then just ends, as Engine's does).

        A missing node gives no lines. Without ``follow`` the answer comes in one command
        (batches of :data:`BATCH_LINES`); with it, a batch holds the lines that arrived since
        the previous one (at most :data:`BATCH_LINES`).
        """
        args = ["logs", container_id]
        if since_ns is not None:
            args += ["--since-ns", str(since_ns)]
        if tail is not None:
            args += ["--tail", str(tail)]
        if not follow:
            res = await self._call(*args, timeout=max(self.timeout, 300.0))
            if res.returncode not in (0, EXIT_NOT_FOUND):
                raise self._fail(f"logs of {container_id}", res)
            batch: builtins.list[LogLine] = []
            for raw in res.stdout.split("\n"):
                line = parse_record(raw)
                if line is not None:
                    batch.append(line)
                    if len(batch) >= BATCH_LINES:
                        yield batch
                        batch = []
            if batch:
                yield batch
            return
        proc = await self.transport.open_process(await self._argv(*args, "--follow"))
        # a reader task drains the channel (a readline of buffered data does not wait for the
        # loop), so each wake-up of this generator takes every line that arrived meanwhile
        pending: builtins.list[LogLine] = []
        ready = asyncio.Event()
        ended = False

        async def pump() -> None:
            nonlocal ended
            try:
                while (raw := await proc.readline()) is not None:
                    line = parse_record(raw)
                    if line is not None:
                        pending.append(line)
                        ready.set()
            finally:
                ended = True
                ready.set()

        reader = asyncio.create_task(pump())
        try:
            while True:
                await ready.wait()
                ready.clear()
                while pending:
                    batch = pending[:BATCH_LINES]
                    del pending[:BATCH_LINES]
                    yield batch
                if ended:
                    break
            await reader  # its exception, if any
        finally:
            reader.cancel()
            await proc.close()
