"""Alerts belong to the profile whose rules raised them (``console/alerts/store.py``).

The user's report: ``watch -p down`` fired ``host_unreachable/dead``; later ``watch`` and
``alerts`` on the ``local`` profile showed it as still firing forever, though ``dead`` is not
one of ``local``'s hosts. Here ``down``'s alert is raised by the real fleet monitor (an SSH
connection to 127.0.0.1:1, refused at once: no test host is touched) and the real rule
engine, stored in a real ``alerts.sqlite3`` in a temporary state dir, and then read by the
other profile's watcher and by ``gpuconsole alerts``. Files of schema 1 (no profile column)
are written with the schema's own first migration, rows as that version wrote them.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from console.alerts.config import AlertsConfig
from console.alerts.engine import AlertWatcher
from console.alerts.model import Alert, AlertChanged
from console.alerts.store import MIGRATIONS, AlertStore, Silence, alert_to_json
from console.cli import main
from console.jobs.store import FailureRecord, JobRecord, NodeRecord, Store
from console.profiles import HostConfig, Profile
from console.service import Service
from remote.dockerlogs import parse_rfc3339_ns

DOWN = Profile(name="down", hosts={"dead": HostConfig(hostname="127.0.0.1", port=1)})
LOCAL = Profile(name="local", hosts={"local": HostConfig(transport="local")})
DEAD_KEY = "host_unreachable/dead"


def config(**rules: dict[str, Any]) -> AlertsConfig:
    """Alerts at once (``for_s`` 0) for unreachable hosts, ``rules`` overriding."""
    return AlertsConfig.model_validate({"host_unreachable": {"for_s": 0}, **rules})


async def fire_dead(root: Path) -> Alert:
    """``watch -p down`` as far as its first round: the real monitor finds ``dead`` down,
    the watcher fires and stores ``host_unreachable/dead``. Returns the alert."""
    svc = Service(DOWN, store=Store(root))
    try:
        state = svc.start_fleet(interval=0.5)
        w = AlertWatcher(svc, config=config())
        await w.load()
        w.subscribe()
        for _ in range(300):
            if state.hosts["dead"].status == "down":
                break
            await asyncio.sleep(0.1)
        assert state.hosts["dead"].status == "down", state.hosts["dead"]
        (ch,) = await w.evaluate_now()
        assert (ch.change, ch.alert.key) == ("fired", DEAD_KEY)
        await w.close()
    finally:
        await svc.close()
    return ch.alert


async def local_watcher(root: Path, cfg: AlertsConfig) -> tuple[Service, AlertWatcher]:
    """``watch`` on the local profile, loaded (its fleet not started: it knows nothing of its
    hosts, as in the first rounds of a watch)."""
    svc = Service(LOCAL, store=Store(root))
    w = AlertWatcher(svc, config=cfg)
    await w.load()
    return svc, w


async def test_another_profiles_alert_is_not_shown_kept_firing_or_resolved(tmp_path: Path) -> None:
    fired = await fire_dead(tmp_path)
    svc, w = await local_watcher(tmp_path, config())
    try:
        assert w.active() == []  # was: host dead, "still firing" on every local watch
        assert await w.evaluate_now() == []
        with pytest.raises(KeyError):
            await w.acknowledge(DEAD_KEY)  # not local's to acknowledge
        await w.close()
        # a local watch whose rules would end every host_unreachable alert ends none of down's
        _, w2 = await local_watcher(tmp_path, config(host_unreachable={"enabled": False}))
        assert await w2.evaluate_now() == []
        await w2.close()
    finally:
        await svc.close()
    # down's alert is as down's watch left it: firing since then, not acknowledged
    (a,) = AlertStore(tmp_path, profile="down").firing_now(time.time())
    assert a == fired and a.acked_at is None
    # and the next watch of down carries it over
    svc = Service(DOWN, store=Store(tmp_path))
    try:
        w3 = AlertWatcher(svc, config=config())
        await w3.load()
        assert [x.key for x in w3.active()] == [DEAD_KEY]
        await w3.close()
    finally:
        await svc.close()


def test_gpuconsole_alerts_lists_acks_and_silences_the_profiles_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(fire_dead(tmp_path))
    profiles = tmp_path / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "down.yaml").write_text("hosts:\n  dead: {hostname: 127.0.0.1, port: 1}\n")
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUCONSOLE_PROFILE", raising=False)
    runner = CliRunner()

    res = runner.invoke(main, ["alerts"])  # the local profile
    assert res.exit_code == 0 and res.output == "no alerts firing\n", res.output
    assert runner.invoke(main, ["alerts", "--json"]).output == ""
    assert DEAD_KEY not in runner.invoke(main, ["alerts", "--history", "10"]).output
    res = runner.invoke(main, ["alerts", "ack", DEAD_KEY])
    assert res.exit_code == 2 and f"no firing alert '{DEAD_KEY}'" in res.output
    assert "firing keys: none" in res.output

    res = runner.invoke(main, ["-p", "down", "alerts"])
    assert res.exit_code == 0 and DEAD_KEY in res.output and "critical firing" in res.output
    assert (
        f"fired        {DEAD_KEY}"
        in runner.invoke(main, ["-p", "down", "alerts", "--history", "10"]).output
    )
    # a silence made on local does not cover down's alert; one made on down does
    res = runner.invoke(main, ["alerts", "silence", "--host", "dead", "--for", "1h"])
    assert res.exit_code == 0 and "no firing alert matches it now" in res.output
    assert "critical firing" in runner.invoke(main, ["-p", "down", "alerts"]).output
    res = runner.invoke(main, ["-p", "down", "alerts", "silences"])
    assert "host=dead" not in res.output  # local's silence is not down's
    res = runner.invoke(main, ["-p", "down", "alerts", "ack", DEAD_KEY])
    assert res.exit_code == 0 and f"acknowledged {DEAD_KEY}" in res.output
    assert "critical acked" in runner.invoke(main, ["-p", "down", "alerts"]).output
    assert runner.invoke(main, ["alerts"]).output == "no alerts firing\n"
    # local's silence can be ended from local only
    (sil,) = AlertStore(tmp_path, profile="local").silences()
    res = runner.invoke(main, ["-p", "down", "alerts", "unsilence", str(sil.id)])
    assert res.exit_code == 2 and f"no silence {sil.id}" in res.output
    assert runner.invoke(main, ["alerts", "unsilence", str(sil.id)]).exit_code == 0


def test_the_same_key_in_two_profiles_has_its_own_acks_silences_and_resolve(tmp_path: Path) -> None:
    """Two profiles with a host of the same name (``gpu1``) share the key."""
    a, b = AlertStore(tmp_path, profile="a"), AlertStore(tmp_path, profile="b")
    alert = Alert(
        key="host_unreachable/gpu1",
        rule="host_unreachable",
        severity="critical",
        summary="host gpu1 unreachable for 60 s+",
        host="gpu1",
        since=10.0,
        fired_at=70.0,
    )
    a.record([AlertChanged(alert, "fired", 70.0)])
    b.record([AlertChanged(alert, "fired", 70.0)])
    a.acknowledge(alert.key, 80.0)
    a.add_silence(Silence(0, until=1000.0, created_at=80.0, host="gpu*"))
    assert [(x.acked_at, x.silenced_until) for x in a.firing_now(90.0)] == [(80.0, 1000.0)]
    assert [(x.acked_at, x.silenced_until) for x in b.firing_now(90.0)] == [(None, None)]
    assert b.acks() == [] and b.silences() == []
    a.record([AlertChanged(alert, "resolved", 100.0)])
    assert a.firing() == [] and [x.key for x in b.firing()] == [alert.key]
    assert [c.change for c in a.history()] == ["resolved", "fired"]
    assert [c.change for c in b.history()] == ["fired"]
    # the store of every profile sees both
    every = AlertStore(tmp_path)
    assert [c.change for c in every.history()] == ["resolved", "fired", "fired"]
    for s in (a, b, every):
        s.close()


# -- a file of schema 1 (before alerts had a profile) ----------------------------------------

FINISHED = "2026-11-29T10:05:00.000000000Z"
FINISHED_S = parse_rfc3339_ns(FINISHED) / 1e9
# the failure scripts/examples/train_ddp.py raises with --fail-rank, as refresh records it
FAILURE: FailureRecord = {
    "node": 0,
    "host": "dead",
    "exit_code": 1,
    "rank": 1,
    "reason": "RuntimeError: injected failure on rank 1 at step 2",
    "fix": "see the traceback of rank 1",
}


def add_failed_job(root: Path, name: str, profile: str) -> None:
    """A one-node job of ``profile`` on ``dead`` that failed at :data:`FINISHED`, stored as
    submit and refresh store it."""
    jid = f"{name}-abc123"
    store = Store(root)
    store.add_job(
        JobRecord(
            id=jid,
            name=name,
            profile=profile,
            profile_source=None,
            spec={},
            spec_hash="0" * 12,
            created_at=FINISHED_S - 300,
            node_count=1,
            state="failed",
            nodes=[
                NodeRecord(
                    jid,
                    0,
                    "dead",
                    f"gpuconsole-{jid}-n0",
                    "c" * 64,
                    state="failed",
                    exit_code=1,
                    started_at="2026-11-29T10:00:00.000000000Z",
                    finished_at=FINISHED,
                )
            ],
        )
    )
    store.update_job(jid, exit_code=1, failure=FAILURE)
    store.close()


def schema1_file(root: Path) -> dict[str, Alert]:
    """An ``alerts.sqlite3`` as schema 1 wrote it: down's host alert (acknowledged), a job
    alert of down's job ``train``, local's host alert, a row another version wrote; a
    silence; their history."""
    alerts = {
        "dead": Alert(
            key=DEAD_KEY,
            rule="host_unreachable",
            severity="critical",
            summary="host dead unreachable for 60 s+",
            host="dead",
            since=100.0,
            fired_at=160.0,
        ),
        "train": Alert(
            key="job_failed/job/train",
            rule="job_failed",
            severity="critical",
            summary="job train (train-abc123) failed",
            job="train",
            since=90.0,
            fired_at=90.0,
        ),
        "local": Alert(
            key="gpu_temperature/local/gpu0",
            rule="gpu_temperature",
            severity="warning",
            summary="local: GPU 0 at 90 C",
            host="local",
            gpu=0,
            since=50.0,
            fired_at=170.0,
        ),
    }
    db = sqlite3.connect(root / "alerts.sqlite3")
    for statement in MIGRATIONS[1]:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    for a in alerts.values():
        text = alert_to_json(a)
        db.execute("INSERT INTO alerts VALUES (?,?,?,?)", (a.key, text, a.fired_at, a.fired_at))
        db.execute(
            "INSERT INTO history (at, change, key, alert_json) VALUES (?,?,?,?)",
            (a.fired_at, "fired", a.key, text),
        )
    db.execute(
        "INSERT INTO alerts VALUES (?,?,?,?)",
        ("gpu_future/x", json.dumps({"rule": "gpu_future", "host": "dead"}), 1.0, 1.0),
    )
    db.execute("INSERT INTO alerts VALUES (?,?,?,?)", ("broken/x", "not json", 2.0, 2.0))
    db.execute("INSERT INTO acks VALUES (?,?,?,?)", (DEAD_KEY, 160.0, 165.0, "oncall"))
    db.execute(
        "INSERT INTO silences (rule, until, created_at) VALUES (?,?,?)",
        ("gpu_temperature", 4e9, 100.0),
    )
    db.commit()
    db.close()
    return alerts


async def test_a_schema_1_file_is_read_and_each_profile_adopts_its_own(tmp_path: Path) -> None:
    alerts = schema1_file(tmp_path)
    add_failed_job(tmp_path, "train", "down")
    every = AlertStore(tmp_path)  # migrates; unreadable rows are skipped, nothing crashes
    assert {a.key for a in every.firing()} == {a.key for a in alerts.values()}
    assert every.unowned()
    every.close()

    # local's watch: its own alert only, with the silence of every profile
    svc, w = await local_watcher(tmp_path, config())
    try:
        assert [a.key for a in w.active()] == [alerts["local"].key]
        assert [(c.change, c.alert.key) for c in await w.evaluate_now()] == [
            ("silenced", alerts["local"].key)
        ]
        assert w.active()[0].silenced_until == 4e9
        await w.close()
    finally:
        await svc.close()
    # down's: its host's alert with its ack, its job's alert
    svc = Service(DOWN, store=Store(tmp_path))
    try:
        w = AlertWatcher(svc, config=config(), clock=lambda: FINISHED_S + 10)
        await w.load()
        assert {x.key for x in w.active()} == {DEAD_KEY, "job_failed/job/train"}
        # the ack `alerts ack` stored is applied; the failed job still is: no new page
        assert [(c.change, c.alert.key) for c in await w.evaluate_now()] == [
            ("acknowledged", DEAD_KEY)
        ]
        got = {x.key: x for x in w.active()}
        assert got[DEAD_KEY].acked_at == 165.0 and got[DEAD_KEY].silenced_until is None
        await w.close()
    finally:
        await svc.close()
    down = AlertStore(tmp_path, profile="down")
    assert [(c.change, c.alert.key) for c in down.history()] == [  # newest first
        ("acknowledged", DEAD_KEY),
        ("fired", "job_failed/job/train"),
        ("fired", DEAD_KEY),
    ]
    assert [(k.key, k.profile) for k in down.acks()] == [(DEAD_KEY, "down")]
    down.close()
    # the rows nobody owns stay, readable by the store of every profile
    every = AlertStore(tmp_path)
    assert every.unowned() and len(every.firing()) == 3


async def test_a_watch_judges_only_its_profiles_jobs(tmp_path: Path) -> None:
    """down's failed job pages on down's watch only; local's neither raises nor ends it."""
    add_failed_job(tmp_path, "train", "down")
    now = FINISHED_S + 10
    cfg = config(host_unreachable={"enabled": False})
    svc_local = Service(LOCAL, store=Store(tmp_path))
    svc_down = Service(DOWN, store=Store(tmp_path))
    try:
        wl = AlertWatcher(svc_local, config=cfg, clock=lambda: now)
        await wl.load()
        assert await wl.evaluate_now() == []  # was: job_failed/job/train fired on local
        wd = AlertWatcher(svc_down, config=cfg, clock=lambda: now)
        await wd.load()
        (ch,) = await wd.evaluate_now()
        assert (ch.change, ch.alert.key) == ("fired", "job_failed/job/train")
        assert "injected failure on rank 1" in ch.alert.summary
        wl2 = AlertWatcher(svc_local, config=cfg, clock=lambda: now)
        await wl2.load()
        assert wl2.active() == [] and await wl2.evaluate_now() == []
        for w in (wl, wd, wl2):
            await w.close()
    finally:
        await svc_local.close()
        await svc_down.close()
    assert [a.key for a in AlertStore(tmp_path, profile="down").firing()] == [
        "job_failed/job/train"
    ]
