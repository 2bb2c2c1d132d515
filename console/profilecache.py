"""Validated profiles kept between runs, so that a command does not parse and validate the same
profile file again on every start.

Validating a profile costs about 25 ms of every start (PyYAML's import and parse, building the
pydantic validators of the profile's models, and pydantic's plugin lookup through
``importlib.metadata``), which ``gpuconsole ps`` would otherwise pay each time a script polls
it. A profile file that validated is kept, as the :class:`~console.profiles.Profile` and its
key -> line map, under ``<user cache dir>/profiles/`` (platformdirs; ``$GPUCONSOLE_CACHE_DIR``
overrides the cache dir), one entry per profile path, in the manner of Python's own ``.pyc``
files:

- An entry is used only for the same file path (as given) with byte-identical contents, read
  by the same Python, pydantic and validation code (the sources of
  :data:`VALIDATION_MODULES`); anything else is a miss and the file is validated again (and
  the entry replaced).
- Checks on other files (a key or known_hosts file named by the profile) run on every load
  (:func:`console.profiles.file_problems`); only the file's own validation is skipped.
- An entry is read only when the cache folder and the file belong to this user and nobody else
  may write to them, and is unpickled with an unpickler that builds nothing but the profile's
  own models (:data:`ALLOWED`); anything else is treated as a miss.
- A profile with ``notify:`` URLs is not kept: those URLs carry tokens, which are not copied
  anywhere else.
- Failing to read or write the cache (read-only home, full disk) is never an error: the
  profile is validated as without it. At most :data:`MAX_ENTRIES` entries are kept.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from console.profiles import Profile
    from console.yamlsrc import Lines

log = logging.getLogger("gpuconsole.profilecache")

#: Bumped when the entry's layout changes.
FORMAT = 1

#: Modules whose code decides what a profile file validates to: a change to any of them makes
#: every entry a miss. ``tests/unit/test_profile_cache.py`` checks that validating the
#: example profiles runs no project code outside these.
VALIDATION_MODULES = (
    "console.profiles",
    "console.fields",
    "console.slurm",
    "console.slurm.fields",
    "console.yamlsrc",
    "console.yamlparse",
    "console.errors",
    "console.alerts",
    "console.alerts.config",
    "console.alerts.model",
    "remote.ssh",
    "remote.transport",
    "remote.errors",
    "remote.telemetry",
    "remote.telemetry.schema",
    "remote.agent.agent",
)

#: Most entries kept; writing one more removes the least recently written.
MAX_ENTRIES = 64

#: The only globals an entry may name: the profile's models.
ALLOWED = frozenset(
    {
        ("console.profiles", "Profile"),
        ("console.profiles", "HostConfig"),
        ("console.profiles", "JobDefaults"),
        ("console.profiles", "SlurmConfig"),
    }
)


def cache_dir() -> Path:
    """The folder of the entries: ``$GPUCONSOLE_CACHE_DIR/profiles``, else
    ``<platformdirs user cache dir>/profiles`` (``~/.cache/gpuconsole/profiles`` on Linux)."""
    base = os.environ.get("GPUCONSOLE_CACHE_DIR")
    if not base:
        import platformdirs

        base = platformdirs.user_cache_dir("gpuconsole")
    return Path(base) / "profiles"


_digest: bytes | None = None


def _code_digest() -> bytes:
    """SHA-256 of :data:`FORMAT`, the Python and pydantic versions and the source files of
    :data:`VALIDATION_MODULES` (found without importing them; computed once per process).

    Raises:
        OSError: a source file cannot be read.
    """
    global _digest
    if _digest is None:
        from pydantic.version import VERSION

        h = hashlib.sha256(f"{FORMAT}\0{sys.version}\0{VERSION}".encode())
        for name in VALIDATION_MODULES:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            if origin is None:
                raise OSError(f"no source file for {name}")
            h.update(b"\0" + name.encode() + b"\0" + Path(origin).read_bytes())
        _digest = h.digest()
    return _digest


def _entry(path: Path) -> tuple[Path, str]:
    """The entry file for a profile path (one per absolute path), and the path as validation
    sees it: ``str(path)`` as given, which becomes the profile's ``source`` and, by its stem,
    its default ``name`` (so two links to one file are two profiles, and two entries)."""
    where = str(path)
    name = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]
    return cache_dir() / (name + ".pickle"), where


def _key(where: str, raw: bytes) -> str:
    """What an entry is valid for: the validation code, the path as given and the bytes."""
    return hashlib.sha256(_code_digest() + b"\0" + where.encode() + b"\0" + raw).hexdigest()


class _ProfileUnpickler(pickle.Unpickler):
    """Builds only the classes in :data:`ALLOWED` (pickle would otherwise call anything)."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a profile model")
        found: type = super().find_class(module, name)
        return found


def _private(st: os.stat_result) -> bool:
    """Owned by this user, and neither group nor others may write to it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(path: Path, raw: bytes) -> tuple[Profile, Lines] | None:
    """The validated profile of ``path`` whose file holds ``raw``, and its line map; ``None``
    when there is no usable entry (see the module docstring)."""
    try:
        file, where = _entry(path)
        if not _private(os.stat(file.parent)):
            return None
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not _private(os.fstat(f.fileno())):
                return None
            blob = f.read()
        key, profile, lines = _ProfileUnpickler(io.BytesIO(blob)).load()
        if key != _key(where, raw):
            return None
    except FileNotFoundError:
        return None
    except Exception as e:  # a damaged, foreign or stale entry is a miss, never an error
        log.debug("profile cache entry for %s not used: %r", path, e)
        return None
    from console.profiles import Profile

    if not isinstance(profile, Profile) or not isinstance(lines, dict):
        return None
    return profile, lines


def store(path: Path, raw: bytes, profile: Profile, lines: Lines) -> None:
    """Keep ``profile`` (validated from ``raw``, the bytes of ``path``) for the next load.

    Does nothing for a profile with ``notify:`` URLs (secrets); write errors are logged at
    debug level and otherwise ignored.
    """
    if profile.notify:
        return
    try:
        file, where = _entry(path)
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.stat(file.parent)):
            return
        kept = profile.model_copy()
        kept._alert_rules = None  # built again on use; its models are not in ALLOWED
        blob = pickle.dumps((_key(where, raw), kept, lines), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _prune(file.parent)
    except (OSError, pickle.PicklingError) as e:
        log.debug("profile cache entry for %s not written: %r", path, e)


def _prune(folder: Path) -> None:
    """Keep the :data:`MAX_ENTRIES` most recently written entries of ``folder``.

    Raises:
        OSError: the folder cannot be listed.
    """
    entries = [
        e for e in os.scandir(folder) if e.name.endswith(".pickle") and not e.name.startswith(".")
    ]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for e in entries[: len(entries) - MAX_ENTRIES]:
        Path(e.path).unlink(missing_ok=True)
