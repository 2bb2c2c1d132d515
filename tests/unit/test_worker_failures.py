"""Every worker of the app reports its failure in one place: each ``@work`` body in
console/app is wrapped by ``console.app.failures.reported`` (read from the source's AST, so a
new worker without it fails here, not silently in front of a user)."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "console" / "app"


def _name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def workers() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [_name(d) for d in node.decorator_list]
                if "work" in names:
                    found.append((f"{path.relative_to(APP)}:{node.name}", names))
    return found


def test_every_worker_body_is_reported() -> None:
    found = workers()
    assert len(found) >= 20  # the app's and its screens' workers were all read
    unreported = [where for where, names in found if "reported" not in names]
    assert unreported == []
    # reported wraps the body itself: it sits under @work
    misplaced = [w for w, n in found if n.index("reported") < n.index("work")]
    assert misplaced == []
