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
        "host b: down: connection refused",
        "host c: still connecting after 20 s (agent starting)",
        "host d: still connecting after 20 s",
    ]
    assert missing_hosts(state, 20.0) == [
        "host b: down: connection refused",
        "host c: still connecting after 20 s",
        "host d: still connecting after 20 s",
    ]


def test_hosts_that_failed_at_once_are_not_blamed_on_the_timeout() -> None:
    import pytest

    from console.cli.fleet import raise_if_missing
    from console.errors import JobError

    state = FleetState(["a", "b"], 1.0)
    state.on_down("b", "cannot connect to 127.0.0.12:2299: connection refused")
    state.hosts["a"].sample = {}  # type: ignore[typeddict-item]
    with pytest.raises(JobError) as down:
        raise_if_missing(state, 15.0)
    assert down.value.message == "1 of 2 hosts gave no sample: b (down)"
    assert "--timeout" not in (down.value.hint or "")
    late = FleetState(["a", "b", "c"], 1.0)
    late.on_down("b", "connection refused")
    late.hosts["c"].sample = {}  # type: ignore[typeddict-item]
    with pytest.raises(JobError) as waited:
        raise_if_missing(late, 15.0)
    assert waited.value.message == "2 of 3 hosts gave no sample within 15 s: a, b"
    assert "--timeout" in (waited.value.hint or "")


def test_a_host_key_or_login_refusal_carries_its_fix() -> None:
    from console.errors import host_reason
    from remote.errors import HostKeyUnknown, HostUnreachable

    key = HostKeyUnknown(
        "b",
        "host key of 127.0.0.12:22 is not trusted (x); known_hosts: kh",
        "check the key's fingerprint, then `ssh-keyscan -p 22 127.0.0.12 >> kh`",
    )
    assert host_reason(key) == (
        "host b: host key of 127.0.0.12:22 is not trusted (x); known_hosts: kh; fix: check the "
        "key's fingerprint, then `ssh-keyscan -p 22 127.0.0.12 >> kh`"
    )
    assert host_reason(key, named=False).startswith("host key of 127.0.0.12:22")
    refused = HostUnreachable(
        "b", "cannot connect to 127.0.0.12:22: connection refused", "check that the host is up"
    )
    assert host_reason(refused, named=False) == (
        "cannot connect to 127.0.0.12:22: connection refused"
    )
