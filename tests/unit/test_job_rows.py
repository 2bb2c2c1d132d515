"""Job rows (shared by `ps` and the jobs view): the NODES text stays short for many nodes."""

from __future__ import annotations

from console.jobs.rows import nodes_text
from console.jobs.store import JobRecord, NodeRecord


def job(states: list[tuple[str, int | None]]) -> JobRecord:
    nodes = [NodeRecord("j-1", i, f"h{i}", f"c{i}", state=st, exit_code=code)
             for i, (st, code) in enumerate(states)]
    return JobRecord("j-1", "j", "p", None, {}, "h0", 0.0, len(nodes), nodes=nodes)


def test_few_nodes_are_listed() -> None:
    assert nodes_text(job([("running", None), ("failed", 1)])) == \
        "n0@h0:running n1@h1:failed(1)"
    assert nodes_text(job([("running", None)] * 4)).count("@") == 4


def test_many_nodes_are_counted_and_the_odd_ones_named() -> None:
    states: list[tuple[str, int | None]] = [("running", None)] * 16
    states[3] = ("failed", 1)
    assert nodes_text(job(states)) == "16 nodes: 15 running, 1 failed(1): n3@h3:failed(1)"
    assert nodes_text(job([("succeeded", None)] * 64)) == "64 nodes: 64 succeeded"
    states = [("stopped", None)] * 8 + [("failed", 137)] * 5
    assert nodes_text(job(states)) == ("13 nodes: 8 stopped, 5 failed(137): n8@h8:failed(137) "
                                       "n9@h9:failed(137) n10@h10:failed(137) …")
