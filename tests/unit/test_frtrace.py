"""PyTorch's Flight Recorder analyser (``fr_trace``): the dumps handed to it, what it prints
read back (its real output here, PyTorch 2.13 over gloo dumps, and the public cases of
tests/data/stacks/frtrace/cases/), and how a capture carries the ranks' dumps and the
analyser's verdict."""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import json
import pickle
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import remote.agent.stacks as agent
from console.stacks.analysis import analyse
from console.stacks.frtrace import (
    FrTrace,
    dump_files,
    entries_table,
    from_output,
    looks_like_fr_trace,
    parse_fr_trace,
    pending_of,
)
from console.stacks.model import Capture, capture_from_json, parse_node

DATA = Path(__file__).resolve().parents[1] / "data" / "stacks" / "frtrace"


def _dumps(case: str) -> dict[int, bytes]:
    return {
        int(p.name.rsplit("_", 1)[1]): p.read_bytes()
        for p in (DATA / case).glob("gpuconsole_fr_rank_*")
    }


def test_gloo_dumps_get_their_group_named_for_the_analyser() -> None:
    """PyTorch 2.13's gloo dumps leave pg_config's name empty (the analyser then fails with
    KeyError ('0', 1)); the files handed over name it from the entries, nothing else moves."""
    raw = _dumps("gloo-2rank-missing")
    before = pickle.loads(raw[1])
    assert before["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}
    files = dump_files(raw)
    assert sorted(files) == ["gpuconsole_fr_rank_0", "gpuconsole_fr_rank_1"]
    after = pickle.loads(files["gpuconsole_fr_rank_1"])
    assert after["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    assert after["entries"] == before["entries"] and after["pg_status"] == before["pg_status"]
    # a dump whose group is named already is handed over as it is
    again = dump_files({1: files["gpuconsole_fr_rank_1"]})
    assert again["gpuconsole_fr_rank_1"] == files["gpuconsole_fr_rank_1"]
    assert dump_files({0: b"not a pickle"}) == {"gpuconsole_fr_rank_0": b"not a pickle"}


def test_the_analysers_verdicts_on_real_gloo_dumps() -> None:
    missing = parse_fr_trace((DATA / "gloo-2rank-missing" / "fr_trace.txt").read_text())
    assert [(f.kind, f.seq, f.group, f.op, f.missing, f.expected) for f in missing] == [
        ("not_joined", 4, "0:default_pg", "gloo:all_reduce", (1,), (0, 1))
    ]
    assert missing[0].where == "<module> (make_gloo_dumps.py:33)"
    assert missing[0].line() == (
        "rank 1 never joined collective 4 of process group 0:default_pg (all_reduce, "
        "scheduled), which rank 0 entered; called at <module> (make_gloo_dumps.py:33)"
    )
    op = parse_fr_trace((DATA / "gloo-2rank-op" / "fr_trace.txt").read_text())
    assert [(f.kind, f.seq, f.op) for f in op] == [("mismatch", 4, "gloo:broadcast")]
    assert op[0].culprits[0][0] == 0
    assert op[0].culprits[0][1].startswith("COLLECTIVE_TYPE_MISMATCH: Expected collective type")
    assert op[0].line() == (
        "rank 0 called all_reduce where rank 1 called broadcast, at collective 4 of process "
        "group 0:default_pg (scheduled); called at <module> (make_gloo_dumps.py:36)"
    )


@pytest.mark.parametrize(
    ("case", "kind", "seq", "missing"),
    [
        ("frt-001", "not_joined", 5, (1,)),  # main between 2.5 and 2.6: "... 5 at entry 4"
        ("frt-003", "not_joined", 31117, (3, 4, 5, 6, 7)),  # "collective: sequence number:"
        ("frt-004", "not_joined", 4, (1,)),  # 2.6 on, cut before the stack trace
        ("frt-005", "not_joined", None, (1,)),  # -j table, hand-aligned columns
        ("frt-006", "not_joined", None, (1,)),  # -j table
    ],
)
def test_public_cases(case: str, kind: str, seq: int | None, missing: tuple[int, ...]) -> None:
    text = (DATA / "cases" / f"{case}.txt").read_text()
    assert looks_like_fr_trace(text)
    found = parse_fr_trace(text)
    assert [(f.kind, f.seq, f.missing) for f in found] == [(kind, seq, missing)]


def test_between_versions_expected_ranks_is_a_count_not_ranks() -> None:
    (f,) = parse_fr_trace((DATA / "cases" / "frt-001.txt").read_text())
    assert f.expected == () and f.where == "<module> (crash.py:44)"
    assert f.line().startswith("rank 1 never joined collective 5 of process group 0:default_pg")


def test_the_j_table_reads_cells_by_their_column() -> None:
    table = entries_table((DATA / "cases" / "frt-005.txt").read_text())
    assert table == {
        0: ["all_reduce", "all_reduce", "all_reduce", "broadcast", "all_reduce"],
        1: ["all_reduce", "all_reduce", "all_reduce", "broadcast"],
    }
    # ranks in step (one row each, --selected-ranks): no verdict
    assert parse_fr_trace((DATA / "cases" / "frt-002.txt").read_text()) == []


def test_older_one_line_blocks_from_pytorch_2_5() -> None:
    """2.5 printed each block with ``print(a, b, ...)``: one line, its fields joined by
    spaces (torch/distributed/flight_recorder's predecessor, tools/flight_recorder; the
    format strings in tests/data/stacks/frtrace/cases/README.md)."""
    text = (
        "Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce  "
        "Missing ranks are {2, 3}  [[8]] [[8]] 4 scheduled  \n"
        "Collective 12 errors for group 0:default_pg collective nccl:broadcast  [[8]] [[8]] 4 "
        "scheduled  \n"
        "Found errors: Error rank 1, Error type: COLLECTIVE_TYPE_MISMATCH, Detail finding "
        "Type 'broadcast' and 'all_gather' do not match\n"
    )
    a, b = parse_fr_trace(text)
    assert (a.kind, a.group, a.op, a.missing) == (
        "not_joined",
        "0:default_pg",
        "nccl:all_reduce",
        (2, 3),
    )
    assert (b.kind, b.op, b.culprits[0][0]) == ("mismatch", "nccl:broadcast", 1)
    assert "Type 'broadcast' and 'all_gather' do not match" in b.culprits[0][1]


def test_a_failed_run_is_one_line_with_its_error() -> None:
    out = (
        "tabulate is not installed. Proceeding without it.\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/flight_recorder/'
        'components/builder.py", line 212, in build_collectives\n'
        "    pg_name = _pg_guids[(original_pg_name, first_rank)]\n"
        "KeyError: ('0', 1)\n"
    )
    fr = from_output((0, 1), 1, out, "on a, in the job's image")
    assert fr.error == "failed (exit 1): KeyError: ('0', 1)"
    assert fr.lines() == ["PyTorch's fr_trace: failed (exit 1): KeyError: ('0', 1)"]
    old = from_output((0,), 1, "/usr/bin/python3: No module named torch.distributed.flight", "x")
    assert old.error is not None and "PyTorch 2.6 or later" in old.error
    clean = from_output((0, 1), 0, "tabulate is not installed. Proceeding without it.\n", "x")
    assert clean.findings == () and clean.lines() == [
        "PyTorch's fr_trace (x) over the dumps of ranks 0-1: every collective matched across "
        "the ranks, and every one completed"
    ]


def _doc_with_dump(tmp_path: Path, data: bytes) -> dict[str, object]:
    """A node document whose rank 0 had no dump pipe and left a dump file (what the node
    script reads then: :func:`remote.agent.stacks.earlier_dump`)."""
    (tmp_path / "gpuconsole_fr_rank_0").write_bytes(data)
    record = agent.earlier_dump(str(tmp_path), "/gpuconsole_fr_rank_0", "no dump pipe")
    return {
        "version": 1,
        "processes": [
            {
                "pid": 15,
                "role": "rank",
                "rank": 0,
                "local_rank": 0,
                "world_size": 2,
                "cmdline": ["/opt/venv/bin/python3", "-u", "train.py"],
                "exe": "/opt/venv/bin/python3",
                "threads": [],
                "flight_recorder": record,
            }
        ],
    }


def test_a_dump_written_before_travels_whole_and_is_named_so(tmp_path: Path) -> None:
    raw = _dumps("gloo-2rank-missing")[0]
    doc = _doc_with_dump(tmp_path, raw)
    rec = doc["processes"][0]["flight_recorder"]  # type: ignore[index]
    assert rec["source"] == "file" and rec["age_s"] >= 0  # type: ignore[index]
    assert zlib.decompress(base64.b64decode(rec["dump_zlib_b64"])) == raw  # type: ignore[index]
    node = parse_node(0, "a", json.loads(json.dumps(doc)))
    assert node.dumps == {0: raw}
    assert node.processes[0].exe == "/opt/venv/bin/python3"
    assert node.processes[0].flight is not None and node.processes[0].flight.source == "file"
    capture = Capture("j1", 0.0, [node])
    capture.fr_trace = FrTrace((0,), error="not run: x")
    flight = analyse(capture).flight
    assert any(
        line.startswith("rank 0: no dump pipe, so the dump read is one written before, ")
        for line in flight
    ), flight
    assert flight[-1] == "PyTorch's fr_trace: not run: x"
    # saved without the dump's bytes, read back with the analyser's verdict
    saved = json.loads(json.dumps(capture.to_json()))
    assert "dumps" not in saved["nodes"][0]
    back = capture_from_json(saved)
    assert back.fr_trace == capture.fr_trace and back.dumps() == {}
    assert back.nodes[0].processes[0].flight == node.processes[0].flight


def test_no_dump_and_no_pipe_says_why(tmp_path: Path) -> None:
    assert agent.earlier_dump(str(tmp_path), "/gpuconsole_fr_rank_3", "no dump pipe x") == {
        "path": "/gpuconsole_fr_rank_3",
        "error": "no dump pipe x",
    }


def test_one_capture_at_a_time_on_a_host() -> None:
    """A second capture waits for the first (py-spy attaches to a process once at a time),
    and gives up with ``None`` when the first holds on."""
    with open(agent.__file__, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert agent.one_at_a_time(0.3) is None
    got = agent.one_at_a_time(0.3)
    assert got is not None
    got.close()


def _started(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``argv`` running, its command line visible in /proc (the exec done)."""
    p = subprocess.Popen(argv, env=env)
    for _ in range(250):
        if agent.Proc(p.pid).cmdline[-1:] == argv[-1:]:
            return p
        time.sleep(0.02)
    raise AssertionError(f"{argv} never showed in /proc")


def test_secret_values_are_masked_in_reported_command_lines() -> None:
    """A rank started with a secret on its command line (a spec's ``${VAR}`` in ``args``),
    and a child it started with a clean environment and the value in its arguments: the
    node script reports ``${NAME}`` in their place, the values read from the environments
    of every process it sees (the console passes names only, so values never leave the
    node)."""
    secret = "hf_" + "x7Qz" * 6
    code = "import time; time.sleep(30)"
    rank = _started(
        [sys.executable, "-c", code, f"--token={secret}", "ab"],
        {"PATH": "/usr/bin:/bin", "HF_TOKEN": secret, "SHORT": "ab"},
    )
    child = _started(
        [sys.executable, "-c", code, f"https://user:{secret}@huggingface.co/x"],
        {"PATH": "/usr/bin:/bin"},
    )
    try:
        procs = [agent.Proc(rank.pid), agent.Proc(child.pid)]
        values = agent.secret_values(procs, ["HF_TOKEN", "SHORT", "UNSET"])
        assert values == [("HF_TOKEN", secret)]  # 2 characters are never masked
        assert agent.masked(procs[0], values)[-2:] == ["--token=${HF_TOKEN}", "ab"]
        assert agent.masked(procs[1], values)[-1] == "https://user:${HF_TOKEN}@huggingface.co/x"
        assert agent.masked(procs[0], [])[-2] == f"--token={secret}"
    finally:
        for p in (rank, child):
            p.kill()
            p.wait()


NCCL_TIMEOUT = DATA.parent / "flightrec" / "h100-nccl-watchdog-timeout"


def test_a_real_nccl_watchdog_timeout_dump() -> None:
    """Recorded on an H100 (torch 2.11, NCCL 2.28; scripts/device/fr_timeout.sh): a 1-rank
    job's all_reduce waited behind a kernel spinning for minutes, the watchdog timed it out
    after 15 s and wrote the dump (TORCH_NCCL_DUMP_ON_TIMEOUT). PyTorch's analyser printed
    nothing (one rank matches itself); the dump's pg_status still says collective 6 was
    enqueued and never completed, which is what gpuconsole says."""
    dump = (NCCL_TIMEOUT / "gpuconsole_fr_rank_0").read_bytes()
    log = (NCCL_TIMEOUT / "job.log").read_text()
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6" in log
    assert (NCCL_TIMEOUT / "fr_trace.txt").read_text() == ""
    assert dump_files({0: dump}) == {"gpuconsole_fr_rank_0": dump}  # NCCL names its group
    fr = from_output((0,), 0, "", "on a, in the job's image", pending_of({0: dump}))
    assert fr.pending == ((0, "0", 6, "nccl:all_reduce"),)
    assert fr.lines() == [
        "PyTorch's fr_trace (on a, in the job's image) over the dumps of rank 0: one rank: "
        "nothing to compare; collective 6 of process group 0 (all_reduce) never completed on "
        "rank 0: every rank that should entered it, so it waits on something else (work "
        "queued before it on the GPU, the network, NCCL)"
    ]
    # the node script read that file as a dump written before (the pipe was gone)
    ended = json.loads((NCCL_TIMEOUT / "stacks-doc-ended.json").read_text())
    assert ended["source"] == "file" and ended["summary"]["pg_status"]["0"] == {
        "last_enqueued_collective": 6,
        "last_started_collective": -1,
        "last_completed_collective": 5,
    }
    assert zlib.decompress(base64.b64decode(ended["dump_zlib_b64"])) == dump
    # while it hung, the pipe gave the dump, and the rank's Python is its venv's
    hung = parse_node(0, "gpu", json.loads((NCCL_TIMEOUT / "stacks-doc-hung.json").read_text()))
    (rank,) = hung.ranks
    assert rank.exe == "/opt/torch/.venv/bin/python3"
    assert rank.flight is not None and rank.flight.source == "pipe"
    assert 0 in hung.dumps
    assert pending_of(hung.dumps) == ((0, "0", 6, "nccl:all_reduce"),)
    # a gloo job's entries stay "scheduled"; pg_status tells what completed
    assert pending_of(_dumps("gloo-2rank-missing")) == ((0, "0", 4, "gloo:all_reduce"),)


def test_a_job_that_ended_is_read_from_its_ranks_dumps() -> None:
    """No rank runs: each dumped rank is a rank without a stack whose Flight Recorder summary
    is read as a running rank's (the collective rank 1 never entered), beside PyTorch's
    verdict; the header says the dumps were read."""
    from console.service import _ended_ranks
    from console.stacks.render import render

    dumps = _dumps("gloo-2rank-missing")
    node = dataclasses.replace(_ended_ranks(0, "a", dumps, 2), error="not running (failed)")
    capture = Capture("j1", 0.0, [node])
    capture.fr_trace = from_output(
        (0, 1),
        0,
        (DATA / "gloo-2rank-missing" / "fr_trace.txt").read_text(),
        "on a, in the job's image",
        pending_of(dumps),
    )
    a = analyse(capture)
    assert a.groups == [] and a.missing == []
    assert a.flight[0] == (
        "process group 0: rank 0 entered collective 4 (gloo:all_reduce, <module> "
        "(make_gloo_dumps.py:33)) that rank 1 never did (last entered: 3)"
    )
    text = render(capture, a)
    assert text.startswith("job j1: no rank runs; read the Flight Recorder dumps its ranks left")
    assert "  node 0 (a): not running (failed)" in text
    assert "rank 1 never joined collective 4 of process group 0:default_pg" in text
    assert a.partial
