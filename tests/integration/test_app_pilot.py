"""The app driven by Textual's pilot against the real test hosts (sshd + dockerd + torchrun):
submit from the jobs view, follow both nodes' panes to the end, stop with its confirmation,
describe, readonly, a remapped key, and a host whose sshd dies and comes back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input

from console.app.app import GpuConsoleApp
from console.app.screens.jobs import COLUMNS, JobsScreen
from console.app.screens.logs import LogsScreen
from console.app.screens.modals import AskScreen, ConfirmScreen, TextScreen
from console.app.widgets.logpanes import LogPanes
from console.config import AppConfig
from console.events import FollowStateChanged
from console.profiles import load_profile_file
from console.service import Service
from tests.integration.conftest import CLI, REPO

SIZE = (160, 48)


async def until(
    pilot: object, pred: Callable[[], object], timeout: float = 90, what: str = ""
) -> object:
    """Wait (letting the app run) until ``pred()`` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what or pred}")


@pytest.fixture
def app_env(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> CLI:
    """The app in this process uses the test's private state and config dirs."""
    for k, v in cli.env().items():
        if k.startswith("GPUCONSOLE_"):
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("GPUCONSOLE_PROFILE", raising=False)
    return cli


def make_app(cli: CLI, **kw: object) -> GpuConsoleApp:
    profile = load_profile_file(cli.profile)
    config = kw.pop("config", None) or AppConfig(jobs_refresh_s=2)
    return GpuConsoleApp(Service(profile), config=config, **kw)  # type: ignore[arg-type]


def jobs_screen(app: GpuConsoleApp) -> JobsScreen:
    s = app.get_screen("jobs")
    assert isinstance(s, JobsScreen)
    return s


async def test_submit_from_jobs_view_follow_both_nodes_to_success(app_env: CLI) -> None:
    cli = app_env
    name = f"pilot-{uuid.uuid4().hex[:4]}"
    spec = cli.spec(
        name,
        nodes=["a", "b"],
        args=["--steps", "40", "--out", "/out", "--workers", "0", "--step-sleep", "0.05"],
    )
    app = make_app(cli)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), what="jobs view")
        await pilot.press("n")
        await pilot.pause()
        for ch in str(spec):
            await pilot.press(ch if ch != "/" else "slash")
        await pilot.press("enter")
        confirm = await until(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
            what="the plan to confirm",
        )
        assert isinstance(confirm, ConfirmScreen)
        # the dry-run plan: both nodes' docker run lines and torchrun with world size 4
        assert "docker run" in confirm.detail
        assert "--nnodes 2" in confirm.detail or "--nnodes=2" in confirm.detail
        assert confirm.detail.count("docker run") == 2
        await pilot.press("y")
        logs = await until(
            pilot,
            lambda: isinstance(app.screen, LogsScreen) and app.screen,
            what="log panes of the new job",
        )
        assert isinstance(logs, LogsScreen)
        job_id = logs.job.id
        assert job_id.startswith(name)
        assert f"gpuconsole-{job_id}-n0" in confirm.detail  # the confirmed plan is what ran
        panes = logs.query_one(LogPanes)
        assert len(panes.panes) == 2
        # both nodes' panes get their ranks' step lines
        await until(
            pilot,
            lambda: all(
                any("step 40/40" in b[i].plain for i in range(len(b)))
                for b in logs.by_node.values()
            ),
            timeout=180,
            what="the last step on both nodes",
        )
        ranks = {k for k in logs.by_rank}
        assert ranks == {(0, 0), (0, 1), (1, 2), (1, 3)}
        await until(pilot, lambda: logs.job.state == "succeeded", timeout=120, what="job succeeded")
        assert all(n.exit_code == 0 for n in logs.job.nodes)
        await pilot.pause(0.3)
        for pane in panes.panes:
            assert pane.exit_code == 0
            assert "exited 0" in str(pane.border_title)
        # pane behaviour on the real lines: zoom, pause on scroll up, G resumes, search
        p0 = panes.panes[0]
        p0.focus()
        await pilot.press("z")
        await pilot.pause()
        assert panes.zoomed is p0
        await pilot.press("z")
        await pilot.press("up", "up")
        await pilot.pause()
        assert not p0.following
        await pilot.press("G")
        await pilot.pause()
        assert p0.following
        p0.set_search("step 3/40 ")
        await pilot.pause()
        assert p0.match_count == 2  # ranks 0 and 1 of node 0
        await pilot.press("escape")  # clear search
        # ctrl+s: asks where (default: the cwd), writes the whole log of the node
        await pilot.press("ctrl+s")
        ask = await until(
            pilot, lambda: isinstance(app.screen, AskScreen) and app.screen, what="save prompt"
        )
        field = ask.query_one(Input)  # type: ignore[union-attr]
        assert field.value == str(Path.cwd() / f"{job_id}-node0.log")
        saved = cli.tmp / "saved-node0.log"
        field.value = str(saved)
        await pilot.press("enter")
        await until(
            pilot, lambda: saved.is_file() and "step 40/40" in saved.read_text(), what="saved log"
        )
        text = saved.read_text()
        assert "[n0 r0] step 40/40" in text and "[n0 r1] step 40/40" in text
        assert "[n1 " not in text
        await pilot.press("escape")  # back to the jobs view
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), what="jobs view")
        row = jobs_screen(app).jobs[job_id]
        assert row.state == "succeeded"
    # the archive has both nodes' lines: the CLI reads them back
    res = cli.run("logs", job_id)
    assert "[n1 r3] step 40/40" in res.stdout


async def test_stop_with_confirmation_describe_and_readonly(app_env: CLI) -> None:
    cli = app_env
    spec = cli.spec(
        f"stop-{uuid.uuid4().hex[:4]}",
        args=["--steps", "500", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()

    ro = make_app(cli, readonly=True)
    async with ro.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: job_id in jobs_screen(ro).jobs, what="job listed")
        await pilot.press("S")
        await pilot.pause()
        assert not isinstance(ro.screen, ConfirmScreen)  # stop is hidden and inert
        footer = [str(k.description) for k in ro.screen.query("FooterKey")]
        assert "Logs" in footer and "Describe" in footer
        helped = {desc for _, _, desc, _ in ro.help_rows()}
        assert "Logs" in helped and not {"Stop", "Submit", "Shell"} & helped
        assert "Stop" not in footer and "Submit" not in footer and "Shell" not in footer

    app = make_app(cli)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: job_id in jobs_screen(app).jobs, what="job listed")
        await pilot.press("d")
        text = await until(
            pilot, lambda: isinstance(app.screen, TextScreen) and app.screen, what="describe"
        )
        assert isinstance(text, TextScreen)
        assert f"job {job_id}" in text.text
        assert "docker run" in text.text and "--cap-drop ALL" in text.text
        assert "torchrun: torchrun --nnodes 1 --nproc-per-node 2" in text.text.replace("=", " ")
        await pilot.press("escape")
        await pilot.press("S")
        confirm = await until(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
            what="stop confirmation",
        )
        assert isinstance(confirm, ConfirmScreen)
        assert confirm.detail.startswith("a: docker stop --time ")
        assert f"gpuconsole-{job_id}-n0" in confirm.detail
        await pilot.press("y")
        await until(
            pilot,
            lambda: jobs_screen(app).jobs[job_id].state == "stopped",
            timeout=60,
            what="job stopped",
        )
    res = cli.run("ps", "--json")
    assert f'"{job_id}"' in res.stdout and '"stopped"' in res.stdout


async def test_keymap_remaps_a_binding_by_id(app_env: CLI) -> None:
    app = make_app(app_env, config=AppConfig(keymap={"app.jobs": "j"}), live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")  # no longer bound
        await pilot.pause()
        assert not isinstance(app.screen, JobsScreen)
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), what="jobs via j")


async def test_host_whose_sshd_stops_shows_down_and_comes_back(app_env: CLI) -> None:
    pidfile = Path("/var/tmp/gpuconsole-testhosts/b/sshd.pid")
    app = make_app(app_env)
    async with app.run_test(size=SIZE) as pilot:

        def status(h: str) -> str:
            return dict((n, s) for n, s, _ in app.host_status).get(h, "")

        await until(
            pilot,
            lambda: status("a") == "ok" and status("b") == "ok",
            timeout=60,
            what="both hosts ok",
        )
        master = int(pidfile.read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(master)], capture_output=True, text=True
        ).stdout.split()
        try:
            os.kill(master, signal.SIGTERM)
            for pid in children:
                os.kill(int(pid), signal.SIGKILL)
            await until(pilot, lambda: status("b") == "down", timeout=60, what="b down")
            assert status("a") == "ok"
            reason = dict((n, r) for n, _, r in app.host_status)["b"]
            assert reason
            assert "b ● down" in " ".join(str(w.render()) for w in app.screen.query("StatusLine"))
        finally:
            subprocess.run(
                ["bash", str(REPO / "scripts/testhosts/up")], check=True, capture_output=True
            )
        await until(pilot, lambda: status("b") == "ok", timeout=90, what="b back")


async def test_pane_continues_after_a_cut_ssh_connection(app_env: CLI, engine: object) -> None:
    """The sshd session processes of host a are SIGKILLed mid-job: the node's pane goes on in
    the same pane, and at the end holds exactly the container's lines (none lost, none
    repeated)."""
    import docker as docker_sdk

    from console.jobs.store import Store

    cli = app_env
    pidfile = Path("/var/tmp/gpuconsole-testhosts/a/sshd.pid")
    spec = cli.spec(
        f"cut-{uuid.uuid4().hex[:4]}",
        args=["--steps", "40", "--out", "/out", "--workers", "0", "--step-sleep", "0.15"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    app = make_app(cli)
    seen: list[str] = []
    app.service.bus.subscribe(
        lambda ev: seen.append(ev.state),  # type: ignore[union-attr]
        kinds=(FollowStateChanged,),
    )
    async with app.run_test(size=SIZE) as pilot:
        job = Store().get(job_id)
        assert job is not None
        app.open_logs(job)
        logs = await until(
            pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen, what="log panes"
        )
        assert isinstance(logs, LogsScreen)
        buf = logs.by_node[0]
        await until(
            pilot, lambda: any("step 5/40" in buf[i].plain for i in range(len(buf))), what="step 5"
        )
        master = int(pidfile.read_text().split()[0])
        sessions = subprocess.run(
            ["pgrep", "-P", str(master)], capture_output=True, text=True
        ).stdout.split()
        assert sessions
        for pid in sessions:
            os.kill(int(pid), signal.SIGKILL)
        await until(
            pilot,
            lambda: logs.job.state == "succeeded",
            timeout=180,
            what="job succeeded after the cut",
        )
        await pilot.pause(0.5)
        pane_lines = [(buf[i].rank, buf[i].plain) for i in range(len(buf))]
        client = docker_sdk.from_env()
        (container,) = client.containers.list(
            all=True, filters={"label": f"io.gpuconsole.job-id={job_id}"}
        )
        raw = container.logs(stdout=True, stderr=True).decode().splitlines()
        client.close()
    expected = []
    for ln in raw:
        if ln.startswith("[rank"):
            rank, _, text = ln[len("[rank") :].partition("]:")
            expected.append((int(rank), text.rstrip()))
        else:
            expected.append((None, ln.rstrip()))
    assert "reconnecting" in seen and "following" in seen  # the cut hit the live follow
    assert pane_lines == expected
    assert sum(1 for r, t in pane_lines if t.startswith("step ")) == 80


async def test_quit_right_after_confirming_a_submit_waits_for_the_launch(app_env: CLI) -> None:
    """`q` 0.1 s after `y`: the launch finishes (all nodes) before the app exits; the job is
    recorded and running, never half-made or unrecorded."""
    import docker as docker_sdk

    from console.jobs.store import Store

    cli = app_env
    name = f"quit-{uuid.uuid4().hex[:4]}"
    spec = cli.spec(
        name,
        nodes=["a", "b"],
        args=["--steps", "300", "--out", "/out", "--workers", "0", "--step-sleep", "0.2"],
    )
    app = make_app(cli)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), what="jobs view")
        app.ask_submit()
        await pilot.pause()
        for ch in str(spec):
            await pilot.press(ch if ch != "/" else "slash")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="plan")
        await pilot.press("y")
        await asyncio.sleep(0.1)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, timeout=120, what="app exit")
    jobs = [j for j in Store().jobs() if j.name == name]
    assert len(jobs) == 1
    client = docker_sdk.from_env()
    try:
        found = client.containers.list(
            all=True, filters={"label": f"io.gpuconsole.job-id={jobs[0].id}"}
        )
        assert len(found) == 2 and {c.status for c in found} == {"running"}
    finally:
        client.close()
    cli.run("stop", jobs[0].id, "--grace", "1")


async def test_jobs_view_shows_what_is_known_while_a_host_is_late(
    app_env: CLI, tmp_path: Path
) -> None:
    """A host that never answers holds the first reconcile until its deadline (30 s); the
    jobs view shows the stored jobs (last known states) at once meanwhile."""
    import yaml

    from console.jobs.store import JobRecord, NodeRecord, Store
    from tests.integration.proxies import StallServer

    stall = StallServer()
    try:
        prof = yaml.safe_load(app_env.profile.read_text())
        prof["hosts"]["late"] = {
            "hostname": "127.0.0.1",
            "port": stall.port,
            "user": "root",
            "identity_file": prof["hosts"]["a"]["identity_file"],
        }
        path = tmp_path / "late.yaml"
        path.write_text(yaml.safe_dump(prof))
        job_id = f"known-{uuid.uuid4().hex[:6]}"
        Store().add_job(
            JobRecord(
                id=job_id,
                name="known",
                profile="late",
                profile_source=str(path),
                spec={},
                spec_hash="0" * 12,
                created_at=time.time(),
                node_count=1,
                state="running",
                nodes=[
                    NodeRecord(
                        job_id=job_id,
                        node_rank=0,
                        host="late",
                        container_name=f"{job_id}-n0",
                        state="running",
                    )
                ],
            )
        )
        app = GpuConsoleApp(Service(load_profile_file(path)), config=AppConfig(jobs_refresh_s=2))
        async with app.run_test(size=SIZE) as pilot:
            t0 = time.monotonic()
            await until(
                pilot,
                lambda: job_id in jobs_screen(app).jobs,
                timeout=20,
                what="the stored job in the jobs view",
            )
            assert time.monotonic() - t0 < 10  # not after the reconcile's 30 s deadline
            assert jobs_screen(app).jobs[job_id].state == "running"
    finally:
        stall.close()


def ps_job(cli: CLI, job_id: str) -> dict[str, object]:
    import json

    res = cli.run("ps", "--json", "--all")
    assert res.returncode == 0, res.stderr
    return next(j for j in json.loads(res.stdout) if j["id"] == job_id)


async def test_a_job_is_pending_until_its_first_line(app_env: CLI, tmp_path: Path) -> None:
    """Started but silent (here until the test says go; torchrun's imports and rendezvous
    take 10-30 s on these hosts): `pending` in the jobs view and `ps --json`, then `running`
    from its first line."""
    cli = app_env
    name = f"silent-{uuid.uuid4().hex[:4]}"
    work = tmp_path / "work"
    work.mkdir()
    (work / "silent.py").write_text(
        "import os, time\n"
        "while not os.path.exists('/out/go'):\n"
        "    time.sleep(0.1)\n"
        "print('first line', flush=True)\n"
        "time.sleep(600)\n"
    )
    out = cli.tmp / "out" / name
    out.mkdir(parents=True)
    spec = cli.spec(name, workdir=str(work), script="silent.py", args=[], nproc_per_node=1)
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    try:
        app = make_app(cli)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            await until(pilot, lambda: job_id in jobs_screen(app).jobs, what="job listed")
            # a reconcile that saw its container running and no line yet
            await until(
                pilot,
                lambda: (
                    (j := jobs_screen(app).jobs[job_id]).nodes[0].started_at is not None
                    and j.state == "pending"
                ),
                timeout=60,
                what="pending, its container started",
            )
            row = cli.run("ps").stdout
            assert f"{job_id}" in row and "pending" in row
            job = ps_job(cli, job_id)
            assert job["state"] == "pending", job
            assert [n["state"] for n in job["nodes"]] == ["pending"]  # type: ignore[attr-defined]
            (out / "go").write_text("")
            await until(
                pilot,
                lambda: jobs_screen(app).jobs[job_id].state == "running",
                timeout=60,
                what="running after its first line",
            )
        assert ps_job(cli, job_id)["state"] == "running"
        assert "first line" in cli.run("logs", job_id).stdout
    finally:
        cli.run("stop", job_id, "--grace", "1")


async def test_a_stopped_job_exits_143_and_d_removes_it(app_env: CLI) -> None:
    """A job stopped from the jobs view: EXIT 143 (128 + SIGTERM, as README and `submit
    --follow` say) in the view and `ps --json`, each node keeping Docker's own code
    (torchrun's 1 after its SignalException); `D` refuses it while it runs, then removes
    its container after a confirmation listing it."""
    import docker as docker_sdk

    cli = app_env
    spec = cli.spec(
        f"exit-{uuid.uuid4().hex[:4]}",
        args=["--steps", "500", "--step-sleep", "0.2", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    app = make_app(cli)
    said: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        notify = app.notify

        def record(message: str, **kw: object) -> None:
            said.append(message)
            notify(message, **kw)  # type: ignore[arg-type]

        app.notify = record  # type: ignore[method-assign]
        await pilot.press("2")
        await until(pilot, lambda: job_id in jobs_screen(app).jobs, what="job listed")
        await until(
            pilot,
            lambda: "step 2/500" in cli.run("logs", job_id).stdout,
            timeout=120,
            what="training steps",
        )
        jobs_screen(app).set_filter(f"job:{job_id}")
        await pilot.pause()
        await pilot.press("D")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("stop it first (S)" in m for m in said), said
        await pilot.press("S")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="stop confirm")
        await pilot.press("y")
        await until(
            pilot,
            lambda: jobs_screen(app).jobs[job_id].state == "stopped",
            timeout=90,
            what="job stopped",
        )
        job = jobs_screen(app).jobs[job_id]
        assert job.exit_code == 143, job
        table = jobs_screen(app).query_one("#jobs-table")
        exit_cell = table.get_row(job_id)[COLUMNS.index("EXIT")]  # type: ignore[attr-defined]
        assert str(exit_cell) == "143"
        view = ps_job(cli, job_id)
        assert (view["state"], view["exit_code"]) == ("stopped", 143), view
        node_codes = [n["exit_code"] for n in view["nodes"]]  # type: ignore[attr-defined]
        client = docker_sdk.from_env()
        try:
            recorded = client.containers.get(f"gpuconsole-{job_id}-n0").attrs["State"]
        finally:
            client.close()
        assert node_codes == [recorded["ExitCode"]]  # Docker's own code, kept per node
        await pilot.press("D")
        confirm = await until(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
            what="remove confirm",
        )
        assert isinstance(confirm, ConfirmScreen)
        assert confirm.detail.splitlines()[0] == f"a: docker rm gpuconsole-{job_id}-n0"
        await pilot.press("y")
        await until(
            pilot,
            # removed: marked so, or already gone from the listing the view shows
            lambda: (
                job_id not in jobs_screen(app).jobs
                or jobs_screen(app).jobs[job_id].removed_at is not None
            ),
            timeout=90,
            what="job removed",
        )
    assert ps_job(cli, job_id)["state"] == "removed"
    assert "step 2/500" in cli.run("logs", job_id).stdout  # archived first
