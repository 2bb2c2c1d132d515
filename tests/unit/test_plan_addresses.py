"""A multi-node plan whose nodes could not reach each other is refused before anything
runs: distinct hosts at one address (behind one jump host or port forward), or a loopback
address beside hosts that are not on loopback. The fix is the host's ``address:``."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import PlanError
from console.jobs.plan import HostFacts, build_plan, check_addresses
from console.jobs.spec import load_spec
from console.profiles import HostConfig, JobDefaults, Profile

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"


def _profile(**addresses: str | None) -> Profile:
    return Profile(
        name="t",
        source="/p/t.yaml",
        hosts={
            h: HostConfig(hostname="127.0.0.1", port=2200 + i, address=a)
            for i, (h, a) in enumerate(addresses.items())
        },
        defaults=JobDefaults.model_validate({"image": "img:1"}),
    )


def _facts(**seen: str) -> dict[str, HostFacts]:
    return {h: HostFacts(h, ip, None, "/home/u", None, 29400) for h, ip in seen.items()}


def _plan(tmp_path: Path, profile: Profile, facts: dict[str, HostFacts]) -> None:
    p = tmp_path / "job.yaml"
    p.write_text(
        f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: 0\n"
        f"nodes: {list(facts)}\n"
    )
    build_plan(
        load_spec(p),
        profile,
        list(facts),
        facts,
        job_id="demo-000000",
        created_at=0.0,
        image="img:1",
    )


def test_hosts_behind_one_port_forward_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as e:
        _plan(tmp_path, _profile(gpu1=None, gpu2=None), _facts(gpu1="127.0.0.1", gpu2="127.0.0.1"))
    assert str(e.value) == (
        "hosts gpu1, gpu2 would all be reached at 127.0.0.1: one SSH "
        "address (a jump host or a port forward) is in front of them, so "
        "torchrun's nodes would not find each other (rendezvous timeout)"
    )
    assert e.value.hint == (
        "set `address:` for gpu1 and gpu2 in the hosts of profile "
        "/p/t.yaml: the IP each host is reached at by the other nodes"
    )


def test_hosts_behind_one_jump_host_address_are_refused() -> None:
    """Three hosts, two of which show the jump host's address: those two are named."""
    with pytest.raises(PlanError) as e:
        check_addresses(
            _profile(a="10.0.0.1", b=None, c=None),
            ["a", "b", "c"],
            _facts(a="10.0.0.1", b="192.168.9.9", c="192.168.9.9"),
        )
    assert e.value.message.startswith("hosts b, c would all be reached at 192.168.9.9")


def test_one_explicit_address_is_not_enough() -> None:
    with pytest.raises(PlanError):
        check_addresses(
            _profile(a="10.0.0.5", b=None), ["a", "b"], _facts(a="10.0.0.5", b="10.0.0.5")
        )


def test_a_loopback_node_beside_remote_hosts_is_refused() -> None:
    with pytest.raises(PlanError) as e:
        check_addresses(_profile(a=None, b=None), ["a", "b"], _facts(a="10.0.0.1", b="127.0.0.1"))
    assert e.value.message == (
        "host b would be reached at 127.0.0.1, a loopback address, "
        "which host a (10.0.0.1) cannot reach (rendezvous timeout)"
    )
    assert e.value.hint is not None and "set `address:` for b" in e.value.hint


@pytest.mark.parametrize(
    ("profile", "facts"),
    [
        # the profile says where each host is: the plan uses it
        (_profile(a="10.0.0.1", b="10.0.0.2"), _facts(a="10.0.0.1", b="10.0.0.2")),
        # every node on this machine's loopback (distinct addresses): they do reach each other
        (_profile(a=None, b=None), _facts(a="127.0.0.11", b="127.0.0.12")),
        # the same address on purpose (two profile entries of one machine), set on each
        (_profile(a="10.0.0.7", b="10.0.0.7"), _facts(a="10.0.0.7", b="10.0.0.7")),
        # one node: no peers
        (_profile(a=None), _facts(a="127.0.0.1")),
    ],
)
def test_reachable_addresses_plan(
    tmp_path: Path, profile: Profile, facts: dict[str, HostFacts]
) -> None:
    _plan(tmp_path, profile, facts)


def test_the_node_listed_twice_is_one_host() -> None:
    check_addresses(_profile(a=None), ["a", "a"], _facts(a="127.0.0.1"))
