"""The YAML parser behind :func:`console.yamlsrc.parse_yaml`: PyYAML's safe loader with the
limits it has no option for, and the map from key paths to lines.

Kept apart from :mod:`console.yamlsrc` so that what only reports errors (and a profile read
from :mod:`console.profilecache`) does not import PyYAML.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from console.errors import ConfigError
from console.yamlsrc import MAX_DEPTH, MAX_VALUES, Lines

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """A YAML document refused for what it contains (not for its syntax); carries a fix."""

    def __init__(self, problem: str, mark: Any, hint: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


def _no_binary(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise _Refused(
        "binary values (!!binary) are not accepted",
        node.start_mark,
        "write the value as plain text",
    )


class GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with limits PyYAML has no option for.

    Refuses, with the line: nesting deeper than :data:`MAX_DEPTH`; an alias inside the node
    it names (a cycle); documents that expand to more than :data:`MAX_VALUES` values; a key
    given twice in one mapping; a key that is not a plain scalar; NUL characters;
    ``!!binary``; tags that make another type (``!!set``, ``!!omap``, ``!!pairs``, and any tag
    without a safe constructor: ``!!python/...``). Plain scalar keys are always strings
    (``ON:`` and ``1:`` are names, not a bool and an int).
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
                "as copies)",
                mark,
                "write the values out, or use fewer nested aliases",
            )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Compose one node, enforcing the limits (see the class docstring)."""
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise _Refused(
                    f"alias *{event.anchor} is inside the node &{event.anchor} it names (a cycle)",
                    event.start_mark,
                    "an alias may only name a node that ends before it",
                )
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._count(self._sizes.get(id(target), 1), event.start_mark)
            alias: yaml.Node = super().compose_node(parent, index)  # type: ignore[assignment]
            return alias
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(
                f"nested deeper than {MAX_DEPTH} levels",
                event.start_mark,
                "flatten the file; specs and profiles need a few levels",
            )
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
            raise _Refused(
                "contains U+0000 (NUL), which no field accepts",
                node.start_mark,
                "remove the NUL character (`\\0` in a quoted string)",
            )
        return node

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        """A mapping; duplicate and non-scalar keys are refused, plain keys made strings."""
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: dict[str, yaml.Node] = {}
        for k, _v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise _Refused(
                    "a key must be a plain name, not a list or mapping",
                    k.start_mark,
                    "write `name: value`",
                )
            if k.tag == _MERGE_TAG:
                continue
            if k.style is None:
                k.tag = _STR_TAG
            if k.value in seen:
                raise _Refused(
                    f"duplicate key {k.value!r} (first at line "
                    f"{seen[k.value].start_mark.line + 1})",
                    k.start_mark,
                    "keep one of them: YAML would silently use the last",
                )
            seen[k.value] = k
        return node


def _no_retyping_tag(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    raise _Refused(
        f"the tag {tag} is not accepted (tags make values of other types than the "
        "fields take: sets, pairs, Python objects)",
        node.start_mark,
        "write the value without the tag: a list as `[a, b]`, a mapping as "
        "`{key: value}`, text in quotes",
    )


GuardedLoader.add_constructor("tag:yaml.org,2002:binary", _no_binary)
# Tags that build what no field takes (a set loses the order of `args`, !!omap and !!pairs
# are lists of tuples); any tag PyYAML's safe loader has no constructor for (!!python/...,
# !custom) is refused the same way, with its line.
for _tag in ("set", "omap", "pairs"):
    GuardedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _no_retyping_tag)
GuardedLoader.add_constructor(None, _no_retyping_tag)

# Numbers as YAML 1.2 reads them: PyYAML follows YAML 1.1, where `1:30:00` is the base-60
# integer 5400 and `8080:80` the integer 484880, so a time limit or a port mapping written
# without quotes became a wrong number. Without the sexagesimal forms they stay strings.
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
GuardedLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
GuardedLoader.add_implicit_resolver(
    _INT_TAG,
    re.compile(
        r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)"
        r"|[-+]?0x[0-9a-fA-F_]+)$"
    ),
    list("-+0123456789"),
)
GuardedLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def parse(text: str, source: str, what: str = "file") -> tuple[Any, Lines]:
    """Parse YAML text with :class:`GuardedLoader`; see :func:`console.yamlsrc.parse_yaml`."""
    loader: GuardedLoader | None = None
    try:
        loader = GuardedLoader(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _Refused as e:
        mark = e.problem_mark
        raise ConfigError(
            str(e.problem), e.hint, path=source, line=mark.line + 1 if mark else None
        ) from e
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
            'remove it; write control characters as escapes in double quotes ("\\t")',
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
