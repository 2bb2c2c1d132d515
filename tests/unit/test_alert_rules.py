"""Alert rules and the engine, driven by real recorded telemetry and explicit clocks.

Telemetry is the agent's recordings on 2 x H200 (``tests/data/traces/``: GPU 0 loaded to
100 % at ~60 C and its power cap, GPU 1 idle at ~41 C; an idle recording). Xid events are
real kernel log lines (``tests/data/cases/dmesg-xid/``) parsed by ``remote.telemetry.faults``.
Where a rule needs a condition the recordings never show (an ECC error, a GPU gone, a second
rank's process), the test says which field of a recorded sample it changed; thresholds are
otherwise set around the recorded values rather than editing them. Nothing sleeps: every
evaluation is given its time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from console.alerts.config import AlertsConfig
from console.alerts.engine import AlertEngine, build_inputs
from console.alerts.model import AlertChanged, alert_key
from console.alerts.rules import Inputs, JobGpu, JobInput, SeenXid, job_gpus
from console.alerts.store import AlertStore, Silence
from console.errors import ConfigError
from console.fleet.state import ContainerJob, FleetState
from console.jobs.store import FailureRecord, JobRecord, NodeRecord
from console.profiles import load_profile_file
from remote.dockerlogs import parse_rfc3339_ns
from remote.telemetry.faults import XID_INFO, scan_kernel_log
from remote.telemetry.schema import Sample, read_sample

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "data" / "traces"
XIDS = REPO / "tests" / "data" / "cases" / "dmesg-xid"
CID = "c" * 64  # a container id the tests map to a job (the recordings ran outside Docker)


def trace(name: str) -> list[Sample]:
    """The samples of a recorded trace (``h200-load``, ``h200-idle``), in order."""
    with open(TRACES / f"{name}.jsonl") as f:
        return [read_sample(json.loads(line)) for line in f if line.strip()]


LOAD = trace("h200-load")
IDLE = trace("h200-idle")
T0 = LOAD[0]["host_time"]


def cfg(**rules: dict[str, Any]) -> AlertsConfig:
    """Defaults with some rules' blocks replaced (and every other rule left as default)."""
    return AlertsConfig.model_validate(rules)


def only(rule: str, **block: Any) -> AlertsConfig:
    """Only ``rule`` enabled, with ``block`` overrides."""
    from console.alerts.model import RULE_IDS

    data: dict[str, Any] = {r: {"enabled": False} for r in RULE_IDS}
    data[rule] = {"enabled": True, **block}
    return AlertsConfig.model_validate(data)


def fleet_of(sample: Sample, host: str = "vm") -> FleetState:
    st = FleetState([host])
    st.on_sample(host, copy.deepcopy(sample), rx=0.0)
    return st


def changes_of(changes: list[AlertChanged]) -> list[tuple[str, str]]:
    return [(c.change, c.alert.key) for c in changes]


def replay(engine: AlertEngine, samples: list[Sample], **kw: Any) -> list[AlertChanged]:
    """Feed each sample at its own host time; all transitions."""
    st = FleetState(["vm"])
    out: list[AlertChanged] = []
    for s in samples:
        st.on_sample("vm", copy.deepcopy(s), rx=0.0)
        out += engine.evaluate(build_inputs(st, [], **kw), s["host_time"])
    return out


# -- GPU rules over the recorded load trace ---------------------------------------------------


def test_temperature_fires_after_for_s_not_before_and_resolves_on_the_idle_trace() -> None:
    """GPU 0 runs at 60-62 C under load in the recording; a 55 C limit is crossed by GPU 0
    only, for 10 s."""
    eng = AlertEngine(only("gpu_temperature", limit_c=55, for_s=10))
    st = FleetState(["vm"])
    fired_at = None
    for s in LOAD:
        st.on_sample("vm", copy.deepcopy(s), rx=0.0)
        ch = eng.evaluate(build_inputs(st, []), s["host_time"])
        if s["host_time"] - T0 < 10:
            assert ch == [], s["seq"]
        elif fired_at is None:
            assert changes_of(ch) == [("fired", "gpu_temperature/vm/gpu0")]
            fired_at = s["host_time"]
            a = ch[0].alert
            assert a.severity == "warning" and a.since == T0 and a.gpu == 0
            t = s["gpus"][0]["temp_c"]
            assert t is not None and t > 55
            assert a.details["temperature_c"] == t and a.details["limit_c"] == 55
            assert f"GPU 0 at {t} C (limit 55 C)" in a.summary
        else:
            assert ch == []  # de-duplicated: one alert while it holds
    assert fired_at is not None and fired_at - T0 >= 10
    later = IDLE[0]["host_time"] + 100  # the idle recording: 38 C
    st.on_sample("vm", copy.deepcopy(IDLE[0]), rx=0.0)
    ch = eng.evaluate(build_inputs(st, []), later)
    assert changes_of(ch) == [("resolved", "gpu_temperature/vm/gpu0")]
    assert ch[0].alert.resolved_at == later
    assert eng.active() == []


def test_throttle_ignores_the_power_cap_by_default_and_fires_when_asked() -> None:
    """Every loaded sample of GPU 0 says ``sw_power_cap`` (held at its 700 W cap)."""
    assert replay(AlertEngine(only("gpu_throttle", for_s=5)), LOAD) == []
    eng = AlertEngine(only("gpu_throttle", for_s=5, reasons=["sw_power_cap", "hw_thermal"]))
    ch = replay(eng, LOAD)
    assert changes_of(ch) == [("fired", "gpu_throttle/vm/gpu0")]
    assert ch[0].at - T0 >= 5
    assert ch[0].alert.details["reasons"] == "sw_power_cap"


def test_memory_high_fires_over_the_recorded_use() -> None:
    """GPU 0 holds 17612 of 143771 MiB (12.25 %) in the recording."""
    assert replay(AlertEngine(only("gpu_memory_high", for_s=3)), LOAD) == []  # default 95 %
    ch = replay(AlertEngine(only("gpu_memory_high", used_pct=12, for_s=3)), LOAD)
    assert changes_of(ch) == [("fired", "gpu_memory_high/vm/gpu0")]
    assert ch[0].alert.details["used_pct"] == 12.25


def test_ecc_and_remapped_rows_fire_at_once_and_resolve() -> None:
    """The recording's GPU 1 with ``ecc_volatile_uncorrected`` set to 2 and
    ``remapped_rows_pending`` to true (the H200s never had either)."""
    eng = AlertEngine(cfg(gpu_temperature={"enabled": False}))
    bad = copy.deepcopy(LOAD[3])
    bad["gpus"][1]["ecc_volatile_uncorrected"] = 2
    bad["gpus"][1]["remapped_rows_pending"] = True
    ch = eng.evaluate(build_inputs(fleet_of(bad), []), T0)
    assert sorted(changes_of(ch)) == [
        ("fired", "ecc_uncorrected/vm/gpu1"),
        ("fired", "remapped_rows_pending/vm/gpu1"),
    ]
    ecc = eng.get("ecc_uncorrected/vm/gpu1")
    assert ecc is not None and ecc.severity == "critical"
    assert ecc.details["ecc_volatile_uncorrected"] == 2
    # an unknown reading says nothing: the alert stays
    unknown = copy.deepcopy(bad)
    unknown["gpus"][1]["ecc_volatile_uncorrected"] = None
    assert eng.evaluate(build_inputs(fleet_of(unknown), []), T0 + 5) == []
    assert "ecc_uncorrected/vm/gpu1" in {a.key for a in eng.active()}
    ch = eng.evaluate(build_inputs(fleet_of(LOAD[4]), []), T0 + 10)
    assert sorted(changes_of(ch)) == [
        ("resolved", "ecc_uncorrected/vm/gpu1"),
        ("resolved", "remapped_rows_pending/vm/gpu1"),
    ]


def test_gpu_lost_when_a_reported_gpu_disappears_or_is_marked_lost() -> None:
    """The recording's second sample without GPU 1, then with GPU 1 ``lost``."""
    eng = AlertEngine(only("gpu_lost"))
    st = FleetState(["vm"])
    st.on_sample("vm", copy.deepcopy(LOAD[0]), rx=0.0)
    known = {"vm": {"00000000:00:06.0": 0, "00000000:00:07.0": 1}}
    assert eng.evaluate(build_inputs(st, [], known_gpus=known), T0) == []
    gone = copy.deepcopy(LOAD[1])
    del gone["gpus"][1]
    st.on_sample("vm", gone, rx=0.0)
    ch = eng.evaluate(build_inputs(st, [], known_gpus=known), T0 + 1)
    assert changes_of(ch) == [("fired", "gpu_lost/vm/gpu1")]
    assert "missing from the host's GPU list" in ch[0].alert.summary
    assert ch[0].alert.severity == "critical"
    # without the index (the fleet knows the bus id only): keyed by the bus id
    eng2 = AlertEngine(only("gpu_lost"))
    ch = eng2.evaluate(build_inputs(st, []), T0 + 1)
    assert changes_of(ch) == [("fired", "gpu_lost/vm/00000000:00:07.0")]
    back = copy.deepcopy(LOAD[2])
    st.on_sample("vm", back, rx=0.0)
    assert changes_of(eng.evaluate(build_inputs(st, [], known_gpus=known), T0 + 2)) == [
        ("resolved", "gpu_lost/vm/gpu1")
    ]
    lost = copy.deepcopy(LOAD[3])
    lost["state"] = "gpu_lost"
    lost["gpus"][1]["lost"] = True
    st.on_sample("vm", lost, rx=0.0)
    assert changes_of(eng.evaluate(build_inputs(st, [], known_gpus=known), T0 + 3)) == [
        ("fired", "gpu_lost/vm/gpu1")
    ]


# -- Xid ---------------------------------------------------------------------------------------


def seen_xids(name: str, host: str, at: float) -> list[SeenXid]:
    """A real kernel log's Xid events as a sample carries them (GPU 0), seen at ``at``."""
    text = (XIDS / name).read_text()
    return [
        SeenXid(
            host,
            {
                "time": None,
                "gpu_index": 0,
                "pci_bus_id": e.pci_bus_id,
                "xid": e.xid,
                "pid": e.pid,
                "detail": e.detail or None,
            },
            at,
        )
        for e in scan_kernel_log(text).events
    ]


def test_xid_is_decoded_graded_by_class_and_held_for_hold_s() -> None:
    eng = AlertEngine(only("xid", hold_s=600))
    evs = seen_xids("xid-02.txt", "vm", T0)  # Xid 31 (app), 62 (reset), 45s (consequence)
    ch = eng.evaluate(Inputs(xids=evs), T0 + 1)
    by_key = {c.alert.key: c.alert for c in ch if c.change == "fired"}
    assert set(by_key) == {"xid/vm/gpu0/xid31", "xid/vm/gpu0/xid62", "xid/vm/gpu0/xid45"}
    assert by_key["xid/vm/gpu0/xid62"].severity == "critical"
    assert by_key["xid/vm/gpu0/xid62"].details["meaning"] == XID_INFO[62][0]
    assert "Xid 62: " + XID_INFO[62][0] in by_key["xid/vm/gpu0/xid62"].summary
    assert by_key["xid/vm/gpu0/xid31"].severity == "warning"
    assert by_key["xid/vm/gpu0/xid31"].details["pids"] == "13332"
    assert by_key["xid/vm/gpu0/xid45"].details["count"] == 8  # one alert, eight events
    assert eng.evaluate(Inputs(xids=evs), T0 + 600) == []
    ch = eng.evaluate(Inputs(xids=evs), T0 + 601)
    assert {c.change for c in ch} == {"resolved"} and len(ch) == 3
    # events that aged out of the inputs also end their alerts
    eng2 = AlertEngine(only("xid", hold_s=600, ignore=[45]))
    assert len(eng2.evaluate(Inputs(xids=evs), T0 + 1)) == 2
    assert len(eng2.evaluate(Inputs(xids=[]), T0 + 2)) == 2


# -- hosts -------------------------------------------------------------------------------------


def test_host_unreachable_counts_from_when_it_went_down_and_resolves() -> None:
    eng = AlertEngine(cfg())  # default: 60 s
    st = fleet_of(IDLE[0], "a")
    down_at = 1000.0
    st.on_down("a", "connection refused")
    since = {"a": down_at}
    assert eng.evaluate(build_inputs(st, [], status_since=since), down_at + 59.9) == []
    ch = eng.evaluate(build_inputs(st, [], status_since=since), down_at + 60)
    assert changes_of(ch) == [("fired", "host_unreachable/a")]
    a = ch[0].alert
    assert a.since == down_at and a.severity == "critical"
    assert "connection refused" in a.summary
    # GPU rules say nothing of a host that is down (its old sample is not judged)
    st.on_sample("a", copy.deepcopy(IDLE[1]), rx=0.0)
    ch = eng.evaluate(build_inputs(st, [], status_since={"a": down_at + 70}), down_at + 70)
    assert changes_of(ch) == [("resolved", "host_unreachable/a")]


def test_a_connecting_host_is_not_judged() -> None:
    eng = AlertEngine(cfg(host_unreachable={"for_s": 0}))
    assert eng.evaluate(build_inputs(FleetState(["a"]), []), 10.0) == []


# -- jobs --------------------------------------------------------------------------------------


def job(
    name: str,
    state: str,
    *,
    created: float = 1.0,
    failure: FailureRecord | None = None,
    finished: str | None = None,
) -> JobRecord:
    jid = f"{name}-abc123"
    return JobRecord(
        id=jid,
        name=name,
        profile="p",
        profile_source=None,
        spec={},
        spec_hash="0" * 12,
        created_at=created,
        node_count=1,
        state=state,
        failure=failure,
        nodes=[
            NodeRecord(
                jid,
                0,
                "a",
                f"gpuconsole-{jid}-n0",
                CID,
                state="failed" if state == "failed" else state,
                exit_code=1,
                started_at="2026-11-29T10:00:00.000000000Z",
                finished_at=finished,
            )
        ],
    )


# the failure train_ddp.py (scripts/examples) raises with --fail-rank, as refresh records it
FAILURE: FailureRecord = {
    "node": 0,
    "host": "a",
    "exit_code": 1,
    "rank": 1,
    "reason": "RuntimeError: injected failure on rank 1 at step 2",
    "fix": "see the traceback of rank 1",
}
FINISHED = "2026-11-29T10:05:00.000000000Z"
FINISHED_S = parse_rfc3339_ns(FINISHED) / 1e9


def test_job_failed_carries_the_diagnosis_and_resolves_when_resubmitted() -> None:
    eng = AlertEngine(cfg())
    failed = job("train", "failed", failure=FAILURE, finished=FINISHED)
    ch = eng.evaluate(build_inputs(None, [failed]), FINISHED_S + 5)
    assert changes_of(ch) == [("fired", "job_failed/job/train")]
    a = ch[0].alert
    assert a.severity == "critical" and a.since == FINISHED_S
    assert (
        a.details["diagnosis"] == "node 0 rank 1: RuntimeError: injected failure on rank 1 "
        "at step 2"
    )
    assert a.details["fix"] == "see the traceback of rank 1"
    assert "injected failure" in a.summary
    assert eng.evaluate(build_inputs(None, [failed]), FINISHED_S + 50) == []
    again = job("train", "running", created=2.0)
    ch = eng.evaluate(build_inputs(None, [failed, again]), FINISHED_S + 60)
    assert changes_of(ch) == [("resolved", "job_failed/job/train")]


def test_job_failed_leaves_old_failures_alone_and_resolves_removed_jobs() -> None:
    old = job("old", "failed", failure=FAILURE, finished=FINISHED)
    eng = AlertEngine(cfg())
    assert eng.evaluate(build_inputs(None, [old]), FINISHED_S + 3601) == []
    fresh = job("train", "failed", failure=FAILURE, finished=FINISHED)
    assert len(eng.evaluate(build_inputs(None, [fresh]), FINISHED_S + 1)) == 1
    ch = eng.evaluate(build_inputs(None, []), FINISHED_S + 2)  # rm'd: not in the store list
    assert changes_of(ch) == [("resolved", "job_failed/job/train")]


def idle_job(last_log: float | None, utils: tuple[float | None, ...] = (0.0, 0.0)) -> JobInput:
    """A running job holding vm:0 and vm:1 at the given utilizations (the idle recording
    reads 0 % on both GPUs)."""
    return JobInput(
        job("train", "running"),
        tuple(JobGpu("vm", i, 0, i, u) for i, u in enumerate(utils)),
        last_log,
    )


def test_job_hung_after_for_s_of_silence_and_idle_gpus_resolves_on_a_log_line() -> None:
    utils = tuple(float(g["util_gpu_pct"] or 0) for g in IDLE[0]["gpus"])
    assert utils == (0.0, 0.0)
    eng = AlertEngine(only("job_hung"))  # 300 s
    t = 5000.0
    assert eng.evaluate(Inputs(jobs={"j": idle_job(t, utils)}), t) == []
    assert eng.evaluate(Inputs(jobs={"j": idle_job(t, utils)}), t + 299) == []
    ch = eng.evaluate(Inputs(jobs={"j": idle_job(t, utils)}), t + 300)
    assert changes_of(ch) == [("fired", "job_hung/job/train")]
    assert ch[0].alert.details["gpu_use"] == "all 2 GPU(s) under 5 %"
    # a new line: not hung any more
    ch = eng.evaluate(Inputs(jobs={"j": idle_job(t + 310, utils)}), t + 311)
    assert changes_of(ch) == [("resolved", "job_hung/job/train")]
    assert eng.evaluate(Inputs(jobs={"j": idle_job(t + 310, utils)}), t + 609) == []
    assert len(eng.evaluate(Inputs(jobs={"j": idle_job(t + 310, utils)}), t + 610)) == 1
    # a busy GPU (GPU 0 of the load recording: 100 %) is not hung, however quiet
    busy = tuple(float(g["util_gpu_pct"] or 0) for g in LOAD[0]["gpus"])
    ch = eng.evaluate(Inputs(jobs={"j": idle_job(t, busy)}), t + 900)
    assert changes_of(ch) == [("resolved", "job_hung/job/train")]
    # unknown log activity: no verdict
    eng2 = AlertEngine(only("job_hung", for_s=0))
    assert eng2.evaluate(Inputs(jobs={"j": idle_job(None, utils)}), t) == []


def test_job_gpus_maps_processes_through_containers_and_ranks() -> None:
    """The load recording's real process (pid 653 on GPU 0) given a container id, plus a
    second rank's process on GPU 1 (not in the recording)."""
    s = copy.deepcopy(LOAD[0])
    assert s["processes"] is not None
    p0 = s["processes"][0]
    p0["container_id"], p0["rank"] = CID, 0
    s["processes"].append(
        {**p0, "gpu_index": 1, "pid": 654, "rank": 1, "gpu_uuid": s["gpus"][1]["uuid"]}
    )
    st = fleet_of(s)
    st.set_containers({CID: ContainerJob("train-abc123", "train", 0)})
    gpus = job_gpus(st)["train-abc123"]
    assert gpus == (JobGpu("vm", 0, 0, 0, 100.0), JobGpu("vm", 1, 0, 1, 0.0))
    # and it is a straggler picture: GPU 1 idle while GPU 0 is busy
    eng = AlertEngine(only("straggler"))  # 120 s
    running = job("train", "running")
    assert eng.evaluate(build_inputs(st, [running]), T0) == []
    ch = eng.evaluate(build_inputs(st, [running]), T0 + 120)
    assert changes_of(ch) == [("fired", "straggler/job/train")]
    assert ch[0].alert.details["idle_gpus"] == "vm:gpu1 (n0 r1)"
    # the job ended: resolved
    done = job("train", "succeeded")
    ch = eng.evaluate(build_inputs(st, [done]), T0 + 130)
    assert changes_of(ch) == [("resolved", "straggler/job/train")]


def test_gpus_idle_counts_the_money() -> None:
    """Both GPUs of the idle recording held by a job (its processes added)."""
    eng = AlertEngine(only("gpus_idle"))  # 600 s
    t = 100.0
    inputs = Inputs(jobs={"j": idle_job(t)}, price_per_gpu_hour=3.5)
    assert eng.evaluate(inputs, t) == []
    assert eng.evaluate(inputs, t + 599) == []
    ch = eng.evaluate(inputs, t + 600)
    assert changes_of(ch) == [("fired", "gpus_idle/job/train")]
    d = ch[0].alert.details
    assert d["usd_per_hour"] == 7.0 and d["usd_so_far"] == 1.17  # 2 x 3.5 $/h x 10 min
    assert "$7.00/h ($1.17 so far)" in ch[0].alert.summary
    eng.evaluate(inputs, t + 3600)
    (a,) = eng.active()
    assert a.details["usd_so_far"] == 7.0 and a.fired_at == t + 600  # fresh numbers
    # no price: the alert without money
    eng2 = AlertEngine(only("gpus_idle", for_s=0))
    (c,) = eng2.evaluate(Inputs(jobs={"j": idle_job(t)}), t)
    assert c.alert.details["usd_per_hour"] is None


# -- acks, silences, restarts, config ---------------------------------------------------------


def temperature_engine(store: AlertStore | None = None) -> AlertEngine:
    firing = store.firing() if store else ()
    acks, silences = store.controls(0.0) if store else ((), ())
    return AlertEngine(
        only("gpu_temperature", limit_c=55, for_s=0), firing=firing, acks=acks, silences=silences
    )


def test_ack_keeps_it_firing_and_a_new_firing_is_not_acked(tmp_path: Path) -> None:
    store = AlertStore(tmp_path)
    eng = temperature_engine(store)
    hot, cool = fleet_of(LOAD[0]), fleet_of(IDLE[0])
    store.record(eng.evaluate(build_inputs(hot, []), 10.0))
    with pytest.raises(KeyError):
        store.acknowledge("gpu_temperature/vm/gpu1", 11.0)
    ack = store.acknowledge("gpu_temperature/vm/gpu0", 11.0, by="oncall")
    ch = eng.acknowledge(ack, 11.0)
    assert changes_of(ch) == [("acknowledged", "gpu_temperature/vm/gpu0")]
    assert ch[0].alert.acked_at == 11.0 and ch[0].alert.firing
    store.record(ch)
    assert eng.evaluate(build_inputs(hot, []), 12.0) == []  # still firing, nothing new
    store.record(eng.evaluate(build_inputs(cool, []), 13.0))  # resolved
    ch = eng.evaluate(build_inputs(hot, []), 14.0)
    assert changes_of(ch) == [("fired", "gpu_temperature/vm/gpu0")]
    assert ch[0].alert.acked_at is None
    assert store.acks() == []  # the resolve dropped it


def test_silence_by_rule_and_host_glob_and_its_expiry(tmp_path: Path) -> None:
    store = AlertStore(tmp_path)
    eng = temperature_engine(store)
    hot = fleet_of(LOAD[0])
    store.record(eng.evaluate(build_inputs(hot, []), 10.0))
    sil = store.add_silence(Silence(0, until=110.0, created_at=20.0, rule="gpu_*", host="v?"))
    assert sil.id > 0
    ch = eng.add_silence(sil, 20.0)
    assert changes_of(ch) == [("silenced", "gpu_temperature/vm/gpu0")]
    assert ch[0].alert.silenced(50.0) and not ch[0].alert.silenced(110.0)
    # another host is not covered
    other = fleet_of(LOAD[0], "b")
    ch = eng.evaluate(build_inputs(other, []), 30.0)
    assert [(c.change, c.alert.key, c.alert.silenced_until) for c in ch] == [
        ("fired", "gpu_temperature/b/gpu0", None)
    ]
    # a key silence covers an alert that fires later: it fires silenced
    eng2 = temperature_engine()
    eng2.set_controls([], [Silence(5, until=100.0, created_at=1.0, key="gpu_temperature/vm/*")])
    (c,) = eng2.evaluate(build_inputs(hot, []), 10.0)
    assert c.change == "fired" and c.alert.silenced_until == 100.0
    # expiry, at an evaluation after it
    eng.set_controls(*store.controls(109.0))
    assert eng.evaluate(build_inputs(hot, []), 109.0) == []
    ch = eng.evaluate(build_inputs(hot, []), 110.0)
    assert changes_of(ch) == [("unsilenced", "gpu_temperature/vm/gpu0")]
    with pytest.raises(ValueError):
        store.add_silence(Silence(0, until=5.0, created_at=1.0))


def test_restart_from_the_store_does_not_fire_again(tmp_path: Path) -> None:
    store = AlertStore(tmp_path)
    eng = temperature_engine(store)
    hot, cool = fleet_of(LOAD[0]), fleet_of(IDLE[0])
    store.record(eng.evaluate(build_inputs(hot, []), 10.0))
    store.record(eng.acknowledge(store.acknowledge("gpu_temperature/vm/gpu0", 11.0), 11.0))
    store.close()
    store = AlertStore(tmp_path)  # a new watch
    eng = temperature_engine(store)
    (a,) = eng.active()
    assert a.key == "gpu_temperature/vm/gpu0" and a.fired_at == 10.0 and a.acked_at == 11.0
    assert dict(a.details)["temperature_c"] == 60
    assert eng.evaluate(build_inputs(FleetState(["vm"]), []), 20.0) == []  # unknown: stays
    assert eng.evaluate(build_inputs(hot, []), 21.0) == []  # still holds: no second page
    ch = eng.evaluate(build_inputs(cool, []), 22.0)
    assert changes_of(ch) == [("resolved", "gpu_temperature/vm/gpu0")]
    store.record(ch)
    assert store.firing() == []
    assert [c.change for c in store.history()] == ["resolved", "acknowledged", "fired"]


def test_a_disabled_rule_resolves_its_alerts() -> None:
    eng = AlertEngine(only("gpu_temperature", limit_c=55, for_s=0))
    hot = fleet_of(LOAD[0])
    assert len(eng.evaluate(build_inputs(hot, []), 1.0)) == 1
    eng.config = only("gpu_memory_high")
    assert changes_of(eng.evaluate(build_inputs(hot, []), 2.0)) == [
        ("resolved", "gpu_temperature/vm/gpu0")
    ]


def test_alert_key_with_a_part() -> None:
    assert alert_key("xid", host="a", gpu=0, part="xid79") == "xid/a/gpu0/xid79"
    assert alert_key("job_hung", job="x") == "job_hung/job/x"


def test_newer_store_file_is_refused(tmp_path: Path) -> None:
    import sqlite3

    from remote.errors import GpuConsoleError

    con = sqlite3.connect(tmp_path / "alerts.sqlite3")
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(GpuConsoleError, match="newer gpuconsole"):
        AlertStore(tmp_path)


def test_profile_alerts_section_errors_name_the_field(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(
        "hosts:\n  a: {}\nprice_per_gpu_hour: 2.5\nnotify: ['json://localhost/x']\n"
        "alerts:\n  gpu_temperature:\n    limit_c: 80\n    for_s: 30\n"
    )
    prof = load_profile_file(p)
    assert prof.alert_rules.gpu_temperature.limit_c == 80 and prof.price_per_gpu_hour == 2.5
    assert prof.alert_rules.job_hung.for_s == 300 and prof.notify == ["json://localhost/x"]
    p.write_text(
        "hosts:\n  a: {}\nalerts:\n  gpu_temperature:\n    limit_c: hot\n"
        "  gpu_throttle:\n    reasons: [too_warm]\n  job_hang: {}\n"
        "notify: ['not a url']\n"
    )
    with pytest.raises(ConfigError) as e:
        load_profile_file(p)
    text = str(e.value) + " " + repr(getattr(e.value, "errors", ""))
    for field in (
        "alerts.gpu_temperature.limit_c",
        "alerts.gpu_throttle.reasons",
        "alerts.job_hang",
        "notify",
    ):
        assert field in text, field
    assert e.value.line == 5  # limit_c: the first problem in the file


# -- the live adapter over a replayed recording (no hosts, explicit clock) --------------------


async def test_watcher_over_a_replayed_trace_acks_silences_and_restarts(tmp_path: Path) -> None:
    """``AlertWatcher`` over a real ``Service`` fed by ``start_replay`` of the load recording
    (the local profile; nothing is asked of Docker: the job loop is not started). One
    sample arrives over the bus with the real Xid lines of ``xid-01.txt`` on GPU 0."""
    from console.alerts.engine import AlertWatcher
    from console.events import SampleReceived
    from console.jobs.store import Store
    from console.profiles import HostConfig, Profile
    from console.service import Service

    now = [T0 + 100]
    profile = Profile(name="t", hosts={"vm": HostConfig(transport="local")})
    config = cfg(
        gpu_temperature={"limit_c": 55, "for_s": 0},
        **{r: {"enabled": False} for r in ("host_unreachable", "job_failed")},
    )
    svc = Service(profile, store=Store(tmp_path))
    seen: list[AlertChanged] = []
    svc.bus.subscribe(lambda ev: seen.append(ev) if isinstance(ev, AlertChanged) else None)
    try:
        svc.start_replay(TRACES / "h200-load.jsonl", speed=0)
        assert await svc.replay_finished() == len(LOAD)
        w = AlertWatcher(svc, config=config, clock=lambda: now[0])
        await w.load()
        w.subscribe()
        xid = copy.deepcopy(LOAD[-1])
        xid["xid_events"] = [e.record for e in seen_xids("xid-01.txt", "vm", 0.0)]
        for e in xid["xid_events"]:
            e["time"] = None  # seen when the sample arrived (the agent's NVML events)
        svc.bus.publish(SampleReceived("vm", xid))
        ch = await w.evaluate_now()
        assert sorted(changes_of(ch)) == [
            ("fired", "gpu_temperature/vm/gpu0"),
            ("fired", "xid/vm/gpu0/xid31"),
            ("fired", "xid/vm/gpu0/xid43"),
        ]
        assert changes_of(seen) == changes_of(ch)  # published on the bus
        a = await w.acknowledge("gpu_temperature/vm/gpu0", by="oncall")
        assert a.acked_at == now[0] and a.firing
        now[0] += 1
        s = await w.silence(rule="xid", duration_s=60, comment="known bad GPU")
        assert {(c.change, c.alert.key) for c in seen[-2:]} == {
            ("silenced", "xid/vm/gpu0/xid31"),
            ("silenced", "xid/vm/gpu0/xid43"),
        }
        now[0] += 1
        assert await w.evaluate_now() == []  # dedupe: nothing new
        # a restarted watch over the same store: nothing fires again, acks and silences hold
        w2 = AlertWatcher(svc, config=config, clock=lambda: now[0])
        await w2.load()
        assert {x.key: (x.acked_at is not None, x.silenced_until) for x in w2.active()} == {
            "gpu_temperature/vm/gpu0": (True, None),
            "xid/vm/gpu0/xid31": (False, s.until),
            "xid/vm/gpu0/xid43": (False, s.until),
        }
        w2._xids.extend(w._xids)
        assert await w2.evaluate_now() == []
        # an ack written by another process is read at the next round
        AlertStore(tmp_path).acknowledge("xid/vm/gpu0/xid31", now[0], by="cli")
        ch = await w2.evaluate_now()
        assert changes_of(ch) == [("acknowledged", "xid/vm/gpu0/xid31")]
        now[0] = s.until
        ch = await w2.evaluate_now()
        assert sorted(changes_of(ch)) == [
            ("unsilenced", "xid/vm/gpu0/xid31"),
            ("unsilenced", "xid/vm/gpu0/xid43"),
        ]
        assert await w2.unsilence(s.id) and not await w2.unsilence(s.id)
        await w.close()
        await w2.close()
    finally:
        await svc.close()
