"""A damaged state dir through the real CLI (a subprocess, as a user runs it): each kind of
damage to ``jobs.sqlite3`` is one ``error: <file>: <what is wrong>`` line with its fix and exit
status 1, never a ``sqlite3`` traceback; a lock held by another process is said after
:data:`~console.statefiles.LOCK_WAIT_S`, not 30 s; the other SQLite files of the state dir
(``alerts.sqlite3``, ``notify.sqlite3``) are said the same way; a node's log archive that is
a directory or missing is named in a warning and the other node's lines are shown (issue 20,
1.4).

The commands run on the ``local`` profile with no Docker engine: the store is opened before
any host is asked, so these need no test host.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from console.jobs.store import JobRecord, NodeRecord, Store
from remote.docker import LogLine

ROOT = Path(__file__).resolve().parents[2]


def gpuconsole(tmp: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUCONSOLE_PROFILE"}
    env.update(
        PYTHONPATH=str(ROOT),
        GPUCONSOLE_STATE_DIR=str(state),
        GPUCONSOLE_CONFIG_DIR=str(tmp / "config"),
        GPUCONSOLE_CACHE_DIR=str(tmp / "cache"),
        DOCKER_HOST=f"unix://{tmp / 'no-docker.sock'}",
    )
    return subprocess.run(
        [sys.executable, "-m", "console.cli", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def a_store(state: Path, jobs: int = 200) -> Path:
    """A real job store with ``jobs`` finished jobs (pages enough to damage)."""
    store = Store(state)
    for i in range(jobs):
        job = JobRecord(
            id=f"job{i:04d}-abcdef",
            name=f"train-{i}",
            profile="local",
            profile_source=None,
            spec={"name": f"train-{i}", "x": "y" * 200},
            spec_hash="h",
            created_at=1.0 + i,
            node_count=1,
            state="succeeded",
            exit_code=0,
            nodes=[
                NodeRecord(
                    f"job{i:04d}-abcdef", 0, "local", f"c{i}", state="succeeded", exit_code=0
                )
            ],
        )
        store.add_job(job)
    store.close()
    return state / "jobs.sqlite3"


def random_bytes(state: Path) -> None:
    state.mkdir(parents=True)
    (state / "jobs.sqlite3").write_bytes(os.urandom(16384))


def truncated(state: Path) -> None:
    db = a_store(state)
    os.truncate(db, db.stat().st_size // 3)


def garbled_pages(state: Path) -> None:
    db = a_store(state)
    data = bytearray(db.read_bytes())
    page = 4096
    for off in range(2 * page, len(data)):  # every page but the header and the first
        data[off] = (data[off] * 31 + 7) & 0xFF
    db.write_bytes(bytes(data))


def a_directory(state: Path) -> None:
    (state / "jobs.sqlite3").mkdir(parents=True)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "random bytes": (random_bytes, "damaged, not a readable job store"),
    "truncated": (truncated, "damaged, not a readable job store"),
    "garbled pages": (garbled_pages, "damaged, not a readable job store"),
    "a directory": (a_directory, "is a directory, not a job store"),
}

#: The commands that open the job store (a dry run does not: it reads the hosts only).
COMMANDS = {"ps": ("ps",), "logs": ("logs", "job0001")}


def said_once(p: subprocess.CompletedProcess[str], db: Path, what: str) -> None:
    """One ``error: <db>: <what>`` line and one fix line; nothing else on stderr."""
    where = f"exit {p.returncode}\n{p.stderr[-3000:]}"
    for raw in ("Traceback", "DatabaseError", "OperationalError", "IsADirectoryError"):
        assert raw not in p.stderr, where
    assert p.returncode == 1, where
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2, where
    assert lines[0].startswith(f"error: {db}: {what}"), where
    assert lines[1].startswith("  fix: "), where


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_job_store_is_one_error_line(tmp_path: Path, damage: str, command: str) -> None:
    state = tmp_path / "state"
    make, what = DAMAGE[damage]
    make(state)
    p = gpuconsole(tmp_path, state, *COMMANDS[command])
    said_once(p, state / "jobs.sqlite3", what)
    if damage != "a directory":
        assert "mv " in p.stderr and "`gpuconsole ps` finds the jobs" in p.stderr


@pytest.fixture
def lock_holder(tmp_path: Path) -> Iterator[Path]:
    """Another process holding the job store's write lock (a stuck gpuconsole, or a
    ``sqlite3`` shell left in a transaction)."""
    state = tmp_path / "state"
    db = a_store(state, jobs=3)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"db = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "db.execute('BEGIN EXCLUSIVE')\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    try:
        yield db
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


@pytest.mark.parametrize("command", ["ps", "logs"])
def test_a_store_locked_by_another_process_is_said(
    tmp_path: Path, lock_holder: Path, command: str
) -> None:
    p = gpuconsole(tmp_path, lock_holder.parent, *COMMANDS[command])
    said_once(p, lock_holder, "locked by another process")
    assert "another gpuconsole" in p.stderr and "fuser" in p.stderr


def test_a_lock_held_briefly_is_waited_for(tmp_path: Path) -> None:
    """Normal concurrent use: another gpuconsole's short write is waited for, not an error."""
    state = tmp_path / "state"
    db = a_store(state, jobs=3)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, time\n"
            f"db = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "print('held', flush=True)\n"
            "time.sleep(1.0)\n"
            "db.execute('COMMIT')\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    p = gpuconsole(tmp_path, state, "logs", "job0001")
    holder.wait(timeout=30)
    assert "locked" not in p.stderr, p.stderr
    assert "job0001" in p.stderr or p.returncode == 0, p.stderr  # the job was found


@pytest.fixture
def read_only_state(tmp_path: Path) -> Iterator[Path]:
    """A state dir on a read-only mount (a tmpfs with a real store, remounted read-only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(state)], check=True)
    try:
        a_store(state, jobs=3)
        subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        yield state
    finally:
        subprocess.run(["umount", str(state)], check=True)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_state_dir_is_said(tmp_path: Path, read_only_state: Path, command: str) -> None:
    p = gpuconsole(tmp_path, read_only_state, *COMMANDS[command])
    said_once(p, read_only_state / "jobs.sqlite3", "cannot be written")
    assert "read-only" in p.stderr and "GPUCONSOLE_STATE_DIR" in p.stderr


@pytest.mark.parametrize(
    "name,opener",
    [
        ("alerts.sqlite3", "from console.alerts.store import AlertStore as S; S(root)"),
        (
            "notify.sqlite3",
            "from console.watch.notify import Ledger as S; S(root / 'notify.sqlite3')",
        ),
    ],
)
@pytest.mark.parametrize("damage", ["random bytes", "a directory"])
def test_the_other_state_files_are_said_the_same_way(
    tmp_path: Path, name: str, opener: str, damage: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    if damage == "a directory":
        (state / name).mkdir()
        what = "is a directory"
    else:
        (state / name).write_bytes(os.urandom(16384))
        what = "damaged"
    code = (
        "import sys\nfrom pathlib import Path\nfrom console.errors import StateError\n"
        f"root = Path({str(state)!r})\n"
        f"try:\n    {opener}\nexcept StateError as e:\n"
        "    print(e.message); print(e.hint); sys.exit(1)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    message, hint = p.stdout.splitlines()[:2]
    assert message.startswith(f"{state / name}: {what}"), p.stdout
    assert "mv " in hint, p.stdout


def test_alerts_command_says_a_damaged_alert_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "alerts.sqlite3").write_bytes(os.urandom(16384))
    p = gpuconsole(tmp_path, state, "alerts")
    said_once(p, state / "alerts.sqlite3", "damaged, not a readable alert store")


def two_node_job(state: Path) -> None:
    """A finished two-node job whose containers are gone (``rm``): its logs are the
    archives'."""
    store = Store(state)
    job = JobRecord(
        id="twonode-123456",
        name="two",
        profile="local",
        profile_source=None,
        spec={"name": "two"},
        spec_hash="h",
        created_at=time.time(),
        node_count=2,
        state="succeeded",
        exit_code=0,
        removed_at=time.time(),
        nodes=[
            NodeRecord("twonode-123456", r, "local", f"c{r}", state="succeeded", exit_code=0)
            for r in (0, 1)
        ],
    )
    store.add_job(job)
    for r in (0, 1):
        store.archive(
            job.id,
            r,
            [
                LogLine(1_700_000_000_000_000_000 + i * 10 + r, f"node {r} line {i}")
                for i in range(5)
            ],
        )
    store.close()


@pytest.mark.parametrize("damage", ["a directory", "missing"])
def test_a_node_archive_that_cannot_be_read_is_named_and_the_other_node_shown(
    tmp_path: Path, damage: str
) -> None:
    state = tmp_path / "state"
    two_node_job(state)
    archive = state / "logs" / "twonode-123456" / "node1.log"
    archive.unlink()
    if damage == "a directory":
        archive.mkdir()
    p = gpuconsole(tmp_path, state, "logs", "twonode-123456")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"[n0] node 0 line {i}" for i in range(5)]
    warning = p.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("warning: n1 on local: "), p.stderr
    if damage == "a directory":
        assert f"{archive}: is a directory, not a log archive" in warning[0]
    else:
        assert f"no log archive ({archive} is missing)" in warning[0]


def test_a_garbled_record_is_damage_not_a_traceback(tmp_path: Path) -> None:
    """Garbled pages can also read back as a record with broken JSON."""
    state = tmp_path / "state"
    db = a_store(state, jobs=3)
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET spec_json='{\"name\": ' WHERE id='job0001-abcdef'")
    con.commit()
    con.close()
    p = gpuconsole(tmp_path, state, "logs", "job0001")
    said_once(p, db, "damaged, not a readable job store (a record cannot be read")
