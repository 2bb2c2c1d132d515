"""``watch`` prints the alerts already firing when it starts (``console/watch/runner.py``).

The user's report: ``watch --json | head -n 1`` waited, because an alert carried over from
the alert store was said only on stderr (``still firing since ...``). Here the alert is in a
real ``alerts.sqlite3`` (a temporary state dir) as the profile's watch stored it; ``watch``
runs over a real recording (``tests/data/traces/h200-idle.jsonl``, ``--replay``: no host is
asked) with the rule engine's own watcher reading that store, in-process and as the command
in a shell pipeline.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.alerts.model import Alert, AlertChanged
from console.alerts.store import AlertStore, alert_to_json
from console.profiles import HostConfig, Profile
from console.service import Service
from console.watch.runner import Watch, WatchOptions

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "data" / "traces" / "h200-idle.jsonl"
# every rule but host_unreachable off: nothing but the stored alert can be printed. It is on
# host b, which the recording (host vm) says nothing of: it stays firing while watch runs.
RULES_OFF = (
    "gpu_lost",
    "xid",
    "ecc_uncorrected",
    "remapped_rows_pending",
    "gpu_temperature",
    "gpu_throttle",
    "gpu_memory_high",
    "job_failed",
    "job_hung",
    "straggler",
    "gpus_idle",
)
PROFILE = Profile(
    name="lab",
    hosts={"vm": HostConfig(transport="local"), "b": HostConfig(hostname="127.0.0.1", port=1)},
    alerts={r: {"enabled": False} for r in RULES_OFF},
)


def store_firing(root: Path, profile: str, host: str) -> Alert:
    """``host_unreachable/<host>`` fired 5 minutes ago, stored as ``profile``'s watch does."""
    now = time.time()
    alert = Alert(
        key=f"host_unreachable/{host}",
        rule="host_unreachable",
        severity="critical",
        summary=f"host {host} unreachable for 60 s+: cannot connect to "
        "127.0.0.1:1: connection refused",
        host=host,
        since=now - 360,
        fired_at=now - 300,
    )
    store = AlertStore(root, profile=profile)
    store.record([AlertChanged(alert, "fired", alert.fired_at)])
    store.close()
    return alert


async def run_watch(root: Path, as_json: bool) -> tuple[list[str], list[str]]:
    """One ``watch`` over the replay, stopped as soon as it has started; (stdout, stderr)."""
    from console.jobs.store import Store

    out: list[str] = []
    said: list[str] = []
    async with Service(PROFILE, store=Store(root)) as svc:
        stop = asyncio.Event()
        w = Watch(
            svc,
            WatchOptions(as_json=as_json, replay=TRACE, speed=0),
            emit=out.append,
            say=said.append,
        )
        await asyncio.wait_for(w.run(stop, on_started=stop.set), 60)
    return out, said


@pytest.mark.parametrize("as_json", [True, False])
async def test_alerts_firing_at_start_are_printed_first(tmp_path: Path, as_json: bool) -> None:
    mine = store_firing(tmp_path, "lab", "b")
    other = store_firing(tmp_path, "elsewhere", "dead")  # another profile's: not lab's
    out, said = await run_watch(tmp_path, as_json)
    assert len(out) == 1, out
    if as_json:
        assert json.loads(out[0]) == {
            "type": "alert",
            "change": "firing",
            "at": mine.fired_at,
            "initial": True,
            "alert": json.loads(alert_to_json(mine)),
        }
    else:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mine.fired_at))
        assert out[0] == f"{when}  CRITICAL  firing    {mine.summary}  [{mine.key}]"
    # stderr still says it is carried over (not paged again)
    assert [s for s in said if s.startswith("still firing since")] == [
        f"still firing since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(mine.fired_at))}"
        f": {mine.summary} [{mine.key}]"
    ]
    assert not any(other.key in s for s in out + said)


def test_watch_json_into_head_gets_the_firing_alert_and_ends(tmp_path: Path) -> None:
    """``gpuconsole watch --json | head -n 1``: the first line is the alert firing at start;
    head exits, and watch ends with exit 0 at its closed stdout."""
    profile = tmp_path / "lab.yaml"
    profile.write_text(
        "hosts:\n  vm: {transport: local}\n  b: {hostname: 127.0.0.1, port: 1}\n"
        "alerts:\n" + "".join(f"  {r}: {{enabled: false}}\n" for r in RULES_OFF)
    )
    mine = store_firing(tmp_path, "lab", "b")
    env = {**os.environ, "GPUCONSOLE_STATE_DIR": str(tmp_path)}
    env.pop("GPUCONSOLE_PROFILE", None)
    cmd = (
        f"{sys.executable} -m console.cli -p {profile} watch --json --replay {TRACE} "
        '--speed 0 | head -n 1; echo "watch exit ${PIPESTATUS[0]}" >&2'
    )
    proc = subprocess.Popen(
        ["bash", "-c", cmd],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:  # head still waits: end the pipeline (its own group)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    lines = stdout.splitlines()
    assert len(lines) == 1, (stdout, stderr)
    got = json.loads(lines[0])
    assert (got["change"], got["initial"], got["alert"]["key"]) == ("firing", True, mine.key)
    assert stderr.splitlines()[-1] == "watch exit 0", stderr
