"""GcPolicy: survivors of a full pass are frozen; a sweep collects frozen cycles; stop undoes."""

from __future__ import annotations

import asyncio
import gc
import weakref

from console.app.gcpolicy import THRESHOLDS, GcPolicy


class Node:
    """A container object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def tracked(obj: object) -> bool:
    """Whether the cyclic GC's generations 0-2 hold ``obj`` (frozen objects are not there)."""
    return any(o is obj for o in gc.get_objects())


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


async def test_full_pass_freezes_survivors_and_sweep_collects_frozen_cycles() -> None:
    before = gc.get_threshold()
    policy = GcPolicy()
    policy.start()
    try:
        assert gc.get_threshold() == THRESHOLDS
        frozen_at_start = gc.get_freeze_count()
        assert frozen_at_start > 1000  # the test process's modules and classes
        keep = [Node() for _ in range(500)]
        assert tracked(keep[-1])
        gc.collect(2)
        await asyncio.sleep(0)  # the freeze runs on the loop, after the pass
        await asyncio.sleep(0)
        assert policy.freezes == 1
        assert not any(tracked(k) for k in keep)  # moved to the permanent generation
        assert gc.get_freeze_count() > frozen_at_start
        # a cycle frozen while alive is not collected once dropped ...
        ref = cycle()
        gc.freeze()
        gc.collect()
        assert ref() is not None
        # ... until a sweep
        policy.sweep()
        assert ref() is None
        assert policy.sweeps == 1
    finally:
        policy.stop()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    assert policy._on_gc not in gc.callbacks
    policy.sweep()  # after stop: nothing frozen again
    assert gc.get_freeze_count() == 0
