"""PyTorch's Flight Recorder is on for every training job unless its spec opts out: the
variables each runtime's nodes get (console/jobs/flightrec.py), where the dumps and pipes go,
and that the spec's own values win."""

from __future__ import annotations

from pathlib import Path

from console.jobs.flightrec import flight_recorder_env
from console.jobs.plan import HostFacts, build_plan
from console.jobs.spec import load_spec
from remote.hostengine import node_dir
from tests.unit.test_host_runtime_plan import profile, spec
from tests.unit.test_slurm_backend import JOB_DIR, bash_parses, render

FR_KEYS = {
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
}


def facts() -> dict[str, HostFacts]:
    return {
        h: HostFacts(h, ip, 2, "/home/u", "/home/u/.cache/gpuconsole/workdirs/abc", 40000)
        for h, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2"))
    }


def plan_env(tmp_path: Path, extra: str) -> list[dict[str, str]]:
    loaded = load_spec(spec(tmp_path, f"nodes: 2\ngpus_per_node: 2\n{extra}"))
    plan = build_plan(
        loaded, profile(), ["a", "b"], facts(), job_id="hr-1a2b3c", created_at=1.0, image="img:1"
    )
    return [dict(n.container.env) for n in plan.nodes]


def test_every_training_node_records_its_collectives(tmp_path: Path) -> None:
    for env in plan_env(tmp_path, ""):
        assert {k: env[k] for k in FR_KEYS} == {
            "TORCH_FR_BUFFER_SIZE": "2000",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_FR_DUMP_TEMP_FILE": "/tmp/gpuconsole_fr_rank_",
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/tmp/gpuconsole_fr_pipe_",
        }
        # deprecated names make every rank print a warning (PyTorch 2.13): never set
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env
        assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in env


def test_the_spec_opts_out_or_sets_its_own_values(tmp_path: Path) -> None:
    for env in plan_env(tmp_path, "flight_recorder: false\n"):
        assert not FR_KEYS & set(env)
    mine = "env: {TOKEN: x, TORCH_FR_BUFFER_SIZE: '20000'}\n"
    p = spec(tmp_path)
    p.write_text(p.read_text().replace("env: {TOKEN: x}\n", "") + mine)
    loaded = load_spec(p)
    plan = build_plan(
        loaded, profile(), ["a"], facts(), job_id="hr-1a2b3c", created_at=1.0, image="img:1"
    )
    env = dict(plan.nodes[0].container.env)
    assert env["TORCH_FR_BUFFER_SIZE"] == "20000"  # the spec's
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_a_host_node_keeps_its_dumps_in_its_own_folder(tmp_path: Path) -> None:
    for rank, env in enumerate(plan_env(tmp_path, "runtime: host\n")):
        folder = node_dir("/home/u", "hr-1a2b3c", f"gpuconsole-hr-1a2b3c-n{rank}")
        assert env["TORCH_FR_DUMP_TEMP_FILE"] == f"{folder}/gpuconsole_fr_rank_"
        assert env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == f"{folder}/gpuconsole_fr_pipe_"


def test_a_slurm_job_exports_them_with_its_folder(tmp_path: Path) -> None:
    script = render(tmp_path)
    bash_parses(script)
    (line,) = [ln for ln in script.splitlines() if "TORCH_FR_BUFFER_SIZE" in ln]
    assert (
        line.startswith("export ")
        and f"TORCH_FR_DUMP_TEMP_FILE={JOB_DIR}/gpuconsole_fr_rank_" in line
    )
    assert "TORCH_FR_BUFFER_SIZE" not in render(tmp_path, flight_recorder=False)


def test_the_variables_name_one_folder() -> None:
    env = flight_recorder_env("/x/")
    assert env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == "/x/gpuconsole_fr_pipe_"
