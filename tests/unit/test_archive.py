"""``cp``'s archive code: safe extraction of crafted tars, the HTTP streams over a unix socket
(a fake engine, since a real one never sends a hostile archive), and operand parsing.

The real engine is exercised by tests/integration/test_cp.py.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import tarfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from console.errors import JobError, UsageError
from console.jobs.copy import CopyRequest, copy_node, parse_copy, split_operand
from console.jobs.store import JobRecord, NodeRecord
from remote.archive import (
    GO_MODE_DIR,
    CopyRefused,
    UnsafeArchiveMember,
    copy_from_container,
    copy_to_container,
    extract_stream,
)
from remote.docker import Engine
from remote.errors import DockerError
from remote.transport import LocalTransport

# -- crafted archives -------------------------------------------------------------------------


def make_tar(entries: list[tuple[str, str, bytes | str]]) -> bytes:
    """A tar of ``(kind, name, data)``: kind ``file`` (data = content), ``dir``, ``symlink``
    or ``hardlink`` (data = link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            tar.addfile(info)
    return buf.getvalue()


def test_extract_renames_the_root_and_counts_files(tmp_path: Path) -> None:
    data = make_tar(
        [
            ("dir", "out", b""),
            ("file", "out/a.txt", b"alpha"),
            ("dir", "out/sub", b""),
            ("file", "out/sub/b.bin", b"\x00" * 1000),
            ("symlink", "out/link", "sub/b.bin"),
            ("hardlink", "out/hard", "out/a.txt"),
        ]
    )
    stats = extract_stream(io.BytesIO(data), tmp_path, "out", "copy")
    assert (stats.files, stats.bytes) == (2, 1005)
    assert stats.dest == str(tmp_path / "copy")
    assert (tmp_path / "copy" / "a.txt").read_bytes() == b"alpha"
    assert (tmp_path / "copy" / "sub" / "b.bin").read_bytes() == b"\x00" * 1000
    assert (tmp_path / "copy" / "link").readlink() == Path("sub/b.bin")
    assert (tmp_path / "copy" / "hard").read_bytes() == b"alpha"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]


@pytest.mark.parametrize(
    ("entries", "member", "why"),
    [
        ([("file", "../x", b"evil")], "../x", "not under the copied path"),
        (
            [("dir", "out", b""), ("file", "out/../../x", b"evil")],
            "out/../../x",
            "path leaves the destination",
        ),
        ([("file", "/etc/x", b"evil")], "/etc/x", "not under the copied path"),
        (
            [("dir", "out", b""), ("symlink", "out/l", "/etc/passwd")],
            "out/l",
            "link to the absolute path '/etc/passwd'",
        ),
        (
            [("dir", "out", b""), ("symlink", "out/l", "../../x")],
            "out/l",
            "link to '../../x', outside the destination",
        ),
        (
            [("dir", "out", b""), ("hardlink", "out/h", "etc/passwd")],
            "out/h",
            "hard link to 'etc/passwd' outside the copied path",
        ),
    ],
)
def test_extract_refuses_members_leaving_the_destination(
    tmp_path: Path,
    entries: list[tuple[str, str, bytes | str]],
    member: str,
    why: str,
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveMember) as e:
        extract_stream(io.BytesIO(make_tar(entries)), dest, "out", "out")
    assert e.value.member == member
    assert why in e.value.message
    assert not (tmp_path / "x").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["dest"]


def test_extract_into_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    data = make_tar([("dir", "out", b""), ("file", "out/a", b"x")])
    with pytest.raises(CopyRefused, match="cannot write"):
        extract_stream(io.BytesIO(data), tmp_path, "out", "out")


# -- a fake engine on a unix socket -----------------------------------------------------------


def stat_header(name: str, *, is_dir: bool = False, size: int = 0) -> str:
    mode = (GO_MODE_DIR | 0o755) if is_dir else 0o644
    value = {
        "name": name,
        "size": size,
        "mode": mode,
        "mtime": "2026-01-01T00:00:00Z",
        "linkTarget": "",
    }
    return base64.b64encode(json.dumps(value).encode()).decode()


@dataclass
class FakeArchiveEngine:
    """Stands in for dockerd's archive endpoints (HEAD, GET, PUT) on a unix socket: a real
    engine only sends archives of real files, so a hostile one needs a fake.

    ``paths`` maps a container path to its stat header value; ``tars`` a path to the GET body
    (sent in 64 KiB writes); PUT bodies (chunked) are kept in ``received``.
    """

    paths: dict[str, str] = field(default_factory=dict)
    tars: dict[str, bytes] = field(default_factory=dict)
    received: dict[str, bytes] = field(default_factory=dict)
    put_error: str | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        method, target, _ = head.split("\r\n")[0].split(" ")
        from urllib.parse import parse_qs, urlsplit

        path = parse_qs(urlsplit(target).query)["path"][0]
        if method == "PUT":
            if self.put_error is not None:  # answer at once, as dockerd does, and close
                body = json.dumps({"message": self.put_error}).encode()
                writer.write(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                await writer.drain()
                writer.close()
                return
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                chunks.append(await reader.readexactly(size + 2))
                if size == 0:
                    break
            self.received[path] = b"".join(c[:-2] for c in chunks)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        elif path not in self.paths:
            body = json.dumps({"message": f"Could not find the file {path} in container c"})
            writer.write(
                f"HTTP/1.0 404 Not Found\r\nContent-Type: application/json\r\n\r\n"
                f"{'' if method == 'HEAD' else body}".encode()
            )
        else:
            writer.write(
                f"HTTP/1.0 200 OK\r\nX-Docker-Container-Path-Stat: {self.paths[path]}"
                "\r\nContent-Type: application/x-tar\r\n\r\n".encode()
            )
            if method == "GET":
                data = self.tars[path]
                for i in range(0, len(data), 65536):
                    writer.write(data[i : i + 65536])
                    await writer.drain()
        await writer.drain()
        writer.close()


@pytest.fixture
async def fake_engine(tmp_path: Path) -> AsyncIterator[tuple[FakeArchiveEngine, Engine]]:
    fake = FakeArchiveEngine()
    sock = str(tmp_path / "fake-engine.sock")
    server = await asyncio.start_unix_server(fake.handle, sock)
    engine = Engine(LocalTransport("fakehost", sock))
    try:
        yield fake, engine
    finally:
        server.close()
        await server.wait_closed()


async def test_download_streams_a_large_file(
    fake_engine: tuple[FakeArchiveEngine, Engine],
    tmp_path: Path,
) -> None:
    fake, engine = fake_engine
    content = bytes(range(256)) * (24 * 4096)  # 24 MiB: many times the queue's 4 MiB
    fake.paths["/out/ckpt.pt"] = stat_header("ckpt.pt", size=len(content))
    fake.tars["/out/ckpt.pt"] = make_tar([("file", "ckpt.pt", content)])
    stats = await copy_from_container(engine, "c", "/out/ckpt.pt", tmp_path / "local.pt")
    assert (stats.files, stats.bytes, stats.dest) == (1, len(content), str(tmp_path / "local.pt"))
    assert (tmp_path / "local.pt").read_bytes() == content


async def test_download_refuses_a_traversal_member(
    fake_engine: tuple[FakeArchiveEngine, Engine],
    tmp_path: Path,
) -> None:
    fake, engine = fake_engine
    fake.paths["/out"] = stat_header("out", is_dir=True)
    fake.tars["/out"] = make_tar(
        [
            ("dir", "out", b""),
            ("file", "out/ok", b"fine"),
            ("file", "../x", b"evil"),
            ("file", "out/later", b"never"),
        ]
    )
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveMember) as e:
        await copy_from_container(engine, "c", "/out", dest)
    assert e.value.member == "../x"
    assert (dest / "out" / "ok").read_bytes() == b"fine"  # written before the bad member
    assert not (tmp_path / "x").exists() and not (dest / "out" / "later").exists()


async def test_download_of_a_missing_path_names_it(
    fake_engine: tuple[FakeArchiveEngine, Engine],
    tmp_path: Path,
) -> None:
    _, engine = fake_engine
    with pytest.raises(DockerError) as e:
        await copy_from_container(engine, "c", "/nope/file", tmp_path)
    assert e.value.message == "host fakehost: path /nope/file does not exist in container c"


async def test_upload_sends_a_chunked_tar_named_as_dest(
    fake_engine: tuple[FakeArchiveEngine, Engine],
    tmp_path: Path,
) -> None:
    fake, engine = fake_engine
    fake.paths["/tmp"] = stat_header("tmp", is_dir=True)
    src = tmp_path / "cfg"
    (src / "sub").mkdir(parents=True)
    (src / "a.yaml").write_text("lr: 3e-4\n")
    (src / "sub" / "big").write_bytes(b"z" * 700_000)  # several 256 KiB chunks
    stats = await copy_to_container(engine, "c", src, "/tmp/newname")
    assert (stats.files, stats.bytes, stats.dest) == (2, 700_009, "/tmp/newname")
    with tarfile.open(fileobj=io.BytesIO(fake.received["/tmp"])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["newname", "newname/a.yaml", "newname/sub", "newname/sub/big"]
        assert {(m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, "root")}
        f = tar.extractfile(members["newname/a.yaml"])
        assert f is not None and f.read() == b"lr: 3e-4\n"


async def test_upload_refused_by_the_engine_says_why(
    fake_engine: tuple[FakeArchiveEngine, Engine],
    tmp_path: Path,
) -> None:
    fake, engine = fake_engine
    fake.paths["/workspace"] = stat_header("workspace", is_dir=True)
    fake.put_error = "mounted volume is marked read-only"
    src = tmp_path / "big"
    src.write_bytes(b"y" * 3_000_000)  # more than the engine reads before answering
    with pytest.raises(DockerError) as e:
        await copy_to_container(engine, "c", src, "/workspace")
    assert e.value.message == (
        "host fakehost: copy at /workspace in container c: Docker "
        "engine: mounted volume is marked read-only"
    )
    assert e.value.hint is not None and "/workspace is read-only" in e.value.hint


# -- operands and nodes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("myjob:/out/x", ("myjob", "/out/x")),
        ("ddp-ab12cd:out/", ("ddp-ab12cd", "out/")),
        ("./a:b", (None, "./a:b")),
        ("/tmp/a:b", (None, "/tmp/a:b")),
        ("local.txt", (None, "local.txt")),
    ],
)
def test_split_operand(text: str, expected: tuple[str | None, str]) -> None:
    assert split_operand(text) == expected


def test_parse_copy_directions_and_errors() -> None:
    assert parse_copy("j:out/ckpt.pt", ".") == CopyRequest("j", "from", "/out/ckpt.pt", ".")
    assert parse_copy("cfg/", "j:/tmp/") == CopyRequest("j", "to", "/tmp/", "cfg/")
    with pytest.raises(UsageError, match="neither of 'a' and 'b' name a job"):
        parse_copy("a", "b")
    with pytest.raises(UsageError, match="both of"):
        parse_copy("j:/a", "k:/b")
    with pytest.raises(UsageError, match="must be JOB:PATH"):
        parse_copy("j:", ".")


def _job(removed: bool = False) -> JobRecord:
    return JobRecord(
        id="j-abc123",
        name="j",
        profile="p",
        profile_source=None,
        spec={},
        spec_hash="0" * 12,
        created_at=0.0,
        node_count=2,
        removed_at=1.0 if removed else None,
        nodes=[
            NodeRecord("j-abc123", r, h, f"c{r}", f"id{r}", "succeeded")
            for r, h in ((0, "a"), (1, "b"))
        ],
    )


@pytest.mark.parametrize(
    ("node", "check"),
    [
        (None, lambda n: n.host == "a"),
        (1, lambda n: n.host == "b" and n.container_id == "id1"),
    ],
)
def test_copy_node(node: int | None, check: Callable[[NodeRecord], bool]) -> None:
    assert check(copy_node(_job(), node))


def test_copy_node_errors() -> None:
    with pytest.raises(UsageError) as e:
        copy_node(_job(), 2)
    assert e.value.message == "--node 2: job j-abc123 has no node 2"
    assert e.value.hint == "nodes: 0, 1"
    with pytest.raises(JobError, match="was removed"):
        copy_node(_job(removed=True), 0)
