"""Bad input: each a clear one-line error naming file/line/field, and no container left behind."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import asyncssh
import docker
import pytest
import yaml

from tests.integration.conftest import CLI, REPO, job_containers


def assert_clean_error(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Exit ``code``, nothing on stdout, an ``error:`` line containing every needle, no
    traceback."""
    assert res.returncode == code, res.stdout + res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    err = [ln for ln in lines if ln.startswith("error: ")]
    assert len(err) == 1, res.stderr
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def no_containers(engine: docker.DockerClient, name: str) -> None:
    assert job_containers(engine, job_name=name) == []


def test_malformed_yaml(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.tmp / "bad.yaml"
    spec.write_text("name: broken\nimage: x\nargs: [--steps, 3\nscript: train_ddp.py\n")
    res = cli.run("submit", str(spec))
    line = assert_clean_error(res, 2, f"{spec}:", "malformed YAML")
    assert f"{spec}:4:" in line or f"{spec}:3:" in line
    assert "fix:" in res.stderr


def test_unknown_field(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("typo")
    text = spec.read_text().replace("nproc_per_node:", "nproc_per_nod:")
    spec.write_text(text)
    line_no = next(i for i, ln in enumerate(text.splitlines(), 1) if "nproc_per_nod:" in ln)
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 2, f"{spec}:{line_no}:", "nproc_per_nod", "unknown field")
    assert "did you mean `nproc_per_node`?" in res.stderr
    no_containers(engine, "typo")


def test_bad_value_names_field_and_line(cli: CLI) -> None:
    spec = cli.spec("badvalue", max_restarts=-1)
    line_no = next(
        i for i, ln in enumerate(spec.read_text().splitlines(), 1) if ln.startswith("max_restarts:")
    )
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 2, f"{spec}:{line_no}:", "max_restarts")


def test_unknown_host(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("unknownhost", nodes=["a", "zz"])
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 2, str(spec), "nodes[1]", "unknown host 'zz'")
    assert "hosts in the profile: a, b" in res.stderr
    no_containers(engine, "unknownhost")


def _profile_with(
    cli: CLI,
    edit: dict[str, object],
    hosts: dict[str, object] | None = None,
) -> Path:
    data = yaml.safe_load(cli.profile.read_text())
    data.update(edit)
    if hosts:
        data["hosts"].update(hosts)
    p = cli.tmp / "profile.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_unreachable_host(cli: CLI, engine: docker.DockerClient) -> None:
    prof = _profile_with(cli, {}, {"c": {"hostname": "127.0.0.13", "port": 22, "user": "root"}})
    spec = cli.spec("unreachable", nodes=["a", "c"])
    res = cli.run("submit", str(spec), profile=prof)
    assert_clean_error(res, 1, "host c", "127.0.0.13:22", "connection refused")
    no_containers(engine, "unreachable")


def test_unknown_host_key(cli: CLI, engine: docker.DockerClient) -> None:
    empty = cli.tmp / "known_hosts"
    empty.write_text("")
    prof = _profile_with(cli, {"known_hosts": str(empty)})
    spec = cli.spec("hostkey")
    res = cli.run("submit", str(spec), profile=prof)
    assert_clean_error(res, 1, "host a", "host key of 127.0.0.11:22 is not trusted", str(empty))
    assert "ssh-keyscan -p 22 127.0.0.11" in res.stderr
    assert "accept_new_host_keys: true" in res.stderr
    no_containers(engine, "hostkey")


def test_missing_known_hosts_file_trusts_no_key(cli: CLI) -> None:
    """A profile's ``known_hosts:`` that does not exist trusts nothing: not the user's
    ``~/.ssh/known_hosts`` (which lists the host here), and not an ssh config whose
    ``UserKnownHostsFile none`` would turn host key checking off (asyncssh's defaults when it
    is given no list)."""
    home = cli.tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    real_kh = yaml.safe_load(cli.profile.read_text())["known_hosts"]
    (home / ".ssh" / "known_hosts").write_text(Path(real_kh).read_text())
    missing = cli.tmp / "no-such-known_hosts"
    prof = _profile_with(cli, {"known_hosts": str(missing)})
    for config in ("", "Host *\n  UserKnownHostsFile none\n"):
        (home / ".ssh" / "config").write_text(config)
        env = {**cli.env(), "HOME": str(home)}
        res = subprocess.run(
            cli.argv("ps", "--json", "--hosts", profile=prof),
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert res.returncode == 0, res.stderr
        hosts = {h["host"]: h for h in json.loads(res.stdout)["hosts"]}
        for name in ("a", "b"):
            assert hosts[name]["status"] == "failed", (config, hosts[name])
            assert "is not trusted" in hosts[name]["reason"], hosts[name]
            assert str(missing) in hosts[name]["reason"], hosts[name]
    assert not missing.exists()


def test_accept_new_host_keys_adds_the_key_once(cli: CLI) -> None:
    kh = cli.tmp / "kh"
    prof = _profile_with(cli, {"known_hosts": str(kh), "accept_new_host_keys": True})
    spec = cli.spec("acceptnew")
    res = cli.run("submit", str(spec), "--dry-run", profile=prof)
    assert res.returncode == 0, res.stderr
    first = kh.read_text().splitlines()
    assert len(first) == 1 and first[0].startswith("127.0.0.11 ssh-ed25519 ")
    res = cli.run("submit", str(spec), "--dry-run", profile=prof)
    assert res.returncode == 0, res.stderr
    assert kh.read_text().splitlines() == first
    # a listed host whose key differs is refused even with accept-new
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    kh.write_text(f"127.0.0.11 {other.strip()}\n")
    res = cli.run("submit", str(spec), "--dry-run", profile=prof)
    assert res.returncode == 1
    assert "has CHANGED" in res.stderr and "accept_new_host_keys: true" not in res.stderr
    assert kh.read_text() == f"127.0.0.11 {other.strip()}\n"


def test_accept_new_adds_one_line_for_hosts_sharing_an_address(cli: CLI) -> None:
    """Profile hosts on one address (aliases of one machine) all find its key missing in the
    same `ps`; the key is written once, on a line of its own after a last line without a
    newline."""
    kh = cli.tmp / "kh"
    kh.write_text("# kept by hand, no newline at the end")
    base = yaml.safe_load(cli.profile.read_text())["hosts"]["a"]
    prof = _profile_with(
        cli,
        {"known_hosts": str(kh), "accept_new_host_keys": True},
        {f"a{i}": dict(base) for i in range(2, 5)},
    )
    res = cli.run("ps", "--json", "--hosts", profile=prof)
    assert res.returncode == 0, res.stderr
    hosts = {h["host"]: h["status"] for h in json.loads(res.stdout)["hosts"]}
    assert set(hosts.values()) == {"answered"}, hosts
    lines = kh.read_text().splitlines()
    assert lines[0] == "# kept by hand, no newline at the end"
    assert sorted(ln.split()[0] for ln in lines[1:]) == ["127.0.0.11", "127.0.0.12"], lines


def test_image_that_does_not_exist(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("noimage", image="gpuconsole/does-not-exist:0", nodes=["a", "b"])
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 1, "host a", "image 'gpuconsole/does-not-exist:0' is not on the host")
    no_containers(engine, "noimage")


def test_more_processes_than_gpus(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("toomany", gpus_per_node=2, nproc_per_node=4)
    res = cli.run("submit", str(spec))
    assert_clean_error(
        res,
        2,
        str(spec),
        "nproc_per_node",
        "more processes than GPUs: nproc_per_node 4 > 2 GPU(s) per node",
    )
    no_containers(engine, "toomany")


def test_gpus_on_a_host_without_gpus(cli: CLI, engine: docker.DockerClient) -> None:
    spec = cli.spec("nogpu", gpus_per_node="all", nproc_per_node=None)
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 2, "host a has no NVIDIA driver")
    assert "gpus_per_node: 0" in res.stderr
    no_containers(engine, "nogpu")


def test_unset_secret_reference(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = cli.spec("secret", env={"API_TOKEN": "${GPUCONSOLE_TEST_UNSET_VAR}"})
    monkeypatch.delenv("GPUCONSOLE_TEST_UNSET_VAR", raising=False)
    res = cli.run("submit", str(spec))
    assert_clean_error(res, 2, str(spec), "env.API_TOKEN", "GPUCONSOLE_TEST_UNSET_VAR")


def test_dry_run_masks_secrets_and_creates_nothing(
    cli: CLI, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCONSOLE_TEST_TOKEN", "s3cr3t-value")
    spec = cli.spec(
        "dry", nodes=["a", "b"], env={"TOKEN": "${GPUCONSOLE_TEST_TOKEN}", "PLAIN": "visible"}
    )
    res = cli.run("submit", str(spec), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "s3cr3t-value" not in res.stdout + res.stderr
    assert "TOKEN=***" in res.stdout
    assert "PLAIN=visible" in res.stdout
    runs = [ln.strip() for ln in res.stdout.splitlines() if ln.strip().startswith("docker run")]
    assert len(runs) == 2
    assert "--rdzv-endpoint 127.0.0.11:" in runs[1]
    assert "--cap-drop ALL" in runs[0] and "--security-opt no-new-privileges" in runs[0]
    assert "--privileged" not in res.stdout
    no_containers(engine, "dry")


def test_secret_reaches_the_container_but_not_the_store(
    cli: CLI, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCONSOLE_TEST_TOKEN", "s3cr3t-value")
    spec = cli.spec(
        "secretrun",
        env={"TOKEN": "${GPUCONSOLE_TEST_TOKEN}"},
        args=["--steps", "1", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    (c,) = job_containers(engine, job_name="secretrun")
    assert "TOKEN=s3cr3t-value" in c.attrs["Config"]["Env"]
    assert "s3cr3t-value" not in (cli.state_dir / "jobs.sqlite3").read_bytes().decode(
        errors="replace"
    )


def test_jump_host_offers_the_profile_key_on_both_hops(cli: CLI) -> None:
    key = yaml.safe_load(cli.profile.read_text())["hosts"]["a"]["identity_file"]
    prof = _profile_with(
        cli,
        {},
        {
            "bj": {
                "hostname": "127.0.0.12",
                "user": "root",
                "identity_file": key,
                "jump": "root@127.0.0.11:22",
            }
        },
    )
    spec = cli.spec("viajump", nodes=["bj"])
    res = cli.run("submit", str(spec), "--dry-run", profile=prof)
    assert res.returncode == 0, res.stderr
    assert "node 0 on bj" in res.stdout
    # through the tunnel the peer address is unknown: the host name (an IP here) is used
    assert "--local-addr 127.0.0.12" in res.stdout


def test_missing_identity_file(cli: CLI, engine: docker.DockerClient) -> None:
    prof = _profile_with(
        cli,
        {},
        {
            "a": {
                "hostname": "127.0.0.11",
                "user": "root",
                "identity_file": str(cli.tmp / "no-such-key"),
            }
        },
    )
    res = cli.run("submit", str(cli.spec("nokey")), profile=prof)
    assert_clean_error(res, 1, "host a", f"identity file {cli.tmp / 'no-such-key'} does not exist")
    no_containers(engine, "nokey")


def test_dry_run_is_the_same_on_a_terminal_and_in_a_pipe(cli: CLI) -> None:
    """Control characters in args are escaped (nothing for a terminal to act on, nothing for
    click to strip from a pipe), and torchrun's own ${local_rank} is pointed out."""
    import os
    import pty

    spec = cli.spec(
        "escapes", args=["--local-rank=${local_rank}", "a\rEVIL\a", "\x1b[31mred", "x\u202ey"]
    )
    piped = cli.run("submit", str(spec), "--dry-run")
    assert piped.returncode == 0, piped.stderr
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            cli.argv("submit", str(spec), "--dry-run"),
            env=cli.env(),
            cwd=REPO,
            stdout=slave,
            stderr=subprocess.PIPE,
            timeout=240,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    assert proc.returncode == 0, proc.stderr
    on_tty = b"".join(chunks).decode().replace("\r\n", "\n")
    strip_ids = re.compile(r"escapes-[0-9a-f]{6}|created-at=[0-9.]+|rdzv-endpoint \S+|c10d at \S+")
    assert strip_ids.sub("", on_tty) == strip_ids.sub("", piped.stdout)
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202e]", piped.stdout)
    assert "$'a\\rEVIL\\a' $'\\E[31mred' $'x\\u202ey'" in piped.stdout
    assert "note: torchrun replaces ${local_rank} in args[0]" in piped.stdout
