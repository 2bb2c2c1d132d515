"""Reading a job's log again reads its containers from where the archive ends: a long job's
log read every few seconds (``ps`` progress, ``watch``) costs what it wrote since, not all of
it. Real sshd + dockerd; Docker's lines are counted on the real engine."""

from __future__ import annotations

import uuid

import pytest

from console.jobs.store import Store
from console.profiles import load_profile_file
from console.service import Service
from remote.docker import Engine
from tests.integration.conftest import CLI, wait_for
from tests.integration.test_jobs import the_job


async def test_a_second_read_asks_docker_only_for_lines_after_the_archive(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = cli.spec(
        f"reread-{uuid.uuid4().hex[:4]}",
        args=["--steps", "40", "--step-sleep", "0.02", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    wait_for(lambda: the_job(cli, job_id)["state"] == "succeeded", timeout=180, interval=2)
    sent: list[int] = []
    real = Engine.log_batches

    async def counted(self: Engine, *args: object, **kw: object):  # type: ignore[no-untyped-def]
        async for batch in real(self, *args, **kw):  # type: ignore[arg-type]
            sent.append(len(batch))
            yield batch

    monkeypatch.setattr(Engine, "log_batches", counted)
    store = Store(cli.state_dir)
    svc = Service(load_profile_file(cli.profile), store=store)
    try:
        job = svc.find_job(job_id)
        first = await svc.read_logs(job)
        assert len(first) > 40 and "done steps 40" in first[-1].text
        # the archive has it all: a second read is sent (at most) the lines at its last
        # timestamp again, which the cursor drops
        sent.clear()
        again = await svc.read_logs(svc.find_job(job_id))
        assert [ln.text for ln in again] == [ln.text for ln in first]
        assert sum(sent) <= 2, sent
        tail = await svc.read_logs(svc.find_job(job_id), tail=5)
        assert [ln.text for ln in tail] == [ln.text for ln in first[-5:]]
        # an archive that stopped halfway (the app closed mid-job) is filled in from the
        # container: only its second half is asked for
        path = store.log_path(job_id, 0)
        kept = path.read_bytes().splitlines(keepends=True)
        half = len(kept) // 2
        path.write_bytes(b"".join(kept[:half]))
        sent.clear()
        filled = await svc.read_logs(svc.find_job(job_id))
        assert [ln.text for ln in filled] == [ln.text for ln in first]
        assert len(kept) - half <= sum(sent) <= len(kept) - half + 2, (sent, len(kept), half)
        assert path.read_bytes().splitlines(keepends=True) == kept
    finally:
        await svc.close()
