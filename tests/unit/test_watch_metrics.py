"""``watch``'s Prometheus collector: dcgm-exporter's names and labels over the fleet state,
values from the recorded H200 traces, unknown readings omitted (never 0), job labels, Xids,
host up and the ALERTS series."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from console.alerts.model import Alert
from console.fleet.state import ContainerJob, FleetState
from console.watch.metrics import GPU_LABELS, FleetCollector, XidTracker, make_registry

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CID = "c" * 64

Series = dict[str, list[tuple[dict[str, str], float]]]


def trace(name: str) -> list[Any]:
    """The JSON lines of a recorded trace (decoded, untyped: tests edit them)."""
    with open(TRACES / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scrape(
    state: FleetState | None,
    alerts: list[Alert] | None = None,
    xids: XidTracker | None = None,
    now: float = 1000.0,
) -> Series:
    """The exposition text, parsed back (what a Prometheus server would store)."""
    col = FleetCollector(lambda: state, lambda: alerts or [], xids, monotonic=lambda: now)
    text = generate_latest(make_registry(col)).decode()
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def one(series: Series, name: str, **labels: str) -> float:
    got = [v for lb, v in series.get(name, []) if all(lb.get(k) == x for k, x in labels.items())]
    assert len(got) == 1, (name, labels, series.get(name))
    return got[0]


def test_trace_values_under_dcgm_names_and_labels() -> None:
    samples = trace("h200-load.jsonl")
    st = FleetState(["h200"])
    for i, s in enumerate(samples):
        st.on_sample("h200", copy.deepcopy(s), rx=990.0 + i)
    last = samples[-1]
    got = scrape(st, now=1020.0)
    for g in last["gpus"]:
        idx = str(g["index"])
        ref = {"gpu": idx, "Hostname": "h200"}
        _, labels = next((v, lb) for lb, v in got["DCGM_FI_DEV_GPU_UTIL"] if lb["gpu"] == idx)
        assert set(GPU_LABELS) <= set(labels)
        assert labels["UUID"] == g["uuid"] and labels["modelName"] == g["name"]
        assert labels["device"] == f"nvidia{g['index']}"
        assert labels["pci_bus_id"] == g["pci_bus_id"]
        assert labels["DCGM_FI_DRIVER_VERSION"] == last["host"]["driver_version"]
        assert "hpc_job" not in labels and "rank" not in labels  # the loader ran bare
        assert one(got, "DCGM_FI_DEV_GPU_UTIL", **ref) == g["util_gpu_pct"]
        assert one(got, "DCGM_FI_DEV_MEM_COPY_UTIL", **ref) == g["util_mem_pct"]
        assert one(got, "DCGM_FI_DEV_FB_USED", **ref) == g["mem_used_mib"]
        assert one(got, "DCGM_FI_DEV_FB_FREE", **ref) == g["mem_total_mib"] - g["mem_used_mib"]
        assert one(got, "DCGM_FI_DEV_GPU_TEMP", **ref) == g["temp_c"]
        assert one(got, "DCGM_FI_DEV_POWER_USAGE", **ref) == g["power_w"]
        assert one(got, "DCGM_FI_DEV_SM_CLOCK", **ref) == g["sm_clock_mhz"]
        assert one(got, "DCGM_FI_DEV_MEM_CLOCK", **ref) == g["mem_clock_mhz"]
        assert one(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **ref) == g["ecc_volatile_uncorrected"]
        # DCGM's profiling fields are ratios (0-1); the agent's GPM values are percentages
        assert one(got, "DCGM_FI_PROF_SM_ACTIVE", **ref) == g["gpm"]["sm_activity_pct"] / 100
        assert (
            one(got, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", **ref)
            == g["gpm"]["tensor_activity_pct"] / 100
        )
        # Xid registration worked on that machine and no Xid occurred: DCGM's 0
        assert one(got, "DCGM_FI_DEV_XID_ERRORS", **ref) == 0
    # the loaded GPU really is the busy one (README: ~96 % SM activity, 17612 MiB)
    assert one(got, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") > 0.9
    assert one(got, "DCGM_FI_DEV_FB_USED", gpu="1") == 0
    # no memory temperature in the schema: never exposed, rather than 0
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in got
    assert one(got, "gpuconsole_host_up", Hostname="h200") == 1
    assert one(got, "gpuconsole_host_sample_age_seconds", Hostname="h200") == 1020.0 - (
        990.0 + len(samples) - 1
    )


def test_unknown_readings_are_omitted_not_zero() -> None:
    s = trace("h200-idle.jsonl")[-1]
    g0 = s["gpus"][0]
    g0.update(temp_c=None, power_w=None, mem_used_mib=None, gpm=None)
    g0["errors"].update(temp_c="Unknown Error", power_w="Not Supported")
    st = FleetState(["x"])
    st.on_sample("x", s, rx=1.0)
    got = scrape(st)
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ):
        assert [lb["gpu"] for lb, _ in got.get(name, [])] == ["1"], name
    assert one(got, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == g0["util_gpu_pct"]


def test_nvidia_smi_fallback_has_no_profiling_series() -> None:
    st = FleetState(["s"])
    for s in trace("h200-smi-fallback.jsonl"):
        st.on_sample("s", s, rx=1.0)
    got = scrape(st)
    assert len(got["DCGM_FI_DEV_GPU_UTIL"]) == 2
    assert not any(n.startswith("DCGM_FI_PROF_") for n in got)


def test_lost_gpu_and_driver_down_host_expose_no_readings() -> None:
    lost = trace("h200-idle.jsonl")[0]
    lost["state"] = "gpu_lost"
    lost["gpus"][1]["lost"] = True
    down = trace("h200-idle.jsonl")[1]
    down["state"] = "driver_unreachable"
    st = FleetState(["a", "b", "c"])
    st.on_sample("a", lost, rx=1.0)
    st.on_sample("b", down, rx=1.0)
    st.on_down("c", "host c: connection refused")
    got = scrape(st)
    assert {(lb["Hostname"], lb["gpu"]) for lb, _ in got["DCGM_FI_DEV_GPU_UTIL"]} == {("a", "0")}
    assert one(got, "gpuconsole_host_up", Hostname="c") == 0
    assert one(got, "gpuconsole_host_up", Hostname="a") == 1


def test_connecting_host_has_no_up_series() -> None:
    got = scrape(FleetState(["new"]))
    assert not any(lb.get("Hostname") == "new" for lb, _ in got.get("gpuconsole_host_up", []))


def test_gpu_of_a_job_carries_hpc_job_and_ranks() -> None:
    s = trace("h200-load.jsonl")[0]
    s["processes"] = [
        {
            "gpu_index": 0,
            "gpu_uuid": s["gpus"][0]["uuid"],
            "pid": 11,
            "used_mib": 9000,
            "type": "compute",
            "user": "root",
            "command": "python train.py",
            "container_id": CID,
            "rank": 3,
            "local_rank": 1,
        },
        {
            "gpu_index": 0,
            "gpu_uuid": s["gpus"][0]["uuid"],
            "pid": 12,
            "used_mib": 900,
            "type": "compute",
            "user": "root",
            "command": "python train.py",
            "container_id": CID,
            "rank": 2,
            "local_rank": 0,
        },
    ]
    st = FleetState(["a"])
    st.on_sample("a", s, rx=1.0)
    st.set_containers({CID: ContainerJob("llama-1a2b3c", "llama", 1)})
    got = scrape(st)
    labels = [lb for lb, _ in got["DCGM_FI_DEV_GPU_UTIL"]]
    by_gpu = {lb["gpu"]: lb for lb in labels}
    assert by_gpu["0"]["hpc_job"] == "llama-1a2b3c" and by_gpu["0"]["rank"] == "2,3"
    assert "hpc_job" not in by_gpu["1"] and "job" not in by_gpu["0"]


def test_last_xid_per_gpu_and_absent_where_xid_unsupported() -> None:
    samples = trace("h200-idle.jsonl")[:3]
    samples[0]["xid_events"] = [
        {
            "time": 1.0,
            "gpu_index": None,
            "pci_bus_id": samples[0]["gpus"][1]["pci_bus_id"],
            "xid": 79,
            "pid": None,
            "detail": None,
        }
    ]
    samples[1]["xid_events"] = [
        {"time": 2.0, "gpu_index": 1, "pci_bus_id": None, "xid": 48, "pid": None, "detail": None}
    ]
    xids = XidTracker()
    st = FleetState(["a", "b"])
    for s in samples[:2]:
        st.on_sample("a", s, rx=1.0)
        xids.on_sample("a", s)
    samples[2]["errors"]["xid"] = "nvmlEventSetCreate: Not Supported"
    st.on_sample("b", samples[2], rx=1.0)
    got = scrape(st, xids=xids)
    assert one(got, "DCGM_FI_DEV_XID_ERRORS", Hostname="a", gpu="1") == 48
    assert one(got, "DCGM_FI_DEV_XID_ERRORS", Hostname="a", gpu="0") == 0
    assert not [lb for lb, _ in got["DCGM_FI_DEV_XID_ERRORS"] if lb["Hostname"] == "b"]


def test_firing_alerts_follow_prometheus_alerts_convention() -> None:
    firing = Alert(
        "gpu_temperature/a/gpu1",
        "gpu_temperature",
        "warning",
        "hot",
        host="a",
        gpu=1,
        since=90.0,
        fired_at=100.0,
    )
    job = Alert(
        "job_failed/job/llama",
        "job_failed",
        "critical",
        "failed",
        job="llama",
        fired_at=200.0,
        details=MappingProxyType({"job_id": "llama-1a2b3c"}),
    )
    gone = Alert(
        "host_unreachable/b",
        "host_unreachable",
        "critical",
        "b down",
        host="b",
        fired_at=50.0,
        resolved_at=60.0,
    )
    got = scrape(None, [firing, job, gone])
    assert (
        one(
            got,
            "ALERTS",
            alertname="gpu_temperature",
            alertstate="firing",
            severity="warning",
            Hostname="a",
            gpu="1",
        )
        == 1
    )
    # hpc_job is the job id, as on the GPU series (the alert is keyed by the job's name)
    assert one(got, "ALERTS", alertname="job_failed", hpc_job="llama-1a2b3c") == 1
    assert not [lb for lb, _ in got["ALERTS"] if lb["alertname"] == "host_unreachable"]
    assert one(got, "ALERTS_FOR_STATE", alertname="gpu_temperature") == 100.0
    assert "DCGM_FI_DEV_GPU_UTIL" not in got  # no fleet yet: alerts only


class FakeAlertSource:
    """A stand-in for the rule engine: one alert carried over from a previous run, and
    whatever the test publishes on the bus."""

    def __init__(self, carried: list[Alert]) -> None:
        self.carried = carried
        self.closed = False

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True

    def active(self) -> list[Alert]:
        return list(self.carried)


async def test_watch_prints_transitions_and_serves_them(tmp_path: Path) -> None:
    """The runner over a replay: a published transition is printed (text and JSON), carried
    over and new alerts are on the endpoint, a resolved one leaves it."""
    import asyncio
    import urllib.request

    from console.alerts.model import AlertChanged
    from console.profiles import Profile
    from console.service import Service
    from console.watch.runner import Watch, WatchOptions, alert_json, firing_json

    old = Alert(
        "gpu_lost/vm/00000000:00:07.0", "gpu_lost", "critical", "GPU lost", host="vm", fired_at=50.0
    )
    hot = Alert(
        "gpu_temperature/vm/gpu0",
        "gpu_temperature",
        "warning",
        "GPU 0 on vm at 91 C for 60 s",
        host="vm",
        gpu=0,
        since=40.0,
        fired_at=100.0,
    )
    for as_json in (False, True):
        lines: list[str] = []
        said: list[str] = []
        source = FakeAlertSource([old])
        profile = Profile(name="t", hosts={"vm": {"transport": "local"}})
        async with Service(profile) as svc:
            w = Watch(
                svc,
                WatchOptions(
                    as_json=as_json, metrics_port=0, replay=TRACES / "h200-idle.jsonl", speed=0
                ),
                emit=lines.append,
                say=said.append,
                source=source,
            )
            stop = asyncio.Event()
            task = asyncio.create_task(w.run(stop))
            while not any(s.startswith("replay finished") for s in said):
                await asyncio.sleep(0.02)
            svc.bus.publish(AlertChanged(hot, "fired", 100.0))
            await asyncio.sleep(0.05)
            url = w.metrics_url
            assert url is not None and url.startswith("http://127.0.0.1:")

            def get(url: str = url) -> str:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return str(r.read().decode())

            text = await asyncio.to_thread(get)
            firing = {
                lb["alertname"]
                for fam in text_string_to_metric_families(text)
                if fam.name == "ALERTS"
                for s in fam.samples
                for lb in [s.labels]
            }
            assert firing == {"gpu_lost", "gpu_temperature"}
            import dataclasses

            svc.bus.publish(
                AlertChanged(dataclasses.replace(hot, resolved_at=130.0), "resolved", 130.0)
            )
            await asyncio.sleep(0.05)
            assert [a.key for a in w.firing()] == [old.key]
            stop.set()
            await asyncio.wait_for(task, 10)
        assert source.closed
        assert any(s.startswith("still firing since") and old.key in s for s in said)
        assert len(lines) == 3  # the alert carried over (its state), then the transitions
        initial, lines = lines[0], lines[1:]
        if as_json:
            assert json.loads(initial) == firing_json(old)
            assert [json.loads(ln) for ln in lines] == [
                alert_json(AlertChanged(hot, "fired", 100.0)),
                alert_json(
                    AlertChanged(dataclasses.replace(hot, resolved_at=130.0), "resolved", 130.0)
                ),
            ]
            assert json.loads(lines[0])["alert"]["gpu"] == 0
        else:
            assert "CRITICAL  firing" in initial and old.key in initial
            assert "WARNING" in lines[0] and "fired" in lines[0] and hot.summary in lines[0]
            assert "RESOLVED" in lines[1] and hot.key in lines[1]


def test_job_throughput_eta_and_cost_series() -> None:
    from console.jobs.logs import JobLogLine
    from console.throughput import JobProgress, job_cost, throughput_of

    # torchtitan on 8 GPUs: steps 10 -> 30 over 40 s (0.5 steps/s), 10,050 tokens/s per GPU
    text = "[titan] - root - INFO - step: {s}  loss:  7.6  tps: 10,050  tflops: 314.71  mfu: 13.99%"
    lines = [
        JobLogLine(0, "a", 0, int((100 + 20 * i) * 1e9), text.format(s=10 * (i + 1)))
        for i in range(3)
    ]
    tp = throughput_of(lines, world_size=8)
    progress = {
        "llm-1": JobProgress("llm-1", tp, job_cost(8, 2.5, 3600, tp), 140.0),
        "quiet-2": JobProgress("quiet-2", None, None, 140.0),  # its log says nothing yet
    }
    col = FleetCollector(lambda: None, lambda: [], progress=lambda: progress)
    out: Series = {}
    for fam in text_string_to_metric_families(generate_latest(make_registry(col)).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    assert one(out, "gpuconsole_job_throughput", hpc_job="llm-1", unit="steps/s") == 0.5
    assert one(out, "gpuconsole_job_throughput", hpc_job="llm-1", unit="tokens/s") == 80400
    assert one(out, "gpuconsole_job_tflops_per_gpu", hpc_job="llm-1") == 314.71
    assert one(out, "gpuconsole_job_mfu_percent", hpc_job="llm-1") == 13.99
    assert one(out, "gpuconsole_job_cost_usd_per_hour", hpc_job="llm-1") == 20.0
    assert one(out, "gpuconsole_job_cost_usd", hpc_job="llm-1") == 20.0
    assert "gpuconsole_job_eta_seconds" not in out  # no total step printed: no ETA
    every = [lb for series in out.values() for lb, _ in series]
    assert all(lb.get("hpc_job") != "quiet-2" for lb in every)  # unknown stays absent
