"""A full state disk, for real: the state dir is a small tmpfs that the test fills while a
real ``submit --follow`` runs on test host a (issue 20, 1.3).

The follow goes on to stdout with one warning line naming the archive and the fix, says when
the archive is written again once space is back, and ends with the job's exit code; the
archive then holds every line once (no repeat, no partial line), as ``logs`` shows. With the
disk full from the start, ``submit`` is one error line naming the job store, exit 1, and no
container is created.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import CLI, REPO, job_containers, wait_for


def fill(path: Path) -> Path:
    """Write ``path`` until its filesystem has no space left; returns it."""
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    small = b"\0" * 512  # what is left in part of a block
    with open(path, "ab", buffering=0) as f:
        for _ in range(256):
            try:
                f.write(small)
            except OSError:
                break
    return path


@pytest.fixture
def small_state_dir(cli: CLI) -> Iterator[Path]:
    """The CLI's state dir is a 16 MiB tmpfs of its own (we are root)."""
    cli.state_dir.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(cli.state_dir)],
        check=True,
    )
    try:
        yield cli.state_dir
    finally:
        # the store goes with the tmpfs: a copy beside it keeps the test's jobs known to the
        # conftest's container cleanup, which runs after this
        db = cli.state_dir / "jobs.sqlite3"
        if db.exists():
            kept = cli.tmp / "store-of-the-tmpfs"
            kept.mkdir(exist_ok=True)
            shutil.copy(db, kept / "jobs.sqlite3")
        subprocess.run(["umount", "-l", str(cli.state_dir)], check=False)


def step_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if re.search(r"step \d+/1200 loss", ln)]


def test_the_follow_goes_on_through_a_full_disk_and_the_archive_has_no_repeat(
    cli: CLI, small_state_dir: Path
) -> None:
    spec = cli.spec(
        "fulldisk",
        args=[
            "--steps",
            "1200",
            "--out",
            "/out",
            "--workers",
            "0",
            "--step-sleep",
            "0.02",
            "--ckpt-every",
            "0",
        ],
    )
    proc = subprocess.Popen(
        cli.argv("submit", str(spec), "--follow"),
        env=cli.env(),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    got: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for ln in proc.stdout:
            got.append(ln.rstrip("\n"))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    filler = small_state_dir / "filler"
    try:
        wait_for(lambda: len(step_lines(got)) >= 300, timeout=180)
        fill(filler)
        at_full = len(step_lines(got))
        wait_for(lambda: len(step_lines(got)) >= at_full + 400, timeout=120)
        filler.unlink()  # space is back while the job still runs
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        filler.unlink(missing_ok=True)
    t.join(timeout=10)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "Traceback" not in err, err
    assert proc.returncode == 0, err
    (job_dir,) = (small_state_dir / "logs").iterdir()
    job_id = job_dir.name
    archive = small_state_dir / "logs" / job_id / "node0.log"
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        f"warning: n0 on a: cannot archive its log: {archive}: no space left on its "
        f"filesystem; the follow goes on (fix: free space on the filesystem of "
        f"{archive.parent} (`df -h {archive.parent}`), or set GPUCONSOLE_STATE_DIR to a "
        "folder on another one)"
    ], err
    assert "n0 on a: its log is archived again" in err.splitlines(), err
    # stdout: every step of both ranks, once
    steps = step_lines(got)
    assert len(steps) == 2400 and len(set(steps)) == 2400
    # the archive: whole lines only, none twice, all of them
    raw = archive.read_bytes()
    assert raw.endswith(b"\n")
    archived = raw.split(b"\n")[:-1]
    assert [ln for ln, c in Counter(archived).items() if c > 1] == []
    steps_archived = step_lines([ln.split(b" ", 1)[1].decode() for ln in archived])
    assert len(steps_archived) == 2400 and len(set(steps_archived)) == 2400
    logs = cli.run("logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert sorted(step_lines(logs.stdout.splitlines())) == sorted(steps)


def test_submit_on_a_full_disk_is_one_error_line_and_launches_nothing(
    cli: CLI, small_state_dir: Path, engine: docker.DockerClient
) -> None:
    fill(small_state_dir / "filler")
    spec = cli.spec("fullsubmit")
    p = cli.run("submit", str(spec))
    db = small_state_dir / "jobs.sqlite3"
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [
        f"error: {db}: no space left on its filesystem",
        f"  fix: free space on the filesystem of {small_state_dir} (`df -h "
        f"{small_state_dir}`), or set GPUCONSOLE_STATE_DIR to a folder on "
        "another one",
    ], p.stderr
    assert job_containers(engine, job_name="fullsubmit") == []
    assert os.path.exists(small_state_dir / "filler")
