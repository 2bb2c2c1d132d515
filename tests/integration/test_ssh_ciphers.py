"""The cipher gpuconsole's SSH connections negotiate with a real OpenSSH sshd (test host a):
AES-GCM first (remote.ssh.CIPHERS), unless the user's ssh config has its own ``Ciphers``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.profiles import load_profile_file
from remote import ssh
from remote.ssh import SSHTransport, user_sets_ciphers


def _negotiated(test_profile: Path) -> str:
    async def go() -> str:
        t = load_profile_file(test_profile).transport("a")
        assert isinstance(t, SSHTransport)
        await t.connect()
        try:
            assert t._conn is not None
            return str(t._conn.get_extra_info("send_cipher"))
        finally:
            await t.close()

    return asyncio.run(go())


def test_aes_gcm_is_negotiated(test_profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh, "_user_ciphers", False)
    assert _negotiated(test_profile) == "aes128-gcm@openssh.com"


def test_the_users_ciphers_line_wins(test_profile: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``Ciphers`` in ~/.ssh/config asyncssh applies the user's list (here only
    aes256-ctr), and gpuconsole's order is not offered."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n  Ciphers aes256-ctr\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(ssh, "_user_ciphers", None)
    assert _negotiated(test_profile) == "aes256-ctr"


def test_ciphers_line_found_in_config_and_its_includes(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host gpu-*\n  User me\n")
    assert not user_sets_ciphers(cfg)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "fips.conf").write_text("Ciphers=aes256-gcm@openssh.com\n")
    cfg.write_text("Include conf.d/*.conf\nHost gpu-*\n  User me\n")
    assert user_sets_ciphers(cfg)
    cfg.write_text("Host *\n  ciphers aes128-ctr\n")
    assert user_sets_ciphers(cfg)
    assert not user_sets_ciphers(tmp_path / "missing")


def test_the_login_hint_logs_in_as_the_profile_does(test_profile: Path) -> None:
    """The ``ssh`` line shown for a runtime-host job (``exec``/``cp`` refusals) is runnable:
    OpenSSH's client logs in to test host a with it (key, known_hosts from the profile)."""
    import subprocess

    t = load_profile_file(test_profile).transport("a")
    argv = t.ssh_argv()
    assert argv is not None and argv[0] == "ssh" and argv[-1] == "root@127.0.0.11"
    assert "-i" in argv and any(a.startswith("UserKnownHostsFile=") for a in argv)
    res = subprocess.run([*argv, "-o", "BatchMode=yes", "echo", "in"], capture_output=True,
                         text=True, timeout=30)
    assert (res.returncode, res.stdout) == (0, "in\n"), res.stderr
