"""Which rank slows a job down, and why (console/fleet/straggler.py and the ``straggler`` rule),
over replayed real telemetry.

The replay is built from tests/data/traces/duty/h100-duty.jsonl: real agent samples of one H100
running scripts/device/duty_load.py, first as a rank that waits in the collective 23 % of each
step ("waiting": a spin kernel like NCCL's wait), then as the rank everyone waits for
("straggler": matmuls back to back). A 4-GPU node of one job is made of them: GPUs 0, 2, 3 take
the waiting phase's GPU record, GPU 1 the straggler phase's, sample by sample. Expected values
were read off the recording before the code was written: SM activity 83.4 % waiting and 96.6 %
straggling (so rank 1, ~16 % slower by SM activity), power ~690 W against ~698 W (the H100 sits
at its 700 W cap in both: power cannot tell them apart), utilization 100 % in both (the
input-bound rule sees nothing). The throttled and PCIe cases edit GPU 1's records, as said in
each test; everything else is as recorded.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from console.alerts.config import AlertsConfig
from console.alerts.engine import AlertEngine, build_inputs
from console.fleet.state import ContainerJob, FleetState
from console.fleet.straggler import rank_loads, slowest
from console.jobs.store import JobRecord, NodeRecord

DUTY = Path(__file__).resolve().parents[1] / "data" / "traces" / "duty"
CID = "d" * 64
JOB = "llm-7f3a21"


def _phases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(waiting, straggler) samples, each phase's first 2 s (ramp) left out."""
    marks = {}
    for line in (DUTY / "h100-duty.log").read_text().splitlines():
        word, *rest = line.split()
        if word in ("PHASE", "END"):
            marks[rest[0] if word == "PHASE" else "end"] = float(
                rest[-2] if word == "END" else rest[1]
            )
    samples = [json.loads(ln) for ln in (DUTY / "h100-duty.jsonl").read_text().splitlines()]

    def between(a: float, b: float) -> list[dict[str, Any]]:
        return [s for s in samples if a + 2 <= s["host_time"] < b]

    return (
        between(marks["waiting"], marks["straggler"]),
        between(marks["straggler"], marks["end"]),
    )


WAITING, STRAGGLING = _phases()


def node_samples(slow_gpu: int | None = 1, edit: Any = None, n: int = 4) -> list[dict[str, Any]]:
    """One host's samples of a 4-GPU node: GPU ``slow_gpu`` from the straggler phase, the
    others from the waiting phase; one process per GPU, rank = GPU index, in container CID."""
    out = []
    for i in range(min(len(WAITING), len(STRAGGLING))):
        s = copy.deepcopy(WAITING[i])
        gpus = []
        for idx in range(n):
            src = STRAGGLING[i] if idx == slow_gpu else WAITING[i]
            g = copy.deepcopy(src["gpus"][0])
            g["index"], g["pci_bus_id"] = idx, f"00000000:{0x18 + idx:02X}:00.0"
            g["uuid"] = f"GPU-{idx}"
            if edit is not None and idx == slow_gpu:
                edit(g)
            gpus.append(g)
        s["gpus"] = gpus
        s["processes"] = [
            {
                "gpu_index": idx,
                "gpu_uuid": f"GPU-{idx}",
                "pid": 1000 + idx,
                "used_mib": 17000,
                "type": "compute",
                "user": "root",
                "command": "python train.py",
                "container_id": CID,
                "rank": idx,
                "local_rank": idx,
            }
            for idx in range(n)
        ]
        out.append(s)
    return out


def job(state: str = "running") -> JobRecord:
    return JobRecord(
        JOB,
        "llm",
        "lab",
        None,
        {"gpus_per_node": 4},
        "0" * 12,
        1.0,
        1,
        state,  # type: ignore[arg-type]
        nodes=[NodeRecord(JOB, 0, "b", "gpuconsole-llm-n0", CID, "running")],
    )


def fleet(samples: list[dict[str, Any]], host: str = "b") -> FleetState:
    st = FleetState([host])
    st.set_containers({CID: ContainerJob(JOB, "llm", 0)})
    for s in samples:
        st.on_sample(host, s, rx=0.0)
    return st


def fire(samples: list[dict[str, Any]], **rule: Any) -> list[Any]:
    """Replay the samples through the straggler rule (for_s 10 s); its transitions."""
    cfg = AlertsConfig.model_validate(
        {
            **{r: {"enabled": False} for r in ("host_unreachable", "gpu_lost", "xid")},
            "straggler": {"for_s": 10, **rule},
        }
    )
    eng = AlertEngine(cfg)
    st = FleetState(["b"])
    st.set_containers({CID: ContainerJob(JOB, "llm", 0)})
    out = []
    for s in samples:
        st.on_sample("b", copy.deepcopy(s), rx=0.0)
        out += [
            c
            for c in eng.evaluate(build_inputs(st, [job()]), s["host_time"])
            if c.alert.rule == "straggler"
        ]
    return out


def test_the_recording_is_what_the_expectations_say() -> None:
    def sm(samples: list[dict[str, Any]]) -> float:
        return sum(s["gpus"][0]["gpm"]["sm_activity_pct"] for s in samples) / len(samples)

    assert len(WAITING) >= 25 and len(STRAGGLING) >= 25
    assert sm(WAITING) == pytest.approx(83.4, abs=0.3)
    assert sm(STRAGGLING) == pytest.approx(96.6, abs=0.3)
    assert {s["gpus"][0]["util_gpu_pct"] for s in WAITING + STRAGGLING} == {100}


def test_the_busiest_rank_is_named_with_how_much_slower() -> None:
    loads = rank_loads(fleet(node_samples()), [job()])[JOB]
    assert [(r.rank, r.gpu, r.signal) for r in loads] == [
        (0, 0, "sm_activity"),
        (1, 1, "sm_activity"),
        (2, 2, "sm_activity"),
        (3, 3, "sm_activity"),
    ]
    slow = slowest(loads)
    assert slow is not None and slow.rank.rank == 1
    assert slow.slower_pct == pytest.approx(96.6 / 83.4 * 100 - 100, abs=1.0)  # ~16 %
    # the cap is shared by every GPU: no cause is claimed from it
    assert slow.rank.causes == ()
    assert slow.sentence().startswith(
        "rank 1 is at least ~16% slower (97% SM activity, the others' median 83% SM activity); "
        "no hardware cause seen on GPU 1 on host b"
    )


def test_the_straggler_alert_fires_and_carries_the_sentence() -> None:
    changes = fire(node_samples())
    assert [c.change for c in changes] == ["fired"]
    a = changes[0].alert
    assert a.key == "straggler/job/llm"
    assert a.details["kind"] == "slow_rank" and a.details["rank"] == 1
    assert a.details["rank_host"] == "b" and a.details["rank_gpu"] == 1
    assert a.summary.startswith(f"job llm ({JOB}): rank 1 is at least ~16% slower")


def test_a_balanced_job_raises_nothing() -> None:
    samples = node_samples(slow_gpu=None)
    loads = rank_loads(fleet(samples), [job()])[JOB]
    sm = [r.load for r in loads if r.load is not None]
    assert max(sm) - min(sm) < 0.5  # the same phase on every GPU
    assert slowest(loads) is None  # under the 5-point gap: alike
    assert fire(samples) == []


def test_a_thermally_throttled_gpu_is_the_cause() -> None:
    # GPU 1's records edited: clock 1410 MHz held by hw_thermal at 87 C
    def hot(g: dict[str, Any]) -> None:
        g["sm_clock_mhz"], g["temp_c"], g["throttle_reasons"] = 1410, 87, ["hw_thermal"]

    changes = fire(node_samples(edit=hot))
    assert [c.change for c in changes] == ["fired"]
    summary = changes[0].alert.summary
    assert "rank 1 is at least ~16% slower" in summary
    assert "GPU 1 on host b is held at 1410 MHz (the others " in summary
    assert summary.endswith("MHz) by hw_thermal, 87 C")


def test_a_narrow_pcie_link_and_ecc_errors_are_causes() -> None:
    def bad(g: dict[str, Any]) -> None:
        g["pcie_gen"], g["pcie_width"], g["ecc_volatile_uncorrected"] = 3, 8, 2

    slow = slowest(rank_loads(fleet(node_samples(edit=bad)), [job()])[JOB])
    assert slow is not None
    assert slow.rank.causes == (
        "GPU 1 on host b's PCIe link runs at Gen3 x8 (the GPU and system allow Gen5 x16)",
        "GPU 1 on host b has 2 uncorrected ECC error(s) since the driver loaded",
    )


def test_another_process_on_the_gpu_and_a_busy_host_are_causes() -> None:
    samples = node_samples()
    for s in samples:
        s["host"]["cpu_pct"], s["host"]["swap_pages_per_s"] = 99.0, 2500.0
        s["processes"].append(
            {
                **s["processes"][1],
                "pid": 4242,
                "container_id": None,
                "rank": None,
                "command": "python other_experiment.py",
                "user": "bob",
            }
        )
    slow = slowest(rank_loads(fleet(samples), [job()])[JOB])
    assert slow is not None
    assert slow.rank.causes == (
        "host b's CPU is 99% busy",
        "host b is swapping (2500 pages/s)",
        "GPU 1 on host b is shared with pid 4242 (python other_experiment.py, user bob)",
    )


def test_power_alone_cannot_tell_capped_gpus_apart() -> None:
    def no_gpm(g: dict[str, Any]) -> None:
        g["gpm"] = None

    samples = node_samples()
    for s in samples:
        for g in s["gpus"]:
            no_gpm(g)
    loads = rank_loads(fleet(samples), [job()])[JOB]
    assert {r.signal for r in loads} == {"power"}
    power = {r.rank: r.load for r in loads}
    assert power[1] is not None and power[0] is not None
    assert 0 < power[1] - power[0] < 20  # ~698 W against ~690 W: both at the cap
    assert slowest(loads) is None  # under the 20 W gap: alike
    assert fire(samples) == []


def test_an_idle_gpu_among_busy_ones_is_input_bound() -> None:
    # GPU 3 idles (its records from before the load started, 0 %) while the others are busy
    idle = [json.loads(ln) for ln in (DUTY / "h100-duty.jsonl").read_text().splitlines()][:6]
    samples = node_samples(slow_gpu=None)
    for i, s in enumerate(samples):
        g = copy.deepcopy(idle[i % len(idle)]["gpus"][0])
        g["index"], g["pci_bus_id"], g["uuid"] = 3, "00000000:1B:00.0", "GPU-3"
        s["gpus"][3] = g
        s["host"]["cpu_pct"] = 100.0  # its input pipeline eats the host
    changes = fire(samples)
    assert [c.change for c in changes] == ["fired"]
    a = changes[0].alert
    assert a.details["kind"] == "input_bound"
    assert "b:gpu3 (n0 r3) idle" in a.summary and "input-bound" in a.summary
    assert a.summary.endswith("host b's CPU is 100% busy")


def test_cpu_ranks_compare_by_cpu_from_the_agents_ranks() -> None:
    # a gloo job: rank 0 computes more per step (97 % of a core) while ranks 1-3 wait (~60 %)
    samples = []
    for i, base in enumerate(WAITING[:20]):
        s = copy.deepcopy(base)
        s["gpus"], s["processes"] = [], []
        s["ranks"] = [
            {
                "pid": 2000 + r,
                "rank": r,
                "local_rank": r,
                "container_id": CID,
                "cpu_pct": 97.0 if r == 0 else 60.0 + (r + i) % 3,
            }
            for r in range(4)
        ]
        samples.append(s)
    loads = rank_loads(fleet(samples), [job()])[JOB]
    assert [(r.rank, r.signal, r.gpu) for r in loads] == [(i, "cpu", None) for i in range(4)]
    slow = slowest(loads, floor=20)
    assert slow is not None and slow.rank.rank == 0
    assert slow.sentence().startswith(
        "rank 0 is at least ~59% slower (97% CPU, the others' median 61% CPU)"
    )
    assert [c.change for c in fire(samples)] == ["fired"]


def _logged(rank_lines: dict[int, list[str]]) -> Any:
    from console.jobs.logs import JobLogLine
    from console.throughput import progress_points, rank_rates

    lines = [
        JobLogLine(0, "b", r, int((1_790_000_000 + i) * 1e9), text)
        for r, texts in rank_lines.items()
        for i, text in enumerate(texts)
    ]
    return rank_rates(progress_points(lines))


def test_a_rank_slower_by_its_own_log() -> None:
    # each rank logs its own compute rate (a trainer that times the step without the wait):
    # rank 2 reads 1,100-1,180 samples/s in every line, the others ~1,500
    lines = {
        r: [
            f"step {s}/500 loss 2.1 samples/s: {1500 + (s % 3) * 10 if r != 2 else 1100 + s * 20}"
            for s in range(1, 5)
        ]
        for r in range(4)
    }
    rates = _logged(lines)
    assert rates is not None and rates.unit == "samples/s"
    assert rates.rates[2] == pytest.approx(1150.0) and rates.peaks[2] == 1180.0
    from console.alerts.engine import build_inputs as build
    from console.alerts.rules import straggler

    inputs = build(None, [job()], rank_rates={JOB: rates})
    cfg = AlertsConfig().straggler
    (obs,) = [o for o in straggler(inputs, cfg, _ctx()) if o.holds]
    assert obs.details["rank"] == 2 and obs.details["signal"] == "log"
    assert obs.summary == (
        f"job llm ({JOB}): rank 2 is ~31% slower by its own log (1.15k samples/s, the others' "
        "median 1.51k samples/s)"
    )


def test_jitter_in_logged_rates_is_not_a_straggler() -> None:
    # ranks whose rates include the wait agree on average; one slow reading is not slower
    lines = {
        r: [
            f"step {s}/500 loss 2.1 samples/s: {1500 if (s + r) % 4 else 1000}" for s in range(1, 6)
        ]
        for r in range(4)
    }
    rates = _logged(lines)
    assert rates is not None
    from console.alerts.engine import build_inputs as build
    from console.alerts.rules import straggler

    inputs = build(None, [job()], rank_rates={JOB: rates})
    assert not any(o.holds for o in straggler(inputs, AlertsConfig().straggler, _ctx()))


def _ctx() -> Any:
    from console.alerts.rules import RuleContext

    return RuleContext(now=2_000_000_000.0, firing={}, pending={})


def test_a_busy_cpu_every_rank_s_host_shares_is_not_a_cause() -> None:
    # a 2-node CPU job whose hosts are both saturated (the job itself; test hosts a and b on
    # one machine): host b's CPU is not why rank 1 is slow. Host b alone busy: it is.
    def samples(busy_a: float) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for base in WAITING[:15]:
            for host, rank, cpu, busy in (("a", 0, 14.0, busy_a), ("b", 1, 159.0, 98.0)):
                s = copy.deepcopy(base)
                s["gpus"], s["processes"] = [], []
                s["host"]["cpu_pct"] = busy
                cid = CID if host == "a" else "e" * 64
                s["ranks"] = [
                    {
                        "pid": 10 + rank,
                        "rank": rank,
                        "local_rank": 0,
                        "container_id": cid,
                        "cpu_pct": cpu,
                    }
                ]
                out.append((host, s))
        return out

    two = JobRecord(
        JOB,
        "llm",
        "lab",
        None,
        {"gpus_per_node": 0},
        "0" * 12,
        1.0,
        2,
        "running",
        nodes=[
            NodeRecord(JOB, 0, "a", "n0", CID, "running"),
            NodeRecord(JOB, 1, "b", "n1", "e" * 64, "running"),
        ],
    )
    for busy_a, expected in ((97.0, ()), (40.0, ("host b's CPU is 98% busy",))):
        st = FleetState(["a", "b"])
        st.set_containers({CID: ContainerJob(JOB, "llm", 0), "e" * 64: ContainerJob(JOB, "llm", 1)})
        for host, s in samples(busy_a):
            st.on_sample(host, s, rx=0.0)
        slow = slowest(rank_loads(st, [two])[JOB])
        assert slow is not None and slow.rank.rank == 1
        assert slow.rank.causes == expected, busy_a


def test_a_firing_straggler_keeps_the_sentence_it_fired_with() -> None:
    # fires on the real replay, then rank 1's numbers grow (its peers exit first at the end):
    # the summary stays the one it fired with, also once resolved
    samples = node_samples()
    changes = fire(samples + [_peers_gone(s, i) for i, s in enumerate(samples[-12:])])
    assert [c.change for c in changes] == ["fired"]
    cfg = AlertsConfig.model_validate({"straggler": {"for_s": 10}})
    eng = AlertEngine(cfg)
    st = FleetState(["b"])
    st.set_containers({CID: ContainerJob(JOB, "llm", 0)})
    out = []
    for s in samples + [_peers_gone(s, i) for i, s in enumerate(samples[-12:])]:
        st.on_sample("b", copy.deepcopy(s), rx=0.0)
        out += eng.evaluate(build_inputs(st, [job()]), s["host_time"])
    fired = [c for c in out if c.change == "fired" and c.alert.rule == "straggler"]
    assert len(fired) == 1
    summary = fired[0].alert.summary
    assert "at least ~16% slower" in summary
    done = eng.evaluate(build_inputs(st, [job("succeeded")]), samples[-1]["host_time"] + 100)
    (resolved,) = [c for c in done if c.alert.rule == "straggler"]
    assert resolved.change == "resolved" and resolved.alert.summary == summary


def _peers_gone(s: dict[str, Any], i: int) -> dict[str, Any]:
    """``s`` later in time, the waiting GPUs gone quiet (their ranks exited)."""
    s = copy.deepcopy(s)
    s["host_time"] += 40 + i
    for g in s["gpus"]:
        if g["index"] != 1:
            g["gpm"]["sm_activity_pct"] = 2.0
    return s
