"""Transports: one object per host that runs commands, copies files and opens the Docker engine.

:class:`LocalTransport` (this machine, no SSH) and :class:`remote.ssh.SSHTransport` (asyncssh)
share the :class:`Transport` interface, so the ``local`` profile and an SSH host take the same
code path everywhere above this module.

Threading: every method is a coroutine run on the caller's asyncio loop. The Docker SDK is
synchronous and is driven from worker threads (see :mod:`remote.docker`); it reaches the engine
through the unix socket returned by :meth:`Transport.docker_socket`, which for SSH is a local
socket forwarded over the connection by the same loop.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import logging
import os
import re
import secrets
import shlex
import shutil
import socket
import stat
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from remote.errors import GpuConsoleError, RemoteCommandFailed, TransportError

if TYPE_CHECKING:
    from remote.dockerlogs import ByteReader, ByteWriter

log = logging.getLogger("gpuconsole.remote")

#: Names never copied when a workdir is synced to a host.
WORKDIR_IGNORE = (".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache")

#: Where synced workdirs live on a host, relative to the host user's home.
WORKDIR_CACHE = ".cache/gpuconsole/workdirs"

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"

#: Local temporary folders: ``gpuconsole-<owner pid>-<kind>-<random>`` in the temp dir.
_LOCAL_TMP = re.compile(r"^gpuconsole-(\d+)-(sock|workdir)-")
#: A host staging folder left by a console of another machine is removed after this long.
STAGING_MAX_AGE_S = 24 * 3600.0
#: A synced workdir no container uses is collected once untouched for this long.
WORKDIR_IDLE_S = 24 * 3600.0

_swept = False


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this machine (a PID reused by another
    process counts as alive: its folders wait for that one to end)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_local_temp(tmpdir: str | None = None) -> list[str]:
    """Remove the local temporary folders (forwarded socket dirs, workdir staging copies) of
    gpuconsole processes that are gone, e.g. SIGKILLed; returns the paths removed.

    Folders are recognised by name (:func:`local_temp_dir`), owned by the PID in it, and only
    this user's folders are touched.
    """
    root = tmpdir or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for e in entries:
        m = _LOCAL_TMP.match(e.name)
        if m is None or pid_alive(int(m.group(1))):
            continue
        try:
            if (
                not e.is_dir(follow_symlinks=False)
                or e.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
        except OSError:
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        removed.append(e.path)
        log.debug("removed %s (its gpuconsole process %s is gone)", e.path, m.group(1))
    return removed


def local_temp_dir(kind: str) -> str:
    """A new private temporary folder named for this process: ``gpuconsole-<pid>-<kind>-*``
    (``kind``: ``sock-<host>`` or ``workdir``). The first call in a process first sweeps the
    folders of dead gpuconsole processes (:func:`sweep_local_temp`)."""
    global _swept
    if not _swept:
        _swept = True
        sweep_local_temp()
    return tempfile.mkdtemp(prefix=f"gpuconsole-{os.getpid()}-{kind}-")


def staging_name(digest: str) -> str:
    """Name of a host staging folder: ``.<digest>.<this machine>.<pid>.<random>.tmp``, so the
    next sync from this machine can tell whether its owner is gone."""
    return f".{digest}.{_machine()}.{os.getpid()}.{secrets.token_hex(3)}.tmp"


def _machine() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:64] or "localhost"


def stale_staging(name: str, age_s: float) -> bool:
    """Whether a host staging folder (:func:`staging_name`) was left by an interrupted copy:
    made by a process of this machine that is gone, or older than :data:`STAGING_MAX_AGE_S`."""
    parts = name.split(".")
    if len(parts) == 6 and parts[2] == _machine() and parts[3].isdigit():
        return not pid_alive(int(parts[3]))
    return age_s > STAGING_MAX_AGE_S


@dataclass(frozen=True)
class CommandResult:
    """What a command run on a host returned.

    Attributes:
        returncode: exit status (a negative number is never produced; signals show as 128+N
            the way a shell reports them, or -1 when the transport could not tell).
        stdout: standard output, decoded as UTF-8 with replacement.
        stderr: standard error, decoded likewise.
    """

    returncode: int
    stdout: str
    stderr: str


#: Loopback address every forward listens on locally (never ``0.0.0.0``).
FORWARD_LISTEN_HOST = "127.0.0.1"


class Forward:
    """A TCP port of a host reachable on this machine (see :meth:`Transport.forward_local`).

    Connect to ``local_host:local_port`` here and the bytes reach ``remote_host:remote_port``
    as seen from the host. Closing is idempotent; ``async with`` closes on exit.

    Attributes:
        host: the host's name in the profile.
        local_host: the address to connect to on this machine: always ``127.0.0.1`` over SSH;
            for :class:`LocalTransport` the ``remote_host`` itself (no tunnel is made).
        local_port: the TCP port bound on ``local_host`` (the one chosen when 0 was asked).
        remote_host: the destination address as the host resolves it (default ``127.0.0.1``:
            the host's own loopback).
        remote_port: the destination TCP port on the host.
        error: why the latest connection through the forward could not reach the destination
            (nobody listening, refused by the host), or ``None``.
    """

    def __init__(
        self,
        host: str,
        local_host: str,
        local_port: int,
        remote_host: str,
        remote_port: int,
        *,
        closer: Callable[[], Awaitable[None]] | None = None,
        connector: Callable[[], Awaitable[None]] | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        self.host = host
        self.local_host = local_host
        self.local_port = local_port
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.error: TransportError | None = None
        self._closer = closer
        self._connector = connector
        self._alive = alive
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the forward is closed (by :meth:`close` or because its connection ended)."""
        return self._closed or (self._alive is not None and not self._alive())

    def unreachable(self, reason: str) -> TransportError:
        """The error for a destination nobody answers on; also kept in :attr:`error`."""
        self.error = TransportError(
            self.host,
            f"nothing accepts connections on {self.remote_host}:{self.remote_port} "
            f"(forwarded from {self.local_host}:{self.local_port}): {reason}",
            f"check that the program on {self.host} listens on "
            f"{self.remote_host}:{self.remote_port}",
        )
        return self.error

    async def check(self) -> None:
        """Open one connection to the destination and close it: a readiness probe.

        Raises:
            TransportError: the forward is closed, or nothing accepts connections on
                ``remote_host:remote_port`` of the host (the message names both).
        """
        if self.closed:
            raise TransportError(
                self.host, f"the forward to {self.remote_host}:{self.remote_port} is closed"
            )
        if self._connector is not None:
            await self._connector()
        self.error = None

    async def close(self) -> None:
        """Stop listening on the local port (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        if self._closer is not None:
            await self._closer()

    async def __aenter__(self) -> Forward:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"Forward({self.host}: {self.local_host}:{self.local_port} -> "
            f"{self.remote_host}:{self.remote_port}{', closed' if self.closed else ''})"
        )


class Transport(ABC):
    """One host, reached locally or over SSH.

    Attributes:
        name: the host's name in the profile (``a``, ``gpu-node-1``, ``local``).
    """

    name: str

    @abstractmethod
    async def connect(self) -> None:
        """Open the connection (no-op when already open).

        Raises:
            HostUnreachable, HostKeyRefused, AuthenticationFailed: see :mod:`remote.errors`.
        """

    @abstractmethod
    async def close(self) -> None:
        """Close the connection and any socket forwarded over it."""

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether the connection is open now."""

    @abstractmethod
    def address(self) -> str:
        """An IP address of this host that other hosts can reach (rendezvous endpoint).

        Only valid after :meth:`connect`.
        """

    @abstractmethod
    def describe(self) -> str:
        """How this host is reached, for people: ``ssh root@10.0.0.5:22`` or ``local``."""

    @abstractmethod
    async def run(
        self, argv: list[str], *, input: bytes | None = None, timeout: float | None = 60.0
    ) -> CommandResult:
        """Run ``argv`` on the host and wait for it.

        The argv list is never joined into a shell string on the local side; over SSH it is
        joined with :func:`shlex.join`, so every element reaches the remote program unchanged.

        Raises:
            TransportError: the host could not be reached or the command timed out.
        """

    def drop_reason(self) -> str | None:
        """Why the connection dropped, while it is down (``the host stopped answering, last
        data 20 s ago``), for a follow that saw its stream end; ``None`` when it is up or this
        transport cannot tell."""
        return None

    def ssh_argv(self) -> list[str] | None:
        """An OpenSSH ``ssh`` command line that logs in to this host as the profile reaches
        it (port, user, key, jump host, known_hosts), for hints shown to people; ``None`` for
        this machine."""
        return None

    @abstractmethod
    def engine_socket_path(self) -> str:
        """The engine's socket path on the host itself (for a ``docker -H unix://...`` line
        run there)."""

    @abstractmethod
    async def interactive(self, argv: list[str], *, tty: bool) -> int:
        """Run ``argv`` on the host attached to this process's terminal; return its exit code.

        With ``tty`` the command gets a pseudo-terminal (over SSH: a PTY of the session, the
        local terminal in raw mode, window size changes forwarded); without it, stdin, stdout
        and stderr are piped through as bytes.

        Raises:
            TransportError: the host cannot be reached or the command cannot start.
        """

    @abstractmethod
    async def forward_local(
        self, remote_port: int, *, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> Forward:
        """Make ``remote_host:remote_port`` (as the host sees it) reachable from this machine.

        Over SSH a listener on ``127.0.0.1:local_port`` here (0: a free port) carries each
        connection through the existing SSH connection (a ``direct-tcpip`` channel), so the
        destination needs no port published on the host's network. The forward ends with
        the connection. A destination nobody listens on is reported as a
        :class:`~remote.errors.TransportError` naming the host and port in
        :attr:`Forward.error` when a connection through it fails, and raised by
        :meth:`Forward.check`.

        Raises:
            TransportError: the host cannot be reached, or the local port cannot be bound.
        """

    @abstractmethod
    async def docker_socket(self) -> str:
        """A local unix socket path that speaks to the host's Docker engine.

        Raises:
            DockerError: the engine's socket is missing or the forward could not be opened.
        """

    async def open_engine_stream(self) -> tuple[ByteReader, ByteWriter]:
        """A new stream to the host's Docker engine (one HTTP exchange, e.g. a log follow):
        here, a connection to :meth:`docker_socket`.

        Raises:
            OSError: the socket could not be connected.
            DockerError: see :meth:`docker_socket`.
        """
        return await asyncio.open_unix_connection(await self.docker_socket())

    @abstractmethod
    async def _put_tree(self, local_dir: Path, remote_dir: str) -> None:
        """Copy ``local_dir`` (already filtered) to ``remote_dir``, which must not exist."""

    @abstractmethod
    async def _rename(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst`` on the host; ``False`` when ``dst`` already exists."""

    @abstractmethod
    async def _exists(self, path: str) -> bool:
        """Whether ``path`` exists on the host."""

    @abstractmethod
    async def home(self) -> str:
        """The host user's home directory, as an absolute path."""

    @abstractmethod
    async def open_process(self, argv: list[str]) -> RemoteProcess:
        """Start a long-running command with stdin open (the liveness link: closing it tells
        the program to exit) and its stdout readable line by line.

        Raises:
            TransportError: the host could not be reached.
        """

    @abstractmethod
    async def _put_files(
        self, files: dict[str, bytes], remote_dir: str, executable: Collection[str] = ()
    ) -> None:
        """Write ``files`` (name -> bytes) into ``remote_dir``, which must not exist; the
        names in ``executable`` get mode 0755."""

    async def put_bundle(
        self, files: dict[str, bytes], base: str, *, executable: Collection[str] = ()
    ) -> str:
        """Upload a set of files into ``~/<base>/<sha256[:16]>`` unless it is already there.

        Content-addressed like :meth:`sync_workdir`: re-uploaded only when a file changes,
        never seen half-written; the files named in ``executable`` are executable (mode
        0755) before the folder appears.

        Returns:
            The folder's absolute path on the host.
        """
        digest = bundle_digest(files)
        root = f"{await self.home()}/{base}"
        final = f"{root}/{digest}"
        if await self._exists(final):
            return final
        await self.sweep_staging(root)
        tmp = f"{root}/{staging_name(digest)}"
        await self._put_files(files, tmp, executable)
        if not await self._rename(tmp, final):
            await self.run(["rm", "-rf", "--", tmp])
        return final

    async def check(self, argv: list[str], *, timeout: float | None = 60.0) -> str:
        """Run ``argv`` and return its stdout.

        Raises:
            RemoteCommandFailed: it exited non-zero.
        """
        res = await self.run(argv, timeout=timeout)
        if res.returncode != 0:
            raise RemoteCommandFailed(self.name, argv, res.returncode, res.stderr)
        return res.stdout

    async def sync_workdir(self, local_dir: Path, exclude: Sequence[str] = ()) -> str:
        """Copy a local folder to ``~/.cache/gpuconsole/workdirs/<sha256>`` on the host.

        Only the entries :func:`iter_workdir_files` yields are copied (``exclude`` patterns
        and the always-ignored folders left out).

        The folder is content-addressed: a workdir already there is not copied again, and two
        nodes on one host (or two hosts sharing a home) never see a half-written copy, because
        the copy is made under a temporary name and renamed into place.

        Returns:
            The absolute path of the synced copy on the host.

        Raises:
            TransportError: the copy failed.
        """
        # hashing and the staging copy read every file: worker threads, never the loop
        digest = await asyncio.to_thread(workdir_digest, local_dir, exclude)
        base = f"{await self.home()}/{WORKDIR_CACHE}"
        final = f"{base}/{digest[:16]}"
        await self.sweep_staging(base)
        if await self._exists(final):
            # in use again: its mtime keeps :meth:`collect_workdirs` off it for a while
            await self.run(["touch", "-c", "--", final])
            return final
        tmp = f"{base}/{staging_name(digest[:16])}"
        staging = await asyncio.to_thread(local_temp_dir, "workdir")
        try:
            stage = Path(staging) / "w"
            await asyncio.to_thread(_stage_workdir, local_dir, stage, exclude)
            await self._put_tree(stage, tmp)
        except BaseException:
            # a failed or interrupted copy leaves no staging folder on the host (the next
            # sync's sweep only takes those old enough to belong to no running copy)
            await asyncio.shield(self._remove_staging(tmp))
            raise
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
        if not await self._rename(tmp, final):
            await self.run(["rm", "-rf", "--", tmp])
        return final

    async def _remove_staging(self, tmp: str) -> None:
        """Remove a staging folder of a copy that failed; a host that cannot be asked now
        keeps it until a later sync's sweep (:meth:`sweep_staging`)."""
        try:
            await self.run(["rm", "-rf", "--", tmp], timeout=60)
        except (GpuConsoleError, OSError) as e:
            log.warning("[%s] could not remove the staging folder %s: %s", self.name, tmp, e)

    async def _list_dir(self, path: str) -> list[tuple[str, float, float]]:
        """Entries of a folder on the host directly below ``path``: ``(name, mtime, age)`` in
        the host's Unix seconds; empty when it does not exist."""
        res = await self.run(
            ["find", path, "-mindepth", "1", "-maxdepth", "1", "-printf", "%f\\t%T@\\n"], timeout=60
        )
        if res.returncode != 0:
            return []
        now_s = (await self.run(["date", "+%s"])).stdout.strip()
        now = float(now_s) if now_s.isdigit() else time.time()
        out = []
        for line in res.stdout.splitlines():
            name, _, mtime = line.rpartition("\t")
            try:
                out.append((name, float(mtime), max(0.0, now - float(mtime))))
            except ValueError:
                continue
        return out

    async def sweep_staging(self, folder: str) -> list[str]:
        """Remove staging folders in ``folder`` (on the host) left by interrupted copies
        (:func:`stale_staging`); returns their paths."""
        stale = [
            f"{folder}/{n}"
            for n, _, age in await self._list_dir(folder)
            if n.startswith(".") and n.endswith(".tmp") and stale_staging(n, age)
        ]
        if stale:
            log.info(
                "[%s] removing staging folders of interrupted copies: %s",
                self.name,
                ", ".join(stale),
            )
            await self.run(["rm", "-rf", "--", *stale], timeout=300)
        return stale

    async def collect_workdirs(
        self,
        in_use: set[str],
        *,
        only: set[str] | None = None,
        idle_s: float = WORKDIR_IDLE_S,
        synced_before: float | None = None,
    ) -> list[str]:
        """Remove synced workdirs (``~/.cache/gpuconsole/workdirs/<hash>``) that no container
        uses; returns their paths.

        Args:
            in_use: host paths that containers on this host bind-mount (any state).
            only: remove only these paths (``None``: any synced workdir).
            idle_s: keep a workdir synced, or reused by a sync, less than this many seconds ago.
            synced_before: instead of ``idle_s``: keep a workdir synced or reused after this
                time (host Unix seconds): a later submit shares it.
        """
        base = f"{await self.home()}/{WORKDIR_CACHE}"
        gone = []
        for n, mtime, age in await self._list_dir(base):
            path = f"{base}/{n}"
            if n.startswith(".") or path in in_use or (only is not None and path not in only):
                continue
            if (mtime <= synced_before) if synced_before is not None else age >= idle_s:
                gone.append(path)
        if gone:
            log.info(
                "[%s] removing synced workdirs no container uses: %s", self.name, ", ".join(gone)
            )
            await self.run(["rm", "-rf", "--", *gone], timeout=300)
        return gone


def bundle_digest(files: dict[str, bytes]) -> str:
    """16 hex of SHA-256 over a bundle's names and contents: its folder name on a host
    (see :meth:`Transport.put_bundle`)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]


def _stage_workdir(local_dir: Path, stage: Path, exclude: Sequence[str]) -> None:
    """Copy the workdir's synced entries into ``stage`` (symlinks kept as links)."""
    stage.mkdir()
    for rel in iter_workdir_files(local_dir, exclude):
        src, dst = local_dir / rel, stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


class RemoteProcess(ABC):
    """A long-running command on a host (see :meth:`Transport.open_process`)."""

    @abstractmethod
    async def readline(self) -> str | None:
        """The next stdout line without its newline, or ``None`` at end of output."""

    @abstractmethod
    async def wait(self) -> int:
        """Wait for exit; the exit status (128+N for signal N, -1 when unknown)."""

    @abstractmethod
    async def stderr(self) -> str:
        """What the command wrote to stderr (read after exit)."""

    @abstractmethod
    async def close(self) -> None:
        """Close stdin (the program's cue to exit), then end the process if it lingers."""


class _LocalProcess(RemoteProcess):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def readline(self) -> str | None:
        assert self.proc.stdout is not None
        raw = await self.proc.stdout.readline()
        if not raw:
            return None
        return raw.decode(errors="replace").rstrip("\n")

    async def wait(self) -> int:
        rc = await self.proc.wait()
        return 128 - rc if rc < 0 else rc

    async def stderr(self) -> str:
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode(errors="replace")

    async def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()


def excluded(rel: str, name: str, patterns: Sequence[str]) -> bool:
    """Whether a workdir entry matches an exclude pattern (shell-style, ``fnmatch``): against
    its name (``*.ckpt``, ``data``) or its relative path (``data/raw/*``); a trailing ``/``
    is ignored."""
    return any(
        fnmatch.fnmatchcase(name, p.rstrip("/")) or fnmatch.fnmatchcase(rel, p.rstrip("/"))
        for p in patterns
    )


def iter_workdir_files(root: Path, exclude: Sequence[str] = ()) -> Iterator[Path]:
    """Yield the entries of a workdir that are synced, in a stable order (relative paths):
    regular files and symlinks (copied as links); FIFOs, sockets and devices are skipped, as
    are the :data:`WORKDIR_IGNORE` folders and whatever matches ``exclude``."""
    for dirpath, dirnames, filenames in os.walk(root):
        reldir = os.path.relpath(dirpath, root)
        base = "" if reldir == "." else reldir + "/"
        dirnames[:] = sorted(
            d for d in dirnames if d not in WORKDIR_IGNORE and not excluded(base + d, d, exclude)
        )
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if excluded(base + fn, fn, exclude):
                continue
            if p.is_symlink() or stat.S_ISREG(p.lstat().st_mode):
                yield p.relative_to(root)


def unsyncable_name(name: str) -> str | None:
    """Why the workdir sync cannot copy an entry of this name, or ``None``: a backslash
    (asyncssh's recursive SFTP copy rejects a name with ``\\``, a path separator on Windows
    servers, as "Invalid filename"), or bytes that are not UTF-8 (the name as ``os.walk``
    gives it holds surrogates; SFTP version 3 names are UTF-8 strings)."""
    if "\\" in name:
        return "a backslash in a file name, which the workdir sync to SSH hosts (SFTP) refuses"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return (
            "a file name that is not UTF-8, which the workdir sync to SSH hosts (SFTP) cannot send"
        )
    return None


def unsyncable_names(root: Path, exclude: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(relative path, why)`` of synced workdir entries (files, links, folders) whose name
    the copy to an SSH host refuses (:func:`unsyncable_name`). Checked before anything is made
    on a host."""
    bad: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        reldir = os.path.relpath(dirpath, root)
        base = "" if reldir == "." else reldir + "/"
        dirnames[:] = sorted(
            d for d in dirnames if d not in WORKDIR_IGNORE and not excluded(base + d, d, exclude)
        )
        bad += [(base + d, why) for d in dirnames if (why := unsyncable_name(d))]
        dirnames[:] = [d for d in dirnames if unsyncable_name(d) is None]
        bad += [
            (base + fn, why)
            for fn in sorted(filenames)
            if (why := unsyncable_name(fn)) and not excluded(base + fn, fn, exclude)
        ]
    return bad


def workdir_digest(root: Path, exclude: Sequence[str] = ()) -> str:
    """SHA-256 (hex) over the relative paths, modes and contents (a symlink: its target) of a
    workdir's synced entries; files are read in 1 MiB chunks."""
    h = hashlib.sha256()
    for rel in iter_workdir_files(root, exclude):
        p = root / rel
        st = p.lstat()
        h.update(os.fsencode(rel) + b"\0" + oct(st.st_mode).encode() + b"\0")
        if p.is_symlink():
            h.update(os.fsencode(os.readlink(p)))
            continue
        fh = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                fh.update(chunk)
        h.update(fh.digest())
    return h.hexdigest()


class LocalTransport(Transport):
    """This machine, without SSH: commands run as subprocesses, the engine is the local socket.

    Args:
        name: the host's name in the profile.
        docker_socket: path of the local engine's socket (``DOCKER_HOST=unix://...`` wins).
        address: the IP other nodes use to reach this host (default ``127.0.0.1``).
    """

    def __init__(
        self, name: str = "local", docker_socket: str | None = None, address: str | None = None
    ) -> None:
        self.name = name
        env_host = os.environ.get("DOCKER_HOST", "")
        if docker_socket is None and env_host.startswith("unix://"):
            docker_socket = env_host[len("unix://") :]
        self._socket = docker_socket or DEFAULT_DOCKER_SOCKET
        self._address = address or "127.0.0.1"

    async def connect(self) -> None:
        """Nothing to open for the local machine."""

    async def close(self) -> None:
        """Nothing to close for the local machine."""

    @property
    def connected(self) -> bool:
        """Always ``True``."""
        return True

    def address(self) -> str:
        """The configured address, ``127.0.0.1`` by default."""
        return self._address

    def describe(self) -> str:
        """``local``."""
        return "local"

    async def run(
        self, argv: list[str], *, input: bytes | None = None, timeout: float | None = 60.0
    ) -> CommandResult:
        """Run ``argv`` as a local subprocess (no shell)."""
        log.debug("[%s] run %s", self.name, shlex.join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except asyncio.CancelledError:
            proc.kill()  # never leave a child (or its pipes) behind a cancelled caller
            await asyncio.shield(proc.wait())
            raise
        except asyncio.TimeoutError as e:
            proc.kill()
            await proc.wait()
            raise TransportError(
                self.name, f"`{shlex.join(argv)}` timed out after {timeout} s"
            ) from e
        rc = proc.returncode if proc.returncode is not None else -1
        if rc < 0:
            rc = 128 - rc
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def forward_local(
        self, remote_port: int, *, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> Forward:
        """No tunnel: the host is this machine, so the returned forward's ``local_port`` is
        ``remote_port`` itself and its ``local_host`` is ``remote_host``; ``local_port`` is
        ignored. :meth:`Forward.check` connects to it directly; closing does nothing."""
        fwd: Forward

        async def connect() -> None:
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(remote_host, remote_port), 10
                )
            except (OSError, asyncio.TimeoutError) as e:
                raise fwd.unreachable(str(e) or type(e).__name__) from e
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

        fwd = Forward(
            self.name, remote_host, remote_port, remote_host, remote_port, connector=connect
        )
        return fwd

    async def docker_socket(self) -> str:
        """The local engine's socket path."""
        return self._socket

    def engine_socket_path(self) -> str:
        """The local engine's socket path."""
        return self._socket

    async def interactive(self, argv: list[str], *, tty: bool) -> int:
        """Run ``argv`` as a child sharing this process's terminal (no shell)."""
        log.debug("[%s] interactive %s", self.name, shlex.join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(*argv)
        except FileNotFoundError as e:
            raise TransportError(self.name, f"{argv[0]}: command not found") from e
        try:
            rc = await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await asyncio.shield(proc.wait())
            raise
        return 128 - rc if rc < 0 else rc

    async def home(self) -> str:
        """``$HOME`` of the current user."""
        return str(Path.home())

    async def open_process(self, argv: list[str]) -> RemoteProcess:
        """Start ``argv`` as a local subprocess with pipes."""
        log.debug("[%s] open %s", self.name, shlex.join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=1 << 22,
            )
        except FileNotFoundError as e:
            raise TransportError(self.name, f"{argv[0]}: command not found") from e
        return _LocalProcess(proc)

    async def _put_files(
        self, files: dict[str, bytes], remote_dir: str, executable: Collection[str] = ()
    ) -> None:
        d = Path(remote_dir)
        d.mkdir(parents=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
            if name in executable:
                (d / name).chmod(0o755)

    async def _put_tree(self, local_dir: Path, remote_dir: str) -> None:
        Path(remote_dir).parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copytree, local_dir, remote_dir, symlinks=True)

    async def _rename(self, src: str, dst: str) -> bool:
        try:
            os.rename(src, dst)
        except OSError:
            return False
        return True

    async def _exists(self, path: str) -> bool:
        return os.path.exists(path)
