"""``gpuconsole stacks`` on the real test hosts: a 2-node gloo job (2 ranks a node) whose
rank 1 stops before a collective (scripts/examples/stuck_rank.py: it sleeps in
``load_next_shard`` at step 3) while ranks 0, 2 and 3 wait in ``all_reduce``, run in Docker
containers and in the hosts' own Python (``runtime: host``); and the one-line errors of a
job that does not run, a job that does not exist and a host that does not answer."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.integration.conftest import CLI, EXAMPLES, job_containers
from tests.integration.proxies import CuttableProxy
from tests.integration.test_slurm_backend import slurm_cli  # noqa: F401  (the fixture)
from tests.integration.test_slurm_backend import spec as slurm_spec

VENV_PYTHON = "/var/tmp/gpuconsole-slurm/venv/bin/python"  # has torch (scripts/test makes it)


def _line(marker: str) -> int:
    """The line of scripts/examples/stuck_rank.py that holds ``marker``."""
    lines = (EXAMPLES / "stuck_rank.py").read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if marker in text)


#: the lines py-spy names: the stuck rank's sleep, its call, the others' all_reduce, main()
SLEEP, CALL = _line("# the odd one out"), _line("load_next_shard(hold)")
REDUCE, MAIN = _line("dist.all_reduce(t)"), _line("    main()")
CAUSE = (
    "likely cause: rank 1 is not in the collective (all_reduce) that ranks 0, 2-3 wait in: "
    f"in load_next_shard (stuck_rank.py:{SLEEP}) <- train (stuck_rank.py:{CALL}) "
    f"<- stuck_rank.py:{MAIN}"
)


def stuck_spec(cli: CLI, name: str, **fields: Any) -> Path:
    data: dict[str, Any] = {
        "name": name,
        "image": "gpuconsole/torch:2.13.0-cpu",
        "nodes": ["a", "b"],
        "gpus_per_node": 0,
        "nproc_per_node": 2,
        "workdir": str(EXAMPLES),
        "script": "stuck_rank.py",
        "args": ["--stuck-rank", "1", "--stuck-step", "3", "--hold", "300"],
    }
    data.update(fields)
    path = cli.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_stuck(cli: CLI, job_id: str, timeout: float = 180) -> None:
    """Until every rank has printed step 0 (rank 1 then stops at step 3, before its
    all_reduce; the others block in it)."""
    deadline = time.monotonic() + timeout
    while True:
        r = cli.run("logs", job_id)
        ranks = set(re.findall(r"^\[n\d r(\d)\] step 0 sum 4$", r.stdout, re.M))
        if ranks == {"0", "1", "2", "3"}:
            time.sleep(1.0)  # step 3 is 3 x 50 ms later
            return
        assert time.monotonic() < deadline, f"the ranks never all started:\n{r.stdout}{r.stderr}"
        time.sleep(1.0)


#: stuck_spec's args that make every rank write its Flight Recorder dump 4 s after start,
#: as the NCCL watchdog does on a timeout (gloo has no dump pipe)
FR_ARGS = ["--fr-dump-after", "4"]


def fr_trace_said(stdout: str, where: str, *, earlier: bool = True) -> None:
    """PyTorch's analyser, run where the regex ``where`` says (the node of rank 0, which
    torchrun's rendezvous may put on either host), named rank 1 as the one that
    never joined the collective ranks 0, 2-3 wait in, at the line the others called it
    from."""
    assert re.search(
        rf"^  PyTorch's fr_trace \({where}\) over the dumps of ranks 0-3:\n"
        r"^    rank 1 never joined collective \d+ of process group 0:default_pg "
        r"\(all_reduce, scheduled\), which ranks 0, 2-3 entered; "
        rf"called at train \(stuck_rank\.py:{REDUCE}\)$",
        stdout,
        re.M,
    ), stdout
    if not earlier:  # read from the nodes' files after the job ended
        return
    assert re.search(
        r"^  ranks 0-3: no dump pipe, so the dump read is one written before, \d+ s old "
        r"\(by the NCCL watchdog on a timeout, or the job\)$",
        stdout,
        re.M,
    ), stdout


def check_stacks(cli: CLI, job_id: str, fr_where: str | None = None) -> dict[str, Any]:
    """``stacks`` names rank 1 and groups the rest in all_reduce; with ``fr_where`` (a
    regex), the ranks wrote Flight Recorder dumps (:data:`FR_ARGS`) that PyTorch's analyser
    read there."""
    if fr_where is not None:
        time.sleep(5.0)  # wait_stuck saw every rank past its start: the dumps are written
    r = cli.run("stacks", job_id)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"job {job_id}: 4 ranks on 2 nodes, taken "), r.stdout
    assert CAUSE in lines, r.stdout
    assert re.search(
        rf"^odd one out: rank 1: in load_next_shard \(stuck_rank\.py:{SLEEP}\)", r.stdout, re.M
    )
    assert re.search(
        rf"^ranks 0, 2-3 \(3\): in all_reduce <- train \(stuck_rank\.py:{REDUCE}\) "
        rf"<- stuck_rank\.py:{MAIN}",
        r.stdout,
        re.M,
    ), r.stdout
    assert re.search(
        r"^  \[n\d r0\] \S+ pid \d+, \[n\d r2\] \S+ pid \d+, \[n\d r3\] \S+ pid \d+$",
        r.stdout,
        re.M,
    )
    assert re.search(
        r"^    all_reduce \(torch/distributed/distributed_c10d\.py:\d+\)$", r.stdout, re.M
    )
    assert "torchrun agents:" in r.stdout and "\nnot read:" not in r.stdout
    # gloo has no Flight Recorder dump pipe (PyTorch makes one for NCCL groups): said once
    if fr_where is not None:
        fr_trace_said(r.stdout, fr_where)
    else:
        assert re.search(
            r"^Flight Recorder \(each rank's last collectives, PyTorch's ring buffer\):\n"
            r"  not read: no dump pipe /\S+/gpuconsole_fr_pipe_\d\.pipe \(PyTorch makes it for "
            r"NCCL process groups only\)$",
            r.stdout,
            re.M,
        ), r.stdout
    j = cli.run("stacks", job_id, "--json")
    assert j.returncode == 0, j.stderr
    data: dict[str, Any] = json.loads(j.stdout)
    assert data["analysis"]["odd"] == [[1]]
    assert data["analysis"]["groups"][-1]["ranks"] == [0, 2, 3]
    assert data["analysis"]["groups"][-1]["collective"] == "all_reduce"
    assert data["analysis"]["partial"] is False
    return data


def test_docker_job_names_the_stuck_rank_and_keeps_its_containers_capless(
    cli: CLI, engine: docker.DockerClient
) -> None:
    """Host b is reached through a TCP proxy, closed at the end: a host that went down."""
    proxy = CuttableProxy(("127.0.0.12", 22))
    cli = proxied_b(cli, proxy)
    name = f"stk-{os.urandom(3).hex()}"
    args = ["--stuck-rank", "1", "--stuck-step", "3", "--hold", "300", *FR_ARGS]
    r = cli.run("submit", str(stuck_spec(cli, name, args=args)))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    try:
        wait_stuck(cli, job_id)
        data = check_stacks(cli, job_id, fr_where=r"on [ab], in the job's image")
        # the sidecars read the containers' own PID namespaces: pids are the containers'
        members = data["analysis"]["groups"][-1]["members"]
        assert {(m["node"], m["host"]) for m in members} == {(0, "a"), (1, "b")}
        # one rank, one node
        one = cli.run("stacks", job_id, "--rank", "1")
        assert one.returncode == 0, one.stdout + one.stderr
        assert re.search(
            rf"^rank 1: in load_next_shard \(stuck_rank\.py:{SLEEP}\)", one.stdout, re.M
        )
        assert "ranks 0, 2-3" not in one.stdout
        node1 = cli.run("stacks", job_id, "--node", "1")
        assert node1.returncode == 0, node1.stdout + node1.stderr
        assert re.search(r"^ranks 2-3 \(2\): in all_reduce", node1.stdout, re.M), node1.stdout
        bad = cli.run("stacks", job_id, "--node", "7")
        assert bad.returncode == 2 and "error: --node 7: job " in bad.stderr, bad.stderr
        bad = cli.run("stacks", job_id, "--rank", "99")
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert f"error: --rank 99: job {job_id} has ranks 0-3" in bad.stderr, bad.stderr
        # the job containers keep --cap-drop ALL and gain nothing; no sidecar is left
        for c in job_containers(engine, job_id=job_id):
            hc = c.attrs["HostConfig"]
            assert hc["CapDrop"] == ["ALL"] and not hc.get("CapAdd"), hc
            assert not hc.get("Privileged")
        for kind in ("stacks", "fr-trace"):
            label = f"io.gpuconsole.kind={kind}"
            assert engine.containers.list(all=True, filters={"label": label}) == []
        # describe shows the last capture
        d = cli.run("describe", job_id)
        assert d.returncode == 0, d.stderr
        assert "last stacks (" in d.stdout and CAUSE.removeprefix("likely cause: ") in d.stdout
        # a host that does not answer: its node says why, the other node is still read
        proxy.close()
        part = cli.run("stacks", job_id)
        assert part.returncode == 3, part.stdout + part.stderr
        assert re.search(r"^  node 1 \(b\): host b could not be reached: ", part.stdout, re.M), (
            part.stdout
        )
        assert re.search(r"^odd one out: rank 1: in load_next_shard", part.stdout, re.M)
        assert "ranks 2-3 of 4 are on no node that was read" in part.stdout
    finally:
        proxy.close()
        # the job's own profile (the one it was submitted with) reaches b directly again
        cli.profile.write_text(cli.profile.with_name("direct.yaml").read_text())
        stop = cli.run("stop", job_id, "--grace", "1")
        assert stop.returncode == 0, stop.stdout + stop.stderr
    # a job that no longer runs has no stacks, but its ranks' dumps are still read, from
    # the exited containers, by PyTorch's analyser in the job's image: exit 3 (partial)
    done = cli.run("stacks", job_id)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith(
        f"job {job_id}: no rank runs; read the Flight Recorder dumps its ranks left, "
    ), done.stdout
    fr_trace_said(done.stdout, r"on [ab], in the job's image", earlier=False)
    assert re.search(r"^  node 0 \(a\): not running \(stopped\)$", done.stdout, re.M)
    assert "Traceback" not in done.stderr
    for kind in ("stacks", "fr-trace"):
        label = f"io.gpuconsole.kind={kind}"
        assert engine.containers.list(all=True, filters={"label": label}) == []
    # one that never existed: one error line, exit 1
    missing = cli.run("stacks", "no-such-job-0000")
    assert missing.returncode == 1 and "error: no job 'no-such-job-0000'" in missing.stderr


def proxied_b(cli: CLI, proxy: CuttableProxy) -> CLI:
    """A CLI whose profile reaches host b through ``proxy`` (its ``address:`` stays b's, as
    the other node reaches it); ``direct.yaml`` beside it is the same profile without."""
    data = yaml.safe_load(cli.profile.read_text())
    (cli.tmp / "direct.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    kh = Path(data["known_hosts"]).read_text()
    b_key = next(ln.split(None, 1)[1] for ln in kh.splitlines() if ln.startswith("127.0.0.12 "))
    known = cli.tmp / "known_hosts"
    known.write_text(kh + f"[127.0.0.1]:{proxy.port} {b_key}\n")
    data["known_hosts"] = str(known)
    data["hosts"]["b"] = {
        **data["hosts"]["b"],
        "hostname": "127.0.0.1",
        "port": proxy.port,
        "address": "127.0.0.12",
    }
    path = cli.tmp / "b-proxied.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return CLI(path, cli.state_dir, cli.tmp)


@pytest.mark.skipif(not os.access(VENV_PYTHON, os.X_OK), reason=f"{VENV_PYTHON} missing")
def test_host_runtime_job_names_the_stuck_rank(cli: CLI) -> None:
    name = f"stkh-{os.urandom(3).hex()}"
    spec = stuck_spec(
        cli,
        name,
        runtime="host",
        python=VENV_PYTHON,
        args=["--stuck-rank", "1", "--stuck-step", "3", "--hold", "300", *FR_ARGS],
    )
    data = yaml.safe_load(spec.read_text())
    del data["image"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    r = cli.run("submit", str(spec))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    try:
        wait_stuck(cli, job_id)
        data = check_stacks(cli, job_id, fr_where=r"on [ab], with " + re.escape(VENV_PYTHON))
        # read on the host: the pids are the host's, and they are the job's processes
        for m in data["analysis"]["groups"][-1]["members"]:
            environ = Path(f"/proc/{m['pid']}/environ").read_bytes()
            assert f"RANK={m['rank']}".encode() in environ.split(b"\0")
    finally:
        cli.run("stop", job_id, "--grace", "1")
    # ended: the dumps are read from the nodes' folders, the analyser runs with the spec's
    # python
    done = cli.run("stacks", job_id)
    assert done.returncode == 3, done.stdout + done.stderr
    fr_trace_said(done.stdout, r"on [ab], with " + re.escape(VENV_PYTHON), earlier=False)


def test_slurm_job_names_the_stuck_rank(slurm_cli: CLI) -> None:  # noqa: F811
    """The same job as a Slurm batch job on the test cluster (2 nodes x 2 ranks): each node
    read by ``srun --overlap`` inside the job's allocation."""
    name = f"stks-{os.urandom(3).hex()}"
    spec = slurm_spec(
        slurm_cli,
        name,
        nproc_per_node=2,
        script="stuck_rank.py",
        args=["--stuck-rank", "1", "--stuck-step", "3", "--hold", "300", *FR_ARGS],
    )
    r = slurm_cli.run("submit", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = r.stdout.strip()
    try:
        wait_stuck(slurm_cli, job_id)
        # the analyser runs on the node of rank 0, whichever torchrun's rendezvous made it
        data = check_stacks(slurm_cli, job_id, fr_where=r"on node[12] \(Slurm job \d+\), with /\S+")
        assert {m["host"] for m in data["analysis"]["groups"][-1]["members"]} == {"node1", "node2"}
    finally:
        slurm_cli.run("stop", job_id, "--grace", "1")
    # a job that no longer runs (its allocation is gone: the analyser has nowhere to run):
    # one error line, exit 1
    done = slurm_cli.run("stacks", job_id)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: job {job_id} is not running (" in done.stderr
    assert "gpuconsole describe` shows its last stacks" in done.stderr
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
