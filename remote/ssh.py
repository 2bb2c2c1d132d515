"""SSH hosts through asyncssh: commands, SFTP copies and the Docker socket forwarded locally.

Host keys are always verified against known_hosts, matched as OpenSSH matches them (a port other
than 22 only by ``[host]:port`` entries: :class:`StrictKnownHosts`). A refused key is told apart
as OpenSSH does: unknown (:class:`HostKeyUnknown`, the fix spelled out), CHANGED
(:class:`HostKeyChanged`: both fingerprints, the stored line, verify and remove it) or REVOKED
(:class:`HostKeyRevoked`). With ``accept_new_host_keys: true`` (OpenSSH's ``accept-new``) a host
absent from known_hosts has its key appended on first connect (its fingerprint logged), while a
host listed with a different key is still refused.

``~/.ssh/config`` is read by asyncssh itself (Host/Match blocks, HostName, User, Port,
IdentityFile, ProxyJump, Include), so a profile can name a config alias and set nothing else.
"""

from __future__ import annotations

import asyncio
import getpass
import ipaddress
import logging
import os
import shlex
import signal
import socket
import stat
import sys
import termios
import time
import tty as tty_mod
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
from asyncssh.config import SSHClientConfig

from remote.errors import (
    AuthenticationFailed,
    ConnectionLost,
    DockerError,
    HostKeyChanged,
    HostKeyRefused,
    HostKeyRevoked,
    HostKeyUnknown,
    HostUnreachable,
    TransportError,
)
from remote.transport import (
    DEFAULT_DOCKER_SOCKET,
    FORWARD_LISTEN_HOST,
    CommandResult,
    Forward,
    RemoteProcess,
    Transport,
    local_temp_dir,
    unsyncable_names,
)

if TYPE_CHECKING:
    from remote.dockerlogs import ByteReader, ByteWriter

#: Ciphers offered, in order of preference: AES-GCM first. asyncssh's default puts
#: chacha20-poly1305 first, which it runs as two new cipher contexts and a Poly1305 per
#: packet (2.1 s of the console's 17 s in a 512-host `ps` here); AES-GCM is one call into
#: OpenSSL (AES-NI) per packet, and as strong (both AEAD; OpenSSH offers both by default).
#: The rest of asyncssh's default list follows, so a server without GCM still connects. A
#: ``Ciphers`` line in the user's ssh config for the host wins (:func:`user_sets_ciphers`).
CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)

#: :func:`user_sets_ciphers` for ``~/.ssh/config``, by (its path, host, port, user)
_user_ciphers: dict[tuple[str, str, int | None, str | None], bool] = {}

#: Engine relays (log follows, :meth:`SSHTransport.open_engine_stream`) open at once on one
#: connection; more streams take a ``direct-streamlocal`` channel. Each relay is a session
#: channel, which sshd's ``MaxSessions`` (default 10) counts with the telemetry agent, ``run``
#: commands and SFTP; direct channels are not counted.
RELAY_SESSIONS = 6
#: Seconds the relay may take to start (a shell and a python) before a stream goes direct.
RELAY_START_S = 20.0

#: Key exchanges in flight at once through one jump host (per event loop). A fleet behind a
#: bastion opens one connection to it per host; OpenSSH's sshd drops unauthenticated
#: connections beyond ``MaxStartups`` (default ``10:30:100``: from 10 in flight, 30 % of new
#: ones, rising to all at 100). Below its start, so the bastion never drops one of ours.
JUMP_HANDSHAKES = 8

_jump_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class _SharedJump:
    """One connection to a jump host that the hosts behind it tunnel through (each host's
    connection is a ``direct-tcpip`` channel on it), and how many transports use it."""

    conn: asyncssh.SSHClientConnection
    users: int = 0


_JumpKey = tuple[str, str, str | None]

#: Per event loop: (jump, known_hosts, identity file) -> the shared jump connection (a fleet
#: behind one bastion costs the bastion one login, not one per host), and its lock.
_jumps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_JumpKey, _SharedJump]] = (
    weakref.WeakKeyDictionary()
)
_jump_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_JumpKey, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def jump_slot(jump: str) -> asyncio.Semaphore:
    """The semaphore bounding handshakes through jump host ``jump`` on the running loop
    (:data:`JUMP_HANDSHAKES`)."""
    slots = _jump_slots.setdefault(asyncio.get_running_loop(), {})
    slot = slots.get(jump)
    if slot is None:
        slot = slots[jump] = asyncio.Semaphore(JUMP_HANDSHAKES)
    return slot


def user_sets_ciphers(
    host: str, port: int | None = None, user: str | None = None, config: Path | None = None
) -> bool:
    """Whether the user's OpenSSH client config sets ``Ciphers`` for this host: then
    asyncssh applies that list and :data:`CIPHERS` is not offered.

    The config is read by asyncssh's own reader (:class:`asyncssh.config.SSHClientConfig`),
    as ``asyncssh.connect`` reads it for the same host, port and user: ``Host`` and
    ``Match`` blocks (``Match final`` included; not ``CanonicalizeHostname``), ``Include``,
    first value wins. ``config`` is the file (default ``~/.ssh/config``, as asyncssh's); the
    answer for the default file is kept per host, port and user for the process. A file
    asyncssh cannot parse says ``False`` here: the connection then fails on it with
    asyncssh's own message.
    """
    path = config if config is not None else Path.home() / ".ssh" / "config"
    key = (str(path), host, port, user)
    if config is None and key in _user_ciphers:
        return _user_ciphers[key]
    found = False
    if os.access(path, os.R_OK):
        try:
            local_user = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (asyncssh refuses it too)
            local_user = ""
        args = (local_user, () if user is None else user, host, () if port is None else port)
        try:
            cfg = SSHClientConfig.load(None, [path], False, False, False, *args)
            if cfg.has_match_final():  # asyncssh's second pass, as in its _connect
                cfg = SSHClientConfig.load(cfg, [path], True, False, True, *args)
            found = cfg.get("Ciphers") is not None
        except (OSError, ValueError):  # ConfigParseError is a ValueError
            found = False
    if config is None:
        _user_ciphers[key] = found
    return found


log = logging.getLogger("gpuconsole.remote.ssh")

#: SSH keepalive (both hops): after this many seconds without data from the host a
#: keepalive request is sent...
KEEPALIVE_INTERVAL_S = 5
#: ...and after this many unanswered ones the connection is given up: a host that stopped
#: answering (a black-holed link, a host that froze) is noticed
#: ``KEEPALIVE_INTERVAL_S * (KEEPALIVE_COUNT_MAX + 1)`` = 20 s after its last data, so log
#: follows and telemetry reconnect; a host that answers at all within 15 s is never dropped.
KEEPALIVE_COUNT_MAX = 3
KEEPALIVE_DEAD_S = KEEPALIVE_INTERVAL_S * (KEEPALIVE_COUNT_MAX + 1)


class _DropWatch(asyncssh.SSHClient):
    """asyncssh's client callbacks of one connection: tells its transport (``None`` for a
    jump hop) why the connection closed (``connection_lost``), the rest as asyncssh's
    defaults."""

    def __init__(self, transport: SSHTransport | None) -> None:
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._transport is not None:
            self._transport._lost = (time.monotonic(), exc)


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to reach one SSH host; ``None`` fields defer to ``~/.ssh/config``.

    Attributes:
        hostname: a host name, IP or ``~/.ssh/config`` alias.
        port: TCP port.
        user: remote user name.
        identity_file: private key path (``~`` expanded).
        jump: a jump host (``[user@]host[:port]``), like ``ssh -J``.
        known_hosts: known_hosts file; ``None`` means ``~/.ssh/known_hosts``.
        accept_new_host_keys: add the key of a host absent from known_hosts (never replaces one).
        address: the IP other nodes use to reach this host; default: the connected peer's IP.
        docker_socket: the engine's socket path on the host.
        connect_timeout: seconds to wait for the TCP connect and SSH handshake.
        relay_python: the host's python (3.8+, a name on its PATH or a path) that runs the
            engine relay of log follows (:mod:`remote.relay`); without a usable one a follow
            reads the socket through a ``direct-streamlocal`` channel.
    """

    hostname: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    jump: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    address: str | None = None
    docker_socket: str = DEFAULT_DOCKER_SOCKET
    connect_timeout: float = 10.0
    relay_python: str = "python3"


class SSHTransport(Transport):
    """One SSH host (see :class:`SSHTarget`), connected lazily and reconnectable.

    Logs carry the host name (``gpuconsole.remote.ssh``, ``[a] ...``).
    """

    def __init__(self, name: str, target: SSHTarget) -> None:
        self.name = name
        self.target = target
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: asyncssh.SSHClientConnection | None = None
        self._jump_shared: _SharedJump | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_conn: asyncssh.SSHClientConnection | None = None
        self._sftp_lock = asyncio.Lock()
        self._listener: asyncssh.SSHListener | None = None
        self._forwards: set[Forward] = set()
        self._sock_dir: str | None = None
        self._peer_ip: str | None = None
        self._home: str | None = None
        self._lock = asyncio.Lock()
        self._connecting: asyncio.Task[Any] | None = None  # the task opening the connection
        #: when and why the last connection (or its jump hop) dropped; ``None`` once a
        #: connection is open again
        self._lost: tuple[float, Exception] | None = None
        #: the connection on which the engine relay could not start (no usable python):
        #: its follows read the socket directly, without trying the relay again
        self._relay_off: asyncssh.SSHClientConnection | None = None
        #: the relay's path once this transport uploaded it (else :func:`relay_script`)
        self._relay_path: str | None = None
        self._relay_upload = asyncio.Lock()
        #: the relays started on :attr:`_relays_conn` (closed ones are pruned as counted)
        self._relays: list[asyncssh.SSHClientProcess[bytes]] = []
        self._relays_conn: asyncssh.SSHClientConnection | None = None
        #: relays being started on :attr:`_relays_conn` (their slots are taken)
        self._relays_starting = 0

    # -- connection -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the SSH connection is open (a dropped one reads ``False`` at once)."""
        conn = self._conn
        return conn is not None and not conn.is_closed()

    def describe(self) -> str:
        """``ssh [user@]host[:port]`` as configured."""
        t = self.target
        user = f"{t.user}@" if t.user else ""
        port = f":{t.port}" if t.port else ""
        return f"ssh {user}{t.hostname}{port}"

    def ssh_argv(self) -> list[str]:
        """``ssh`` with the profile's port, key, jump host and known_hosts (when set), then
        ``[user@]hostname``: runnable as shown (see :meth:`Transport.ssh_argv`)."""
        t = self.target
        argv = ["ssh"]
        if t.port and t.port != 22:
            argv += ["-p", str(t.port)]
        if t.identity_file:
            argv += ["-i", t.identity_file]
        if t.jump:
            argv += ["-J", t.jump]
        if t.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={t.known_hosts}"]
        return [*argv, f"{t.user}@{t.hostname}" if t.user else t.hostname]

    def _known_hosts_path(self) -> str:
        return os.path.expanduser(self.target.known_hosts or "~/.ssh/known_hosts")

    def _options(
        self,
        known_hosts: object,
        *,
        host: str,
        port: int | None,
        user: str | None,
        seen: _HostKeySeen | None = None,
    ) -> dict[str, object]:
        """Options for one hop. Keepalives are always on (:data:`KEEPALIVE_INTERVAL_S` x
        :data:`KEEPALIVE_COUNT_MAX`): a dead connection must be noticed quickly so log
        follows and telemetry reconnect; the rest defers to the config.
        """
        t = self.target
        opts: dict[str, object] = {
            "known_hosts": known_hosts,
            "connect_timeout": t.connect_timeout,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        }
        if not user_sets_ciphers(host, port, user):
            opts["encryption_algs"] = list(CIPHERS)
        if port is not None:
            opts["port"] = port
        if user is not None:
            opts["username"] = user
        if t.identity_file is not None:
            opts["client_keys"] = [os.path.expanduser(t.identity_file)]
        watch: _DropWatch = seen if seen is not None else _DropWatch(self)
        opts["client_factory"] = lambda: watch
        return opts

    async def _open_jump(self, known_hosts: object) -> asyncssh.SSHClientConnection:
        """The jump hop, shared by every host of this loop behind the same jump host with the
        same known_hosts and key (:class:`_SharedJump`); opened when none is open."""
        assert self.target.jump is not None
        loop = asyncio.get_running_loop()
        key = (self.target.jump, self._known_hosts_path(), self.target.identity_file)
        jumps = _jumps.setdefault(loop, {})
        async with _jump_locks.setdefault(loop, {}).setdefault(key, asyncio.Lock()):
            shared = jumps.get(key)
            if shared is None or shared.conn.is_closed():
                shared = jumps[key] = _SharedJump(await self._connect_jump(known_hosts))
            shared.users += 1
            self._jump_shared = shared
            return shared.conn

    def _release_jump(self) -> None:
        """This transport no longer tunnels through its jump connection: the last user
        closes it."""
        shared, self._jump_shared = self._jump_shared, None
        if shared is None:
            return
        shared.users -= 1
        if shared.users <= 0:
            shared.conn.close()
            for jumps in list(_jumps.values()):
                for key, value in list(jumps.items()):
                    if value is shared:
                        del jumps[key]

    async def _connect_jump(self, known_hosts: object) -> asyncssh.SSHClientConnection:
        """A new connection to the jump host, with the same known_hosts, key and timeouts as
        the target (so the key is offered on both hops; asyncssh's own
        ``tunnel="user@host"`` would not)."""
        assert self.target.jump is not None
        user, host, port = parse_jump(self.target.jump)
        seen = _HostKeySeen(known_hosts, accept_new=False, transport=None)
        try:
            # held until authenticated: sshd counts only unauthenticated connections
            async with jump_slot(self.target.jump):
                return await asyncssh.connect(
                    host, **self._options(known_hosts, host=host, port=port, user=user, seen=seen)
                )
        except asyncssh.HostKeyNotVerifiable as e:
            raise self._host_key_error(e, seen, host, port or 22, jump=True) from e
        except asyncssh.PermissionDenied as e:
            raise AuthenticationFailed(
                self.name,
                f"authentication refused by the jump host "
                f"{user or 'the configured user'}@{host}:{port or 22}",
                "check `jump` and `identity_file` in the profile, or your ssh-agent",
            ) from e
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
            # named here: the target's message below would send the user to the wrong host
            reason = _connect_failure(e, "the jump host")
            raise HostUnreachable(
                self.name,
                f"cannot connect to the jump host {host}:{port or 22}: {reason}",
                "check that the jump host is up and `jump` in the profile",
            ) from e

    async def connect(self) -> None:
        """Open the connection if it is not open (reconnects after a drop).

        Raises:
            HostUnreachable: refused, timed out or name not resolved.
            HostKeyRefused: the host key is unknown (HostKeyUnknown), differs from the one
                known_hosts holds (HostKeyChanged) or is revoked there (HostKeyRevoked).
            AuthenticationFailed: no offered key was accepted.
        """
        async with self._lock:
            if self.connected:
                return
            await self._drop()
            self._connecting = asyncio.current_task()
            try:
                self._conn = await self._open()
            finally:
                self._connecting = None
            self._lost = None
            peer = self._conn.get_extra_info("peername")
            self._peer_ip = str(peer[0]) if peer else None
            log.debug("[%s] connected (%s)", self.name, self.describe())

    async def _open(self) -> asyncssh.SSHClientConnection:
        t = self.target
        kh_path = self._known_hosts_path()
        try:
            kh = known_hosts_of(kh_path)
        except OSError as e:
            raise TransportError(
                self.name,
                f"cannot read the known_hosts file {kh_path}: {e.strerror or e}",
                "make the file readable by this user, or name another in the profile's "
                "`known_hosts`",
            ) from e
        except ValueError as e:
            raise TransportError(
                self.name,
                f"{kh_path} is not a known_hosts file: {e}",
                "fix or remove the bad lines (`ssh-keygen -R HOST -f FILE` rewrites an entry), "
                "or name another file in the profile's `known_hosts`",
            ) from e
        seen = _HostKeySeen(kh, accept_new=t.accept_new_host_keys, transport=self)
        try:
            opts = self._options(kh, host=t.hostname, port=t.port, user=t.user, seen=seen)
            if t.jump is not None:
                self._jump = await self._open_jump(kh)
                opts["tunnel"] = self._jump
            conn = await asyncssh.connect(t.hostname, **opts)
            if seen.accepted is not None:
                self._remember_host_key(seen.accepted, kh_path)
            return conn
        except asyncssh.HostKeyNotVerifiable as e:
            raise self._host_key_error(e, seen, t.hostname, t.port or 22) from e
        except asyncssh.PermissionDenied as e:
            raise AuthenticationFailed(
                self.name,
                f"authentication refused for {t.user or 'the configured user'}@{t.hostname}",
                "check `user` and `identity_file` in the profile, or your ssh-agent",
            ) from e
        except FileNotFoundError as e:
            # asyncssh refuses to start when a key it was told to load is missing
            raise AuthenticationFailed(
                self.name,
                f"identity file {e.filename or '?'} does not exist",
                "fix `identity_file` in the profile or IdentityFile in ~/.ssh/config",
            ) from e
        except ValueError as e:
            # an unreadable known_hosts or key file asyncssh was pointed at (binary, not a key)
            raise TransportError(
                self.name,
                f"cannot read the known_hosts ({kh_path}) or key files for {t.hostname}: {e}",
                "fix `known_hosts` and `identity_file` in the profile, or ~/.ssh/config",
            ) from e
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
            reason = _connect_failure(e, "the host")
            raise HostUnreachable(
                self.name,
                f"cannot connect to {t.hostname}:{t.port or 22}: {reason}",
                "check that the host is up, `hostname`/`port` in the profile, and your network",
            ) from e

    def _host_key_error(
        self,
        e: asyncssh.HostKeyNotVerifiable,
        seen: _HostKeySeen,
        host: str,
        port: int,
        *,
        jump: bool = False,
    ) -> HostKeyRefused:
        """The error for a host key asyncssh refused, told apart as OpenSSH does: REVOKED
        (the offered key is ``@revoked``), CHANGED (known_hosts holds another key for the
        host: the offered and the stored fingerprints, the stored line, and the fix is to
        verify the new key out of band and remove that line, never to trust it unchecked),
        else unknown (the offered fingerprint, and keyscan or ``accept_new_host_keys``)."""
        kh = self._known_hosts_path()
        who = f"the jump host {host}:{port}" if jump else f"{host}:{port}"
        entries = known_host_entries(kh, seen.host or host, seen.addr, port)
        offered = seen.key
        if "revoked" in e.reason.lower():
            revoked = [
                en
                for en in entries
                if en.marker == "revoked" and (offered is None or en.key == offered)
            ]
            where = "; ".join(f"{en.where} ({fingerprint(en.key)})" for en in revoked) or kh
            return HostKeyRevoked(
                self.name,
                f"host key of {who} is REVOKED: the key it offered is marked @revoked in {where}",
                "do not connect: the key was withdrawn (stolen or retired); ask the host's "
                "owner for its current key and check it out of band before trusting it",
            )
        stored = [en for en in entries if en.marker is None]
        if offered is not None and stored and all(en.key != offered for en in stored):
            alias = host if port == 22 else f"[{host}]:{port}"
            remove = shlex.join(["ssh-keygen", "-R", alias, "-f", kh])
            known = "; ".join(f"{fingerprint(en.key)} at {en.where}" for en in stored)
            return HostKeyChanged(
                self.name,
                f"host key of {who} has CHANGED (someone may be intercepting the connection: "
                f"a man-in-the-middle attack; or the host was reinstalled): it offered "
                f"{fingerprint(offered)}, known_hosts has {known}",
                f"verify the new key {fingerprint(offered)} with the host's owner out of "
                f"band (`ssh-keygen -lf` of its host key, on its console); only then remove "
                f"the old line with `{remove}` and add the verified key",
            )
        scan = shlex.join(["ssh-keyscan", "-p", str(port), host])
        if offered is not None:
            what = f"it offered {fingerprint(offered)}, and known_hosts {kh} has no key for it"
            check = f"check that {fingerprint(offered)} is the host's key (ask its owner)"
        else:
            what, check = f"{e.reason}; known_hosts: {kh}", "check the key's fingerprint"
        hint = f"{check}, then `{scan} >> {kh}`"
        if not jump:
            hint += ", or set `accept_new_host_keys: true` in the profile (like OpenSSH accept-new)"
        return HostKeyUnknown(self.name, f"host key of {who} is not trusted: {what}", hint)

    def _remember_host_key(self, key: asyncssh.SSHKey, kh_path: str) -> None:
        """Append the accepted key of a new host to known_hosts (one line per host and key,
        also when hosts of one profile share an address), and log its fingerprint."""
        port = self.target.port or 22
        host = self.target.hostname if port == 22 else f"[{self.target.hostname}]:{port}"
        line = f"{host} {key.export_public_key().decode().strip()}\n"
        Path(kh_path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(kh_path, "a+", encoding="utf-8") as f:
            f.seek(0)
            text = f.read()
            # hosts of one profile that share an address all miss the key at once: one line
            if line.rstrip("\n") in (ln.rstrip("\r") for ln in text.splitlines()):
                return
            f.write(line if not text or text.endswith("\n") else "\n" + line)
        log.warning(
            "[%s] accepted the new host key of %s (%s) and added it to %s (accept_new_host_keys)",
            self.name,
            host,
            fingerprint(key),
            kh_path,
        )

    async def _drop(self) -> None:
        for fwd in list(self._forwards):
            await fwd.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._sock_dir is not None:
            sock = os.path.join(self._sock_dir, "docker.sock")
            if os.path.exists(sock):
                os.unlink(sock)
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
            self._sftp_conn = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._jump is not None:
            self._release_jump()
            self._jump = None

    def drop_reason(self) -> str | None:
        """Why the connection dropped, while it is down: ``the host stopped answering, last
        data N s ago`` when the keepalives went unanswered, else asyncssh's reason."""
        lost = self._lost
        if lost is None or self.connected:
            return None
        at, exc = lost
        if "not responding to keepalive" in str(exc):
            ago = KEEPALIVE_DEAD_S + (time.monotonic() - at)
            return f"the host stopped answering, last data {ago:.0f} s ago"
        return f"the SSH connection dropped: {exc}"

    async def close(self) -> None:
        """Close the connection and the forwarded socket. A connect in flight (another task's)
        is cancelled first: closing never waits out a silent host's connect timeout."""
        connecting = self._connecting
        if connecting is not None and connecting is not asyncio.current_task():
            connecting.cancel()
        async with self._lock:
            await self._drop()
            self._lost = None  # closed on purpose: no drop to explain
            if self._sock_dir is not None:
                try:
                    os.rmdir(self._sock_dir)
                except OSError:
                    pass
                self._sock_dir = None

    def address(self) -> str:
        """``address`` from the profile, else the IP this connection reached.

        Raises:
            TransportError: reached through a jump host by name, with no ``address`` set.
        """
        if self.target.address:
            return self.target.address
        if self._peer_ip:
            return self._peer_ip
        try:  # through a jump host there is no peer address; an IP host name will do
            return str(ipaddress.ip_address(self.target.hostname))
        except ValueError:
            pass
        raise TransportError(
            self.name,
            f"no address known for {self.target.hostname} (reached through a jump host)",
            "set `address:` for this host in the profile: the IP the other nodes reach it on",
        )

    async def _connection(self) -> asyncssh.SSHClientConnection:
        await self.connect()
        assert self._conn is not None
        return self._conn

    # -- operations -------------------------------------------------------------------------

    async def run(
        self, argv: list[str], *, input: bytes | None = None, timeout: float | None = 60.0
    ) -> CommandResult:
        """Run ``argv`` on the host (joined with :func:`shlex.join` for the remote shell).
        ``input`` is its standard input, then end of input (also when empty)."""
        conn = await self._connection()
        cmd = shlex.join(argv)
        log.debug("[%s] run %s", self.name, cmd)
        # asyncssh sends end-of-input only after non-empty input: empty input is no input
        stdin: dict[str, Any] = (
            {"input": input} if input else {"stdin": asyncssh.DEVNULL} if input is not None else {}
        )
        try:
            res = await conn.run(cmd, timeout=timeout, encoding=None, **stdin)
        except asyncssh.TimeoutError as e:
            raise TransportError(self.name, f"`{cmd}` timed out after {timeout} s") from e
        except (
            asyncssh.ConnectionLost,
            asyncssh.DisconnectError,
            asyncssh.ChannelOpenError,  # the connection closed as the session was opened
            OSError,
        ) as e:
            raise ConnectionLost(self.name, f"connection lost while running `{cmd}`") from e
        rc = res.exit_status
        if rc is None:
            rc = 128 + _signal_number(res.exit_signal[0]) if res.exit_signal else -1
        out = res.stdout if isinstance(res.stdout, bytes) else (res.stdout or "").encode()
        err = res.stderr if isinstance(res.stderr, bytes) else (res.stderr or "").encode()
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        """One SFTP session per connection, opened on first use and shared."""
        conn = await self._connection()
        async with self._sftp_lock:
            if self._sftp is None or self._sftp_conn is not conn:
                try:
                    self._sftp = await conn.start_sftp_client()
                except (asyncssh.Error, OSError) as e:  # ChannelOpenError: it closed meanwhile
                    raise ConnectionLost(self.name, f"cannot start SFTP: {e}") from e
                self._sftp_conn = conn
            return self._sftp

    async def home(self) -> str:
        """The remote user's home directory (SFTP's initial directory)."""
        if self._home is None:
            sftp = await self._sftp_client()
            self._home = await sftp.realpath(".")
        return self._home

    async def docker_socket(self) -> str:
        """A local unix socket forwarded to the host's engine socket (``forward_local_path``).

        The forward lives as long as the connection; after a reconnect a new one is opened at
        the same local path.
        """
        conn = await self._connection()
        async with self._lock:
            if self._sock_dir is None:
                self._sock_dir = local_temp_dir(f"sock-{self.name}")
            path = os.path.join(self._sock_dir, "docker.sock")
            if self._listener is None:
                if os.path.exists(path):
                    os.unlink(path)
                try:
                    self._listener = await conn.forward_local_path(path, self.target.docker_socket)
                except (asyncssh.Error, OSError) as e:
                    raise DockerError(
                        self.name,
                        f"cannot forward the Docker socket {self.target.docker_socket}: {e}",
                        "check that sshd allows AllowStreamLocalForwarding and that docker runs",
                    ) from e
            return path

    async def open_engine_stream(self) -> tuple[ByteReader, ByteWriter]:
        """A new stream to the host's engine socket, for one HTTP exchange (a log read or
        follow).

        Through the engine relay (:mod:`remote.relay`): an exec channel running
        ``remote/agent/relay.py`` with :attr:`SSHTarget.relay_python`, which copies the
        request to the socket and the answer back in writes of up to 64 KiB or 50 ms, so a
        followed log costs a few SSH packets a second instead of one per line. The host's
        stdout is read straight from the channel; closing the writer closes the channel and
        the relay exits with it.

        Where the relay cannot run, a ``direct-streamlocal`` channel to the socket (asyncssh
        ``open_unix_connection``) instead: on a connection where the host has no usable
        python (remembered for the connection, logged once at info), while
        :data:`RELAY_SESSIONS` relays are open on it, or when sshd refuses the session.

        Raises:
            ConnectionResetError: the connection is gone (an ``OSError``).
            DockerError: the socket cannot be reached (nothing listens there, no permission,
                or sshd refused the direct channel).
        """
        conn = await self._connection()
        if self._relays_conn is not conn:
            self._relays, self._relays_starting, self._relays_conn = [], 0, conn
        self._relays = [p for p in self._relays if not p.is_closing()]
        if (
            self._relay_off is not conn
            and len(self._relays) + self._relays_starting < RELAY_SESSIONS
        ):
            self._relays_starting += 1  # a slot, taken before the first wait
            try:
                opened = await self._open_relay(conn)
            finally:
                if self._relays_conn is conn:
                    self._relays_starting -= 1
            if opened is not None:
                return opened
        return await self._open_unix_channel(conn)

    async def _open_relay(
        self, conn: asyncssh.SSHClientConnection
    ) -> tuple[ByteReader, ByteWriter] | None:
        """The engine relay's channel (see :meth:`open_engine_stream`), once the relay said
        it is connected; ``None`` where the relay cannot run (the caller opens the direct
        channel).

        Raises:
            ConnectionResetError: the connection is gone.
            DockerError: the relay could not connect to the socket.
        """
        from remote import relay

        sock = self.target.docker_socket
        for attempt in range(2):
            script = self._relay_path or relay.relay_script()
            cmd = shlex.join(relay.relay_argv(self.target.relay_python, sock, script))
            try:
                proc = await conn.create_process(cmd, encoding=None)
            except asyncssh.ChannelOpenError as e:
                # sshd refused a session (its MaxSessions): this stream goes direct
                log.debug("[%s] no session for the engine relay: %s", self.name, e.reason)
                return None
            except (asyncssh.Error, OSError) as e:
                raise ConnectionResetError(f"[{self.name}] {e}") from e
            try:
                first = await asyncio.wait_for(proc.stderr.readline(), RELAY_START_S)
            except asyncio.TimeoutError:
                proc.close()
                log.info(
                    "[%s] the engine relay did not start within %g s; this log is read without it",
                    self.name,
                    RELAY_START_S,
                )
                return None
            except (asyncssh.Error, OSError) as e:
                proc.close()
                raise ConnectionResetError(f"[{self.name}] {e}") from e
            except BaseException:
                proc.close()  # cancelled: the channel closes, the relay exits with it
                raise
            if first == relay.READY:
                self._relays.append(proc)
                return _ChannelReader(proc.stdout), proc.stdin
            # it ended before connecting: the status says why
            try:
                await asyncio.wait_for(proc.wait_closed(), RELAY_START_S)
            except (asyncio.TimeoutError, asyncssh.Error, OSError):
                proc.close()
            except BaseException:
                proc.close()
                raise
            status = proc.exit_status
            said = first.decode(errors="replace").strip()
            if status == relay.LAUNCH_MISSING and attempt == 0:
                if not await self._upload_relay(script):
                    return None
                continue
            if status == relay.EXIT_NO_SOCKET:
                raise DockerError(
                    self.name,
                    f"cannot connect to the Docker socket {sock}: "
                    f"{said.rpartition(': ')[2] or 'no reason given'}",
                    "check that docker runs on the host and that the SSH user may use its "
                    "socket (the docker group)",
                )
            if conn.is_closed():
                raise ConnectionResetError(f"[{self.name}] connection lost")
            self._relay_off = conn
            why = said or (
                f"exit status {status}"
                if status is not None
                else f"signal {proc.exit_signal[0] if proc.exit_signal else '?'}"
            )
            log.info(
                "[%s] the engine relay cannot run with %s (%s); log follows read the "
                "Docker socket directly on this connection (one SSH packet per line)",
                self.name,
                self.target.relay_python,
                why,
            )
            return None
        return None

    async def _upload_relay(self, tried: str) -> bool:
        """Upload the relay's bundle (once per transport, whoever asks first); ``False`` when
        the upload failed (logged: that stream goes direct)."""
        from remote import relay

        async with self._relay_upload:
            if self._relay_path is not None and self._relay_path != tried:
                return True  # another stream uploaded it meanwhile
            try:
                folder = await self.put_bundle(relay.relay_files(), relay.RELAY_BASE)
            except (TransportError, asyncssh.Error, OSError) as e:
                log.info("[%s] cannot upload the engine relay: %s", self.name, e)
                return False
            self._relay_path = f"{folder}/relay.py"
            return True

    async def _open_unix_channel(
        self, conn: asyncssh.SSHClientConnection
    ) -> tuple[ByteReader, ByteWriter]:
        """A ``direct-streamlocal`` channel to the host's engine socket (asyncssh
        ``open_unix_connection``), read straight from the channel: one SSH packet per write
        of the engine.

        Raises:
            ConnectionResetError: the connection is gone.
            DockerError: sshd refused the channel (streamlocal forwarding not allowed, or
                nothing listens on the socket).
        """
        try:
            reader, writer = await conn.open_unix_connection(self.target.docker_socket)
        except asyncssh.ChannelOpenError as e:
            raise DockerError(
                self.name,
                f"cannot open a channel to the Docker socket {self.target.docker_socket}: "
                f"{e.reason}",
                "check that sshd allows AllowStreamLocalForwarding and that docker runs",
            ) from e
        except (asyncssh.Error, OSError) as e:
            raise ConnectionResetError(f"[{self.name}] {e}") from e
        return _ChannelReader(reader), writer

    async def forward_local(
        self, remote_port: int, *, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> Forward:
        """Listen on ``127.0.0.1:local_port`` here (0: a free port; never ``0.0.0.0``) and
        carry each connection to ``remote_host:remote_port`` of the host through this SSH
        connection (asyncssh ``forward_local_port``: one ``direct-tcpip`` channel per
        connection, so sshd's ``AllowTcpForwarding`` must allow it).

        Until one connection has reached the destination, each local connection first opens
        a probe channel to it: when nothing listens there (sshd answers the channel open with
        ``Connection refused``), the local connection is closed, the failure is logged (info) and
        kept in :attr:`Forward.error` as a :class:`TransportError` naming host and port (no
        traceback). After a first success connections are passed straight through. The
        forward is closed by :meth:`Forward.close`, by :meth:`close` and when the connection
        drops.

        Raises:
            HostUnreachable, HostKeyRefused, AuthenticationFailed: connecting failed.
            TransportError: ``127.0.0.1:local_port`` cannot be bound here.
        """
        conn = await self._connection()
        reached = False
        fwd: Forward | None = None

        async def connect() -> None:
            assert fwd is not None
            try:
                _, writer = await conn.open_connection(remote_host, remote_port)
            except asyncssh.ChannelOpenError as e:
                raise fwd.unreachable(e.reason) from e
            except (asyncssh.Error, OSError) as e:
                raise ConnectionLost(
                    self.name, f"connection lost while reaching {remote_host}:{remote_port}"
                ) from e
            writer.close()

        async def accept(orig_host: str, orig_port: int) -> bool:
            nonlocal reached
            if reached:
                return True
            try:
                await connect()
            except TransportError as e:
                # kept in fwd.error for the caller; a readiness poll expects refusals
                log.info("[%s] %s", self.name, e.detail)
                return False
            reached = True
            return True

        try:
            listener = await conn.forward_local_port(
                FORWARD_LISTEN_HOST, local_port, remote_host, remote_port, accept_handler=accept
            )
        except (asyncssh.Error, OSError) as e:
            raise TransportError(
                self.name,
                f"cannot listen on {FORWARD_LISTEN_HOST}:{local_port} to forward "
                f"{remote_host}:{remote_port}: {_describe_os_error(e)}",
                "pick another local port, or 0 for any free one",
            ) from e

        async def close() -> None:
            assert fwd is not None
            self._forwards.discard(fwd)
            listener.close()
            try:
                await asyncio.wait_for(listener.wait_closed(), 5)
            except asyncio.TimeoutError:
                log.debug("[%s] forward listener %s slow to close", self.name, fwd)

        fwd = Forward(
            self.name,
            FORWARD_LISTEN_HOST,
            listener.get_port(),
            remote_host,
            remote_port,
            closer=close,
            connector=connect,
            alive=lambda: not conn.is_closed(),
        )
        self._forwards.add(fwd)
        log.debug("[%s] forwarding %r", self.name, fwd)
        return fwd

    def engine_socket_path(self) -> str:
        """The engine's socket path on the host."""
        return self.target.docker_socket

    async def interactive(self, argv: list[str], *, tty: bool) -> int:
        """Run ``argv`` on the host attached to the local terminal (see
        :meth:`Transport.interactive`); with ``tty`` through a PTY of the SSH session."""
        conn = await self._connection()
        cmd = shlex.join(argv)
        log.debug("[%s] interactive %s (tty=%s)", self.name, cmd, tty)
        kwargs: dict[str, Any] = {"encoding": None}
        if tty:
            size = os.get_terminal_size(sys.stdout.fileno())
            kwargs.update(
                term_type=os.environ.get("TERM") or "xterm-256color",
                term_size=(size.columns, size.lines),
            )
        try:
            proc = await conn.create_process(cmd, **kwargs)
        except (asyncssh.Error, OSError) as e:
            raise TransportError(self.name, f"cannot start `{cmd}`: {e}") from e
        try:
            return await bridge_terminal(proc, tty=tty)
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError) as e:
            raise ConnectionLost(self.name, f"connection lost during `{cmd}`") from e

    async def open_process(self, argv: list[str]) -> RemoteProcess:
        """Start ``argv`` on the host (joined with :func:`shlex.join`) with stdin open."""
        conn = await self._connection()
        cmd = shlex.join(argv)
        log.debug("[%s] open %s", self.name, cmd)
        try:
            proc = await conn.create_process(cmd, encoding="utf-8", errors="replace")
        except (asyncssh.Error, OSError) as e:
            raise ConnectionLost(self.name, f"cannot start `{cmd}`: {e}") from e
        return _SSHProcess(proc)

    async def _put_files(
        self, files: dict[str, bytes], remote_dir: str, executable: Collection[str] = ()
    ) -> None:
        sftp = await self._sftp_client()
        await sftp.makedirs(remote_dir)
        for name, data in files.items():
            async with sftp.open(f"{remote_dir}/{name}", "wb") as f:
                await f.write(data)
            if name in executable:
                await sftp.chmod(f"{remote_dir}/{name}", 0o755)

    async def _put_tree(self, local_dir: Path, remote_dir: str) -> None:
        sftp = await self._sftp_client()
        await sftp.makedirs(os.path.dirname(remote_dir), exist_ok=True)
        try:
            # no `preserve`: it would setstat through symlinks (a dangling one fails); the
            # executable bits that matter are set afterwards
            await sftp.put(str(local_dir), remote_dir, recurse=True)
            for dirpath, _dirs, files in os.walk(local_dir):
                for fn in files:
                    p = Path(dirpath) / fn
                    mode = p.lstat().st_mode
                    if stat.S_ISREG(mode) and mode & 0o111:
                        rel = p.relative_to(local_dir).as_posix()
                        await sftp.chmod(f"{remote_dir}/{rel}", mode & 0o777)
        except (asyncssh.SFTPError, OSError) as e:
            bad = unsyncable_names(local_dir) if isinstance(e, asyncssh.SFTPBadMessage) else []
            if bad:
                raise TransportError(
                    self.name,
                    f"copying the workdir to {remote_dir} failed: "
                    f"{os.fsencode(bad[0][0]).decode('utf-8', 'backslashreplace')!r}: {bad[0][1]}",
                    "rename it, or leave it out with the spec's `exclude`",
                ) from e
            if isinstance(e, (asyncssh.SFTPNoSpaceOnFilesystem, asyncssh.SFTPQuotaExceeded)):
                hint = "free space on the host (its home's filesystem is full or over quota)"
            elif isinstance(e, asyncssh.SFTPPermissionDenied):
                hint = f"let the host's SSH user write {os.path.dirname(remote_dir)}"
            else:
                hint = "check free space and permissions on the host"
            raise TransportError(
                self.name, f"copying the workdir to {remote_dir} failed: {e}", hint
            ) from e

    async def _rename(self, src: str, dst: str) -> bool:
        sftp = await self._sftp_client()
        try:
            await sftp.rename(src, dst)
        except asyncssh.SFTPError:
            return False
        return True

    async def _exists(self, path: str) -> bool:
        sftp = await self._sftp_client()
        return bool(await sftp.exists(path))


class _SSHProcess(RemoteProcess):
    def __init__(self, proc: asyncssh.SSHClientProcess[str]) -> None:
        self.proc = proc

    async def readline(self) -> str | None:
        try:
            line = await self.proc.stdout.readline()
        except (asyncssh.Error, OSError):
            return None
        if not line:
            return None
        return line.rstrip("\n")

    async def wait(self) -> int:
        try:
            res = await self.proc.wait()
        except (asyncssh.Error, OSError):
            return -1
        if res.exit_status is not None:
            return res.exit_status
        return 128 + _signal_number(res.exit_signal[0]) if res.exit_signal else -1

    async def stderr(self) -> str:
        try:
            return await self.proc.stderr.read()
        except (asyncssh.Error, OSError):
            return ""

    async def close(self) -> None:
        try:
            self.proc.stdin.write_eof()
        except (asyncssh.Error, OSError, BrokenPipeError):
            pass
        try:
            await asyncio.wait_for(self.proc.wait_closed(), 5)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            self.proc.close()


def _connect_failure(e: BaseException, who: str) -> str:
    """Why connecting to ``who`` (``the host``, ``the jump host``) failed, in one phrase.
    sshd drops unauthenticated connections beyond ``MaxStartups`` (default 10:30:100 in
    flight) by closing them before its banner or during key exchange: a reset or a lost
    connection there is named as that."""
    if isinstance(e, (ConnectionResetError, asyncssh.ConnectionLost)):
        return (
            f"connection closed by {who} during key exchange: {who} refused new SSH "
            "connections (sshd MaxStartups?)"
        )
    return _describe_os_error(e)


def parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    """Split ``[user@]host[:port]`` (``ssh -J`` form) into ``(user, host, port)``.

    Raises:
        ValueError: an empty host or user, white space or control characters, a port that
            is not a number from 1 to 65535.
    """
    if not spec or any(c.isspace() or not c.isprintable() for c in spec):
        raise ValueError(
            f"jump host {spec!r} must be [user@]host[:port] without spaces or control characters"
        )
    user, at, rest = spec.rpartition("@")
    if at and not user:
        raise ValueError(f"jump host {spec!r} has an empty user before '@'")
    host, port_text = rest, None
    if rest.startswith("["):  # [v6addr]:port
        host, _, tail = rest[1:].partition("]")
        if tail and not tail.startswith(":"):
            raise ValueError(f"jump host {spec!r}: text after ']' must be :port")
        port_text = tail[1:] if tail else None
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    if not host:
        raise ValueError(f"jump host {spec!r} has no host name")
    check_hostname(host)
    port = None
    if port_text is not None:
        if not port_text.isdigit():
            raise ValueError(f"jump host {spec!r}: port {port_text!r} is not a number")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise ValueError(f"jump host {spec!r}: port {port} is not in 1-65535")
    return (user or None), host, port


#: Longest host name (RFC 1035: 253 characters, labels of at most 63).
HOSTNAME_MAX = 253


def check_hostname(host: str) -> str:
    """Check a host name, IP or ssh config alias before it reaches the resolver (whose IDNA
    codec raises on labels over 63 characters).

    Raises:
        ValueError: empty, white space or control characters, over 253 characters, or a
            dot-separated label over 63.
    """
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        raise ValueError(f"host name {host!r} must be one word of printable characters")
    if len(host) > HOSTNAME_MAX:
        raise ValueError(
            f"host name {host[:20]!r}... is {len(host)} characters long (at most {HOSTNAME_MAX})"
        )
    if not host.startswith("[") and any(len(label) > 63 for label in host.split(".")):
        raise ValueError(f"host name {host[:20]!r}... has a part longer than 63 characters")
    return host


def check_private_key(path: str) -> str | None:
    """Why the file at ``path`` cannot be used as an SSH identity, or ``None`` when it is a
    private key asyncssh can read (an encrypted one counts: its passphrase comes later) or
    does not exist (the connection reports a missing key).
    """
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        return None
    if not os.path.isfile(p):
        return f"{p} is not a file"
    try:
        asyncssh.read_private_key(p)
    except asyncssh.KeyImportError as e:
        if "assphrase" in str(e):
            return None
        hint = " (that is a public key; give the file without .pub)" if p.endswith(".pub") else ""
        return f"{p} is not a private key: {e}{hint}"
    except (OSError, ValueError) as e:
        return f"{p} is not a private key: {e}"
    return None


class StrictKnownHosts(asyncssh.SSHKnownHosts):
    """A known_hosts list (asyncssh's parser and matching) that matches a host as OpenSSH
    does: for a port other than 22 only entries naming that port (``[host]:port``) apply.

    asyncssh's own ``match`` falls back to the port-less entries when none names the port, so
    a ``127.0.0.1 KEY`` line would vouch for every port of that address, each of which may be
    another machine (a port forward, a container's sshd).
    """

    def match(self, host: str, addr: str, port: int | None) -> Any:
        """``(host keys, CA keys, revoked keys, X.509 certs, revoked certs, X.509 subjects,
        revoked subjects)`` of the entries for ``host`` or ``addr`` at ``port`` (``None`` or
        22: entries without a port)."""
        return self._match(host, addr, None if port == 22 else port)


class _HostKeySeen(_DropWatch):
    """The client side of one connection attempt: remembers the host key the server offered
    when asyncssh found it untrusted (so a refusal can show its fingerprint and tell a
    changed key from an unknown one), and with ``accept_new`` trusts it when known_hosts has
    no entry at all for the host (OpenSSH's ``accept-new``): :attr:`accepted` is then the key
    to write. Once connected it tells ``transport`` why the connection closed
    (:class:`_DropWatch`)."""

    def __init__(self, known: object, *, accept_new: bool, transport: SSHTransport | None) -> None:
        super().__init__(transport)
        self._known = known
        self._accept_new = accept_new
        self.key: asyncssh.SSHKey | None = None
        self.host = ""
        self.addr = ""
        self.accepted: asyncssh.SSHKey | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        """Keep the peer's address (for the revoked-key report, made without a key)."""
        peer = conn.get_extra_info("peername")
        self.addr = str(peer[0]) if peer else ""

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        """Called by asyncssh only for a key that known_hosts does not trust (nor revoke)."""
        self.key, self.host, self.addr = key, host, addr
        if not self._accept_new or not isinstance(self._known, asyncssh.SSHKnownHosts):
            return False
        keys, cas, _revoked, certs, _rc, subjects, _rs = self._known.match(host, addr, port)
        if keys or cas or certs or subjects:
            return False  # listed with another key: changed, never accepted
        self.accepted = key
        return True


@dataclass(frozen=True)
class KnownHostEntry:
    """One known_hosts line that applies to a host.

    Attributes:
        path: the known_hosts file.
        line: its 1-based line number.
        marker: ``None`` (a trusted key), ``"revoked"`` or ``"cert-authority"``.
        key: the line's public key.
    """

    path: str
    line: int
    marker: str | None
    key: asyncssh.SSHKey

    @property
    def where(self) -> str:
        """``FILE:LINE``."""
        return f"{self.path}:{self.line}"


def known_host_entries(path: str, host: str, addr: str, port: int) -> list[KnownHostEntry]:
    """The lines of the known_hosts file at ``path`` that apply to ``host`` or ``addr`` at
    ``port`` (as :class:`StrictKnownHosts` matches), with their line numbers, for messages;
    lines asyncssh cannot parse and unreadable files give nothing."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return []
    out: list[KnownHostEntry] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            one = StrictKnownHosts(line)
        except (ValueError, asyncssh.KeyImportError):
            continue
        keys, cas, revoked, *_ = one.match(host, addr, port)
        # a line naming both the host and its address matches twice: listed once
        found = {
            **{k: None for k in keys},
            **{k: "cert-authority" for k in cas},
            **{k: "revoked" for k in revoked},
        }
        out += [KnownHostEntry(path, n, marker, k) for k, marker in found.items()]
    return out


#: ssh-keygen's names of key types (the ``(ED25519)`` of ``ssh-keygen -lf``).
_KEY_TYPES = {
    "ssh-ed25519": "ED25519",
    "ssh-rsa": "RSA",
    "ssh-dss": "DSA",
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
    "ssh-ed448": "ED448",
}


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``ED25519 SHA256:<base64>``: the key's type and SHA-256 fingerprint as ``ssh-keygen
    -lf`` prints them (unpadded base64 of the SHA-256 of the key blob)."""
    alg = key.get_algorithm()
    return f"{_KEY_TYPES.get(alg, alg)} {key.get_fingerprint('sha256')}"


#: Parsed known_hosts files: path -> ((mtime ns, size, inode), parsed). Given a path, asyncssh
#: reads and parses the file on every connect (about 1.8 ms for 300 lines), i.e. once per
#: host of a fleet listing; parsed once here, again when the file changes.
_known_hosts: dict[str, tuple[tuple[int, int, int], asyncssh.SSHKnownHosts]] = {}


def known_hosts_of(path: str) -> asyncssh.SSHKnownHosts:
    """The known_hosts file at ``path`` as asyncssh parses it (:class:`StrictKnownHosts`), parsed
    again when its size, mtime or inode changed (a key added by ``accept_new_host_keys`` or by
    hand); when there is no such file, an empty list that trusts no key.

    Never asyncssh's "not given" (``()``): asyncssh would then read ``~/.ssh/known_hosts``, or
    the ssh config's ``UserKnownHostsFile``, whose ``none`` turns host key checking off.

    Raises:
        ValueError: not a known_hosts file.
        OSError: it exists but cannot be read.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return StrictKnownHosts()
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _known_hosts.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    with open(path, encoding="utf-8") as f:
        known = StrictKnownHosts(f.read())
    _known_hosts[path] = (stamp, known)
    return known


def check_known_hosts(path: str) -> str | None:
    """Why the file at ``path`` cannot be used as known_hosts, or ``None`` when asyncssh can
    read it or it does not exist (an unknown host key is reported at connect)."""
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        return None
    if not os.path.isfile(p):
        return f"{p} is not a file"
    try:
        with open(p, "rb") as f:
            data = f.read()
        if b"\x00" in data:
            return f"{p} is not a known_hosts file (it holds NUL bytes: binary data)"
        data.decode("utf-8")
        asyncssh.import_known_hosts(data.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{p} is not a known_hosts file (not UTF-8 text)"
    except (OSError, ValueError) as e:
        return f"{p} is not a known_hosts file: {e}"
    return None


def _signal_number(name: str | None) -> int:
    import signal

    if not name:
        return 0
    try:
        return int(signal.Signals["SIG" + name.upper().removeprefix("SIG")])
    except KeyError:
        return 0


def _describe_os_error(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, socket.gaierror):
        return f"name not resolved ({e.strerror})"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__


async def bridge_terminal(proc: asyncssh.SSHClientProcess[bytes], *, tty: bool) -> int:
    """Connect an SSH process to this process's stdin/stdout until it exits.

    With ``tty`` the local terminal is put in raw mode (restored on every exit path) and
    window size changes (SIGWINCH) are forwarded. Returns the remote exit status, or 128 + the
    signal number when it died of a signal.
    """
    loop = asyncio.get_running_loop()
    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(in_fd) if tty and os.isatty(in_fd) else None

    def on_input() -> None:
        try:
            data = os.read(in_fd, 4096)
        except OSError:
            data = b""
        if data:
            proc.stdin.write(data)
        else:
            loop.remove_reader(in_fd)
            proc.stdin.write_eof()

    def on_resize() -> None:
        try:
            size = os.get_terminal_size(out_fd)
        except OSError:
            return
        proc.change_terminal_size(size.columns, size.lines)

    async def copy(reader: asyncssh.SSHReader[bytes], fd: int) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            os.write(fd, chunk)

    def feed_file() -> None:
        # stdin is a regular file or /dev/null (epoll refuses those; reads never block)
        while data := os.read(in_fd, 65536):
            loop.call_soon_threadsafe(proc.stdin.write, data)
        loop.call_soon_threadsafe(proc.stdin.write_eof)

    feeder: asyncio.Future[None] | None = None
    try:
        if saved is not None:
            tty_mod.setraw(in_fd)
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
        try:
            loop.add_reader(in_fd, on_input)
        except PermissionError:
            feeder = asyncio.ensure_future(asyncio.to_thread(feed_file))
        await asyncio.gather(copy(proc.stdout, out_fd), copy(proc.stderr, sys.stderr.fileno()))
        await proc.wait_closed()
    finally:
        if feeder is not None:
            await asyncio.gather(feeder, return_exceptions=True)
        loop.remove_reader(in_fd)
        if saved is not None:
            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
    if proc.exit_status is not None:
        return proc.exit_status
    return 128 + _signal_number(proc.exit_signal[0]) if proc.exit_signal else 255


class _ChannelReader:
    """An SSH channel's reader as a :class:`~remote.dockerlogs.ByteReader`: the channel's
    errors (the connection lost, the channel closed) are ``OSError`` s, as a socket's."""

    def __init__(self, reader: asyncssh.SSHReader[bytes]) -> None:
        self._reader = reader

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end of the channel."""
        try:
            return await self._reader.read(n)
        except asyncssh.Error as e:
            raise ConnectionResetError(str(e)) from e

    async def readuntil(self, separator: bytes) -> bytes:
        """Bytes up to and including ``separator``."""
        try:
            return await self._reader.readuntil(separator)
        except asyncssh.Error as e:
            raise ConnectionResetError(str(e)) from e
