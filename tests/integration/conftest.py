"""Fixtures for tests against the real test hosts started by ``scripts/testhosts/up``.

Two OpenSSH hosts (``a`` on 127.0.0.11, ``b`` on 127.0.0.12) share this machine's dockerd and
the image ``gpuconsole/torch:2.13.0-cpu``; jobs run the real ``scripts/examples/train_ddp.py``
under real torchrun. The CLI is run as a subprocess, as a user would, with a state dir of its
own per test.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "scripts" / "examples"
IMAGE = "gpuconsole/torch:2.13.0-cpu"
LABEL_JOB_ID = "io.gpuconsole.job-id"
LABEL_JOB_NAME = "io.gpuconsole.job-name"


def _profile_path() -> Path:
    p = os.environ.get("GPUCONSOLE_TEST_PROFILE", "/var/tmp/gpuconsole-testhosts/profile.yaml")
    return Path(p)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Integration tests need the test hosts; without them they fail loudly, not skip."""
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@dataclass
class CLI:
    """Runs ``gpuconsole`` as a subprocess with a private state dir and the test profile."""

    profile: Path
    state_dir: Path
    tmp: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["GPUCONSOLE_STATE_DIR"] = str(self.state_dir)
        env["GPUCONSOLE_CONFIG_DIR"] = str(self.tmp / "config")
        env["GPUCONSOLE_CACHE_DIR"] = str(self.tmp / "cache")
        env.pop("GPUCONSOLE_PROFILE", None)
        return env

    def argv(self, *args: str, profile: Path | None = None) -> list[str]:
        return [sys.executable, "-m", "console.cli", "-p", str(profile or self.profile), *args]

    def run(self, *args: str, profile: Path | None = None, timeout: float = 240,
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args, profile=profile), env=self.env(), cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), env=self.env(), cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def spec(self, name: str, **fields: Any) -> Path:
        """Write a job spec running train_ddp.py from the examples folder."""
        data: dict[str, Any] = {
            "name": name,
            "image": IMAGE,
            "nodes": ["a"],
            "gpus_per_node": 0,
            "nproc_per_node": 2,
            "workdir": str(EXAMPLES),
            "script": "train_ddp.py",
            "args": ["--steps", "4", "--out", "/out", "--workers", "1"],
            "mounts": [f"{self.tmp / 'out' / name}:/out"],
            "shm_size": "256m",
        }
        data.update(fields)
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path


@pytest.fixture(scope="session")
def test_profile() -> Path:
    p = _profile_path()
    if not p.is_file():
        pytest.fail(f"{p} missing: run scripts/test (it starts the test hosts)")
    return p


@pytest.fixture
def cli(tmp_path: Path, test_profile: Path) -> CLI:
    return CLI(test_profile, tmp_path / "state", tmp_path)


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _cleanup_containers(engine: docker.DockerClient, tmp_path: Path) -> Iterator[None]:
    """Remove the containers of the jobs this test submitted (jobs in the stores under its
    tmp dir, created while it ran), and only those: other test runs and benchmarks share the
    engine, and a ``ps`` in the test adopts their jobs into its store."""
    started = time.time() - 1.0
    yield
    ids: set[str] = set()
    for db in tmp_path.rglob("jobs.sqlite3"):
        con = sqlite3.connect(db)
        try:
            # only jobs submitted from this store: a `ps` adopts every job it finds on the
            # hosts (spec without a name), including other runs' jobs, which are not ours
            ids.update(row[0] for row in con.execute("SELECT id, spec_json FROM jobs")
                       if "name" in json.loads(row[1] or "{}"))
        except sqlite3.Error:
            pass
        finally:
            con.close()
    if not ids:
        return
    for c in engine.containers.list(all=True, filters={"label": LABEL_JOB_ID}):
        if c.labels.get(LABEL_JOB_ID) in ids and _created_s(c) >= started:
            c.remove(force=True)


def _created_s(container: Any) -> float:
    """Docker's ``Created`` (RFC 3339, ns digits) as Unix seconds; 0 if unreadable."""
    raw = str(container.attrs.get("Created", ""))
    try:
        head, _, frac = raw.rstrip("Z").partition(".")
        base = datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp()
        return base + float("0." + frac[:6]) if frac else base
    except ValueError:
        return 0.0


def job_containers(engine: docker.DockerClient, **labels: str) -> list[Any]:
    """Containers carrying the given gpuconsole labels (``job_name=...``, ``job_id=...``)."""
    filters = [f"io.gpuconsole.{k.replace('_', '-')}={v}" for k, v in labels.items()]
    return list(engine.containers.list(all=True, filters={"label": filters}))


def wait_for(pred: Any, timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll ``pred()`` until truthy; returns its value or fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {pred}")
