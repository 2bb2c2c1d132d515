"""Launching: preflight every host, then create and start one container per node, all or none.

Order of effects, so that bad input never leaves remote state half-made:

1. validate the spec against the profile (no I/O);
2. on every host at once: connect, ping the engine, check the image (pull if allowed), count
   GPUs, refuse a job name that is already running, pick the rendezvous port on node 0;
3. sync the workdir to every host (content-addressed, so nothing half-written is visible);
4. claim the job's name and GPUs on every host, in host order (:func:`claim_launch`, an
   exclusive lock held on the host by :mod:`remote.claims`), check again under the claims
   that the name is free and no active node of another job was given those GPUs, so that two
   consoles submitting at the same moment cannot both pass; then
5. record the job in the local store (with this process as its launcher), create every
   container, then start every container; if any create or start fails, every container made
   so far is removed and the record deleted, and the first error is raised. Once all started,
   the launcher is cleared and the claims released (also on any failure; a console that
   dies drops them with its connection).

A launch killed outright (SIGKILL, a closed terminal, a crash) between create and start cannot
undo itself: its containers stay ``created``. The record's launcher says whether the launch is
still in flight (:func:`launch_in_flight`), so ``ps`` shows such a job as an interrupted launch
(node state ``created``, see :mod:`console.jobs.status`) that ``stop``/``rm`` clean up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from console.diagnosis import diagnose
from console.errors import JobNameInUse, PlanError
from console.jobs import gang
from console.jobs.labels import K_JOB_ID, K_JOB_NAME, K_NODE_RANK, gpu_indices
from console.jobs.launcher import LAUNCH_STALE_S as LAUNCH_STALE_S  # their old home
from console.jobs.launcher import launch_in_flight as launch_in_flight
from console.jobs.launcher import launcher_alive as launcher_alive
from console.jobs.launcher import launcher_token
from console.jobs.plan import (
    HostFacts,
    JobPlan,
    build_plan,
    busy_error,
    check_spec_against_gpus,
    expand_home,
    job_python,
    job_runtime,
    new_job_id,
    select_hosts,
)
from console.jobs.spec import LoadedSpec
from console.jobs.store import JobRecord, NodeRecord, Store
from console.session import Session
from remote.claims import ClaimHeld
from remote.claims import take as take_claims
from remote.errors import DockerError, GpuConsoleError
from remote.transport import WORKDIR_CACHE, workdir_digest

log = logging.getLogger("gpuconsole.launch")

T = TypeVar("T")

_FREE_PORT = "import socket;s=socket.socket();s.bind(('',0));print(s.getsockname()[1])"
_ACTIVE = ("created", "running", "restarting", "paused")


def explain_engine_error(error: GpuConsoleError) -> GpuConsoleError:
    """A Docker engine error (a refused create/start, a failed pull) restated with the root
    cause :func:`console.diagnosis.diagnose` names in the engine's text: its summary as the
    message and its fix as the hint, the same explanation ``gpuconsole diagnose`` gives for
    that text. Any other error, or an engine text with no known cause, is returned as is."""
    if not isinstance(error, DockerError):
        return error
    found = diagnose(error.detail)
    if found is None:
        return error
    log.info("host %s: Docker engine error read as %s: %s", error.host, found.kind, error.detail)
    # keep what gpuconsole was doing ("image 'x' is not on the host and could not be pulled")
    head, sep, _ = error.detail.partition(" could not be pulled: ")
    message = f"{head}{sep}{found.summary}" if sep else found.summary
    return type(error)(error.host, message, found.fix)


async def gather_first_error(*aws: Awaitable[T]) -> list[T]:
    """Await all; if any raised, raise the first error (in argument order) after all finish."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class GpuFacts:
    """A host's GPUs as one telemetry sample shows them.

    Attributes:
        count: GPUs on the host; ``None`` without an NVIDIA driver.
        holders: GPU index -> processes holding it, described; ``None`` when unknown.
        lost: indices of lost GPUs.
    """

    count: int | None
    holders: dict[int, list[str]] | None
    lost: frozenset[int]


async def gpu_facts(session: Session, host: str) -> GpuFacts:
    """One telemetry sample of a host (agent, else nvidia-smi), its processes mapped to
    containers and jobs.

    Raises:
        PlanError: the host's GPUs are in a state that rules out a launch (driver
            unreachable, version mismatch, ...), with the reason.
    """
    from console.fleet.monitor import container_jobs
    from console.fleet.state import FleetState, gpu_holders
    from remote.telemetry.stream import host_samples

    t = await session.connected(host)
    sample = None
    stream = host_samples(t, 0.5)
    try:
        async for s in stream:
            sample = s
            break
    finally:
        await stream.aclose()
    if sample is None:
        raise PlanError(f"host {host}: no GPU telemetry", "run `gpuconsole top --once -v`")
    state = sample["state"]
    if state in ("no_driver", "nvml_unavailable"):
        return GpuFacts(None, None, frozenset())
    if state not in ("ok", "gpu_lost", "no_gpus"):
        raise PlanError(
            f"host {host}: GPUs unusable ({state}): {sample.get('state_detail') or ''}".rstrip(),
            "see `gpuconsole top --once` for the host's GPU state",
        )
    fleet = FleetState([host])
    fleet.on_sample(host, sample)
    fleet.set_containers(await container_jobs(session, [host]))
    holders = gpu_holders(fleet, host)
    described = (
        None if holders is None else {i: [h.describe() for h in hs] for i, hs in holders.items()}
    )
    lost = frozenset(g["index"] for g in sample["gpus"] if g["lost"] and g["index"] is not None)
    return GpuFacts(len(sample["gpus"]), described, lost)


@dataclass(frozen=True)
class Prepared:
    """The outcome of preflight: the plan plus the hosts it runs on."""

    plan: JobPlan
    hosts: list[str]
    force: bool = False


#: Finds a runtime-host python on the host (argv[1]: a path, a command on PATH or a conda
#: environment's name); prints JSON ``{"path": ...}`` (``null`` when not found). Conda
#: environments are looked for under conda's base (``conda`` on PATH or ``$CONDA_EXE``) and the
#: usual install folders, as ``<base>/envs/<name>/bin/python``.
_FIND_PYTHON = r"""
import json, os, shutil, sys
name = sys.argv[1]
def out(p):
    print(json.dumps({"path": p})); sys.exit(0)
if "/" in name:
    p = os.path.expanduser(name)
    out(p if os.path.isfile(p) and os.access(p, os.X_OK) else None)
w = shutil.which(name)
if w:
    out(w)
home = os.path.expanduser("~")
bases = []
conda = os.environ.get("CONDA_EXE") or shutil.which("conda")
if conda:
    bases.append(os.path.dirname(os.path.dirname(conda)))
bases += [os.path.join(home, d) for d in ("miniconda3", "anaconda3", "miniforge3",
                                          "mambaforge", ".conda")] + ["/opt/conda"]
for b in bases:
    p = os.path.join(b, "envs", name, "bin", "python")
    if os.path.isfile(p) and os.access(p, os.X_OK):
        out(p)
out(None)
"""


async def find_python(session: Session, host: str, python: str) -> str:
    """The absolute path of ``python`` on ``host`` (a path, a command on PATH, or a conda
    environment's name, see :data:`_FIND_PYTHON`), checked to import torch.

    Raises:
        RuntimeUnavailable: not found, or it has no torch (one line, with the fix).
    """
    import json

    from remote.errors import RuntimeUnavailable

    t = await session.connected(host)
    res = await t.run(["python3", "-c", _FIND_PYTHON, python], timeout=30)
    try:
        path = json.loads(res.stdout).get("path") if res.returncode == 0 else None
    except (ValueError, AttributeError):
        path = None
    if not path:
        what = (
            "no executable file there"
            if "/" in python
            else "neither a command on PATH nor a conda environment"
        )
        raise RuntimeUnavailable(
            host,
            f"runtime host: python {python!r} not found ({what})",
            "set `python:` in the spec or the profile's host, or --python, to the python "
            "that has torch (e.g. ~/venv/bin/python)",
        )
    await session.engine(host).hostrt.ensure_image(path)
    return str(path)


async def _host_facts(
    session: Session,
    loaded: LoadedSpec,
    host: str,
    image: str,
    node0: bool,
    pull: str,
    dry_run: bool,
    runtime: str = "docker",
) -> HostFacts:
    """Ask one host what planning needs; no effect on the host except an image pull (never
    in a dry run). ``runtime: host``: the python is found and checked instead of the
    image."""
    t = await session.connected(host)
    engine = session.engine(host)
    python = None
    if runtime == "host":
        await engine.hostrt.ping()
        python = await find_python(session, host, job_python(loaded, session.profile, host))
    else:
        await engine.ping()
        if not dry_run:
            await engine.ensure_image(image, pull)
        elif not await engine.has_image(image):
            if pull == "never":
                await engine.ensure_image(image, pull)  # raises: the real submit would fail
            log.warning("host %s: image %s is not there; submit will pull it", host, image)
    gpus = (
        await gpu_facts(session, host)
        if loaded.spec.gpus_per_node != 0
        else GpuFacts(None, None, frozenset())
    )
    holders = gpus.holders
    if gpus.count:  # GPUs given to nodes that hold no process on them yet (starting up)
        holders = merge_holders(holders, await assigned_gpus(session, host, runtime))
    home = await t.home()
    port = None
    if node0 and loaded.spec.rdzv_port is None:
        res = await t.run(["python3", "-c", _FREE_PORT], timeout=30)
        if res.returncode == 0 and res.stdout.strip().isdigit():
            port = int(res.stdout.strip())
    wd = loaded.workdir
    # where sync_workdir will put it (content-addressed), so a dry run can show it
    ex = loaded.spec.exclude
    workdir = (
        f"{home}/{WORKDIR_CACHE}/{(await asyncio.to_thread(workdir_digest, wd, ex))[:16]}"
        if wd is not None
        else None
    )
    if loaded.host_workdir is not None:  # a notebook's folder on the host, kept read-write
        workdir = expand_home(loaded.host_workdir, home)
        if not dry_run:
            res = await t.run(["mkdir", "-p", "--", workdir], timeout=30)
            if res.returncode != 0:
                raise PlanError(
                    f"{loaded.place('workdir')}host {host}: cannot create {workdir}: "
                    f"{res.stderr.strip()}",
                    "give a folder the host's SSH user may write (--workdir)",
                )
    return HostFacts(host, t.address(), gpus.count, home, workdir, port, holders, gpus.lost, python)


async def assigned_gpus(
    session: Session,
    host: str,
    runtime: str | None = None,
) -> dict[int, list[str]]:
    """GPU index -> the active nodes (created, running, ...) of ``runtime`` (default the
    host's) that were given it (their ``io.gpuconsole.gpus`` label), described as
    ``<node name> (job <id> n<rank>)``: taken even before their processes open the GPU."""
    infos = await session.engine(host).list({K_JOB_ID: None}, runtime=runtime)
    out: dict[int, list[str]] = {}
    for c in infos:
        if c.status not in _ACTIVE:
            continue
        for i in gpu_indices(c.labels):
            out.setdefault(i, []).append(
                f"{c.name} (job {c.labels.get(K_JOB_ID, '?')} n{c.labels.get(K_NODE_RANK, '?')})"
            )
    return out


def merge_holders(
    holders: dict[int, list[str]] | None,
    assigned: dict[int, list[str]],
) -> dict[int, list[str]] | None:
    """The processes holding each GPU plus the nodes given it (:func:`assigned_gpus`) whose
    job holds no process there yet; ``None`` when both are unknown or empty."""
    if holders is None and not assigned:
        return None
    out = {i: list(hs) for i, hs in (holders or {}).items()}
    for i, nodes in assigned.items():
        have = out.setdefault(i, [])
        for node in nodes:
            m = re.search(r"\(job (\S+) n", node)
            if not (m and any(f"(job {m.group(1)} n" in h for h in have)):
                have.append(node)
    return out


def _claim_keys(plan: JobPlan, force: bool) -> dict[str, list[str]]:
    """Host -> what the launch claims there: the job's name and (without ``force``) each
    GPU its nodes on that host are given."""
    keys: dict[str, list[str]] = {}
    for n in plan.nodes:
        ks = keys.setdefault(n.host, [f"name-{plan.name}"])
        if not force:
            ks += [k for k in (f"gpu-{i}" for i in n.gpu_ids) if k not in ks]
    return keys


def _held_error(plan: JobPlan, e: ClaimHeld) -> GpuConsoleError:
    """What a launch that lost the race says: the name (first) or the GPUs another launch
    holds on the host, who holds them, and the fix."""
    h = e.holders[0]
    who = h.what or "another job"
    parts = h.owner.split()
    by = f"from {parts[0]}, pid {parts[1]}" if len(parts) >= 2 else "from another console"
    if any(x.key.startswith("name-") for x in e.holders):
        return JobNameInUse(
            f"a job named {plan.name!r} is being launched right now ({who}, {by})",
            f"see `gpuconsole ps` once that launch is done (`gpuconsole stop {who}` stops it),"
            " or give this job another name (--name)"
            if h.what
            else "see `gpuconsole ps`, or give this job another name (--name)",
        )
    gpus = ", ".join(x.key.removeprefix("gpu-") for x in e.holders)
    return PlanError(
        f"host {e.host}: GPU(s) {gpus} are being given to job {who} right now ({by})",
        "pick other GPUs (`gpuconsole gpus --free`), or submit again once that launch is "
        "done (it then holds them)",
    )


async def check_gpus_unassigned(session: Session, plan: JobPlan) -> None:
    """Refuse GPUs of the plan that an active node of another job was given.

    Raises:
        PlanError: naming the GPUs, the nodes given them and how to stop their job.
    """
    wanted: dict[str, set[int]] = {}
    for n in plan.nodes:
        if n.gpu_ids:
            wanted.setdefault(n.host, set()).update(n.gpu_ids)
    hosts = list(wanted)
    found = await gather_first_error(*(assigned_gpus(session, h, plan.runtime) for h in hosts))
    for host, assigned in zip(hosts, found):
        busy = sorted(i for i in wanted[host] if assigned.get(i))
        if busy:
            raise busy_error(HostFacts(host, "", len(assigned), "", holders=assigned), busy)


@contextlib.asynccontextmanager
async def claim_launch(
    session: Session,
    plan: JobPlan,
    *,
    force: bool = False,
) -> AsyncIterator[None]:
    """Hold the job's name and GPUs on every host while the launch creates its nodes (step 4
    of the module docstring): claimed host by host in name order (every console takes them
    in the same order, so the first host decides a race), then the name and the GPUs checked
    again, now that no other launch can pass the same check. Released on exit, whatever
    happened.

    Raises:
        JobNameInUse: another launch holds the name, or a job of that name runs (or was
            created) on the hosts by now.
        PlanError: another launch holds the GPUs, or an active node was given them.
        TransportError: a host could not be asked.
    """
    owner = f"{launcher_token()} {plan.job_id}"
    claims = []
    try:
        for host, keys in sorted(_claim_keys(plan, force).items()):
            t = await session.connected(host)
            try:
                claims.append(await take_claims(t, keys, owner=owner, what=plan.job_id))
            except ClaimHeld as e:
                raise _held_error(plan, e) from None
        await check_name_free(
            session, list(dict.fromkeys(n.host for n in plan.nodes)), plan.name, plan.runtime
        )
        if not force:
            await check_gpus_unassigned(session, plan)
        yield
    finally:
        await asyncio.shield(asyncio.gather(*(c.release() for c in claims)))


async def check_name_free(
    session: Session, hosts: list[str], name: str, runtime: str | None = None
) -> None:
    """Refuse a job name that is running (or starting) on any of the hosts (in ``runtime``,
    default each host's).

    Raises:
        JobNameInUse: naming the running job's id and hosts.
    """
    found = await gather_first_error(
        *(session.engine(h).list({K_JOB_NAME: name}, runtime=runtime) for h in hosts)
    )
    running = {
        c.labels.get(K_JOB_ID, "?")
        for infos in found
        for c in infos
        if c.status in _ACTIVE and c.status != "created"
    }
    created = {
        c.labels.get(K_JOB_ID, "?") for infos in found for c in infos if c.status == "created"
    }
    if running:
        job = sorted(running)[0]
        raise JobNameInUse(
            f"a job named {name!r} is already running ({job})",
            f"stop it first (`gpuconsole stop {job}`) or give this job another name (--name)",
        )
    if created:
        # being launched right now, or a launch that was interrupted between create and
        # start: the containers are not gpuconsole's to take over silently
        job = sorted(created)[0]
        raise JobNameInUse(
            f"a job named {name!r} has containers created but never started ({job}: being "
            "launched, or its launch was interrupted)",
            f"see `gpuconsole ps`; `gpuconsole rm {job}` removes them, or give this job "
            "another name (--name)",
        )


async def prepare(
    session: Session,
    loaded: LoadedSpec,
    *,
    dry_run: bool = False,
    force: bool = False,
    slow: Mapping[str, Mapping[int, str]] | None = None,
    exclude_slow: bool = False,
) -> Prepared:
    """Preflight every host and build the plan (steps 1-3 of the module docstring).

    With ``dry_run`` nothing is written anywhere (the workdir is not synced). ``force`` lets
    the job use GPUs that other processes hold. ``slow``: host -> GPU index -> the last
    bench's verdict, for the GPUs it flagged (named in the plan; left out with
    ``exclude_slow``).

    Raises:
        ConfigError, PlanError, JobNameInUse, TransportError, ImageNotFound.
    """
    profile = session.profile
    hosts = select_hosts(loaded, profile)
    check_spec_against_gpus(loaded)
    runtime = job_runtime(loaded, profile, hosts)
    image = loaded.spec.image or profile.defaults.image or ""
    if not image and runtime == "docker":
        raise PlanError(
            "no image: the spec has no `image` and the profile no `defaults.image`",
            "add `image: <a PyTorch image>` to the spec, or `runtime: host` for the hosts' "
            "own Python",
        )
    await session.connect_all(hosts)
    await check_name_free(session, hosts, loaded.spec.name, runtime)
    try:
        facts_list = await gather_first_error(
            *(
                _host_facts(
                    session, loaded, h, image, i == 0, profile.defaults.pull, dry_run, runtime
                )
                for i, h in enumerate(hosts)
            )
        )
    except DockerError as e:  # a pull the registry refused, an engine that answers oddly
        explained = explain_engine_error(e)
        if explained is e:
            raise
        raise explained from e
    facts = {
        f.host: dataclasses.replace(
            f, slow=dict((slow or {}).get(f.host, {})), exclude_slow=exclude_slow
        )
        for f in facts_list
    }
    job_id = new_job_id(loaded.spec.name)
    # Plan once before any effect, so GPU and process errors come before the workdir sync.
    plan = build_plan(
        loaded,
        profile,
        hosts,
        facts,
        job_id=job_id,
        created_at=time.time(),
        image=image,
        force=force,
    )
    if not dry_run and loaded.workdir is not None:
        synced = await gather_first_error(*(session.connected(h) for h in hosts))
        paths = await gather_first_error(
            *(t.sync_workdir(loaded.workdir, loaded.spec.exclude) for t in synced)
        )
        facts = {h: dataclasses.replace(f, workdir=p) for (h, f), p in zip(facts.items(), paths)}
        plan = build_plan(
            loaded,
            profile,
            hosts,
            facts,
            job_id=job_id,
            created_at=plan.created_at,
            image=image,
            force=force,
        )
    # gang teardown on the hosts: every node of a multi-node job runs under the supervisor
    # (console/jobs/gang.py, remote/agent/gang.py)
    plan = await gang.attach(session, plan, dry_run=dry_run)
    return Prepared(plan, hosts, force)


async def launch(
    session: Session,
    store: Store,
    loaded: LoadedSpec,
    prepared: Prepared,
    on_started: Callable[[str], None] | None = None,
) -> str:
    """Claim the name and GPUs, then create and start every node's container (steps 4-5);
    returns the job id. ``on_started(job_id)`` is called the moment the launch is complete
    (every container started and recorded): an interrupt before it undoes the launch, one
    after it leaves the job running (what a face says then).

    Raises:
        JobNameInUse, PlanError: another launch won the race (see :func:`claim_launch`).
        GpuConsoleError: the first create/start failure, after everything was rolled back.
    """
    async with claim_launch(session, prepared.plan, force=prepared.force):
        return await _create_and_start(session, store, loaded, prepared.plan, on_started)


async def _create_and_start(
    session: Session,
    store: Store,
    loaded: LoadedSpec,
    plan: JobPlan,
    on_started: Callable[[str], None] | None = None,
) -> str:
    record = JobRecord(
        id=plan.job_id,
        name=plan.name,
        profile=session.profile.name,
        profile_source=session.profile.source,
        spec={
            **loaded.spec.model_dump(mode="json"),
            "runtime": plan.runtime,
            "env": {
                k: ("${secret}" if k in loaded.secret_env else v) for k, v in loaded.env.items()
            },
        },
        spec_hash=plan.spec_hash,
        created_at=plan.created_at,
        node_count=len(plan.nodes),
        nodes=[NodeRecord(plan.job_id, n.node_rank, n.host, n.container.name) for n in plan.nodes],
        launcher=launcher_token(),
    )
    await store.call(store.add_job, record)
    created: dict[int, str] = {}

    async def create(n_rank: int) -> None:
        node = plan.nodes[n_rank]
        created[n_rank] = await session.engine(node.host).create(node.container)

    async def create_and_start() -> None:
        await gather_first_error(*(create(n.node_rank) for n in plan.nodes))
        await gather_first_error(
            *(session.engine(n.host).start(created[n.node_rank]) for n in plan.nodes)
        )
        for n in record.nodes:
            n.container_id = created[n.node_rank]
            n.state = "pending"  # started; `running` from its first log line (containers.refresh)
        await store.call(store.update_nodes, record.nodes)
        await store.call(store.update_job, plan.job_id, state="pending", launcher=None)

    async def rollback() -> None:
        await asyncio.gather(
            *(session.engine(plan.nodes[r].host).remove(cid) for r, cid in created.items()),
            return_exceptions=True,
        )
        await store.call(store.delete_job, plan.job_id)

    # Shielded: an interrupt (Ctrl-C) lets the engine calls and the record in flight finish,
    # then undoes them all, so a launch is all or none; the launch is complete (and said so)
    # only once the store has it.
    effects = asyncio.ensure_future(create_and_start())
    try:
        await asyncio.shield(effects)
    except asyncio.CancelledError:
        await asyncio.gather(effects, return_exceptions=True)
        await rollback()
        log.warning("launch of %s interrupted; its containers were removed", plan.job_id)
        raise
    except GpuConsoleError as e:
        await rollback()
        explained = explain_engine_error(e)
        if explained is e:
            raise
        raise explained from e
    if on_started is not None:  # no await since the shield: an interrupt now leaves it running
        on_started(plan.job_id)
    return plan.job_id
