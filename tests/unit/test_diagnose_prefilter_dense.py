"""A rule given only its own words' lines (``Needs.alone``) answers as it does on every line.

The case: a corpus failure at the end of dense ``NCCL_DEBUG=INFO`` output (a burst of NCCL's
communicator chatter every 100 step lines, PyTorch's c10d ``UserWarning`` after it: what makes
the pre-filter keep many lines, and what a rule reading its own words alone skips). The log is
bigger than :data:`engine.SMALL_TEXT`, so the pre-filter, each ``alone`` rule's own cut and the
fixed head and tail all apply; the answer must equal the answer with every rule on every line
(``prefilter=False``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.diagnosis import Diagnosis, engine

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"
CASES = sorted(CORPUS.glob("*/*.txt"))
#: A tail of scripts/bench/diagnose_speed.py and two container-engine failures (the module whose
#: rule reads its own lines alone): the fast loop's share.
FAST = ("nccl/nccl-003.txt", "docker/dkr-001.txt", "docker/dkr-027.txt")
#: The slow loop's sweep: every 16th case of the corpus (each costs about a second of every
#: rule on every line of the dense log).
SWEEP = CASES[::16]

#: NCCL_DEBUG=INFO chatter as NCCL prints it (``host:pid:tid [dev] NCCL INFO ...``): words of
#: failure rules in it (``cudaDev``, ``nranks``, ``NCCL_*``, ``NET/Socket``, ``GPU``, ``device``).
_CHATTER = (
    "Bootstrap : Using eth0:192.0.2.14<0>",
    "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
    "NET/IB : No device found.",
    "NET/Socket : Using [0]eth0:192.0.2.40<0>",
    "NCCL_IB_ADDR_FAMILY set by environment to AF_INET",
    "cudaDriverVersion 12020",
    "Setting affinity for GPU 1 to 0fffff00,000fffff",
    "Channel 00/02 :    0   1",
    "comm 0x43b40770 rank {r} nranks 8 cudaDev {r} busId ce000 - Init COMPLETE",
)
_WARNING = (
    "/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:83: UserWarning: "
    "barrier(): using the device under current context. You can specify `device_id` in "
    "`init_process_group` to mute this warning."
)


def _dense(case: str, kib: int = 280, lead: int = 0, middle: str = "") -> str:
    """``kib`` KiB of a training run printing NCCL's INFO output, then ``case``: ``lead`` lines
    without it before and after (the NCCL lines then out of the input's head and tail),
    ``middle`` in the middle of it."""
    lines = [f"[default0]:warm-up {i} loss 9.{i:04d}" for i in range(lead)]
    size, step = 0, 0
    while size < kib * 1024:
        block = [
            f"[default{k % 8}]:gpu-node-03:{14750 + k % 8}:{15000 + k % 8} [{k % 8}] NCCL INFO "
            + _CHATTER[k % len(_CHATTER)].format(r=k % 8)
            for k in range(24)
        ]
        for i in range(100):
            step += 1
            block.append(f"[default{i % 8}]:step {step}/100000 loss 2.{step % 9973:04d}")
        block.append(f"[default0]:{_WARNING}")
        size += sum(len(x) + 1 for x in block)
        lines += block
        if middle and size >= kib * 512:
            lines.append(middle.rstrip("\n"))
            middle = ""
    lines += [f"[default0]:eval {i} loss 9.{i:04d}" for i in range(lead)]
    return "\n".join(lines) + "\n" + case


def _answer(d: Diagnosis | None) -> Any:
    if d is None:
        return None
    return (
        d.kind,
        d.summary,
        d.ranks,
        d.fix,
        dict(d.facts),
        d.evidence,
        d.failure,
        d.inputs,
        [(c.kind, c.summary, c.evidence) for c in d.consequences],
    )


def _check(path: Path) -> Diagnosis | None:
    """The dense log ending in ``path``'s case gets the answer of every rule on every line;
    returns it."""
    return _same(_dense(path.read_text(encoding="utf-8", errors="replace")))


def _same(text: str) -> Diagnosis | None:
    assert len(text) > engine.SMALL_TEXT
    got = engine.diagnose(text)
    assert _answer(got) == _answer(engine.diagnose(text, prefilter=False))
    return got


def test_world_size_from_a_communicator_line_far_from_the_head() -> None:
    """A watchdog timeout names the ranks that did not report from the world size; here only
    NCCL's communicator lines (``nranks 8``) say it, all of them far from the input's head and
    from the failure: the NCCL rules read the first line of each world-size pattern."""
    case = (CORPUS / "nccl" / "nccl-003.txt").read_text(encoding="utf-8")
    got = _same(_dense(case, lead=2 * engine.TAIL_LINES))
    assert got is not None and got.kind == "nccl_timeout" and got.facts["world_size"] == 8


def test_a_warn_after_its_communicator_completed_init_far_above() -> None:
    """A connection reset after that process's communicator printed ``Init COMPLETE`` (far
    above, amid the chatter) is a peer gone mid-run, not the set-up failing (nccl-043 alone:
    nccl_system_error in init)."""
    case = (CORPUS / "nccl" / "nccl-043.txt").read_text(encoding="utf-8")
    done = (
        "9306dc444753:248281:248335 [3] NCCL INFO ncclCommInitRank comm 0x7f00a8000f00 "
        "rank 3 nranks 8 cudaDev 3 busId 3d000 commId 0x1 - Init COMPLETE"
    )
    got = _same(_dense(case, lead=2 * engine.TAIL_LINES, middle=done))
    assert got is not None and got.kind == "nccl_remote_error"


def test_some_rule_reads_its_own_lines_alone() -> None:
    """The test is about something: a rule with ``Needs.alone`` exists, and on the dense log
    its own lines are far fewer than every rule's."""
    alone = [needs for _rule, needs in engine._declared() if needs and all(n.alone for n in needs)]
    assert alone
    text = _dense((CORPUS / "docker" / "dkr-001.txt").read_text(encoding="utf-8"))
    every = engine.kept_text(text).count("\n")
    own = engine.kept_text(text, only=alone[0]).count("\n")
    assert own * 5 < every


@pytest.mark.parametrize("name", FAST)
def test_dense_nccl_log_same_answer(name: str) -> None:
    """Also the cause of the case alone (in the sweep below some cases read otherwise amid the
    noise with or without the pre-filter: a relay's tag no longer on most lines...)."""
    got = _check(CORPUS / name)
    alone = engine.diagnose((CORPUS / name).read_text(encoding="utf-8"))
    assert got is not None and alone is not None and got.kind == alone.kind


@pytest.mark.slow
@pytest.mark.parametrize("path", SWEEP, ids=[p.stem for p in SWEEP])
def test_dense_nccl_log_same_answer_sweep(path: Path) -> None:
    _check(path)


def test_a_name_not_resolving_in_a_log_that_is_pytorchs_only_far_above() -> None:
    """A host name that does not resolve is the store's address when the text is PyTorch's;
    here only PyTorch's own warnings (far from the head, the tail and the error) say so: the
    torchrun rules read the first line naming PyTorch."""
    tail = "socket.gaierror: [Errno -2] Name or service not known\n"
    got = _same(_dense(tail, lead=2 * engine.TAIL_LINES))
    assert got is not None and got.kind == "store_address_unresolved"
