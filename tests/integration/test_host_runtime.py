"""``runtime: host`` end to end through the CLI: real sshd hosts a (127.0.0.11) and b
(127.0.0.12), real ``python -m torch.distributed.run`` in the hosts' own Python (no Docker).

Both test hosts are sshd processes of this machine running as root, so the nodes' processes
are this machine's processes: the tests read ``/proc`` here to find them (by
``GPUCONSOLE_JOB_ID=<job id>`` in their environment, and by the process group the node's
supervisor recorded in ``run.json``) and the node folders under
``~/.cache/gpuconsole/jobs/<job id>/`` (root's home, shared by both hosts; the nodes' folder
names differ). The job's python is the venv ``scripts/lib/ensure-slurm`` makes (torch CPU);
``/usr/bin/python3`` of this machine has no torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.integration.conftest import CLI, EXAMPLES, REPO, job_containers, wait_for
from tests.integration.proxies import CuttableProxy, known_hosts_line
from tests.integration.test_jobs import ps_json, the_job

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"
SYSTEM_PYTHON = "/usr/bin/python3"  # this machine's; has no torch (checked in the test)
JOBS = Path.home() / ".cache" / "gpuconsole" / "jobs"
TESTHOSTS = Path("/var/tmp/gpuconsole-testhosts")
TEARDOWN_EXIT = 75  # remote.gang.TEARDOWN_EXIT_CODE, spelled out (the hosts' view)
STEP_RE = re.compile(r"^\[n(\d+) r(\d+)\] step (\d+)/(\d+) loss ")
SUBMITTED_RE = re.compile(r"^submitted (\S+):", re.M)

pytestmark = pytest.mark.skipif(
    not os.access(VENV_PYTHON, os.X_OK),
    reason=f"{VENV_PYTHON} missing: scripts/test makes it (scripts/lib/ensure-slurm)",
)


# -- helpers -------------------------------------------------------------------------------


def host_spec(cli: CLI, name: str, **fields: Any) -> Path:
    """A ``runtime: host`` spec for train_ddp.py on hosts a and b (CPU, 2 processes each)."""
    data: dict[str, Any] = {
        "name": name,
        "runtime": "host",
        "python": VENV_PYTHON,
        "nodes": ["a", "b"],
        "gpus_per_node": 0,
        "nproc_per_node": 2,
        "workdir": str(EXAMPLES),
        "script": "train_ddp.py",
        "args": ["--steps", "4", "--out", str(cli.tmp / "out" / name), "--workers", "0"],
    }
    data.update(fields)
    path = cli.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def unique(prefix: str) -> str:
    """A job name no other run uses (tests of other runs share the hosts)."""
    return f"{prefix}{os.urandom(3).hex()}"


def proc_state(pid: int) -> tuple[str, int] | None:
    """``(state, pgrp)`` of a process from ``/proc/PID/stat``, or ``None`` if it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    f = data[data.rfind(")") + 2 :].split()
    return f[0], int(f[2])


def job_processes(job_id: str) -> list[int]:
    """Live (not zombie) processes of this machine whose environment holds
    ``GPUCONSOLE_JOB_ID=<job_id>``."""
    want = f"GPUCONSOLE_JOB_ID={job_id}".encode()
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            env = Path(f"/proc/{e}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        st = proc_state(int(e))
        if want in env and st is not None and st[0] not in "ZX":
            out.append(int(e))
    return out


def jobs_named(prefix: str) -> list[int]:
    """Live processes whose ``GPUCONSOLE_JOB_ID`` starts with ``prefix``."""
    want = f"GPUCONSOLE_JOB_ID={prefix}".encode()
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            env = Path(f"/proc/{e}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        st = proc_state(int(e))
        if any(v.startswith(want) for v in env) and st is not None and st[0] not in "ZX":
            out.append(int(e))
    return out


def group_processes(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid`` on this machine."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and (st := proc_state(int(e))) is not None:
            if st[1] == pgid and st[0] not in "ZX":
                out.append(int(e))
    return out


def node_dirs(job_id: str) -> list[Path]:
    return sorted((JOBS / job_id).glob(f"gpuconsole-{job_id}-n*"))


def files_holding(folder: Path, needle: bytes) -> list[str]:
    """Files under ``folder`` whose bytes contain ``needle``."""
    hits = []
    for p in folder.rglob("*"):
        try:
            if p.is_file() and needle in p.read_bytes():
                hits.append(str(p))
        except OSError:
            continue
    return hits


class Jobs:
    """The job ids a test made; removed afterwards (``rm --force``, the node folders, and
    any process of the job still alive: those are this test's)."""

    def __init__(self, cli: CLI) -> None:
        self.cli = cli
        self.ids: list[str] = []

    def submitted(self, res: subprocess.CompletedProcess[str], follow: bool) -> str:
        """The job id a ``submit`` printed (stdout without --follow, stderr with it)."""
        if follow:
            m = SUBMITTED_RE.search(res.stderr)
            assert m, res.stderr
            job_id = m.group(1)
        else:
            assert res.returncode == 0, res.stdout + res.stderr
            job_id = res.stdout.strip()
        self.ids.append(job_id)
        return job_id

    def cleanup(self) -> None:
        for job_id in self.ids:
            self.cli.run("rm", "--force", job_id, timeout=120)
            for pid in job_processes(job_id):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree(JOBS / job_id, ignore_errors=True)


@pytest.fixture
def jobs(cli: CLI) -> Iterator[Jobs]:
    j = Jobs(cli)
    try:
        yield j
    finally:
        j.cleanup()


def wait_for_line(cli: CLI, job_id: str, pattern: str, timeout: float = 120) -> list[str]:
    """Poll ``logs`` until a line matches ``pattern``; returns the lines."""
    rx = re.compile(pattern, re.M)

    def seen() -> list[str] | None:
        res = cli.run("logs", job_id)
        return res.stdout.splitlines() if rx.search(res.stdout) else None

    return list(wait_for(seen, timeout=timeout, interval=1.0))


# -- tests ---------------------------------------------------------------------------------


def test_two_node_cpu_example(cli: CLI, jobs: Jobs, engine: docker.DockerClient) -> None:
    """The 2-node CPU example under --follow: every rank's lines, succeeded, no container,
    the node folders; the secret only as ``***`` and in no command line or file."""
    name = unique("hr2n")
    secret = f"hr-secret-{os.urandom(8).hex()}"
    spec = host_spec(
        cli,
        name,
        env={"SECRET": "${HR_SECRET}"},
        args=[
            "--steps",
            "20",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "0",
            "--step-sleep",
            "0.1",
        ],
    )
    env = cli.env()
    env["HR_SECRET"] = secret
    proc = subprocess.Popen(
        cli.argv("submit", str(spec), "--follow"),
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    leaks: list[str] = []  # command lines (and files) holding the secret
    looked: list[str] = []  # running nodes' folders searched for it
    job_seen: list[str] = []

    def scan() -> None:  # the command lines of every process while the job runs
        while proc.poll() is None:
            ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
            leaks.extend(ln for ln in ps.splitlines() if secret in ln)
            if f"--rdzv-id {name}-" in ps:
                job_seen.append("yes")
                # and no file of the running nodes' folders (env.json is gone by now)
                for folder in JOBS.glob(f"{name}-*/gpuconsole-*"):
                    if (folder / "run.json").exists():
                        leaks.extend(files_holding(folder, secret.encode()))
                        looked.append(folder.name)
            time.sleep(0.3)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    scanner.join(10)
    job_id = jobs.submitted(
        subprocess.CompletedProcess(proc.args, proc.returncode, out, err), follow=True
    )
    assert proc.returncode == 0, out + err
    assert job_id.startswith(f"{name}-")
    assert job_seen, "the scan never saw the job's torch.distributed.run running"
    assert {f"gpuconsole-{job_id}-n0", f"gpuconsole-{job_id}-n1"} <= set(looked), looked
    assert leaks == [], leaks
    lines = out.splitlines()
    steps: dict[tuple[int, int], list[int]] = {}
    for ln in lines:
        if m := STEP_RE.match(ln):
            steps.setdefault((int(m.group(1)), int(m.group(2))), []).append(int(m.group(3)))
    # node 0 runs global ranks 0 and 1, node 1 ranks 2 and 3; every step of each, in order
    assert steps == {(n, r): list(range(1, 21)) for n, r in ((0, 0), (0, 1), (1, 2), (1, 3))}
    for n, r in ((0, 0), (0, 1), (1, 2), (1, 3)):
        assert any(ln.startswith(f"[n{n} r{r}] rank {r}/4 ") for ln in lines), r
    assert f"job {job_id} succeeded" in err

    job = the_job(cli, job_id)
    assert (job["state"], job["kind"], job["exit_code"]) == ("succeeded", "train", 0)
    assert [
        (n["node_rank"], n["host"], n["state"], n["exit_code"], n["container_id"])
        for n in job["nodes"]
    ] == [
        (0, "a", "succeeded", 0, f"gpuconsole-{job_id}-n0"),
        (1, "b", "succeeded", 0, f"gpuconsole-{job_id}-n1"),
    ]
    assert job_containers(engine, job_id=job_id) == []  # no Docker container at all

    folders = node_dirs(job_id)
    assert [p.name for p in folders] == [f"gpuconsole-{job_id}-n0", f"gpuconsole-{job_id}-n1"]
    for rank, folder in enumerate(folders):
        labels = json.loads((folder / "labels.json").read_text())
        assert labels["io.gpuconsole.job-id"] == job_id
        assert labels["io.gpuconsole.node-rank"] == str(rank)
        assert json.loads((folder / "exit.json").read_text())["exit_code"] == 0
        assert not (folder / "env.json").exists()
    assert files_holding(JOBS / job_id, secret.encode()) == []

    desc = cli.run("describe", job_id)
    assert desc.returncode == 0, desc.stderr
    assert f"{VENV_PYTHON} -m torch.distributed.run --nnodes 2 --nproc-per-node 2" in desc.stdout
    assert "'SECRET=***'" in desc.stdout
    assert secret not in desc.stdout + desc.stderr


def test_failing_rank_tears_down_the_gang(cli: CLI, jobs: Jobs) -> None:
    """Rank 3 (node 1) fails at step 3 while node 0 could run for 40 s more: the job is
    failed with node 1 rank 3 as the diagnosis, node 0 is stopped by the gang teardown
    within seconds, and no process of the job is left."""
    name = unique("hrgang")
    spec = host_spec(
        cli,
        name,
        args=[
            "--steps",
            "200",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "0",
            "--step-sleep",
            "0.2",
            "--fail-rank",
            "3",
            "--fail-step",
            "3",
        ],
    )
    t0 = time.monotonic()
    res = cli.run("submit", str(spec), "--follow", timeout=300)
    took = time.monotonic() - t0
    job_id = jobs.submitted(res, follow=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert took < 150, took  # without the teardown node 0 would run 200 x 0.2 s
    assert "injected failure on rank 3 at step 3" in res.stderr
    job = the_job(cli, job_id)
    assert (job["state"], job["exit_code"]) == ("failed", 1)
    f = job["failure"]
    assert (f["node"], f["host"], f["rank"], f["exit_code"]) == (1, "b", 3, 1)
    assert "RuntimeError: injected failure on rank 3 at step 3" in f["reason"]
    # the node whose torchrun exits first is the failed one: usually node 1, but node 0's
    # ranks lose their gloo peer at once and, on a busy machine, can exit before node 1's
    # torchrun has stopped its other worker; the other node is torn down either way
    nodes = {n["node_rank"]: n for n in job["nodes"]}
    first = 1 if nodes[1]["state"] == "failed" else 0
    torn = 1 - first
    assert (nodes[first]["state"], nodes[first]["exit_code"]) == ("failed", 1), nodes
    assert nodes[torn]["state"] == "stopped", nodes[torn]
    gang_lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "[gpuconsole-gang]" in ln]
    assert nodes[torn]["exit_code"] == TEARDOWN_EXIT, (nodes[torn], gang_lines)
    n_torn = json.loads((node_dirs(job_id)[torn] / "exit.json").read_text())
    assert n_torn["exit_code"] == TEARDOWN_EXIT

    # node 0 ended within seconds of node 1 (RFC 3339 ns: compare as seconds of the day)
    def secs(ts: str) -> float:
        hms = ts.split("T")[1].rstrip("Z")
        h, m, s = hms.split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)

    gap = secs(nodes[0]["finished_at"]) - secs(nodes[1]["finished_at"])
    assert -5 < gap < 30, (nodes[0]["finished_at"], nodes[1]["finished_at"])
    steps0 = [
        int(m.group(3))
        for ln in res.stdout.splitlines()
        if (m := STEP_RE.match(ln)) and m.group(1) == "0"
    ]
    assert steps0 and max(steps0) < 100, max(steps0, default=0)
    assert job_processes(job_id) == []


NUMBERS = """\
import os, sys, time
rank = int(os.environ["RANK"])
for i in range(int(sys.argv[1])):
    print(f"num {rank} {i}", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def proxied_profile(cli: CLI, proxy: CuttableProxy) -> Path:
    """A profile whose only host ``a`` is host a's sshd reached through ``proxy``."""
    kh = cli.tmp / "known_hosts"
    kh.write_text(known_hosts_line(proxy))
    data = yaml.safe_load(cli.profile.read_text())
    data["hosts"] = {
        "a": {
            "hostname": "127.0.0.1",
            "port": proxy.port,
            "user": "root",
            "identity_file": str(TESTHOSTS / "id_ed25519"),
        }
    }
    data["known_hosts"] = str(kh)
    path = cli.tmp / "proxied.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_follow_survives_a_cut_ssh_connection(cli: CLI, jobs: Jobs) -> None:
    """Both of the follower's SSH connections are cut twice (a TCP proxy in front of host
    a's sshd, owned by this test) while the job prints numbers: every number of every rank
    arrives exactly once, in order, and the job runs on."""
    n = 300
    work = cli.tmp / "numbers"
    work.mkdir()
    (work / "count_up.py").write_text(NUMBERS)
    name = unique("hrcut")
    spec = host_spec(
        cli, name, nodes=["a"], workdir=str(work), script="count_up.py", args=[str(n), "0.03"]
    )
    proxy = CuttableProxy(("127.0.0.11", 22))
    try:
        profile = proxied_profile(cli, proxy)
        sub = cli.run("submit", str(spec), profile=profile)
        job_id = jobs.submitted(sub, follow=False)
        proc = subprocess.Popen(
            cli.argv("logs", job_id, "--follow", profile=profile),
            env=cli.env(),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        got: list[str] = []

        def reader() -> None:
            assert proc.stdout is not None
            for ln in proc.stdout:
                got.append(ln.rstrip("\n"))

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        cuts = 0
        try:
            for k in (1, 2):
                wait_for(
                    lambda k=k: sum(" num " in f" {ln}" for ln in got) >= k * n // 2, timeout=120
                )
                cuts += proxy.cut()
                time.sleep(1.0)
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        t.join(timeout=10)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        proxy.close()
    assert proc.returncode == 0, err
    assert cuts >= 2
    assert "Traceback" not in err
    assert err.count("n0 on a: log stream lost (") == 2, err
    assert err.count("n0 on a: log stream resumed") == 2, err
    nums: dict[int, list[int]] = {}
    for ln in got:
        if m := re.fullmatch(r"\[n0 r(\d)\] num (\d) (\d+)", ln):
            assert m.group(1) == m.group(2), ln
            nums.setdefault(int(m.group(1)), []).append(int(m.group(3)))
    assert nums == {0: list(range(n)), 1: list(range(n))}
    # the cut came while numbers were still printed (not after the job's end)
    assert the_job(cli, job_id)["state"] == "succeeded"


def test_ps_recovers_a_host_job_after_the_state_dir_is_lost_then_stop(cli: CLI, jobs: Jobs) -> None:
    name = unique("hrlost")
    spec = host_spec(
        cli,
        name,
        args=[
            "--steps",
            "100000",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "0",
            "--step-sleep",
            "0.1",
        ],
    )
    job_id = jobs.submitted(cli.run("submit", str(spec)), follow=False)
    wait_for_line(cli, job_id, r"^\[n1 r3\] step 2/")
    shutil.rmtree(cli.state_dir)
    job = the_job(cli, job_id)
    assert (job["name"], job["state"]) == (name, "running")
    assert [(n["node_rank"], n["host"], n["state"], n["container_id"]) for n in job["nodes"]] == [
        (0, "a", "running", f"gpuconsole-{job_id}-n0"),
        (1, "b", "running", f"gpuconsole-{job_id}-n1"),
    ]
    desc = cli.run("describe", job_id)  # the host runtime's command, read back from the hosts
    assert desc.returncode == 0, desc.stderr
    assert f"{VENV_PYTHON} -m torch.distributed.run" in desc.stdout
    assert "docker run" not in desc.stdout
    assert len(job_processes(job_id)) >= 6  # 2 x (torchrun + 2 ranks) at least
    stop = cli.run("stop", job_id, "--grace", "10", timeout=120)
    assert stop.returncode == 0, stop.stderr
    job = the_job(cli, job_id)
    assert job["state"] == "stopped", job
    assert job_processes(job_id) == []


def test_stop_leaves_no_process_of_the_job(cli: CLI, jobs: Jobs) -> None:
    """A long 2-node job with 2 DataLoader workers per rank: after ``stop`` nothing with
    the job's id in its environment and nothing of either node's process group is left."""
    name = unique("hrstop")
    spec = host_spec(
        cli,
        name,
        args=[
            "--steps",
            "100000",
            "--out",
            str(cli.tmp / "out"),
            "--workers",
            "2",
            "--step-sleep",
            "0.1",
        ],
    )
    job_id = jobs.submitted(cli.run("submit", str(spec)), follow=False)
    wait_for_line(cli, job_id, r"^\[n1 r3\] step 3/")
    wait_for_line(cli, job_id, r"^\[n0 r0\] step 3/")
    runs = [json.loads((d / "run.json").read_text()) for d in node_dirs(job_id)]
    assert len(runs) == 2
    pgids = [int(r["pgid"]) for r in runs]
    for pg in pgids:
        assert group_processes(pg), pg
    before = job_processes(job_id)
    # the name is taken while the job runs on the host runtime
    again = cli.run("submit", str(spec))
    assert again.returncode == 1, again.stdout + again.stderr
    assert job_id in again.stderr, again.stderr
    assert [j["id"] for j in ps_json(cli) if j["name"] == name] == [job_id]
    # per node: torchrun, 2 ranks, 2 workers each; plus the gang supervisor
    assert len(before) >= 2 * (1 + 2 + 4), len(before)
    t0 = time.monotonic()
    stop = cli.run("stop", job_id, "--grace", "10", timeout=120)
    took = time.monotonic() - t0
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert took < 60, took
    job = the_job(cli, job_id)
    assert job["state"] == "stopped", job
    assert [n["state"] for n in job["nodes"]] == ["stopped", "stopped"]
    assert job_processes(job_id) == []
    assert [group_processes(pg) for pg in pgids] == [[], []]
    # EXIT: each node's is what it recorded on its host (exit.json: torchrun's own status
    # after the SIGTERM, 128+N had a signal ended it), as Docker's State.ExitCode would be;
    # the job's, stopped by the user, is 143 (128 + SIGTERM), as `submit --follow` exits
    recorded = [json.loads((d / "exit.json").read_text())["exit_code"] for d in node_dirs(job_id)]
    assert [n["exit_code"] for n in job["nodes"]] == recorded, job
    assert job["exit_code"] == 143, job


HOSTILE_ARGS = [
    "a b",
    "'q'",
    '"dq"',
    "$HOME",
    "`id`",
    "a;b",
    "x\ny",
    "ünï",
    "",
    "--",
    "-c",
    "${HOME}",
    "$(id)",
    "\\",
    " lead",
    "tab\there",
]
HOSTILE_ENV = "a b 'q' \"dq\" $HOME `id` a;b x\ny ünï $(id) \\ \t|&<>*?"

ECHO = """\
import json, os, sys
print("argv " + json.dumps(sys.argv[1:]), flush=True)
print("env " + json.dumps(os.environ["HOSTILE"]), flush=True)
print("raw " + json.dumps(sys.argv[1:], ensure_ascii=False), flush=True)
"""


def test_hostile_args_and_env_arrive_byte_identical(cli: CLI, jobs: Jobs) -> None:
    work = cli.tmp / "echo"
    work.mkdir()
    (work / "echo.py").write_text(ECHO)
    name = unique("hrhost")
    spec = host_spec(
        cli,
        name,
        nodes=["a"],
        nproc_per_node=1,
        workdir=str(work),
        script="echo.py",
        args=HOSTILE_ARGS,
        env={"HOSTILE": HOSTILE_ENV},
    )
    res = cli.run("submit", str(spec), "--follow", timeout=240)
    job_id = jobs.submitted(res, follow=True)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    argv = [json.loads(ln.split(" argv ", 1)[1]) for ln in lines if ln.startswith("[n0 r0] argv ")]
    env = [json.loads(ln.split(" env ", 1)[1]) for ln in lines if ln.startswith("[n0 r0] env ")]
    assert argv == [HOSTILE_ARGS]
    assert env == [HOSTILE_ENV]
    # the non-ASCII bytes as the script wrote them, through the node's log and the console
    raw = [ln for ln in lines if ln.startswith("[n0 r0] raw ")]
    assert raw == ["[n0 r0] raw " + json.dumps(HOSTILE_ARGS, ensure_ascii=False)]
    assert the_job(cli, job_id)["state"] == "succeeded"


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


def assert_nothing_left(cli: CLI, name: str) -> None:
    """No job of that name: no node folder, no process, nothing in ``ps``."""
    assert sorted(p.name for p in JOBS.glob(f"{name}-*")) == []
    assert jobs_named(f"{name}-") == []
    assert [j for j in ps_json(cli) if j["name"] == name] == []


def test_bad_python_and_docker_fields_are_refused(cli: CLI) -> None:
    assert (
        subprocess.run([SYSTEM_PYTHON, "-c", "import torch"], capture_output=True).returncode == 1
    ), f"{SYSTEM_PYTHON} has torch: the no-torch case needs a python without it"

    name = unique("hrnopy")
    res = cli.run("submit", str(host_spec(cli, name, nodes=["a"], python="/nonexistent/python")))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: ") and "'/nonexistent/python'" in lines[0]
    assert " on a " in lines[0] or lines[0].startswith("error: host a"), lines[0]
    assert lines[1].startswith("  fix: ") and "python:" in lines[1], lines[1]
    assert_nothing_left(cli, name)

    name = unique("hrnotorch")
    res = cli.run("submit", str(host_spec(cli, name, nodes=["a", "b"], python=SYSTEM_PYTHON)))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 2, lines
    assert f"python '{SYSTEM_PYTHON}' cannot import torch" in lines[0], lines[0]
    assert "No module named 'torch'" in lines[0]
    assert re.search(r"\bhost [ab]\b|\bon [ab]\b|^error: [ab]: ", lines[0]), lines[0]
    assert lines[1].startswith("  fix: ") and f"{SYSTEM_PYTHON} -m pip install torch" in lines[1], (
        lines[1]
    )
    assert_nothing_left(cli, name)

    for field, value in (
        ("image", "gpuconsole/torch:2.13.0-cpu"),
        ("mounts", [f"{cli.tmp}:/data"]),
    ):
        name = unique("hrfield")
        res = cli.run("submit", str(host_spec(cli, name, nodes=["a"], **{field: value})))
        assert res.returncode == 2, res.stdout + res.stderr
        lines = error_lines(res.stderr)
        assert lines[0].startswith("error: ") and field in lines[0], lines
        assert "runtime" in lines[0], lines
        assert_nothing_left(cli, name)
