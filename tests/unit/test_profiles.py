"""Profile lookup order and validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import ConfigError
from console.profiles import resolve_profile
from remote.ssh import SSHTransport
from remote.transport import LocalTransport

TWO_HOSTS = """\
known_hosts: /tmp/kh
hosts:
  gpu1: {hostname: 10.1.1.1, user: ubuntu, port: 2222}
  gpu2: {}
defaults: {image: img:1, ipc: host}
"""


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("GPUCONSOLE_PROFILE", raising=False)
    (tmp_path / "cfg" / "profiles").mkdir(parents=True)
    return tmp_path / "cfg" / "profiles"


def test_bundled_local_is_the_default(config_dir: Path) -> None:
    p = resolve_profile(None)
    assert p.name == "local"
    assert list(p.hosts) == ["local"]
    assert isinstance(p.transport("local"), LocalTransport)


def test_user_default_beats_bundled(config_dir: Path) -> None:
    (config_dir / "default.yaml").write_text(TWO_HOSTS)
    p = resolve_profile(None)
    assert p.name == "default" and list(p.hosts) == ["gpu1", "gpu2"]


def test_env_beats_user_default_and_flag_beats_env(
    config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (config_dir / "default.yaml").write_text(TWO_HOSTS)
    (config_dir / "lab.yaml").write_text(TWO_HOSTS)
    monkeypatch.setenv("GPUCONSOLE_PROFILE", "lab")
    assert resolve_profile(None).name == "lab"
    other = tmp_path / "other.yaml"
    other.write_text("hosts: {x: {transport: local}}\n")
    assert resolve_profile(str(other)).name == "other"


def test_ssh_host_fields_and_alias_default(config_dir: Path) -> None:
    (config_dir / "lab.yaml").write_text(TWO_HOSTS)
    p = resolve_profile("lab")
    t1 = p.transport("gpu1")
    assert isinstance(t1, SSHTransport)
    assert (t1.target.hostname, t1.target.port, t1.target.user) == ("10.1.1.1", 2222, "ubuntu")
    assert t1.target.known_hosts == "/tmp/kh"
    t2 = p.transport("gpu2")
    assert isinstance(t2, SSHTransport)
    # a host with no fields is an ~/.ssh/config alias: everything else defers to the config
    assert (t2.target.hostname, t2.target.port, t2.target.user) == ("gpu2", None, None)
    assert t1.describe() == "ssh ubuntu@10.1.1.1:2222"


def test_invalid_profile_names_file_line_field(config_dir: Path) -> None:
    (config_dir / "bad.yaml").write_text("hosts:\n  a:\n    hostnme: x\n")
    with pytest.raises(ConfigError) as e:
        resolve_profile("bad")
    assert str(e.value) == f"{config_dir / 'bad.yaml'}:3: hosts.a.hostnme: unknown field"
    assert e.value.hint is not None and "did you mean `hostname`?" in e.value.hint


def test_unknown_profile(config_dir: Path) -> None:
    with pytest.raises(ConfigError, match="no profile named 'nope'"):
        resolve_profile("nope")
