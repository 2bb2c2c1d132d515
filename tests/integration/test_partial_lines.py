"""Docker's 16 KiB partial messages, read back through Engine.logs on the real dockerd.

What dockerd 20.10 (json-file driver) sends for ``python3 -c "print('z' * 1000000)"`` with
``timestamps=true``, observed here (the SDK yields one frame per message):

    2026-11-30T23:50:54.161242944Z <16384 z>          61 frames like this, no "\\n"
    2026-11-30T23:50:54.161242944Z <576 z>\\n          the last part ends the line

so ``docker logs --timestamps`` prints ``<ts> zzz...<ts> zzz...`` with the timestamp repeated
in the middle of the text every 16384 bytes (the same timestamp on every part). A line cut
off by the container's exit (no final ``\\n``) has the same shape without the ``\\n``.

For ``"a" + "\\u2588" * 20000`` (3-byte characters) the frames were 16415, 16417, 16423 and
10883 bytes: where a boundary cuts a character, the json-file driver (which stores each part
as a JSON string) has replaced each byte of the cut character with U+FFFD (3 bytes), so
parts are not always 16384 bytes and those characters are lost in dockerd itself.
"""

from __future__ import annotations

import itertools

import docker
import pytest

from console.jobs.logtext import MAX_LINE_CHARS, shape
from remote.docker import Engine, LogLine, join_partial_chunks
from remote.logs import follow_container
from remote.transport import LocalTransport
from tests.integration.conftest import IMAGE

SCRIPT = r"""
import sys, time
bar = lambda n: "\r  %3d%%|%s| %d/2000 [00:01<00:01, 99.00it/s]" % (n // 20, "#" * (n // 200), n)
lines = [
    "short 1",
    "x" * 40000,
    "short 2",
    "y" * 1000000,
    "short 3",
    "a" + "\u2588" * 20000,             # 3-byte characters cut at the 16 KiB boundaries
    "".join(bar(n) for n in range(2001)),  # tqdm redraws, one 'line' of ~100 KB
    "",
    "end",
]
"""

PRINT = (
    SCRIPT
    + r"""
time.sleep(float(sys.argv[1]))
for ln in lines:
    sys.stdout.write(ln + "\n")
sys.stdout.write("q" * 20000)  # the last line has no newline
sys.stdout.flush()
"""
)


def expected() -> list[str]:
    ns: dict[str, object] = {}
    exec(SCRIPT, ns)
    lines = ns["lines"]
    assert isinstance(lines, list)
    return [*lines, "q" * 20000]


@pytest.mark.hostless
def test_join_partial_chunks_bytes() -> None:
    ts = b"2026-11-30T23:50:54.161242944Z "
    text = bytes(range(256)) * 200  # 51200 bytes
    raw = ts + text[:16384] + ts + text[16384:32768] + ts + text[32768:49152] + ts + text[49152:]
    assert join_partial_chunks(raw) == ts + text
    # a line of exactly 16 KiB + the empty last part
    assert join_partial_chunks(ts + b"z" * 16384 + ts) == ts + b"z" * 16384
    # no timestamp at the boundary: left alone
    assert join_partial_chunks(ts + b"z" * 40000) == ts + b"z" * 40000
    assert join_partial_chunks(b"short") == b"short"


@pytest.mark.parametrize("follow", [False, True])
async def test_long_lines_come_back_whole(engine: docker.DockerClient, follow: bool) -> None:
    container = engine.containers.run(
        IMAGE, ["python3", "-c", PRINT, "1.0" if follow else "0"], detach=True
    )
    try:
        if not follow:
            assert container.wait(timeout=60)["StatusCode"] == 0
        eng = Engine(LocalTransport())
        # following: through remote.logs.follow_container, which reads once more without
        # follow after the exit (a followed stream does not yield an unfinished last line:
        # it may have been cut mid-line)
        stream = follow_container(eng, container.id) if follow else eng.logs(container.id)
        got: list[LogLine] = [ln async for ln in stream]
        await eng.close()
        want = expected()
        assert len(got) == len(want)
        # boundaries at payload bytes 32768 (after 1 byte of a character) and 49152 (after 2):
        # dockerd itself replaced those 2 x 3 bytes with 6 U+FFFD; nothing else may differ
        cut = got[5].text
        assert cut.replace("\ufffd", "") == "a" + "\u2588" * 19998
        assert cut.count("\ufffd") == 6 and len(cut) == 20005
        assert cut.index("\ufffd") == 1 + (32768 - 1) // 3
        got_texts = [ln.text for ln in got]
        got_texts[5] = want[5]
        assert got_texts[:9] == want[:9]
        if follow:
            # observed: a followed stream can end at the container's exit before dockerd
            # wrote the last part of an unterminated line (here 16384 of 20000 bytes came)
            assert got_texts[9] in ("q" * 16384, want[9])
        else:
            assert got_texts[9] == want[9]
        assert all(a.ts_ns <= b.ts_ns for a, b in itertools.pairwise(got))
        big = got[3].text
        assert shape(big) == ["y" * MAX_LINE_CHARS + f" …[+{1_000_000 - MAX_LINE_CHARS} chars]"]
        assert shape(got[6].text) == ["  100%|##########| 2000/2000 [00:01<00:01, 99.00it/s]"]
    finally:
        container.remove(force=True)
