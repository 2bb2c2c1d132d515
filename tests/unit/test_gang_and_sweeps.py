"""Gang supervisor command lines and outcome files; local temp-dir and host staging sweeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from remote import transport
from remote.gang import (
    MOUNT_DIR,
    TEARDOWN_EXIT_CODE,
    GangOutcome,
    parse_marker,
    supervisor_files,
    unwrap,
    wrap,
)

TORCHRUN = [
    "torchrun",
    "--nnodes",
    "2",
    "--rdzv-endpoint",
    "10.0.0.1:29400",
    "--rdzv-conf",
    "is_host=1",
    "train.py",
    "--lr",
    "0.1",
]


def test_node0_hosts_the_store_and_torchrun_there_does_not() -> None:
    cmd = wrap(
        TORCHRUN, node_rank=0, nnodes=2, endpoint="10.0.0.1:29400", run_id="j-abc123", grace=7.0
    )
    assert cmd[:2] == ["python3", f"{MOUNT_DIR}/gang.py"]
    assert cmd[cmd.index("--") - 1] == "--host-store"
    assert cmd[cmd.index("--store") + 1] == "10.0.0.1:29400"
    assert cmd[cmd.index("--grace") + 1] == "7"
    inner = unwrap(cmd)
    assert inner == [*TORCHRUN[:6], "is_host=0", *TORCHRUN[7:]]


def test_other_nodes_keep_torchrun_unchanged() -> None:
    cmd = wrap(
        [*TORCHRUN[:6], "is_host=0,read_timeout=90", *TORCHRUN[7:]],
        node_rank=1,
        nnodes=2,
        endpoint="10.0.0.1:29400",
        run_id="j-abc123",
    )
    assert "--host-store" not in cmd
    assert unwrap(cmd)[6] == "is_host=0,read_timeout=90"
    assert unwrap(TORCHRUN) == TORCHRUN  # not wrapped: as is


def test_marker_of_a_torn_down_node() -> None:
    raw = json.dumps(
        {
            "node": 0,
            "outcome": "teardown",
            "torchrun_exit": 1,
            "exit_status": TEARDOWN_EXIT_CODE,
            "cause": {"node": 1, "exit_code": 1, "kind": "failed"},
        }
    ).encode()
    got = parse_marker(raw)
    assert got == GangOutcome(0, "teardown", 1, 75, 1, "failed", 1)
    assert got.describe() == "stopped by gang teardown: node 1 failed (exit code 1)"
    assert parse_marker(b"not json") is None
    assert parse_marker(b'{"outcome": "teardown"}') is None
    assert parse_marker(b'{"node": 1, "outcome": "exploded"}') is None  # not the supervisor's
    lost = parse_marker(
        b'{"node": 1, "outcome": "teardown", "torchrun_exit": 143, "exit_status": 75,'
        b' "cause": {"node": 0, "exit_code": null, "kind": "store_lost"}}'
    )
    assert lost is not None and lost.cause_kind == "store_lost" and lost.cause_exit_code is None
    assert lost.describe() == "stopped by gang teardown: node 0's rendezvous store went away"
    odd = parse_marker(b'{"node": 1, "outcome": "teardown", "cause": {"kind": "meteor"}}')
    assert odd is not None and odd.cause_kind is None


def test_supervisor_file_matches_the_shipped_constants() -> None:
    src = supervisor_files()["gang.py"].decode()
    assert f"TEARDOWN_EXIT_CODE = {TEARDOWN_EXIT_CODE}" in src
    assert 'MARKER_FILE = "/tmp/gpuconsole-gang.json"' in src


def test_supervisor_refuses_a_command_line_without_torchrun() -> None:
    script = Path(transport.__file__).parent / "agent" / "gang.py"
    res = subprocess.run(
        [sys.executable, str(script), "--node-rank", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode != 0 and "usage: gang.py" in res.stderr


def test_sweep_removes_only_folders_of_dead_processes(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f"gpuconsole-{dead.pid}-sock-a-xyz"
    alive = tmp_path / f"gpuconsole-{os.getpid()}-workdir-abc"
    other = tmp_path / "gpuconsole-a-old"
    for d in (gone, alive, other):
        d.mkdir()
    (gone / "docker.sock").write_text("")
    assert transport.sweep_local_temp(str(tmp_path)) == [str(gone)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])


def test_stale_staging_names() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = transport.staging_name("0123456789abcdef")
    assert not transport.stale_staging(name, 0)  # this process: alive
    parts = name.split(".")
    parts[3] = str(dead.pid)
    assert transport.stale_staging(".".join(parts), 0)
    parts[2] = "another-machine"
    assert not transport.stale_staging(".".join(parts), 3600)
    assert transport.stale_staging(".".join(parts), transport.STAGING_MAX_AGE_S + 1)
