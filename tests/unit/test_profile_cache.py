"""The validated-profile cache (:mod:`console.profilecache`): used only for the same bytes of
the same file, never trusted beyond the profile's own models, never holding secrets."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from console import profilecache
from console.errors import ConfigError
from console.profiles import Profile, load_profile_file

REPO = Path(__file__).resolve().parents[2]

PROFILE = """\
hosts:
  gpu1: {hostname: 10.0.0.11, user: ubuntu, port: 2222}
  gpu2: {hostname: 10.0.0.12, jump: me@bastion:2200, runtime: host, python: /opt/py/bin/python}
known_hosts: null
connect_timeout: 4.5
defaults:
  image: nvcr.io/nvidia/pytorch:24.10-py3
  env: {NCCL_DEBUG: INFO, WANDB_API_KEY: "${WANDB_API_KEY}"}
  mounts: ["/data:/data:ro"]
alerts:
  gpu_temperature: {limit_c: 81}
"""


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "profiles"


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.pickle")) if cache.is_dir() else []


def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the profile files validated (not taken from the cache) from now on."""
    seen: list[str] = []
    real = Profile.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Profile], data: Any, **kw: Any) -> Profile:
        seen.append(str(data.get("source")))
        return real(cls, data, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Profile, "model_validate", classmethod(counted))
    return seen


def test_second_load_of_an_unchanged_file_skips_validation(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "lab.yaml"
    p.write_text(PROFILE)
    seen = validations(monkeypatch)
    first = load_profile_file(p)
    assert seen == [str(p)] and len(entries(cache)) == 1
    second = load_profile_file(p)
    assert seen == [str(p)]  # not validated again
    assert second.model_dump() == first.model_dump() and second is not first
    assert second.hosts["gpu2"].jump == "me@bastion:2200"
    assert second.hosts["gpu1"].port == 2222 and second.connect_timeout == 4.5
    assert second.defaults.env["WANDB_API_KEY"] == "${WANDB_API_KEY}"
    assert second.lines == first.lines and second.lines[("hosts", "gpu2")] == 3
    # the alerts section was validated with the file; from the cache it is built on use
    assert second.alert_rules.gpu_temperature.limit_c == 81
    assert (os.stat(cache).st_mode & 0o777) == 0o700
    assert all((os.stat(e).st_mode & 0o777) == 0o600 for e in entries(cache))


def test_changed_bytes_renamed_file_and_new_code_are_misses(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "lab.yaml"
    p.write_text(PROFILE)
    load_profile_file(p)
    seen = validations(monkeypatch)
    p.write_text(PROFILE.replace("port: 2222", "port: 2223"))
    assert load_profile_file(p).hosts["gpu1"].port == 2223
    assert seen == [str(p)]
    q = tmp_path / "copy.yaml"  # same bytes, another file: its name is the profile's name
    q.write_bytes(p.read_bytes())
    assert load_profile_file(q).name == "copy" and len(seen) == 2
    monkeypatch.setattr(profilecache, "_digest", b"other validation code")
    assert load_profile_file(p).hosts["gpu1"].port == 2223 and len(seen) == 3
    assert len(entries(cache)) == 2  # one entry per path, replaced on a miss


def test_invalid_file_is_reported_every_time_and_not_kept(tmp_path: Path, cache: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("hosts:\n  a: {port: 70000}\n")
    for _ in range(2):
        with pytest.raises(ConfigError) as e:
            load_profile_file(p)
        assert e.value.line == 2 and e.value.field == "hosts.a.port"
    assert entries(cache) == []


def test_key_file_problems_are_checked_on_every_load(tmp_path: Path) -> None:
    """The cache skips the file's own validation, not the checks of files it names."""
    key = tmp_path / "id_ed25519"
    p = tmp_path / "lab.yaml"
    p.write_text(f"hosts:\n  a: {{hostname: 10.0.0.1, identity_file: {key}}}\n")
    assert load_profile_file(p).hosts["a"].identity_file == str(key)  # missing: left to SSH
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI this is a public key\n")
    with pytest.raises(ConfigError) as e:
        load_profile_file(p)
    assert e.value.field == "hosts.a.identity_file" and e.value.line == 2


def test_profile_with_notify_urls_is_not_kept(tmp_path: Path, cache: Path) -> None:
    p = tmp_path / "oncall.yaml"
    p.write_text("hosts:\n  a: {}\nnotify: ['slack://T000/B000/secret-token']\n")
    assert load_profile_file(p).notify == ["slack://T000/B000/secret-token"]
    assert entries(cache) == []
    assert not any(
        b"secret-token" in f.read_bytes() for f in cache.parent.rglob("*") if f.is_file()
    )


class _Payload:
    """Unpickling this would call :func:`_mark` (as a hostile entry could call anything)."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_mark, ("called",))


MARKS: list[str] = []


def _mark(what: str) -> str:
    MARKS.append(what)
    return what


def test_entry_naming_other_code_is_refused(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "lab.yaml"
    p.write_text(PROFILE)
    first = load_profile_file(p)
    [entry] = entries(cache)
    key, _profile, lines = pickle.loads(entry.read_bytes())  # the entry this test wrote
    entry.write_bytes(pickle.dumps((key, _Payload(), lines)))
    seen = validations(monkeypatch)
    assert load_profile_file(p).model_dump() == first.model_dump()
    assert MARKS == [] and seen == [str(p)]
    entry.write_bytes(b"not a pickle at all")
    assert load_profile_file(p).model_dump() == first.model_dump() and len(seen) == 2


def test_entry_others_may_write_is_not_used(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "lab.yaml"
    p.write_text(PROFILE)
    load_profile_file(p)
    [entry] = entries(cache)
    seen = validations(monkeypatch)
    entry.chmod(0o666)
    load_profile_file(p)
    assert seen == [str(p)]
    entry.chmod(0o600)
    cache.chmod(0o777)
    load_profile_file(p)
    assert len(seen) == 2
    cache.chmod(0o700)
    load_profile_file(p)
    assert len(seen) == 2  # the entry written on the previous miss


def test_unwritable_cache_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("GPUCONSOLE_CACHE_DIR", str(blocker))
    p = tmp_path / "lab.yaml"
    p.write_text(PROFILE)
    assert load_profile_file(p).hosts["gpu1"].user == "ubuntu"
    assert load_profile_file(p).hosts["gpu1"].user == "ubuntu"


def test_oldest_entries_are_removed_past_the_limit(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profilecache, "MAX_ENTRIES", 3)
    for i in range(5):
        p = tmp_path / f"p{i}.yaml"
        p.write_text(PROFILE)
        load_profile_file(p)
        e = profilecache._entry(p)[0]
        os.utime(e, ns=(i * 10**9, i * 10**9))
    kept = {profilecache._entry(tmp_path / f"p{i}.yaml")[0] for i in (2, 3, 4)}
    assert set(entries(cache)) == kept


VALIDATE = """
import sys
from pathlib import Path
import console.profiles as profiles

called = set()
def watch(frame, event, arg):
    if event == "call":
        called.add(frame.f_globals.get("__name__", ""))
for path in sys.argv[1:]:
    raw = Path(path).read_bytes()
    sys.setprofile(watch)
    try:
        profiles._validate_file(Path(path), raw)
    finally:
        sys.setprofile(None)
print("\\n".join(sorted(m for m in called if m.split(".")[0] in ("console", "remote"))))
"""


def test_validation_runs_only_code_the_cache_key_covers(tmp_path: Path) -> None:
    """A change to any project module that validating a profile runs (its ``alerts:``
    section included: a file whose section the alert code now refuses must not load from an
    entry) must change the cache key (:data:`console.profilecache.VALIDATION_MODULES`)."""
    full = tmp_path / "full.yaml"
    full.write_text(PROFILE + "price_per_gpu_hour: 2.5\n")
    slurm = tmp_path / "slurm.yaml"
    slurm.write_text(
        "scheduler: slurm\nhosts:\n  login: {hostname: login.example.org}\n"
        "slurm: {login_host: login, time_limit: '1-00:00:00', "
        "sbatch_args: ['--qos=high'], partition: gpu}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            VALIDATE,
            str(full),
            str(slurm),
            str(REPO / "profiles" / "example-cluster.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    ran = set(out.stdout.split())
    assert {
        "console.profiles",
        "remote.ssh",
        "console.slurm.fields",
        "console.alerts.config",
    } <= ran
    assert ran <= set(profilecache.VALIDATION_MODULES), ran - set(profilecache.VALIDATION_MODULES)


def test_a_link_to_a_kept_profile_is_its_own_profile(tmp_path: Path) -> None:
    """The path as given names the profile (``source``, and ``name`` from its stem): a link
    to a file already kept under another name is not answered with the other name."""
    lab = tmp_path / "lab.yaml"
    lab.write_text(PROFILE)
    default = tmp_path / "default.yaml"
    default.symlink_to(lab)
    assert load_profile_file(lab).name == "lab"
    got = load_profile_file(default)
    assert got.name == "default" and got.source == str(default)
    assert load_profile_file(lab).name == "lab"
