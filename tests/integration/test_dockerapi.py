"""The engine's list and inspect on the event loop (remote.dockerapi) against this machine's
real dockerd: the same answers the Docker SDK gets, the engine's own API version, and clear
errors for a refused request, a dead socket and a socket that is not a Docker engine."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from remote import dockerapi
from remote.docker import ContainerInfo, Engine
from remote.errors import ConnectionLost, DockerError
from remote.transport import LocalTransport

IMAGE = "gpuconsole/torch:2.13.0-cpu"
LABEL = "io.gpuconsole-test.dockerapi"


@pytest.fixture(scope="module")
def sdk() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        c.remove(force=True)
    client.close()


@pytest.fixture(scope="module")
def containers(sdk: docker.DockerClient) -> dict[str, str]:
    """Two labelled containers of one run: one running, one exited with code 3."""
    run = uuid.uuid4().hex[:8]
    up = sdk.containers.run(
        IMAGE, ["sleep", "600"], detach=True, labels={LABEL: run, "io.gpuconsole-test.role": "up"}
    )
    down = sdk.containers.run(
        IMAGE,
        ["sh", "-c", "exit 3"],
        detach=True,
        labels={LABEL: run, "io.gpuconsole-test.role": "down"},
    )
    deadline = time.monotonic() + 60
    down.reload()
    while down.status != "exited":
        assert time.monotonic() < deadline, "the exiting container did not exit"
        time.sleep(0.2)
        down.reload()
    return {"run": run, "up": str(up.id), "down": str(down.id)}


def test_api_version_is_the_engines(sdk: docker.DockerClient) -> None:
    socket_path = LocalTransport().engine_socket_path()
    got = asyncio.run(dockerapi.api_version(socket_path))
    assert got == sdk.version()["ApiVersion"]


def test_list_and_inspect_match_the_sdk(
    sdk: docker.DockerClient, containers: dict[str, str]
) -> None:
    async def go() -> tuple[
        list[ContainerInfo], list[ContainerInfo], ContainerInfo | None, ContainerInfo | None
    ]:
        engine = Engine(LocalTransport())
        labels: dict[str, str | None] = {LABEL: containers["run"]}
        plain = await engine.list(labels)
        detailed = await engine.list(labels, detail=lambda i: i.status == "exited")
        one = await engine.inspect(containers["down"])
        gone = await engine.inspect("0" * 64)
        return plain, detailed, one, gone

    plain, detailed, one, gone = asyncio.run(go())
    by_id = {i.id: i for i in plain}
    assert set(by_id) == {containers["up"], containers["down"]}
    assert by_id[containers["up"]].status == "running"
    assert by_id[containers["down"]].status == "exited"
    assert by_id[containers["down"]].exit_code == 3
    # the SDK's inspect, read the same way, equals ours (the same JSON)
    want = ContainerInfo.from_attrs(sdk.api.inspect_container(containers["down"]))
    assert one == want
    assert {i.id: i for i in detailed}[containers["down"]] == want
    assert gone is None


def test_a_refused_request_carries_the_engines_message() -> None:
    socket_path = LocalTransport().engine_socket_path()

    async def go() -> None:
        version = await dockerapi.api_version(socket_path)
        await dockerapi.get_json(
            socket_path, version, "/containers/json", {"filters": '{"no-such-filter": ["x"]}'}
        )

    with pytest.raises(dockerapi.EngineRequestError) as err:
        asyncio.run(go())
    assert err.value.status in (400, 500) and not err.value.unreachable
    assert "no-such-filter" in err.value.message, err.value.message


@pytest.mark.hostless
def test_dead_socket_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(dockerapi.EngineRequestError) as err:
        asyncio.run(dockerapi.request(str(tmp_path / "no.sock"), "/_ping"))
    assert err.value.unreachable and "no.sock" in err.value.message
    # through the engine: the socket is named with the fix
    transport = LocalTransport(docker_socket=str(tmp_path / "no.sock"))
    with pytest.raises((DockerError, ConnectionLost)) as engine_err:
        asyncio.run(Engine(transport).list({LABEL: None}))
    assert "no.sock" in str(engine_err.value), engine_err.value


@pytest.mark.hostless
def test_dechunk() -> None:
    body = b"4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\n\r\n"
    assert dockerapi.dechunk(body) == b"Wikipedia in \r\n\r\nchunks."
    with pytest.raises(dockerapi.EngineRequestError):
        dockerapi.dechunk(b"zz\r\nab\r\n0\r\n\r\n")


@pytest.mark.hostless
@pytest.mark.parametrize(
    "answer, said",
    [
        # a plain HTTP server: its /_ping answer has no Api-Version
        (
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello\n",
            "no Api-Version header (it said 'hello')",
        ),
        (
            b"HTTP/1.0 404 Not Found\r\n\r\n<html>nope</html>",
            "not a Docker engine: it has no /_ping",
        ),
        (b"HTTP/1.0 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", "head over 64 KiB"),
    ],
)
def test_a_socket_that_is_not_dockerd_is_named(
    tmp_path: Path,
    answer: bytes,
    said: str,
) -> None:
    """Stand-ins for a socket that is not dockerd (an HTTP server that answers 200 or 404,
    one sending a huge head): one clear line each, naming the socket."""
    path = str(tmp_path / "odd.sock")

    async def go() -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(serve, path)
        try:
            await Engine(LocalTransport(docker_socket=path)).ping()
        except DockerError as e:
            return str(e)
        finally:
            server.close()
            await server.wait_closed()
        return "no error"

    got = asyncio.run(go())
    assert said in got and "does not answer" in got and os.path.basename(path) in got, got
