"""Log panes under load: 8 streams of N lines/s into the app's log panes, against the same
streams through ``ssh host docker logs -f`` in 8 tmux panes (the baseline users have today).

Sources: 8 real containers on the two test hosts (4 labelled host ``a``, 4 host ``b``; one
dockerd serves both), each a python3 loop writing ``--rate`` lines/s (paced every 10 ms) for
``--seconds`` s from a common start time, then idling. They carry gpuconsole's job labels
(``console/jobs/labels.py``), so the app adopts them as one job of 8 nodes and follows each
through the real service (an SSH channel to the Docker socket, ``remote.logs.follow_container``), 4
over host a's SSH connection and 4 over host b's. Lines look like a training log: a torchrun
rank prefix, a step record; every 10th line is coloured (ANSI SGR), every 50th is a tqdm bar
redrawn 4 times with ``\\r``. Each line carries a marker ``k<node>:<seq> @<ms>`` (sequence
number and milliseconds since the start) in its last ``\\r`` segment, at the start, so it is
visible in a narrow pane and after the CR overlay.

Two terminals, side by side in the same run, each its own tmux server, 200x60:

- gpuconsole: ``log_panes.py app`` (a launcher of the real :class:`GpuConsoleApp` on the test
  profile: it only opens the job's log panes once the app adopted the job, and writes
  in-process numbers to a JSON file: lines taken, key-event receive times, RSS). Nothing in
  ``console/`` is changed for the benchmark.
- baseline: 8 tmux panes (``select-layout tiled``), each ``ssh -i KEY ... root@HOST docker
  logs -f CONTAINER`` with OpenSSH.

Measured (both sides, from outside, through ``tmux capture-pane`` as a person sees it):

- key-to-screen latency: the time from ``tmux send-keys`` to the change appearing in
  ``capture-pane``, polled every ``--poll-ms`` (2 ms: with a capture taking 3-5 ms, a change
  is seen within about 6 ms of being drawn; at 10 ms, the earlier default, within about 14 ms,
  which made a 5 ms difference read as a 14 ms one). gpuconsole: ``t`` (timestamps on/off in the
  focused pane; detected as HH:MM:SS.mmm prefixes appearing/disappearing). Baseline: a unique
  token typed into a pane (the terminal echoes it; ssh without ``-t`` leaves the tty cooked),
  detected in the pane's screen plus scrollback. One probe a second per side. The same probes
  before the streams start give the floor (tmux + capture overhead on an idle screen).
- screen lag: for each capture, now minus the production time of the newest line on screen,
  per pane; and the rate at which the newest shown sequence number advances (lines/s).
- lines received: the app's ``LogsScreen.lines_taken`` and the distinct markers in its local
  archive, against the lines produced (nodes x rate x seconds). The baseline's pty is lossless
  and in order: its count is the newest sequence number on screen at the end.
- memory and CPU: RSS (``/proc/PID/status`` VmRSS) each second, CPU (utime + stime) of the
  app process with its children (the log intake process) and its tmux server; of the 8 ssh
  clients and the baseline's tmux server.

Run (needs ``scripts/testhosts/up``)::

    .venv/bin/python scripts/bench/log_panes.py --seconds 60 [--rate 2000] [--buffer-lines N]
        [--sides both|app|tmux] [--intake process|loop] [--py-spy FILE.svg|.json|.txt]
        [--py-spy-rate N] [--py-spy-gil] [--trace-loop]

``--intake`` picks where the app reads the streams: ``process`` (the app's own choice, a child
process) or ``loop`` (the app's loop, for comparison). Besides the table it prints how late a
20 ms heartbeat on the app's loop ran, the cyclic GC's pauses by generation (wall and CPU
time, objects freed) and the objects it tracks at exit, the layout passes, and where the
slowest keys' time went: to the app's input thread, to dispatch on the loop, to the next
screen update and to the capture that saw it, with the GC passes, loop stalls and flushes to
the terminal in that window (``--trace-loop`` adds every loop callback over 10 ms).

Prints a markdown table with the gpuconsole column, the baseline column and their ratio.
Every container and tmux server it started is removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TESTHOSTS = Path(os.environ.get("GPUCONSOLE_TESTHOSTS_DIR", "/var/tmp/gpuconsole-testhosts"))
IMAGE = "gpuconsole/torch:2.13.0-cpu"
NODES = 8
HOSTS = {"a": "127.0.0.11", "b": "127.0.0.12"}
WIDTH, HEIGHT = 200, 60
TICK_HZ = 100  # the generators write a batch every 10 ms

#: The line generator run in each container (python3, stdlib only). argv: node rate seconds.
#: It starts at the Unix time written to /bench/go (a bind mount), so every side is ready first.
GENERATOR = r"""
import os, sys, time
node, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
out = sys.stdout
out.write(f"[rank{node}]:ready node {node}, {rate} lines/s for {seconds:g} s\n"); out.flush()
while not os.path.exists("/bench/go"):
    time.sleep(0.05)
t0 = float(open("/bench/go").read())
while time.time() < t0:
    time.sleep(0.005)
total, seq, tick = int(rate * seconds), 0, 1.0 / 100
while seq < total:
    now = time.time()
    due = min(total, int((now - t0) * rate) + 1)
    ms = int((now - t0) * 1000)
    parts = []
    while seq < due:
        mark = f"k{node}:{seq:07d} @{ms:06d}"
        step = seq // 8
        if seq % 50 == 49:  # a tqdm bar redrawn with \r, the marker in its last state
            p, e = (seq // 50) % 100, step // 1000
            bars = [f"epoch {e}: {q:3d}%|{'#' * (q // 10):10s}| {q * 10}/1000"
                    for q in (max(0, p - 3), max(0, p - 2), max(0, p - 1))]
            parts.append(f"[rank{node}]:" + "\r".join(bars) + f"\r{mark} epoch {e}: {p:3d}%"
                         f"|{'#' * (p // 10):10s}| {p * 10}/1000 [00:{p % 60:02d}<00:30]\n")
        elif seq % 10 == 9:  # coloured
            parts.append(f"[rank{node}]:\x1b[32m{mark} INFO\x1b[0m step {step} \x1b[1mloss"
                         f"\x1b[0m {2.5 - (seq % 1000) / 1000:.4f} lr 3.0e-04 grad 0.8{seq % 97}\n")
        else:
            parts.append(f"[rank{node}]:{mark} step {step} loss {2.5 - (seq % 1000) / 1000:.4f}"
                         f" lr 3.0e-04 tok/s 51{seq % 89:03d} mem 61.2GiB\n")
        seq += 1
    out.write("".join(parts)); out.flush()
    time.sleep(max(0.0, tick - (time.time() - now)))
out.write(f"[rank{node}]:done node {node}: {total} lines\n"); out.flush()
time.sleep(100000)
"""

MARK_RE = re.compile(r"k(\d):(\d{7}) @(\d{6})")
TS_RE = re.compile(r"\b\d\d:\d\d:\d\d\.\d\d\d\b")


# -- small helpers ------------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0.0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Child processes of ``pid``, recursively (the app's log intake process among them)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            out += [k, *descendants(k)]
    return out


def proc_rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB (0.0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1, nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def newest_marks(text: str) -> dict[int, tuple[int, int]]:
    """Per node, the (seq, ms) of the highest sequence number in ``text``."""
    out: dict[int, tuple[int, int]] = {}
    for m in MARK_RE.finditer(text):
        node, seq, ms = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if seq > out.get(node, (-1, 0))[0]:
            out[node] = (seq, ms)
    return out


def probe_token(i: int) -> str:
    """A token typed into a baseline pane: ``ZQ`` and two capitals (never in the logs)."""
    return "ZQ" + chr(65 + (i // 26) % 26) + chr(65 + i % 26)


class Tmux:
    """One tmux server (its own socket) with one session ``bench`` of WIDTH x HEIGHT."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.sock = str(tmp / f"tmux-{name}")
        self.started = False

    def __call__(self, *args: str) -> str:
        res = subprocess.run(
            ["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=30
        )
        if res.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        envs = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        self(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "bench",
            "-x",
            str(WIDTH),
            "-y",
            str(HEIGHT),
            *envs,
            command,
        )
        self.started = True
        self("set-option", "-g", "status", "off")
        self("set-option", "-g", "history-limit", "5000")
        self("set-option", "-g", "remain-on-exit", "on")

    def server_pid(self) -> int:
        return int(self("display-message", "-p", "#{pid}").strip())

    def panes(self) -> list[tuple[str, int]]:
        """(pane id, pid of its command) of every pane, in index order."""
        out = self("list-panes", "-s", "-F", "#{pane_id} #{pane_pid}")
        return [(p, int(pid)) for p, pid in (ln.split() for ln in out.splitlines())]

    def capture(self, target: str, history: int = 0, join: bool = False) -> str:
        """The pane's screen (and ``history`` lines of scrollback); ``join``: wrapped lines
        joined (``-J``), so a token echoed across a wrap is still one string."""
        args = ["capture-pane", "-p", "-t", target]
        if history:
            args += ["-S", f"-{history}"]
        if join:
            args.append("-J")
        return self(*args)

    def kill(self) -> None:
        if self.started:
            subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True)
            self.started = False


# -- the streams --------------------------------------------------------------------------------


@dataclass
class Streams:
    """The 8 labelled generator containers of one run."""

    job_id: str
    rate: int
    seconds: float
    go_dir: Path
    names: list[str] = field(default_factory=list)

    def host_of(self, node: int) -> str:
        return "a" if node < NODES // 2 else "b"

    def start(self) -> None:
        import docker

        from console.jobs.labels import NodeLabels

        client = docker.from_env()
        try:
            for node in range(NODES):
                name = f"gpuconsole-{self.job_id}-n{node}"
                labels = NodeLabels(
                    self.job_id,
                    self.job_id.rsplit("-", 1)[0],
                    node,
                    NODES,
                    1,
                    self.host_of(node),
                    "bench0000000",
                    time.time(),
                )
                client.containers.run(
                    IMAGE,
                    [
                        "python3",
                        "-u",
                        "-c",
                        GENERATOR,
                        str(node),
                        str(self.rate),
                        str(self.seconds),
                    ],
                    name=name,
                    labels=labels.to_labels(),
                    detach=True,
                    network_mode="none",
                    volumes={str(self.go_dir): {"bind": "/bench", "mode": "ro"}},
                )
                self.names.append(name)
        finally:
            client.close()

    def go(self, t0: float) -> None:
        """Start every stream at Unix time ``t0``."""
        tmp = self.go_dir / "go.tmp"
        tmp.write_text(f"{t0:.3f}")
        tmp.replace(self.go_dir / "go")

    def present(self) -> int:
        """How many of the containers still exist (another process may remove them)."""
        import docker

        client = docker.from_env()
        try:
            return sum(
                1
                for n in self.names
                if client.containers.list(all=True, filters={"name": f"^{n}$"})
            )
        finally:
            client.close()

    def remove(self) -> None:
        import docker

        client = docker.from_env()
        try:
            for n in self.names:
                try:
                    client.containers.get(n).remove(force=True)
                except docker.errors.NotFound:
                    pass
        finally:
            client.close()
        self.names.clear()


# -- one side: probes, lag samples, resources --------------------------------------------------


@dataclass
class Side:
    """What one terminal (gpuconsole or baseline) measured."""

    name: str
    floor_ms: list[float] = field(default_factory=list)
    key_ms: list[float] = field(default_factory=list)
    probes_timed_out: int = 0
    lag_ms: list[float] = field(default_factory=list)
    newest: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    capture_ms: list[float] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)
    key_sent: list[float] = field(default_factory=list)


class Prober:
    """Sends a key and polls ``capture-pane`` until the change shows (both sides alike).

    Args:
        send: sends the probe key (probe index given).
        shown: given the probe index and a fresh capture, whether the change is visible.
        capture: takes a capture (the same call the lag sampler uses).
        timeout_s: a probe not seen by then is counted as timed out.
    """

    def __init__(
        self,
        send: Callable[[int], None],
        shown: Callable[[int, str], bool],
        capture: Callable[[], str],
        poll_s: float,
        timeout_s: float = 20.0,
    ) -> None:
        self.send, self.shown, self.capture, self.poll_s = send, shown, capture, poll_s
        self.timeout_s = timeout_s
        self.i = 0

    def probe(self, side: Side, timeout: float | None = None) -> float | None:
        """One probe; returns ms from send to seen, or None after ``timeout`` s (default:
        the prober's)."""
        timeout = self.timeout_s if timeout is None else timeout
        i = self.i
        self.i += 1
        t_send = time.time()
        side.key_sent.append(t_send)
        self.send(i)
        while time.time() - t_send < timeout:
            c0 = time.time()
            text = self.capture()
            side.capture_ms.append(1000 * (time.time() - c0))
            if self.shown(i, text):
                return 1000 * (time.time() - t_send)
            time.sleep(self.poll_s)
        return None


def run_side(
    side: Side,
    prober: Prober,
    sample: Callable[[], str],
    t0: float,
    t_end: float,
    drain: float,
    stop: threading.Event,
    floor_probes: int,
) -> None:
    """Floor probes before ``t0``, then until ``t_end``: one probe a second and a lag sample
    every 0.25 s in between (lag only while the streams run, i.e. before ``t_end - drain``)."""
    for _ in range(floor_probes):
        if time.time() > t0 - 2 or stop.is_set():
            break
        ms = prober.probe(side, timeout=5.0)
        if ms is not None:
            side.floor_ms.append(ms)
        time.sleep(0.2)
    if prober.i % 2:  # leave the probe state where it started (timestamps off)
        prober.probe(side, timeout=5.0)
    while time.time() < t0 and not stop.is_set():
        time.sleep(0.01)
    next_probe = t0 + 0.5
    while time.time() < t_end and not stop.is_set():
        now = time.time()
        if now >= next_probe:
            ms = prober.probe(side)
            if ms is None:
                side.probes_timed_out += 1
            else:
                side.key_ms.append(ms)
            next_probe = max(next_probe + 1.0, time.time() + 0.25)
            continue
        text = sample()
        t = time.time()
        for node, (seq, ms_) in newest_marks(text).items():
            if t <= t_end - drain:  # after the streams stopped the newest line ages anyway
                side.lag_ms.append(1000 * (t - t0) - ms_)
            side.newest.setdefault(node, []).append((t, seq))
        time.sleep(0.25)


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (``/proc/stat``)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def sample_resources(
    sides: list[tuple[Side, Callable[[], list[int]]]], stop: threading.Event, machine: Side
) -> None:
    """Each second: summed RSS (MiB) and CPU seconds of each side's processes, and the busy
    CPU seconds of the whole machine (into ``machine.cpu``)."""
    while not stop.is_set():
        t = time.time()
        machine.cpu.append((t, machine_busy_s()))
        for side, pids in sides:
            ps = pids()
            side.rss.append((t, sum(proc_rss_mib(p) for p in ps)))
            side.cpu.append((t, sum(proc_cpu_s(p) for p in ps)))
        stop.wait(1.0)


# -- the app launcher (runs inside the gpuconsole tmux server) --------------------------------


def run_app(
    job_id: str,
    stats_path: Path,
    profile_path: Path,
    intake: str = "process",
    trace_loop: bool = False,
) -> int:
    """The real app on ``profile_path``; opens ``job_id``'s log panes once adopted; writes
    in-process numbers to ``stats_path`` every 2 s and at exit."""
    import asyncio
    import gc
    import logging

    import console.app  # noqa: F401  # first, as in the app: it sets Textual up

    # isort: split
    from textual import events

    from console.app.app import GpuConsoleApp
    from console.app.screens.logs import LogsScreen
    from console.config import load_config
    from console.jobs.store import state_dir
    from console.profiles import load_profile_file
    from console.service import Intake, Service

    LogsScreen.intake = cast(Intake, intake)
    logging.basicConfig(
        level=logging.INFO,
        filename=str(state_dir() / "gpuconsole.log"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    from textual.drivers import _writer_thread

    # when the output thread's flushes to the terminal returned, and the app's screen writes:
    # only within KEY_WINDOW_S of a key (all the report reads; the stats stay small, so
    # writing them costs the app next to nothing)
    flushes: list[float] = []
    last_key = [0.0]
    KEY_WINDOW_S = 0.5

    def writer_run(self: Any) -> None:  # textual's WriterThread.run, timing each flush
        write, flush, get, qsize = (
            self._file.write,
            self._file.flush,
            self._queue.get,
            self._queue.qsize,
        )
        while True:
            text = get()
            if text is None:
                break
            write(text)
            if qsize() == 0:
                flush()
                now = time.time()
                if now - last_key[0] < KEY_WINDOW_S:
                    flushes.append(now)
        flush()

    _writer_thread.WriterThread.run = writer_run  # type: ignore[method-assign]

    class BenchApp(GpuConsoleApp):
        """GpuConsoleApp plus the benchmark's bookkeeping (no behaviour changed)."""

        def __init__(self, service: Service, **kw: Any) -> None:
            super().__init__(service, **kw)
            self.keys: list[tuple[float, str]] = []
            self.key_reads: list[tuple[float, str]] = []  # when the input thread parsed a key
            self.writes: list[float] = []  # when a screen update went to the terminal
            self.timeline: list[tuple[float, int, float]] = []
            self.frame_log: list[tuple[float, int, float, float]] = []
            self.opened_at: float | None = None
            self.logs: LogsScreen | None = None
            self._last_key: events.Key | None = None

        def on_mount(self) -> None:  # Textual also runs GpuConsoleApp.on_mount
            driver = self._driver
            if driver is not None:
                parsed = driver.process_message

                def process_message(message: Any) -> None:  # runs in the input thread
                    if isinstance(message, events.Key):
                        self.key_reads.append((time.time(), message.key))
                    parsed(message)

                driver.process_message = process_message  # type: ignore[method-assign]
            self.set_interval(0.2, self._open_when_adopted)
            self.set_interval(1.0, self._tick)
            self.stalls: list[tuple[float, float]] = []  # (time, ms a 20 ms heartbeat ran late)
            # (time, generation, ms, objects freed, CPU ms of the collecting thread)
            self.gc_pauses: list[tuple[float, int, float, int, float]] = []
            gc_started: list[float] = []

            def on_gc(phase: str, info: dict[str, int]) -> None:
                if phase == "start":
                    gc_started[:] = [time.perf_counter(), time.thread_time()]
                elif gc_started:
                    self.gc_pauses.append(
                        (
                            time.time(),
                            info["generation"],
                            1000 * (time.perf_counter() - gc_started[0]),
                            info.get("collected", 0),
                            1000 * (time.thread_time() - gc_started[1]),
                        )
                    )

            gc.callbacks.append(on_gc)
            loop = asyncio.get_running_loop()

            def beat(due: float) -> None:
                now = time.perf_counter()
                self.stalls.append((time.time(), 1000 * (now - due)))
                loop.call_later(0.02, beat, now + 0.02)

            loop.call_later(0.02, beat, time.perf_counter() + 0.02)

            # every loop callback over 10 ms: when it ended, wall and CPU ms, what it was
            # (``--trace-loop``: timing every callback costs the app some CPU of its own)
            self.slow_callbacks: list[tuple[float, float, float, str]] = []
            run = asyncio.events.Handle._run
            slow = self.slow_callbacks

            def timed_run(handle: asyncio.events.Handle) -> None:
                w0, c0 = time.perf_counter(), time.thread_time()
                run(handle)
                wall = time.perf_counter() - w0
                if wall > 0.01:
                    cb = getattr(handle, "_callback", None)
                    what = getattr(cb, "__qualname__", None) or repr(cb)[:80]
                    coro = getattr(getattr(cb, "__self__", None), "get_coro", None)
                    if coro is not None:
                        c = coro()
                        what += " " + getattr(c, "__qualname__", repr(c)[:60])
                    slow.append((time.time(), 1000 * wall, 1000 * (time.thread_time() - c0), what))

            if trace_loop:
                asyncio.events.Handle._run = timed_run  # type: ignore[method-assign,assignment]

            # every layout pass of a screen: when it ended, ms
            from textual.screen import Screen

            self.layouts: list[tuple[float, float]] = []
            relayout = Screen._refresh_layout
            layouts = self.layouts

            def timed_layout(screen: Screen[Any], *a: Any, **kw: Any) -> None:
                w0 = time.perf_counter()
                relayout(screen, *a, **kw)
                layouts.append((time.time(), 1000 * (time.perf_counter() - w0)))

            Screen._refresh_layout = timed_layout  # type: ignore[method-assign,assignment]

        def _end_update(self) -> None:
            super()._end_update()
            now = time.time()
            if now - last_key[0] < KEY_WINDOW_S:
                self.writes.append(now)

        def _open_when_adopted(self) -> None:
            if self.logs is not None:
                return
            job = self.service.store.get(job_id)
            if job is None:
                return
            self.open_logs(job)
            self.logs = next(s for s in self.screen_stack if isinstance(s, LogsScreen))
            self.opened_at = time.time()

        def _tick(self) -> None:
            taken = self.logs.lines_taken if self.logs is not None else 0
            self.timeline.append((time.time(), taken, proc_rss_mib(os.getpid())))
            fr = self.frames()
            if fr is not None:
                self.frame_log.append(
                    (time.time(), int(fr["frames"]), fr["interval_s"], fr["cost_s"])
                )
            if len(self.timeline) % 2 == 0:
                self.write_stats()

        async def on_event(self, event: events.Event) -> None:
            # a key bubbles from the focused widget back up to the app: count it once
            if isinstance(event, events.Key) and event is not self._last_key:
                self._last_key = event
                self.keys.append((time.time(), event.key))
                last_key[0] = self.keys[-1][0]
            await super().on_event(event)

        def write_stats(self) -> None:
            logs = self.logs
            data = {
                "opened_at": self.opened_at,
                "keys": self.keys,
                "key_reads": self.key_reads,
                "writes": self.writes,
                "timeline": self.timeline,
                "lines_taken": logs.lines_taken if logs else 0,
                "buffers": {str(n): len(b) for n, b in logs.by_node.items()} if logs else {},
                "merged": len(logs.merged) if logs else 0,
                "stalls": self.stalls,
                "gc": self.gc_pauses,
                "slow_callbacks": self.slow_callbacks,
                "layouts": self.layouts,
                "flushes": flushes[-20000:],
                "gc_objects": getattr(self, "gc_objects", None),
                "frames": self.frame_log,
            }
            tmp = stats_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(stats_path)

        def frames(self) -> dict[str, float] | None:
            """The log panes' frame clock: frames drawn, their interval and cost now."""
            from console.app.widgets.logpanes import LogPanes

            try:
                clock = self.logs.query_one(LogPanes).clock if self.logs else None
            except Exception:  # the screen is gone
                return None
            if clock is None:
                return None
            return {"frames": clock.frames, "interval_s": clock.interval, "cost_s": clock.cost}

        async def on_unmount(self) -> None:  # runs before GpuConsoleApp.on_unmount
            from collections import Counter

            kinds = Counter(type(o).__qualname__ for o in gc.get_objects())
            self.gc_objects = [len(gc.get_objects()), kinds.most_common(8)]
            self.write_stats()

    app = BenchApp(Service(load_profile_file(profile_path)), config=load_config())
    return app.run() or 0


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """Everything one benchmark run started, for cleanup."""

    tmp: Path
    streams: Streams | None = None
    tmuxes: list[Tmux] = field(default_factory=list)

    def cleanup(self) -> None:
        for t in self.tmuxes:
            t.kill()
        if self.streams is not None:
            self.streams.remove()


class Vanished(Exception):
    """Stream containers were removed by another process (see ``--attempts``)."""


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def archive_counts(state: Path, job_id: str) -> tuple[int, int]:
    """(lines, distinct markers) in the app's local archive of the job."""
    lines = distinct = 0
    for f in sorted((state / "logs" / job_id).glob("node*.log")):
        seen: set[tuple[int, int]] = set()
        with open(f, encoding="utf-8", errors="replace") as fh:
            for ln in fh:
                lines += 1
                for m in MARK_RE.finditer(ln):
                    seen.add((int(m.group(1)), int(m.group(2))))
        distinct += len(seen)
    return lines, distinct


def bench(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    profile = TESTHOSTS / "profile.yaml"
    key = str(TESTHOSTS / "id_ed25519")
    known = str(TESTHOSTS / "known_hosts")
    job_id = f"logbench-{uuid.uuid4().hex[:6]}"
    state = run.tmp / "state"
    confdir = run.tmp / "config"
    state.mkdir()
    confdir.mkdir()
    if args.buffer_lines:
        (confdir / "config.yaml").write_text(f"log_buffer_lines: {args.buffer_lines}\n")
    stats_path = run.tmp / "app-stats.json"
    go_dir = run.tmp / "go"
    go_dir.mkdir()
    streams = run.streams = Streams(job_id, args.rate, args.seconds, go_dir)
    streams.start()
    # the integration tests' fixture removes job-labelled containers created while a test ran
    # (also other sessions'): give a test running now the time to end before relying on them
    time.sleep(args.survive)
    if streams.present() < NODES:
        raise Vanished(
            f"{NODES - streams.present()} stream containers were removed by another "
            f"process within {args.survive:g} s of their start"
        )
    stop = threading.Event()
    poll_s = args.poll_ms / 1000
    probers: list[tuple[Side, Prober, Callable[[], str]]] = []
    res_sides: list[tuple[Side, Callable[[], list[int]]]] = []
    out: dict[str, Any] = {"job_id": job_id, "other_jobs": _other_jobs(job_id)}
    sides: dict[str, Side] = {}

    if args.sides in ("both", "app"):
        tm = Tmux(run.tmp, "app")
        run.tmuxes.append(tm)
        env = {
            "GPUCONSOLE_STATE_DIR": str(state),
            "GPUCONSOLE_CONFIG_DIR": str(confdir),
            "TERM": "xterm-256color",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PATH": os.environ.get("PATH", ""),
        }
        if "TEXTUAL_FPS" in os.environ:  # to try another screen update rate
            env["TEXTUAL_FPS"] = os.environ["TEXTUAL_FPS"]
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "app",
            "--job",
            job_id,
            "--intake",
            args.intake,
            *(["--trace-loop"] if args.trace_loop else []),
            "--stats",
            str(stats_path),
            "--profile",
            str(profile),
        ]
        if args.py_spy:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            fmt = {".json": "speedscope", ".txt": "raw"}.get(Path(args.py_spy).suffix, "flamegraph")
            argv = [
                spy,
                "record",
                "--threads",
                "--subprocesses",  # the log intake process too
                "--nonblocking",
                *(["--gil"] if args.py_spy_gil else []),
                "-r",
                str(args.py_spy_rate),
                "-o",
                str(Path(args.py_spy).resolve()),
                "--format",
                fmt,
                "--",
                *argv,
            ]
        tm.start(f"cd {shlex.quote(str(ROOT))} && exec {shlex.join(argv)}", env)
        pane = tm.panes()[0][0]
        wait_until(
            lambda: f"node {NODES - 1}" in tm.capture(pane) and "ready node" in tm.capture(pane),
            90,
            "the app's log panes",
        )
        app_pid = tm.panes()[0][1]
        if args.py_spy:  # the pane runs py-spy; the app is its child
            kids = Path(f"/proc/{app_pid}/task/{app_pid}/children").read_text().split()
            app_pid = int(kids[0])
        tm_pid = tm.server_pid()
        out["app_pid"] = app_pid
        side = sides["gpuconsole"] = Side("gpuconsole")

        def app_shown(i: int, text: str) -> bool:
            n = len(TS_RE.findall(text))
            return n > 0 if i % 2 == 0 else n == 0

        def app_send(i: int) -> None:
            tm("send-keys", "-t", pane, "t")

        prober = Prober(app_send, app_shown, lambda: tm.capture(pane), poll_s)
        probers.append((side, prober, lambda: tm.capture(pane)))
        # the app and its children (the log intake process): CPU and RSS summed
        res_sides.append((side, lambda: [app_pid, *descendants(app_pid)]))
        # the intake process alone, to split the app's CPU between its two processes
        res_sides.append(
            (
                sides.setdefault("gpuconsole intake", Side("gpuconsole intake")),
                lambda: descendants(app_pid),
            )
        )
        res_sides.append(
            (sides.setdefault("gpuconsole tmux", Side("gpuconsole tmux")), lambda: [tm_pid])
        )

    if args.sides in ("both", "tmux"):
        tb = Tmux(run.tmp, "base")
        run.tmuxes.append(tb)

        def ssh_cmd(node: int) -> str:
            return "exec " + shlex.join(
                [
                    "ssh",
                    "-i",
                    key,
                    "-o",
                    f"UserKnownHostsFile={known}",
                    "-o",
                    "StrictHostKeyChecking=yes",
                    "-o",
                    "BatchMode=yes",
                    f"root@{HOSTS[streams.host_of(node)]}",
                    "docker",
                    "logs",
                    "-f",
                    streams.names[node],
                ]
            )

        tb.start(ssh_cmd(0), {"TERM": "xterm-256color", "PATH": os.environ.get("PATH", "")})
        for node in range(1, NODES):
            tb("split-window", "-t", "bench", ssh_cmd(node))
            tb("select-layout", "-t", "bench", "tiled")
        bpanes = tb.panes()
        wait_until(
            lambda: all("ready node" in tb.capture(p) for p, _ in bpanes),
            60,
            "the baseline's ssh panes",
        )
        btm_pid = tb.server_pid()
        side_b = sides["tmux + ssh"] = Side("tmux + ssh")

        def b_send(i: int) -> None:
            tb("send-keys", "-t", bpanes[i % NODES][0], "-l", probe_token(i))

        def b_shown(i: int, text: str) -> bool:
            return probe_token(i) in text

        def b_capture() -> str:  # the pane of the probe in flight, with scrollback
            return tb.capture(bpanes[(bprobe.i - 1) % NODES][0], history=400, join=True)

        # a token the tty echoed can be overwritten on screen: when a read of the stream ends
        # inside a tqdm bar's \r redraws, the echo lands at the line's start and the bar's
        # next state covers it. Such a probe is lost, not slow: it times out after 2 s
        # (counted) instead of holding the baseline's probes for 20 s.
        bprobe = Prober(b_send, b_shown, b_capture, poll_s, timeout_s=2.0)

        def b_sample() -> str:
            return "\n".join(tb.capture(p) for p, _ in bpanes)

        probers.append((side_b, bprobe, b_sample))
        res_sides.append((side_b, lambda: [pid for _, pid in bpanes]))
        res_sides.append(
            (sides.setdefault("baseline tmux", Side("baseline tmux")), lambda: [btm_pid])
        )

    # both sides show every stream's "ready" line: floor probes, then the streams start
    t0 = time.time() + 3 + 0.4 * args.floor_probes
    t_end = t0 + args.seconds + args.drain
    out["t0"] = t0
    streams.go(t0)
    threads = [
        threading.Thread(
            target=run_side,
            daemon=True,
            args=(side, prober, sample, t0, t_end, args.drain, stop, args.floor_probes),
        )
        for side, prober, sample in probers
    ]
    machine = Side("machine")
    out["machine"] = machine
    threads.append(
        threading.Thread(target=sample_resources, args=(res_sides, stop, machine), daemon=True)
    )
    for t in threads:
        t.start()
    try:
        while time.time() < t_end + 1:
            if (
                "gpuconsole" in sides
                and "archive_5s" not in out
                and time.time() >= t0 + args.seconds + 5
            ):  # the archive 5 s after the streams stopped
                out["archive_5s"] = archive_counts(state, job_id)
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    out["containers_left"] = streams.present()
    if out["containers_left"] < NODES:
        raise Vanished(
            f"{NODES - out['containers_left']} stream containers were removed by "
            "another process during the run"
        )
    if "gpuconsole" in sides:
        tm = run.tmuxes[0]
        tm("send-keys", "-t", tm.panes()[0][0], "q")
        t_q = time.time()
        out["app_exit_s"] = None
        while time.time() - t_q < 60 and proc_rss_mib(out["app_pid"]) > 0.0:
            time.sleep(0.2)
        if proc_rss_mib(out["app_pid"]) > 0.0:  # still busy with its backlog: end it
            os.kill(out["app_pid"], signal.SIGTERM)
            time.sleep(5)
            if proc_rss_mib(out["app_pid"]) > 0.0:
                os.kill(out["app_pid"], signal.SIGKILL)
        else:
            out["app_exit_s"] = time.time() - t_q
        if args.py_spy:
            wait_until(lambda: Path(args.py_spy).exists(), 60, "py-spy's output")
        out["app"] = json.loads(stats_path.read_text())
        out["archive"] = archive_counts(state, job_id)
    out["sides"] = sides
    return out


# -- report -------------------------------------------------------------------------------------


def summarize(side: Side, t0: float, seconds: float) -> dict[str, Any]:
    """Numbers of one side over the streaming window [t0, t0 + seconds]."""
    in_run = [(t, v) for t, v in side.cpu if t0 <= t <= t0 + seconds]
    cpu = (
        100 * (in_run[-1][1] - in_run[0][1]) / (in_run[-1][0] - in_run[0][0])
        if len(in_run) > 1
        else float("nan")
    )
    rss_run = [v for t, v in side.rss if t0 <= t]
    shown = 0.0
    for pts in side.newest.values():
        w = [(t, s) for t, s in pts if t0 + 2 <= t <= t0 + seconds]
        if len(w) > 1:
            shown += (w[-1][1] - w[0][1]) / (w[-1][0] - w[0][0])
    final = sum(max(s for _, s in pts) + 1 for pts in side.newest.values())
    return {
        "floor50": pct(side.floor_ms, 0.5),
        "floor95": pct(side.floor_ms, 0.95),
        "key50": pct(side.key_ms, 0.5),
        "key95": pct(side.key_ms, 0.95),
        "keymax": max(side.key_ms, default=float("nan")),
        "probes": len(side.key_ms),
        "timeouts": side.probes_timed_out,
        "lag50": pct(side.lag_ms, 0.5),
        "lag95": pct(side.lag_ms, 0.95),
        "shown_per_s": shown,
        "final_seq": final,
        "rss_start": rss_run[0] if rss_run else float("nan"),
        "rss_end": rss_run[-1] if rss_run else float("nan"),
        "rss_max": max(rss_run, default=float("nan")),
        "cpu": cpu,
        "capture_ms": statistics.mean(side.capture_ms) if side.capture_ms else float("nan"),
    }


def rss_curve(side: Side, t0: float, step: float) -> str:
    """RSS every ``step`` s from t0 (MiB), for the flatness check."""
    pts = [(t - t0, v) for t, v in side.rss if t >= t0]
    out, nxt = [], 0.0
    for t, v in pts:
        if t >= nxt:
            out.append(f"{t:.0f}s {v:.0f}")
            nxt += step
    return ", ".join(out)


def _other_jobs(job_id: str) -> dict[str, int]:
    """Other gpuconsole jobs' containers on the engine the test hosts share: the app adopts
    every job it finds there, and explains each failed one at its start (a diagnosis of its
    log on worker threads), so leftovers of other runs load the app being measured."""
    import docker

    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"label": "io.gpuconsole.job-id"})
    finally:
        client.close()
    others = [c for c in found if c.labels.get("io.gpuconsole.job-id") != job_id]
    exited = [c for c in others if c.status == "exited"]
    failed = [c for c in exited if c.attrs.get("State", {}).get("ExitCode", 0) != 0]
    return {"containers": len(others), "exited": len(exited), "failed": len(failed)}


def report(args: argparse.Namespace, out: dict[str, Any], wall: float) -> str:
    sides: dict[str, Side] = out["sides"]
    t0, secs, rate = out["t0"], args.seconds, args.rate
    produced = NODES * int(rate * secs)
    s = {k: summarize(v, t0, secs) for k, v in sides.items()}
    g, b = s.get("gpuconsole"), s.get("tmux + ssh")
    gt, bt = s.get("gpuconsole tmux"), s.get("baseline tmux")
    nan = float("nan")

    def f(v: float, fmt: str = "{:.0f}") -> str:
        return "-" if v != v else fmt.format(v)

    def ratio(a: float | None, c: float | None) -> str:
        if a is None or c is None or a != a or c != c or c == 0:
            return "-"
        return f"{a / c:.2f}"

    def row(label: str, key: str, fmt: str = "{:.0f}") -> list[str]:
        gv = g[key] if g else nan
        bv = b[key] if b else nan
        return [label, f(gv, fmt), f(bv, fmt), ratio(gv, bv)]

    rows = [
        ["metric", "gpuconsole", "tmux + ssh docker logs -f", "ratio"],
        row("key-to-screen p50, ms", "key50"),
        row("key-to-screen p95, ms", "key95"),
        row("key-to-screen max, ms", "keymax"),
        row("  idle floor p50, ms (same probe, no stream)", "floor50"),
        row("screen lag p50, ms (line written -> on screen)", "lag50"),
        row("screen lag p95, ms", "lag95"),
        row("lines through the screen per s (newest shown)", "shown_per_s"),
    ]
    app = out.get("app", {})
    arch = out.get("archive", (0, 0))
    taken_end = max(
        (n for t, n, _ in app.get("timeline", []) if t <= t0 + secs + args.drain), default=0
    )
    rows.append(
        [
            "lines received by the end of the drain / produced",
            f"{taken_end:,} / {produced:,}" if g else "-",
            f"{int(b['final_seq']):,} / {produced:,}" if b else "-",
            "-",
        ]
    )
    rows.append(
        [
            "lines archived at exit (distinct markers) / missing",
            f"{arch[1]:,} / {produced - arch[1]:,}" if g else "-",
            "- / 0 (pty)",
            "-",
        ]
    )
    a5 = out.get("archive_5s", (0, 0))
    rows.append(
        [
            "lines archived 5 s after the streams stopped / missing",
            f"{a5[1]:,} / {produced - a5[1]:,}" if g and "archive_5s" in out else "-",
            "- / 0 (pty)",
            "-",
        ]
    )
    rows.append(row("RSS at stream start, MiB", "rss_start"))
    rows.append(row("RSS at end, MiB", "rss_end"))
    rows.append(row("CPU, % of one core (app / 8 ssh)", "cpu"))
    if gt and bt:
        rows.append(
            [
                "CPU of the side's tmux server, %",
                f(gt["cpu"]),
                f(bt["cpu"]),
                ratio(gt["cpu"], bt["cpu"]),
            ]
        )
        rows.append(
            [
                "RSS of the side's tmux server at end, MiB",
                f(gt["rss_end"]),
                f(bt["rss_end"]),
                ratio(gt["rss_end"], bt["rss_end"]),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    head = (
        f"log panes: {NODES} streams x {rate} lines/s for {secs:g} s "
        f"(+{args.drain:g} s drain), buffer {args.buffer_lines or 100_000} lines/pane; "
        f"run took {wall:.0f} s"
    )
    notes = []
    if g:
        notes.append(
            f"probes: gpuconsole {g['probes']} ok, {g['timeouts']} timed out (20 s); "
            f"baseline {b['probes'] if b else 0} ok, {b['timeouts'] if b else 0} timed "
            f"out (2 s: an echo a bar covered); capture-pane takes "
            f"{g['capture_ms']:.1f} ms (app) / "
            f"{b['capture_ms'] if b else nan:.1f} ms (baseline)"
        )
        gi = s.get("gpuconsole intake")
        if gi:
            notes.append(
                f"app CPU by process: UI {g['cpu'] - gi['cpu']:.0f} %, log intake {gi['cpu']:.0f} %"
            )
        notes.append(
            "app RSS (MiB) by time since stream start: " + rss_curve(sides["gpuconsole"], t0, 10)
        )
        tl = app.get("timeline", [])
        taken = [(t - t0, n) for t, n, _ in tl if t >= t0]
        notes.append(
            "app lines taken by time: "
            + ", ".join(f"{t:.0f}s {n:,}" for t, n in taken[::10])
            + (f", end {taken[-1][1]:,}" if taken else "")
        )
        notes.append(
            "app exit after q: "
            + (
                f"{out['app_exit_s']:.1f} s"
                if out.get("app_exit_s") is not None
                else "not within 60 s (terminated)"
            )
        )
        keys = [t for t, k in app.get("keys", []) if k == "t"]
        sent = [t for t in sides["gpuconsole"].key_sent if t >= t0]
        ks = [t for t in keys if t >= t0]
        if ks and len(ks) == len(sent):
            d = [1000 * (k - s_) for k, s_ in zip(ks, sent)]
            notes.append(
                f"key received by the app after send-keys: p50 {pct(d, 0.5):.0f} ms, "
                f"p95 {pct(d, 0.95):.0f} ms"
            )
            reads = [t for t, k in app.get("key_reads", []) if k == "t" and t >= t0]
            if len(reads) == len(ks):
                r = [1000 * (x - s_) for x, s_ in zip(reads, sent)]
                q = [1000 * (k - x) for k, x in zip(ks, reads)]
                notes.append(
                    f"  of which send-keys -> parsed by the input thread: p50 {pct(r, 0.5):.0f}"
                    f" / p95 {pct(r, 0.95):.0f} ms; parsed -> dispatched on the loop: p50 "
                    f"{pct(q, 0.5):.0f} / p95 {pct(q, 0.95):.0f} ms"
                )
                seen = sides["gpuconsole"].key_ms
                writes = app.get("writes") or []
                if len(seen) == len(ks):
                    slow: list[tuple[float, str]] = []
                    for total, s_, x, k in zip(seen, sent, reads, ks):
                        w_ = next((y for y in writes if y >= k), None)
                        wk = "-" if w_ is None else f"{1000 * (w_ - k):.0f}"
                        sn = "-" if w_ is None else f"{total - 1000 * (w_ - s_):.0f}"
                        seen_at = s_ + total / 1000
                        ws = ",".join(f"{1000 * (y - k):.0f}" for y in writes if k <= y <= seen_at)
                        gcs = ",".join(
                            f"g{g}:{ms:.0f}"
                            for t, g, ms, *_ in app.get("gc", [])
                            if s_ <= t <= seen_at + 0.2 and ms >= 5
                        )
                        late = max(
                            [ms for t, ms in app.get("stalls", []) if s_ <= t <= seen_at + 0.05]
                            or [0.0]
                        )
                        slow.append(
                            (
                                total,
                                f"{total:.0f} = {1000 * (x - s_):.0f} + {1000 * (k - x):.0f} + "
                                f"{wk} + {sn} [writes {ws}; flushed "
                                + ",".join(
                                    f"{1000 * (y - k):.0f}"
                                    for y in app.get("flushes", [])
                                    if k <= y <= seen_at
                                )
                                + "; layouts "
                                + ",".join(
                                    f"{1000 * (y - k):.0f}:{ms:.0f}ms"
                                    for y, ms in app.get("layouts", [])
                                    if k <= y <= seen_at
                                )
                                + f"; gc {gcs or '-'}; loop late {late:.0f}; "
                                + ", ".join(
                                    f"{w:.0f}/{c:.0f}ms {what}"
                                    for t, w, c, what in app.get("slow_callbacks", [])
                                    if s_ <= t <= seen_at + 0.05
                                )
                                + "]",
                            )
                        )
                    notes.append(
                        "  slowest keys, ms = to the input thread + to dispatch + to the "
                        "next write + to seen: "
                        + "\n    ".join(t for _, t in sorted(slow, reverse=True)[:6])
                    )
            writes = app.get("writes") or []
            w = [
                1000 * (next((x for x in writes if x >= k), k) - k)
                for k in ks
                if any(x >= k for x in writes)
            ]
            if w:
                notes.append(
                    f"key received -> the app's next screen write: p50 {pct(w, 0.5):.0f} ms, "
                    f"p95 {pct(w, 0.95):.0f} ms"
                )
        lay_t = [(t, ms) for t, ms in app.get("layouts", []) if t0 <= t <= t0 + secs]
        lay = [ms for _, ms in lay_t]
        if lay:
            key_times = [k for k, _ in app.get("keys", [])]
            after_key = sum(1 for t, _ in lay_t if any(0 <= t - k <= 0.2 for k in key_times))
            notes.append(
                f"layout passes during the streams: {len(lay)}, p50 {pct(lay, 0.5):.1f} / max "
                f"{max(lay):.1f} ms; {after_key} of them within 200 ms after a key"
            )
        late = [ms for t, ms in app.get("stalls", []) if t0 <= t <= t0 + secs]
        if late:
            notes.append(
                f"event loop during the streams: a 20 ms heartbeat ran late by p50 "
                f"{pct(late, 0.5):.0f} / p95 {pct(late, 0.95):.0f} / max {max(late):.0f} ms"
            )
        fl = [f for f in app.get("frames") or [] if t0 <= f[0] <= t0 + secs]
        if len(fl) >= 2:
            per_s = (fl[-1][1] - fl[0][1]) / (fl[-1][0] - fl[0][0])
            cost = 1000 * pct([f[3] for f in fl], 0.5)
            every = 1000 * pct([f[2] for f in fl], 0.5)
            notes.append(
                f"log frames during the streams: {per_s:.1f} per s; one cost p50 {cost:.1f} ms "
                f"of the UI thread, interval p50 {every:.0f} ms"
            )
        if app.get("gc_objects"):
            total, kinds = app["gc_objects"]
            notes.append(
                f"objects tracked by the GC at exit: {total:,} (most: "
                + ", ".join(f"{k} {n:,}" for k, n in kinds)
                + ")"
            )
        pauses = [
            (g, ms, n, c) for t, g, ms, n, c in app.get("gc", []) if t0 <= t <= t0 + secs + 10
        ]
        for gen in (0, 1, 2):
            ms = [p for g, p, _, _ in pauses if g == gen]
            if ms:
                freed = sum(n for g, _, n, _ in pauses if g == gen)
                cpu = sum(c for g, _, _, c in pauses if g == gen)
                notes.append(
                    f"GC generation {gen}: {len(ms)} collections, max {max(ms):.0f} ms, "
                    f"total {sum(ms):.0f} ms ({cpu:.0f} ms CPU), {freed:,} objects freed"
                )
    other = out.get("other_jobs") or {}
    if other.get("containers"):
        notes.append(
            f"other gpuconsole jobs' containers on the test hosts at the start: "
            f"{other['containers']} ({other['exited']} exited, {other['failed']} failed: the app "
            "explains each failed one as it starts; remove them for a clean run)"
        )
    m = summarize(out["machine"], t0, secs)
    notes.append(
        f"whole machine busy during the streams: {m['cpu']:.0f} % of one core "
        f"(of {100 * (os.cpu_count() or 1)} %; includes dockerd, sshd, the generators "
        "and anything else running)"
    )
    return "\n".join([head, "", *lines, "", *notes])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    a = sub.add_parser("app", help="(internal) the app launcher run inside tmux")
    a.add_argument("--job", required=True)
    a.add_argument("--stats", type=Path, required=True)
    a.add_argument("--profile", type=Path, required=True)
    a.add_argument("--intake", default="process")
    a.add_argument("--trace-loop", action="store_true")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=2000, help="lines/s per stream")
    ap.add_argument(
        "--drain", type=float, default=10.0, help="seconds measured after the streams stop"
    )
    ap.add_argument(
        "--buffer-lines",
        type=int,
        default=0,
        help="config log_buffer_lines (0: the default, 100000)",
    )
    ap.add_argument("--sides", choices=["both", "app", "tmux"], default="both")
    ap.add_argument(
        "--poll-ms", type=float, default=2.0, help="sleep between two captures while a probe waits"
    )
    ap.add_argument("--floor-probes", type=int, default=10)
    ap.add_argument(
        "--survive",
        type=float,
        default=20.0,
        help="seconds the stream containers must survive before the run starts",
    )
    ap.add_argument(
        "--attempts",
        type=int,
        default=3,
        help="runs tried when another process removes the stream containers",
    )
    ap.add_argument("--py-spy", help="profile the app with py-spy into this file (.svg/.json/.txt)")
    ap.add_argument("--py-spy-rate", type=int, default=50, help="py-spy samples a second")
    ap.add_argument(
        "--py-spy-gil", action="store_true", help="py-spy: only the thread holding the GIL"
    )
    ap.add_argument(
        "--trace-loop",
        action="store_true",
        help="time every event-loop callback of the app (slow ones shown beside the slowest"
        " keys; costs the app CPU)",
    )
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ap.add_argument(
        "--intake",
        choices=["process", "loop"],
        default="process",
        help="where the app reads the log streams (default: the app's own choice)",
    )
    args = ap.parse_args()
    if args.cmd == "app":
        sys.exit(run_app(args.job, args.stats, args.profile, args.intake, args.trace_loop))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    start = time.time()
    for attempt in range(1, args.attempts + 1):
        tmp = Path(tempfile.mkdtemp(prefix="gpuconsole-logbench-"))
        run = Run(tmp)
        try:
            out = bench(args, run)
            break
        except Vanished as e:
            print(
                f"attempt {attempt}: {e}; "
                + ("retrying" if attempt < args.attempts else "giving up"),
                file=sys.stderr,
            )
            if attempt == args.attempts:
                raise SystemExit(1) from e
        finally:
            run.cleanup()
            if "out" not in locals():
                shutil.rmtree(tmp, ignore_errors=True)
    out["attempts"] = attempt
    text = report(args, out, time.time() - start)
    print(text)
    if args.json:
        sides = {k: v.__dict__ for k, v in out.pop("sides").items()}
        out["machine"] = out["machine"].__dict__
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, **out, "sides": sides}, default=str
            )
        )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
