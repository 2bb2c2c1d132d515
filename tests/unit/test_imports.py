"""Import hygiene: ``remote`` never imports ``console`` or textual; headless code never textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_remote_imports_neither_console_nor_textual() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & {"console", "textual"})
        for p in (ROOT / "remote").rglob("*.py")
        if _imports(p) & {"console", "textual"}
    }
    assert offenders == {}


def test_only_console_app_imports_textual() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "console").rglob("*.py")
        if "textual" in _imports(p) and "app" not in p.relative_to(ROOT / "console").parts[:1]
    ]
    assert offenders == []


def test_headless_cli_does_not_load_textual() -> None:
    code = (
        "import sys, console.cli, console.jobs.launch, console.jobs.status, remote.ssh;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_agent_dir_is_stdlib_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"pynvml"}
    for p in (ROOT / "remote" / "agent").rglob("*.py"):
        assert _imports(p) <= allowed, p
