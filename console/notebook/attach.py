"""Reaching a running notebook: its JupyterLab server on the host, a tunnel to it, its URL.

A notebook is a one-node job (``kind: notebook``) whose container runs JupyterLab bound to the
host's ``127.0.0.1`` (containers use the host's network) on the port in its
``io.gpuconsole.port`` label, with the token in its environment (``JUPYTER_TOKEN``, never on a
command line). :func:`find_server` reads both back from the host, so a notebook started from
another machine or before the local state was lost can be re-attached.
:func:`open_notebook` forwards a local port over the host's SSH connection
(:meth:`remote.transport.Transport.forward_local`), waits until Jupyter answers
``GET /api/status`` with the token, and builds the local URL, reading the URL the server
itself logged (:mod:`console.notebook.urls`) for its path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from console.errors import JobError, UsageError
from console.jobs.labels import K_PORT
from console.jobs.plan import TOKEN_ENV
from console.jobs.store import JobRecord
from console.notebook.urls import ServerUrl, local_url, notebook_to_open, parse_server_urls
from console.session import Session
from remote.errors import GpuConsoleError, TransportError
from remote.transport import Forward

log = logging.getLogger("gpuconsole.notebook")

__all__ = [
    "NotebookServer",
    "NotebookTunnel",
    "api_get",
    "find_server",
    "open_notebook",
    "stable_port",
]

#: How long :func:`open_notebook` waits for JupyterLab to answer by default (s): a first start
#: in a fresh container imports jupyterlab and its extensions (seconds to tens of seconds).
READY_TIMEOUT_S = 180.0
#: The path JupyterLab opens (Jupyter Server's ``default_url`` under LabApp).
LAB_PATH = "/lab"


@dataclass(frozen=True)
class NotebookServer:
    """A notebook's JupyterLab server as its host runs it.

    Attributes:
        job_id: the notebook's job id.
        host: the host's profile name.
        container_id: its container.
        port: the TCP port JupyterLab listens on, on the host's 127.0.0.1.
        token: the login token (secret: printed only inside the URL the user asked for).
    """

    job_id: str
    host: str
    container_id: str
    port: int
    token: str


@dataclass
class NotebookTunnel:
    """An open way to a notebook: the forward and the URL through it.

    Attributes:
        server: the server it reaches.
        forward: the local port forwarded over SSH (its ``local_port``).
        url: ``http://127.0.0.1:<local_port>/lab?token=<token>``: open this.
        logged_url: the URL the server logged, rewritten to the local port (its path and
            scheme; the token filled in where Jupyter logs ``...``), or ``None`` when the log
            holds none.
        version: Jupyter Server's version (``GET /api``), or ``""``.
    """

    server: NotebookServer
    forward: Forward
    url: str
    logged_url: str | None = None
    version: str = ""

    @property
    def local_port(self) -> int:
        """The local TCP port of :attr:`url`."""
        return self.forward.local_port

    async def close(self) -> None:
        """Close the tunnel (the notebook keeps running)."""
        await self.forward.close()


async def find_server(session: Session, job: JobRecord) -> NotebookServer:
    """The running JupyterLab server of a notebook job, read from its container on the host.

    Raises:
        JobError: the job is not a notebook, its container is not running, or it lacks the
            port label or token (a container not started by ``gpuconsole notebook``).
        TransportError: the host cannot be reached.
    """
    if job.kind != "notebook":
        raise JobError(
            f"{job.id} is a {job.kind} job, not a notebook",
            f"`gpuconsole shell {job.id}` enters its container",
        )
    from console.jobs.status import ACTIVE_STATES, job_summary

    node = job.nodes[0] if job.nodes else None
    # pending: just launched (before its first line); the inspect below says if it runs
    if node is None or node.container_id is None or node.state not in ACTIVE_STATES:
        state = node.state if node is not None else "gone"
        why = job_summary(job)
        raise JobError(
            f"notebook {job.id} is not running ({state}" + (f": {why})" if why else ")"),
            f"`gpuconsole logs {job.id}` shows what it printed; start a new one "
            "with `gpuconsole notebook --host HOST`",
        )
    await session.connected(node.host)
    engine = session.engine(node.host)
    info = await engine.inspect(node.container_id)
    spec = await engine.container_spec(node.container_id)
    if info is None or spec is None or info.status != "running":
        raise JobError(
            f"notebook {job.id}: its container on {node.host} is not running",
            "see `gpuconsole ps`; start a new one with `gpuconsole notebook`",
        )
    port = info.labels.get(K_PORT, "")
    token = spec.env.get(TOKEN_ENV)
    if not port.isdigit() or not token:
        raise JobError(
            f"notebook {job.id}: its container has no "
            f"{'port label' if not port.isdigit() else TOKEN_ENV}",
            "it was not started by `gpuconsole notebook`; stop it and start anew",
        )
    return NotebookServer(job.id, node.host, node.container_id, int(port), token)


def api_get(
    base: str,
    path: str,
    token: str | None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """``GET base + path`` with ``Authorization: token <token>`` (Jupyter Server's token
    header) when a token is given; returns ``(HTTP status, body)``; an HTTP error status is
    returned, not raised.

    Raises:
        OSError: nothing answers (refused, reset, timed out).
    """
    req = urllib.request.Request(base + path)
    if token:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def stable_port(job_id: str) -> int:
    """A local port derived from the job id (20000-29999, below Linux's ephemeral range): the
    second choice of :func:`_local_forward`, so a re-attach finds the same URL even where the
    host's port number is taken here (the host is this machine, or another program has it)."""
    return 20000 + int(hashlib.sha256(job_id.encode()).hexdigest()[:8], 16) % 10000


async def _local_forward(
    session: Session, server: NotebookServer, local_port: int | None
) -> Forward:
    """Forward ``server.port``: to ``local_port`` when given (an error if taken); else to the
    same port number here, else :func:`stable_port`, else any free one (so a re-attach gets
    the same URL)."""
    t = await session.connected(server.host)
    if local_port is not None:
        try:
            return await t.forward_local(server.port, local_port=local_port)
        except TransportError as e:
            if not t.connected:
                raise
            raise UsageError(
                f"--port {local_port}: this machine's 127.0.0.1:{local_port} "
                f"cannot be listened on ({e.message.rsplit(': ', 1)[-1]})",
                "pick another --port, or leave it out for a free one",
            ) from e
    for port in (server.port, stable_port(server.job_id)):
        try:
            return await t.forward_local(server.port, local_port=port)
        except TransportError as e:
            log.debug("local port %d taken (%s)", port, e.message)
    return await t.forward_local(server.port, local_port=0)


async def _logged_url(session: Session, server: NotebookServer) -> ServerUrl | None:
    """The URL the server logged at start (the last 400 log lines), or ``None``."""
    lines = []
    try:
        async for ln in session.engine(server.host).logs(server.container_id, tail=400):
            lines.append(ln.text)
    except GpuConsoleError as e:
        log.debug("notebook %s: logs unreadable: %s", server.job_id, e.message)
        return None
    return notebook_to_open(parse_server_urls("\n".join(lines)))


async def open_notebook(
    session: Session,
    server: NotebookServer,
    *,
    local_port: int | None = None,
    timeout: float = READY_TIMEOUT_S,
    alive: Callable[[], Awaitable[str | None]] | None = None,
) -> NotebookTunnel:
    """Forward a local port to the notebook and wait until JupyterLab answers with the token.

    Args:
        local_port: the local port to listen on (default: the server's port number when free
            here, else :func:`stable_port`, else any free one).
        timeout: how long to wait for ``GET /api/status`` to answer 200 (s).
        alive: called between tries; returns why the notebook cannot come up (its container
            exited, with the reason) to stop waiting, or ``None`` to go on.

    Raises:
        TransportError: the host cannot be reached or the local port cannot be bound.
        JobError: ``alive`` reported the notebook gone, the server refused the token, or it
            did not answer within ``timeout`` (the tunnel is closed then).
    """
    # Wait through a forward on any free port: the port the URL gets may be the host's own
    # port number, which must stay free until JupyterLab has bound it (the host may be this
    # machine).
    t = await session.connected(server.host)
    probe = await t.forward_local(server.port, local_port=0)
    try:
        await _wait_ready(probe, server, timeout, alive)
    finally:
        await probe.close()
    fwd = await _local_forward(session, server, local_port)
    base = f"http://{fwd.local_host}:{fwd.local_port}"
    try:
        version = ""
        try:
            st, body = await asyncio.to_thread(api_get, base, "/api", server.token)
            if st == 200:
                version = str(json.loads(body).get("version", ""))
        except (OSError, ValueError, AttributeError):
            pass
        url = f"{base}{LAB_PATH}?token={server.token}"
        logged = await _logged_url(session, server)
        rewritten = None
        if logged is not None:
            if logged.token is None:  # Jupyter logs a token from the environment as `...`
                logged = dataclasses.replace(logged, token=server.token)
            rewritten = local_url(logged, fwd.local_port)
        return NotebookTunnel(server, fwd, url, rewritten, version)
    except BaseException:
        await fwd.close()
        raise


async def _wait_ready(
    fwd: Forward,
    server: NotebookServer,
    timeout: float,
    alive: Callable[[], Awaitable[str | None]] | None,
) -> None:
    """Poll ``GET /api/status`` with the token through ``fwd`` until it answers 200.

    Raises:
        JobError: see :func:`open_notebook`.
    """
    base = f"http://{fwd.local_host}:{fwd.local_port}"
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            status, _ = await asyncio.to_thread(api_get, base, "/api/status", server.token)
        except OSError as e:
            status, last = 0, f"no answer ({e})"
        if status == 200:
            return
        if status in (401, 403):
            raise JobError(
                f"notebook {server.job_id}: JupyterLab refused the token (HTTP {status})",
                f"stop it (`gpuconsole stop {server.job_id}`) and start anew",
            )
        if status:
            last = f"HTTP {status}"
        if alive is not None:
            gone = await alive()
            if gone:
                raise JobError(
                    f"notebook {server.job_id} ended before JupyterLab answered: {gone}",
                    f"see `gpuconsole logs {server.job_id}`",
                )
        if time.monotonic() > deadline:
            raise JobError(
                f"notebook {server.job_id}: JupyterLab did not answer on "
                f"{server.host}:127.0.0.1:{server.port} within {timeout:.0f} s "
                f"({last})",
                f"see `gpuconsole logs {server.job_id}`",
            )
        await asyncio.sleep(0.5)
