"""Two hosts reached through one SSH address (as behind a port forward or a jump host) make a
2-node dry run fail at once with the fix (`address:`), not a job that hangs in the
rendezvous; with `address:` set the plan gives each node its own."""

from __future__ import annotations

import uuid
from pathlib import Path

import docker
import yaml

from tests.integration.conftest import CLI, job_containers


def _profile(cli: CLI, test_profile: Path, name: str, **addresses: str) -> Path:
    data = yaml.safe_load(test_profile.read_text())
    for h in ("a", "b"):
        data["hosts"][h]["hostname"] = "127.0.0.11"  # both through host a's sshd
        if h in addresses:
            data["hosts"][h]["address"] = addresses[h]
    path = cli.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_shared_ssh_address_refused_in_dry_run_then_planned_with_address(
    cli: CLI, test_profile: Path, engine: docker.DockerClient
) -> None:
    name = f"addr-{uuid.uuid4().hex[:6]}"
    spec = cli.spec(name, nodes=["a", "b"], nproc_per_node=1)
    shared = _profile(cli, test_profile, "shared")
    res = cli.run("submit", "--dry-run", str(spec), profile=shared, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        "error: hosts a, b would all be reached at 127.0.0.11: one SSH address (a jump host "
        "or a port forward) is in front of them, so torchrun's nodes would not find each "
        "other (rendezvous timeout)",
        f"  fix: set `address:` for a and b in the hosts of profile {shared}: the IP each "
        "host is reached at by the other nodes",
    ]
    # a real submit is refused the same way, before any container exists
    res = cli.run("submit", str(spec), profile=shared, timeout=120)
    assert res.returncode == 2 and "set `address:` for a and b" in res.stderr, res.stderr
    assert job_containers(engine, job_name=name) == []

    fixed = _profile(cli, test_profile, "fixed", a="127.0.0.11", b="127.0.0.12")
    res = cli.run("submit", "--dry-run", str(spec), profile=fixed, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "rendezvous c10d at 127.0.0.11:" in lines[0]
    node_lines = [ln for ln in lines if "--local-addr" in ln]
    assert len(node_lines) == 2
    assert "--local-addr 127.0.0.11 " in node_lines[0]
    assert "--local-addr 127.0.0.12 " in node_lines[1]
