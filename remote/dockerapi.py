"""Read-only Docker Engine API requests on the event loop: no SDK, no thread.

Listing and inspecting containers are what a fleet refresh does on every host, so they skip
the Docker SDK (whose client asks the engine for its version when it is built, and whose
blocking calls need a worker thread each: 512 hosts queued behind a handful of threads).
Each request here is one connection to the engine's unix socket (local, or SSH-forwarded:
one SSH channel), sent as HTTP/1.0, so the engine (Go's ``net/http``) answers without
chunked transfer encoding and closes the connection after the body, as
:mod:`remote.dockerlogs` does for logs (which shares :func:`parse_head` and
:func:`engine_error_message`).

API version: the engine's own, from ``GET /_ping`` (its ``Api-Version`` header; Docker
Engine API, "Versioning": calls without a ``/v<version>`` prefix are deprecated). The
fields read (``/containers/json``: Id, Names, Labels, State, Status, Created;
``/containers/{id}/json``: State, Config.Labels, HostConfig) exist in every version since
1.24 (Docker 1.12), and the API only adds fields, so the engine's own version reads them all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import quote, urlencode

log = logging.getLogger("gpuconsole.remote.docker")

#: Largest answer read (bytes): a listing of 10,000 containers with their labels is a few MiB.
MAX_BODY_BYTES = 64 << 20


class EngineRequestError(Exception):
    """A request to the engine failed.

    Attributes:
        status: the HTTP status, or 0 when there was no HTTP answer (``unreachable``).
        message: the engine's error message (its JSON ``message``), or what went wrong.
        unreachable: the socket could not be connected, or the connection dropped before a
            whole answer came (the SSH forward or the engine is gone).
    """

    def __init__(self, status: int, message: str, *, unreachable: bool = False) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.unreachable = unreachable


async def request(
    socket_path: str,
    target: str,
    *,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.0 request to the engine on ``socket_path``: (status, headers with lower-case
    names, body).

    Raises:
        EngineRequestError: (``unreachable``) the socket refused the connection, or it closed
            before the head of an answer; or the body is larger than :data:`MAX_BODY_BYTES`.
    """
    try:
        reader, writer = await asyncio.open_unix_connection(socket_path)
    except OSError as e:
        raise EngineRequestError(
            0, f"cannot connect to {socket_path}: {e}", unreachable=True
        ) from e
    try:
        writer.write(f"{method} {target} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            why = (
                "the connection was closed without an answer"
                if not e.partial
                else f"the answer ended after {len(e.partial)} bytes, inside its head"
            )
            raise EngineRequestError(
                0, f"no answer to {method} {target.split('?')[0]}: {why}", unreachable=True
            ) from e
        except asyncio.LimitOverrunError as e:
            raise EngineRequestError(
                0,
                f"the answer to {method} {target.split('?')[0]} has a "
                "head over 64 KiB: not a Docker engine?",
            ) from e
        except OSError as e:
            raise EngineRequestError(
                0,
                f"no answer to {method} {target.split('?')[0]}: {e or type(e).__name__}",
                unreachable=True,
            ) from e
        status, headers = parse_head(head)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                data = await reader.read(1 << 18)
            except OSError as e:
                raise EngineRequestError(
                    0, f"connection lost reading {target.split('?')[0]}: {e}", unreachable=True
                ) from e
            if not data:
                break
            size += len(data)
            if size > MAX_BODY_BYTES:
                raise EngineRequestError(status, f"answer larger than {MAX_BODY_BYTES} bytes")
            chunks.append(data)
        body = b"".join(chunks)
        length = headers.get("content-length", "")
        if length.isdigit() and len(body) < int(length):
            raise EngineRequestError(
                0,
                f"answer to {target.split('?')[0]} cut short ({len(body)} of {length} bytes)",
                unreachable=True,
            )
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = dechunk(body)
        return status, headers, body
    finally:
        writer.close()


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, headers with lower-case names) of an HTTP response head.

    Raises:
        EngineRequestError: not an HTTP response head.
    """
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise EngineRequestError(0, f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def engine_error_message(body: str) -> str:
    """The ``message`` of the Docker Engine API's JSON error body (``{"message": ...}``),
    else the body as given."""
    try:
        value = json.loads(body)
    except ValueError:
        return body
    message = value.get("message") if isinstance(value, dict) else None
    return message if isinstance(message, str) else body


def dechunk(body: bytes) -> bytes:
    """The payload of a body in chunked transfer encoding (RFC 9112, 7.1); an engine
    answering HTTP/1.0 does not use it, a proxy in front of it might.

    Raises:
        EngineRequestError: a chunk size line is not hexadecimal.
    """
    out = bytearray()
    pos = 0
    while pos < len(body):
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            break
        size_text = body[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as e:
            raise EngineRequestError(0, f"bad chunk size {size_text[:20]!r}") from e
        if size == 0:
            break
        out += body[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2
    return bytes(out)


async def api_version(socket_path: str) -> str:
    """The engine's API version (``GET /_ping``, header ``Api-Version``, e.g. ``1.41``).

    Raises:
        EngineRequestError: no answer, or an answer without the header (not a Docker engine).
    """
    status, headers, body = await request(socket_path, "/_ping")
    version = headers.get("api-version", "")
    if status == 404:
        raise EngineRequestError(status, "not a Docker engine: it has no /_ping (HTTP 404)")
    if status != 200:
        raise EngineRequestError(
            status,
            engine_error_message(body.decode(errors="replace").strip())
            or f"/_ping answered {status}",
        )
    if not version:
        said = body.decode(errors="replace").strip()[:60]
        raise EngineRequestError(
            status,
            f"not a Docker engine: its /_ping answer has no Api-Version header (it said {said!r})",
        )
    return version


async def get_json(
    socket_path: str, version: str, path: str, params: dict[str, str] | None = None
) -> Any | None:
    """``GET /v<version><path>?<params>`` decoded from JSON; ``None`` when the engine answers
    404 (no such container).

    Raises:
        EngineRequestError: another error status (with the engine's message), no answer, or
            a body that is not JSON.
    """
    target = f"/v{version}{path}"
    if params:
        target += "?" + urlencode(params)
    status, _headers, body = await request(socket_path, target)
    if status == 404:
        return None
    text = body.decode(errors="replace")
    if status != 200:
        raise EngineRequestError(status, engine_error_message(text.strip()))
    try:
        return json.loads(text)
    except ValueError as e:
        raise EngineRequestError(status, f"answer to {path} is not JSON: {text[:80]!r}") from e


def containers_params(label_filters: list[str]) -> dict[str, str]:
    """Query of ``GET /containers/json``: all containers (running or not) carrying every
    ``key`` or ``key=value`` of ``label_filters`` (Docker Engine API, ContainerList)."""
    return {"all": "1", "filters": json.dumps({"label": label_filters})}


def container_path(container_id: str) -> str:
    """``/containers/<id>/json`` with the id (or name) escaped."""
    return f"/containers/{quote(container_id, safe='')}/json"
