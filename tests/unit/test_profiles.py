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


# -- issue 7: bad profiles are refused when they load ---------------------------------------------


def _load(config_dir: Path, text: str) -> ConfigError:
    (config_dir / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        resolve_profile("bad")
    return e.value


@pytest.mark.parametrize(
    ("jump", "msg"),
    [
        ("bastion:notaport", "jump host 'bastion:notaport': port 'notaport' is not a number"),
        ("bastion:99999", "jump host 'bastion:99999': port 99999 is not in 1-65535"),
        ("@bastion", "jump host '@bastion' has an empty user before '@'"),
        ("me@", "jump host 'me@' has no host name"),
    ],
)
def test_bad_jump_host(config_dir: Path, jump: str, msg: str) -> None:
    e = _load(config_dir, f"hosts:\n  a:\n    hostname: x\n    jump: '{jump}'\n")
    assert str(e) == f"{config_dir / 'bad.yaml'}:4: hosts.a.jump: {msg}"
    assert e.hint is not None and "[user@]host[:port]" in e.hint


def test_user_with_a_newline(config_dir: Path) -> None:
    e = _load(config_dir, 'hosts:\n  a:\n    user: "root\\nx"\n')
    assert str(e) == (
        f"{config_dir / 'bad.yaml'}:3: hosts.a.user: contains U+000A (line feed); "
        "it must be one line of printable text"
    )


def test_identity_file_that_is_not_a_key(config_dir: Path, tmp_path: Path) -> None:
    notkey = tmp_path / "id_fake"
    notkey.write_text("hello\n")
    e = _load(config_dir, f"hosts:\n  a:\n    hostname: x\n    identity_file: {notkey}\n")
    assert str(e) == (
        f"{config_dir / 'bad.yaml'}:4: hosts.a.identity_file: {notkey} is not a "
        "private key: Invalid private key"
    )
    # a missing file is left to the connection (reported with the host)
    (config_dir / "ok.yaml").write_text(f"hosts:\n  a:\n    identity_file: {tmp_path / 'no'}\n")
    assert resolve_profile("ok").hosts["a"].identity_file == str(tmp_path / "no")


def test_binary_known_hosts(config_dir: Path, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    kh.write_bytes(bytes(range(256)))
    e = _load(config_dir, f"known_hosts: {kh}\nhosts:\n  a: {{}}\n")
    assert str(e) == (
        f"{config_dir / 'bad.yaml'}:1: known_hosts: {kh} is not a known_hosts file "
        "(it holds NUL bytes: binary data)"
    )


def test_long_host_name(config_dir: Path) -> None:
    e = _load(config_dir, f"hosts:\n  ? {'h' * 5000}\n  : {{}}\n")
    assert str(e).startswith(
        f"{config_dir / 'bad.yaml'}:1: hosts: host name "
        "'hhhhhhhhhhhhhhhhhhhh'... (5000 characters) must be 1-63"
    )
    e = _load(config_dir, f"hosts:\n  a: {{hostname: {'x' * 70}.org}}\n")
    assert "hosts.a.hostname: host name 'xxxxxxxxxxxxxxxxxxxx'... has a part longer than 63" in str(
        e
    )


def test_relative_default_mounts_fail_when_the_profile_loads(config_dir: Path) -> None:
    e = _load(config_dir, "hosts:\n  a: {}\ndefaults:\n  mounts: [./data:/data]\n")
    assert str(e).startswith(
        f"{config_dir / 'bad.yaml'}:4: defaults.mounts[0]: mount "
        "'./data:/data': the host path './data' is relative"
    )


def test_every_problem_of_a_profile_is_reported(config_dir: Path) -> None:
    e = _load(config_dir, "hosts:\n  a:\n    port: 0\n    user: 'a b'\ndefaults:\n  image: /\n")
    text = str(e).splitlines()
    assert text[0].startswith(f"{config_dir / 'bad.yaml'}:3: hosts.a.port: ")
    assert text[0].endswith("(and 2 more)")
    assert [t.split(": ")[1] for t in text if t.startswith("  also: ")] == [
        f"{config_dir / 'bad.yaml'}:4",
        f"{config_dir / 'bad.yaml'}:6",
    ]
