"""YAML loading that remembers where every key was, so errors can name file and line.

PyYAML's composed node tree carries 0-based line marks; :func:`load_yaml` returns the plain data
together with a map from key paths (``("env", "FOO")``, ``("hosts", "a", "port")``) to 1-based
line numbers, and :func:`validation_error` turns a pydantic error into a :class:`ConfigError`
naming the file, the line and the field, with a fix.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
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

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """A YAML document refused for what it contains (not for its syntax); carries a fix."""

    def __init__(self, problem: str, mark: Any, hint: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


def _no_binary(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise _Refused("binary values (!!binary) are not accepted", node.start_mark,
                   "write the value as plain text")


class GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with limits PyYAML has no option for.

    Refuses, with the line: nesting deeper than :data:`MAX_DEPTH`; an alias inside the node
    it names (a cycle); documents that expand to more than :data:`MAX_VALUES` values; a key
    given twice in one mapping; a key that is not a plain scalar; NUL characters;
    ``!!binary``. Plain scalar keys are always strings (``ON:`` and ``1:`` are names, not a
    bool and an int).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._sizes: dict[int, int] = {}
        self._open: set[str] = set()

    def _count(self, n: int, mark: Any) -> None:
        self._values += n
        if self._values > MAX_VALUES:
            raise _Refused(
                f"the document expands to more than {MAX_VALUES:,} values (aliases counted "
                "as copies)", mark, "write the values out, or use fewer nested aliases")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Compose one node, enforcing the limits (see the class docstring)."""
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Refused(f"alias *{event.anchor} is inside the node &{event.anchor} it "
                               "names (a cycle)", event.start_mark,
                               "an alias may only name a node that ends before it")
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._count(self._sizes.get(id(target), 1), event.start_mark)
            alias: yaml.Node = super().compose_node(parent, index)  # type: ignore[assignment]
            return alias
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark,
                           "flatten the file; specs and profiles need a few levels")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        before = self._values
        self._count(1, event.start_mark)
        try:
            node: yaml.Node = super().compose_node(parent, index)  # type: ignore[assignment]
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)
        self._sizes[id(node)] = self._values - before
        return node

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:
        """A scalar; NUL characters (also written as ``\\0`` escapes) are refused."""
        node: yaml.ScalarNode = super().compose_scalar_node(anchor)
        if "\x00" in node.value:
            raise _Refused("contains U+0000 (NUL), which no field accepts", node.start_mark,
                           "remove the NUL character (`\\0` in a quoted string)")
        return node

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        """A mapping; duplicate and non-scalar keys are refused, plain keys made strings."""
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: dict[str, yaml.Node] = {}
        for k, _v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise _Refused("a key must be a plain name, not a list or mapping",
                               k.start_mark, "write `name: value`")
            if k.tag == _MERGE_TAG:
                continue
            if k.style is None:
                k.tag = _STR_TAG
            if k.value in seen:
                raise _Refused(
                    f"duplicate key {k.value!r} (first at line "
                    f"{seen[k.value].start_mark.line + 1})", k.start_mark,
                    "keep one of them: YAML would silently use the last")
            seen[k.value] = k
        return node


GuardedLoader.add_constructor("tag:yaml.org,2002:binary", _no_binary)


def load_yaml(path: Path, what: str = "file") -> tuple[Any, Lines]:
    """Read a YAML file; returns ``(data, lines)``.

    Raises:
        ConfigError: unreadable, larger than :data:`MAX_BYTES`, not UTF-8, malformed or
            refused by :class:`GuardedLoader` (with line and column), or not a mapping.
    """
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"the {what} is larger than {MAX_BYTES:,} bytes",
                              "give the right file; a job spec or profile is a few lines",
                              path=str(path))
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {what}: {e.strerror}", "give a readable file",
                          path=str(path)) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = text_line_of(raw, e.start)
        raise ConfigError(f"not UTF-8 text (byte {e.start})", "save the file as UTF-8",
                          path=str(path), line=line) from e
    return parse_yaml(text, str(path), what)


def text_line_of(data: bytes, offset: int) -> int:
    """1-based line number of a byte offset."""
    return data.count(b"\n", 0, offset) + 1


def parse_yaml(text: str, source: str, what: str = "file") -> tuple[Any, Lines]:
    """Parse YAML text with :class:`GuardedLoader` (see :func:`load_yaml`); ``source`` names
    it in errors."""
    loader: GuardedLoader | None = None
    try:
        loader = GuardedLoader(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _Refused as e:
        mark = e.problem_mark
        raise ConfigError(str(e.problem), e.hint, path=source,
                          line=mark.line + 1 if mark else None) from e
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
    except yaml.reader.ReaderError as e:
        # a character YAML does not allow in a file (NUL, other controls); position counts
        # characters of the text
        pos = min(e.position, len(text))
        code = e.character if isinstance(e.character, int) else 0
        raise ConfigError(
            f"the file contains the control character U+{code:04X} (column "
            f"{pos - text.rfind(chr(10), 0, pos)}), which YAML does not allow",
            "remove it; write control characters as escapes in double quotes (\"\\t\")",
            path=source,
            line=text.count("\n", 0, pos) + 1,
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"malformed YAML: {e}", "fix the YAML syntax", path=source) from e
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"a {what} must be a mapping of `key: value`, found {type(data).__name__}",
            "write `key: value` lines at the top level",
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
        super().__init__(first.detail, last.hint, path=first.path, line=first.line,
                         field=first.field)
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
    err: ValidationError, model: type[BaseModel], source: str, lines: Lines
) -> list[ConfigError]:
    """Every error of a pydantic validation as a :class:`ConfigError` with file:line, in
    file order, one per field (a union's per-member errors count once)."""
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
        out.append(_one_error(e, clean, model, source, lines))
    out.sort(key=lambda c: c.line or 0)
    return out


def validation_error(
    err: ValidationError, model: type[BaseModel], source: str, lines: Lines
) -> ConfigError:
    """All errors of a pydantic validation as one :class:`ConfigError` (see
    :func:`validation_errors` and :class:`ConfigErrors`)."""
    return combine(validation_errors(err, model, source, lines))


def _one_error(e: Any, clean: tuple[str | int, ...], model: type[BaseModel], source: str,
               lines: Lines) -> ConfigError:
    field = _field_name(clean)
    line = line_of(lines, clean)
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
        return ConfigError("required field is missing", f"add `{clean[-1]}:`", path=source,
                           line=line, field=field)
    msg = str(e["msg"]).removeprefix("Value error, ")
    given = e.get("input")
    if given is not None and kind not in ("value_error",):
        shown = repr(given)
        msg = f"{msg} (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    key = next((str(p) for p in reversed(clean) if str(p) in FIELD_HINTS), "")
    hint = FIELD_HINTS.get(key) or FIELD_HINTS.get(str(clean[0]) if clean else "") or ""
    return ConfigError(msg, hint or "see the example in the README", path=source, line=line,
                       field=field)


#: The fix printed for a bad value of a job spec or profile field.
FIELD_HINTS = {
    "name": "lowercase letters, digits, '.', '_', '-'; e.g. `name: resnet-ddp`",
    "nodes": "a count like `nodes: 2`, or host names like `nodes: [gpu1, gpu2]`",
    "gpus_per_node": "`all`, a count like `2`, indices like `[0, 1]`, or `0` for a CPU job",
    "nproc_per_node": "a whole number from 1 to 1024 (default: one per GPU)",
    "args": "a list of strings, e.g. `args: [\"--lr\", \"3e-4\"]`",
    "env": "a mapping of NAME: \"value\" (quote numbers and yes/no)",
    "mounts": "a list like `[\"/data:/data:ro\", \"~/runs:/runs\"]`",
    "shm_size": "a size like `8g`, or use `ipc: host`",
    "ipc": "`ipc: host` or leave it out",
    "max_restarts": "a whole number from 0 to 1000",
    "rdzv_port": "a TCP port, 1-65535",
    "image": "an image reference like `nvcr.io/nvidia/pytorch:24.10-py3`",
    "hosts": "a mapping of host names to `{hostname: ..., user: ...}`",
    "script": "a path inside workdir, e.g. `script: train.py`",
    "exclude": "a list of shell patterns, e.g. `exclude: [data, \"*.ckpt\"]`",
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
    "keymap": "binding id -> keys, e.g. `logs.search: ctrl+f`",
    "interval": "seconds between samples, 0.1-60",
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
