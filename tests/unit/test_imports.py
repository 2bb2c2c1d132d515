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
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_agent_dir_is_stdlib_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"pynvml"}
    for p in (ROOT / "remote" / "agent").rglob("*.py"):
        assert _imports(p) <= allowed, p


def _console_imports(path: Path) -> set[str]:
    """The ``console.*`` modules a file imports (anywhere in it, deferred imports too)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("console."))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("console")
        ):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_the_backend_seam_is_layered() -> None:
    """service -> backends -> jobs/fleet/slurm: the backends never import the service or a
    face, and what is below them never imports a backend or the service."""

    def offenders(folders: tuple[str, ...], banned: tuple[str, ...]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for folder in folders:
            for p in (ROOT / "console" / folder).rglob("*.py"):
                bad = sorted(
                    m
                    for m in _console_imports(p)
                    if any(m == b or m.startswith(b + ".") for b in banned)
                )
                if bad:
                    found[str(p.relative_to(ROOT))] = bad
        return found

    assert offenders(("backends",), ("console.service", "console.cli", "console.app")) == {}
    below = ("jobs", "fleet", "slurm", "diagnosis", "notebook")
    assert (
        offenders(below, ("console.backends", "console.service", "console.cli", "console.app"))
        == {}
    )
