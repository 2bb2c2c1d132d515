"""Host runtime (``runtime: host``): the log record format written by the supervisor
(``remote/agent/hostjob.py``) and read by :mod:`remote.hostengine`, and the node state read
back from a node folder (no SSH, no processes but this one's children)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.agent import hostjob
from remote.dockerlogs import LogLine, parse_rfc3339_ns
from remote.hostengine import info_from_node, parse_record, spec_from_node


def test_record_round_trip_keeps_awkward_text() -> None:
    text = "a 'b' \"c\" $HOME \\n tab\there ünï 🚀 \x1b[31mred\x1b[0m \r progress"
    raw = hostjob.format_record(1796130514180110593, "e", text)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    line = raw.decode().rstrip("\n")
    assert hostjob.parse_record(line) == (1796130514180110593, "e", text)
    assert parse_record(line) == LogLine(1796130514180110593, text)


def test_parse_record_rejects_other_lines_and_drops_trailing_cr() -> None:
    assert parse_record("") is None
    assert parse_record("12ab o text") is None
    assert parse_record("123 x text") is None
    assert parse_record("123 otext") is None
    assert parse_record("2026-12-01T13:08:34.1Z text") is None
    assert parse_record("5 o ") == LogLine(5, "")
    assert parse_record("5 o  leading space") == LogLine(5, " leading space")
    # Docker's parser drops a trailing \r (remote.dockerlogs.LogStreamParser); so does this one
    assert parse_record("5 o 50%\r") == LogLine(5, "50%")
    assert hostjob.parse_record("5 o 50%\r") == (5, "o", "50%\r")


def test_writer_timestamps_never_go_backwards(tmp_path: Path) -> None:
    """A clock stepping back (NTP) must not reorder the file: a resumed read from the cursor
    relies on file order == time order."""
    ticks = iter([100, 300, 200, 200, 400])
    w = hostjob.LogWriter(str(tmp_path / "log"), clock=lambda: next(ticks))
    for i in range(5):
        w.write("o", f"line {i}".encode())
    w.close()
    recs = [hostjob.parse_record(x) for x in (tmp_path / "log").read_text().split("\n")[:-1]]
    assert [r[0] for r in recs if r] == [100, 300, 300, 300, 400]
    assert [r[2] for r in recs if r] == [f"line {i}" for i in range(5)]


def test_pump_partial_last_line_invalid_utf8_and_long_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostjob, "MAX_LINE_BYTES", 10)
    data = b"first\nbad \xff\xfe bytes\r\n0123456789abcdefghij\nno newline"
    w = hostjob.LogWriter(str(tmp_path / "log"))
    hostjob.pump(io.BytesIO(data), "o", w)
    w.close()
    texts = [parse_record(x) for x in (tmp_path / "log").read_text().split("\n")[:-1]]
    # 10-byte pieces; a line of exactly 2 pieces gives no empty third; \r dropped as Docker
    assert [t.text if t else None for t in texts] == [
        "first",
        "bad \ufffd\ufffd byt",
        "es",
        "0123456789",
        "abcdefghij",
        "no newline",
    ]


def test_rfc3339_matches_dockers_parser() -> None:
    ns = 1796130514147229334
    s = hostjob.rfc3339_ns(ns)
    assert s == "2026-12-01T13:08:34.147229334Z"
    assert parse_rfc3339_ns(s) == ns


def _run(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    script = Path(hostjob.__file__)
    return subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--root", str(root), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_vanished_supervisor_reads_as_exited_137(tmp_path: Path) -> None:
    """A run.json whose supervisor is gone (here: a process that already exited) without an
    exit.json is ``exited`` 137 at the log's mtime, and ``list`` records that."""
    root = tmp_path / "jobs"
    req = {
        "name": "n1",
        "labels": {"io.gpuconsole.job-id": "j-1"},
        "argv": ["true"],
        "env": {"SECRET": "s3cr3t", "PLAIN": "p"},
        "secret_env": ["SECRET"],
        "cwd": "/",
    }
    assert _run(root, "create", stdin=json.dumps(req)).returncode == 0
    d = root / "j-1" / "n1"
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    assert oct((d / "env.json").stat().st_mode & 0o777) == "0o600"
    assert "s3cr3t" not in (d / "spec.json").read_text()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (d / "log").write_bytes(hostjob.format_record(5, "o", "last words"))
    os.utime(d / "log", ns=(1796130514_000000000, 1796130514_000000000))
    hostjob.write_json(
        str(d / "run.json"),
        {
            "pid": gone.pid,
            "pgid": gone.pid,
            "ticks": 1,
            "boot_id": hostjob.boot_id(),
            "started_at": hostjob.rfc3339_ns(1),
        },
    )
    res = _run(root, "list", "--label", "io.gpuconsole.job-id=j-1")
    assert res.returncode == 0, res.stderr
    [node] = json.loads(res.stdout)
    assert (node["status"], node["exit_code"]) == ("exited", 137)
    assert node["finished_at"] == "2026-12-01T13:08:34.000000000Z"
    assert json.loads((d / "exit.json").read_text())["by"] == "lost"
    info = info_from_node(node)
    assert (info.id, info.status, info.exit_code, info.gpu_devices) == ("n1", "exited", 137, "none")
    assert _run(root, "list", "--label", "io.gpuconsole.job-id=other").stdout.strip() == "[]"
    spec = json.loads(_run(root, "spec", "n1").stdout)
    cs = spec_from_node(spec["spec"], spec["labels"])
    assert cs.env == {"PLAIN": "p", "SECRET": ""}
    assert "SECRET=***" in cs.docker_run_line() and "s3cr3t" not in cs.docker_run_line()
    assert _run(root, "rm", "n1").returncode == 0
    assert not (root / "j-1").exists()
    assert _run(root, "start", "n1").returncode == hostjob.EXIT_NOT_FOUND


def test_since_and_tail_match_a_full_scan(tmp_path: Path) -> None:
    """``logs --since-ns/--tail`` bisect and read backwards; they must pick exactly the
    records a scan of the whole file picks: ``ts >= since`` (inclusive, also among equal
    timestamps), the last N, never the unfinished last line."""
    path = tmp_path / "log"
    recs = []
    ts = 1_000
    for i in range(40_000):
        ts += i % 3  # runs of equal timestamps
        recs.append(hostjob.format_record(ts, "oe"[i % 2], f"line {i} " + "x" * (i % 50)))
    path.write_bytes(b"".join(recs) + b"9999999 o unfinished")
    parsed = [hostjob.parse_record(r.decode().rstrip("\n")) for r in recs]
    stamps = [p[0] for p in parsed if p]

    def dump(since: int | None, tail: int | None) -> list[bytes]:
        out = io.BytesIO()
        end = hostjob.copy_records(str(path), since, tail, out)
        assert end == sum(map(len, recs))
        return out.getvalue().splitlines(keepends=True)

    assert dump(None, None) == recs
    for since in (0, stamps[1], stamps[12_345], stamps[-1], stamps[-1] + 1):
        want = [r for r, t in zip(recs, stamps) if t >= since]
        assert dump(since, None) == want
        assert dump(since, 7) == want[-7:]
    assert dump(None, 0) == []
    assert dump(None, 3) == recs[-3:]
    assert dump(None, 10**6) == recs
    assert hostjob.copy_records(str(tmp_path / "none"), None, None, io.BytesIO()) == 0
