"""Test doubles for the network between a real client and a real sshd: loopback TCP servers
that a test puts in front of (or instead of) a test host's sshd to make it late, silent, drop
connections or refuse during the key exchange.

They are plain threaded sockets, not SSH: the client and sshd at either end are real and do
the whole SSH protocol themselves. One core, :class:`Listener`, listens on an ephemeral port
of 127.0.0.1, accepts, handles each connection on its own daemon thread and keeps every
connection's sockets so that :meth:`Listener.cut` and :meth:`Listener.close` can drop them.

- :class:`StallServer`: a host whose port accepts TCP but never sends the SSH banner;
- :class:`CuttableProxy`: a transparent path to an sshd that the test can drop at once;
- :class:`DelayingProxy`: a slow path: the host's replies are held until released;
- :class:`KexCloser`: an sshd that drops new connections in the key exchange (MaxStartups);
- :class:`BlackHoleProxy`: a path that the test can make silent without closing anything (a
  black-holed route, a frozen host), and open again.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

CHUNK = 65536  # bytes read per recv() when relaying


def _shutdown(*socks: socket.socket) -> None:
    """Shut both directions of each socket (wakes threads blocked in recv on it), ignoring
    sockets already shut or closed."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _pump(src: socket.socket, dst: socket.socket, gate: threading.Event | None) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends or fails, then shut both. With ``gate``,
    each chunk read is held until the gate is set."""
    try:
        while data := src.recv(CHUNK):
            if gate is not None:
                gate.wait()
            dst.sendall(data)
    except OSError:
        pass
    _shutdown(src, dst)


class Listener:
    """The core the doubles share: a TCP listener on 127.0.0.1 (port in :attr:`port`) whose
    accept thread hands each connection to :meth:`_handle` on a thread of its own.

    Connections registered with :meth:`_keep` stay open until :meth:`cut` or :meth:`close`.
    The base :meth:`_handle` only keeps the connection: the peer sees a connected socket that
    never says anything."""

    def __init__(self) -> None:
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.srv.getsockname()[1])
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, ...]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.srv.accept()
            except OSError:  # the listener was closed
                return
            threading.Thread(target=self._handle, args=(down,), daemon=True).start()

    def _handle(self, down: socket.socket) -> None:
        """Serve one accepted connection (``down``: the client's side)."""
        self._keep(down)

    def _keep(self, *socks: socket.socket) -> bool:
        """Register one connection's sockets for :meth:`cut`; after :meth:`close` they are
        closed at once instead (returns False then)."""
        with self._lock:
            if not self._closed:
                self._conns.append(socks)
                return True
        _shutdown(*socks)
        for s in socks:
            s.close()
        return False

    def cut(self) -> int:
        """Close every connection registered since the last cut at once, as a network drop
        does; new connections are still accepted. Returns how many connections that was
        (ones that had already ended on their own included)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for socks in conns:
            _shutdown(*socks)
            for s in socks:
                s.close()
        return len(conns)

    def close(self) -> None:
        """Stop listening and drop every connection."""
        with self._lock:
            self._closed = True
        self.srv.close()
        self.cut()


class StallServer(Listener):
    """A host that answers late: its port accepts TCP connections but no SSH banner ever
    comes (a hung or overloaded sshd, or a middlebox that accepts and forwards nothing), so
    the client stays in "connecting" until its own timeout. Connections are held open until
    :meth:`close`."""


class CuttableProxy(Listener):
    """A transparent TCP path to the sshd at ``target`` (address, port): every byte is
    relayed both ways as is, until :meth:`cut` drops every connection through it at once,
    as a network outage or a dropped NAT entry does; new connections go through after."""

    #: while set to an unset Event, the server's bytes are held (see :class:`DelayingProxy`)
    reply_gate: threading.Event | None = None

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        super().__init__()

    def _handle(self, down: socket.socket) -> None:
        try:
            up = socket.create_connection(self.target)
        except OSError:  # sshd not there: the client sees its connection close
            down.close()
            return
        if self._keep(down, up):
            self._serve(down, up)

    def _serve(self, down: socket.socket, up: socket.socket) -> None:
        """Relay one connection: client to server on a new thread, server to client here."""
        threading.Thread(target=_pump, args=(down, up, None), daemon=True).start()
        _pump(up, down, self.reply_gate)


class DelayingProxy(CuttableProxy):
    """A slow path to the sshd at ``target``, as to a loaded or far host: the client's bytes
    go through at once, the server's (from its SSH banner on) are held until :meth:`release`,
    then relayed with everything after as is."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.released = threading.Event()
        self.reply_gate = self.released
        super().__init__(target)

    def release(self) -> None:
        """Let the held replies, and all later ones, through."""
        self.released.set()

    def close(self) -> None:
        self.released.set()  # no pump thread stays parked on the gate
        super().close()


class BlackHoleProxy(CuttableProxy):
    """A transparent path to the sshd at ``target`` that :meth:`silence` turns into a black
    hole: no byte goes through either way and nothing is closed, so both ends only see
    silence (their TCP connections stay established); new connections are accepted and go
    silent too. :meth:`resume` lets bytes through again (connections the client gave up on
    meanwhile are dropped, as a router's state for them would be)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.flowing = threading.Event()
        self.flowing.set()
        super().__init__(target)

    def _serve(self, down: socket.socket, up: socket.socket) -> None:
        threading.Thread(target=_pump, args=(down, up, self.flowing), daemon=True).start()
        _pump(up, down, self.flowing)

    def silence(self) -> None:
        """From now on nothing goes through (bytes read meanwhile are held)."""
        self.flowing.clear()

    def resume(self) -> None:
        """Drop the connections of the silent time, then let bytes through again."""
        self.cut()
        self.flowing.set()

    def close(self) -> None:
        self.flowing.set()  # no pump thread stays parked on the gate
        super().close()


class KexCloser(CuttableProxy):
    """An sshd that drops new connections during the key exchange, as an sshd past its
    ``MaxStartups`` does: the real sshd's banner line reaches the client, then both sides are
    closed as soon as the client sends anything (its banner or KEXINIT). :attr:`closed`
    counts the connections dropped so."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.closed = 0
        super().__init__(target)

    def _serve(self, down: socket.socket, up: socket.socket) -> None:
        try:
            banner = b""
            while not banner.endswith(b"\n"):
                chunk = up.recv(1)  # byte by byte: nothing past the banner line is relayed
                if not chunk:
                    break
                banner += chunk
            down.sendall(banner)
            down.recv(CHUNK)  # the client's first bytes: drop it here
        except OSError:
            pass
        finally:
            with self._lock:
                self.closed += 1
            _shutdown(down, up)
            down.close()
            up.close()


def known_hosts_line(
    listener: Listener,
    known_hosts: Path = Path("/var/tmp/gpuconsole-testhosts/known_hosts"),
) -> str:
    """The known_hosts line that trusts test host a's key at this proxy's address
    (``[127.0.0.1]:<port> <key type> <key>``), read from the test hosts' known_hosts."""
    key = next(
        ln.split(None, 1)[1]
        for ln in known_hosts.read_text().splitlines()
        if ln.startswith("127.0.0.11 ")
    )
    return f"[127.0.0.1]:{listener.port} {key}\n"
