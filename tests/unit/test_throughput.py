"""A job's throughput and cost from its lines (console/throughput.py).

Expected values are worked out by hand from the lines below (the lines are the real formats of
tests/data/progress/cases.yaml: torchtitan, tqdm, Hugging Face Trainer), with timestamps as
Docker gives them.
"""

from __future__ import annotations

import math
import statistics

import pytest

from console.jobs.logs import JobLogLine
from console.jobs.store import JobRecord, NodeRecord
from console.throughput import (
    job_cost,
    ran_seconds,
    rate_text,
    spec_gpus,
    throughput_lines,
    throughput_of,
    world_size,
)

T0 = 1_780_000_000.0


def line(t: float, text: str, rank: int | None = 0, node: int = 0) -> JobLogLine:
    return JobLogLine(node, "a", rank, int((T0 + t) * 1e9), text)


TITAN = (
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - step: {s:2d}  loss:  7.62585  "
    "grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: {tps}  tflops: 314.71  mfu: 13.99%"
)


def test_torchtitan_per_gpu_rate_times_world_size_and_measured_steps() -> None:
    # steps 10, 20, 30 at t = 0, 20, 40 s: 10 steps per 20 s = 0.5 steps/s
    lines = [line(20 * i, TITAN.format(s=10 * (i + 1), tps="10,050")) for i in range(3)]
    tp = throughput_of(lines, world_size=8)
    assert tp is not None
    assert tp.step == 30 and tp.total is None
    assert tp.steps_per_s == pytest.approx(0.5) and tp.steps_source == "measured"
    assert tp.rate_unit == "tokens/s"
    assert tp.rate_per_gpu == 10050 and tp.rate == 10050 * 8
    assert tp.tflops == pytest.approx(314.71) and tp.mfu_pct == pytest.approx(13.99)
    assert tp.loss == pytest.approx(7.62585)
    assert tp.eta_s is None  # no total printed
    assert rate_text(tp) == "80.4k tokens/s"


def test_per_gpu_rate_without_world_size_stays_per_gpu() -> None:
    tp = throughput_of([line(0, TITAN.format(s=4, tps="10,050"))], world_size=None)
    assert tp is not None and tp.rate is None and tp.rate_per_gpu == 10050
    assert rate_text(tp) == "10.1k tokens/s/GPU"
    assert tp.steps_per_s is None  # one line: nothing measured, nothing reported


BAR = "{n}/{total} [00:{el:02d}<01:00, {rate}it/s, loss=0.{n}]"


def test_tqdm_bar_total_eta_and_epoch_restart() -> None:
    # epoch 1 ends at 100/100; epoch 2's bar restarts at 10/100. Only the new run counts:
    # 10 -> 40 over 15 s = 2.0 steps/s; ETA (100 - 40) / 2 = 30 s.
    lines = [
        line(0, BAR.format(n=90, total=100, el=45, rate="2.00")),
        line(5, BAR.format(n=100, total=100, el=50, rate="2.00")),
        line(10, BAR.format(n=10, total=100, el=5, rate="2.00")),
        line(25, BAR.format(n=40, total=100, el=20, rate="2.00")),
    ]
    tp = throughput_of(lines)
    assert tp is not None
    assert (tp.step, tp.total) == (40, 100)
    assert tp.steps_per_s == pytest.approx(2.0) and tp.steps_source == "measured"
    assert tp.eta_s == pytest.approx(30.0)
    assert tp.rate is None and tp.rate_unit is None  # tqdm's it/s is steps, not samples


def test_lines_read_at_once_use_the_reported_rate() -> None:
    # a Slurm job's lines are timestamped when read: no time between them to measure over
    lines = [line(0, BAR.format(n=n, total=200, el=n, rate="3.40")) for n in (10, 20, 30)]
    tp = throughput_of(lines)
    assert tp is not None
    assert tp.steps_per_s == pytest.approx(3.4) and tp.steps_source == "reported"
    assert tp.eta_s == pytest.approx((200 - 30) / 3.4)


def test_the_lowest_rank_speaks_for_the_job() -> None:
    # rank 1 is at step 7, rank 0 at step 5: rank 0's reading is shown, rank 1's ignored
    lines = [
        line(0, "step 4/50 loss 2.30", rank=1),
        line(1, "step 7/50 loss 2.30", rank=1),
        line(0, "step 1/50 loss 2.40", rank=0),
        line(4, "step 5/50 loss 2.20", rank=0),
    ]
    tp = throughput_of(lines)
    assert tp is not None and tp.rank == 0
    assert tp.step == 5 and tp.steps_per_s == pytest.approx(1.0)
    assert tp.loss == pytest.approx(2.20)


def test_old_readings_outside_the_window_are_not_used() -> None:
    # step 1 at t=0, then steps 100 -> 110 over 10 s at t = 1000..1010: 1 step/s, not ~0.1
    lines = [line(0, "step 1/500 loss 3.0")]
    lines += [line(1000 + i, f"step {100 + i}/500 loss 2.0") for i in range(11)]
    tp = throughput_of(lines)
    assert tp is not None and tp.steps_per_s == pytest.approx(1.0)
    assert tp.eta_s == pytest.approx(390.0)


def test_a_loss_alone_or_no_progress_is_none() -> None:
    assert throughput_of([line(0, "loss 3.4"), line(1, "NCCL INFO Channel 23/64")]) is None
    assert throughput_of([]) is None


def test_hf_trainer_final_samples_per_second_is_the_jobs() -> None:
    text = (
        "{'train_runtime': 40.5163, 'train_samples_per_second': 98.725, "
        "'train_steps_per_second': 3.085, 'train_loss': 0.4311, 'epoch': 3.0}"
    )
    tp = throughput_of([line(0, text)], world_size=4)
    assert tp is not None
    assert tp.rate == pytest.approx(98.725) and tp.rate_unit == "samples/s"
    assert tp.rate_per_gpu is None  # the whole job's: not multiplied by the world size
    assert tp.steps_per_s == pytest.approx(3.085) and tp.steps_source == "reported"


def test_cost_per_million_tokens_and_so_far() -> None:
    # 8 GPUs at $2.50/h = $20/h; 80,400 tokens/s = 289.44 Mtok/h -> $0.0691/Mtok; 90 min ran
    lines = [line(20 * i, TITAN.format(s=10 * (i + 1), tps="10,050")) for i in range(3)]
    tp = throughput_of(lines, world_size=8)
    cost = job_cost(8, 2.5, 5400, tp)
    assert cost is not None
    assert cost.usd_per_hour == pytest.approx(20.0)
    assert cost.usd_so_far == pytest.approx(30.0)
    assert cost.per_unit == "Mtok"
    assert cost.usd_per_unit == pytest.approx(20.0 / (80400 * 3600 / 1e6))
    text = "\n".join(throughput_lines(tp, cost, T0 + 40))
    assert "80.4k tokens/s" in text and "10.1k tokens/s/GPU" in text and "MFU 14%" in text
    assert "cost: $20.00/h (8 GPUs), $30.00 so far, $0.069 per Mtok" in text


def test_cost_per_1k_samples_and_unknowns() -> None:
    tp = throughput_of([line(0, "{'train_samples_per_second': 100.0, 'epoch': 1.0}")])
    cost = job_cost(2, 3.0, 0, tp)
    assert cost is not None and cost.per_unit == "1k samples"
    assert cost.usd_per_unit == pytest.approx(6.0 / 360.0)  # $6/h over 360k samples/h
    assert job_cost(None, 3.0, 10, tp) is None  # GPU count unknown
    assert job_cost(2, None, 10, tp) is None  # no price in the profile
    assert job_cost(0, 3.0, 10, tp) is None  # a CPU job
    no_rate = job_cost(2, 3.0, 3600, None)
    assert no_rate is not None and no_rate.usd_per_unit is None and no_rate.usd_so_far == 6.0


def _job(spec: dict[str, object], nodes: int = 2, state: str = "running") -> JobRecord:
    return JobRecord(
        id="j-1",
        name="j",
        profile="p",
        profile_source=None,
        spec=spec,
        spec_hash="0",
        created_at=T0,
        node_count=nodes,
        state=state,  # type: ignore[arg-type]
        nodes=[
            NodeRecord(
                "j-1",
                i,
                "a",
                f"c{i}",
                started_at=f"2026-05-28T20:26:{40 + i:02d}.123456789Z",
                finished_at="0001-01-01T00:00:00Z" if state == "running" else None,
            )
            for i in range(nodes)
        ],
    )


def test_gpus_world_size_and_ran_seconds_from_the_spec() -> None:
    assert spec_gpus(_job({"gpus_per_node": 4})) == 8
    assert spec_gpus(_job({"gpus_per_node": [0, 2, 3]})) == 6
    assert spec_gpus(_job({"gpus_per_node": "all"})) is None
    assert spec_gpus(_job({})) is None
    assert world_size(_job({"gpus_per_node": 4})) == 8  # nproc defaults to the GPU count
    assert world_size(_job({"gpus_per_node": 0, "nproc_per_node": 2})) == 4
    assert world_size(_job({"gpus_per_node": 0})) == 2
    assert world_size(_job({"gpus_per_node": "all"})) is None
    job = _job({"gpus_per_node": 4})
    started = 1_780_000_000.0  # 2026-05-28T20:26:40Z
    assert ran_seconds(job, started + 100.5) == pytest.approx(100.5 - 0.123456, abs=1e-3)
    assert ran_seconds(_job({}, state="pending"), started) == pytest.approx(0.0, abs=0.2)
    assert not math.isnan(ran_seconds(job, 0))


def test_a_job_that_stopped_printing_progress_is_stalled_not_fast() -> None:
    # steps every second up to step 29, then nothing for 3 minutes: rates and ETA unknown
    lines = [line(i, f"step {i}/1000 loss 1.0") for i in range(30)]
    tp = throughput_of(lines, now=T0 + 29 + 180)
    assert tp is not None and tp.step == 29 and tp.total == 1000
    assert tp.stalled_s == pytest.approx(180.0)
    assert tp.steps_per_s is None and tp.eta_s is None and tp.rate is None
    assert rate_text(tp) == "stalled 3m"
    # 90 s after the last line: still within the least stall time (120 s)
    fresh = throughput_of(lines, now=T0 + 29 + 90)
    assert fresh is not None and fresh.stalled_s is None and fresh.steps_per_s == pytest.approx(1)
    # a job that prints every 10 minutes is not stalled 20 minutes after its last line
    slow = [line(600 * i, f"step {100 * i}/5000 loss 1.0") for i in range(6)]
    assert throughput_of(slow, now=T0 + 3000 + 1200) is not None
    assert throughput_of(slow, now=T0 + 3000 + 1200).stalled_s is None  # type: ignore[union-attr]
    assert throughput_of(slow, now=T0 + 3000 + 3001).stalled_s is not None  # type: ignore[union-attr]


def test_every_rank_printing_its_own_rate_makes_the_jobs_rate_their_sum() -> None:
    # scripts/examples/train_ddp.py: each of 4 ranks prints its own samples/s (~290-300)
    lines = [
        line(i, f"step {i}/2000 loss 2.3012 samples/s {290 + r * 3 + i % 2} world_size 4", rank=r)
        for i in range(1, 9)
        for r in range(4)
    ]
    tp = throughput_of(lines, world_size=4)
    assert tp is not None and tp.rate_unit == "samples/s"
    # each rank's mean over its last 5 readings, averaged, times 4 ranks
    per_rank = [statistics.fmean(290 + r * 3 + i % 2 for i in range(4, 9)) for r in range(4)]
    assert tp.rate_per_gpu == pytest.approx(statistics.fmean(per_rank))
    assert tp.rate == pytest.approx(4 * statistics.fmean(per_rank))  # ~1,180, not one rank's 290
