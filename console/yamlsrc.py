"""YAML loading that remembers where every key was, so errors can name file and line.

PyYAML's composed node tree carries 0-based line marks; :func:`load_yaml` returns the plain data
together with a map from key paths (``("env", "FOO")``, ``("hosts", "a", "port")``) to 1-based
line numbers, and :func:`validation_error` turns a pydantic error into a :class:`ConfigError`
naming the file, the line and the field, with a fix. The parser itself (PyYAML) is in
:mod:`console.yamlparse`, imported when a file is parsed.
"""

from __future__ import annotations

import difflib
import itertools
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from console.errors import ConfigError

Lines = dict[tuple[str | int, ...], int]


#: Deepest nesting of collections a file may have (specs and profiles need four or five).
MAX_DEPTH = 64
#: Most values a file may expand to, counting every alias as a copy of what it names (so
#: "billion laughs" alias bombs are refused while being composed, before any copy is made).
MAX_VALUES = 100_000
#: Largest file read (bytes).
MAX_BYTES = 1_000_000


def load_yaml(path: Path, what: str = "file") -> tuple[Any, Lines]:
    """Read a YAML file; returns ``(data, lines)``.

    Raises:
        ConfigError: unreadable, larger than :data:`MAX_BYTES`, not UTF-8, malformed or
            refused by :class:`~console.yamlparse.GuardedLoader` (with line and column), or
            not a mapping.
    """
    return parse_yaml_bytes(read_source(path, what), str(path), what)


def _not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is when it is not a regular file (for messages)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def source_problem(path: Path, what: str = "file") -> ConfigError | None:
    """Why ``path`` cannot be read as a YAML ``what`` (a job spec, a profile): missing, or a
    directory, FIFO, device or socket rather than a regular file; ``None`` when it is a
    regular file (a symbolic link to one counts). Nothing is opened, so a FIFO never blocks
    and a device is never read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ConfigError(f"{what} not found", f"give the path of a YAML {what}", path=str(path))
    except OSError as e:
        return ConfigError(
            f"cannot read {what}: {e.strerror}", "give a readable file", path=str(path)
        )
    kind = _not_regular(st.st_mode)
    if kind is None:
        return None
    if kind == "a directory":
        hint = f"give the path of a YAML {what} file inside it, not the directory"
    else:
        hint = f"give the path of a regular YAML file (save the {what} to a file first)"
    return ConfigError(
        f"{what} is {kind}, not a regular file; it is not read", hint, path=str(path)
    )


def read_source(path: Path, what: str = "file") -> bytes:
    """The bytes of a YAML file (see :func:`load_yaml`); only a regular file is read
    (:func:`source_problem`), opened without blocking, so a FIFO put in its place after the
    check is refused too.

    Raises:
        ConfigError: missing, not a regular file, unreadable, or larger than
            :data:`MAX_BYTES`.
    """
    problem = source_problem(path, what)
    if problem is not None:
        raise problem
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(
            f"cannot read {what}: {e.strerror}", "give a readable file", path=str(path)
        ) from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        kind = _not_regular(st.st_mode)
        if kind is not None:
            raise ConfigError(
                f"{what} is {kind}, not a regular file; it is not read",
                "give a regular YAML file",
                path=str(path),
            )
        try:
            data = f.read(MAX_BYTES + 1)
        except OSError as e:
            raise ConfigError(
                f"cannot read {what}: {e.strerror}", "give a readable file", path=str(path)
            ) from e
    if len(data) > MAX_BYTES:
        raise ConfigError(
            f"the {what} is larger than {MAX_BYTES:,} bytes",
            "give the right file; a job spec or profile is a few lines",
            path=str(path),
        )
    return data


def parse_yaml_bytes(raw: bytes, source: str, what: str = "file") -> tuple[Any, Lines]:
    """Decode (UTF-8) and parse a YAML file's bytes (see :func:`load_yaml`).

    Raises:
        ConfigError: not UTF-8 (with the line), or as :func:`parse_yaml`.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = text_line_of(raw, e.start)
        raise ConfigError(
            f"not UTF-8 text (byte {e.start})", "save the file as UTF-8", path=source, line=line
        ) from e
    return parse_yaml(text, source, what)


def text_line_of(data: bytes, offset: int) -> int:
    """1-based line number of a byte offset."""
    return data.count(b"\n", 0, offset) + 1


def parse_yaml(text: str, source: str, what: str = "file") -> tuple[Any, Lines]:
    """Parse YAML text with :class:`console.yamlparse.GuardedLoader` (see :func:`load_yaml`);
    ``source`` names it in errors.

    Raises:
        ConfigError: malformed, refused by the loader's limits, or not a mapping (with line).
    """
    from console.yamlparse import parse  # PyYAML: only where a file is parsed

    return parse(text, source, what)


def line_of(lines: Lines, loc: tuple[str | int, ...]) -> int | None:
    """The line of the longest known prefix of ``loc``."""
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _field_name(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class ConfigErrors(ConfigError):
    """Several problems of one file, reported together.

    The message is the first problem, each further problem on its own ``  also:`` line and
    every problem's fix on a ``  fix:`` line after it; the last problem's fix is the
    ``hint``, so the CLI's ``error: <message>`` + ``  fix: <hint>`` reads as one list.

    Attributes:
        problems: each problem as its own :class:`ConfigError`, in file order.
    """

    def __init__(self, problems: list[ConfigError]) -> None:
        first, last = problems[0], problems[-1]
        super().__init__(
            first.detail, last.hint, path=first.path, line=first.line, field=first.field
        )
        parts = [f"{first.message} (and {len(problems) - 1} more)"]
        for prev, p in itertools.pairwise(problems):
            if prev.hint:
                parts.append(f"  fix: {prev.hint}")
            parts.append(f"  also: {p.message}")
        self.message = "\n".join(parts)
        self.args = (self.message,)
        self.problems = tuple(problems)


def combine(problems: list[ConfigError]) -> ConfigError:
    """One error for a list of problems (the problem itself when there is one).

    Raises:
        ValueError: ``problems`` is empty.
    """
    if not problems:
        raise ValueError("no problems to combine")
    flat = [q for p in problems for q in (p.problems if isinstance(p, ConfigErrors) else (p,))]
    return flat[0] if len(flat) == 1 else ConfigErrors(flat)


def validation_errors(
    err: ValidationError,
    model: type[BaseModel],
    source: str,
    lines: Lines,
    prefix: tuple[str | int, ...] = (),
) -> list[ConfigError]:
    """Every error of a pydantic validation as a :class:`ConfigError` with file:line, in
    file order, one per field (a union's per-member errors count once).

    ``prefix`` is where ``model``'s data sits in the file (``("alerts",)`` for a section
    validated on its own): it is put before each error's location for the line and the
    field's name."""
    out: list[ConfigError] = []
    seen: set[tuple[str | int, ...]] = set()
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if isinstance(p, (str, int)))
        # pydantic appends union-member tags ("int", "list[int]", "literal[...]") to the
        # location
        clean = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _TAGS)))
        if clean in seen:
            continue
        seen.add(clean)
        out.append(_one_error(e, clean, model, source, lines, prefix))
    out.sort(key=lambda c: c.line or 0)
    return out


def validation_error(
    err: ValidationError, model: type[BaseModel], source: str, lines: Lines
) -> ConfigError:
    """All errors of a pydantic validation as one :class:`ConfigError` (see
    :func:`validation_errors` and :class:`ConfigErrors`)."""
    return combine(validation_errors(err, model, source, lines))


def _one_error(
    e: Any,
    clean: tuple[str | int, ...],
    model: type[BaseModel],
    source: str,
    lines: Lines,
    prefix: tuple[str | int, ...] = (),
) -> ConfigError:
    field = _field_name(prefix + clean)
    line = line_of(lines, prefix + clean)
    kind = e["type"]
    if kind == "extra_forbidden":
        parent = _model_at(model, clean[:-1])
        known = sorted(f for f in parent.model_fields if f != "source") if parent else []
        close = difflib.get_close_matches(str(clean[-1]), known, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        return ConfigError(
            "unknown field",
            f"{hint}known fields here: {', '.join(known)}",
            path=source,
            line=line,
            field=field,
        )
    if kind == "missing":
        return ConfigError(
            "required field is missing", f"add `{clean[-1]}:`", path=source, line=line, field=field
        )
    msg = str(e["msg"]).removeprefix("Value error, ")
    given = e.get("input")
    if given is not None and kind not in ("value_error",):
        shown = repr(given)
        msg = f"{msg} (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    key = next((str(p) for p in reversed(clean) if str(p) in FIELD_HINTS), "")
    hint = FIELD_HINTS.get(key) or FIELD_HINTS.get(str(clean[0]) if clean else "") or ""
    return ConfigError(
        msg, hint or "see the example in the README", path=source, line=line, field=field
    )


#: The fix printed for a bad value of a job spec or profile field.
FIELD_HINTS = {
    "name": "lowercase letters, digits, '.', '_', '-'; e.g. `name: resnet-ddp`",
    "nodes": "a count like `nodes: 2`, or host names like `nodes: [gpu1, gpu2]`",
    "gpus_per_node": "`all`, a count like `2`, indices like `[0, 1]`, or `0` for a CPU job",
    "nproc_per_node": "a whole number from 1 to 1024 (default: one per GPU)",
    "args": 'a list of strings, e.g. `args: ["--lr", "3e-4"]`',
    "env": 'a mapping of NAME: "value" (quote numbers and yes/no)',
    "mounts": 'a list of host_path:container_path[:ro] like `["/data:/data:ro", '
    '"~/runs:/runs"]`; each container path its own, not /workspace or '
    "/opt/gpuconsole-gang",
    "shm_size": "a size like `8g`, or use `ipc: host`",
    "ipc": "`ipc: host` or leave it out",
    "max_restarts": "a whole number from 0 to 1000",
    "rdzv_port": "a TCP port, 1-65535",
    "image": "an image reference like `nvcr.io/nvidia/pytorch:24.10-py3`",
    "hosts": "a mapping of host names to `{hostname: ..., user: ...}`",
    "script": "a path inside workdir, e.g. `script: train.py`",
    "exclude": 'a list of shell patterns, e.g. `exclude: [data, "*.ckpt"]`',
    "workdir": "a folder relative to the spec file, e.g. `workdir: .`",
    "hostname": "a host name, IP or ~/.ssh/config alias, e.g. `hostname: gpu1.example.org`",
    "port": "a TCP port, 1-65535",
    "user": "a user name on the host, e.g. `user: ubuntu`",
    "identity_file": "a private key file, e.g. `identity_file: ~/.ssh/id_ed25519`",
    "jump": "`jump: [user@]host[:port]`, like ssh -J, e.g. `jump: me@bastion:2222`",
    "address": "the IP other nodes reach this host on, e.g. `address: 10.0.0.12`",
    "docker_socket": "an absolute path, e.g. `docker_socket: /var/run/docker.sock`",
    "known_hosts": "an OpenSSH known_hosts file, e.g. `known_hosts: ~/.ssh/known_hosts`",
    "cap_add": "capability names like `[SYS_PTRACE]`",
    "defaults": "a mapping of job defaults: image, shm_size, ipc, mounts, env, ...",
    "keymap": "binding id -> keys as text (comma separated, or a list), e.g. "
    "`logs.search: ctrl+f`; quote what YAML reads as another type: "
    '`app.help: "f1"`, not `true` or an empty value',
    "interval": "seconds between samples, 0.1-60",
    "connect_timeout": "seconds, a finite number above 0 and at most 600, e.g. "
    "`connect_timeout: 10`",
    "stop_grace": "seconds between SIGTERM and SIGKILL, 0-3600, e.g. `stop_grace: 30`",
    "price_per_gpu_hour": "USD per GPU hour, 0-10000, e.g. `price_per_gpu_hour: 2.5`",
}


_TAGS = {"int", "str", "list", "dict", "bool", "float", "function-after", "function-before"}


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    current: Any = model
    dict_key_next = False
    for part in loc:
        if isinstance(part, int) or dict_key_next:
            dict_key_next = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        f = current.model_fields.get(str(part))
        if f is None:
            return None
        dict_key_next = getattr(f.annotation, "__origin__", None) is dict
        current = _inner_model(f.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with the non-``None`` values of ``override`` (one level)."""
    out = dict(base)
    out.update({k: v for k, v in override.items() if v is not None})
    return out
