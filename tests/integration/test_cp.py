"""`gpuconsole cp` against real jobs over SSH: files and folders out of an exited job's
container (its /out mount and its image), into a running node's container (read back with
`exec`), and the errors people hit."""

from __future__ import annotations

import filecmp
import subprocess
import uuid
from pathlib import Path

from tests.integration.conftest import CLI, job_containers


def _tree(root: Path) -> dict[str, bytes | None]:
    """Relative path -> content (None for folders) of everything under ``root``."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def test_cp_out_of_an_exited_job(cli: CLI, engine: object, tmp_path: Path) -> None:
    name = f"cpout-{uuid.uuid4().hex[:4]}"
    res = cli.run(
        "submit",
        str(cli.spec(name, args=["--steps", "4", "--out", "/out", "--workers", "0"])),
        "--follow",
    )
    assert res.returncode == 0, res.stderr
    job_id = res.stderr.split("submitted ", 1)[1].split(":", 1)[0]
    host_out = tmp_path / "out" / name  # the job's /out mount, as the host sees it
    assert (host_out / "checkpoint.pt").is_file()

    # one file, renamed; the container has exited (not removed)
    res = cli.run("cp", f"{job_id}:/out/checkpoint.pt", str(tmp_path / "ckpt.pt"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "ckpt.pt").read_bytes() == (host_out / "checkpoint.pt").read_bytes()
    assert "copied 1 file(s)" in res.stderr and f"to {tmp_path / 'ckpt.pt'}" in res.stderr
    assert (host_out / "checkpoint.pt").stat().st_size > 1000

    # a folder into an existing folder keeps its name; by job name and relative path
    (tmp_path / "got").mkdir()
    res = cli.run("cp", f"{name}:out", str(tmp_path / "got"))
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path / "got" / "out") == _tree(host_out)

    # a file of the image, through its link, the same bytes as `docker cp -L`
    (c,) = job_containers(engine, job_id=job_id)  # type: ignore[arg-type]
    assert c.status == "exited"
    direct = tmp_path / "direct-os-release"
    subprocess.run(["docker", "cp", "-L", f"{c.id}:/etc/os-release", str(direct)], check=True)
    res = cli.run("cp", f"{job_id}:/etc/os-release", str(tmp_path) + "/")
    assert res.returncode == 0, res.stderr
    assert filecmp.cmp(tmp_path / "os-release", direct, shallow=False)
    assert b"ID=" in direct.read_bytes()

    # errors: exit 2 for bad input, naming the path or flag; 1 for an unknown job
    res = cli.run("cp", f"{job_id}:/out/nope.pt", str(tmp_path))
    assert res.returncode == 2
    assert f"job {job_id} node 0 (container on a): path /out/nope.pt does not exist" in res.stderr
    res = cli.run("cp", "--node", "3", f"{job_id}:/out", str(tmp_path))
    assert res.returncode == 2
    assert f"error: --node 3: job {job_id} has no node 3" in res.stderr
    res = cli.run("cp", f"{job_id}:/out/checkpoint.pt", str(tmp_path / "missing" / "x.pt"))
    assert res.returncode == 2 and f"{tmp_path / 'missing'} is not an existing" in res.stderr
    res = cli.run("cp", str(tmp_path / "ckpt.pt"), str(tmp_path / "elsewhere"))
    assert res.returncode == 2 and "name a job" in res.stderr
    res = cli.run("cp", "no-such-job:/out", str(tmp_path))
    assert res.returncode == 1 and "error: no job 'no-such-job'" in res.stderr
    res = cli.run("cp", f"{job_id}:/out", str(tmp_path / "ckpt.pt"))
    assert res.returncode == 1 and "cannot copy a directory onto the file" in res.stderr

    # a removed job's containers are gone
    assert cli.run("rm", job_id).returncode == 0
    res = cli.run("cp", f"{job_id}:/out", str(tmp_path))
    assert res.returncode == 1 and f"job {job_id} was removed" in res.stderr


def test_cp_into_a_running_node(cli: CLI, tmp_path: Path) -> None:
    spec = cli.spec(
        f"cpin-{uuid.uuid4().hex[:4]}",
        nodes=["a", "b"],
        nproc_per_node=1,
        args=["--steps", "400", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    try:
        src = tmp_path / "cfg"
        (src / "sub").mkdir(parents=True)
        (src / "a.txt").write_text("alpha\n")
        (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
        res = cli.run("cp", "--node", "1", str(src), f"{job_id}:/tmp/in")
        assert res.returncode == 0, res.stderr
        assert "copied 2 file(s), 1.0 MiB" in res.stderr and "node 1 on b" in res.stderr

        res = cli.run(
            "exec",
            job_id,
            "--node",
            "1",
            "--",
            "sh",
            "-c",
            "cat /tmp/in/a.txt; md5sum /tmp/in/sub/b.bin; stat -c %U /tmp/in/a.txt",
        )
        assert res.returncode == 0, res.stderr
        import hashlib

        digest = hashlib.md5((src / "sub" / "b.bin").read_bytes()).hexdigest()
        assert res.stdout.splitlines() == ["alpha", f"{digest}  /tmp/in/sub/b.bin", "root"]
        # only node 1's container got it
        res = cli.run("exec", job_id, "--", "test", "-e", "/tmp/in")
        assert res.returncode == 1

        # a file into an existing folder keeps its name
        res = cli.run("cp", str(src / "a.txt"), f"{job_id}:/tmp/")
        assert res.returncode == 0, res.stderr
        res = cli.run("exec", job_id, "--", "cat", "/tmp/a.txt")
        assert res.stdout == "alpha\n"

        # the workdir mount is read-only: the engine's refusal comes back with a fix
        res = cli.run("cp", str(src / "a.txt"), f"{job_id}:/workspace/")
        assert res.returncode == 1
        assert "read-only" in res.stderr and "fix: copy to a writable path" in res.stderr
        res = cli.run("cp", str(src / "a.txt"), f"{job_id}:/no/such/dir/a.txt")
        assert res.returncode == 2 and "directory /no/such/dir does not exist" in res.stderr
    finally:
        cli.run("stop", job_id, "--grace", "1")
