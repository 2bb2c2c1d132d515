"""A JOB that the local store does not know (submitted from another console or state dir, or
the store was replaced): `describe`, `logs`, `stop`, `rm`, `exec` and `cp` find it on the
hosts themselves, adopting it by its labels as `ps` does, with no `ps` first; a JOB that is
on no host either is one error line naming where it was looked for, exit 1.

Real sshd test hosts, real dockerd and torchrun; the CLI as a subprocess."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from tests.integration.conftest import CLI


def stored_ids(cli: CLI) -> set[str]:
    """The job ids in a CLI's state dir (none when it has no store yet)."""
    db = cli.state_dir / "jobs.sqlite3"
    if not db.exists():
        return set()
    con = sqlite3.connect(db)
    try:
        return {r[0] for r in con.execute("SELECT id FROM jobs")}
    finally:
        con.close()


def test_a_job_submitted_elsewhere_is_found_on_the_hosts(cli: CLI, tmp_path: Path) -> None:
    name = f"elsewhere-{uuid.uuid4().hex[:6]}"
    spec = cli.spec(name, args=["--steps", "2", "--out", "/out", "--workers", "0"])
    sub = cli.run("submit", str(spec), "--follow")
    assert sub.returncode in (0, 1), sub.stderr  # (torch 2.13's gloo shutdown: see test_jobs)
    job_id = sub.stderr.split()[1].rstrip(":")
    assert job_id.startswith(name), sub.stderr
    # another console: a state dir of its own, which never saw the job and never ran `ps`
    other = CLI(cli.profile, tmp_path / "other-state", tmp_path)
    assert job_id not in stored_ids(other)

    logs = other.run("logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert "[n0 r0] step 1/2" in logs.stdout and "[n0 r1] step 2/2" in logs.stdout
    assert job_id in stored_ids(other)  # adopted, as `ps` would have

    fresh = CLI(cli.profile, tmp_path / "fresh-state", tmp_path)
    desc = fresh.run("describe", name)  # by name, the store knowing nothing at all
    assert desc.returncode == 0, desc.stderr
    assert job_id in desc.stdout and f"gpuconsole-{job_id}-n0" in desc.stdout

    third = CLI(cli.profile, tmp_path / "third-state", tmp_path)
    stop = third.run("stop", job_id)
    assert stop.returncode == 0, stop.stderr
    assert f"job {job_id} is not running" in stop.stderr

    missing = third.run("logs", "no-such-job-3f9a1c")
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[0] == (
        f"error: no job 'no-such-job-3f9a1c' in {third.state_dir} nor on its hosts (a, b) "
        "of profile 'profile'"
    )
    assert "gpuconsole ps --all" in missing.stderr
    assert "Traceback" not in missing.stderr
