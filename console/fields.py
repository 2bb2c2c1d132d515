"""Value checks shared by job specs and profiles: one-line text, image references, mounts.

Each check raises ``ValueError`` with a message that reads after ``file:line: field:`` (pydantic
turns it into a validation error; :mod:`console.yamlsrc` into a :class:`ConfigError`).
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from typing import Annotated, Literal

from pydantic import AfterValidator

from console.errors import UsageError
from remote.gang import MOUNT_DIR as GANG_MOUNT_DIR

#: Unicode categories refused in one-line fields: controls (NUL, CR, ESC, BEL...), format
#: characters (bidi overrides, zero-width), line and paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp"})

# Docker's reference grammar (github.com/distribution/reference, reference.go v0.5.0):
#   reference := name [ ":" tag ] [ "@" digest ];  name := [domain '/'] path
#   domain := host [':' port];  path-component := [a-z0-9]+ (separator [a-z0-9]+)*
#   separator := [_.] | "__" | "-"+;  tag := [\w][\w.-]{0,127};  digest := alg ":" hex{32,}
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = (
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
    r"(?::[0-9]+)?"
)
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF_RE = re.compile(rf"^(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?$", re.ASCII)
_PATH_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$", re.ASCII)
#: Docker refuses names (domain and path, without tag or digest) longer than this.
IMAGE_NAME_MAX = 255


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that has no place in one line of text, or ``None``."""
    return next((c for c in text if unicodedata.category(c) in _UNPRINTABLE), None)


def char_name(c: str) -> str:
    """``U+000A (line feed)``-style name of a character, for messages."""
    names = {
        "\x00": "NUL",
        "\n": "line feed",
        "\r": "carriage return",
        "\t": "tab",
        "\x07": "BEL",
        "\x1b": "escape",
    }
    name = names.get(c) or unicodedata.name(c, None) or "control character"
    return f"U+{ord(c):04X} ({name.lower() if len(name) > 3 else name})"


def one_line(v: str) -> str:
    """Refuse control and format characters (newline, NUL, escape, bidi overrides...)."""
    bad = unprintable(v)
    if bad is not None:
        raise ValueError(f"contains {char_name(bad)}; it must be one line of printable text")
    return v


def no_nul(v: str) -> str:
    """Refuse NUL, which no argument or environment value can carry (execve ends it there)."""
    if "\x00" in v:
        raise ValueError("contains U+0000 (NUL), which no argument or environment value can carry")
    return v


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A POSIX environment variable name (letters, digits, ``_``; not starting with a digit)."""


def env_names(v: dict[str, str]) -> dict[str, str]:
    """Validator of an ``env:`` mapping's keys; raises ``ValueError`` naming the first key
    that is not a valid environment variable name."""
    for k in v:
        if not ENV_NAME_RE.match(k):
            raise ValueError(f"{k!r} is not a valid environment variable name")
    return v


def no_space(v: str) -> str:
    """One line, and no white space at all."""
    one_line(v)
    if any(c.isspace() for c in v):
        raise ValueError(f"{v!r} contains white space")
    return v


def not_blank(v: str) -> str:
    """Refuse an empty (or all white space) value: for a field whose absence means a default
    (``known_hosts`` -> ``~/.ssh/known_hosts``), ``""`` would silently mean that default."""
    if not v.strip():
        raise ValueError("is empty; give a value, or leave the field out for the default")
    return v


#: A one-line string (names, paths, hosts).
OneLine = Annotated[str, AfterValidator(one_line)]
#: A one-line string that is not empty (paths and names whose absence means a default).
Given = Annotated[str, AfterValidator(one_line), AfterValidator(not_blank)]
#: A string without NUL (arguments, environment values: newlines allowed).
NoNul = Annotated[str, AfterValidator(no_nul)]
#: One line without white space (user names, host names, addresses).
Word = Annotated[str, AfterValidator(no_space)]

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+$")


def apprise_url(v: str) -> str:
    """An Apprise URL (``scheme://...``: ``slack://``, ``mailto://``, ``json://``...); only its
    shape is checked here, Apprise itself knows the schemes.

    Raises:
        ValueError: not ``scheme://`` followed by non-blank characters.
    """
    if not _SCHEME_RE.match(v):
        raise ValueError(
            f"{v[:40]!r} is not a notification URL like slack://TOKEN_A/TOKEN_B "
            "or mailto://user:pass@example.org (Apprise URL syntax)"
        )
    return v


#: One Apprise notification URL (a profile's ``notify:`` entries, ``watch --notify``).
AppriseUrl = Annotated[OneLine, AfterValidator(apprise_url)]


def image_reference(v: str) -> str:
    """Check a Docker image reference against Docker's reference grammar.

    Raises:
        ValueError: not a reference Docker would accept (``/``, upper case in the path,
            spaces, an empty tag), or a name over 255 characters.
    """
    one_line(v)
    m = IMAGE_REF_RE.match(v)
    if m is None:
        raise ValueError(
            f"{v!r} is not a Docker image reference ([registry/]path[:tag][@digest], path in "
            "lowercase letters, digits and . _ -)"
        )
    name = m.group("name")
    first, slash, _ = name.partition("/")
    # Docker reads the first component as a registry only when it has '.' or ':' or is
    # localhost; otherwise it is part of the (lowercase) path on Docker Hub
    if not (
        slash and (any(c in first for c in ".:") or first == "localhost")
    ) and not _PATH_RE.match(name):
        raise ValueError(
            f"{v!r} is not a Docker image reference: the repository name must be lowercase"
        )
    if len(name) > IMAGE_NAME_MAX:
        raise ValueError(f"the image name is longer than {IMAGE_NAME_MAX} characters")
    return v


#: An image reference (see :func:`image_reference`).
ImageRef = Annotated[str, AfterValidator(image_reference)]

#: Where the synced workdir is mounted in every container (read-only).
WORKSPACE = "/workspace"
#: Container paths gpuconsole mounts itself -> what it mounts there; a job's mount may not
#: take them (nor go inside the supervisor's folder): Docker refuses a second mount at one
#: point when the container is created ("Duplicate mount point").
RESERVED_TARGETS = {WORKSPACE: "the synced workdir", GANG_MOUNT_DIR: "the gang supervisor"}


def container_path(path: str) -> str:
    """An absolute container path as Docker compares mount points: ``.``, ``..``, repeated
    and trailing ``/`` resolved (``posixpath.normpath``, which keeps a leading ``//`` as
    POSIX allows; Docker does not, so it becomes ``/``): ``//workspace``,
    ``/workspace/.`` and ``/opt/../workspace`` are all ``/workspace``."""
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("/") else norm


def parse_mount(m: str) -> tuple[str, str, bool]:
    """Split ``host:container[:ro|rw]`` into ``(host, container, read_only)``.

    Host paths are folders on the GPU host: absolute, or ``~``/``~/...`` (the host user's
    home). A relative host path (``./checkpoints``) is refused: it has no folder to be
    relative to on the host (the synced workdir is shared, content-addressed and read-only).

    The container path is returned normalised (:func:`container_path`).

    Raises:
        ValueError: wrong form, a relative path, a control character, or a container path
            that is the root or one gpuconsole mounts itself (:data:`RESERVED_TARGETS`:
            the workdir at ``/workspace``, the gang supervisor), however it is written.
    """
    one_line(m)
    parts = m.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"mount {m!r} must be host_path:container_path[:ro]")
    src, dst = parts[0], parts[1]
    if not (src.startswith("/") or src == "~" or src.startswith("~/")):
        raise ValueError(
            f"mount {m!r}: the host path {src!r} is relative; a mount's host path is a folder "
            "on the GPU host, absolute or ~/... (the synced workdir is read-only and shared "
            "between jobs, so nothing is mounted relative to it)"
        )
    if not dst.startswith("/"):
        raise ValueError(f"mount {m!r}: the container path must be absolute")
    target = container_path(dst)
    shown = dst if target == dst else f"{dst!r} (that is {target})"
    if target == "/":
        raise ValueError(
            f"mount {m!r}: the container path {shown} would hide the root; "
            "mount at a folder such as /data"
        )
    for reserved, what in RESERVED_TARGETS.items():
        inside = reserved == GANG_MOUNT_DIR and target.startswith(reserved + "/")
        if target == reserved or inside:
            place = f"is inside {reserved}, where" if inside else "is where"
            raise ValueError(
                f"mount {m!r}: the container path {shown} {place} gpuconsole "
                f"mounts {what}; mount at another path, such as /data"
            )
    return src, target, len(parts) == 3 and parts[2] == "ro"


def mount(v: str) -> str:
    """:func:`parse_mount` as a validator (returns the mount unchanged)."""
    parse_mount(v)
    return v


#: A ``host:container[:ro]`` mount (see :func:`parse_mount`).
Mount = Annotated[str, AfterValidator(mount)]

_SIZE_RE = re.compile(r"^(\d{1,15})(\.\d+)?([bkmgBKMG]?)$")


def size(v: str) -> str:
    """A Docker size like ``512m`` or ``8g``, at most 1 TiB."""
    m = _SIZE_RE.match(v)
    if m is None:
        raise ValueError("must be a size like 512m or 8g")
    mult = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(3).lower()]
    if float(m.group(1) + (m.group(2) or "")) * mult > 2**40:
        raise ValueError("is larger than 1 TiB")
    return v


#: A Docker size (see :func:`size`).
Size = Annotated[str, AfterValidator(size)]


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")


def duration_s(value: str) -> float | None:
    """Seconds in a duration written ``90s``, ``10m``, ``2h``, ``1d`` or ``2w``; None when
    ``value`` is not one."""
    m = _DURATION.match(value.strip())
    if m is None:
        return None
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def parse_gpus(value: str) -> Literal["all"] | int | list[int]:
    """``--gpus``: ``all``, a count (``2``; ``0`` = none) or indices (``0,1``; ``3,`` is
    index 3 alone).

    Raises:
        UsageError: anything else.
    """
    v = value.strip()
    if v == "all":
        return "all"
    try:
        if "," in v:
            ids = [int(p) for p in v.split(",") if p.strip()]
            if ids and all(i >= 0 for i in ids) and len(set(ids)) == len(ids):
                return ids
        elif v.isdigit():
            return int(v)
    except ValueError:
        pass
    raise UsageError(
        f"--gpus {value!r}: not `all`, a count or GPU indices",
        "e.g. `--gpus all`, `--gpus 2` or `--gpus 0,1` (indices as nvidia-smi)",
    )
