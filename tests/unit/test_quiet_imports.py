"""Importing the SSH layer prints nothing: asyncssh's import-time DSA deprecation warnings
(recent cryptography releases) would otherwise reach every command's stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_ssh_transport_prints_no_warning() -> None:
    res = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import remote.ssh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
