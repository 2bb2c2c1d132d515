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
