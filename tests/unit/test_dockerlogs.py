"""The bulk parser of Docker's logs stream (remote/dockerlogs.py): frames cut anywhere by the
socket, partial (16 KiB) messages joined, tty raw streams, Docker's timestamp forms."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from remote.dockerlogs import (
    LogLine,
    LogStreamParser,
    TimestampParser,
    _parse_head,
    parse_rfc3339_ns,
    read_log_batches,
    since_param,
)

T0 = "2026-12-01T03:05:01"
NS0 = parse_rfc3339_ns(T0 + "Z")


def frame(payload: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def feed_in_pieces(parser: LogStreamParser, data: bytes, size: int) -> list[LogLine]:
    out: list[LogLine] = []
    for i in range(0, len(data), size):
        out += parser.feed(data[i : i + size])
    return out + parser.close()


STREAM = b"".join(
    [
        frame(f"{T0}.000000001Z step 1 loss 2.5\n".encode()),
        frame(f"{T0}.5Z [rank1]:warn\n".encode(), stream=2),  # stderr; Docker trims zeros
        frame(f"{T0}.123456789Z tqdm 10%\r".encode()),  # no newline yet: continues
        frame(f"{T0}.2Z  20%\n".encode()),
        frame(b""),  # empty frames are skipped
        frame("2026-12-01T03:05:02.25Z café ✓\n".encode()),
    ]
)
EXPECTED = [
    LogLine(NS0 + 1, "step 1 loss 2.5"),
    LogLine(NS0 + 500_000_000, "[rank1]:warn"),
    LogLine(NS0 + 123_456_789, "tqdm 10%\r 20%"),
    LogLine(NS0 + 1_250_000_000, "café ✓"),
]


@pytest.mark.parametrize("size", [1, 3, 7, 8, 9, 64, 10_000])
def test_frames_cut_anywhere_give_the_same_lines(size: int) -> None:
    assert feed_in_pieces(LogStreamParser(), STREAM, size) == EXPECTED


def test_partial_messages_are_joined_and_keep_the_first_time() -> None:
    part = b"x" * 16384
    data = (
        frame(f"{T0}.1Z ".encode() + part)
        + frame(f"{T0}.2Z ".encode() + part)
        + frame(f"{T0}.3Z tail\n".encode())
    )
    assert feed_in_pieces(LogStreamParser(), data, 5000) == [
        LogLine(NS0 + 100_000_000, "x" * 32768 + "tail")
    ]


def test_raw_stream_of_a_tty_container() -> None:
    data = f"{T0}.1Z one\r\n{T0}.2Z two\r\n{T0}.3Z thr".encode() + b"ee"
    assert feed_in_pieces(LogStreamParser(multiplexed=False), data, 4) == [
        LogLine(NS0 + 100_000_000, "one"),
        LogLine(NS0 + 200_000_000, "two"),
        LogLine(NS0 + 300_000_000, "three"),
    ]


def test_invalid_utf8_is_replaced_and_records_without_a_time_are_skipped() -> None:
    data = frame(b"not-a-time hello\n") + frame(f"{T0}.1Z bad \xff\xfe end\n".encode("latin-1"))
    assert feed_in_pieces(LogStreamParser(), data, 100) == [
        LogLine(NS0 + 100_000_000, "bad \ufffd\ufffd end")
    ]


@pytest.mark.parametrize(
    "ts",
    [
        f"{T0}Z",
        f"{T0}.1Z",
        f"{T0}.999999999Z",
        f"{T0}.000000001Z",
        f"{T0}+02:00",
        f"{T0}.5+02:00",
        "2026-12-01T03:05:59.999Z",
        "2026-12-31T23:59:59.9Z",
    ],
)
def test_fast_timestamp_path_agrees_with_the_full_parser(ts: str) -> None:
    p = TimestampParser()
    p.parse(f"{T0}.7Z")  # primes the cached second
    assert p.parse(ts) == parse_rfc3339_ns(ts)
    assert p.parse(f"{T0}.25Z") == NS0 + 250_000_000


def test_since_param_is_seconds_dot_nanoseconds() -> None:
    assert since_param(NS0 + 42) == f"{NS0 // 10**9}.000000042"


def test_response_head() -> None:
    head = (
        b"HTTP/1.0 200 OK\r\nApi-Version: 1.47\r\n"
        b"Content-Type: application/vnd.docker.multiplexed-stream\r\n\r\n"
    )
    assert _parse_head(head) == (200, "application/vnd.docker.multiplexed-stream")
    assert _parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n") == (
        404,
        "application/json",
    )


async def _serve_fake_engine_dropping_mid_line(path: str) -> asyncio.AbstractServer:
    """A fake engine (a unix socket speaking just enough HTTP/1.0) whose answer ends in the
    middle of a long line, as a cut SSH connection does; a real engine cannot be made to."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.0 200 OK\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\n\r\n"
        )
        writer.write(frame(f"{T0}.1Z whole\n".encode()))
        writer.write(frame(f"{T0}.2Z ".encode() + b"y" * 16384))  # first part of a long line
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(answer, path)


@pytest.mark.parametrize("follow", [True, False])
async def test_a_stream_cut_mid_line_does_not_emit_half_a_line_when_following(
    tmp_path: Path, follow: bool
) -> None:
    sock = str(tmp_path / "engine.sock")
    server = await _serve_fake_engine_dropping_mid_line(sock)
    try:
        got = [ln async for batch in read_log_batches(sock, "c1", follow=follow) for ln in batch]
    finally:
        server.close()
        await server.wait_closed()
    whole = LogLine(NS0 + 100_000_000, "whole")
    if follow:  # the resume (or the final read) brings the whole long line, once
        assert got == [whole]
    else:  # the engine said all it had: the unfinished line is the last line
        assert got == [whole, LogLine(NS0 + 200_000_000, "y" * 16384)]
