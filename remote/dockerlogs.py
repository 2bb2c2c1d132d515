"""Docker's logs endpoint read in bulk on the event loop: no thread, no per-line wake-up.

``GET /containers/{id}/logs`` (Docker Engine API) answers a non-tty container with the
*multiplexed* stream: frames of an 8-byte header (stream type, 3 zero bytes, big-endian
uint32 length) and a payload, one frame per log message. With ``timestamps=1`` every message
starts with its RFC 3339 (nano) receive time and a space. A tty container's answer is the
*raw* stream: the same messages with no frame headers.

The request is sent as HTTP/1.0, so the engine (Go's net/http) streams the body without
chunked transfer encoding and closes the connection at its end: the body is exactly the
frame stream, parsed here with ``struct.unpack_from`` over whatever arrived, a whole read at
a time. A follow of 2,000 lines/s costs one loop wake-up per socket read instead of one per
line (the Docker SDK reads two fragments per frame through ``http.client``'s chunk decoder
in a thread and would need one loop wake-up per message).

Messages longer than 16 KiB come as "partial" messages (json-file/local drivers; moby
``daemon/logger/copier.go``): each part carries its own timestamp and only the last ends in
``\\n``; :class:`LogStreamParser` joins them into one line that keeps the first part's time.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol
from urllib.parse import quote, urlencode

from remote.dockerapi import EngineRequestError, parse_head
from remote.dockerapi import engine_error_message as engine_error_message

log = logging.getLogger("gpuconsole.remote.docker")

#: Content types of the logs endpoint's answer (Docker Engine API, "Stream format").
MULTIPLEXED = "application/vnd.docker.multiplexed-stream"
RAW = "application/vnd.docker.raw-stream"

_HEADER = struct.Struct(">BxxxL")
_READ_SIZE = 1 << 18


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a container wrote.

    Attributes:
        ts_ns: Docker's receive timestamp, in nanoseconds since the Unix epoch (the resume
            cursor; from the ``timestamps=true`` prefix, RFC 3339 with nanoseconds).
        text: the line without its trailing newline.
    """

    ts_ns: int
    text: str


def parse_rfc3339_ns(ts: str) -> int:
    """Parse Docker's RFC 3339 (nano) timestamp into nanoseconds since the epoch.

    Docker trims trailing zeros of the fraction (``...:05.1Z``) and writes UTC as ``Z``.

    Raises:
        ValueError: not such a timestamp.
    """
    main, _, frac_tz = ts.partition(".")
    if frac_tz:
        i = 0
        while i < len(frac_tz) and frac_tz[i].isdigit():
            i += 1
        frac, tz = frac_tz[:i], frac_tz[i:]
    else:
        frac = ""
        main, tz = (main[:-1], "Z") if main.endswith("Z") else (main[:19], main[19:])
    if tz in ("Z", "z", ""):
        tz = "+00:00"
    dt = datetime.fromisoformat(main + tz)
    return int(dt.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9])


def format_ns(ts_ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 UTC with 9 fraction digits."""
    secs, ns = divmod(ts_ns, 1_000_000_000)
    dt = datetime.fromtimestamp(secs, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


#: Docker's log copier cuts a line longer than this into "partial" messages (json-file and
#: local drivers; moby daemon/logger/copier.go, bufSize 16 KiB).
PARTIAL_CHUNK_BYTES = 16 * 1024

#: A joined line is handed on once it reaches this size even without its "\n" (memory bound).
MAX_LINE_BYTES = 64 * 1024 * 1024

# RFC3339Nano as Docker writes it in front of each message with timestamps=true
TS_PREFIX_RE = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")


def join_partial_chunks(raw: bytes, chunk: int = PARTIAL_CHUNK_BYTES) -> bytes:
    """Undo Docker's split of a long line into partial messages, within one byte record.

    With ``timestamps=true`` a line longer than 16 KiB comes from the logs API as
    ``<ts1> <16384 bytes><ts2> <16384 bytes>...<tsN> <rest>\n``: every partial message
    carries its own RFC 3339 timestamp (on dockerd 20.10 all parts carry the first one's)
    and only the last ends in ``\n``. This returns ``<ts1> <all the text>``.

    :meth:`Engine.logs` joins parts by message (one SDK chunk per message), which also
    covers parts that are not 16384 bytes long: the json-file driver stores each part as a
    JSON string, so the bytes of a UTF-8 character cut at a boundary come back as one
    U+FFFD each (dockerd's loss, not recoverable), making that part longer. This function is
    the fallback for records whose parts arrived in one chunk (tty streams).

    Args:
        raw: one record up to (not including) its ``\n``, starting with its timestamp.
        chunk: the driver's partial size.
    """
    head = TS_PREFIX_RE.match(raw)
    if head is None or len(raw) - head.end() <= chunk:
        return raw
    pos = head.end()
    parts = [raw[:pos]]
    while len(raw) - pos > chunk:
        m = TS_PREFIX_RE.match(raw, pos + chunk)
        if m is None:
            break
        parts.append(raw[pos : pos + chunk])
        pos = m.end()
    parts.append(raw[pos:])
    return b"".join(parts)


def split_log_line(raw: str) -> LogLine | None:
    """Split ``<RFC3339Nano> <text>`` (Docker's ``timestamps=true`` form) into a LogLine."""
    ts, sep, text = raw.partition(" ")
    if not sep:
        return None
    try:
        return LogLine(parse_rfc3339_ns(ts), text)
    except ValueError:
        return None


class TimestampParser:
    """:func:`parse_rfc3339_ns` with a fast path for a stream's consecutive timestamps: when
    the date and time up to the second repeat (``2026-12-01T03:05:01``) and the zone is
    ``Z``, only the fraction is parsed."""

    def __init__(self) -> None:
        self._prefix = ""
        self._secs_ns = 0

    def parse(self, ts: str) -> int:
        """Nanoseconds since the epoch of a Docker timestamp.

        Raises:
            ValueError: not such a timestamp.
        """
        if (
            len(ts) > 21
            and ts[19] == "."
            and ts[-1] == "Z"
            and ts.startswith(self._prefix)
            and self._prefix
        ):
            frac = ts[20:-1]
            if frac.isdigit() and len(frac) <= 9:
                return self._secs_ns + int(frac.ljust(9, "0"))
        ns = parse_rfc3339_ns(ts)
        if len(ts) > 19 and ts[19] in ".Z" and ts[-1] == "Z":
            self._prefix = ts[:19]
            self._secs_ns = ns - ns % 1_000_000_000
        return ns


class LogStreamParser:
    """Turns the bytes of a logs answer into :class:`LogLine` records, in bulk.

    Args:
        multiplexed: the answer is the multiplexed stream (non-tty container); ``False`` for
            the raw stream of a tty container.

    Feed it any slices of the body (:meth:`feed`), then :meth:`close` at the end of the body;
    each returns the complete lines so far. Records that are not ``<timestamp> <text>`` are
    skipped (Docker always writes the timestamp with ``timestamps=1``).
    """

    def __init__(self, multiplexed: bool = True) -> None:
        self.multiplexed = multiplexed
        self._buf = bytearray()
        self._pending: list[bytes] = []  # parts of the current, unfinished line
        self._size = 0
        self._ts = TimestampParser()
        self._out: list[LogLine] = []

    def feed(self, data: bytes) -> list[LogLine]:
        """Parse ``data`` (the next bytes of the body); returns the lines it completed."""
        if not self.multiplexed:
            self._message(data)
        else:
            buf = self._buf
            buf += data
            i, n = 0, len(buf)
            unpack = _HEADER.unpack_from
            message = self._message
            while n - i >= 8:
                _, length = unpack(buf, i)
                end = i + 8 + length
                if end > n:
                    break
                if length:
                    message(bytes(buf[i + 8 : end]))
                i = end
            if i:
                del buf[:i]
        out, self._out = self._out, []
        return out

    def close(self) -> list[LogLine]:
        """The body ended: the unfinished line, if any, is a line."""
        if self._pending:
            self._emit(b"".join(self._pending))
            self._pending, self._size = [], 0
        out, self._out = self._out, []
        return out

    def _message(self, chunk: bytes) -> None:
        """One message (multiplexed: one frame's payload; raw: whatever arrived).

        A message arriving while a line is pending continues it (a partial message): its own
        timestamp is dropped, the line keeps the first part's.
        """
        if self._pending and self.multiplexed:
            head = TS_PREFIX_RE.match(chunk)
            if head is not None:
                chunk = chunk[head.end() :]
        if b"\n" not in chunk:
            self._pending.append(chunk)
            self._size += len(chunk)
            if self._size >= MAX_LINE_BYTES:
                self._emit(b"".join(self._pending))
                self._pending, self._size = [], 0
            return
        records = chunk.split(b"\n")
        if self._pending:
            self._emit(b"".join([*self._pending, records[0]]))
        else:
            self._emit(records[0])
        emit = self._emit
        for raw in records[1:-1]:
            emit(raw)
        last = records[-1]
        self._pending = [last] if last else []
        self._size = len(last)

    def _emit(self, raw: bytes) -> None:
        if len(raw) > 64:  # only a record longer than its timestamp can hold joined parts
            raw = join_partial_chunks(raw)
        text = raw.decode(errors="replace")
        if text.endswith("\r"):
            text = text.rstrip("\r")
        ts, sep, body = text.partition(" ")
        if not sep:
            return
        try:
            ts_ns = self._ts.parse(ts)
        except ValueError:
            return
        self._out.append(LogLine(ts_ns, body))


def since_param(since_ns: int) -> str:
    """Docker's ``since`` (``<seconds>.<nanoseconds>``) for a time in ns since the epoch."""
    secs, ns = divmod(max(since_ns, 0), 1_000_000_000)
    return f"{secs}.{ns:09d}"


class LogsRequestError(Exception):
    """The engine refused the logs request (an HTTP status other than 200 or 404).

    Attributes:
        status: the HTTP status.
        message: the engine's error message (its JSON ``message``, else the body).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class ByteReader(Protocol):
    """The reading half of a stream to the engine (asyncio's ``StreamReader``, or an SSH
    channel's reader): errors of the connection under it are ``OSError``."""

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end of the stream."""
        ...

    async def readuntil(self, separator: bytes) -> bytes:
        """Bytes up to and including ``separator``; ``asyncio.IncompleteReadError`` at the
        end of the stream."""
        ...


class ByteWriter(Protocol):
    """The writing half of a stream to the engine."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` to send."""
        ...

    def close(self) -> None:
        """Close the stream."""
        ...


async def read_log_batches(
    socket_path: str | tuple[ByteReader, ByteWriter],
    container_id: str,
    *,
    since_ns: int | None = None,
    tail: int | None = None,
    follow: bool = False,
) -> AsyncGenerator[list[LogLine], None]:
    """Yield a container's log lines (stdout and stderr, oldest first) in batches, one batch
    per socket read, from the Docker engine listening on ``socket_path``.

    Args:
        socket_path: the engine's unix socket (local, or an SSH-forwarded one), or a stream
            to the engine already open (an SSH channel to its socket, see
            :meth:`remote.transport.Transport.open_engine_stream`), which this closes.
        container_id: id or name.
        since_ns: only lines at or after this time (ns since the epoch; Docker may return a
            few lines at the cursor again: callers dedupe, see :mod:`remote.logs`).
        tail: only the last N lines.
        follow: keep streaming until the container stops.

    The iteration ends when the body ends: the container stopped (with ``follow``), the
    container does not exist (404), or the connection dropped (the caller decides whether
    to resume). Closing the iterator closes the connection at once.

    Raises:
        LogsRequestError: the engine answered with another error status.
    """
    params: dict[str, str] = {
        "stdout": "1",
        "stderr": "1",
        "timestamps": "1",
        "follow": "1" if follow else "0",
    }
    if since_ns is not None:
        params["since"] = since_param(since_ns)
    if tail is not None:
        params["tail"] = str(tail)
    target = f"/containers/{quote(container_id, safe='')}/logs?{urlencode(params)}"
    reader: ByteReader
    writer: ByteWriter
    if isinstance(socket_path, str):
        try:
            reader, writer = await asyncio.open_unix_connection(socket_path)
        except OSError as e:
            log.debug("logs of %s: cannot connect to %s: %s", container_id[:12], socket_path, e)
            return
    else:
        reader, writer = socket_path
    try:
        writer.write(f"GET {target} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as e:
            log.debug("logs of %s: no answer: %s", container_id[:12], e)
            return
        status, content_type = _parse_head(head)
        if status == 404:
            return
        if status != 200:
            body = (await reader.read(65536)).decode(errors="replace").strip()
            raise LogsRequestError(status, engine_error_message(body))
        parser = LogStreamParser(multiplexed=content_type != RAW)
        while True:
            try:
                data = await reader.read(_READ_SIZE)
            except OSError as e:
                log.debug("logs of %s: read: %s", container_id[:12], e)
                data = b""
            if not data:
                break
            lines = parser.feed(data)
            if lines:
                yield lines
        if not follow:
            # the engine sent everything it has: a last line without "\n" is a line. A
            # follow that ends mid-line was cut (or its container exited): the caller resumes
            # or reads once more without follow, and gets the whole line then, not twice.
            lines = parser.close()
            if lines:
                yield lines
    finally:
        writer.close()


def _parse_head(head: bytes) -> tuple[int, str]:
    """(status, content type) of an HTTP response head (:func:`remote.dockerapi.parse_head`).

    Raises:
        LogsRequestError: not an HTTP response head.
    """
    try:
        status, headers = parse_head(head)
    except EngineRequestError as e:
        raise LogsRequestError(0, e.message) from e
    return status, headers.get("content-type", "").split(";")[0].strip()
