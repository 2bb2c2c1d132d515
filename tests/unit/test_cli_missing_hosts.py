"""`top --once`/`gpus`: the stderr line for each host that gave no sample."""

from __future__ import annotations

from console.cli.fleet import missing_hosts
from console.fleet.state import FleetState


def test_missing_hosts_name_state_reason_and_the_step_it_was_in() -> None:
    state = FleetState(["a", "b", "c", "d"], 1.0)
    state.on_down("b", "host b: connection refused")
    phases = {"a": "streaming", "c": "agent starting", "d": "connecting"}
    # a answered: not listed; b down with its reason; c still connecting, in agent start; d
    # connecting and nothing more precise to say
    state.hosts["a"].sample = {}  # type: ignore[typeddict-item]
    assert missing_hosts(state, 20.0, phases) == [
        "host b: down: host b: connection refused",
        "host c: still connecting after 20 s (agent starting)",
        "host d: still connecting after 20 s",
    ]
    assert missing_hosts(state, 20.0) == [
        "host b: down: host b: connection refused",
        "host c: still connecting after 20 s",
        "host d: still connecting after 20 s",
    ]
