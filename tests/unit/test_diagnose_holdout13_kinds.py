"""The kind holdout13 missed, on variants of its own (the corpus cases are in
``tests/data/diagnose/corpus/holdout13``): Xid 79 stated in words with no kernel line."""

from __future__ import annotations

from console.diagnosis.engine import diagnose


def test_xid_79_stated_in_words_is_a_lost_gpu() -> None:
    for line in (
        "Looks like an XID 79 (fallen off the bus) again on the second card.",
        "the GPU has fallen off the bus, Xid: 79, after a few hours of training",
    ):
        d = diagnose("Training stops after a while.\n" + line + "\n")
        assert d is not None and d.kind == "gpu_lost", line
        assert d.facts["xid"] == 79 and d.evidence == (line,)
    # the number alone, or the words of another Xid, are no statement of the fault
    assert diagnose("Please check dmesg for Xid 79 and attach nvidia-bug-report.\n") is None
    assert diagnose("Is this related to Xid 13? It has not fallen off the bus.\n") is None


def test_a_closed_rendezvous_does_not_say_the_job_never_ran() -> None:
    """hold13-013: node B's agent, restarted after the two nodes had been training, came to a
    closed rendezvous. What did not start is this agent's workers, not the job's."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "tests/data/diagnose/corpus/holdout13"
    d = diagnose((root / "hold13-013.txt").read_text())
    assert d is not None and d.kind == "rendezvous_failed"
    assert "RendezvousClosedError" in d.summary
    assert "this agent started no worker" in d.summary and "may have been training" in d.summary
    assert not d.summary.endswith("; no worker started")
    timeout = diagnose("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n")
    assert timeout is not None and timeout.kind == "rendezvous_failed"
    assert timeout.summary.endswith("not enough nodes joined in time; no worker started")
