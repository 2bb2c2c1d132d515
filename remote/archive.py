"""Files in and out of a container, streamed as tar over the engine's socket (``docker cp``).

Docker Engine API: ``HEAD /containers/{id}/archive?path=P`` answers a path's stat in the
``X-Docker-Container-Path-Stat`` header (base64 JSON: ``name``, ``size``, ``mode`` as Go's
``os.FileMode``, ``mtime``, ``linkTarget``); ``GET`` answers the path as an uncompressed tar
whose members are rooted at the path's base name; ``PUT`` extracts a tar body into an existing
directory. All three work on exited containers too, and see the container's mounts.

The requests go over the engine's unix socket, which for an SSH host is the socket forwarded
over the host's SSH connection (:meth:`remote.transport.Transport.docker_socket`), on the event
loop. The tar is never held whole: socket reads go through a bounded queue (16 chunks of at
most 256 KiB) to a worker thread that runs :mod:`tarfile` in stream mode, and the other way
round for uploads (HTTP/1.1 chunked request body).

Extraction is safe by construction: every member must lie under the copied path's root
member, which is renamed to the destination's name, and then passes :func:`tarfile.data_filter`
(no absolute paths, no ``..`` leaving the destination, no links pointing outside it, no device
files; modes cleaned, owners not restored). The first unsafe member stops the copy with
:class:`UnsafeArchiveMember`.

Destination rules follow ``docker cp``: an existing directory receives the source under its own
name; otherwise the source is written as the destination (its parent must exist); a directory
never replaces a file. A source that is a symbolic link is followed (its target is copied);
links inside a copied directory are copied as links.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import posixpath
import tarfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from remote.dockerlogs import engine_error_message
from remote.errors import ConnectionLost, DockerError, GpuConsoleError

if TYPE_CHECKING:
    from remote.docker import Engine

log = logging.getLogger("gpuconsole.remote.archive")

T = TypeVar("T")

#: Go's ``os.ModeDir`` and ``os.ModeSymlink`` bits in the stat header's ``mode``.
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27

_CHUNK = 256 * 1024
_QUEUE_CHUNKS = 16
_STAT_HEADER = "x-docker-container-path-stat"


# -- errors ---------------------------------------------------------------------------------


class ContainerPathNotFound(DockerError):
    """A path does not exist in the container.

    Attributes:
        path: the path in the container, as asked.
    """

    def __init__(self, host: str, container: str, path: str, what: str = "path") -> None:
        super().__init__(
            host,
            f"{what} {path} does not exist in container {container[:12]}",
            "check the path with `gpuconsole exec JOB -- ls -la DIR`",
        )
        self.path = path


class CopyRefused(GpuConsoleError):
    """A copy cannot be done as asked (a directory onto a file, a missing or unwritable local
    destination, an unreadable local source); the message names the path."""


class LocalPathNotFound(CopyRefused):
    """A local path a copy needs does not exist (the source, or the destination's folder).

    Attributes:
        path: the local path.
    """

    def __init__(self, path: str, message: str, hint: str) -> None:
        super().__init__(message, hint)
        self.path = path


class UnsafeArchiveMember(GpuConsoleError):
    """An archive member would land outside the destination (absolute path, ``..``, a link
    pointing outside, a device file); the copy stopped at it.

    Attributes:
        member: the member's name in the archive.
    """

    def __init__(self, member: str, why: str) -> None:
        super().__init__(
            f"refused archive member {member!r}: {why}; the copy stopped there (members "
            "before it were written)",
            "copy the files the link points to, or a folder without such links",
        )
        self.member = member


# -- data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathStat:
    """A path's stat in a container, from the engine's ``X-Docker-Container-Path-Stat``.

    Attributes:
        name: base name (the tar's root member).
        size: bytes (of the file; a directory's is the engine's figure).
        mode: Go ``os.FileMode`` bits (type bits high, permission bits low).
        link_target: the path a symbolic link resolves to in the container, else ``""``.
    """

    name: str
    size: int
    mode: int
    link_target: str

    @property
    def is_dir(self) -> bool:
        """Whether the path is a directory."""
        return bool(self.mode & GO_MODE_DIR)

    @property
    def is_symlink(self) -> bool:
        """Whether the path is a symbolic link."""
        return bool(self.mode & GO_MODE_SYMLINK)

    @classmethod
    def from_header(cls, value: str) -> PathStat | None:
        """Decode the header's value (base64 JSON); ``None`` when it is not one."""
        try:
            data = json.loads(base64.b64decode(value))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(data, dict):
            return None
        return cls(
            str(data.get("name", "")),
            int(data.get("size") or 0),
            int(data.get("mode") or 0),
            str(data.get("linkTarget") or ""),
        )


@dataclass(frozen=True)
class CopyStats:
    """What a copy wrote.

    Attributes:
        files: regular files written.
        bytes: their total size, in bytes.
        dest: the path the source was written as (local or in the container).
    """

    files: int
    bytes: int
    dest: str


# -- HTTP on the engine's socket --------------------------------------------------------------


@dataclass(frozen=True)
class _Response:
    status: int
    headers: dict[str, str]


async def _read_head(host: str, reader: asyncio.StreamReader) -> _Response:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as e:
        raise DockerError(host, "the engine's answer has an oversized header") from e
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise DockerError(host, f"not an HTTP answer from the engine: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return _Response(int(parts[1]), headers)


async def _read_body(reader: asyncio.StreamReader, resp: _Response, limit: int = 65536) -> str:
    """A (small) response body: chunked or not, at most ``limit`` bytes."""
    data = await reader.read(limit)
    if resp.headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = [], data
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                size = int(size_line.split(b";")[0], 16)
            except ValueError:
                break
            if size == 0:
                break
            out.append(rest[:size])
            rest = rest[size + 2 :]
        data = b"".join(out)
    return data.decode(errors="replace").strip()


def _target(container: str, path: str, **params: str) -> str:
    query = urlencode({"path": path, **params})
    return f"/containers/{quote(container, safe='')}/archive?{query}"


async def _connect(
    host: str, socket_path: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_unix_connection(socket_path, limit=1 << 20)
    except OSError as e:
        raise ConnectionLost(host, f"Docker engine unreachable ({socket_path}): {e}") from e


def _raise_for(host: str, container: str, path: str, resp: _Response, body: str) -> None:
    message = engine_error_message(body) or f"HTTP {resp.status}"
    if resp.status == 404 and "no such container" not in message.lower():
        raise ContainerPathNotFound(host, container, path)
    hint = None
    if "read-only" in message:
        hint = (
            "copy to a writable path (/tmp, or a mount without :ro; the job's workdir "
            "at /workspace is read-only)"
        )
    raise DockerError(
        host, f"copy at {path} in container {container[:12]}: Docker engine: {message}", hint
    )


async def stat_path(host: str, socket_path: str, container: str, path: str) -> PathStat | None:
    """The stat of ``path`` in a container (``HEAD .../archive``), ``None`` if it is missing.

    Args:
        host: the host's name (for errors).
        socket_path: the engine's local (possibly SSH-forwarded) unix socket.
        container: container id or name.
        path: absolute path in the container.

    Raises:
        ConnectionLost: the socket cannot be reached or the answer was cut.
        DockerError: the engine refused (a missing container says so).
    """
    reader, writer = await _connect(host, socket_path)
    try:
        writer.write(f"HEAD {_target(container, path)} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        try:
            resp = await _read_head(host, reader)
        except (asyncio.IncompleteReadError, OSError) as e:
            raise ConnectionLost(host, f"no answer to the stat of {path}: {e}") from e
        if resp.status == 404:
            # HEAD has no body: a missing container is told apart by the caller's inspect
            return None
        if resp.status != 200:
            raise DockerError(host, f"Docker engine: stat of {path} answered HTTP {resp.status}")
        stat = PathStat.from_header(resp.headers.get(_STAT_HEADER, ""))
        if stat is None:
            raise DockerError(host, f"Docker engine: no stat header for {path}")
        return stat
    finally:
        writer.close()


# -- loop <-> worker thread byte pipes --------------------------------------------------------


class _Aborted(Exception):
    """The loop side of a pipe went away (error or cancellation)."""


class LoopToThreadReader:
    """A read-only binary stream for a worker thread, fed with chunks by the event loop
    through a bounded queue (back-pressure: the loop waits while the thread is behind).

    Args:
        loop: the loop whose coroutine calls :meth:`put` and :meth:`abort`.
        max_chunks: queued chunks at most.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_chunks: int = _QUEUE_CHUNKS) -> None:
        self._loop = loop
        self._q: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(max_chunks)
        self._buf = memoryview(b"")
        self._eof = False

    async def put(self, chunk: bytes | None) -> None:
        """Loop side: queue a chunk; ``None`` ends the stream."""
        await self._q.put(chunk)

    def abort(self, exc: BaseException) -> None:
        """Loop side: the thread's next (or pending) read raises ``exc``; never blocks."""
        while not self._q.empty():
            self._q.get_nowait()
        self._q.put_nowait(exc)

    def read(self, size: int = -1) -> bytes:
        """Thread side: up to ``size`` bytes (all the rest for -1); ``b""`` at the end."""
        if size < 0:
            parts = []
            while chunk := self.read(_CHUNK):
                parts.append(chunk)
            return b"".join(parts)
        while not self._buf and not self._eof:
            item = asyncio.run_coroutine_threadsafe(self._q.get(), self._loop).result()
            if item is None:
                self._eof = True
            elif isinstance(item, BaseException):
                raise item
            else:
                self._buf = memoryview(item)
        out, self._buf = bytes(self._buf[:size]), self._buf[size:]
        return out


class ThreadToLoopWriter:
    """A write-only binary stream for a worker thread whose bytes the event loop takes in
    chunks of about 256 KiB through a bounded queue (:meth:`chunks`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_chunks: int = _QUEUE_CHUNKS) -> None:
        self._loop = loop
        self._q: asyncio.Queue[bytes | None] = asyncio.Queue(max_chunks)
        self._buf = bytearray()
        self._failed: BaseException | None = None

    def write(self, data: bytes) -> int:
        """Thread side: buffer ``data``; hand full chunks to the loop (waits while it is
        behind). Raises the loop side's error once it failed."""
        if self._failed is not None:
            raise self._failed
        self._buf += data
        if len(self._buf) >= _CHUNK:
            self._send(bytes(self._buf))
            self._buf.clear()
        return len(data)

    def close(self) -> None:
        """Thread side: send what is buffered and the end of the stream."""
        if self._buf:
            self._send(bytes(self._buf))
            self._buf.clear()
        self._send(None)

    def _send(self, chunk: bytes | None) -> None:
        if self._failed is not None:
            raise self._failed
        asyncio.run_coroutine_threadsafe(self._q.put(chunk), self._loop).result()

    def abort(self, exc: BaseException) -> None:
        """Loop side: the thread's next write raises ``exc``; a blocked write returns."""
        self._failed = exc
        while not self._q.empty():
            self._q.get_nowait()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Loop side: the chunks the thread wrote, until it closed the stream."""
        while (chunk := await self._q.get()) is not None:
            yield chunk


async def run_with_pipe(
    fn: Callable[[], T],
    abort: Callable[[BaseException], None],
    feed: asyncio.Task[None],
    *,
    finish_feed: bool,
) -> T:
    """Run ``fn`` in a worker thread while ``feed`` (a task on this loop) moves its bytes.

    Args:
        finish_feed: after ``fn`` returned, wait for ``feed`` to end (an upload's last
            chunks) and raise its error; else cancel it (a download's trailing padding).

    Whatever way this ends (``fn`` done or failed, the feed failed, cancellation), the feed is
    cancelled and ``abort`` unblocks the thread, which is waited for: no thread is left
    blocked on the loop.
    """
    loop = asyncio.get_running_loop()
    work = loop.run_in_executor(None, fn)
    try:
        both: list[asyncio.Future[Any]] = [work, feed]
        done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            exc = feed.exception()
            if exc is not None:
                abort(exc)
        result = await asyncio.shield(work)
        if finish_feed:
            await feed
        return result
    finally:
        if not feed.done():
            feed.cancel()
            with contextlib.suppress(BaseException):
                await feed
        if not work.done():
            abort(_Aborted("the copy was interrupted"))
            await asyncio.wait([work])
        if work.done() and not work.cancelled():
            work.exception()  # retrieved: an error already raised above is not logged twice


# -- tar streams (worker thread side) ---------------------------------------------------------


def extract_stream(
    source: LoopToThreadReader | IO[bytes], dest_dir: Path, root: str, name: str
) -> CopyStats:
    """Extract a tar stream whose members are rooted at ``root`` into ``dest_dir``, the root
    renamed to ``name``; safe extraction (module docstring). Runs in a worker thread.

    Args:
        source: an object with ``read(size) -> bytes`` (the tar, read once, in order).
        dest_dir: existing local directory.
        root: the archive's root member name (the copied path's base name).
        name: what the root is written as in ``dest_dir``.

    Raises:
        UnsafeArchiveMember: a member outside the root, or refused by the data filter.
        CopyRefused: a member cannot be written (permission, a directory in the way).
    """
    files = 0
    size = 0
    dest = str(dest_dir)

    def rename_and_check(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
        nonlocal files, size
        original = member.name
        new = _rebase(original, root, name)
        if new is None:
            raise UnsafeArchiveMember(original, f"not under the copied path {root!r}")
        renamed = member.replace(name=new, deep=False)
        if member.islnk():  # hard links name another member of the archive
            target = _rebase(member.linkname, root, name)
            if target is None:
                raise UnsafeArchiveMember(
                    original, f"hard link to {member.linkname!r} outside the copied path"
                )
            renamed = renamed.replace(linkname=target, deep=False)
        try:
            checked = tarfile.data_filter(renamed, path)
        except tarfile.FilterError as e:
            raise UnsafeArchiveMember(original, _filter_reason(e, member)) from e
        if checked.isfile():
            files += 1
            size += checked.size
        return checked

    try:
        with tarfile.open(fileobj=source, mode="r|") as tar:  # type: ignore[call-overload]
            tar.extractall(dest, filter=rename_and_check)
    except tarfile.ReadError as e:
        raise CopyRefused(f"the engine's archive is not a readable tar: {e}") from e
    except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as e:
        where = e.filename or dest
        raise CopyRefused(
            f"cannot write {where}: {e.strerror or e}",
            "choose a destination you may write, where no folder or file of "
            "the other kind is in the way",
        ) from e
    return CopyStats(files, size, os.path.join(dest, name))


def _rebase(member: str, root: str, name: str) -> str | None:
    """``member`` with its leading ``root`` component replaced by ``name``; ``None`` when the
    member does not lie under ``root`` (an absolute name or ``..`` never does)."""
    if member == root or member.rstrip("/") == root:
        return name
    if member.startswith(root + "/"):
        return name + member[len(root) :]
    return None


def _filter_reason(e: tarfile.FilterError, member: tarfile.TarInfo) -> str:
    if isinstance(e, tarfile.AbsolutePathError):
        return "absolute path"
    if isinstance(e, tarfile.OutsideDestinationError):
        return "path leaves the destination (..)"
    if isinstance(e, tarfile.AbsoluteLinkError):
        return f"link to the absolute path {member.linkname!r}"
    if isinstance(e, tarfile.LinkOutsideDestinationError):
        return f"link to {member.linkname!r}, outside the destination"
    if isinstance(e, tarfile.SpecialFileError):
        return "device or other special file"
    return str(e)


def write_tar(sink: ThreadToLoopWriter, src: Path, root: str) -> CopyStats:
    """Write ``src`` (a file or a directory, recursively; links inside kept as links) as a tar
    stream rooted at ``root``, owned by root:root as ``docker cp`` writes it. Runs in a worker
    thread.

    Raises:
        CopyRefused: a file cannot be read.
    """
    files = 0
    size = 0

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        nonlocal files, size
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isfile():
            files += 1
            size += info.size
        return info

    try:
        with tarfile.open(
            fileobj=sink,
            mode="w|",  # type: ignore[call-overload]
            format=tarfile.PAX_FORMAT,
        ) as tar:
            # the source itself is followed when it is a link (`cp` semantics)
            tar.add(os.path.realpath(src), arcname=root, recursive=True, filter=as_root)
    except PermissionError as e:
        raise CopyRefused(
            f"cannot read {e.filename or src}: {e.strerror}", "copy files you may read"
        ) from e
    sink.close()
    return CopyStats(files, size, root)


# -- copies ---------------------------------------------------------------------------------


async def copy_from_container(
    engine: Engine, container: str, src: str, dest: str | Path
) -> CopyStats:
    """Copy ``src`` (a file or a directory) out of a container to the local path ``dest``
    (``docker cp CONTAINER:SRC DEST`` rules, module docstring). Works on exited containers.

    Args:
        engine: the engine of the container's host.
        container: container id.
        src: absolute path in the container.
        dest: local path (a trailing ``/`` says it must be an existing directory).

    Raises:
        ContainerPathNotFound: ``src`` does not exist in the container.
        CopyRefused: ``dest`` cannot receive it (missing parent, a directory onto a file,
            not writable).
        UnsafeArchiveMember: the archive tried to write outside ``dest``.
        ConnectionLost, DockerError: the engine could not be asked or refused.
    """
    host = engine.host
    socket_path = await engine.transport.docker_socket()
    st = await stat_path(host, socket_path, container, src)
    if st is None:
        raise ContainerPathNotFound(host, container, src)
    own_name = st.name
    if st.is_symlink and st.link_target:
        src = st.link_target
        st = await stat_path(host, socket_path, container, src)
        if st is None:
            raise ContainerPathNotFound(host, container, src, "link target")
    dest_dir, name = _local_destination(dest, own_name, st.is_dir)
    reader, writer = await _connect(host, socket_path)
    try:
        writer.write(f"GET {_target(container, src)} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        try:
            resp = await _read_head(host, reader)
        except (asyncio.IncompleteReadError, OSError) as e:
            raise ConnectionLost(host, f"no answer to the copy of {src}: {e}") from e
        if resp.status != 200:
            _raise_for(host, container, src, resp, await _read_body(reader, resp))
        head = PathStat.from_header(resp.headers.get(_STAT_HEADER, ""))
        root = head.name if head is not None else st.name
        pipe = LoopToThreadReader(asyncio.get_running_loop())

        async def feed() -> None:
            try:
                while data := await reader.read(_CHUNK):
                    await pipe.put(data)
            except OSError as e:
                raise ConnectionLost(host, f"the copy of {src} was cut: {e}") from e
            await pipe.put(None)

        return await run_with_pipe(
            lambda: extract_stream(pipe, dest_dir, root, name),
            pipe.abort,
            asyncio.create_task(feed()),
            finish_feed=False,
        )
    finally:
        writer.close()


def _local_destination(dest_arg: str | Path, src_name: str, src_is_dir: bool) -> tuple[Path, str]:
    """(directory to extract into, name of the copy) for a local ``dest``.

    Raises:
        CopyRefused: the parent is missing or not a directory, a directory onto a file, or
            the directory is not writable.
    """
    dest = Path(dest_arg)
    if dest.is_dir():
        dest_dir, name = dest, src_name
    else:
        if dest.exists() and src_is_dir:
            raise CopyRefused(
                f"cannot copy a directory onto the file {dest}",
                "give a directory, or a path that does not exist yet",
            )
        if str(dest_arg).endswith(os.sep):
            raise LocalPathNotFound(
                str(dest),
                f"destination directory {dest} does not exist",
                "create it first, or give a file path",
            )
        dest_dir, name = dest.parent, dest.name
        if not dest_dir.is_dir():
            raise LocalPathNotFound(
                str(dest_dir),
                f"cannot copy to {dest}: {dest_dir} is not an existing directory",
                "create the folder first",
            )
    if not os.access(dest_dir, os.W_OK | os.X_OK):
        raise CopyRefused(
            f"cannot write to {dest_dir}: permission denied", "choose a destination you may write"
        )
    return dest_dir, name


async def copy_to_container(engine: Engine, container: str, src: Path, dest: str) -> CopyStats:
    """Copy the local ``src`` (a file or a directory) into a container as ``dest``
    (``docker cp SRC CONTAINER:DEST`` rules, module docstring). Works on exited containers;
    files are owned by root, as ``docker cp`` makes them.

    Raises:
        CopyRefused: ``src`` is missing or unreadable, or a directory onto a file.
        ContainerPathNotFound: ``dest``'s parent does not exist in the container.
        ConnectionLost, DockerError: the engine could not be asked or refused (a read-only
            mount, for example).
    """
    if not src.exists():
        raise LocalPathNotFound(
            str(src), f"{src} does not exist", "give an existing file or folder"
        )
    host = engine.host
    socket_path = await engine.transport.docker_socket()
    dest = dest.rstrip("/") or "/"
    st = await stat_path(host, socket_path, container, dest)
    if st is not None and st.is_symlink and st.link_target:
        dest = st.link_target
        st = await stat_path(host, socket_path, container, dest)
    if st is not None and st.is_dir:
        into, root = dest, Path(os.path.abspath(src)).name
    else:
        if st is not None and src.is_dir():
            raise CopyRefused(
                f"cannot copy the directory {src} onto the file {dest} in "
                f"container {container[:12]}",
                "give a directory as destination",
            )
        into, root = posixpath.dirname(dest) or "/", posixpath.basename(dest)
        parent = await stat_path(host, socket_path, container, into)
        if parent is None or not parent.is_dir:
            raise ContainerPathNotFound(host, container, into, "directory")
    reader, writer = await _connect(host, socket_path)
    target = _target(container, into, noOverwriteDirNonDir="true")
    answer: asyncio.Task[tuple[_Response, str]] | None = None
    try:
        writer.write(
            f"PUT {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n"
            "Content-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        sink = ThreadToLoopWriter(asyncio.get_running_loop())

        async def read_answer() -> tuple[_Response, str]:
            # read while the body is sent: an engine that refuses (a read-only mount)
            # answers at once and closes, and later writes fail
            resp = await _read_head(host, reader)
            return resp, "" if resp.status == 200 else await _read_body(reader, resp)

        answer = asyncio.create_task(read_answer())

        async def feed() -> None:
            try:
                async for chunk in sink.chunks():
                    if answer.done():
                        raise ConnectionLost(
                            host, f"the engine answered the copy to {dest} before its end"
                        )
                    writer.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            except OSError as e:
                log.debug("copy to %s:%s: body cut: %s", container[:12], dest, e)
                raise ConnectionLost(host, f"the copy to {dest} was cut: {e}") from e

        stats: CopyStats | None = None
        try:
            stats = await run_with_pipe(
                lambda: write_tar(sink, src, root),
                sink.abort,
                asyncio.create_task(feed()),
                finish_feed=True,
            )
        except ConnectionLost as e:
            cut: ConnectionLost | None = e  # the engine's answer says why, when it sent one
        else:
            cut = None
        try:
            resp, body = await answer
        except (asyncio.IncompleteReadError, OSError) as e:
            raise cut or ConnectionLost(host, f"no answer to the copy to {dest}: {e}") from e
        if resp.status != 200:
            _raise_for(host, container, into, resp, body)
        if stats is None:
            raise cut or ConnectionLost(host, f"the copy to {dest} was cut")
        return CopyStats(stats.files, stats.bytes, posixpath.join(into, root))
    finally:
        if answer is not None and not answer.done():
            answer.cancel()
        writer.close()
