"""Whether the user's ssh config sets ``Ciphers`` for the host being connected
(``remote.ssh.user_sets_ciphers``, asyncssh's own config reader): real config files with
``Host`` and ``Match`` blocks and ``Include``s, written to a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote import ssh
from remote.ssh import user_sets_ciphers

CONFIG = """\
Include conf.d/*.conf
Host gpu-* !gpu-legacy
  User trainer
Host bastion
  HostName 10.1.2.3
  Ciphers aes256-ctr
Match host 10.9.*.* user ops
  Ciphers aes128-ctr
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``~/.ssh/config`` under a temporary ``HOME`` (a relative ``Include`` is looked up in
    ``~/.ssh``, as OpenSSH does), the local user ``alice``."""
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # asyncssh's local user
        monkeypatch.setenv(var, "alice")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "conf.d" / "fips.conf").write_text(
        "Host gpu-legacy\n  Ciphers=aes256-gcm@openssh.com\n"
    )
    path = tmp_path / ".ssh" / "config"
    path.write_text(CONFIG)
    return path


def test_a_ciphers_line_counts_only_for_the_hosts_its_block_matches(config: Path) -> None:
    assert user_sets_ciphers("bastion", config=config)  # Host bastion
    assert user_sets_ciphers("gpu-legacy", config=config)  # in the Include, Host scoped
    assert not user_sets_ciphers("gpu-01", config=config)  # Host gpu-*: no Ciphers
    assert not user_sets_ciphers("10.1.2.3", config=config)  # bastion's address, not its name


def test_match_host_and_user(config: Path) -> None:
    assert user_sets_ciphers("10.9.0.7", user="ops", config=config)
    assert not user_sets_ciphers("10.9.0.7", user="root", config=config)
    assert not user_sets_ciphers("10.9.0.7", config=config)  # the local user, alice


def test_host_star_applies_to_every_host(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("Host *\n  ciphers aes128-ctr\n")
    assert user_sets_ciphers("anything", port=2222, config=path)


def test_no_file_or_a_file_asyncssh_refuses_sets_nothing(tmp_path: Path) -> None:
    assert not user_sets_ciphers("gpu-01", config=tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("Host gpu-01\n  Port notanumber\n  Ciphers aes128-ctr\n")
    assert not user_sets_ciphers("gpu-01", config=bad)


def test_the_default_file_is_home_ssh_config_and_kept_per_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(ssh, "_user_ciphers", {})
    (tmp_path / ".ssh").mkdir()
    cfg = tmp_path / ".ssh" / "config"
    cfg.write_text("Host a\n  Ciphers aes128-ctr\n")
    assert user_sets_ciphers("a") and not user_sets_ciphers("b")
    cfg.write_text("Host b\n  Ciphers aes128-ctr\n")  # read once per process and host
    assert user_sets_ciphers("a") and not user_sets_ciphers("b")
    assert user_sets_ciphers("b", port=22)  # another key: read again
