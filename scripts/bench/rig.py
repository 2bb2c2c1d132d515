"""What the fleet benchmarks share about their rig: N host names that are loopback aliases of
the two sshd test hosts (scripts/testhosts/up), alternately 127.0.0.11 and 127.0.0.12."""

from __future__ import annotations

import os
from pathlib import Path

TESTHOSTS = Path(os.environ.get("GPUCONSOLE_TESTHOSTS_DIR", "/var/tmp/gpuconsole-testhosts"))


def write_ssh_config(names: list[str], path: Path) -> Path:
    """An OpenSSH client config naming each of ``names`` as a host, alternately test host a's
    and b's address, with the test key and known_hosts (for pdsh and plain ``ssh``; pdsh
    drops repeated names, so each host needs its own). Returns ``path``."""
    lines = []
    for i, name in enumerate(names):
        lines += [f"Host {name}", f"  HostName 127.0.0.{11 + i % 2}"]
    lines += [
        "Host *",
        "  User root",
        f"  IdentityFile {TESTHOSTS / 'id_ed25519'}",
        f"  UserKnownHostsFile {TESTHOSTS / 'known_hosts'}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  LogLevel ERROR",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
