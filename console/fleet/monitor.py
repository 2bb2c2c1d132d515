"""The fleet monitor: one telemetry stream per host, reconnecting, feeding a FleetState.

Each host runs its own task: connect, stream samples (:func:`remote.telemetry.stream.host_samples`),
and on any failure mark the host ``down`` and retry after a jittered exponential backoff
(0.5 s doubling to 30 s, x0.5-1.5). A separate task re-arms itself after it finishes to tick
the state (``stale`` hosts) and, every 10 s, to map containers to jobs by their labels.
At most :data:`MAX_CONNECTING` SSH handshakes are in flight at once.

Container -> job map: only a host whose latest sample shows a GPU process in a container (or
a ``runtime: host`` node) is asked, since only those processes can be matched; a host's
listing starts as soon as its first such sample arrives, beside the other hosts' streams, so a
one-shot read (``top --once``) finds it done or under way when the last host answers
(:meth:`FleetMonitor.refresh_containers`). A container's labels never change, so the 10 s
round lists only hosts whose samples show a container their last listing did not cover (and
every host again after :data:`MAP_FULL_EVERY_S`): 512 hosts running the same containers cost
about 1.7 listings a second instead of 51.

What the monitor's ``on_sample`` hook does is not the hosts' business: a hook that raises is
logged and counted (:attr:`FleetMonitor.hook_errors`), never taken for a host failure.
:meth:`FleetMonitor.stop` ends every task the monitor started, in whatever phase each host is
(:attr:`FleetMonitor.phase`), within a bound.

Record and replay: a recording is JSON lines ``{"host": NAME, "rx": UNIX_S, "sample": {...}}``
in arrival order; :func:`replay` feeds one back into a FleetState at its recorded pace (or
faster).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import IO

from console.errors import host_reason
from console.fleet.state import ContainerJob, FleetState
from console.jobs.labels import K_JOB_ID, NodeLabels
from console.session import Session
from remote.backoff import Backoff
from remote.errors import GpuConsoleError
from remote.runtimes import host_runtime_nodes
from remote.telemetry.schema import Sample, read_sample
from remote.telemetry.stream import AGENT_EXIT_NO_NVML, AgentExited, host_samples

log = logging.getLogger("gpuconsole.fleet")

SampleHook = Callable[[str, Sample], None]

#: A host's phase in its task (:attr:`FleetMonitor.phase`): opening the SSH connection ...
PHASE_CONNECTING = "connecting"
#: ... samples arriving ...
PHASE_STREAMING = "streaming"
#: ... the host reported a fault state (no driver...): asking again in 10 s ...
PHASE_FAULT_WAIT = "fault wait"
#: ... the stream failed: waiting out the backoff before the next attempt ...
PHASE_BACKOFF = "backoff"
#: ... the task has ended (:meth:`FleetMonitor.stop`).
PHASE_STOPPED = "stopped"

#: Seconds between the housekeeping's container -> job map refreshes; also how old a host's
#: listing may be for :meth:`FleetMonitor.refresh_containers` to reuse it by default.
MAP_EVERY_S = 10.0

#: At most this many SSH handshakes in flight at once, over all hosts (first connects and
#: reconnects alike); the others wait their turn in :data:`PHASE_CONNECTING`. Measured at 512
#: hosts (docs/benchmarks.md, "Console cost, 64 to 512 hosts"): opened all at once, the
#: hosts finish their handshakes together, so the median host drew its first sample only
#: with the last (9.2-9.6 s here), the console's event loop ran 0.55 s late during the start
#: and, in 1 run of 4, the test hosts' sshd (``MaxStartups 100:30:200``; two sshds stand in for
#: 512 hosts there) closed 178 of them during key exchange, retried (16 s). With 128 in flight:
#: the same time to the last host (9.6-11.5 s), the median host at 5.5-6.8 s, the loop 0.17 s
#: late, no connection closed. It also bounds a reconnect storm after a network blip. The
#: agent start that follows is not bounded: it runs on the hosts.
MAX_CONNECTING = 128


#: Seconds after which the housekeeping lists a host again even though its samples show no
#: container its last listing did not cover (a safety net: a container's labels never change,
#: so a listing of the same containers finds the same jobs).
MAP_FULL_EVERY_S = 300.0


def container_ids(sample: Sample | None) -> frozenset[str]:
    """The container ids (or ``runtime: host`` node names) of ``sample``'s GPU processes and
    torchrun workers (``ranks``: a CPU job's ranks too)."""
    if sample is None:
        return frozenset()
    procs = sample.get("processes") or []
    ranks = sample.get("ranks") or []
    return frozenset(c for p in [*procs, *ranks] if (c := p.get("container_id")))


def in_containers(sample: Sample | None) -> bool:
    """Whether ``sample`` shows a GPU process or a torchrun worker with a container id (a
    container, or a ``runtime: host`` node): only those can be matched to jobs."""
    return bool(container_ids(sample))


async def container_jobs(session: Session, hosts: list[str]) -> dict[str, ContainerJob]:
    """Container id -> job for every gpuconsole container on the reachable hosts (labels),
    and every ``runtime: host`` node by its name (the agent reports that name as the
    process's container id)."""
    mapping: dict[str, ContainerJob] = {}

    async def one(host: str) -> None:
        try:
            infos = await session.engine(host).list({K_JOB_ID: None})
            infos += await host_runtime_nodes(session.engine(host), {K_JOB_ID: None})
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
        max_connecting: SSH handshakes in flight at once (:data:`MAX_CONNECTING`).

    Attributes:
        phase: host -> what its task is doing now: :data:`PHASE_CONNECTING`,
            :data:`remote.telemetry.stream.PHASE_AGENT_STARTING` and ``PHASE_SMI_FALLBACK``,
            :data:`PHASE_STREAMING`,
            :data:`PHASE_FAULT_WAIT`, :data:`PHASE_BACKOFF` or :data:`PHASE_STOPPED`.
        hook_errors: how many times ``on_sample`` raised (each is logged; the stream goes on).
        stop_grace_s: how long :meth:`stop` lets cancelled tasks clean up (close their agent:
            up to 5 s for it to exit) before it cancels them again.
    """

    stop_grace_s: float = 6.0
    #: After the grace, how long :meth:`stop` keeps cancelling a task that will not end.
    stop_insist_s: float = 5.0

    def __init__(
        self,
        session: Session,
        state: FleetState,
        hosts: list[str] | None = None,
        *,
        interval: float = 1.0,
        on_sample: SampleHook | None = None,
        mode: str = "auto",
        replay_path: str | None = None,
        max_connecting: int = MAX_CONNECTING,
    ) -> None:
        self.session = session
        self.state = state
        self.hosts = hosts or list(session.profile.hosts)
        self.interval = interval
        self.on_sample = on_sample
        self.mode = mode
        self.replay_path = replay_path
        self._tasks: list[asyncio.Task[None]] = []
        #: host -> its containers' jobs, from its last listing
        self._maps: dict[str, dict[str, ContainerJob]] = {}
        #: host -> its latest listing (running or done) and when it started (monotonic s)
        self._listing: dict[str, tuple[float, asyncio.Task[None]]] = {}
        #: host -> the container ids its last successful listing covered (those in its
        #: latest sample when the listing started)
        self._covered: dict[str, frozenset[str]] = {}
        self.updated = asyncio.Event()
        self.phase: dict[str, str] = {}
        self.hook_errors = 0
        self._connect_slots = asyncio.Semaphore(max_connecting)

    def _hook(self, host: str, sample: Sample) -> None:
        """Call ``on_sample``; what it raises is logged and counted, never a host failure."""
        if self.on_sample is None:
            return
        try:
            self.on_sample(host, sample)
        except Exception:
            self.hook_errors += 1
            log.exception("the on_sample hook failed on a sample of %s (the stream goes on)", host)

    async def _host_loop(self, host: str) -> None:
        backoff = Backoff(0.5, 30.0)

        def phase(p: str) -> None:
            self.phase[host] = p

        while True:
            last: Sample | None = None
            try:
                phase(PHASE_CONNECTING)
                async with self._connect_slots:
                    t = await self.session.connected(host)
                stream = host_samples(
                    t, self.interval, mode=self.mode, replay=self.replay_path, on_phase=phase
                )
                async with aclosing(stream):  # closed here, whatever ends the loop
                    async for sample in stream:
                        first = last is None
                        last = sample
                        self.state.on_sample(host, sample)
                        phase(PHASE_STREAMING)
                        if first and in_containers(sample):
                            self._list_host(host)  # beside the other hosts' first samples
                        self._hook(host, sample)
                        self.updated.set()
                        if (sample["seq"] or 0) >= 2:  # a stream that lives, not a retry loop
                            backoff.reset()
                if last is not None and last["state"] not in ("ok", "gpu_lost"):
                    # a host fault (no driver, driver unreachable...): the stream ends after
                    # saying so; ask again now and then, the host itself is reachable
                    phase(PHASE_FAULT_WAIT)
                    await asyncio.sleep(max(10.0, self.interval))
                    continue
                reason = "telemetry stream ended"
            except GpuConsoleError as e:
                reason = host_reason(e, named=False)
            except AgentExited as e:
                reason = f"host {host}: telemetry agent exited ({e.detail or e.returncode})" + (
                    "; NVML is not usable there: use --source auto or smi"
                    if e.returncode == AGENT_EXIT_NO_NVML
                    else ""
                )
            except (OSError, ValueError) as e:
                reason = f"telemetry stream failed: {e}"
            except Exception as e:
                log.exception("[%s] telemetry stream crashed", host)
                reason = f"telemetry stream crashed: {type(e).__name__}: {e}"
            self.state.on_down(host, reason)
            self.updated.set()
            phase(PHASE_BACKOFF)
            await backoff.sleep()

    def _list_host(self, host: str) -> asyncio.Task[None]:
        """Start listing ``host``'s containers (unless a listing is under way); the map is
        published when it is done."""
        got = self._listing.get(host)
        if got is not None and not got[1].done():
            return got[1]
        v = self.state.hosts.get(host)
        ids = container_ids(v.sample if v is not None else None)
        task = asyncio.create_task(self._map_host(host, ids), name=f"container-map-{host}")
        self._listing[host] = (time.monotonic(), task)
        return task

    async def _map_host(self, host: str, ids: frozenset[str]) -> None:
        try:
            self._maps[host] = await container_jobs(self.session, [host])
        except Exception:  # the map is a nicety: its failure is never the host's
            log.debug("[%s] container listing failed", host, exc_info=True)
            return
        self._covered[host] = ids
        self._publish_map()

    def _publish_map(self) -> None:
        merged: dict[str, ContainerJob] = {}
        for m in self._maps.values():
            merged.update(m)
        self.state.set_containers(merged)

    def _shows_new(self, host: str) -> bool:
        """Whether ``host``'s latest sample shows a container its last listing did not cover."""
        v = self.state.hosts.get(host)
        return not container_ids(v.sample if v is not None else None) <= self._covered.get(
            host, frozenset()
        )

    async def refresh_containers(
        self, max_age_s: float = MAP_EVERY_S, *, only_new: bool = False
    ) -> None:
        """Map container ids to jobs from the labels on every host that is streaming and
        whose latest sample shows a GPU process in a container (:func:`in_containers`);
        other hosts are not asked (one not streaming would only hold the map back until its
        connection timed out; one without such processes has nothing to match).

        Args:
            max_age_s: a host whose listing started at most this long ago (s), or is still
                running, is not asked again: that listing is awaited (the one started at its
                first sample, for a one-shot read). 0: ask every such host now.
            only_new: also ask a host whose listing is younger than ``max_age_s`` when its
                latest sample shows a container that listing did not cover (what the
                housekeeping does, with ``max_age_s`` = :data:`MAP_FULL_EVERY_S`: a
                container's labels never change, so only a new container needs a listing).
        """
        wanted = [
            h
            for h in self.hosts
            if (v := self.state.hosts.get(h)) is not None
            and v.status != "down"
            and in_containers(v.sample)
        ]
        for h in [h for h in self._maps if h not in wanted]:
            del self._maps[h]
            self._covered.pop(h, None)
        now = time.monotonic()
        tasks = []
        for h in wanted:
            got = self._listing.get(h)
            if got is not None and (
                not got[1].done()
                or (now - got[0] <= max_age_s and not (only_new and self._shows_new(h)))
            ):
                tasks.append(got[1])
            else:
                tasks.append(self._list_host(h))
        # shielded: a caller's timeout leaves the listings running for the next refresh
        await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        self._publish_map()

    async def _housekeeping(self) -> None:
        last_labels = 0.0
        while True:
            self.state.tick()
            now = time.monotonic()
            if now - last_labels >= MAP_EVERY_S:
                last_labels = now
                try:
                    await self.refresh_containers(max_age_s=MAP_FULL_EVERY_S, only_new=True)
                except Exception:
                    log.debug("container refresh failed", exc_info=True)
            # re-armed only after this round finished: rounds never overlap
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Start every host's stream and the housekeeping task."""
        self._tasks = [
            asyncio.create_task(self._host_loop(h), name=f"telemetry-{h}") for h in self.hosts
        ]
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
        """End every task the monitor started, whatever phase its host is in.

        Each task is cancelled (its stream closes the agent's stdin, so the agent exits) and
        given :attr:`stop_grace_s` to clean up; a task still running then (a cancellation lost
        in a race, a close that hangs) is cancelled again every 0.5 s for up to
        :attr:`stop_insist_s`. One that still runs after that is logged with its host's
        phase and left behind; :meth:`stop` returns either way.
        """
        tasks, self._tasks = self._tasks, []
        tasks += [t for _started, t in self._listing.values()]
        self._listing = {}
        for t in tasks:
            t.cancel()
        loop = asyncio.get_running_loop()
        grace_end = loop.time() + self.stop_grace_s
        give_up = grace_end + self.stop_insist_s
        pending = {t for t in tasks if not t.done()}
        try:
            while pending:
                now = loop.time()
                if now >= give_up:
                    break
                wait = grace_end - now if now < grace_end else 0.5
                _done, pending = await asyncio.wait(pending, timeout=wait)
                if pending and loop.time() >= grace_end:
                    for t in pending:
                        log.debug(
                            "fleet monitor: %s still runs (%s); cancelling it again",
                            t.get_name(),
                            self._phase_of(t),
                        )
                        t.cancel()
        except asyncio.CancelledError:
            for t in pending:
                t.cancel()
            raise
        for t in pending:
            log.warning("fleet monitor: task %s did not end (%s)", t.get_name(), self._phase_of(t))
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                log.debug("fleet monitor: %s ended with %r", t.get_name(), t.exception())
        for h in self.hosts:
            self.phase[h] = PHASE_STOPPED

    def _phase_of(self, task: asyncio.Task[None]) -> str:
        name = task.get_name()
        if name.startswith("container-map-"):
            return "listing containers"
        host = name.removeprefix("telemetry-")
        return self.phase.get(host, "?") if host != name else "housekeeping"


class Recorder:
    """Writes samples as recording lines (see the module docstring)."""

    def __init__(self, f: IO[str]) -> None:
        self.f = f

    def __call__(self, host: str, sample: Sample) -> None:
        self.f.write(
            json.dumps({"host": host, "rx": time.time(), "sample": sample}, separators=(",", ":"))
            + "\n"
        )
        self.f.flush()


async def read_recording(path: Path, *, speed: float = 1.0) -> AsyncIterator[tuple[str, Sample]]:
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
                    rec = {
                        "host": (rec.get("host") or {}).get("hostname") or path.stem,
                        "rx": rec["host_time"],
                        "sample": rec,
                    }
                host, rx = str(rec["host"]), float(rec["rx"])
                sample = read_sample(rec["sample"])  # older spellings normalised
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(
                    f"{path}:{n}: not a gpuconsole recording line "
                    f"({e if isinstance(e, ValueError) else f'missing {e}'})"
                ) from e
            if speed > 0:
                if first_rx is None:
                    first_rx = rx
                due = start + (rx - first_rx) / speed
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield host, sample
