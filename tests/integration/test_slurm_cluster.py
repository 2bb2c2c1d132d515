"""The real single-machine Slurm cluster of ``scripts/lib/ensure-slurm`` works as the Slurm
backend will need it: nodes up in ``sinfo``, a batch job with one ``srun`` task per node runs
on every node, a failing task's exit code reaches ``scontrol show job`` and ``sacct``, and the
CPU example ``scripts/examples/train_ddp.py`` runs under srun + torchrun on both nodes
(``scripts/slurm/torchrun.sbatch``), also with a rank failing on purpose.

Slurm is Debian bookworm's slurm-wlm 22.05; the cluster (``gpuconsole-test``, partition
``debug``, nodes ``node1`` and ``node2``, each its own slurmd on this machine) is described
in ``/var/tmp/gpuconsole-slurm/env``, which ``scripts/test`` writes by running
``scripts/lib/ensure-slurm``. There is no accounting daemon: ``sacct -c`` reads the job
completion file (``JobCompType=jobcomp/filetxt``), and finished jobs stay in
``scontrol show job`` for ``MinJobAge`` (600 s).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ENV_FILE = Path(os.environ.get("GPUCONSOLE_SLURM_ENV", "/var/tmp/gpuconsole-slurm/env"))
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
REPO = Path(__file__).resolve().parents[2]
TORCHRUN_SBATCH = REPO / "scripts" / "slurm" / "torchrun.sbatch"
JOB_WAIT_S = 120.0  # seconds a tiny job may take from submission to a terminal state


@dataclass(frozen=True)
class Cluster:
    """The cluster as ``ensure-slurm`` exported it, and a way to run its commands."""

    env: dict[str, str]
    nodes: list[str]
    partition: str
    venv: Path

    def run(self, *argv: str, timeout: float = 30) -> str:
        """Run a Slurm client command with the cluster's environment; its stdout."""
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{shlex.join(argv)}: rc {done.returncode}: {done.stderr}"
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (the fields without spaces in their values)."""
        line = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", line))

    def wait(self, job_id: str) -> dict[str, str]:
        """Poll until the job is in a terminal state; its ``scontrol show job`` fields."""
        deadline = time.monotonic() + JOB_WAIT_S
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in TERMINAL:
                return fields
            assert time.monotonic() < deadline, f"job {job_id} not done: {fields}"
            time.sleep(0.5)

    def sacct(self, job_id: str) -> tuple[str, str]:
        """(State, ExitCode) of the job from the job completion file, via ``sacct -c``.

        The completion record is written when the job ends, a moment after scontrol
        shows the terminal state, so poll for it briefly."""
        deadline = time.monotonic() + 30.0
        while True:
            out = self.run("sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode")
            rows = [r.split("|") for r in out.splitlines() if r.split("|")[0] == job_id]
            if rows:
                return rows[-1][1], rows[-1][2]
            assert time.monotonic() < deadline, f"job {job_id} not in sacct -c: {out!r}"
            time.sleep(0.5)


def _read_env(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of the env file (values as written, quotes removed)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"export (\w+)=(.*)", line.strip())
        if m:
            env[m.group(1)] = " ".join(shlex.split(m.group(2)))
    return env


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not ENV_FILE.exists():
        pytest.skip(
            f"no Slurm test cluster: {ENV_FILE} missing "
            "(scripts/test sets it up: scripts/lib/ensure-slurm)"
        )
    exported = _read_env(ENV_FILE)
    yield Cluster(
        env={**os.environ, **exported},
        nodes=exported["GPUCONSOLE_SLURM_NODES"].split(),
        partition=exported["GPUCONSOLE_SLURM_PARTITION"],
        venv=Path(exported["GPUCONSOLE_SLURM_VENV"]),
    )


def _submit(cluster: Cluster, out: Path, nodes: int, wrap: str) -> str:
    """sbatch a --wrap job on ``nodes`` nodes, one task per node; its job id."""
    job_id = cluster.run(
        "sbatch",
        "--parsable",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--partition={cluster.partition}",
        f"--output={out}",
        "--job-name=gpuconsole-test",
        f"--wrap={wrap}",
    ).strip()
    assert job_id.isdigit(), job_id
    return job_id


def test_nodes_up(cluster: Cluster) -> None:
    rows = [
        line.split() for line in cluster.run("sinfo", "-h", "-N", "-o", "%N %P %T").splitlines()
    ]
    states = {node: state for node, part, state in rows if part.rstrip("*") == cluster.partition}
    assert sorted(states) == sorted(cluster.nodes)
    assert set(states.values()) <= {"idle", "mixed", "allocated", "completing"}, states


def test_one_task_per_node(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "hello.out"
    n = len(cluster.nodes)
    job_id = _submit(
        cluster,
        out,
        n,
        "srun bash -c 'echo task $SLURM_PROCID nodeid "
        "$SLURM_NODEID node $SLURMD_NODENAME list $SLURM_JOB_NODELIST'",
    )
    fields = cluster.wait(job_id)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0")
    lines = sorted(out.read_text().splitlines())
    nodelist = fields["NodeList"]
    # srun gives task i to the i-th node of the allocation, in node order.
    assert lines == [
        f"task {i} nodeid {i} node {node} list {nodelist}"
        for i, node in enumerate(sorted(cluster.nodes))
    ]
    assert cluster.sacct(job_id) == ("COMPLETED", "0:0")


def test_failing_task(cluster: Cluster, tmp_path: Path) -> None:
    """The last task exits 3, the others 0: srun reports it and exits 3, so the batch
    script does, and Slurm records the job as FAILED with exit code 3."""
    out = tmp_path / "fail.out"
    n = len(cluster.nodes)
    last = n - 1
    task = f"echo task $SLURM_PROCID; exit $(( SLURM_PROCID == {last} ? 3 : 0 ))"
    job_id = _submit(cluster, out, n, f"srun bash -c '{task}'")
    fields = cluster.wait(job_id)
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "3:0")
    text = out.read_text()
    node = sorted(cluster.nodes)[last]
    assert f"srun: error: {node}: task {last}: Exited with exit code 3" in text, text
    assert sorted(line for line in text.splitlines() if line.startswith("task ")) == [
        f"task {i}" for i in range(n)
    ]
    assert cluster.sacct(job_id) == ("FAILED", "3:0")


def _torchrun(cluster: Cluster, tmp_path: Path, *args: str) -> tuple[str, dict[str, str]]:
    """train_ddp.py (6 steps, no loader workers) on all nodes, one torchrun per node; the
    job's output text and its ``scontrol show job`` fields once it ended."""
    out = tmp_path / "ddp.out"
    job_id = cluster.run(
        "sbatch",
        "--parsable",
        f"--nodes={len(cluster.nodes)}",
        "--time=5",
        f"--partition={cluster.partition}",
        f"--output={out}",
        f"--export=ALL,PYTHON_VENV={cluster.venv},GPUCONSOLE_REPO={REPO}",
        str(TORCHRUN_SBATCH),
        "--steps",
        "6",
        "--workers",
        "0",
        "--ckpt-every",
        "0",
        "--out",
        str(tmp_path / "ckpt"),
        *args,
    ).strip()
    return job_id, cluster.wait(job_id) | {"_out": out.read_text()}


def test_torchrun_example(cluster: Cluster, tmp_path: Path) -> None:
    job_id, fields = _torchrun(cluster, tmp_path)
    text = fields["_out"]
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), text
    n = len(cluster.nodes)
    for rank in range(n):
        assert f"rank {rank}/{n} local_rank 0 node_rank {rank} backend gloo" in text, text
    assert len(re.findall(r"^done steps 6 final_loss \d+\.\d+$", text, re.M)) == n, text
    assert (tmp_path / "ckpt" / "checkpoint.pt").is_file()
    assert cluster.sacct(job_id) == ("COMPLETED", "0:0")


def test_torchrun_failing_rank(cluster: Cluster, tmp_path: Path) -> None:
    """Rank 1 (on the second node) raises at step 3: its torchrun exits 1, srun says so;
    rank 0 loses its gloo peer and fails too; the job is FAILED with exit code 1."""
    job_id, fields = _torchrun(cluster, tmp_path, "--fail-rank", "1", "--fail-step", "3")
    text = fields["_out"]
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), text
    second, first = sorted(cluster.nodes)[1], sorted(cluster.nodes)[0]
    assert "RuntimeError: injected failure on rank 1 at step 3" in text
    assert f"srun: error: {second}: task 1: Exited with exit code 1" in text, text
    assert re.search(rf"^srun: error: {first}: task 0: Exited with exit code \d+$", text, re.M)
    assert "done steps" not in text
    assert cluster.sacct(job_id) == ("FAILED", "1:0")
