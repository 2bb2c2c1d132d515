"""gpuconsole engine relay: a byte pipe between an SSH exec channel and the Docker socket,
coalescing what the engine sends into few large writes.

Why: dockerd writes every log line of a followed container separately, and sshd sends each
write of a ``direct-streamlocal`` channel as its own SSH packet, so the console paid one
packet's receive (decrypt, dispatch, wake-up) per log line. Run through this relay, a flood
leaves the host as writes of up to :data:`COALESCE_BYTES` and a slow log still arrives within
:data:`COALESCE_S`.

Run on the host with its own ``python3`` (3.8 or newer, standard library only; shipped as a
content-addressed bundle by :mod:`remote.relay` and started ``python3 -I -S relay.py SOCKET``)::

    python3 relay.py /var/run/docker.sock

- stdin -> socket as it comes (the console's HTTP request; the relay does not parse it).
- socket -> stdout coalesced: after the first bytes arrive it keeps reading until
  :data:`COALESCE_S` passed or :data:`COALESCE_BYTES` are buffered, then writes them in one
  ``write`` to fd 1 (unbuffered, so each write is also a flush).
- Once connected it writes :data:`READY` on stderr (the console waits for it before sending,
  so a socket that cannot be reached is told apart from a host without a usable python).

Exit status: 0 when the socket closes (after writing what it had) or when stdin reaches end of
file or stdout is closed (the SSH channel closed: the console went away, so no relay outlives
its channel); :data:`EXIT_NO_SOCKET` when the socket cannot be connected (the reason on
stderr); :data:`EXIT_USAGE` for bad arguments. An older python fails before it runs (the
``annotations`` future import needs 3.7; ``-I`` 3.4), which the console takes for "no usable
python".

Nothing listens anywhere: the relay only connects to the given socket.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time

#: Longest time (s) bytes wait in the relay for more to join them.
COALESCE_S = 0.05
#: Buffered bytes that are written at once without waiting longer (and the largest write).
COALESCE_BYTES = 64 * 1024
#: Written on stderr once the socket is connected.
READY = b"gpuconsole-relay: connected\n"
#: Exit status: the socket could not be connected.
EXIT_NO_SOCKET = 3
#: Exit status: bad arguments.
EXIT_USAGE = 2

_STDIN = 0
_STDOUT = 1
_READ_SIZE = 64 * 1024


def write_all(fd: int, data: bytes) -> bool:
    """Write ``data`` to ``fd`` whole (a blocking pipe takes it in one call; a partial write
    is continued); ``False`` when the reader is gone (EPIPE: the channel closed)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return False
        view = view[n:]
    return True


def relay(
    sock: socket.socket,
    stdin_fd: int = _STDIN,
    stdout_fd: int = _STDOUT,
    coalesce_s: float = COALESCE_S,
    coalesce_bytes: int = COALESCE_BYTES,
) -> int:
    """Copy ``stdin_fd`` -> ``sock`` as it comes and ``sock`` -> ``stdout_fd`` coalesced (see
    the module docstring) until the socket closes, stdin ends or stdout is closed; returns
    the exit status (0)."""
    poller = select.poll()
    poller.register(stdin_fd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN)
    buf = bytearray()
    deadline = 0.0  # when ``buf`` is written at the latest (valid while it holds bytes)
    stdin_open = True
    while True:
        if buf:
            wait_ms = max(0, int((deadline - time.monotonic()) * 1000 + 0.999))
            events = poller.poll(wait_ms)
        else:
            events = poller.poll()
        for fd, _ in events:
            if fd == stdin_fd and stdin_open:
                try:
                    data = os.read(stdin_fd, _READ_SIZE)
                except OSError:
                    data = b""
                if not data:
                    # the client went away: what is buffered has nowhere to go
                    return 0
                try:
                    sock.sendall(data)
                except OSError:
                    # the engine closed its end: send what was read, then stop
                    stdin_open = False
                    poller.unregister(stdin_fd)
            elif fd == sock.fileno():
                try:
                    data = sock.recv(coalesce_bytes - len(buf))
                except OSError:
                    data = b""
                if not data:
                    write_all(stdout_fd, bytes(buf))
                    return 0
                if not buf:
                    deadline = time.monotonic() + coalesce_s
                buf += data
        if buf and (len(buf) >= coalesce_bytes or time.monotonic() >= deadline):
            if not write_all(stdout_fd, bytes(buf)):
                return 0
            del buf[:]


def main(argv: list[str]) -> int:
    """``relay.py SOCKET``: connect to the unix socket ``SOCKET`` and relay (module docstring).
    Returns the exit status."""
    if len(argv) != 2:
        sys.stderr.write("usage: relay.py SOCKET\n")
        return EXIT_USAGE
    path = argv[1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sys.stderr.write(f"gpuconsole-relay: cannot connect to {path}: {e.strerror or e}\n")
        return EXIT_NO_SOCKET
    try:
        os.write(2, READY)
    except OSError:
        return 0
    try:
        return relay(sock)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
