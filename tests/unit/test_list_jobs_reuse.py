"""``Service.list_jobs(max_age_s=...)`` reuses a recent reconcile instead of asking the hosts
again (the app's alert rules and its jobs view would otherwise both reconcile).
``CountingReconcileFake`` stands in for the hosts: it only counts reconciles."""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.jobs.store import Store
from console.profiles import HostConfig, Profile
from console.service import Service


def test_recent_reconcile_is_reused_and_zero_always_asks(tmp_path: Path) -> None:
    profile = Profile(name="lab", hosts={"a": HostConfig(hostname="127.0.0.1")})
    service = Service(profile, store=Store(tmp_path))
    calls: list[bool] = []

    async def counting_reconcile_fake(include_removed: bool, warn: object) -> list[object]:
        calls.append(include_removed)
        await asyncio.sleep(0)
        return []

    service._list_jobs = counting_reconcile_fake  # type: ignore[assignment,method-assign]

    async def scenario() -> None:
        await service.list_jobs()
        await service.list_jobs(max_age_s=60)  # reused
        await service.list_jobs()  # 0: asks again
        await service.list_jobs(include_removed=True, max_age_s=60)  # another question: asks
        await asyncio.gather(service.list_jobs(), service.list_jobs(max_age_s=60))

    asyncio.run(scenario())
    assert calls == [False, False, True, False]
