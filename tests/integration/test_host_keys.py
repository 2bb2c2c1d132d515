"""Host keys on the real test hosts, told apart as OpenSSH does: a CHANGED key (both
fingerprints, the stored line, verify and remove it; never keyscan or accept-new), a REVOKED
one, a port-less line that does not vouch for another port, and accept-new's notice."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
import yaml

from tests.integration.conftest import CLI
from tests.integration.proxies import CuttableProxy

TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")


def real_key(ip: str = "127.0.0.11") -> str:
    """Test host ``ip``'s key as in the test hosts' known_hosts (``ssh-ed25519 AAAA...``)."""
    return next(
        ln.split(None, 1)[1]
        for ln in (TESTHOSTS / "known_hosts").read_text().splitlines()
        if ln.startswith(f"{ip} ")
    )


def keygen_fp(key: str, tmp: Path) -> str:
    """``SHA256:...`` of a public key as ``ssh-keygen -lf`` prints it."""
    pub = tmp / "fp.pub"
    pub.write_text(key + "\n")
    return subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout.split()[1]


def profile(
    cli: CLI, kh: Path, *, accept_new: bool = False, hosts: dict[str, object] | None = None
) -> Path:
    data = yaml.safe_load(cli.profile.read_text())
    data["known_hosts"] = str(kh)
    data["accept_new_host_keys"] = accept_new
    data["hosts"] = hosts or {"a": data["hosts"]["a"]}
    p = cli.tmp / "hk-profile.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def one_error(res: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    fix = [ln for ln in res.stderr.splitlines() if ln.startswith("  fix: ")]
    assert len(err) == 1 and len(fix) == 1, res.stderr
    return err[0], fix[0]


@pytest.mark.parametrize("accept_new", [False, True])
def test_a_changed_key_says_changed_with_both_fingerprints(cli: CLI, accept_new: bool) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    kh = cli.tmp / "kh"
    text = f"# by hand\n127.0.0.12 {real_key('127.0.0.12')}\n127.0.0.11 {other}\n"
    kh.write_text(text)
    prof = profile(cli, kh, accept_new=accept_new)
    res = cli.run("submit", str(cli.spec("changed")), "--dry-run", profile=prof)
    err, fix = one_error(res)
    offered, stored = keygen_fp(real_key(), cli.tmp), keygen_fp(other, cli.tmp)
    assert "host a: host key of 127.0.0.11:22 has CHANGED" in err
    assert "man-in-the-middle" in err
    assert f"it offered ED25519 {offered}" in err
    assert f"known_hosts has ED25519 {stored} at {kh}:3" in err
    assert f"verify the new key ED25519 {offered}" in fix
    assert f"`ssh-keygen -R 127.0.0.11 -f {kh}`" in fix
    for never in ("ssh-keyscan", "accept_new_host_keys: true"):
        assert never not in res.stderr
    assert kh.read_text() == text  # accept-new never replaces or adds beside a changed key
    # ps names it in the host's row, with the same fix
    res = cli.run("ps", "--json", "--hosts", profile=prof)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["hosts"]
    assert row["status"] == "failed"
    assert "has CHANGED" in row["reason"] and "fix: verify the new key" in row["reason"]
    assert "ssh-keyscan" not in row["reason"]


def test_a_revoked_key_says_revoked(cli: CLI) -> None:
    kh = cli.tmp / "kh"
    kh.write_text(f"127.0.0.11 {real_key()}\n@revoked * {real_key()}\n")
    res = cli.run("submit", str(cli.spec("revoked")), "--dry-run", profile=profile(cli, kh))
    err, fix = one_error(res)
    fp = keygen_fp(real_key(), cli.tmp)
    assert "host key of 127.0.0.11:22 is REVOKED" in err
    assert f"{kh}:2 (ED25519 {fp})" in err
    assert "do not connect" in fix and "ssh-keyscan" not in fix


@pytest.fixture
def proxy() -> Iterator[CuttableProxy]:
    p = CuttableProxy(("127.0.0.11", 22))
    try:
        yield p
    finally:
        p.close()


def test_a_portless_line_does_not_vouch_for_another_port(
    cli: CLI,
    proxy: CuttableProxy,
) -> None:
    """``127.0.0.1 KEY`` is for port 22 only (OpenSSH); at a non-22 port the host is unknown,
    and trusted once the line is ``[127.0.0.1]:PORT KEY``."""
    a = {
        "hostname": "127.0.0.1",
        "port": proxy.port,
        "user": "root",
        "identity_file": str(TESTHOSTS / "id_ed25519"),
    }
    kh = cli.tmp / "kh"
    kh.write_text(f"127.0.0.1 {real_key()}\n")
    prof = profile(cli, kh, hosts={"a": a})
    res = cli.run("submit", str(cli.spec("portless")), "--dry-run", profile=prof)
    err, fix = one_error(res)
    assert f"host key of 127.0.0.1:{proxy.port} is not trusted" in err
    assert (
        f"it offered ED25519 {keygen_fp(real_key(), cli.tmp)}, and known_hosts {kh} has "
        "no key for it" in err
    )
    assert f"ssh-keyscan -p {proxy.port} 127.0.0.1" in fix
    kh.write_text(f"[127.0.0.1]:{proxy.port} {real_key()}\n")
    res = cli.run("submit", str(cli.spec("portless")), "--dry-run", profile=prof)
    assert res.returncode == 0, res.stderr


def test_accept_new_writes_the_key_and_shows_its_fingerprint(
    cli: CLI,
    proxy: CuttableProxy,
) -> None:
    a = {
        "hostname": "127.0.0.1",
        "port": proxy.port,
        "user": "root",
        "identity_file": str(TESTHOSTS / "id_ed25519"),
    }
    kh = cli.tmp / "kh"
    kh.write_text(f"127.0.0.1 {real_key('127.0.0.12')}\n")  # port 22's: not this port's
    prof = profile(cli, kh, accept_new=True, hosts={"a": a})
    res = cli.run("submit", str(cli.spec("acceptfp")), "--dry-run", profile=prof)
    assert res.returncode == 0, res.stderr
    fp = keygen_fp(real_key(), cli.tmp)
    notice = [ln for ln in res.stderr.splitlines() if "accepted the new host key" in ln]
    assert len(notice) == 1, res.stderr
    assert f"[127.0.0.1]:{proxy.port} (ED25519 {fp})" in notice[0] and str(kh) in notice[0]
    assert kh.read_text().splitlines()[1] == f"[127.0.0.1]:{proxy.port} {real_key()}"
