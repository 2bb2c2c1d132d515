"""The Docker path on a real GPU, replayed from its device recording
(``tests/data/device/docker-h100``, README there; ``bench-h100`` for ``gpuconsole bench``): a
rank's process in a ``--gpus`` container mapped to container, job and rank; the metrics'
labels; a real CUDA OOM read through the container path; the bench's documents judged."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from console.bench import analysis, datasheet
from console.bench.model import documents, gpu_result
from console.diagnosis.engine import diagnose
from console.fleet.state import ContainerJob, FleetState, gpu_holders
from tests.unit.test_agent import check_schema

DATA = Path(__file__).parents[1] / "data/device"
DOCKER = DATA / "docker-h100"
BENCH = DATA / "bench-h100"
BENCH_H200 = DATA / "bench-h200"


def snapshot_host() -> dict[str, Any]:
    snap = json.loads((DOCKER / "top.json").read_text())
    (host,) = snap["hosts"]
    return dict(host)


def long_job_id() -> str:
    """The long run's job id, as the script printed it (``job gpu-long-XXXXXX``)."""
    m = re.search(r"^job (gpu-long-[0-9a-f]{6})$", (DOCKER / "run.txt").read_text(), re.M)
    assert m is not None
    return m.group(1)


def test_the_rank_in_a_gpus_container_is_mapped_to_container_job_and_rank() -> None:
    host = snapshot_host()
    sample = host["sample"]
    check_schema(sample)
    (proc,) = sample["processes"]
    job = long_job_id()
    assert proc["rank"] == 0 and proc["local_rank"] == 0 and proc["used_mib"] > 1000
    assert len(proc["container_id"]) == 64 and "train_ddp.py" in proc["command"]
    assert host["jobs"] == [
        {"pid": proc["pid"], "gpu_index": 0, "job_id": job, "job_name": "gpu-long",
         "node_rank": 0, "rank": 0}
    ]  # fmt: skip
    # the console's own reading of that sample, given the container's labels
    st = FleetState(["local"], interval=1.0)
    st.on_sample("local", sample, rx=1.0)
    st.set_containers({proc["container_id"]: ContainerJob(job, "gpu-long", 0)})
    holders = gpu_holders(st, "local")
    assert holders is not None
    (h,) = holders[0]
    assert (h.pid, h.rank, h.job) == (proc["pid"], 0, ContainerJob(job, "gpu-long", 0))
    assert f"(job {job} n0 r0)" in h.describe()
    # as printed: top's process column, the refused second submit, the app's fleet row
    assert f"{proc['pid']} {job} n0 r0" in (DOCKER / "top.txt").read_text()
    second = (DOCKER / "second.err").read_text()
    assert f"in container {proc['container_id'][:12]} (job {job} n0 r0)" in second
    # gpus --free: its header and no row (the GPU the rank holds is left out)
    assert (DOCKER / "gpus-free.txt").read_text().split() == ["HOST", "GPU", "NAME", "MEM", "MiB"]
    fleet = (DOCKER / "fleet.txt").read_text()
    assert any("H100 80GB HBM3  busy" in r and f"{job} n0 r0" in r for r in fleet.splitlines())


def test_the_metrics_of_the_jobs_gpu_carry_hpc_job_and_rank() -> None:
    job = long_job_id()
    series = [
        s
        for fam in text_string_to_metric_families((DOCKER / "metrics.txt").read_text())
        for s in fam.samples
        if s.name.startswith("DCGM_FI_DEV_")
    ]
    assert {s.name for s in series} >= {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED"}
    for s in series:
        assert s.labels["hpc_job"] == job and s.labels["rank"] == "0", s
        assert s.labels["modelName"] == "NVIDIA H100 80GB HBM3"


def test_stop_freed_the_gpu_and_the_checkpoint_resumed() -> None:
    run = (DOCKER / "run.txt").read_text()
    assert "resumed from step 30" in (DOCKER / "resume.out").read_text()
    assert "backend nccl device cuda:0" in (DOCKER / "follow.out").read_text()
    stop = (DOCKER / "stop-time.txt").read_text()
    assert "GPU memory used 0 MiB" in stop
    assert (DOCKER / "smi-after.txt").read_text().startswith("0, 0 MiB")
    docker_run = (DOCKER / "describe-ckpt.txt").read_text()
    for flag in ("--gpus", "--shm-size 2g", "--security-opt no-new-privileges", "--cap-drop ALL"):
        assert flag in docker_run
    assert "--privileged" not in docker_run
    assert "copied 1 file(s)" in run and "kernel probe exit 0" in run


def test_a_real_cuda_oom_in_a_container_is_named_with_its_rank_and_gpu() -> None:
    d = diagnose((DOCKER / "oom-logs.txt").read_text())
    assert d is not None
    assert d.kind == "cuda_oom" and d.ranks == (0,)
    assert d.facts["gpu"] == 0
    (job,) = [j for j in json.loads((DOCKER / "ps-oom.json").read_text()) if j["name"] == "gpu-oom"]
    assert job["failure"]["kind"] == "cuda_oom" and job["failure"]["rank"] == 0


def test_a_kernel_of_the_gpu_notebook_sees_cuda() -> None:
    got = json.loads((DOCKER / "kernel.json").read_text())
    assert got["reply"] == "ok" and got["error"] is None
    assert got["stream"].split()[1:] == ["True", "1"]
    assert got["result"] == "'NVIDIA H100 80GB HBM3'"


def test_the_recorded_h100_bench_lands_near_its_datasheet_and_passes() -> None:
    docs = documents((BENCH / "script.out").read_text().splitlines())
    assert [d["kind"] for d in docs] == ["gpu", "host"]
    g = gpu_result(docs[0], "local", 0, 0.0)
    sheet = datasheet.lookup(g.name)
    assert sheet is not None and sheet.model == "H100 SXM"
    assert g.bf16_tflops is not None and 0.7 * 989.4 < g.bf16_tflops < 989.4
    assert g.fp8_tflops is not None and 0.6 * 1978.9 < g.fp8_tflops < 1978.9
    assert g.copy_gbps is not None and 0.85 * 3350 < g.copy_gbps < 3350
    assert g.h2d_gbps is not None and g.h2d_gbps > 45  # PCIe gen 5 x16
    assert g.telemetry.reasons == ("sw_power_cap",)  # held at 700 W under the sustained load
    (v,) = analysis.judge([g], [g])
    assert not v.flagged and v.summary() == "ok"
    for name in ("quick.json", "full.json", "docker-full.json"):
        report = json.loads((BENCH / name).read_text())
        assert report["exit_code"] == 0, name
        (gpu,) = report["gpus"]
        assert gpu["verdict"]["flagged"] is False and gpu["bf16_tflops"] > 690, name


def test_the_recorded_h200_bench_reads_what_pytorch_measured_there() -> None:
    """About 790 TFLOP/s bf16 and 4.3 TB/s device copy (measured on that H200 with PyTorch
    before): the bench's bursts at the boost clock land there, through runtime host and
    Docker; the sustained load is the power-limited figure, with its reason."""
    docs = documents((BENCH_H200 / "script.out").read_text().splitlines())
    g = gpu_result(docs[0], "local", 0, 0.0)
    sheet = datasheet.lookup(g.name)
    assert sheet is not None and sheet.model == "H200 SXM"
    for name in ("quick.json", "full.json", "docker-full.json"):
        report = json.loads((BENCH_H200 / name).read_text())
        assert report["exit_code"] == 0, name
        (gpu,) = report["gpus"]
        assert 760 < gpu["bf16_tflops"] < 830 and 4100 < gpu["copy_gbps"] < 4500, name
        assert gpu["sustained_tflops"] < gpu["bf16_tflops"], name
        assert gpu["telemetry"]["reasons"] == ["sw_power_cap"], name
        assert gpu["verdict"]["flagged"] is False, name
