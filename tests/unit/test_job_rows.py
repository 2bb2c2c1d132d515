"""Job rows (shared by `ps` and the jobs view): the NODES text stays short for many nodes."""

from __future__ import annotations

from console.jobs.rows import nodes_text
from console.jobs.store import JobRecord, NodeRecord


def job(states: list[tuple[str, int | None]]) -> JobRecord:
    nodes = [
        NodeRecord("j-1", i, f"h{i}", f"c{i}", state=st, exit_code=code)
        for i, (st, code) in enumerate(states)
    ]
    return JobRecord("j-1", "j", "p", None, {}, "h0", 0.0, len(nodes), nodes=nodes)


def test_few_nodes_are_listed() -> None:
    assert nodes_text(job([("running", None), ("failed", 1)])) == "n0@h0:running n1@h1:failed(1)"
    assert nodes_text(job([("running", None)] * 4)).count("@") == 4


def test_many_nodes_are_counted_and_the_odd_ones_named() -> None:
    states: list[tuple[str, int | None]] = [("running", None)] * 16
    states[3] = ("failed", 1)
    assert nodes_text(job(states)) == "16 nodes: 15 running, 1 failed(1): n3@h3:failed(1)"
    assert nodes_text(job([("succeeded", None)] * 64)) == "64 nodes: 64 succeeded"
    states = [("stopped", None)] * 8 + [("failed", 137)] * 5
    assert nodes_text(job(states)) == (
        "13 nodes: 8 stopped, 5 failed(137): n8@h8:failed(137) "
        "n9@h9:failed(137) n10@h10:failed(137) …"
    )


def test_removed_stopped_and_interrupted_rows() -> None:
    from console.jobs.rows import job_row
    from console.jobs.status import JobView

    failed = job([("failed", 1)])
    failed.state, failed.exit_code = "failed", 1
    failed.failure = {"node": 0, "host": "h0", "exit_code": 1, "rank": 2, "reason": "boom"}
    assert job_row(failed, 10.0).state == "failed(1)"
    failed.removed_at = 5.0
    row = job_row(failed, 10.0)
    assert (row.state, row.reason, row.active) == ("removed", "node 0 rank 2: boom", False)
    view = JobView(failed).as_dict()
    assert (view["state"], view["final_state"], view["removed_at"]) == ("removed", "failed", 5.0)

    stopped = job([("stopped", 143)])
    stopped.state = "stopped"
    assert job_row(stopped, 1.0).reason == ""  # not stopped by gpuconsole's `stop`
    stopped.stop_requested_at = 0.5
    assert job_row(stopped, 1.0).reason == "stopped by the user (SIGTERM)"
    assert JobView(stopped).as_dict()["summary"] == "stopped by the user (SIGTERM)"

    lost = job([("succeeded", 0), ("lost", None)])
    lost.state = "lost"
    lost.nodes[1].container_id = "0123456789abcdef"
    assert job_row(lost, 1.0).reason == "node 1: no longer on h1 (removed outside gpuconsole?)"
    lost.nodes[1].container_id = None
    assert job_row(lost, 1.0).reason == "node 1: its launch ended before it started on h1"

    half = job([("created", None), ("created", None)])
    assert nodes_text(half) == "n0@h0:created n1@h1:created"


def test_a_job_without_gpus_has_no_utilization_to_know() -> None:
    """UTIL of a CPU job (``gpus_per_node: 0``, or holding no GPU by telemetry) does not
    apply (``-``); a GPU job's unknown utilization stays unknown (``?``)."""
    from console.app.screens.jobs import row_cells
    from console.fleet.state import JobUsage
    from console.jobs.rows import job_row

    cpu = job([("running", None)])
    cpu.state, cpu.spec = "running", {"gpus_per_node": 0}
    row = job_row(cpu, 1.0)  # no telemetry at all
    assert (row.gpus, row.cpu_only) == (0, True)
    assert row_cells(row)[5:7] == ("0", "-")

    gpu = job([("running", None)])
    gpu.state, gpu.spec = "running", {"gpus_per_node": "all"}
    assert row_cells(job_row(gpu, 1.0))[5:7] == ("?", "?")  # not watched yet: unknown
    assert row_cells(job_row(gpu, 1.0, {}))[5:7] == ("0", "-")  # watched: holds none
    usage = {"j-1": JobUsage("j-1", (("h0", 0),), None, None)}
    assert row_cells(job_row(gpu, 1.0, usage))[5:7] == ("1", "?")
    usage = {"j-1": JobUsage("j-1", (("h0", 0),), 42.0, None)}
    assert row_cells(job_row(gpu, 1.0, usage))[5:7] == ("1", "42%")


def test_ps_names_the_profile_when_jobs_come_from_more_than_one() -> None:
    from console.cli.jobs import ps_rows

    one = job([("running", None)])
    other = job([("succeeded", 0)])
    other.id, other.profile, other.state = "k-2", "lab", "succeeded"
    assert ps_rows([one], {}, 1.0)[0][:2] == ("JOB", "KIND")
    both = ps_rows([one, other], {}, 1.0)
    assert both[0][:3] == ("JOB", "PROFILE", "KIND")
    assert [r[:2] for r in both[1:]] == [("j-1", "p"), ("k-2", "lab")]
    assert {len(r) for r in both} == {11}
