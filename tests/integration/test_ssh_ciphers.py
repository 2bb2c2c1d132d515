"""The cipher gpuconsole's SSH connections negotiate with a real OpenSSH sshd (test host a):
AES-GCM first (remote.ssh.CIPHERS), unless the user's ssh config has its own ``Ciphers`` for
the host (tests/unit/test_ssh_cipher_config.py reads configs without a host)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.profiles import load_profile_file
from remote.ssh import SSHTransport


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


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str | None) -> None:
    """A fresh ``HOME`` whose ``~/.ssh/config`` is ``config`` (none when ``None``)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    if config is not None:
        (home / ".ssh" / "config").write_text(config)
    monkeypatch.setenv("HOME", str(home))


def test_aes_gcm_is_negotiated(
    test_profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home(tmp_path, monkeypatch, None)
    assert _negotiated(test_profile) == "aes128-gcm@openssh.com"


def test_the_users_ciphers_line_wins(
    test_profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``Ciphers`` in ~/.ssh/config asyncssh applies the user's list (here only
    aes256-ctr), and gpuconsole's order is not offered."""
    _home(tmp_path, monkeypatch, "Host *\n  Ciphers aes256-ctr\n")
    assert _negotiated(test_profile) == "aes256-ctr"


def test_a_ciphers_line_for_another_host_leaves_gpuconsoles_order(
    test_profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``Ciphers`` line scoped to other hosts (``Host`` and ``Match``) is not this host's:
    gpuconsole's order is offered to test host a (127.0.0.11), and one scoped to it wins."""
    _home(
        tmp_path,
        monkeypatch,
        "Host gpu-*\n  Ciphers aes256-ctr\nMatch host 10.0.0.*\n  Ciphers aes192-ctr\n",
    )
    assert _negotiated(test_profile) == "aes128-gcm@openssh.com"
    _home(
        tmp_path / "2",
        monkeypatch,
        "Host gpu-*\n  Ciphers aes256-ctr\nMatch host 127.0.0.11 user root\n  Ciphers aes192-ctr\n",
    )
    assert _negotiated(test_profile) == "aes192-ctr"


def test_the_login_hint_logs_in_as_the_profile_does(test_profile: Path) -> None:
    """The ``ssh`` line shown for a runtime-host job (``exec``/``cp`` refusals) is runnable:
    OpenSSH's client logs in to test host a with it (key, known_hosts from the profile)."""
    import subprocess

    t = load_profile_file(test_profile).transport("a")
    argv = t.ssh_argv()
    assert argv is not None and argv[0] == "ssh" and argv[-1] == "root@127.0.0.11"
    assert "-i" in argv and any(a.startswith("UserKnownHostsFile=") for a in argv)
    res = subprocess.run(
        [*argv, "-o", "BatchMode=yes", "echo", "in"], capture_output=True, text=True, timeout=30
    )
    assert (res.returncode, res.stdout) == (0, "in\n"), res.stderr
