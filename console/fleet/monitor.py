"""The fleet monitor: one telemetry stream per host, reconnecting, feeding a FleetState.

Each host runs its own task: connect, stream samples (:func:`remote.telemetry.stream.host_samples`),
and on any failure mark the host ``down`` and retry after a jittered exponential backoff
(0.5 s doubling to 30 s, x0.5-1.5). A separate task re-arms itself after it finishes to tick
the state (``stale`` hosts) and, every 10 s, to map containers to jobs by their labels.

Record and replay: a recording is JSON lines ``{"host": NAME, "rx": UNIX_S, "sample": {...}}``
in arrival order; :func:`replay` feeds one back into a FleetState at its recorded pace (or
faster).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any

from console.fleet.state import ContainerJob, FleetState
from console.jobs.labels import K_JOB_ID, NodeLabels
from console.session import Session
from remote.errors import GpuConsoleError
from remote.telemetry.stream import AGENT_EXIT_NO_NVML, AgentExited, host_samples

log = logging.getLogger("gpuconsole.fleet")

SampleHook = Callable[[str, dict[str, Any]], None]


async def container_jobs(session: Session, hosts: list[str]) -> dict[str, ContainerJob]:
    """Container id -> job for every gpuconsole container on the reachable hosts (labels)."""
    mapping: dict[str, ContainerJob] = {}

    async def one(host: str) -> None:
        try:
            infos = await session.engine(host).list({K_JOB_ID: None})
        except GpuConsoleError:
            return
        for info in infos:
            try:
                lab = NodeLabels.parse(info.labels)
            except ValueError:
                continue
            mapping[info.id] = ContainerJob(lab.job_id, lab.job_name, lab.node_rank)

    await asyncio.gather(*(one(h) for h in hosts))
    return mapping


class FleetMonitor:
    """Streams telemetry from every host of a session into a :class:`FleetState`.

    Args:
        session: the hosts' connections.
        state: where samples go.
        hosts: the hosts to watch (default: all of the profile's).
        interval: sampling interval on the hosts (s).
        on_sample: called with ``(host, sample)`` after the state took it (recording, UI).
        mode: ``auto``, ``agent`` or ``smi`` (see :func:`remote.telemetry.stream.host_samples`).
        replay_path: a trace on the hosts for the agent to replay instead of NVML.
    """

    def __init__(
        self, session: Session, state: FleetState, hosts: list[str] | None = None, *,
        interval: float = 1.0, on_sample: SampleHook | None = None, mode: str = "auto",
        replay_path: str | None = None,
    ) -> None:
        self.session = session
        self.state = state
        self.hosts = hosts or list(session.profile.hosts)
        self.interval = interval
        self.on_sample = on_sample
        self.mode = mode
        self.replay_path = replay_path
        self._tasks: list[asyncio.Task[None]] = []
        self.updated = asyncio.Event()

    async def _host_loop(self, host: str) -> None:
        backoff = 0.5
        while True:
            last: dict[str, Any] | None = None
            try:
                t = await self.session.connected(host)
                async for sample in host_samples(t, self.interval, mode=self.mode,
                                                 replay=self.replay_path):
                    last = sample
                    self.state.on_sample(host, sample)
                    if self.on_sample is not None:
                        self.on_sample(host, sample)
                    self.updated.set()
                    if sample.get("seq", 0) >= 2:  # a stream that lives, not a retry loop
                        backoff = 0.5
                if last is not None and last["state"] not in ("ok", "gpu_lost"):
                    # a host fault (no driver, driver unreachable...): the stream ends after
                    # saying so; ask again now and then, the host itself is reachable
                    await asyncio.sleep(max(10.0, self.interval))
                    continue
                reason = "telemetry stream ended"
            except GpuConsoleError as e:
                reason = e.message
            except AgentExited as e:
                reason = (f"host {host}: telemetry agent exited ({e.detail or e.returncode})"
                          + ("; NVML is not usable there: use --source auto or smi"
                             if e.returncode == AGENT_EXIT_NO_NVML else ""))
            except (OSError, ValueError) as e:
                reason = f"telemetry stream failed: {e}"
            except Exception as e:
                log.exception("[%s] telemetry stream crashed", host)
                reason = f"telemetry stream crashed: {type(e).__name__}: {e}"
            self.state.on_down(host, reason)
            self.updated.set()
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 30.0)

    async def refresh_containers(self) -> None:
        """Map container ids to jobs from the labels on every reachable host."""
        self.state.set_containers(await container_jobs(self.session, self.hosts))

    async def _housekeeping(self) -> None:
        last_labels = 0.0
        while True:
            self.state.tick()
            now = time.monotonic()
            if now - last_labels >= 10.0:
                last_labels = now
                try:
                    await self.refresh_containers()
                except Exception:
                    log.debug("container refresh failed", exc_info=True)
            # re-armed only after this round finished: rounds never overlap
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Start every host's stream and the housekeeping task."""
        self._tasks = [asyncio.create_task(self._host_loop(h), name=f"telemetry-{h}")
                       for h in self.hosts]
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="fleet-housekeeping"))

    async def wait_complete(self, timeout: float) -> bool:
        """Wait until every host has a sample or is down; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        while not self.state.complete():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.updated.clear()
            try:
                await asyncio.wait_for(self.updated.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    async def stop(self) -> None:
        """Cancel every task (closing the agents' stdin, so they exit)."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


class Recorder:
    """Writes samples as recording lines (see the module docstring)."""

    def __init__(self, f: IO[str]) -> None:
        self.f = f

    def __call__(self, host: str, sample: dict[str, Any]) -> None:
        self.f.write(json.dumps({"host": host, "rx": time.time(), "sample": sample},
                                separators=(",", ":")) + "\n")
        self.f.flush()


async def read_recording(
    path: Path, *, speed: float = 1.0
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Yield ``(host, sample)`` from a recording, paced by its ``rx`` times / ``speed``
    (``speed <= 0``: as fast as possible). A bare agent trace (JSON lines of samples) is read
    as one host named by the samples' hostname.

    Raises:
        ValueError: a line is not a recording line (its number is named).
    """
    first_rx: float | None = None
    start = time.monotonic()
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if "sample" not in rec and rec.get("type") == "sample":
                    # a bare agent trace: one host, named by the sample itself
                    rec = {"host": (rec.get("host") or {}).get("hostname") or path.stem,
                           "rx": rec["host_time"], "sample": rec}
                host, sample, rx = str(rec["host"]), rec["sample"], float(rec["rx"])
                if not isinstance(sample.get("gpus"), list) or "state" not in sample:
                    raise ValueError("its sample has no `state` and `gpus`")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(
                    f"{path}:{n}: not a gpuconsole recording line "
                    f"({e if isinstance(e, ValueError) else f'missing {e}'})") from e
            if speed > 0:
                if first_rx is None:
                    first_rx = rx
                due = start + (rx - first_rx) / speed
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield host, sample
