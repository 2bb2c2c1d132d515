"""``runtime: host`` against real SSH host ``a``: :class:`remote.hostengine.HostEngine` runs
real ``python3 -c`` process trees through ``remote/agent/hostjob.py`` (no Docker).

Host ``a`` is an sshd on 127.0.0.11 of this machine, running as root with no systemd user
manager (``systemctl --user`` fails: "Failed to connect to bus"), so these tests cover the
double-fork/``setsid`` path; the ``systemd-run --user`` path is not exercised here.
Nodes go to the real folder (``~/.cache/gpuconsole/jobs/<job id>/``) under job ids unique to
each test and are removed after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from console.profiles import load_profile_file
from remote.docker import ContainerSpec, parse_rfc3339_ns
from remote.errors import RuntimeUnavailable
from remote.hostengine import HostEngine, HostJobError
from remote.logs import LogCursor, follow_container_batches
from remote.ssh import SSHTransport

JOB_ID = "io.gpuconsole.job-id"

# counts the live (not zombie) processes of a process group on the host, from /proc
_GROUP_COUNT = textwrap.dedent("""
    import os, sys
    pgid, n = int(sys.argv[1]), 0
    for e in os.listdir('/proc'):
        try:
            s = open('/proc/%s/stat' % e).read()
        except (OSError, ValueError):
            continue
        f = s[s.rfind(')') + 2:].split()
        if e.isdigit() and int(f[2]) == pgid and f[0] not in 'ZX':
            n += 1
    print(n)
""")


@pytest.fixture
async def host_a(test_profile: Path) -> AsyncIterator[SSHTransport]:
    t = load_profile_file(test_profile).transport("a")
    assert isinstance(t, SSHTransport)
    await t.connect()
    try:
        yield t
    finally:
        await t.close()


class Nodes:
    """Makes nodes with unique names/job ids on the host and removes them afterwards."""

    def __init__(self, engine: HostEngine) -> None:
        self.engine = engine
        self.job = f"hosttest-{secrets.token_hex(3)}"
        self.names: list[str] = []

    async def start(
        self,
        code: str,
        *args: str,
        env: dict[str, str] | None = None,
        secret_env: frozenset[str] = frozenset(),
        cwd: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        name = f"{self.job}-n{len(self.names)}"
        spec = ContainerSpec(
            name=name,
            image="python3",
            command=["python3", "-c", code, *args],
            env=env or {},
            secret_env=secret_env,
            labels={JOB_ID: self.job, **(labels or {})},
            working_dir=cwd,
        )
        assert await self.engine.create(spec) == name
        self.names.append(name)
        t0 = time.monotonic()
        await self.engine.start(name)
        assert time.monotonic() - t0 < 10
        return name

    async def cleanup(self) -> None:
        for n in self.names:
            await self.engine.remove(n)


@pytest.fixture
async def nodes(host_a: SSHTransport) -> AsyncIterator[Nodes]:
    n = Nodes(HostEngine(host_a))
    try:
        yield n
    finally:
        await n.cleanup()
        assert await n.engine.list({JOB_ID: n.job}) == []


async def _group_count(t: SSHTransport, pgid: int) -> int:
    res = await t.run(["python3", "-c", _GROUP_COUNT, str(pgid)])
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


async def _live(t: SSHTransport, pids: list[str]) -> list[str]:
    """The PIDs of ``pids`` that are live (not zombie) processes on the host."""
    res = await t.run(["ps", "-o", "pid=,stat=", "-p", ",".join(pids)])
    return [
        pid
        for pid, stat in (x.split() for x in res.stdout.splitlines())
        if not stat.startswith("Z")
    ]


async def _wait_exited(engine: HostEngine, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await engine.inspect(name)
        assert info is not None
        if info.status == "exited":
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"{name} still running after {timeout} s")


AWKWARD_ARGS = ['it\'s "quoted"', "$HOME `id` $(id)", "two\nlines", "ünïcödé 🚀", "", " x "]
AWKWARD_ENV = "a'b\"c $X `y` \\ \n z ü 🚀"


async def test_awkward_argv_env_secret_logs_exit_3(nodes: Nodes, host_a: SSHTransport) -> None:
    secret = f"s3cr3t-{secrets.token_hex(8)}"
    cwd = f"/tmp/{nodes.job}-cwd"
    await host_a.check(["mkdir", "-p", cwd])
    code = textwrap.dedent("""
        import hashlib, json, os, sys, time
        sys.stdout.reconfigure(line_buffering=True)
        print(json.dumps(sys.argv[1:]))
        print(json.dumps(os.environ["AWKWARD"]))
        print(hashlib.sha256(os.environ["SECRET_TOKEN"].encode()).hexdigest())
        print(json.dumps([os.getcwd(), os.environ["CUDA_VISIBLE_DEVICES"]]))
        print(sys.argv[4], "\\t", "\x1b[1mbold\x1b[0m")
        print("to stderr", file=sys.stderr, flush=True)
        open("error.json", "w").write('{"message": "boom"}')
        sys.stdout.write("partial last line")
        sys.stdout.flush()
        time.sleep(2)
        sys.exit(3)
    """)
    try:
        t0 = time.time()
        name = await nodes.start(
            code,
            *AWKWARD_ARGS,
            env={"AWKWARD": AWKWARD_ENV, "SECRET_TOKEN": secret},
            secret_env=frozenset({"SECRET_TOKEN"}),
            cwd=cwd,
            labels={"io.gpuconsole.node-rank": "0"},
        )
        engine = nodes.engine
        # while it runs: the secret is on no command line and in no file of the node
        ps = await host_a.check(["ps", "-eo", "args"])
        assert nodes.job in ps and secret not in ps
        home = await host_a.home()
        folder = f"{home}/.cache/gpuconsole/jobs/{nodes.job}/{name}"
        grep = await host_a.run(["grep", "-rl", "--", secret, folder])
        assert grep.returncode == 1, grep.stdout  # no file holds it (env.json deleted)
        assert (await host_a.run(["test", "-e", f"{folder}/env.json"])).returncode == 1
        [running] = await engine.list({JOB_ID: nodes.job, "io.gpuconsole.node-rank": "0"})
        assert (running.status, running.exit_code) == ("running", None)

        lines = [line async for line in engine.logs(name, follow=True)]
        # stdout and stderr are two pipes read by two threads (as Docker reads them): the
        # order between the streams is the order of reading, not of writing
        assert [x.text for x in lines].count("to stderr") == 1
        texts = [x.text for x in lines if x.text != "to stderr"]
        assert texts[0] == json.dumps(AWKWARD_ARGS)
        assert json.loads(texts[1]) == AWKWARD_ENV
        assert texts[2] == hashlib.sha256(secret.encode()).hexdigest()
        assert json.loads(texts[3]) == [cwd, ""]
        assert texts[4] == "ünïcödé 🚀 \t \x1b[1mbold\x1b[0m"
        assert texts[5:] == ["partial last line"]
        assert [x.ts_ns for x in lines] == sorted(x.ts_ns for x in lines)

        info = await engine.inspect(name)
        assert info is not None
        assert (info.status, info.exit_code, info.gpu_devices) == ("exited", 3, "none")
        assert info.started_at and info.finished_at
        started, finished = parse_rfc3339_ns(info.started_at), parse_rfc3339_ns(info.finished_at)
        assert t0 - 1 < started / 1e9 <= lines[0].ts_ns / 1e9 <= finished / 1e9 < time.time() + 1
        assert finished - started >= 2e9
        assert info.created_s is not None and t0 - 1 < info.created_s <= started / 1e9

        # read back: the spec (secret masked), a file of the cwd, the log from a cursor
        spec = await engine.container_spec(name)
        assert spec is not None
        assert spec.command[3:] == AWKWARD_ARGS and spec.working_dir == cwd
        assert spec.env["AWKWARD"] == AWKWARD_ENV
        line = spec.docker_run_line()
        assert "SECRET_TOKEN=***" in line and secret not in line
        assert await engine.read_file(name, f"{cwd}/error.json") == b'{"message": "boom"}'
        assert await engine.read_file(name, "missing.json") is None
        assert await engine.read_file(name, "labels.json") is not None  # the node's folder
        tail = [x async for x in engine.logs(name, tail=2)]
        assert tail == lines[-2:]
        since = [x async for x in engine.logs(name, since_ns=lines[2].ts_ns)]
        assert since == lines[2:]
        with pytest.raises(HostJobError, match="already run"):
            await engine.start(name)
    finally:
        await host_a.run(["rm", "-rf", "--", cwd])


async def test_exit_0_and_refusals(nodes: Nodes) -> None:
    name = await nodes.start("print('done')")
    await _wait_exited(nodes.engine, name)
    info = await nodes.engine.inspect(name)
    assert info is not None and (info.status, info.exit_code) == ("exited", 0)
    assert [x.text async for x in nodes.engine.logs(name)] == ["done"]
    with pytest.raises(HostJobError, match="already exists"):
        await nodes.engine.create(ContainerSpec(name=name, image="python3", command=["true"]))
    from remote.docker import Bind

    with pytest.raises(HostJobError, match="cannot mount"):
        await nodes.engine.create(
            ContainerSpec(
                name=f"{nodes.job}-x", image="python3", command=["true"], binds=(Bind("/a", "/b"),)
            )
        )
    assert await nodes.engine.inspect("no-such-node") is None
    assert [x async for x in nodes.engine.logs("no-such-node")] == []
    await nodes.engine.stop("no-such-node", 1)  # gone is fine, as with Docker


async def test_start_failure_is_reported(nodes: Nodes) -> None:
    spec = ContainerSpec(
        name=f"{nodes.job}-bad",
        image="python3",
        command=["/nonexistent/torchrun", "x"],
        labels={JOB_ID: nodes.job},
    )
    await nodes.engine.create(spec)
    nodes.names.append(spec.name)
    with pytest.raises(HostJobError, match="cannot run '/nonexistent/torchrun'"):
        await nodes.engine.start(spec.name)
    info = await nodes.engine.inspect(spec.name)
    assert info is not None and (info.status, info.exit_code) == ("exited", 127)


TREE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    if sys.argv[1] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    gc = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    kids = [subprocess.Popen([sys.executable, "-c", gc]) for _ in range(2)]
    # like torchrun's workers (torch's SubprocessHandler: start_new_session=True)
    kids.append(subprocess.Popen([sys.executable, "-c", gc], start_new_session=True))
    print("pgid", os.getpgid(0), "kids", *[k.pid for k in kids], flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize(("mode", "code", "min_s"), [("default", 143, 0.0), ("ignore", 137, 2.0)])
async def test_stop_ends_the_whole_tree(
    nodes: Nodes, host_a: SSHTransport, mode: str, code: int, min_s: float
) -> None:
    """Grandchildren ignoring SIGTERM are gone after stop(grace=2): with the child dying of
    SIGTERM (exit 143, the rest of the group SIGKILLed by the supervisor at once) and with
    the child ignoring it too (SIGKILL to the group after the grace, exit 137)."""
    name = await nodes.start(TREE, mode)
    first = None
    async for line in nodes.engine.logs(name, follow=True):
        first = line.text
        break
    assert first is not None and first.startswith("pgid ")
    pgid, kids = int(first.split()[1]), first.split()[3:]
    assert await _group_count(host_a, pgid) == 4  # supervisor, child, 2 grandchildren
    assert await _live(host_a, kids) == kids
    t0 = time.monotonic()
    await nodes.engine.stop(name, 2)
    took = time.monotonic() - t0
    assert min_s <= took < min_s + 5
    assert await _group_count(host_a, pgid) == 0
    assert await _live(host_a, kids) == []
    # pgrep -g also lists zombies, which the host's PID 1 reaps a moment later
    zombies = (await host_a.run(["ps", "-o", "stat=", "-g", str(pgid)])).stdout.split()
    assert all(z.startswith("Z") for z in zombies), zombies
    info = await nodes.engine.inspect(name)
    assert info is not None and (info.status, info.exit_code) == ("exited", code)


async def test_job_survives_reconnect_and_logs_resume_exactly(
    nodes: Nodes, host_a: SSHTransport
) -> None:
    """The SSH connection closes twice while a job prints 0..N-1: the job runs on and the
    resumed follow (remote.logs over HostEngine) yields every number exactly once."""
    n = 1500
    name = await nodes.start(
        f"import time\nfor i in range({n}):\n print(i, flush=True)\n time.sleep(0.002)\n"
        "time.sleep(0.5)"
    )
    states: list[str] = []
    got: list[int] = []
    sizes: list[int] = []
    cursor = LogCursor()

    async def follow() -> None:
        async for batch in follow_container_batches(
            nodes.engine,
            name,
            cursor,  # type: ignore[arg-type]
            on_state=lambda s, _why: states.append(s),
        ):
            got.extend(int(x.text) for x in batch)
            sizes.append(len(batch))

    task = asyncio.create_task(follow())
    for k in (1, 2):
        while len(got) < k * n // 3:
            await asyncio.sleep(0.02)
        at = len(got)
        await host_a.close()  # the follow's channel dies with the connection
        while states.count("following") < k:
            await asyncio.sleep(0.02)
        assert at < n, "the job ended before the connection was closed"
    await asyncio.wait_for(task, 60)
    assert states == ["reconnecting", "following"] * 2
    assert got == list(range(n))
    # the backlog a resumed stream sends at once comes as batches, not line by line
    assert max(sizes) > 1
    info = await nodes.engine.inspect(name)
    assert info is not None and (info.status, info.exit_code) == ("exited", 0)


async def test_state_folder_removed_while_running_ends_the_job(
    nodes: Nodes, host_a: SSHTransport
) -> None:
    """``rm -rf`` of the job's folder while it runs: the supervisor notices within ~1 s and
    ends its command (SIGTERM, SIGKILL after 10 s), so no process is left that ``ps`` could
    not find; the node is gone from ``list``."""
    name = await nodes.start(TREE, "default")
    async for line in nodes.engine.logs(name, follow=True):
        pgid = int(line.text.split()[1])
        break
    home = await host_a.home()
    await host_a.check(["rm", "-rf", f"{home}/.cache/gpuconsole/jobs/{nodes.job}"])
    deadline = time.monotonic() + 10
    while await _group_count(host_a, pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert await _group_count(host_a, pgid) == 0
    assert await nodes.engine.list({JOB_ID: nodes.job}) == []
    assert await nodes.engine.inspect(name) is None


async def test_python_without_torch_is_refused(host_a: SSHTransport) -> None:
    engine = HostEngine(host_a)
    await engine.ping()
    assert not await engine.has_image("python3")
    with pytest.raises(RuntimeUnavailable) as e:
        await engine.ensure_image("python3")
    assert "\n" not in str(e.value) and "\n" not in (e.value.hint or "")
    assert "python 'python3' cannot import torch" in str(e.value)
    assert "No module named 'torch'" in str(e.value)
    assert e.value.hint is not None and "python3 -m pip install torch" in e.value.hint
    with pytest.raises(RuntimeUnavailable, match="'/nonexistent/python3' is not on the host"):
        await engine.ensure_image("/nonexistent/python3")
    with pytest.raises(RuntimeUnavailable, match="'/bin/sh' is not a Python"):
        await engine.ensure_image("/bin/sh")


@pytest.mark.hostless
async def test_fleet_listing_starts_nothing_without_a_jobs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """list_if_any (every Docker host of a fleet listing): one shell that stops at once
    without a job folder in the jobs folder (no bundle uploaded); with one, the bundle is
    uploaded the first time (the command says it is missing) and used directly after. On
    this machine as a local host whose home is a fresh folder."""
    from remote.hostengine import BUNDLE_BASE, JOBS_DIR
    from remote.transport import LocalTransport

    monkeypatch.setenv("HOME", str(tmp_path))
    engine = HostEngine(LocalTransport("here"), agent_python="/usr/bin/python3")
    label = {JOB_ID: None}
    assert await engine.list_if_any(label) == []
    assert not (tmp_path / BUNDLE_BASE).exists()  # nothing uploaded, no python run
    (tmp_path / JOBS_DIR).mkdir(parents=True)
    assert await engine.list_if_any(label) == []
    assert not (tmp_path / BUNDLE_BASE).exists()  # an empty jobs folder: the same
    (tmp_path / JOBS_DIR / "old-000000").mkdir()  # a job folder (its nodes gone)
    assert await engine.list_if_any(label) == []
    bundles = list((tmp_path / BUNDLE_BASE).iterdir())
    assert len(bundles) == 1 and (bundles[0] / "hostjob.py").is_file()
    # a node folder the listing reads: hostjob's own files, made by a real create
    node = await engine.create(
        ContainerSpec(
            name="gpuconsole-lst-000001-n0",
            image="/usr/bin/python3",
            command=["/usr/bin/python3", "-c", "pass"],
            labels={JOB_ID: "lst-000001"},
        )
    )
    listed = await engine.list_if_any(label)
    assert [i.id for i in listed] == [node]
    assert listed[0].labels[JOB_ID] == "lst-000001"
    # a damaged bundle answers nothing: an error, not "no jobs" (the node would read lost)
    (bundles[0] / "hostjob.py").write_text("")
    with pytest.raises(HostJobError, match=r"no answer from hostjob\.py"):
        await engine.list_if_any(label)
