"""The engine relay (remote/agent/relay.py) alone: a real subprocess between a real unix socket
server (the stand-in engine, in a thread here) and its stdin/stdout.

Its stdout is one end of a ``SOCK_SEQPACKET`` socket pair, which keeps message boundaries:
each ``recv`` returns exactly one ``write`` of the relay, so the writes are counted, not
guessed from how a pipe's reads happened to fall.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote.agent.relay import COALESCE_BYTES, EXIT_NO_SOCKET, READY

RELAY_PY = Path(__file__).resolve().parents[2] / "remote" / "agent" / "relay.py"
REQUEST = b"GET /containers/x/logs?follow=1 HTTP/1.0\r\nHost: docker\r\n\r\n"


class Engine:
    """A unix socket server serving one connection with ``serve(conn)`` in a thread; what it
    received from the relay is kept in :attr:`got`."""

    def __init__(self, path: str, serve: Callable[[socket.socket], None]) -> None:
        self.path = path
        self.got = b""
        self.error: BaseException | None = None
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(path)
        self._srv.listen(1)
        self._serve = serve
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._srv.settimeout(20)
            conn, _ = self._srv.accept()
            with conn:
                self._serve(conn)
        except BaseException as e:  # reported by join()
            self.error = e

    def read_request(self, conn: socket.socket) -> None:
        """Read :data:`REQUEST` from the relay (it may come in pieces)."""
        conn.settimeout(20)
        while len(self.got) < len(REQUEST):
            data = conn.recv(4096)
            if not data:
                break
            self.got += data

    def join(self) -> None:
        self._thread.join(30)
        self._srv.close()
        if self.error is not None:
            raise self.error


class Relay:
    """``python3 -I -S relay.py SOCKET`` as a host runs it; stdout a SOCK_SEQPACKET pair."""

    def __init__(self, path: str) -> None:
        self.out, child_out = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(RELAY_PY), path],
            stdin=subprocess.PIPE,
            stdout=child_out.fileno(),
            stderr=subprocess.PIPE,
        )
        child_out.close()
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.stdin = self.proc.stdin
        self.stderr = self.proc.stderr

    def ready(self) -> bytes:
        """The relay's first stderr line."""
        return self.stderr.readline()

    def start(self) -> None:
        """Wait for the relay's "connected" line, then send it the request."""
        assert self.ready() == READY
        self.stdin.write(REQUEST)
        self.stdin.flush()

    def writes(self, timeout: float = 20) -> list[bytes]:
        """Every write the relay made to stdout until it closed it (exited)."""
        out: list[bytes] = []
        self.out.settimeout(timeout)
        while True:
            msg = self.out.recv(2 * COALESCE_BYTES)
            if not msg:
                return out
            out.append(msg)

    def wait(self, timeout: float = 20) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.stdin.close()
        self.stderr.close()
        self.out.close()


def relayed_to_the_end(path: str) -> list[bytes]:
    """Run the relay on ``path`` until the engine closes: its stdout writes; it exited 0."""
    relay = Relay(path)
    try:
        relay.start()
        writes = relay.writes()
        assert relay.wait() == 0
    finally:
        relay.close()
    return writes


@pytest.fixture
def sock_path() -> Iterator[str]:
    # a short folder: a unix socket path holds at most 107 bytes
    d = tempfile.mkdtemp(prefix="relay-", dir="/tmp")
    yield os.path.join(d, "engine.sock")
    shutil.rmtree(d, ignore_errors=True)


def test_a_trickle_arrives_whole_in_few_writes_and_the_relay_exits_0_at_close(
    sock_path: str,
) -> None:
    """200 small writes 2 ms apart (a followed log, one write per line as dockerd makes
    them): every byte arrives, in order, in far fewer writes; the engine closing its end
    ends the relay with status 0 after it wrote what it had."""
    lines = [f"{i:03d} step={i} loss=0.{i:04d} \u00e9\t|\r\n".encode() for i in range(200)]

    def serve(conn: socket.socket) -> None:
        engine.read_request(conn)
        for line in lines:
            conn.sendall(line)
            time.sleep(0.002)

    engine = Engine(sock_path, serve)
    writes = relayed_to_the_end(sock_path)
    engine.join()
    assert engine.got == REQUEST  # stdin -> socket unchanged
    assert b"".join(writes) == b"".join(lines)  # socket -> stdout byte-exact
    # 200 writes over about 0.45 s in 50 ms windows: 9 writes measured here (2 cores)
    assert len(writes) <= 20, [len(w) for w in writes]


def test_a_flood_goes_out_in_writes_of_at_most_64_kib(sock_path: str) -> None:
    """4 MiB sent as 1 KiB writes as fast as the socket takes them: out in 64 KiB writes."""
    chunk = bytes(range(256)) * 4
    total = 4096

    def serve(conn: socket.socket) -> None:
        engine.read_request(conn)
        for _ in range(total):
            conn.sendall(chunk)

    engine = Engine(sock_path, serve)
    writes = relayed_to_the_end(sock_path)
    engine.join()
    assert b"".join(writes) == chunk * total
    assert max(len(w) for w in writes) <= COALESCE_BYTES
    # 4 MiB / 64 KiB = 64 full writes at best; a reader faster than the flood sends less
    assert len(writes) <= 4 * 64, len(writes)


def test_a_lone_line_is_not_held_back(sock_path: str) -> None:
    """One small write while the socket stays open: it comes out after the coalescing
    window, not when more bytes or the close come."""
    sent = threading.Event()
    release = threading.Event()
    t_sent: list[float] = []

    def serve(conn: socket.socket) -> None:
        engine.read_request(conn)
        t_sent.append(time.monotonic())
        conn.sendall(b"one line\n")
        sent.set()
        release.wait(20)

    engine = Engine(sock_path, serve)
    relay = Relay(sock_path)
    try:
        relay.start()
        relay.out.settimeout(20)
        msg = relay.out.recv(COALESCE_BYTES)
        took = time.monotonic() - t_sent[0]
        assert not release.is_set()  # the engine still holds the socket open
        assert msg == b"one line\n"
        assert took < 0.5, took  # 50 ms of coalescing plus scheduling on a loaded machine
        release.set()
        assert relay.writes() == []
        assert relay.wait() == 0
    finally:
        release.set()
        relay.close()
    engine.join()


def test_stdin_eof_ends_the_relay_with_0(sock_path: str) -> None:
    """The SSH channel closed (stdin EOF) while the engine keeps the stream open and quiet:
    the relay exits 0 instead of waiting for the engine."""
    release = threading.Event()

    def serve(conn: socket.socket) -> None:
        engine.read_request(conn)
        release.wait(30)

    engine = Engine(sock_path, serve)
    relay = Relay(sock_path)
    try:
        relay.start()
        relay.stdin.close()
        assert relay.wait() == 0
    finally:
        release.set()
        relay.close()
    engine.join()
    assert engine.got == REQUEST


def test_stdout_closed_ends_the_relay_with_0(sock_path: str) -> None:
    """The reader of its stdout went away while the engine keeps sending: exit 0 (EPIPE),
    no traceback."""
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        engine.read_request(conn)
        while not stop.is_set():
            try:
                conn.sendall(b"x" * 100)
            except OSError:
                return
            time.sleep(0.001)

    engine = Engine(sock_path, serve)
    relay = Relay(sock_path)
    try:
        relay.start()
        relay.out.settimeout(20)
        assert relay.out.recv(COALESCE_BYTES)
        relay.out.close()
        assert relay.wait() == 0
        assert relay.stderr.read() == b""
    finally:
        stop.set()
        relay.close()
    engine.join()


def test_no_socket_is_exit_3_with_the_reason(sock_path: str) -> None:
    relay = Relay(sock_path)  # nothing listens there
    try:
        assert relay.wait() == EXIT_NO_SOCKET
        err = relay.stderr.read().decode()
    finally:
        relay.close()
    assert err == f"gpuconsole-relay: cannot connect to {sock_path}: No such file or directory\n"
