"""``ps`` over hosts that answer late or refuse: a late host is pending (its jobs kept at their
last known state), a refusing one reported with the reason, the others' jobs unaffected.

Real sshd test hosts and dockerd; the misbehaving hosts are local TCP servers in front of (or
instead of) test host ``a``'s sshd:

- :class:`StallServer`: accepts and never sends the SSH banner (a host that answers late);
- :class:`KexCloser`: relays sshd's banner, then closes the connection when the client starts
  the key exchange, as an sshd past its ``MaxStartups`` drops a connection.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import docker
import yaml

from tests.integration.conftest import CLI, IMAGE
from tests.integration.proxies import KexCloser, StallServer


def start_job(engine: docker.DockerClient, job_id: str, host: str) -> Any:
    """A sleeping container labelled as a one-node job on ``host`` (adopted by ``ps``)."""
    labels = {
        "io.gpuconsole.format": "1",
        "io.gpuconsole.job-id": job_id,
        "io.gpuconsole.job-name": job_id.rsplit("-", 1)[0],
        "io.gpuconsole.node-rank": "0",
        "io.gpuconsole.node-count": "1",
        "io.gpuconsole.nproc-per-node": "1",
        "io.gpuconsole.host": host,
        "io.gpuconsole.spec-hash": "0" * 12,
        "io.gpuconsole.created-at": f"{time.time():.3f}",
        "io.gpuconsole.kind": "train",
    }
    return engine.containers.run(
        IMAGE, ["sleep", "600"], detach=True, labels=labels, name=f"{job_id}-n0"
    )


def write_profile(base: Path, path: Path, extra: dict[str, tuple[str, int]]) -> None:
    """The test profile plus hosts named in ``extra`` (name -> address, port)."""
    prof = yaml.safe_load(base.read_text())
    key = prof["hosts"]["a"]["identity_file"]
    for name, (addr, port) in extra.items():
        prof["hosts"][name] = {"hostname": addr, "port": port, "user": "root", "identity_file": key}
    path.write_text(yaml.safe_dump(prof))


def ps_hosts(cli: CLI, profile: Path, *extra: str) -> tuple[dict[str, Any], str, float]:
    t0 = time.monotonic()
    res = cli.run("ps", "--json", "--hosts", *extra, profile=profile, timeout=120)
    dt = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr, dt


def test_late_host_pending_refusing_host_reported(
    cli: CLI, engine: docker.DockerClient, tmp_path: Path
) -> None:
    suffix = f"{int(time.time() * 1000) % 0xFFFFFF:06x}"
    on_a, on_late = f"psfleet-a-{suffix}", f"psfleet-late-{suffix}"
    stall, closer = StallServer(), KexCloser(("127.0.0.11", 22))
    profile = tmp_path / "fleet.yaml"
    containers = [start_job(engine, on_a, "a"), start_job(engine, on_late, "late")]
    try:
        # 1. every host answers ("late" is still test host a): both jobs adopted, running
        write_profile(cli.profile, profile, {"late": ("127.0.0.11", 22)})
        data, stderr, _ = ps_hosts(cli, profile)
        jobs = {j["id"]: j for j in data["jobs"]}
        assert jobs[on_a]["state"] == "running", stderr
        assert jobs[on_late]["state"] == "running", stderr
        assert {h["host"]: h["status"] for h in data["hosts"]} == {
            "a": "answered",
            "b": "answered",
            "late": "answered",
        }

        # 2. "late" now never answers, "busy" closes during key exchange, "closed" refuses
        free = socket.create_server(("127.0.0.1", 0))
        closed_port = int(free.getsockname()[1])
        free.close()
        write_profile(
            cli.profile,
            profile,
            {
                "late": ("127.0.0.1", stall.port),
                "busy": ("127.0.0.1", closer.port),
                "closed": ("127.0.0.1", closed_port),
            },
        )
        data, stderr, took = ps_hosts(cli, profile, "--deadline", "4")
        hosts = {h["host"]: h for h in data["hosts"]}
        assert hosts["late"]["status"] == "pending"
        assert "no answer within 4 s (still connecting)" in hosts["late"]["reason"]
        assert hosts["busy"]["status"] == "failed"
        assert "refused new SSH connections (sshd MaxStartups?)" in hosts["busy"]["reason"]
        assert closer.closed >= 1
        assert hosts["closed"]["status"] == "failed"
        assert "connection refused" in hosts["closed"]["reason"]
        assert hosts["a"]["status"] == hosts["b"]["status"] == "answered"
        # one warning line per host not answering, with its reason
        assert f"warning: {hosts['late']['reason']}" in stderr
        assert f"warning: {hosts['busy']['reason']}" in stderr
        assert f"warning: {hosts['closed']['reason']}" in stderr
        # within the deadline plus the CLI's start-up, not the connect timeout (10 s)
        assert took < 4 + 6, took
        jobs = {j["id"]: j for j in data["jobs"]}
        # the late host's job is still listed, its node at its last known state
        late = jobs[on_late]
        assert late["state"] == "unknown"
        assert [(n["host"], n["state"], n["host_status"]) for n in late["nodes"]] == [
            ("late", "unreachable", "pending")
        ]
        assert late["nodes"][0]["container_id"] == containers[1].id
        # 3. the answering host's job is unaffected
        ok = jobs[on_a]
        assert ok["state"] == "running"
        assert [(n["host"], n["state"], n["host_status"]) for n in ok["nodes"]] == [
            ("a", "running", "answered")
        ]

        # the plain `ps --json` is still the list of jobs
        res = cli.run("ps", "--json", "--deadline", "2", profile=profile, timeout=120)
        assert res.returncode == 0, res.stderr
        assert {j["id"] for j in json.loads(res.stdout)} >= {on_a, on_late}

        # 4. the late host answers again: its job is running again
        write_profile(cli.profile, profile, {"late": ("127.0.0.11", 22)})
        data, stderr, _ = ps_hosts(cli, profile)
        jobs = {j["id"]: j for j in data["jobs"]}
        assert jobs[on_late]["state"] == "running", stderr
        assert jobs[on_late]["nodes"][0]["host_status"] == "answered"
    finally:
        stall.close()
        closer.close()
        for c in containers:
            c.remove(force=True)


def test_a_fleet_behind_one_jump_host_is_not_dropped_by_its_maxstartups(
    cli: CLI, tmp_path: Path
) -> None:
    """24 hosts behind one jump host whose sshd drops every unauthenticated connection
    beyond 10 (a real sshd, ``MaxStartups 10:100:10``: OpenSSH's default starts dropping at
    10): ps tunnels every host through one connection to it (and would keep its handshakes
    there below 10 otherwise), so every host answers and the jump host sees one login."""
    import subprocess

    testhosts = cli.profile.parent
    conf = (testhosts / "a" / "sshd_config").read_text()
    conf = conf.replace("ListenAddress 127.0.0.11:22", "ListenAddress 127.0.0.11:2222")
    conf = conf.replace(f"PidFile {testhosts}/a/sshd.pid", f"PidFile {tmp_path}/sshd.pid")
    lines = [ln for ln in conf.splitlines() if not ln.startswith("MaxStartups")]
    (tmp_path / "sshd_config").write_text("\n".join([*lines, "MaxStartups 10:100:10", ""]))
    assert "2222" in (tmp_path / "sshd_config").read_text()
    subprocess.run(
        ["/usr/sbin/sshd", "-f", str(tmp_path / "sshd_config"), "-E", str(tmp_path / "sshd.log")],
        check=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "sshd.pid").exists():
            assert time.monotonic() < deadline, (tmp_path / "sshd.log").read_text()
            time.sleep(0.05)
        prof = yaml.safe_load(cli.profile.read_text())
        key_type, key = (testhosts / "a" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known = tmp_path / "known_hosts"
        known.write_text(
            Path(prof["known_hosts"]).read_text() + f"[127.0.0.11]:2222 {key_type} {key}\n"
        )
        prof["known_hosts"] = str(known)
        for i in range(24):
            prof["hosts"][f"j{i:02d}"] = {
                "hostname": "127.0.0.12",
                "port": 22,
                "user": "root",
                "identity_file": prof["hosts"]["a"]["identity_file"],
                "jump": "root@127.0.0.11:2222",
            }
        profile = tmp_path / "jumped.yaml"
        profile.write_text(yaml.safe_dump(prof))
        data, stderr, _ = ps_hosts(cli, profile)
        statuses = {h["host"]: (h["status"], h["reason"]) for h in data["hosts"]}
        assert len(statuses) == 26
        assert {s for s, _ in statuses.values()} == {"answered"}, statuses
        assert "warning" not in stderr, stderr
        # the 24 hosts tunnel through one connection to the jump host: one login there
        log = (tmp_path / "sshd.log").read_text()
        assert log.count("Accepted publickey") == 1, log
    finally:
        pid = (tmp_path / "sshd.pid").read_text().strip()
        subprocess.run(["kill", pid], check=False)


def test_a_jump_host_that_refuses_is_named_not_the_host_behind_it(cli: CLI, tmp_path: Path) -> None:
    """A profile ``jump:`` host that refuses connections (a closed port) or the key (an
    unknown user): the reason names the jump host, not the target behind it (whose sshd is
    fine; the message used to say ``cannot connect to 127.0.0.12:22: connection refused``)."""
    free = socket.create_server(("127.0.0.1", 0))
    closed_port = int(free.getsockname()[1])
    free.close()
    prof = yaml.safe_load(cli.profile.read_text())
    behind = {
        "hostname": "127.0.0.12",
        "port": 22,
        "user": "root",
        "identity_file": prof["hosts"]["a"]["identity_file"],
    }
    prof["hosts"]["jclosed"] = {**behind, "jump": f"root@127.0.0.1:{closed_port}"}
    prof["hosts"]["jnouser"] = {**behind, "jump": "nosuchuser@127.0.0.11:22"}
    profile = tmp_path / "jumps.yaml"
    profile.write_text(yaml.safe_dump(prof))
    data, stderr, _ = ps_hosts(cli, profile, "--deadline", "20")
    hosts = {h["host"]: h for h in data["hosts"]}
    assert hosts["jclosed"]["status"] == hosts["jnouser"]["status"] == "failed"
    assert hosts["jclosed"]["reason"] == (
        f"host jclosed: cannot connect to the jump host 127.0.0.1:{closed_port}: connection refused"
    )
    assert hosts["jnouser"]["reason"] == (  # a refused login carries its fix
        "host jnouser: authentication refused by the jump host nosuchuser@127.0.0.11:22; "
        "fix: check `jump` and `identity_file` in the profile, or your ssh-agent"
    )
    assert f"warning: {hosts['jclosed']['reason']}" in stderr
    assert hosts["a"]["status"] == hosts["b"]["status"] == "answered"


def test_a_container_whose_job_id_label_is_a_path_is_not_adopted(
    cli: CLI, engine: docker.DockerClient
) -> None:
    """Anyone who may use Docker on a host can label a container: a job id like
    ``../../x`` must not become a job (its id names folders of the console's state dir)."""
    suffix = f"{int(time.time() * 1000) % 0xFFFFFF:06x}"
    bad_ids = [f"../../escape-{suffix}", f"ok/../../escape-{suffix}", "..", "UPPER-000000"]
    containers = [start_job(engine, "ok-" + suffix, "a")]
    for i, bad in enumerate(bad_ids):
        c = start_job(engine, f"badid{i}-{suffix}", "a")
        c.remove(force=True)
        labels = dict(c.labels)
        labels["io.gpuconsole.job-id"] = bad
        containers.append(
            engine.containers.run(IMAGE, ["sleep", "600"], detach=True, labels=labels)
        )
    try:
        data, _, _ = ps_hosts(cli, cli.profile, "--all")
        ids = {j["id"] for j in data["jobs"]}
        assert "ok-" + suffix in ids
        assert not ids & set(bad_ids), ids
        state = Path(cli.env()["GPUCONSOLE_STATE_DIR"])
        assert not list(state.parent.parent.glob(f"escape-{suffix}")), "written outside"
        assert not list(state.rglob(f"escape-{suffix}"))
    finally:
        for c in containers:
            c.remove(force=True)


def test_stop_stops_what_it_reaches_when_one_host_is_down(
    cli: CLI, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """A 2-node job whose host b is down: ``stop`` stops node 0 on a, then says it cannot
    reach b (exit 1) and how to finish; b's node is left as it was."""
    suffix = f"{int(time.time() * 1000) % 0xFFFFFF:06x}"
    job_id = f"halfstop-{suffix}"
    nodes = []
    first = start_job(engine, job_id, "a")
    base = dict(first.labels)
    first.remove(force=True)
    for rank, host in ((0, "a"), (1, "b")):
        labels = {
            **base,
            "io.gpuconsole.node-rank": str(rank),
            "io.gpuconsole.node-count": "2",
            "io.gpuconsole.host": host,
        }
        nodes.append(
            engine.containers.run(
                IMAGE, ["sleep", "600"], detach=True, labels=labels, name=f"{job_id}-n{rank}"
            )
        )
    try:
        # adopted under a copy of the profile (the job's own profile from then on) ...
        profile = tmp_path / "fleet.yaml"
        prof = yaml.safe_load(cli.profile.read_text())
        profile.write_text(yaml.safe_dump(prof))
        data, stderr, _ = ps_hosts(cli, profile)
        assert {j["id"]: j["state"] for j in data["jobs"]}[job_id] == "running", stderr
        # ... in which b then goes down
        free = socket.create_server(("127.0.0.1", 0))
        closed_port = int(free.getsockname()[1])
        free.close()
        prof["hosts"]["b"].update({"hostname": "127.0.0.1", "port": closed_port})
        profile.write_text(yaml.safe_dump(prof))
        res = cli.run("stop", job_id, "--grace", "1", profile=profile, timeout=120)
        assert res.returncode == 1, (res.stdout, res.stderr)
        first = res.stderr.strip().splitlines()[0]
        assert first.startswith(f"error: job {job_id}: stopped node 0; cannot reach b: "), first
        assert f"run `gpuconsole stop {job_id}` again" in res.stderr
        for c in nodes:
            c.reload()
        assert nodes[0].status == "exited"
        assert nodes[1].status == "running"
    finally:
        for c in nodes:
            c.remove(force=True)
