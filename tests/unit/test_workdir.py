"""Workdir sync: content-addressed, symlinks kept as links, special files skipped, modes kept."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from remote.transport import LocalTransport, iter_workdir_files, workdir_digest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    (wd / "pkg").mkdir(parents=True)
    (wd / "train.py").write_text("print('hi')\n")
    (wd / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (wd / "run.sh").chmod(0o755)
    (wd / "pkg" / "model.py").write_text("X = 1\n")
    (wd / "dangling").symlink_to("/nonexistent/target")
    os.mkfifo(wd / "fifo")  # would block a reader forever
    (wd / ".git").mkdir()
    (wd / ".git" / "HEAD").write_text("ref\n")
    return wd


def test_entries_and_digest(workdir: Path) -> None:
    assert [str(p) for p in iter_workdir_files(workdir)] == [
        "dangling",
        "run.sh",
        "train.py",
        "pkg/model.py",
    ]
    d1 = workdir_digest(workdir)
    (workdir / ".git" / "HEAD").write_text("other\n")  # ignored folder: same digest
    assert workdir_digest(workdir) == d1
    (workdir / "pkg" / "model.py").write_text("X = 2\n")
    assert workdir_digest(workdir) != d1


def test_local_sync_is_content_addressed(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    t = LocalTransport()
    dest = Path(asyncio.run(t.sync_workdir(workdir)))
    assert dest.parent == tmp_path / "home" / ".cache/gpuconsole/workdirs"
    assert dest.name == workdir_digest(workdir)[:16]
    assert (dest / "pkg" / "model.py").read_text() == "X = 1\n"
    assert os.readlink(dest / "dangling") == "/nonexistent/target"
    assert (dest / "run.sh").stat().st_mode & 0o111
    assert not (dest / "fifo").exists() and not (dest / ".git").exists()
    assert asyncio.run(t.sync_workdir(workdir)) == str(dest)  # already there: reused
    assert len(list(dest.parent.iterdir())) == 1


def test_exclude_patterns_by_name_and_path(workdir: Path) -> None:
    (workdir / "data" / "raw").mkdir(parents=True)
    (workdir / "data" / "raw" / "big.bin").write_bytes(b"x" * 1000)
    (workdir / "model.ckpt").write_bytes(b"w")
    (workdir / "pkg" / "cache.ckpt").write_bytes(b"w")
    everything = [str(p) for p in iter_workdir_files(workdir)]
    assert "data/raw/big.bin" in everything and "model.ckpt" in everything
    kept = [str(p) for p in iter_workdir_files(workdir, ["data/", "*.ckpt"])]
    assert kept == ["dangling", "run.sh", "train.py", "pkg/model.py"]
    assert [str(p) for p in iter_workdir_files(workdir, ["pkg/*"])] == [
        "dangling",
        "model.ckpt",
        "run.sh",
        "train.py",
        "data/raw/big.bin",
    ]
    # excluded entries do not change the digest
    d = workdir_digest(workdir, ["data", "*.ckpt"])
    (workdir / "data" / "raw" / "big.bin").write_bytes(b"y" * 1000)
    assert workdir_digest(workdir, ["data", "*.ckpt"]) == d
    assert workdir_digest(workdir) != d
