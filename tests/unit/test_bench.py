"""``gpuconsole bench``: the script's documents read, each GPU judged against its model's fleet
median and datasheet with the likely reason, the results kept, and a plan naming (or leaving
out) a GPU the last bench flagged. The documents are built as the script builds them: its own
:class:`remote.bench.gpubench.Sampler` summarises the samples (H100/H200-shaped figures)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from console.bench import analysis, datasheet
from console.bench.dcgm import parse_diag
from console.bench.model import (
    EXIT_FAILED,
    EXIT_FLAGGED,
    EXIT_NOTHING,
    EXIT_OK,
    BenchReport,
    DcgmVerdict,
    GpuBench,
    HostBench,
    documents,
    gpu_result,
    host_result,
)
from console.bench.render import render, report_json
from console.bench.store import BenchStore
from console.errors import PlanError, StateError
from console.jobs.plan import HostFacts, build_plan, pick_gpus, render_plan
from console.jobs.spec import load_spec
from console.profiles import HostConfig, JobDefaults, Profile
from remote.bench import MARKER
from remote.bench.gpubench import Reader, Sampler

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"
HW_THERMAL, SW_POWER_CAP, IDLE = 0x40, 0x04, 0x01


def load_summary(samples: list[dict[str, Any]], phase: str = "load") -> dict[str, Any]:
    """The script's own summary of ``samples`` taken during ``phase``."""
    s = Sampler(Reader())
    s.samples = [{**x, "phase": phase} for x in samples]
    return s.summary(phase)


def gpu_doc(
    *,
    local: int = 0,
    name: str = "NVIDIA H100 80GB HBM3",
    bf16: float = 760.0,
    fp8: float | None = 1350.0,
    copy: float = 2950.0,
    h2d: float = 53.0,
    sm: float = 1980.0,
    mask: int = SW_POWER_CAP,
    gen: int = 5,
    procs: int = 1,
    ecc_after: int = 0,
) -> dict[str, Any]:
    """A ``kind: gpu`` document as gpubench.py prints it."""
    samples = [
        {"t": i, "sm_mhz": sm, "power_w": 690.0, "temp_c": 60 + i, "reasons": mask,
         "pcie_gen": gen, "pcie_width": 16}
        for i in range(10)
    ]  # fmt: skip
    samples[0]["reasons"] = IDLE  # the first sample, before the load ramps up
    doc: dict[str, Any] = {
        "v": 1, "rank": local, "local_rank": local, "node": 0, "mode": "quick",
        "torch": "2.6.0+cu124", "kind": "gpu", "uuid": f"GPU-0000000{local}-aaaa", "name": name,
        "capability": "9.0", "sampler": "nvml",
        "static": {"name": name, "sm_max_mhz": 1980, "power_limit_w": 700.0,
                   "power_default_limit_w": 700.0, "pcie_gen_max": 5, "pcie_gen_gpu_max": 5,
                   "pcie_width_max": 16},
        "bf16": {"median": bf16, "best": bf16 * 1.01, "reps": 3, "iters": 70},
        "copy": {"median": copy, "best": copy, "reps": 3, "iters": 40, "bytes": 1 << 30},
        "pcie": {"bytes": 1 << 28, "h2d": {"median": h2d, "best": h2d, "reps": 5},
                 "d2h": {"median": h2d, "best": h2d, "reps": 5}},
        "sustained": {"seconds": 6.0, "tflops": bf16 * 0.97, "min_window_tflops": bf16 * 0.9,
                      "windows": 24},
        "processes_load": [{"pid": 100 + i, "used_mib": 2048} for i in range(procs)],
        "ecc_before": {"volatile_corrected": 0, "volatile_uncorrected": 0,
                       "aggregate_uncorrected": 0},
        "ecc_after": {"volatile_corrected": 0, "volatile_uncorrected": ecc_after,
                      "aggregate_uncorrected": ecc_after},
        "telemetry": {"load": load_summary(samples)},
        "errors": {},
    }  # fmt: skip
    if fp8 is None:
        doc["fp8"], doc["fp8_unsupported"] = None, "sm_80: fp8 tensor cores need sm_89 or newer"
    else:
        doc["fp8"] = {"median": fp8, "best": fp8, "reps": 3, "iters": 100}
    return doc


def test_documents_are_found_behind_torchruns_tag_and_bad_ones_skipped() -> None:
    good = {"v": 1, "kind": "host", "cuda": False, "reason": "no CUDA"}
    lines = [
        "[rank0]:" + MARKER + json.dumps(good),
        "[rank1]:" + MARKER + "{not json",
        MARKER + json.dumps({**good, "v": 99}),
        "a training line",
        MARKER + json.dumps({"v": 1, "kind": "other"}),
    ]
    assert documents(lines) == [good]


def test_a_gpu_document_is_typed_once_with_its_telemetry_decoded() -> None:
    doc = gpu_doc(mask=HW_THERMAL | SW_POWER_CAP, procs=2, ecc_after=3, fp8=None)
    g = gpu_result(doc, "a", 3, 1000.0)
    assert (g.host, g.index, g.name, g.mode) == ("a", 3, "NVIDIA H100 80GB HBM3", "quick")
    assert g.bf16_tflops == 760.0 and g.copy_gbps == 2950.0 and g.h2d_gbps == 53.0
    assert g.fp8_tflops is None and g.fp8_unsupported is not None  # unknown, never 0
    t = g.telemetry
    assert t.reasons == ("sw_power_cap", "hw_thermal")  # gpu_idle left out
    assert t.reason_share == {"sw_power_cap": 0.9, "hw_thermal": 0.9}
    assert (t.pcie_gen, t.pcie_width, t.pcie_gen_max) == (5, 16, 5)
    assert t.other_processes == 1 and t.ecc_new_uncorrected == 3
    assert (t.sm_mhz_mean, t.sm_max_mhz, t.temp_c_max) == (1980.0, 1980.0, 69.0)
    assert GpuBench.from_json(json.loads(json.dumps(g.to_json()))) == g


def test_an_empty_process_list_is_unknown_not_zero_others() -> None:
    doc = gpu_doc()
    doc["processes_load"] = []  # NVML in a container may list none, not even the bench
    assert gpu_result(doc, "a", 0, 1.0).telemetry.other_processes is None


def test_host_document_busbw_is_the_largest_sizes() -> None:
    doc = {
        "v": 1, "kind": "host", "cuda": True, "gpus": 8, "world": 8, "mode": "full",
        "nccl": "2.21.5", "torch": "2.6.0",
        "allreduce": [
            {"bytes": 1 << 20, "time_s": 6e-5, "algbw_gbps": 17.5, "busbw_gbps": 30.6},
            {"bytes": 1 << 30, "time_s": 2.5e-3, "algbw_gbps": 429.5, "busbw_gbps": 751.6},
        ],
    }  # fmt: skip
    h = host_result(doc, "a", 1.0, "docker")
    assert h.state == "benched" and h.busbw_gbps == 751.6 and h.gpus == 8
    # nccl-tests: busbw = algbw * 2(n-1)/n
    assert h.allreduce[-1].algbw_gbps * 2 * 7 / 8 == pytest.approx(751.6, rel=1e-3)
    assert host_result({"v": 1, "kind": "host", "cuda": False}, "b", 1.0).state == "no_gpu"


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_datasheet_models_by_nvml_name(name: str, model: str) -> None:
    sheet = datasheet.lookup(name)
    assert sheet is not None and sheet.model == model and sheet.source.startswith("https://")


def test_the_measured_h200_passes_its_datasheet() -> None:
    # what PyTorch measured on the device's H200: ~790 TFLOP/s bf16, ~4.3 TB/s copy
    g = gpu_result(gpu_doc(name="NVIDIA H200", bf16=790.0, copy=4300.0), "d", 0, 1.0)
    assert analysis.findings(g, {}) == ()
    assert datasheet.lookup("NVIDIA Tesla T4") is None  # no figures: the median alone judges


def run_of(docs: list[dict[str, Any]], host: str = "a") -> list[GpuBench]:
    return [gpu_result(d, host, d["local_rank"], 1000.0) for d in docs]


def test_a_throttled_gpu_is_flagged_against_the_fleet_median_with_its_reason() -> None:
    docs = [gpu_doc(local=i) for i in range(4)]
    docs[2] = gpu_doc(local=2, bf16=600.0, sm=1410.0, mask=HW_THERMAL | SW_POWER_CAP)
    run = run_of(docs)
    verdicts = analysis.judge(run, run)
    assert [v.flagged for v in verdicts] == [False, False, True, False]
    v = verdicts[2]
    f = next(x for x in v.findings if x.metric == "bf16")
    assert f.basis == "median" and f.reference == 760.0 and f.peers == 4
    assert f.below_pct == pytest.approx(21.05, abs=0.01)
    # sw_power_cap is what every GPU shows under a full load: not the reason
    assert v.reasons[0] == "throttled: hw_thermal (90% of the load), SM clock 1410 of 1980 MHz"
    assert v.summary().startswith("slow: bf16 600 TFLOP/s is 21% below the fleet median 760")


def test_the_reasons_a_flag_names_from_the_telemetry() -> None:
    docs = [gpu_doc(local=i) for i in range(3)]
    docs[1] = gpu_doc(local=1, h2d=24.0, gen=4, procs=3, ecc_after=2)
    verdicts = analysis.judge(run_of(docs), run_of(docs))
    v = verdicts[1]
    assert v.flagged and {f.metric for f in v.findings} == {"h2d", "d2h"}
    assert v.reasons == (
        "another process on it (2 besides the bench)",
        "PCIe link at gen 4 under load; the GPU and slot allow gen 5",
        "ECC: 2 uncorrected error(s) during the bench",
    )


def test_a_lone_gpu_is_judged_by_its_datasheet_and_the_median_needs_two() -> None:
    g = run_of([gpu_doc(bf16=500.0)])
    v = analysis.judge(g, g)[0]
    assert v.flagged and v.findings[0].basis == "datasheet"
    # 989.4 dense x 0.75 achievable: 742 TFLOP/s; 500 is 33% below it
    assert v.findings[0].reference == pytest.approx(742.05)
    assert v.reasons == ("sw_power_cap at 690 W of 700 W",)


def test_the_fleet_median_takes_stored_results_of_other_hosts() -> None:
    past = run_of([gpu_doc(local=i) for i in range(4)], host="b")
    now = run_of([gpu_doc(local=0, bf16=650.0)], host="a")
    v = analysis.judge(now, past + now)[0]
    assert v.flagged and v.findings[0].peers == 5


def report_of(
    pairs: list[tuple[GpuBench, analysis.Verdict]], hosts: list[HostBench]
) -> BenchReport:
    return BenchReport("lab", "quick", 0.0, 12.0, tuple(pairs), tuple(hosts))


def test_exit_codes_and_the_table() -> None:
    run = run_of([gpu_doc(local=0), gpu_doc(local=1, bf16=500.0)])
    pairs = list(zip(run, analysis.judge(run, run)))
    ok_host = HostBench("a", "quick", 1.0, gpus=2, runtime="docker", torch="2.6.0")
    none = HostBench("c", "quick", 1.0, "no_gpu", False, "no NVIDIA driver")
    assert report_of(pairs[:1], [ok_host]).exit_code == EXIT_OK
    assert report_of(pairs, [ok_host, none]).exit_code == EXIT_FLAGGED
    assert report_of([], [none]).exit_code == EXIT_NOTHING
    failed = HostBench("b", "quick", 1.0, "failed", False, "host b: unreachable")
    assert report_of(pairs, [ok_host, failed]).exit_code == EXIT_FAILED
    dcgm = replace(report_of(pairs[:1], [ok_host]), dcgm=(DcgmVerdict("a", 1, "fail", ("PCIe",)),))
    assert dcgm.exit_code == EXIT_FLAGGED
    text = render(report_of(pairs, [ok_host, none]))
    assert "BF16 TFLOP/s" in text and "COPY TB/s" in text and "SLOW" in text
    assert "host c: nothing to bench (no NVIDIA driver)" in text
    assert "flagged: host a GPU 1 (H100 SXM): slow: bf16 500 TFLOP/s" in text
    j = report_json(report_of(pairs, [ok_host, none]))
    assert j["exit_code"] == EXIT_FLAGGED and j["gpus"][1]["verdict"]["flagged"] is True
    assert j["gpus"][0]["model"] == "H100 SXM" and j["gpus"][0]["bf16_tflops"] == 760.0
    assert set(j) == {"profile", "mode", "started", "ended", "exit_code", "gpus", "hosts",
                      "cross", "dcgm"}  # fmt: skip


def test_the_store_keeps_the_last_per_gpu_and_names_the_flagged(tmp_path: Path) -> None:
    store = BenchStore(tmp_path)
    assert store.last_gpus("lab") == [] and store.slow("lab") == {}
    run = run_of([gpu_doc(local=0), gpu_doc(local=1, bf16=500.0)])
    store.save("lab", list(zip(run, analysis.judge(run, run))), [])
    slow = store.slow("lab")
    assert list(slow) == ["a"] and list(slow["a"]) == [1]
    assert slow["a"][1].startswith("slow: bf16 500 TFLOP/s")
    assert store.slow("other-profile") == {}
    # benched again and fine: no longer flagged; both kept in its history
    again = run_of([gpu_doc(local=1)])
    store.save("lab", list(zip(again, analysis.judge(again, again))), [])
    assert store.slow("lab") == {}
    assert [g.bf16_tflops for g in store.history("lab", "a", 1)] == [760.0, 500.0]
    (tmp_path / "bench.json").write_text("{nope")
    with pytest.raises(StateError, match=r"is not the bench results' JSON"):
        store.last_gpus("lab")


def plan_profile() -> Profile:
    return Profile(
        name="t",
        hosts={"a": HostConfig(hostname="10.0.0.1")},
        defaults=JobDefaults.model_validate({"image": "img:1"}),
    )


def test_the_plan_names_a_flagged_gpu_and_exclude_slow_leaves_it_out(tmp_path: Path) -> None:
    store = BenchStore(tmp_path)
    run = run_of([gpu_doc(local=i) for i in range(3)] + [gpu_doc(local=3, bf16=500.0)])
    store.save("t", list(zip(run, analysis.judge(run, run))), [])
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: 2\n")
    loaded = load_spec(spec)
    facts = HostFacts("a", "10.0.0.1", 4, "/home/u", "/w", 40000, {}, slow=store.slow("t")["a"])
    # a count takes the lowest free GPUs; the flagged one is named when used
    plan = build_plan(loaded, plan_profile(), ["a"], {"a": facts}, job_id="d-1", created_at=1.0,
                      image="img:1")  # fmt: skip
    assert plan.nodes[0].gpu_ids == (0, 1) and plan.notes == ()
    busy = replace(facts, holders={0: ["pid 1 (x)"], 1: ["pid 2 (y)"]})
    plan = build_plan(loaded, plan_profile(), ["a"], {"a": busy}, job_id="d-1", created_at=1.0,
                      image="img:1")  # fmt: skip
    assert plan.nodes[0].gpu_ids == (2, 3)
    text = render_plan(plan)
    assert "note: host a GPU 3 was flagged by the last bench: slow: bf16 500 TFLOP/s" in text
    assert "(--exclude-slow leaves it out)" in text
    # --exclude-slow: GPU 3 is not taken; 2 of the other 3 are busy, so too few
    with pytest.raises(PlanError, match="GPU\\(s\\) 0 in use"):
        pick_gpus(loaded, replace(busy, exclude_slow=True))
    free = replace(facts, holders={0: ["pid 1 (x)"]}, exclude_slow=True)
    plan = build_plan(loaded, plan_profile(), ["a"], {"a": free}, job_id="d-1", created_at=1.0,
                      image="img:1")  # fmt: skip
    assert plan.nodes[0].gpu_ids == (1, 2)
    assert "note: host a GPU 3 left out (--exclude-slow): slow: bf16 500" in render_plan(plan)
    spec.write_text(f"name: demo\nscript: train_ddp.py\nworkdir: {EXAMPLES}\ngpus_per_node: all\n")
    with pytest.raises(PlanError, match="GPU\\(s\\) 3 flagged slow by the last bench") as e:
        pick_gpus(load_spec(spec), free)
    assert e.value.hint is not None and "gpuconsole bench --host a" in e.value.hint


DCGM_FAIL = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| PCIe                      | Fail - GPU: 3                                  |
| Warning                   | GPU 3 PCIe link width x8, expected x16         |
| Environment Variables     | Pass                                           |
+---------------------------+------------------------------------------------+
"""


def test_dcgm_diag_verdicts() -> None:
    v = parse_diag("a", 1, DCGM_FAIL, "", 226)
    assert (v.verdict, v.failed) == ("fail", ("PCIe",))
    assert v.detail == "PCIe: GPU 3 PCIe link width x8, expected x16"
    passed = DCGM_FAIL.replace("Fail - GPU: 3", "Pass").replace(
        "| Warning                   | GPU 3 PCIe link width x8, expected x16         |\n", ""
    )
    assert parse_diag("a", 1, passed, "", 0).verdict == "pass"
    err = parse_diag("a", 2, "", "Error: unable to establish a connection to the host engine", 1)
    assert err.verdict == "error" and "host engine" in err.detail


def test_dcgm_verdict_in_the_table_and_json() -> None:
    """A real 3.x table (one GPU of four failing Targeted Power) beside gpuconsole's verdict:
    the table names the test, the GPU and DCGM's reason; ``--json`` has every field."""
    case = "10-sagemaker-3x-level3-targeted-power-fail-gpu1.txt"
    text = (Path(__file__).parents[1] / "data" / "dcgm" / case).read_text()
    d = parse_diag("a", 2, text, "", 226)
    ok_host = HostBench("a", "quick", 1.0, gpus=1, runtime="docker")
    run = run_of([gpu_doc(local=0)])
    rep = replace(report_of(list(zip(run, analysis.judge(run, run))), [ok_host]), dcgm=(d,))
    assert rep.exit_code == EXIT_FLAGGED
    line = next(ln for ln in render(rep).splitlines() if ln.startswith("dcgm:"))
    assert line.startswith(
        "dcgm: host a: dcgmi diag -r 2: FAIL: Targeted Power on GPU 1 "
        "(Targeted Power: GPU 1 Max power of 224.1 did not reach desired power minimum"
    ), line
    assert line.endswith("; gpuconsole: ok"), line
    j = report_json(rep)["dcgm"][0]
    assert (j["verdict"], j["failed"], j["gpus"], j["skipped"]) == (
        "fail", ["Targeted Power"], [1], ["EUD Test"]
    )  # fmt: skip
