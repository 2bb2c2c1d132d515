"""The layers hold: pyproject.toml's import-linter contracts (``[tool.importlinter]``) are kept.

Imports point down only: the entry point, the faces (``console/cli``, ``console/app``,
``console/watch``), ``console/service.py``, ``console/backends`` (when it exists), the domain
packages (jobs, fleet, slurm, alerts, ...), ``console/diagnosis``, ``remote``; ``remote`` imports
neither ``console`` nor textual. Every import against the direction, deferred ones included, is
listed in the contract's ``ignore_imports`` with its reason. (Only ``console/app`` importing
textual is tests/unit/test_imports.py's.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    from importlinter import configuration
    from importlinter.application.use_cases import SUCCESS, lint_imports
except ImportError as e:  # an .venv made before import-linter joined the dev tools
    raise ImportError(f"{e}: scripts/test installs the dev tools (pip install -e '.[dev]')") from e

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    configuration.configure()  # what the lint-imports command does first
    rc = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    out = capsys.readouterr().out
    assert "faces -> service -> backends -> jobs/fleet -> remote KEPT" in out
    assert "remote imports neither console nor textual KEPT" in out
    assert rc is SUCCESS, out
