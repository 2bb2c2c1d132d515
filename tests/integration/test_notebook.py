"""`gpuconsole notebook` against test host ``a``: JupyterLab in a container of the image
``gpuconsole/torch:2.13.0-cpu``, reached through the SSH tunnel the command forwards.

One notebook (module fixture ``nb``) is started and shared by the tests, which run in file
order: its URL and token (refused without), its listeners (the host's 127.0.0.1 only), a
kernel running torch through the REST and websocket APIs, a real browser showing the
launcher, a second start of the same name refused, a notebook file saved in the host workdir,
Ctrl-C (tunnel closed, notebook running), re-attach, ``ps``, ``stop`` and ``rm``; then a
second notebook on the same workdir finds the file. Bad input starts nothing.

Host ``a`` is an sshd on 127.0.0.11 of *this* machine sharing its network and dockerd
(``scripts/testhosts/up``): the host's 127.0.0.1 is this machine's, and JupyterLab's own
port number is taken here, so the tunnel listens on the port derived from the job id
(``stable_port``), the same at every re-attach; the first start picks one with ``--port``.

Every notebook is started with a unique ``--name``: other test runs share the engine, and job
names are checked across the hosts (a concurrently running ``notebook`` of someone else's
would refuse ours).
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import yaml

from console.notebook.attach import stable_port
from tests.integration.conftest import CLI, IMAGE, LABEL_JOB_ID, REPO, wait_for
from tests.jupyterclient import Jupyter, http

KIND_LABEL = "io.gpuconsole.kind"
PORT_LABEL = "io.gpuconsole.port"
#: The tunnel waits for JupyterLab this long at most (s): a first start in a container on
#: this loaded 2-core machine imports jupyterlab and its extensions (10-30 s seen).
START_TIMEOUT_S = 300.0
CHROMIUM = Path("/usr/bin/chromium")
TESTHOSTS = Path(os.environ.get("GPUCONSOLE_TESTHOSTS_DIR", "/var/tmp/gpuconsole-testhosts"))
URL_RE = re.compile(r"^http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)$")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP connect to ``host:port`` here is accepted."""
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex((host, port)) == 0


# -- the CLI process holding the tunnel -------------------------------------------------------


@dataclass
class NotebookProc:
    """A ``gpuconsole notebook`` subprocess; its stdout and stderr read by threads."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stderr: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, cli: CLI, *args: str) -> NotebookProc:
        p = cls(cli.popen("notebook", *args))

        def pump_out() -> None:
            assert p.proc.stdout is not None
            for ln in p.proc.stdout:
                p.lines.put(ln.rstrip("\n"))
            p.lines.put(None)

        def pump_err() -> None:
            assert p.proc.stderr is not None
            for ln in p.proc.stderr:
                p.stderr.append(ln.rstrip("\n"))

        threading.Thread(target=pump_out, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        return p

    def url(self, timeout: float = START_TIMEOUT_S + 60) -> str:
        """The first stdout line (the URL); fails the test when the process ends first."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no URL within {timeout} s; stderr: {self.err_text()}")
        if line is None:
            self.proc.wait(timeout=30)
            pytest.fail(
                f"notebook exited {self.proc.returncode} without a URL; stderr: {self.err_text()}"
            )
        return line

    def err_text(self) -> str:
        return "\n".join(self.stderr)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C (SIGINT); returns the exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def job_id_of(p: NotebookProc) -> str:
    """The job id from ``started notebook <id> on a`` (stderr, written before the URL)."""
    for ln in p.stderr:
        m = re.match(r"started notebook (\S+) on a ", ln)
        if m:
            return m.group(1)
    pytest.fail(f"no `started notebook` line on stderr: {p.err_text()}")


def container_of(engine: docker.DockerClient, job_id: str) -> Any:
    found = engine.containers.list(all=True, filters={"label": f"{LABEL_JOB_ID}={job_id}"})
    assert len(found) == 1, [c.name for c in found]
    return found[0]


def notebook_containers(engine: docker.DockerClient, since: float) -> list[Any]:
    """Notebook containers created since ``since`` (Unix s)."""
    found = engine.containers.list(all=True, filters={"label": f"{KIND_LABEL}=notebook"})
    return [c for c in found if float(c.labels.get("io.gpuconsole.created-at", "0")) >= since]


# -- the host's listeners -----------------------------------------------------------------------


def ssh_a(command: str) -> str:
    """Run ``command`` on test host ``a`` over SSH (the profile's key and known_hosts)."""
    res = subprocess.run(
        [
            "ssh",
            "-i",
            str(TESTHOSTS / "id_ed25519"),
            "-o",
            f"UserKnownHostsFile={TESTHOSTS / 'known_hosts'}",
            "-o",
            "BatchMode=yes",
            "root@127.0.0.11",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


@dataclass(frozen=True)
class Listener:
    addr: str  # as ss prints it, brackets of IPv6 removed: 127.0.0.1, 0.0.0.0, ::, *
    port: int
    pids: frozenset[int]


def listeners_on_a() -> list[Listener]:
    """Host ``a``'s listening TCP sockets (``ss -ltnpH``, as root: with their processes)."""
    out: list[Listener] = []
    for ln in ssh_a("ss -ltnpH").splitlines():
        cols = ln.split()
        addr, _, port = cols[3].rpartition(":")
        pids = frozenset(int(p) for p in re.findall(r"pid=(\d+)", ln))
        out.append(Listener(addr.strip("[]"), int(port), pids))
    return out


# -- a PNG's header and rows, read by hand (no imaging library in the venv) -------------------


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """``(width, height, scanlines)`` of an 8-bit RGB/RGBA PNG (each scanline with its filter
    byte; PNG spec, ISO/IEC 15948 sections 5.2-5.3, 11.2.2, 11.2.4)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    pos, idat, ihdr = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", ihdr[:10])
    assert depth == 8 and color in (2, 6), (depth, color)
    stride = 1 + width * (3 if color == 2 else 4)
    raw = zlib.decompress(idat)
    assert len(raw) == stride * height
    return width, height, [raw[i : i + stride] for i in range(0, len(raw), stride)]


# -- fixtures ---------------------------------------------------------------------------------


@dataclass
class Running:
    """The module's notebook: the CLI process holding its tunnel, and what it printed."""

    cli: CLI
    proc: NotebookProc
    name: str
    job_id: str
    url: str
    local_port: int
    token: str
    host_port: int
    workdir: Path
    since: float
    jobs: list[str]

    @property
    def jupyter(self) -> Jupyter:
        return Jupyter(f"http://127.0.0.1:{self.local_port}", self.token)


def _cleanup(cli: CLI, engine: docker.DockerClient, job_ids: list[str], since: float) -> None:
    """Stop and remove the notebooks this module started: by job id through the CLI, then
    any container it left (label io.gpuconsole.kind=notebook, created since the start, of
    these job ids)."""
    for jid in job_ids:
        cli.run("rm", "--force", jid, timeout=120)
    for c in notebook_containers(engine, since):
        if c.labels.get(LABEL_JOB_ID) in job_ids:
            c.remove(force=True)


@pytest.fixture(scope="module")
def torch_version() -> str:
    """``torch.__version__`` in the image, asked of the image itself."""
    res = subprocess.run(
        ["docker", "run", "--rm", IMAGE, "python", "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.fixture(scope="module")
def nb(
    tmp_path_factory: pytest.TempPathFactory, test_profile: Path, engine: docker.DockerClient
) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("notebook")
    cli = CLI(test_profile, tmp / "state", tmp)
    workdir = Path(tempfile.mkdtemp(prefix="gpuconsole-nb-test-", dir="/tmp"))
    name = f"nbtest-{secrets.token_hex(3)}"
    local_port = _free_port()
    since = time.time() - 1.0
    jobs: list[str] = []
    started = time.monotonic()
    proc = NotebookProc.start(
        cli,
        "--host",
        "a",
        "--workdir",
        str(workdir),
        "--name",
        name,
        "--port",
        str(local_port),
        "--timeout",
        str(START_TIMEOUT_S),
    )
    try:
        url = proc.url()
        print(f"notebook up in {time.monotonic() - started:.1f} s")
        jid = job_id_of(proc)
        jobs.append(jid)
        m = URL_RE.match(url)
        assert m, url
        host_port = int(container_of(engine, jid).labels[PORT_LABEL])
        yield Running(
            cli, proc, name, jid, url, int(m.group(1)), m.group(2), host_port, workdir, since, jobs
        )
    finally:
        proc.kill()
        for ln in proc.stderr:
            m2 = re.match(r"started notebook (\S+) on a ", ln)
            if m2 and m2.group(1) not in jobs:
                jobs.append(m2.group(1))
        _cleanup(cli, engine, jobs, since)
        shutil.rmtree(workdir, ignore_errors=True)


# -- tests, in order ---------------------------------------------------------------------------


def test_url_token_and_no_token_on_command_lines(nb: Running, engine: docker.DockerClient) -> None:
    assert nb.url == f"http://127.0.0.1:{nb.local_port}/lab?token={nb.token}"
    assert nb.local_port != nb.host_port  # the tunnel, not JupyterLab itself
    assert len(nb.token) >= 32
    j = nb.jupyter
    st, body = j.get("/api/status")
    assert st == 200 and isinstance(body, dict) and "started" in body, (st, body)
    st, _ = j.get("/api/status", token=None)
    assert st == 403
    st, _ = j.get("/api/status", token="0" * len(nb.token))
    assert st == 403
    st, body = http("GET", f"{j.base}/api/status?token={nb.token}", None)
    assert st == 200 and "started" in body, (st, body)
    st, _ = http("GET", f"{j.base}/api/contents", None)
    assert st == 403
    # the lab page itself, through the URL as printed
    st, page = http("GET", nb.url, None)
    assert st == 200 and b"JupyterLab" in page, st

    c = container_of(engine, nb.job_id)
    assert c.labels[KIND_LABEL] == "notebook" and c.status == "running"
    cfg = c.attrs["Config"]
    argv = [
        c.attrs["Path"],
        *c.attrs["Args"],
        *(cfg.get("Cmd") or []),
        *(cfg.get("Entrypoint") or []),
    ]
    assert not [a for a in argv if nb.token in a], argv
    assert "jupyter" in " ".join(argv) and f"--port={nb.host_port}" in argv, argv
    assert f"JUPYTER_TOKEN={nb.token}" in cfg["Env"]  # where it is instead
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30)
    assert ps.returncode == 0
    assert "jupyter" in ps.stdout  # JupyterLab's processes are in this list
    assert nb.token not in ps.stdout
    assert nb.token not in ssh_a("ps -eo args")  # the same, asked of host a
    # describe (also the app's, read-only mode included) shows the container masked
    desc = nb.cli.run("describe", nb.job_id)
    assert desc.returncode == 0, desc.stderr
    assert nb.token not in desc.stdout and "JUPYTER_TOKEN=***" in desc.stdout
    command = [ln for ln in desc.stdout.splitlines() if "jupyter lab" in ln and ":" in ln]
    assert command and command[-1].startswith("  command: jupyter lab"), desc.stdout
    assert "torchrun:" not in desc.stdout, desc.stdout  # JupyterLab is no torchrun


def test_listens_on_host_loopback_only(nb: Running, engine: docker.DockerClient) -> None:
    c = container_of(engine, nb.job_id)
    assert c.attrs["HostConfig"]["NetworkMode"] == "host"
    assert not c.attrs["HostConfig"].get("PortBindings")
    assert not c.attrs["NetworkSettings"].get("Ports")
    assert c.ports == {}
    j = nb.jupyter
    kid = j.start_kernel()  # a kernel's ZMQ ports too
    try:
        assert j.execute(kid, "1 + 1")["result"] == "2"  # it runs: its ports are bound
        on_port = [ln for ln in listeners_on_a() if ln.port == nb.host_port]
        assert [(ln.addr, ln.port) for ln in on_port] == [("127.0.0.1", nb.host_port)]
        pids = {int(row[1]) for row in c.top(ps_args="-o user,pid")["Processes"]}
        ours = [ln for ln in listeners_on_a() if ln.pids & pids]
        assert len(ours) >= 1 + 5, ours  # JupyterLab and the kernel's five channels
        assert {ln.addr for ln in ours} == {"127.0.0.1"}, ours
        assert not _accepts(nb.host_port, "127.0.0.11")  # host a's own address
    finally:
        j.delete_kernel(kid)


def test_kernel_runs_torch_over_websocket(nb: Running, torch_version: str) -> None:
    j = nb.jupyter
    st, specs = j.get("/api/kernelspecs")
    assert st == 200 and "python3" in specs["kernelspecs"], (st, specs)
    kid = j.start_kernel()
    try:
        got = j.execute(kid, "import torch; print(torch.__version__); torch.__version__")
        assert got["error"] is None, got
        assert got["reply"] == "ok"
        assert got["stream"] == torch_version + "\n"
        assert got["result"] == repr(torch_version)
        got = j.execute(kid, "int(torch.arange(10).sum())")
        assert got["result"] == "45"
        got = j.execute(kid, "1/0")
        assert got["reply"] == "error" and got["error"]["ename"] == "ZeroDivisionError"
    finally:
        j.delete_kernel(kid)


def _chromium_flags(profile_dir: Path) -> list[str]:
    return [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",
        "--window-size=1280,800",
        "--virtual-time-budget=20000",
    ]


def test_browser_shows_launcher(nb: Running, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} missing: scripts/lib/ensure-chromium installs it")
    res = subprocess.run(
        [*_chromium_flags(tmp_path / "p1"), "--dump-dom", nb.url],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    dom = res.stdout
    assert "jp-Launcher" in dom, dom[-3000:]
    assert "Python 3 (ipykernel)" in dom
    assert "Notebook" in dom and "Console" in dom
    png = tmp_path / "lab.png"
    res = subprocess.run(
        [*_chromium_flags(tmp_path / "p2"), f"--screenshot={png}", nb.url],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    width, height, rows = png_rows(png.read_bytes())
    assert (width, height) == (1280, 800)
    assert len(set(rows)) > 100, len(set(rows))  # not a blank page: text and icons


def test_second_start_of_the_name_refused(nb: Running, engine: docker.DockerClient) -> None:
    t0 = time.time() - 1.0
    res = nb.cli.run("notebook", "--host", "a", "--name", nb.name, "--timeout", "30", timeout=120)
    assert res.returncode == 1, res.stderr
    assert f"a job named {nb.name!r} is already running ({nb.job_id})" in res.stderr
    assert res.stdout == ""
    assert notebook_containers(engine, t0) == []


def test_saved_notebook_lands_in_host_workdir(nb: Running) -> None:
    marker = f"print('saved {uuid.uuid4().hex}')"
    model = {
        "type": "notebook",
        "format": "json",
        "content": {
            "cells": [
                {
                    "cell_type": "code",
                    "id": "c1",
                    "source": marker,
                    "metadata": {},
                    "outputs": [],
                    "execution_count": None,
                }
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
    }
    st, body = http("PUT", f"{nb.jupyter.base}/api/contents/x.ipynb", nb.token, model)
    assert st in (200, 201), (st, body)
    assert body["path"] == "x.ipynb" and body["type"] == "notebook"
    on_host = json.loads((nb.workdir / "x.ipynb").read_text())
    assert on_host["nbformat"] == 4
    assert "".join(on_host["cells"][0]["source"]) == marker  # nbformat stores lines on disk
    (nb.workdir / "marker.txt").write_text(marker)  # what the next notebook checks


def test_ctrl_c_keeps_it_running_and_reattach(nb: Running, engine: docker.DockerClient) -> None:
    assert nb.proc.proc.poll() is None, nb.proc.err_text()
    assert nb.proc.interrupt() == 0, nb.proc.err_text()
    assert "tunnel closed; notebook" in nb.proc.err_text()
    assert nb.proc.lines.get(timeout=10) is None  # stdout held the URL line only
    assert not _accepts(nb.local_port)
    c = container_of(engine, nb.job_id)
    assert c.status == "running"
    assert _accepts(nb.host_port)  # JupyterLab itself, on the host's 127.0.0.1

    again = NotebookProc.start(nb.cli, nb.job_id, "--port", str(nb.local_port))
    try:
        assert again.url(timeout=180) == nb.url
        st, _ = nb.jupyter.get("/api/status")
        assert st == 200
        assert again.interrupt() == 0, again.err_text()
        assert again.lines.get(timeout=10) is None
    finally:
        again.kill()
    # without --port: the server's port number is taken here (host a shares this machine's
    # loopback), so the port derived from the job id; a second re-attach gets the same URL
    urls = []
    for _ in range(2):
        by_name = NotebookProc.start(nb.cli, nb.name)
        try:
            urls.append(by_name.url(timeout=180))
            m = URL_RE.match(urls[-1])
            assert m and m.group(2) == nb.token, m
            assert int(m.group(1)) == stable_port(nb.job_id)
            assert http("GET", f"http://127.0.0.1:{m.group(1)}/api/status", nb.token)[0] == 200
            assert by_name.interrupt() == 0, by_name.err_text()
        finally:
            by_name.kill()
    assert urls[0] == urls[1]
    assert container_of(engine, nb.job_id).status == "running"

    res = nb.cli.run("ps")
    assert res.returncode == 0, res.stderr
    header, *rows = [ln.split() for ln in res.stdout.splitlines()]
    assert header[:3] == ["JOB", "KIND", "STATE"]
    mine = [r for r in rows if r[0] == nb.job_id]
    assert mine and mine[0][1:3] == ["notebook", "running"], res.stdout
    res = nb.cli.run("ps", "--json")
    assert res.returncode == 0, res.stderr
    view = [j for j in json.loads(res.stdout) if j["id"] == nb.job_id]
    assert view and view[0]["kind"] == "notebook" and view[0]["name"] == nb.name, view
    assert view[0]["state"] == "running"


def test_open_hands_the_url_to_the_browser(nb: Running, tmp_path: Path) -> None:
    """``--open`` starts the user's browser (``$BROWSER``, as Python's webbrowser reads it)
    with the URL it printed; here the "browser" records what it was given."""
    got = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {got}\n')
    browser.chmod(0o755)
    env = {**nb.cli.env(), "BROWSER": f"{browser} %s"}
    env.pop("DISPLAY", None)
    proc = subprocess.Popen(
        nb.cli.argv("notebook", nb.job_id, "--open"),
        env=env,
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert URL_RE.match(url), url
        wait_for(lambda: got.exists() and got.read_text().strip() != "", timeout=30)
        assert got.read_text().splitlines() == [url]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stop_then_rm(nb: Running, engine: docker.DockerClient) -> None:
    res = nb.cli.run("stop", nb.job_id)
    assert res.returncode == 0, res.stderr
    c = container_of(engine, nb.job_id)
    assert c.status == "exited"
    assert [ln for ln in listeners_on_a() if ln.port == nb.host_port] == []
    assert not _accepts(nb.host_port)
    res = nb.cli.run("ps", "--json")
    view = [j for j in json.loads(res.stdout) if j["id"] == nb.job_id]
    assert view and view[0]["state"] != "running", view
    res = nb.cli.run("notebook", nb.job_id)  # nothing to re-attach to
    assert res.returncode == 1 and "is not running" in res.stderr, res.stderr
    res = nb.cli.run("rm", nb.job_id)
    assert res.returncode == 0, res.stderr
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(c.id)


def test_workdir_persists_into_a_new_notebook(nb: Running) -> None:
    marker = (nb.workdir / "marker.txt").read_text()
    p = NotebookProc.start(
        nb.cli,
        "--host",
        "a",
        "--workdir",
        str(nb.workdir),
        "--name",
        nb.name,
        "--timeout",
        str(START_TIMEOUT_S),
    )
    try:
        url = p.url()
        jid = job_id_of(p)
        nb.jobs.append(jid)
        assert jid != nb.job_id
        m = URL_RE.match(url)
        assert m and m.group(2) != nb.token, url  # a new token per notebook
        j = Jupyter(f"http://127.0.0.1:{m.group(1)}", m.group(2))
        st, body = j.get("/api/contents/x.ipynb?content=1")
        assert st == 200, (st, body)
        assert body["content"]["cells"][0]["source"] == marker
        st, listing = j.get("/api/contents")
        assert {"x.ipynb", "marker.txt"} <= {e["name"] for e in listing["content"]}
        assert p.interrupt() == 0, p.err_text()
    finally:
        p.kill()
    res = nb.cli.run("rm", "--force", jid)
    assert res.returncode == 0, res.stderr


def test_bad_input_starts_nothing(cli: CLI, engine: docker.DockerClient, tmp_path: Path) -> None:
    t0 = time.time() - 1.0
    res = cli.run("notebook", "--host", "nosuch")
    assert res.returncode == 2 and "--host 'nosuch'" in res.stderr, res.stderr
    res = cli.run("notebook", "--host", "a", "--workdir", "relative/path")
    assert res.returncode == 2 and "--workdir" in res.stderr, res.stderr
    assert "'relative/path'" in res.stderr
    spec = tmp_path / "train.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "kind": "train",
                "name": "t",
                "nodes": ["a"],
                "script": "train_ddp.py",
                "workdir": str(REPO),
            }
        )
    )
    res = cli.run("notebook", str(spec))
    assert res.returncode == 2, res.stderr
    assert "a 'train' spec, not a notebook" in res.stderr and "kind" in res.stderr
    res = cli.run("notebook", "somejob", "--host", "a")
    assert res.returncode == 2 and "--host" in res.stderr, res.stderr
    assert res.stdout == ""
    assert notebook_containers(engine, t0) == []


def test_gpus_errors_name_the_gpus_flag(cli: CLI, engine: docker.DockerClient) -> None:
    """`notebook --gpus` values the host cannot give, or that are no GPU count: the error
    and its fix name `--gpus`, the flag typed (test host ``a`` has no NVIDIA driver)."""
    t0 = time.time() - 1.0
    for gpus in ("5", "0,7"):
        res = cli.run("notebook", "--host", "a", "--gpus", gpus, "--dry-run")
        assert res.returncode == 2, res.stderr
        assert "error: --gpus: host a has no NVIDIA driver" in res.stderr, res.stderr
        fix = [ln for ln in res.stderr.splitlines() if ln.startswith("  fix: ")]
        assert fix and "`--gpus 0`" in fix[0] and "gpus_per_node" not in fix[0], res.stderr
    res = cli.run("notebook", "--host", "a", "--gpus", "-1")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("error: --gpus '-1': not `all`"), res.stderr
    assert notebook_containers(engine, t0) == []
