"""YAML loading that remembers where every key was, so errors can name file and line.

PyYAML's composed node tree carries 0-based line marks; :func:`load_yaml` returns the plain data
together with a map from key paths (``("env", "FOO")``, ``("hosts", "a", "port")``) to 1-based
line numbers, and :func:`validation_error` turns a pydantic error into a :class:`ConfigError`
naming the file, the line and the field, with a fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from console.errors import ConfigError

Lines = dict[tuple[str | int, ...], int]


def load_yaml(path: Path, what: str = "file") -> tuple[Any, Lines]:
    """Read a YAML file; returns ``(data, lines)``.

    Raises:
        ConfigError: unreadable, malformed (with line and column), or not a mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {what}: {e.strerror}", path=str(path)) from e
    except UnicodeDecodeError as e:
        line = text_line_of(path.read_bytes(), e.start)
        raise ConfigError(f"not UTF-8 text (byte {e.start})", "save the file as UTF-8",
                          path=str(path), line=line) from e
    return parse_yaml(text, str(path), what)


def text_line_of(data: bytes, offset: int) -> int:
    """1-based line number of a byte offset."""
    return data.count(b"\n", 0, offset) + 1


def parse_yaml(text: str, source: str, what: str = "file") -> tuple[Any, Lines]:
    """Parse YAML text (see :func:`load_yaml`); ``source`` names it in errors."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        col = f" (column {mark.column + 1})" if mark else ""
        problem = e.problem or e.context or "invalid YAML"
        raise ConfigError(
            f"malformed YAML{col}: {problem}",
            "fix the YAML syntax at that line (indentation, quotes, `key: value`)",
            path=source,
            line=line,
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {e}", path=source) from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"a {what} must be a mapping of `key: value`, found {type(data).__name__}",
            path=source,
            line=1,
        )
    lines: Lines = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def _walk(node: yaml.Node, path: tuple[str | int, ...], lines: Lines) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            lines[path + (key,)] = k.start_mark.line + 1
            _walk(v, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines)


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


def validation_error(
    err: ValidationError, model: type[BaseModel], source: str, lines: Lines
) -> ConfigError:
    """The first error of a pydantic validation as a :class:`ConfigError` with file:line."""
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if isinstance(p, (str, int)))
    # pydantic appends union-member tags ("int", "list[int]", "literal[...]") to the location
    clean = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _TAGS)))
    field = _field_name(clean)
    line = line_of(lines, clean)
    kind = first["type"]
    if kind == "extra_forbidden":
        parent = _model_at(model, clean[:-1])
        known = sorted(parent.model_fields) if parent else []
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
        return ConfigError("required field is missing", f"add `{clean[-1]}:`", path=source,
                           line=line, field=field)
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first.get("input") is not None and kind not in ("value_error",):
        msg = f"{msg} (got {first['input']!r})"
    return ConfigError(msg, FIELD_HINTS.get(str(clean[0]) if clean else ""), path=source,
                       line=line, field=field)


#: The fix printed for a bad value of a job spec or profile field.
FIELD_HINTS = {
    "name": "lowercase letters, digits, '.', '_', '-'; e.g. `name: resnet-ddp`",
    "nodes": "a count like `nodes: 2`, or host names like `nodes: [gpu1, gpu2]`",
    "gpus_per_node": "`all`, a count like `2`, indices like `[0, 1]`, or `0` for a CPU job",
    "nproc_per_node": "a whole number >= 1 (default: one per GPU)",
    "args": "a list of strings, e.g. `args: [\"--lr\", \"3e-4\"]`",
    "env": "a mapping of NAME: \"value\" (quote numbers and yes/no)",
    "mounts": "a list like `[\"/data:/data:ro\", \"~/runs:/runs\"]`",
    "shm_size": "a size like `8g`, or use `ipc: host`",
    "ipc": "`ipc: host` or leave it out",
    "max_restarts": "a whole number >= 0",
    "rdzv_port": "a TCP port, 1-65535",
    "image": "an image reference like `nvcr.io/nvidia/pytorch:24.10-py3`",
    "hosts": "a mapping of host names to `{hostname: ..., user: ...}`",
    "script": "a path inside workdir, e.g. `script: train.py`",
    "exclude": "a list of shell patterns, e.g. `exclude: [data, \"*.ckpt\"]`",
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
