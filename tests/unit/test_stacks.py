"""Per-rank stacks: the node script (remote/agent/stacks.py) over real processes read by the
real py-spy, the typed records, and the reading of a capture (groups, the odd ones out, the
likely cause).

The recorded capture is real: a 2-node x 2-rank gloo job on the test hosts
(scripts/examples/stuck_rank.py, rank 1 held in ``load_next_shard`` at step 3) read by
``gpuconsole stacks`` through its Docker sidecars."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.stacks.analysis import analyse, describe_frames, ranks_text
from console.stacks.model import Capture, Frame, ProcessStack, capture_from_json, parse_node
from console.stacks.render import analysis_json, render
from remote.stacks import elf_machine, parse_document, py_spy_for

DATA = Path(__file__).resolve().parents[1] / "data" / "stacks"
SCRIPT = Path(__file__).resolve().parents[2] / "remote" / "agent" / "stacks.py"
PY_SPY = Path(sys.executable).parent / "py-spy"


def recorded() -> Capture:
    return capture_from_json(
        json.loads((DATA / "docker-gloo-2x2-rank1-stuck.capture.json").read_text())
    )


# --- the reading of a real capture ---------------------------------------------------------


def test_the_stuck_rank_is_named_first_and_the_others_are_one_group() -> None:
    capture = recorded()
    a = analyse(capture)
    assert [g.ranks for g in a.groups] == [(1,), (0, 2, 3)]
    assert [g.ranks for g in a.odd] == [(1,)]
    assert [f.text for f in a.findings] == [
        "rank 1 is not in the collective (all_reduce) that ranks 0, 2-3 wait in: in "
        "load_next_shard (stuck_rank.py:21) <- train (stuck_rank.py:28) <- stuck_rank.py:54"
    ]
    assert a.summary() == a.findings[0].text
    assert [f.kind for f in a.findings] == ["outside_collective"]
    main = a.groups[-1]
    assert main.collective == "all_reduce"
    assert (
        main.title()
        == "ranks 0, 2-3 (3): in all_reduce <- train (stuck_rank.py:29) <- stuck_rank.py:54"
    )
    assert [(p.tag, p.host, p.pid) for p in main.processes] == [
        ("[n0 r0]", "a", 15),
        ("[n1 r2]", "b", 13),
        ("[n1 r3]", "b", 14),
    ]
    # torchrun's agents apart, not among the ranks; gang supervisor and init not read
    assert [(p.node_rank, p.pid) for g in a.agents for p in g.processes] == [(0, 10), (1, 9)]
    assert a.agents[0].where.startswith("in SimpleElasticAgent._invoke_run (")
    assert a.world_size == 4 and a.missing == [] and a.problems == [] and not a.partial


def test_the_text_shows_causes_groups_members_and_frames() -> None:
    capture = recorded()
    text = render(capture, analyse(capture))
    lines = text.splitlines()
    assert lines[0].startswith("job stuck-9271f5: 4 ranks on 2 nodes, taken ")
    assert lines[0].endswith("(py-spy 0.4.3)")
    assert lines[2].startswith("likely cause: rank 1 is not in the collective (all_reduce)")
    assert "odd one out: rank 1: in load_next_shard (stuck_rank.py:21)" in text
    assert "  [n0 r0] a pid 15, [n1 r2] b pid 13, [n1 r3] b pid 14" in lines
    assert "    all_reduce (torch/distributed/distributed_c10d.py:3252)" in lines
    assert (
        text.index("odd one out") < text.index("ranks 0, 2-3 (3)") < text.index("torchrun agents")
    )


def test_json_round_trip_and_analysis_json() -> None:
    capture = recorded()
    again = capture_from_json(json.loads(json.dumps(capture.to_json())))
    assert again == capture
    data = analysis_json(analyse(capture))
    assert data["odd"] == [[1]] and data["groups"][-1]["ranks"] == [0, 2, 3]
    assert data["groups"][-1]["members"][0] == {
        "node": 0,
        "host": "a",
        "rank": 0,
        "pid": 15,
        "gpu": None,
    }
    assert data["partial"] is False


def _with_frames(capture: Capture, rank: int, frames: tuple[Frame, ...]) -> Capture:
    def swap(p: ProcessStack) -> ProcessStack:
        if p.role != "rank" or p.rank != rank or p.threads is None:
            return p
        main = dataclasses.replace(p.threads[0], frames=frames)
        return dataclasses.replace(p, threads=(main, *p.threads[1:]))

    nodes = [
        dataclasses.replace(n, processes=tuple(swap(p) for p in n.processes)) for n in capture.nodes
    ]
    return dataclasses.replace(capture, nodes=nodes)


def _collective_frames(capture: Capture, name: str) -> tuple[Frame, ...]:
    main = next(p for p in capture.processes("rank") if p.rank == 0).main
    assert main is not None
    return (dataclasses.replace(main.frames[0], name=name, line=4321), *main.frames[1:])


def test_a_rank_in_another_collective_is_a_mismatch() -> None:
    capture = recorded()
    capture = _with_frames(capture, 1, _collective_frames(capture, "broadcast"))
    (finding,) = analyse(capture).findings
    assert finding.kind == "mismatch" and finding.text.startswith(
        "mismatched collectives: rank 1 is in broadcast while ranks 0, 2-3 are in all_reduce"
    )


def test_every_rank_in_the_collective_points_at_the_collective() -> None:
    capture = recorded()
    frames = next(p for p in capture.processes("rank") if p.rank == 0).main.frames  # type: ignore[union-attr]
    capture = _with_frames(capture, 1, frames)
    a = analyse(capture)
    assert [g.ranks for g in a.groups] == [(0, 1, 2, 3)] and a.odd == []
    assert [f.text for f in a.findings] == [
        "every rank read (0-3) is in all_reduce at the same place: if they stay there, the "
        "collective itself is stuck (the network, NCCL, or a rank not read)"
    ]


def test_a_node_not_read_leaves_its_ranks_missing_and_the_capture_partial() -> None:
    capture = recorded()
    capture.nodes[1] = dataclasses.replace(
        capture.nodes[1], processes=(), error="cannot reach b: connection refused"
    )
    a = analyse(capture)
    assert a.missing == [2, 3] and a.partial
    assert a.problems == ["node 1 (b): cannot reach b: connection refused"]
    assert a.findings[-1].text == (
        "ranks 2-3 of 4 are on no node that was read (exited, or on a node that could not be read)"
    )
    assert "not read:\n  node 1 (b): cannot reach b: connection refused" in render(capture, a)


def test_ranks_text_and_where() -> None:
    assert ranks_text([7, 0, 2, 3, 4, 5, 6]) == "0, 2-7"
    assert ranks_text([1]) == "1" and ranks_text([]) == ""
    lib = Frame("wait", "/usr/lib/python3.11/threading.py", "threading.py", 320)
    own = Frame("load", "/workspace/data.py", "data.py", 41)
    top = Frame("<module>", "/workspace/train.py", "train.py", 88)
    assert describe_frames([lib, own, top]) == "in load (data.py:41) <- train.py:88"
    assert describe_frames([lib]) == "in wait (threading.py:320)"
    assert describe_frames([]) == "no Python frame"


# --- the node script over real processes, read by the real py-spy ---------------------------

AGENT = textwrap.dedent(
    """
    # a stand-in for torchrun's agent (its argv names torch.distributed.run): it starts two
    # "ranks" with the environment torchrun gives its workers, world size 3 (rank 2 absent)
    import os, subprocess, sys, time
    rank_py = sys.argv[1]
    for r in (0, 1):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), GROUP_RANK="0", WORLD_SIZE="3")
        subprocess.Popen([sys.executable, rank_py, str(r)], env=env)
    print("started", flush=True)
    time.sleep(120)
    """
)
RANK = textwrap.dedent(
    """
    import multiprocessing, sys, time

    def _worker_loop():
        time.sleep(120)

    def load_next_shard():
        time.sleep(120)

    def step():
        time.sleep(120)

    if __name__ == "__main__":
        if sys.argv[1] == "0":
            multiprocessing.Process(target=_worker_loop).start()
            step()
        else:
            load_next_shard()
    """
)


@pytest.fixture
def fake_job(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "agent.py").write_text(AGENT)
    agent = subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "agent.py"),
            str(tmp_path / "rank.py"),
            "torch.distributed.run",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert agent.stdout is not None and agent.stdout.readline() == b"started\n"
        time.sleep(1.0)  # the ranks reach their sleeps, rank 0 its child
        yield agent.pid
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()


@pytest.mark.skipif(not os.access(PY_SPY, os.X_OK), reason="py-spy is not installed in the venv")
def test_the_node_script_reads_every_role_by_what_torchrun_sets(fake_job: int) -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--py-spy", str(PY_SPY), "--root-pid", str(fake_job)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    doc = parse_document("here", res.stdout, res.stderr)
    assert doc["py_spy"].startswith("py-spy 0.") and doc["error"] is None
    node = parse_node(0, "here", doc, gpus=(4, 5))
    roles = sorted((p.role, p.rank) for p in node.processes)
    assert roles == [("agent", None), ("child", 0), ("rank", 0), ("rank", 1)]
    r0, r1 = node.ranks
    assert (r0.local_rank, r0.gpu, r1.gpu, r1.world_size) == (0, 4, 5, 3)
    assert r1.main is not None and [f.name for f in r1.main.frames[:2]] == [
        "load_next_shard",
        "<module>",
    ]
    child = next(p for p in node.processes if p.role == "child")
    assert child.main is not None and child.main.frames[0].name == "_worker_loop"
    a = analyse(Capture("fake", time.time(), [node]))
    assert a.missing == [2] and a.partial
    # two ranks, two stacks: neither is a majority; the higher rank's listed first
    assert [g.where for g in a.groups] == [
        "in load_next_shard (rank.py:8) <- rank.py:18",
        "in step (rank.py:11) <- rank.py:16",
    ]
    # neither waits in a collective and neither is a majority: no one is blamed
    assert [f.text for f in a.findings] == [
        "rank 2 of 3 is on no node that was read (exited, or on a node that could not be read)"
    ]
    assert [g.processes[0].rank for g in a.children] == [0]


def test_the_script_says_when_py_spy_cannot_run(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--py-spy", str(tmp_path / "missing"), "--root-pid", "1"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    doc = parse_document("here", res.stdout, res.stderr)
    assert doc["error"].startswith("py-spy cannot run here: ")
    assert parse_node(0, "here", doc).error == doc["error"]


def test_a_py_spy_binary_is_chosen_by_the_hosts_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm = tmp_path / "py-spy-arm"
    arm.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 11 + (183).to_bytes(2, "little") + b"\0" * 40)
    assert elf_machine(arm.read_bytes()) == 183 and elf_machine(b"#!/bin/sh\n") is None
    monkeypatch.setenv("GPUCONSOLE_PY_SPY", str(arm))
    assert py_spy_for("aarch64") == arm.read_bytes()
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing else to find
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    with pytest.raises(Exception) as e:
        py_spy_for("x86_64")
    assert "no py-spy binary for a Linux x86_64 host" in str(e.value)
    assert "is not a Linux x86_64 binary" in str(e.value)


# --- the Flight Recorder: a real NCCL dump (H200, torch 2.11) taken through its dump pipe ------

FR_DOC = DATA / "flightrec" / "h200-nccl-1rank.stacks-doc.json"


def real_fr_summary() -> dict[str, object]:
    """The recorded dump (stacks.py --flight-recorder on the device machine, a 1-rank NCCL
    job of stuck_rank.py) summarised by the node script's own reader."""
    import base64

    from remote.agent.stacks import fr_summary

    doc = json.loads(FR_DOC.read_text())
    (rank,) = [p for p in doc["processes"] if p["role"] == "rank"]
    return fr_summary(base64.b64decode(rank["flight_recorder"]["data_b64"]))


def test_the_node_script_reads_a_real_nccl_dump() -> None:
    s = real_fr_summary()
    assert s["version"] == "2.10"
    assert s["pg_status"] == {
        "0": {
            "last_enqueued_collective": 68,
            "last_started_collective": -1,
            "last_completed_collective": 66,
        }
    }
    entries = s["entries"]
    assert isinstance(entries, list) and len(entries) == 24
    assert entries[-1] == {
        "seq": 68,
        "p2p_seq": 0,
        "op": "nccl:all_reduce",
        "state": "completed",
        "pg": "0",
        "pg_desc": "default_pg",
        "sizes": [[1024]],
        "p2p": False,
        "where": "train (stuck_rank.py:29)",
    }


def test_a_dump_with_a_class_in_it_is_refused() -> None:
    import pickle

    from remote.agent.stacks import fr_summary

    with pytest.raises(pickle.UnpicklingError):
        fr_summary(pickle.dumps({"entries": [Path("/x")]}))


def _fr_capture(rank1_summary: dict[str, object]) -> Capture:
    rank0 = {"role": "rank", "pid": 10, "rank": 0, "local_rank": 0, "world_size": 2}
    rank1 = {"role": "rank", "pid": 11, "rank": 1, "local_rank": 1, "world_size": 2}
    doc = {
        "processes": [
            {**rank0, "flight_recorder": {"summary": real_fr_summary()}},
            {**rank1, "flight_recorder": {"summary": rank1_summary}},
        ]
    }
    return Capture("fr", 0.0, [parse_node(0, "gpu1", doc)])


def test_a_rank_that_never_entered_the_collective_is_named() -> None:
    s = real_fr_summary()
    behind = {
        **s,
        "pg_status": {
            "0": {
                "last_enqueued_collective": 67,
                "last_started_collective": -1,
                "last_completed_collective": 66,
            }
        },
        "entries": s["entries"][:-1],  # type: ignore[index]
    }
    assert analyse(_fr_capture(behind)).flight == [
        "process group 0: rank 0 entered collective 68 (nccl:all_reduce, train (stuck_rank.py:29)) "
        "that rank 1 never did (last entered: 67)"
    ]


def test_ranks_calling_different_collectives_are_a_mismatch() -> None:
    s = real_fr_summary()
    entries = [dict(e) for e in s["entries"]]  # type: ignore[attr-defined]
    entries[-1]["op"] = "nccl:broadcast"
    flight = analyse(_fr_capture({**s, "entries": entries})).flight
    assert flight == [
        "process group 0: mismatched collectives at 68: rank 0 nccl:all_reduce; rank 1 "
        "nccl:broadcast"
    ]


def test_ranks_that_agree_say_so_and_a_missing_pipe_is_one_line() -> None:
    assert analyse(_fr_capture(real_fr_summary())).flight == [
        "the 2 rank(s) read entered and completed the same collectives: no divergence in their "
        "buffers"
    ]
    s = real_fr_summary()
    entries = [dict(e) for e in s["entries"]]  # type: ignore[attr-defined]
    entries[-1]["state"] = "started"
    assert analyse(_fr_capture({**s, "entries": entries})).flight == [
        "process group 0: every rank read entered collective 68 (nccl:all_reduce, train "
        "(stuck_rank.py:29)); rank 1 is still in it: if it stays so, the collective itself "
        "waits (the network, NCCL, a rank not read)"
    ]
    why = (
        "no dump pipe /tmp/gpuconsole_fr_pipe_0.pipe (PyTorch makes it for NCCL process groups "
        "only)"
    )
    doc = {
        "processes": [
            {
                "role": "rank",
                "pid": 5,
                "rank": 0,
                "local_rank": 0,
                "flight_recorder": {"path": "/tmp/x", "error": why},
            }
        ]
    }
    capture = Capture("g", 0.0, [parse_node(0, "a", doc)])
    assert analyse(capture).flight == [f"not read: {why}"]
    assert f"  not read: {why}" in render(capture, analyse(capture)).splitlines()


def test_a_real_nccl_node_document_reads_as_one_rank_in_step() -> None:
    """What the node script sent on the device machine (H100, torch 2.11, NCCL 2.28) for a
    1-rank job given gpuconsole's Flight Recorder variables by their current names: the dump
    came through the pipe to TORCH_FR_DUMP_TEMP_FILE and was summarised there."""
    doc = json.loads(
        (DATA / "flightrec" / "h100-nccl-1rank-current-names.stacks-doc.json").read_text()
    )
    node = parse_node(0, "gpu", doc)
    (rank,) = node.ranks
    assert rank.flight is not None and rank.flight.error is None
    assert rank.flight.status == (("0", 69, -1, 67),)
    last = rank.flight.entries[-1]
    assert (last.seq, last.op, last.state, last.where) == (
        69,
        "nccl:all_reduce",
        "completed",
        "train (stuck_rank.py:29)",
    )
    a = analyse(Capture("fr", 0.0, [node]))
    assert a.flight == [
        "the 1 rank(s) read entered and completed the same collectives: no divergence in their "
        "buffers"
    ]


@pytest.mark.skipif(not os.access(PY_SPY, os.X_OK), reason="py-spy is not installed in the venv")
def test_a_node_out_of_time_still_sends_what_it_has(fake_job: int) -> None:
    """With no time left every process is listed with why it was not read; the document is
    printed all the same, and no process is left stopped."""
    res = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--py-spy",
            str(PY_SPY),
            "--root-pid",
            str(fake_job),
            "--deadline",
            "0",
            "--flight-recorder",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    node = parse_node(0, "here", parse_document("here", res.stdout, res.stderr))
    read = [p for p in node.processes if p.role != "other"]
    assert len(read) == 4
    assert {p.error for p in read} == {"not read: the node's time for stacks was used up"}
    assert {p.flight.error for p in node.ranks if p.flight} == {
        "not asked: the node's time for stacks was used up"
    }
    for p in read:
        assert Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T"


def test_counts_and_pids_name_only_the_stack_right_after_them() -> None:
    from console.stacks.pyspy_text import parse_pyspy_text

    frame = 'Thread 7 (idle): "MainThread"\n    f (a.py:1)\n'
    assert len(parse_pyspy_text("3 in:\nsomething else\n" + frame).processes()) == 1
    assert len(parse_pyspy_text("3 in:\n" + frame).processes()) == 3
    assert len(parse_pyspy_text("1000000 in:\n" + frame).processes()) == 1  # not a count
    (p,) = parse_pyspy_text("Process 777: bash\nunrelated\n" + frame).processes()
    assert p.pid == 7
    (p,) = parse_pyspy_text(
        "Process 777: python x\nPython v3.11.2 (/usr/bin/python3)\n" + frame
    ).processes()
    assert p.pid == 777


def test_pasted_pyspy_with_rank_prefixes_on_every_line() -> None:
    """torchrun's ``--tee``/log prefix ``[rankN]:`` before every line of a dump: the frame's
    own indentation after it is kept, so the dump reads as without the prefixes."""
    from console.diagnosis import diagnose

    corpus = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus" / "stacks"
    for case in ("stk-001", "stk-003"):
        text = (corpus / f"{case}.txt").read_text()
        plain = diagnose(text)
        assert plain is not None
        for prefix in ("[rank0]:", "[rank0]: "):
            prefixed = "\n".join(prefix + line for line in text.splitlines())
            got = diagnose(prefixed)
            assert got is not None and got.kind == plain.kind, (case, prefix, got)
            assert dict(got.facts) == dict(plain.facts), (case, prefix)


def test_native_frames_do_not_split_ranks_with_the_same_python_stack() -> None:
    """``--native``: py-spy interleaves native frames whose addresses differ per process
    (ASLR); ranks are folded and described by their Python frames, the native ones still
    shown in the group's frames."""
    from console.stacks.analysis import group
    from console.stacks.model import Frame, ProcessStack, ThreadStack

    def rank(r: int, address: str) -> ProcessStack:
        frames = (
            Frame(address, "libc.so.6", "libc.so.6", 0),
            Frame("clock_nanosleep", "libc.so.6", "libc.so.6", 0),
            Frame(
                "all_reduce",
                "/opt/venv/torch/distributed/distributed_c10d.py",
                "torch/distributed/distributed_c10d.py",
                3252,
            ),
            Frame("train", "/workspace/stuck_rank.py", "stuck_rank.py", 35),
            Frame(f"0x{r:x}55d0", "python3.11", "python3.11", 0),
        )
        main = ThreadStack("MainThread", 100 + r, False, frames)
        return ProcessStack(0, "a", 100 + r, 1, "rank", r, r, 4, None, (), 1.0, (main,), None)

    (g,) = group([rank(0, "0x7f86a6be624a"), rank(2, "0x7f818fca624a")])
    assert g.ranks == (0, 2)
    assert g.collective == "all_reduce"
    assert g.where == "in all_reduce <- train (stuck_rank.py:35)"
    assert g.frames[0].name == "0x7f86a6be624a"
