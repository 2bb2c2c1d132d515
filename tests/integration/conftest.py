"""Fixtures for tests against the real test hosts started by ``scripts/testhosts/up``.

Two OpenSSH hosts (``a`` on 127.0.0.11, ``b`` on 127.0.0.12) share this machine's dockerd and
the image ``gpuconsole/torch:2.13.0-cpu``; jobs run the real ``scripts/examples/train_ddp.py``
under real torchrun. The CLI is run as a subprocess, as a user would, with a state dir of its
own per test.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
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


#: What an integration test says when the machinery ``scripts/test`` sets up is not there.
NOT_UP = "test hosts not up ({}): scripts/test sets them up"

_not_up: list[str | None] = []  # the reason, found once per session ([] = not looked yet)


def _port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def not_up_reason() -> str | None:
    """Why the test hosts cannot be used (``None``: they can): the local Docker engine does
    not answer its ``/_ping``, the test profile written by ``scripts/testhosts/up`` is
    missing, or a host of it does not accept TCP connections on its SSH port. Looked at once
    per session (well under a second when the hosts are up; about 1 s per missing host)."""
    if _not_up:
        return _not_up[0]
    reason: str | None = None
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:  # the SDK raises DockerException, requests' errors, OSError
        reason = f"no Docker engine answers: {type(e).__name__}"
    if reason is None:
        p = _profile_path()
        try:
            hosts = (yaml.safe_load(p.read_text()) or {}).get("hosts") or {}
        except OSError:
            reason = f"{p} missing"
        else:
            for name, h in hosts.items():
                addr, port = str(h.get("hostname")), int(h.get("port") or 22)
                if not _port_answers(addr, port):
                    reason = f"host {name}: nothing answers on {addr}:{port}"
                    break
    _not_up.append(reason and NOT_UP.format(reason))
    return _not_up[0]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration needs the test hosts (``integration``) unless it
    is marked ``hostless`` (it needs no test host, Docker or Slurm: ``scripts/check`` runs
    it)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("hostless") is None:
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """An ``integration`` test skips, before its fixtures start, when the test hosts are not
    up: one summary line for all of them (``pytest -rs``), naming ``scripts/test``."""
    if item.get_closest_marker("integration") is not None:
        reason = not_up_reason()
        if reason is not None:
            pytest.skip(reason)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The one line that says why the integration tests were skipped (also without -rs)."""
    if not _not_up or _not_up[0] is None:
        return
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if "integration" in getattr(r, "keywords", {})
    ]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} integration tests skipped: {_not_up[0]}")


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

    def run(
        self,
        *args: str,
        profile: Path | None = None,
        timeout: float = 240,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args, profile=profile),
            env=self.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            env=self.env(),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

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
        pytest.skip(NOT_UP.format(f"{p} missing"))
    return p


@pytest.fixture
def cli(tmp_path: Path, test_profile: Path) -> CLI:
    return CLI(test_profile, tmp_path / "state", tmp_path)


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def quiet_container(engine: docker.DockerClient) -> Iterator[str]:
    """A container that prints ``ready`` and then nothing for 2 minutes (a follow that waits)."""
    c = engine.containers.run(
        IMAGE,
        ["python3", "-c", "print('ready', flush=True); import time; time.sleep(120)"],
        detach=True,
        name=f"gc-quiet-{uuid.uuid4().hex[:6]}",
    )
    yield c.id
    c.remove(force=True)


@pytest.fixture(autouse=True)
def _cleanup_containers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    """Remove the containers of the jobs this test submitted (jobs in the stores under its
    tmp dir, created while it ran), and only those: other test runs and benchmarks share the
    engine, and a ``ps`` in the test adopts their jobs into its store. The engine is asked
    only when the test stored a job (a ``hostless`` test needs no Docker)."""
    started = time.time() - 1.0
    yield
    ids: set[str] = set()
    for db in tmp_path.rglob("jobs.sqlite3"):
        con = sqlite3.connect(db)
        try:
            # only jobs submitted from this store: a `ps` adopts every job it finds on the
            # hosts (spec without a name), including other runs' jobs, which are not ours
            ids.update(
                row[0]
                for row in con.execute("SELECT id, spec_json FROM jobs")
                if "name" in json.loads(row[1] or "{}")
            )
        except sqlite3.Error:
            pass
        finally:
            con.close()
    if not ids:
        return
    engine: docker.DockerClient = request.getfixturevalue("engine")
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
