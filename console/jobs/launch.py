"""Launching: preflight every host, then create and start one container per node, all or none.

Order of effects, so that bad input never leaves remote state half-made:

1. validate the spec against the profile (no I/O);
2. on every host at once: connect, ping the engine, check the image (pull if allowed), count
   GPUs, refuse a job name that is already running, pick the rendezvous port on node 0;
3. sync the workdir to every host (content-addressed, so nothing half-written is visible);
4. record the job in the local store (with this process as its launcher), create every
   container, then start every container; if any create or start fails, every container made
   so far is removed and the record deleted, and the first error is raised. Once all started,
   the launcher is cleared.

A launch killed outright (SIGKILL, a closed terminal, a crash) between create and start cannot
undo itself: its containers stay ``created``. The record's launcher says whether the launch is
still in flight (:func:`launch_in_flight`), so ``ps`` shows such a job as an interrupted launch
(node state ``created``, see :mod:`console.jobs.status`) that ``stop``/``rm`` clean up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from console.diagnosis import diagnose
from console.errors import JobNameInUse, PlanError
from console.jobs import gang
from console.jobs.labels import K_JOB_ID, K_JOB_NAME
from console.jobs.launcher import LAUNCH_STALE_S as LAUNCH_STALE_S  # their old home
from console.jobs.launcher import launch_in_flight as launch_in_flight
from console.jobs.launcher import launcher_alive as launcher_alive
from console.jobs.launcher import launcher_token
from console.jobs.plan import (
    HostFacts,
    JobPlan,
    build_plan,
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
    log.info("host %s: Docker engine error read as %s: %s", error.host, found.kind,
             error.detail)
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
    described = None if holders is None else {
        i: [h.describe() for h in hs] for i, hs in holders.items()
    }
    lost = frozenset(g["index"] for g in sample["gpus"] if g["lost"] and g["index"] is not None)
    return GpuFacts(len(sample["gpus"]), described, lost)


@dataclass(frozen=True)
class Prepared:
    """The outcome of preflight: the plan plus the hosts it runs on."""

    plan: JobPlan
    hosts: list[str]


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
        what = ("no executable file there" if "/" in python
                else "neither a command on PATH nor a conda environment")
        raise RuntimeUnavailable(
            host, f"runtime host: python {python!r} not found ({what})",
            "set `python:` in the spec or the profile's host, or --python, to the python "
            "that has torch (e.g. ~/venv/bin/python)")
    await session.engine(host).hostrt.ensure_image(path)
    return str(path)


async def _host_facts(
    session: Session, loaded: LoadedSpec, host: str, image: str, node0: bool, pull: str,
    dry_run: bool, runtime: str = "docker",
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
    gpus = (await gpu_facts(session, host) if loaded.spec.gpus_per_node != 0
            else GpuFacts(None, None, frozenset()))
    home = await t.home()
    port = None
    if node0 and loaded.spec.rdzv_port is None:
        res = await t.run(["python3", "-c", _FREE_PORT], timeout=30)
        if res.returncode == 0 and res.stdout.strip().isdigit():
            port = int(res.stdout.strip())
    wd = loaded.workdir
    # where sync_workdir will put it (content-addressed), so a dry run can show it
    ex = loaded.spec.exclude
    workdir = (f"{home}/{WORKDIR_CACHE}/{(await asyncio.to_thread(workdir_digest, wd, ex))[:16]}"
               if wd is not None else None)
    if loaded.host_workdir is not None:  # a notebook's folder on the host, kept read-write
        workdir = expand_home(loaded.host_workdir, home)
        if not dry_run:
            res = await t.run(["mkdir", "-p", "--", workdir], timeout=30)
            if res.returncode != 0:
                raise PlanError(
                    f"{loaded.place('workdir')}host {host}: cannot create {workdir}: "
                    f"{res.stderr.strip()}",
                    "give a folder the host's SSH user may write (--workdir)")
    return HostFacts(host, t.address(), gpus.count, home, workdir, port, gpus.holders,
                     gpus.lost, python)


async def check_name_free(session: Session, hosts: list[str], name: str,
                          runtime: str | None = None) -> None:
    """Refuse a job name that is running (or starting) on any of the hosts (in ``runtime``,
    default each host's).

    Raises:
        JobNameInUse: naming the running job's id and hosts.
    """
    found = await gather_first_error(
        *(session.engine(h).list({K_JOB_NAME: name}, runtime=runtime) for h in hosts)
    )
    running = {c.labels.get(K_JOB_ID, "?") for infos in found for c in infos
               if c.status in _ACTIVE and c.status != "created"}
    created = {c.labels.get(K_JOB_ID, "?") for infos in found for c in infos
               if c.status == "created"}
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
    session: Session, loaded: LoadedSpec, *, dry_run: bool = False, force: bool = False
) -> Prepared:
    """Preflight every host and build the plan (steps 1-3 of the module docstring).

    With ``dry_run`` nothing is written anywhere (the workdir is not synced). ``force`` lets
    the job use GPUs that other processes hold.

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
                _host_facts(session, loaded, h, image, i == 0, profile.defaults.pull, dry_run,
                            runtime)
                for i, h in enumerate(hosts)
            )
        )
    except DockerError as e:  # a pull the registry refused, an engine that answers oddly
        explained = explain_engine_error(e)
        if explained is e:
            raise
        raise explained from e
    facts = {f.host: f for f in facts_list}
    job_id = new_job_id(loaded.spec.name)
    # Plan once before any effect, so GPU and process errors come before the workdir sync.
    plan = build_plan(loaded, profile, hosts, facts, job_id=job_id, created_at=time.time(),
                      image=image, force=force)
    if not dry_run and loaded.workdir is not None:
        synced = await gather_first_error(
            *(session.connected(h) for h in hosts)
        )
        paths = await gather_first_error(
            *(t.sync_workdir(loaded.workdir, loaded.spec.exclude) for t in synced))
        facts = {
            h: dataclasses.replace(f, workdir=p) for (h, f), p in zip(facts.items(), paths)
        }
        plan = build_plan(loaded, profile, hosts, facts, job_id=job_id,
                          created_at=plan.created_at, image=image, force=force)
    # gang teardown on the hosts: every node of a multi-node job runs under the supervisor
    # (console/jobs/gang.py, remote/agent/gang.py)
    plan = await gang.attach(session, plan, dry_run=dry_run)
    return Prepared(plan, hosts)


async def launch(session: Session, store: Store, loaded: LoadedSpec, prepared: Prepared) -> str:
    """Create and start every node's container (step 4); returns the job id.

    Raises:
        GpuConsoleError: the first create/start failure, after everything was rolled back.
    """
    plan = prepared.plan
    record = JobRecord(
        id=plan.job_id,
        name=plan.name,
        profile=session.profile.name,
        profile_source=session.profile.source,
        spec={**loaded.spec.model_dump(mode="json"), "runtime": plan.runtime,
              "env": {k: ("${secret}" if k in loaded.secret_env else v)
                      for k, v in loaded.env.items()}},
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

    async def rollback() -> None:
        await asyncio.gather(
            *(session.engine(plan.nodes[r].host).remove(cid) for r, cid in created.items()),
            return_exceptions=True,
        )
        await store.call(store.delete_job, plan.job_id)

    # Shielded: an interrupt (Ctrl-C) lets the engine calls in flight finish, then undoes
    # them all, so a launch is all or none.
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
    for n in record.nodes:
        n.container_id = created[n.node_rank]
        n.state = "pending"  # started; `running` from its first log line (status.refresh)
    await store.call(store.update_nodes, record.nodes)
    await store.call(store.update_job, plan.job_id, state="pending", launcher=None)
    return plan.job_id
