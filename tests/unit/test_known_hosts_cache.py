""":func:`remote.ssh.known_hosts_of`: a known_hosts file is parsed once per change, not once
per connection of a fleet listing."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from remote import ssh


def key_line(host: str) -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return f"{host} {key.export_public_key().decode().strip()}\n"


def test_parsed_once_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(key_line("gpu1.example.org") + key_line("[10.0.0.12]:2222"))
    parsed: list[str] = []
    real = ssh.StrictKnownHosts.load

    def counting(self: ssh.StrictKnownHosts, text: str) -> None:
        parsed.append(text)
        real(self, text)

    monkeypatch.setattr(ssh.StrictKnownHosts, "load", counting)
    first = ssh.known_hosts_of(str(kh))
    assert isinstance(first, asyncssh.SSHKnownHosts)
    for _ in range(100):
        assert ssh.known_hosts_of(str(kh)) is first
    assert parsed == [kh.read_text()]
    assert any(first.match("10.0.0.12", "", 2222)) and not any(first.match("gpu2", "", 22))
    # a key appended (accept_new_host_keys, or by hand) is seen by the next connection
    with kh.open("a") as f:
        f.write(key_line("gpu2"))
    again = ssh.known_hosts_of(str(kh))
    assert again is not first and len(parsed) == 2 and any(again.match("gpu2", "", 22))


def test_missing_file_trusts_nothing_and_bad_file_raises(tmp_path: Path) -> None:
    absent = ssh.known_hosts_of(str(tmp_path / "absent"))
    # a list that trusts nothing, not asyncssh's "not given" (which reads ~/.ssh/known_hosts)
    assert isinstance(absent, asyncssh.SSHKnownHosts)
    assert not any(absent.match("gpu1.example.org", "10.0.0.1", 22))
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x01binary\n")  # one field: not an entry
    with pytest.raises(ValueError):
        ssh.known_hosts_of(str(bad))
    os.chmod(bad, 0o000)
    if os.geteuid() != 0:  # root reads it anyway
        with pytest.raises(OSError):
            ssh.known_hosts_of(str(bad))


async def test_default_known_hosts_unusable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default ``~/.ssh/known_hosts`` is not checked at profile load (a profile's own
    ``known_hosts:`` is); when it cannot be used, the connect error names it, before any
    packet is sent (nothing listens on the port below)."""
    from remote.errors import TransportError

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    kh = tmp_path / ".ssh" / "known_hosts"
    kh.mkdir()  # unreadable as a file even for root: EISDIR
    host = ssh.SSHTransport("gpu1", ssh.SSHTarget("127.0.0.1", port=9, connect_timeout=2))
    with pytest.raises(TransportError) as raised:
        await host.connect()
    assert str(raised.value.detail) == f"cannot read the known_hosts file {kh}: Is a directory"
    assert "known_hosts" in (raised.value.hint or "")
    kh.rmdir()
    kh.write_bytes(b"\x00\x01binary\n")
    with pytest.raises(TransportError) as raised:
        await host.connect()
    assert raised.value.detail.startswith(f"{kh} is not a known_hosts file: ")


def test_a_port_other_than_22_matches_only_its_bracketed_entries(tmp_path: Path) -> None:
    """OpenSSH reads ``127.0.0.1 KEY`` as port 22 only; a non-22 port needs
    ``[127.0.0.1]:PORT KEY`` (asyncssh alone falls back to the port-less line)."""
    kh = tmp_path / "known_hosts"
    plain, bracketed = key_line("127.0.0.1"), key_line("[127.0.0.1]:2222")
    kh.write_text(plain)
    known = ssh.known_hosts_of(str(kh))
    assert known.match("127.0.0.1", "", 2222)[0] == []
    assert known.match("127.0.0.1", "", 22)[0] != []
    assert known.match("127.0.0.1", "", None)[0] != []
    kh.write_text(plain + bracketed)
    known = ssh.known_hosts_of(str(kh))
    (only,) = known.match("127.0.0.1", "", 2222)[0]
    assert only.export_public_key().decode().strip() == bracketed.split(None, 1)[1].strip()
    # asyncssh's own matching is what this guards against
    assert asyncssh.import_known_hosts(plain).match("127.0.0.1", "", 2222)[0] != []


def test_entries_carry_their_lines_and_markers(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    trusted, other, revoked = (key_line(h) for h in ("gpu1", "gpu2", "gpu1"))
    kh.write_text(f"# comment\n{trusted}{other}\n@revoked {revoked}")
    got = ssh.known_host_entries(str(kh), "gpu1", "", 22)
    assert [(e.line, e.marker) for e in got] == [(2, None), (5, "revoked")]
    assert got[0].where == f"{kh}:2"
    assert ssh.known_host_entries(str(kh), "gpu1", "", 2222) == []


def test_fingerprint_is_what_ssh_keygen_prints(tmp_path: Path) -> None:
    import shutil
    import subprocess

    key = asyncssh.generate_private_key("ssh-ed25519")
    pub = tmp_path / "k.pub"
    pub.write_bytes(key.export_public_key())
    fp = ssh.fingerprint(key.convert_to_public())
    assert fp.startswith("ED25519 SHA256:") and "=" not in fp
    if shutil.which("ssh-keygen"):
        out = subprocess.run(
            ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert fp == f"ED25519 {out[1]}" and out[-1] == "(ED25519)"
