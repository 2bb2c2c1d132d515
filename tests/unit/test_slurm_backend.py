"""The Slurm backend's pure parts: the sbatch script (:func:`console.slurm.script.render_sbatch`,
checked by bash's parser too), the Slurm profile section, and Slurm's answers read as job
and node states (:mod:`console.slurm.state`) on the real outputs recorded in
``tests/data/slurm``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from console.diagnosis.engine import diagnose
from console.errors import ConfigError, PlanError
from console.jobs.spec import validate_spec
from console.profiles import Profile, load_profile_file
from console.slurm.script import render_sbatch
from console.slurm.state import (
    SlurmJob,
    expand_nodelist,
    job_from_sacct,
    job_from_scontrol,
    node_states,
    parse_scontrol,
    task_ends,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDED = DATA / "recorded"
BACKEND = DATA / "backend"
JOB_DIR = "/home/u/.cache/gpuconsole/slurm/j-abc123"
WORKDIR = "/home/u/.cache/gpuconsole/workdirs/0123456789abcdef"


def profile(**slurm: Any) -> Profile:
    cfg = {"login_host": "login", "partition": "debug", **slurm}
    return Profile.model_validate(
        {
            "name": "cluster",
            "scheduler": "slurm",
            "hosts": {"login": {"hostname": "10.0.0.1"}},
            "slurm": cfg,
        }
    )


def loaded(tmp_path: Path, **fields: Any) -> Any:
    (tmp_path / "train.py").write_text("print('hi')\n")
    data = {
        "name": "j",
        "nodes": 2,
        "gpus_per_node": 0,
        "nproc_per_node": 1,
        "workdir": ".",
        "script": "train.py",
        **fields,
    }
    return validate_spec(data, str(tmp_path / "spec.yaml"), tmp_path)


def render(tmp_path: Path, prof: Profile | None = None, **fields: Any) -> str:
    return render_sbatch(
        loaded(tmp_path, **fields),
        prof or profile(),
        "j-abc123",
        job_dir=JOB_DIR,
        workdir=WORKDIR,
        home="/home/u",
        env_names=("PLAIN", "TOKEN"),
        secret_names=frozenset({"TOKEN"}),
    )


def bash_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


def test_cpu_job_on_the_nodes_python(tmp_path: Path) -> None:
    s = render(
        tmp_path,
        profile(
            python="/opt/venv/bin/python",
            time_limit="1:00:00",
            account="proj",
            sbatch_args=["--qos=high"],
        ),
        args=["--lr", "a b", "${local_rank}"],
    )
    bash_parses(s)
    lines = s.splitlines()
    sbatch = [ln for ln in lines if ln.startswith("#SBATCH ")]
    assert sbatch == [
        "#SBATCH --job-name=j-abc123",
        "#SBATCH --comment=gpuconsole:j-abc123",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=1:00:00",
        "#SBATCH --partition=debug",
        "#SBATCH --account=proj",
        f"#SBATCH --output={JOB_DIR}/batch.out",
        f"#SBATCH --chdir={JOB_DIR}",
        "#SBATCH --qos=high",
    ]
    assert "# environment (values in $job_dir/env, mode 0600): PLAIN TOKEN (secret)" in lines
    assert 'set -a; . "$job_dir/env"; set +a' in lines
    assert f"cd {WORKDIR}" in lines
    assert "port=$(( 29400 + SLURM_JOB_ID % 1000 ))" in lines
    flat = s.replace(" \\\n    ", " ")
    assert (
        f"exec srun --kill-on-bad-exit=1 --export=ALL --ntasks-per-node=1 "
        f"--output={JOB_DIR}/node%t.out /opt/venv/bin/python -m torch.distributed.run "
        '--nnodes "$SLURM_JOB_NUM_NODES" --nproc-per-node 1 --rdzv-backend c10d '
        '--rdzv-endpoint "$addr:$port" --rdzv-id j-abc123 --max-restarts 0 --tee 3 '
        "train.py --lr 'a b' '${local_rank}'"
    ) in flat


def test_gpus_and_pyxis(tmp_path: Path) -> None:
    s = render(
        tmp_path,
        profile(container="pyxis"),
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        gpus_per_node=4,
        nproc_per_node=4,
        rdzv_port=29500,
        mounts=["~/data:/data:ro"],
    )
    bash_parses(s)
    assert "#SBATCH --gpus-per-node=4" in s.splitlines()
    assert "port=29500" in s.splitlines()
    flat = s.replace(" \\\n    ", " ")
    assert (
        "--container-image=nvcr.io/nvidia/pytorch:24.05-py3 --container-workdir=/workspace" in flat
    )
    assert (
        f"--container-mounts={WORKDIR}:/workspace:ro,/home/u/data:/data:ro torchrun "
        "--nnodes" in flat
    )
    assert "--nproc-per-node 4" in flat
    assert f"cd {WORKDIR}" not in s


def test_apptainer_binds_and_nv(tmp_path: Path) -> None:
    s = render(
        tmp_path,
        profile(container="apptainer"),
        image="pytorch/pytorch:2.3.0",
        gpus_per_node=2,
        nodes=["gpu01", "gpu02"],
    )
    bash_parses(s)
    assert "#SBATCH --nodelist=gpu01,gpu02" in s.splitlines()
    flat = s.replace(" \\\n    ", " ")
    assert (
        f"apptainer exec --pwd /workspace --nv --bind {WORKDIR}:/workspace:ro "
        "docker://pytorch/pytorch:2.3.0 torchrun --nnodes"
    ) in flat


def test_a_python_under_home_is_expanded(tmp_path: Path) -> None:
    s = render(tmp_path, profile(python="~/venvs/t/bin/python"))
    assert "/home/u/venvs/t/bin/python -m torch.distributed.run" in s


def test_image_without_a_plugin_runs_on_the_nodes_python_and_says_mounts_are_not_used(
    tmp_path: Path,
) -> None:
    s = render(tmp_path, image="gpuconsole/torch:2.13.0-cpu", mounts=["/scratch:/out"])
    assert "python3 -m torch.distributed.run" in s.replace(" \\\n    ", " ")
    assert (
        "# note: mounts apply to containers; this job runs on the nodes' own Python, so "
        "/scratch:/out are not mounted" in s
    )


@pytest.mark.parametrize(
    ("fields", "prof", "message"),
    [
        ({"gpus_per_node": "all"}, None, "Slurm allocates GPUs by count, not 'all'"),
        ({"gpus_per_node": [0, 1]}, None, "Slurm allocates GPUs by count"),
        ({"gpus_per_node": 1, "nproc_per_node": 2}, None, "more processes than GPUs"),
        ({"runtime": "docker", "image": "x/y:1"}, None, "the cluster has no container plugin"),
    ],
)
def test_jobs_the_cluster_cannot_run(
    tmp_path: Path, fields: dict[str, Any], prof: Profile | None, message: str
) -> None:
    with pytest.raises(PlanError, match=message.replace("(", r"\(")):
        render(tmp_path, prof, **fields)


def test_a_job_folder_sbatch_options_cannot_carry(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="job folder"):
        render_sbatch(
            loaded(tmp_path),
            profile(),
            "j-abc123",
            job_dir="/home/u s/x",
            workdir=None,
            home="/home/u s",
        )


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("scheduler: slurm\nhosts: {l: {}}\n", "`scheduler: slurm` needs a `slurm:` section"),
        ("hosts: {l: {}}\nslurm: {login_host: l}\n", "a `slurm:` section needs `scheduler: slurm`"),
        (
            "scheduler: slurm\nhosts: {l: {}, m: {}}\nslurm: {login_host: l}\n",
            "holds only the login host",
        ),
        ("scheduler: slurm\nhosts: {l: {}}\nslurm: {login_host: x}\n", "login_host 'x' is not"),
        (
            "scheduler: slurm\nhosts: {l: {}}\nslurm:\n  login_host: l\n  time_limit: 2h\n",
            "not a Slurm time limit",
        ),
        (
            "scheduler: slurm\nhosts: {l: {}}\nslurm:\n  login_host: l\n  sbatch_args: [qos]\n",
            "not an sbatch option",
        ),
        (
            "scheduler: slurm\nhosts: {l: {}}\nslurm:\n  login_host: l\n  container: docker\n",
            "container",
        ),
    ],
)
def test_slurm_profile_errors_name_file_and_line(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_profile_file(p)
    assert message in str(e.value)
    assert str(e.value).startswith(f"{p}:")


def test_spec_time_limit_grammar(tmp_path: Path) -> None:
    assert loaded(tmp_path, time_limit="2-12:00:00").spec.time_limit == "2-12:00:00"
    with pytest.raises(ConfigError, match="time_limit"):
        loaded(tmp_path, time_limit="90m")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node[1-2]", ["node1", "node2"]),
        ("gpu[01-03,7],login", ["gpu01", "gpu02", "gpu03", "gpu7", "login"]),
        ("a1,b[9-10]", ["a1", "b9", "b10"]),
        ("(null)", []),
    ],
)
def test_expand_nodelist(text: str, names: list[str]) -> None:
    assert expand_nodelist(text) == names


def _recorded(case: str) -> tuple[SlurmJob, SlurmJob, str]:
    """(from scontrol, from sacct -c, the .out) of a recorded case."""
    sc = job_from_scontrol(parse_scontrol((RECORDED / f"{case}.scontrol").read_text()))
    header, *rows = (RECORDED / f"{case}.sacct").read_text().splitlines()
    cols = header.split("|")
    # our query's column order: JobID,State,ExitCode,NodeList
    text = "\n".join(
        "|".join(r.split("|")[cols.index(c)] for c in ("JobID", "State", "ExitCode", "NodeList"))
        for r in rows
    )
    sa = job_from_sacct(text, sc.slurm_id)
    assert sa is not None
    return sc, sa, (RECORDED / f"{case}.out").read_text()


@pytest.mark.parametrize(
    ("case", "state", "code", "signal", "nodes"),
    [
        ("hello", "succeeded", 0, None, ["succeeded", "succeeded"]),
        ("exit3", "failed", 3, None, ["succeeded", "failed"]),
        ("ddp-ok", "succeeded", 0, None, ["succeeded", "succeeded"]),
        ("ddp-fail-rank1", "failed", 1, None, ["failed", "failed"]),
        ("ddp-fail-rank1-kill", "failed", 1, None, ["stopped", "failed"]),
        ("scancel", "stopped", 0, 15, ["stopped", "stopped"]),
        ("timeout", "failed", 0, 15, ["failed", "failed"]),
    ],
)
def test_recorded_jobs_read_as_states(
    case: str, state: str, code: int, signal: int | None, nodes: list[str]
) -> None:
    sc, sa, out = _recorded(case)
    assert (sc.state, sc.exit_code, sc.signal, sc.nodes) == (
        state,
        code,
        signal,
        ("node1", "node2"),
    )
    assert (sa.state, sa.nodes) == (state, ("node1", "node2"))  # sacct -c: signal not kept
    got = node_states(sc, 2, task_ends(out), stop_requested=False)
    assert [s for s, _ in got] == nodes
    assert sc.shown_code == (128 + signal if signal else code)
    if case == "scancel":  # stopped by gpuconsole: the same
        assert node_states(sc, 2, task_ends(out), stop_requested=True) == got


def test_a_time_limit_without_task_lines_fails_every_node_with_sigterms_code() -> None:
    text = (BACKEND / "timeout-no-tasks.batch.out").read_text()
    job = SlurmJob("50", "TIMEOUT", "failed", 0, 15, ("node1", "node2"))
    assert task_ends(text) == {}
    assert node_states(job, 2, {}, stop_requested=False) == [("failed", 143)] * 2
    d = diagnose(text)
    assert d is not None and d.kind == "slurm_time_limit"


def test_running_and_pending_nodes_follow_the_job() -> None:
    sc = job_from_scontrol(
        {
            "JobId": "9",
            "JobState": "PENDING",
            "Reason": "Resources",
            "NodeList": "(null)",
            "ExitCode": "0:0",
        }
    )
    assert (sc.state, sc.reason, sc.nodes, sc.exit_code) == ("pending", "Resources", (), None)
    assert node_states(sc, 2, {}, stop_requested=False) == [("pending", None)] * 2


def test_a_failed_task_then_one_srun_terminated() -> None:
    ends = task_ends((BACKEND / "exit3-kill.batch.out").read_text())
    assert (ends[1].code, ends[1].after_terminate, ends[1].order) == (3, False, 0)
    assert (ends[0].how, ends[0].after_terminate) == ("Terminated", True)
    job = SlurmJob("17", "FAILED", "failed", 3, None, ("node1", "node2"))
    assert node_states(job, 2, ends, stop_requested=False) == [("stopped", None), ("failed", 3)]


def test_a_gpuconsole_stop_reads_stopped_though_slurm_says_failed() -> None:
    ends = task_ends((BACKEND / "exit3-kill.batch.out").read_text())
    job = SlurmJob("17", "FAILED", "failed", 3, None, ("node1", "node2"))
    assert [s for s, _ in node_states(job, 2, ends, stop_requested=True)] == ["stopped"] * 2


def test_srun_terminating_the_step_alone_is_the_cancellation_a_failure_caused() -> None:
    """The race: slurmstepd's CANCELLED line missing, srun's own line says it."""
    text = (BACKEND / "fail-rank1-race.batch.out").read_text()
    ends = task_ends(text)
    assert ends[0].code == 1 and not ends[0].after_terminate and ends[1].after_terminate
    d = diagnose(text)
    assert d is not None and d.kind == "exit_code"
    kinds = {c.kind: c.summary for c in d.consequences}
    assert kinds["slurm_cancelled"] == (
        "Slurm step 32.0 was cancelled by srun "
        "(--kill-on-bad-exit after a task failed, or a signal "
        "to srun)"
    )
