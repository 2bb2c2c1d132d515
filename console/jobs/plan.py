"""Planning: from a validated spec, a profile and facts about the hosts to one container per node.

Planning is pure (no I/O): :func:`select_hosts` and :func:`check_spec_against_gpus` run before
anything is contacted, :func:`build_plan` after the hosts were asked for their facts. A
:class:`JobPlan` can be printed (:func:`render_plan`) for ``submit --dry-run``.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console import fields
from console.errors import ConfigError, PlanError
from console.jobs.flightrec import flight_recorder_env
from console.jobs.labels import ERROR_FILE as ERROR_FILE  # defined with the labels
from console.jobs.labels import HOST_ERROR_FILE as HOST_ERROR_FILE
from console.jobs.labels import K_GPUS, K_RUN_ENV, NodeLabels, secret_label
from console.jobs.spec import DOCKER_ONLY, LoadedSpec, parse_mount, resolve_env
from console.profiles import Profile
from console.yamlsrc import combine, line_of
from remote.docker import Bind, ContainerSpec
from remote.gang import HOST_MARKER_NAME, MARKER_ENV

#: Where the synced workdir is mounted (read-only) and the job's working directory.
WORKSPACE = fields.WORKSPACE
#: What torchrun itself replaces in the script's arguments with each worker's local rank
#: (torch.distributed.elastic ``macros.local_rank``, substituted per worker).
LOCAL_RANK_MACRO = "${local_rank}"
#: Rank tag torchrun puts before every worker line (``--tee 3``); ``${rank}`` = global rank.
LOG_PREFIX_TEMPLATE = "[rank${rank}]:"
#: The environment variable Jupyter Server takes its token from (``ServerApp.token``'s
#: default, jupyter_server/serverapp.py); the token never appears on a command line.
TOKEN_ENV = "JUPYTER_TOKEN"


def notebook_command(port: int) -> list[str]:
    """JupyterLab's argv in a notebook container: bound to the host's 127.0.0.1 (containers
    use the host's network) on ``port``, no browser, ``/workspace`` as the root folder, no
    port retries (the port is the one forwarded); ``--allow-root`` because the image's user
    may be root. The token comes from :data:`TOKEN_ENV`."""
    return [
        "jupyter",
        "lab",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--no-browser",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={WORKSPACE}",
        "--allow-root",
    ]


@dataclass(frozen=True)
class HostFacts:
    """What planning needs to know about a host.

    Attributes:
        host: the host's profile name.
        address: IP the other nodes reach it on.
        gpu_count: GPUs on the host (telemetry), or ``None`` when it has no NVIDIA driver.
        home: the host user's home (expands ``~/`` in mounts).
        workdir: the synced workdir's path on the host, or ``None`` without a workdir.
        rdzv_port: a free TCP port on the host for the rendezvous store (node 0 only).
        holders: GPU index -> descriptions of the processes holding it (pid, user, command,
            container, job) and of the active nodes given it whose processes have not opened
            it yet (``launch.assigned_gpus``); ``None`` when the host's process list is
            unknown.
        lost: indices of GPUs that are lost (never chosen).
        python: ``runtime: host``: the python with torch, resolved on the host (a path).
        slow: GPU index -> the last bench's verdict on it, for GPUs that bench flagged
            (``gpuconsole bench``, :mod:`console.bench.store`): named in the plan, and left
            out with ``exclude_slow``.
        exclude_slow: leave the ``slow`` GPUs out (``submit --exclude-slow``, the profile's
            ``defaults.exclude_slow``).

    For a notebook, ``workdir`` is its folder on the host and ``rdzv_port`` JupyterLab's port.
    """

    host: str
    address: str
    gpu_count: int | None
    home: str
    workdir: str | None = None
    rdzv_port: int | None = None
    holders: dict[int, list[str]] | None = None
    lost: frozenset[int] = frozenset()
    python: str | None = None
    slow: Mapping[int, str] = field(default_factory=dict)
    exclude_slow: bool = False


@dataclass(frozen=True)
class NodePlan:
    """One node of a job: its host, GPUs and container."""

    node_rank: int
    host: str
    gpu_ids: tuple[int, ...]
    container: ContainerSpec


@dataclass(frozen=True)
class JobPlan:
    """A job ready to launch.

    Attributes:
        job_id: ``<name>-<6 hex>``.
        rdzv_endpoint: ``<node 0 address>:<port>`` of the c10d rendezvous.
        world_size: nodes x processes per node.
        backend: ``nccl`` with GPUs, ``gloo`` without (what the example job picks).
        script_args: the script's arguments as given (what :func:`render_plan` annotates).
        runtime: ``docker`` or ``host`` (:func:`job_runtime`).
    """

    job_id: str
    name: str
    spec_hash: str
    created_at: float
    nodes: tuple[NodePlan, ...]
    rdzv_endpoint: str
    nproc_per_node: int
    world_size: int
    backend: str
    script_args: tuple[str, ...] = ()
    kind: str = "train"
    port: int | None = None
    runtime: str = "docker"
    notes: tuple[str, ...] = ()


def new_job_id(name: str) -> str:
    """A fresh job id: the name plus 6 random hex digits."""
    return f"{name}-{secrets.token_hex(3)}"


def select_hosts(loaded: LoadedSpec, profile: Profile) -> list[str]:
    """The hosts the job's nodes run on, node 0 first.

    Also resolves the job's environment (:func:`job_env`) so that an unset ``${VAR}`` of the
    profile is reported before any host is contacted.

    Raises:
        ConfigError: a listed host is not in the profile, the profile has too few hosts
            (naming the spec's line, or the ``--nodes`` flag), or :func:`job_env` fails.
    """
    nodes = loaded.spec.nodes
    if isinstance(nodes, list):
        unknown = [
            ConfigError(
                f"unknown host {h!r} (profile {profile.name!r})",
                f"hosts in the profile: {', '.join(profile.hosts)}",
                **loaded.blame(f"nodes[{i}]"),
            )
            for i, h in enumerate(nodes)
            if h not in profile.hosts
        ]
        if unknown:
            raise combine(unknown)
        hosts = list(nodes)
    elif nodes > len(profile.hosts):
        raise ConfigError(
            f"{nodes} nodes asked, but profile {profile.name!r} has {len(profile.hosts)} host(s)",
            f"lower {loaded.name_of('nodes')} or add hosts to the profile",
            **loaded.blame("nodes"),
        )
    else:
        hosts = list(profile.hosts)[:nodes]
    job_env(loaded, profile)
    check_mounts(loaded, profile)
    return hosts


def check_mounts(loaded: LoadedSpec, profile: Profile) -> None:
    """Refuse two mounts (the profile's ``defaults.mounts`` and the spec's ``mounts``) at one
    container path, compared as Docker compares them (normalised: ``/data`` and ``//data/.``
    are one), before any host is contacted: Docker refuses the container at create
    ("Duplicate mount point"). Each mount on its own was checked when its file was read
    (:func:`console.fields.parse_mount`: reserved paths).

    Raises:
        ConfigError: every later mount at a taken path, naming its field and line and the
            mount it collides with.
    """
    seen: dict[str, str] = {}
    problems: list[ConfigError] = []
    listed: list[tuple[str, str, dict[str, Any]]] = [
        (
            f"defaults.mounts[{i}]",
            m,
            {
                "path": profile.source,
                "field": f"defaults.mounts[{i}]",
                "line": line_of(profile.lines, ("defaults", "mounts", i)),
            },
        )
        for i, m in enumerate(profile.defaults.mounts)
    ]
    listed += [
        (f"mounts[{i}]", m, loaded.blame(f"mounts[{i}]")) for i, m in enumerate(loaded.spec.mounts)
    ]
    for name, m, where in listed:
        _src, dst, _ro = parse_mount(m)
        first = seen.setdefault(dst, f"{name} {m!r}")
        if first != f"{name} {m!r}":
            problems.append(
                ConfigError(
                    f"mount {m!r}: the container path {dst} is already mounted by {first}",
                    "give each mount its own container path (Docker refuses two mounts at one "
                    "point); remove one of them",
                    **where,
                )
            )
    if problems:
        raise combine(problems)


def job_env(loaded: LoadedSpec, profile: Profile) -> tuple[dict[str, str], frozenset[str]]:
    """The job's environment: the profile's ``defaults.env`` (``${VAR}`` resolved from your
    environment like the spec's, and secret) updated with the spec's ``env``.

    Returns:
        ``(env, secret keys)``.

    Raises:
        ConfigError: the profile references unset variables (profile file, line, field).
    """
    penv, psecret = resolve_env(
        profile.defaults.env, profile.source, profile.lines, ("defaults", "env")
    )
    env = {**penv, **loaded.env}
    secret = (psecret - loaded.env.keys()) | loaded.secret_env
    return env, frozenset(secret)


def job_runtime(loaded: LoadedSpec, profile: Profile, hosts: list[str]) -> str:
    """The job's runtime: the spec's ``runtime`` (``python`` alone implies ``host``), else
    the hosts' ``runtime`` in the profile.

    Raises:
        ConfigError: the hosts' runtimes differ and the spec names none, or a notebook
            (always a container) would land on a ``runtime: host`` host.
    """
    spec = loaded.spec
    if spec.runtime is not None:
        return spec.runtime
    if spec.python is not None:
        return "host"
    kinds = {h: profile.host_runtime(h) for h in hosts}
    if spec.kind == "notebook":
        bare = [h for h, r in kinds.items() if r == "host"]
        if bare:
            raise ConfigError(
                f"a notebook runs in a container, and host {bare[0]} runs jobs "
                "without Docker (its profile says `runtime: host`)",
                "start it on a host with Docker (--host), or `runtime: docker` "
                "in the notebook spec if that host has Docker too",
            )
        return "docker"
    if len(set(kinds.values())) > 1:
        which = ", ".join(f"{h}: {r}" for h, r in kinds.items())
        raise ConfigError(
            f"the job's hosts run different runtimes ({which})",
            "set `runtime: docker` or `runtime: host` in the spec (--runtime)",
            **loaded.blame("runtime"),
        )
    runtime = next(iter(kinds.values()), "docker")
    if runtime == "host":  # as the spec's own `runtime: host` does (spec._kind_problems)
        bad = [f for f in DOCKER_ONLY if f in spec.model_fields_set]
        if bad:
            raise combine(
                [
                    ConfigError(
                        f"`{f}` needs Docker, and the job's hosts run without it (the profile says "
                        "`runtime: host`)",
                        f"remove `{f}`, or set `runtime: docker` in the spec "
                        "(--runtime docker) if the hosts have Docker too",
                        **loaded.blame(f),
                    )
                    for f in bad
                ]
            )
    return runtime


def job_python(loaded: LoadedSpec, profile: Profile, host: str) -> str:
    """The python a ``runtime: host`` node runs (as written: a path, a command or a conda
    environment's name; resolved on the host by :func:`console.jobs.launch`): the spec's,
    else the profile host's ``python``, else ``python3``."""
    cfg = profile.hosts.get(host)
    return loaded.spec.python or (cfg.python if cfg is not None else None) or "python3"


def check_spec_against_gpus(loaded: LoadedSpec) -> None:
    """Checks that need no host: more processes than the GPUs asked for.

    Raises:
        ConfigError: ``nproc_per_node`` exceeds an explicit GPU count or list.
    """
    spec = loaded.spec
    gpus = spec.gpus_per_node
    n = len(gpus) if isinstance(gpus, list) else gpus if isinstance(gpus, int) else None
    if n and spec.nproc_per_node is not None and spec.nproc_per_node > n:
        raise ConfigError(
            f"more processes than GPUs: nproc_per_node {spec.nproc_per_node} > {n} GPU(s) per node",
            "one process per GPU: lower nproc_per_node or give more GPUs",
            **loaded.blame("nproc_per_node"),
        )


def busy_error(facts: HostFacts, busy: list[int], at: str = "") -> PlanError:
    """The refusal of GPUs ``busy`` of a host, naming what holds each (``facts.holders``)
    and, where a job does, how to stop it."""
    holders = facts.holders or {}
    who = "; ".join(
        f"GPU {i}: " + ("lost" if i in facts.lost else ", ".join(holders.get(i) or ["?"]))
        for i in busy
    )
    jobs = sorted(
        {
            m.group(1)
            for i in busy
            for h in holders.get(i) or []
            for m in [re.search(r"\(job (\S+) n\d+", h)]
            if m
        }
    )
    what = "lost or in use" if facts.lost & set(busy) else "in use"
    stop = (
        f"stop job {', '.join(jobs)} (`gpuconsole stop {jobs[0]}`)"
        if jobs
        else "stop those processes"
    )
    return PlanError(
        f"{at}host {facts.host}: GPU(s) {', '.join(map(str, busy))} {what} ({who})",
        f"pick other GPUs (`gpuconsole gpus --free`), {stop}, or pass --force",
    )


def pick_gpus(loaded: LoadedSpec, facts: HostFacts, force: bool = False) -> tuple[int, ...]:
    """The GPU indices a node uses on its host: free ones first.

    A count takes the lowest-numbered free GPUs; ``all`` and explicit indices must all be
    free. GPUs holding any process are refused unless ``force``; lost GPUs always.

    Raises:
        PlanError: the host has no GPUs, too few (free), an index does not exist there, or
            a chosen GPU is busy (naming the processes and containers holding it); the
            message starts with the spec's ``file:line: gpus_per_node:`` (or the flag).
    """
    gpus = loaded.spec.gpus_per_node
    if gpus == 0:
        return ()
    at = loaded.place("gpus_per_node")
    count = facts.gpu_count
    if not count:
        why = "no NVIDIA driver (nvidia-smi not found)" if count is None else "0 GPUs"
        raise PlanError(
            f"{at}host {facts.host} has {why}, but the job asks for GPUs ({gpus!r})",
            f"{loaded.how_to_set('gpus_per_node', '0')} for a CPU job"
            f"{' (gloo)' if loaded.spec.kind == 'train' else ''}, or use a GPU host",
        )
    holders = facts.holders or {}
    busy = {i for i in range(count) if holders.get(i)} | set(facts.lost)
    slow = set(facts.slow) if facts.exclude_slow else set()
    if isinstance(gpus, int):
        if slow:
            usable = [i for i in range(count) if i not in slow]
            if len(usable) < gpus:
                raise slow_error(facts, sorted(slow), at)
            free = [i for i in usable if i not in busy]
            if len(free) >= gpus:
                return tuple(free[:gpus])
            if not force or facts.lost & set(usable[:gpus]):
                raise busy_error(facts, sorted(busy - slow)[: gpus - len(free)], at)
            return tuple(usable[:gpus])
        if gpus > count:
            raise PlanError(
                f"{at}host {facts.host} has {count} GPU(s), the job asks for {gpus} per node",
                f"{loaded.how_to_set('gpus_per_node', str(count))} or fewer",
            )
        free = [i for i in range(count) if i not in busy]
        if len(free) >= gpus:
            return tuple(free[:gpus])
        if not force or facts.lost & set(range(gpus)):
            taken = sorted(busy)[: gpus - len(free)]
            raise busy_error(facts, taken, at)
        return tuple(range(gpus))
    wanted = list(range(count)) if gpus == "all" else list(gpus)
    missing = [i for i in wanted if i >= count]
    if missing:
        raise PlanError(
            f"{at}host {facts.host} has GPUs 0..{count - 1}; GPU index {missing[0]} does not exist",
            f"fix {loaded.name_of('gpus_per_node')} (indices 0..{count - 1})",
        )
    flagged = [i for i in wanted if i in slow]
    if flagged:
        raise slow_error(facts, flagged, at)
    taken = [i for i in wanted if i in busy and (not force or i in facts.lost)]
    if taken:
        raise busy_error(facts, taken, at)
    return tuple(wanted)


def slow_error(facts: HostFacts, flagged: list[int], at: str = "") -> PlanError:
    """The refusal of GPUs the last bench flagged while ``exclude_slow`` is on."""
    who = "; ".join(f"GPU {i}: {facts.slow.get(i, 'flagged')}" for i in flagged)
    return PlanError(
        f"{at}host {facts.host}: GPU(s) {', '.join(map(str, flagged))} flagged slow by the last "
        f"bench and left out by --exclude-slow ({who})",
        "ask for fewer GPUs, pick others, bench again (`gpuconsole bench --host "
        f"{facts.host}`), or drop --exclude-slow (`defaults.exclude_slow` in the profile)",
    )


def slow_notes(
    hosts: list[str], gpu_sets: list[tuple[int, ...]], facts: Mapping[str, HostFacts]
) -> tuple[str, ...]:
    """The plan's lines about GPUs the last bench flagged: each one the plan uses, and (with
    ``exclude_slow``) each one it left out."""
    out = []
    for host, gpus in zip(hosts, gpu_sets):
        f = facts[host]
        for i, verdict in sorted(f.slow.items()):
            if i in gpus:
                out.append(
                    f"note: host {host} GPU {i} was flagged by the last bench: {verdict} "
                    "(--exclude-slow leaves it out)"
                )
            elif f.exclude_slow:
                out.append(f"note: host {host} GPU {i} left out (--exclude-slow): {verdict}")
    return tuple(dict.fromkeys(out))


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def check_addresses(profile: Profile, hosts: list[str], facts: dict[str, HostFacts]) -> None:
    """Refuse a multi-node job whose nodes could not reach each other at the addresses the
    plan would give torchrun (``--local-addr``, the rendezvous endpoint on node 0): distinct
    hosts with one address (hosts behind one jump host or port forward all show its address,
    or the forward's 127.0.0.1), unless the profile sets that ``address:`` on each of them;
    or a loopback address beside hosts that are not on loopback (the others cannot reach
    it). Either would hang in the rendezvous until torchrun's timeout.

    Raises:
        PlanError: naming the hosts and their address; the fix is ``address:`` in the profile.
    """
    distinct = list(dict.fromkeys(hosts))
    if len(distinct) < 2:
        return
    where = f" of profile {profile.source or profile.name}"

    def explicit(h: str) -> bool:
        cfg = profile.hosts.get(h)
        return cfg is not None and cfg.address is not None

    by_addr: dict[str, list[str]] = {}
    for h in distinct:
        by_addr.setdefault(facts[h].address, []).append(h)
    for addr, same in by_addr.items():
        if len(same) > 1 and not all(explicit(h) for h in same):
            names = ", ".join(same)
            raise PlanError(
                f"hosts {names} would all be reached at {addr}: one SSH address (a jump host "
                "or a port forward) is in front of them, so torchrun's nodes would not find "
                "each other (rendezvous timeout)",
                f"set `address:` for {' and '.join(same)} in the hosts{where}: the IP each "
                "host is reached at by the other nodes",
            )
    loop = [h for h in distinct if _loopback(facts[h].address)]
    if loop and len(loop) < len(distinct):
        other = next(h for h in distinct if h not in loop)
        raise PlanError(
            f"host {loop[0]} would be reached at {facts[loop[0]].address}, a loopback "
            f"address, which host {other} ({facts[other].address}) cannot reach (rendezvous "
            "timeout)",
            f"set `address:` for {loop[0]} in the hosts{where}: the IP the other nodes reach it at",
        )


def expand_home(path: str, home: str) -> str:
    """``path`` with a leading ``~`` replaced by the host user's ``home``."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return f"{home.rstrip('/')}/{path[2:]}"
    return path


def build_plan(
    loaded: LoadedSpec,
    profile: Profile,
    hosts: list[str],
    facts: dict[str, HostFacts],
    *,
    job_id: str,
    created_at: float,
    image: str,
    force: bool = False,
) -> JobPlan:
    """Build the containers of every node.

    Args:
        hosts: from :func:`select_hosts`, node 0 first.
        facts: one :class:`HostFacts` per host.
        image: the resolved image (spec, else profile default).
        force: use GPUs that other processes hold (never lost ones).

    Raises:
        PlanError: GPUs do not fit (see :func:`pick_gpus`), more processes than GPUs, or
            nodes that could not reach each other (:func:`check_addresses`).
        ConfigError: the profile's ``defaults.env`` references an unset variable.
    """
    spec = loaded.spec
    d = profile.defaults
    env_base, secret = job_env(loaded, profile)
    gpu_sets = [pick_gpus(loaded, facts[h], force) for h in hosts]
    n_gpus = len(gpu_sets[0])
    if any(len(g) != n_gpus for g in gpu_sets):
        counts = ", ".join(f"{h}: {len(g)}" for h, g in zip(hosts, gpu_sets))
        raise PlanError(
            f"{loaded.place('gpus_per_node')}hosts have different GPU counts ({counts}) for `all`",
            f"give {loaded.name_of('gpus_per_node')} as a count",
        )
    nproc = spec.nproc_per_node or (n_gpus or 1)
    if n_gpus and nproc > n_gpus:
        raise PlanError(
            f"{loaded.place('nproc_per_node')}more processes than GPUs: nproc_per_node "
            f"{nproc} > {n_gpus} GPU(s) on {hosts[0]}",
            "one process per GPU: lower nproc_per_node",
        )
    if spec.kind == "train":
        check_addresses(profile, hosts, facts)
    node0 = facts[hosts[0]]
    port = spec.rdzv_port or node0.rdzv_port or d.rdzv_port
    endpoint = f"{node0.address}:{port}"
    notebook = spec.kind == "notebook"
    runtime = job_runtime(loaded, profile, hosts)
    spec_hash = loaded.spec_hash()
    shm = spec.shm_size or d.shm_size
    ipc = spec.ipc or d.ipc
    nodes = []
    for rank, host in enumerate(hosts):
        f = facts[host]
        python = f.python or job_python(loaded, profile, host)
        launcher = [python, "-m", "torch.distributed.run"] if runtime == "host" else ["torchrun"]
        # a host-runtime node's own folder (remote.hostengine.node_dir): /tmp is shared there
        node_folder = (
            f"{f.home.rstrip('/')}/.cache/gpuconsole/jobs/{job_id}/gpuconsole-{job_id}-n{rank}"
        )
        cmd = (
            notebook_command(port)
            if notebook
            else [
                *launcher,
                "--nnodes",
                str(len(hosts)),
                "--nproc-per-node",
                str(nproc),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                job_id,
                "--rdzv-conf",
                f"is_host={1 if rank == 0 else 0}",
                "--local-addr",
                f.address,
                "--max-restarts",
                str(spec.max_restarts),
                "--tee",
                "3",
                "--log-dir",
                f"{node_folder}/torchelastic" if runtime == "host" else "/tmp/torchelastic",
                spec.script or "",
                *spec.args,
            ]
        )
        env = {**env_base, "PYTHONUNBUFFERED": "1", "GPUCONSOLE_JOB_ID": job_id}
        if notebook:
            env[TOKEN_ENV] = secrets.token_hex(24)
        else:
            if spec.flight_recorder:  # the spec's own values win
                fr = flight_recorder_env("/tmp" if runtime == "docker" else node_folder)
                env = {**fr, **env}
            env.update(
                {
                    "TORCHELASTIC_ERROR_FILE": ERROR_FILE
                    if runtime == "docker"
                    else f"{node_folder}/{HOST_ERROR_FILE}",
                    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LOG_PREFIX_TEMPLATE,
                    "GPUCONSOLE_NODE_RANK": str(rank),
                }
            )
        if runtime == "host":
            # the agent maps a GPU process to its node by this (no container cgroup here);
            # the gang supervisor writes its outcome into the node's folder
            env["GPUCONSOLE_CONTAINER"] = f"gpuconsole-{job_id}-n{rank}"
            env[MARKER_ENV] = f"{node_folder}/{HOST_MARKER_NAME}"
        binds = []
        if f.workdir:
            binds.append(Bind(f.workdir, WORKSPACE, read_only=not notebook))
        for m in [*d.mounts, *spec.mounts]:
            src, dst, ro = parse_mount(m)
            binds.append(Bind(expand_home(src, f.home), dst, ro))
        labels = NodeLabels(
            job_id=job_id,
            job_name=spec.name,
            node_rank=rank,
            node_count=len(hosts),
            nproc_per_node=nproc,
            host=host,
            spec_hash=spec_hash,
            created_at=created_at,
            kind=spec.kind,
            port=port if notebook else None,
        ).to_labels()
        node_secret = (secret | {TOKEN_ENV}) if notebook else secret
        # the secret names travel with the node, so `describe` masks them from any state dir
        labels.update(secret_label(node_secret))
        if gpu_sets[rank]:  # what a racing launch counts as taken (launch.claim_launch)
            labels[K_GPUS] = ",".join(map(str, gpu_sets[rank]))
        if runtime == "host":
            nodes.append(
                NodePlan(
                    rank,
                    host,
                    gpu_sets[rank],
                    ContainerSpec(
                        name=f"gpuconsole-{job_id}-n{rank}",
                        image=python,
                        command=cmd,
                        env=env,
                        secret_env=node_secret,
                        labels=labels,
                        gpu_device_ids=tuple(str(i) for i in gpu_sets[rank]),
                        working_dir=f.workdir or f.home,
                        runtime="host",
                    ),
                )
            )
            continue
        # what the run set, so `describe` shows a value the image happens to set too
        labels[K_RUN_ENV] = ",".join(sorted(env))
        container = ContainerSpec(
            name=f"gpuconsole-{job_id}-n{rank}",
            image=image,
            command=cmd,
            env=env,
            secret_env=node_secret,
            labels=labels,
            gpu_device_ids=tuple(str(i) for i in gpu_sets[rank]),
            shm_size=None if ipc else shm,
            ipc_mode=ipc,
            binds=tuple(binds),
            cap_add=tuple(d.cap_add),
            privileged=d.privileged,
            working_dir=WORKSPACE,
            user=d.user,
        )
        nodes.append(NodePlan(rank, host, gpu_sets[rank], container))
    return JobPlan(
        job_id=job_id,
        name=spec.name,
        spec_hash=spec_hash,
        created_at=created_at,
        nodes=tuple(nodes),
        rdzv_endpoint=endpoint,
        nproc_per_node=nproc,
        world_size=nproc * len(hosts),
        backend="nccl" if n_gpus else "gloo",
        script_args=tuple(spec.args),
        kind=spec.kind,
        port=port if notebook else None,
        runtime=runtime,
        notes=slow_notes(hosts, gpu_sets, facts)
        + no_workdir_note(spec.workdir, spec.script, notebook),
    )


def no_workdir_note(workdir: str | None, script: str | None, notebook: bool) -> tuple[str, ...]:
    """A spec without ``workdir`` syncs nothing: its script must be in the image (or on the
    host, for ``runtime: host``); the plan says so, as nothing could check it here."""
    if workdir is not None or script is None or notebook:
        return ()
    return (
        f"note: no workdir: nothing is synced, so {script!r} must already be in the image "
        f"(or on the host, for `runtime: host`), as the node's working directory sees it",
    )


def render_plan(plan: JobPlan) -> str:
    """The plan for people: a summary, then one ``docker run`` line per node (secrets masked),
    then notes on the script's arguments.

    Every word is quoted for a POSIX shell; a word holding control or format characters (CR,
    BEL, ESC, bidi overrides, newlines) is written as bash ``$'...'`` with escapes, so the
    text is the same on a terminal and in a pipe and shows every character.
    """
    lines = [
        f"notebook {plan.job_id}: JupyterLab on 127.0.0.1:{plan.port} of "
        f"{plan.nodes[0].host}, token by environment ({TOKEN_ENV})"
        if plan.kind == "notebook"
        else f"job {plan.job_id}: {len(plan.nodes)} node(s) x {plan.nproc_per_node} process(es) = "
        f"world size {plan.world_size}, backend {plan.backend}, "
        f"rendezvous c10d at {plan.rdzv_endpoint}",
    ]
    for n in plan.nodes:
        gpus = ",".join(map(str, n.gpu_ids)) if n.gpu_ids else "none (CPU)"
        lines.append(f"node {n.node_rank} on {n.host}: GPUs {gpus}")
        lines.append("  " + run_line(n.container))
    lines += args_notes(plan.script_args, plan.nproc_per_node)
    lines += plan.notes
    return "\n".join(escape_text(ln) for ln in lines)


def run_line(c: ContainerSpec) -> str:
    """What a node runs, as a person would type it (each word shell-quoted, see
    :func:`shell_word`): the ``docker run`` line, or for a host-runtime node
    ``cd DIR && env K=V... CMD`` (GPUs as ``CUDA_VISIBLE_DEVICES``); secret values ``***``."""
    if c.runtime != "host":
        return " ".join(shell_word(w) for w in c.docker_run_argv())
    env = {**c.env, "CUDA_VISIBLE_DEVICES": ",".join(c.gpu_device_ids)}
    words = [f"{k}=***" if k in c.secret_env else f"{k}={v}" for k, v in sorted(env.items())]
    return f"cd {shell_word(c.working_dir or '~')} && " + " ".join(
        shell_word(w) for w in ["env", *words, *c.command]
    )


def args_notes(args: tuple[str, ...], nproc: int) -> list[str]:
    """Notes on arguments: where torchrun replaces ``${local_rank}`` (per worker, 0..P-1),
    and that other ``${...}`` reach the script as written (no shell runs)."""
    out = []
    ranked = [i for i, a in enumerate(args) if LOCAL_RANK_MACRO in a]
    if ranked:
        where = ", ".join(f"args[{i}] {shell_word(args[i])}" for i in ranked)
        out.append(
            f"note: torchrun replaces {LOCAL_RANK_MACRO} in {where} with each "
            f"process's local rank (0..{nproc - 1})"
        )
    literal = [i for i, a in enumerate(args) if re.search(r"\$\{(?!local_rank\})[^}]*\}", a)]
    if literal:
        where = ", ".join(f"args[{i}] {shell_word(args[i])}" for i in literal)
        out.append(
            f"note: no shell runs the script: {where} reach(es) it as written "
            "(only env values take ${VAR} from your environment)"
        )
    return out


_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\E",
    "\\": "\\\\",
    "'": "\\'",
}


def shell_word(word: str) -> str:
    """``word`` quoted for a POSIX shell; with control or format characters, as bash
    ``$'...'`` (ANSI-C quoting) with each such character escaped."""
    if fields.unprintable(word) is None:
        return shlex.quote(word)
    out = []
    for c in word:
        if c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif fields.unprintable(c) is not None:
            out.append(_code_escape(c))
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def escape_text(text: str) -> str:
    """``text`` with control and format characters written as ``\\xHH``/``\\uHHHH`` (a
    last guard for words that were not quoted by :func:`shell_word`)."""
    if fields.unprintable(text) is None:
        return text
    return "".join(_code_escape(c) if fields.unprintable(c) is not None else c for c in text)


def _code_escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
