"""The sbatch script of a job on a Slurm profile (pure: no I/O).

One sbatch job runs the whole spec: ``--nodes`` nodes, one ``srun`` task per node, each task
one torchrun agent (``python -m torch.distributed.run``) with a c10d rendezvous on the first
node of the allocation. The first node's address is Slurm's ``NodeAddr`` of the first name of
``scontrol show hostnames $SLURM_JOB_NODELIST`` (the name may not resolve where NodeAddr is
set; on the test cluster both nodes are one machine). Every worker line carries torchrun's
``[rank<R>]:`` prefix (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``, as for Docker jobs) and each
node's task writes its own file, ``<job dir>/node<N>.out`` (srun ``--output`` with ``%t``, the
task id, which is the node id with one task per node); sbatch's own output (the script's and
srun's messages) goes to ``<job dir>/batch.out``.

The job's environment (the profile's ``defaults.env`` and the spec's ``env``, secrets
included) is never in the script: the script sources ``<job dir>/env``, a file of mode 0600
written through stdin (:mod:`console.slurm.backend`), and srun passes it to the tasks
(``--export=ALL``). So no value is on a command line, in ``scontrol show job`` or in sbatch's
own environment (which slurmctld stores with the job).

Runtimes: the spec's image in the cluster's container plugin when the profile names one
(``pyxis``: srun ``--container-image``/``--container-mounts``/``--container-workdir``, enroot
underneath; ``apptainer``: ``apptainer exec --bind ... docker://IMAGE``), else the nodes' own
Python (``python:`` of the spec, else the profile's ``slurm.python``) in the synced workdir.
Sources: ``man sbatch``, ``man srun`` (Slurm 22.05), NVIDIA/pyxis README, Apptainer's
``exec`` documentation, ``torch.distributed.run --help``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console.errors import PlanError
from console.fields import WORKSPACE, parse_mount
from console.jobs.flightrec import flight_recorder_env
from console.jobs.plan import LOG_PREFIX_TEMPLATE, shell_word
from console.jobs.spec import LoadedSpec
from console.profiles import Profile, SlurmConfig

#: The batch script's own output (its lines and srun's) in the job folder.
BATCH_OUT = "batch.out"
#: The job's environment file in the job folder (mode 0600).
ENV_FILE = "env"
#: The script as submitted, in the job folder.
SCRIPT_FILE = "job.sbatch"
#: The record of the job for adoption (:mod:`console.slurm.backend`), in the job folder.
RECORD_FILE = "job.json"
#: ``--comment`` of every gpuconsole job: ``gpuconsole:<job id>``.
COMMENT_PREFIX = "gpuconsole:"
#: The rendezvous port without ``rdzv_port`` in the spec: the profile's ``rdzv_port`` plus
#: the Slurm job id modulo this, so two jobs sharing a node rarely pick the same port.
PORT_SPREAD = 1000
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/+@=,-]*$")


def node_out(node_rank: int) -> str:
    """The output file of node ``node_rank`` (srun ``--output`` with ``%t``) in the job folder."""
    return f"node{node_rank}.out"


@dataclass(frozen=True)
class SlurmJobShape:
    """What the script asks Slurm for.

    Attributes:
        nodes: the node count (``--nodes``).
        nodelist: the node names when the spec lists them (``--nodelist``), else ``()``.
        gpus_per_node: GPUs per node (``--gpus-per-node``; 0: none asked).
        nproc_per_node: torchrun workers per node.
        runtime: ``host`` (the nodes' Python: the spec says ``runtime: host`` or gives
            ``python``, or the job has no image, or the cluster no container plugin),
            ``pyxis`` or ``apptainer`` (the image through the cluster's plugin).
        python: the Python that runs torchrun with runtime ``host``, else ``None``.
        image: the container image, else ``None``.
    """

    nodes: int
    nodelist: tuple[str, ...]
    gpus_per_node: int
    nproc_per_node: int
    runtime: str
    python: str | None
    image: str | None


def slurm_config(profile: Profile) -> SlurmConfig:
    """The profile's ``slurm:`` section.

    Raises:
        PlanError: the profile is not a Slurm profile.
    """
    if profile.slurm is None:
        raise PlanError(
            f"profile {profile.name} is not a Slurm profile",
            "set `scheduler: slurm` and a `slurm:` section",
        )
    return profile.slurm


def job_shape(loaded: LoadedSpec, profile: Profile) -> SlurmJobShape:
    """The job's nodes, GPUs, workers and runtime on the profile's cluster.

    Raises:
        PlanError: a notebook spec, ``gpus_per_node: all`` or a GPU index list (Slurm
            allocates GPUs by count), more workers than GPUs (message with the spec's
            ``file:line: field:``).
    """
    spec = loaded.spec
    cfg = slurm_config(profile)
    if spec.kind != "train":
        raise PlanError(
            "notebooks run on SSH profiles, not on a Slurm cluster",
            "use a profile with `scheduler: ssh` for `gpuconsole notebook`",
        )
    gpus = spec.gpus_per_node
    if not isinstance(gpus, int):
        raise PlanError(
            f"{loaded.place('gpus_per_node')}Slurm allocates GPUs by count, not {gpus!r}",
            "give `gpus_per_node: N` (0 for a CPU job)",
        )
    nproc = spec.nproc_per_node or (gpus or 1)
    if gpus and nproc > gpus:
        raise PlanError(
            f"{loaded.place('nproc_per_node')}more processes than GPUs: "
            f"nproc_per_node {nproc} > {gpus}",
            "one process per GPU",
        )
    nodes = spec.nodes if isinstance(spec.nodes, int) else len(spec.nodes)
    nodelist = tuple(spec.nodes) if isinstance(spec.nodes, list) else ()
    image = spec.image or profile.defaults.image
    host_only = spec.runtime == "host" or spec.python is not None
    if spec.runtime == "docker" and (cfg.container == "none" or not image):
        why = (
            "the cluster has no container plugin (slurm.container: none)"
            if image
            else "the job has no image"
        )
        raise PlanError(
            f"{loaded.place('runtime')}`runtime: docker` on Slurm needs an image "
            f"and the cluster's container plugin: {why}",
            "set slurm.container (pyxis or apptainer) and an image, or "
            "`runtime: host` to use the nodes' Python",
        )
    runtime = cfg.container if image and cfg.container != "none" and not host_only else "host"
    return SlurmJobShape(
        nodes=nodes,
        nodelist=nodelist,
        gpus_per_node=gpus,
        nproc_per_node=nproc,
        runtime=runtime,
        python=(spec.python or cfg.python) if runtime == "host" else None,
        image=image if runtime != "host" else None,
    )


def _path(value: str, what: str) -> str:
    """A path written unquoted into ``#SBATCH`` lines: absolute, no spaces or quotes."""
    if not _SAFE_PATH.match(value):
        raise PlanError(
            f"{what} {value!r} holds characters sbatch options cannot carry",
            "use a job_dir path of letters, digits and ._/+@=,- only",
        )
    return value


def expand_home(path: str, home: str) -> str:
    """``path`` with a leading ``~`` replaced by ``home``."""
    if path == "~":
        return home
    return f"{home.rstrip('/')}/{path[2:]}" if path.startswith("~/") else path


def render_sbatch(
    loaded: LoadedSpec,
    profile: Profile,
    job_id: str,
    *,
    job_dir: str,
    workdir: str | None,
    home: str,
    env_names: tuple[str, ...] = (),
    secret_names: frozenset[str] = frozenset(),
) -> str:
    """The sbatch script of a job (see the module docstring).

    Args:
        job_id: the gpuconsole job id (``--job-name`` and ``--comment=gpuconsole:<id>``).
        job_dir: the job's folder on the login host (absolute; shared with the nodes).
        workdir: the synced workdir there (absolute), or ``None``.
        home: the login user's home (expands ``~/`` in mounts).
        env_names: the names the env file defines (listed in a comment, values never).
        secret_names: which of them are secrets (marked in that comment).

    Raises:
        PlanError: see :func:`job_shape`; a job folder path sbatch cannot carry.
    """
    spec = loaded.spec
    cfg = slurm_config(profile)
    shape = job_shape(loaded, profile)
    job_dir = _path(job_dir, "job folder")
    q = shell_word
    sb = [
        f"--job-name={job_id}",
        f"--comment={COMMENT_PREFIX}{job_id}",
        f"--nodes={shape.nodes}",
        "--ntasks-per-node=1",
    ]
    if shape.nodelist:
        sb.append(f"--nodelist={','.join(shape.nodelist)}")
    if shape.gpus_per_node:
        sb.append(f"--gpus-per-node={shape.gpus_per_node}")
    time_limit = spec.time_limit or cfg.time_limit
    if time_limit:
        sb.append(f"--time={time_limit}")
    if cfg.partition:
        sb.append(f"--partition={cfg.partition}")
    if cfg.account:
        sb.append(f"--account={cfg.account}")
    sb += [f"--output={job_dir}/{BATCH_OUT}", f"--chdir={job_dir}", *cfg.sbatch_args]
    out = [
        "#!/bin/bash",
        f"# gpuconsole job {job_id} ({spec.name}): {shape.nodes} node(s) x "
        f"{shape.nproc_per_node} process(es), runtime {shape.runtime}",
        *(f"#SBATCH {a}" for a in sb),
        "set -euo pipefail",
        f"job_dir={q(job_dir)}",
    ]
    if env_names:
        names = " ".join(n + (" (secret)" if n in secret_names else "") for n in env_names)
        out.append(f"# environment (values in $job_dir/{ENV_FILE}, mode 0600): {names}")
    out += [
        f'set -a; . "$job_dir/{ENV_FILE}"; set +a',
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "addr=$(scontrol show node \"$first\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        "addr=${addr:-$first}",
    ]
    if spec.rdzv_port:
        out.append(f"port={spec.rdzv_port}")
    else:
        out.append(f"port=$(( {profile.defaults.rdzv_port} + SLURM_JOB_ID % {PORT_SPREAD} ))")
    out += [
        f'echo "gpuconsole: job {job_id} is Slurm job $SLURM_JOB_ID on '
        f'$SLURM_JOB_NODELIST, rendezvous c10d at $addr:$port"',
        f"export PYTHONUNBUFFERED=1 GPUCONSOLE_JOB_ID={q(job_id)} "
        f"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={q(LOG_PREFIX_TEMPLATE)}",
    ]
    if spec.flight_recorder:  # PyTorch's Flight Recorder (console/jobs/flightrec.py)
        fr = {k: v for k, v in flight_recorder_env(job_dir).items() if k not in spec.env}
        out.append("export " + " ".join(f"{k}={q(v)}" for k, v in fr.items()))
    srun = [
        "srun",
        "--kill-on-bad-exit=1",
        "--export=ALL",
        "--ntasks-per-node=1",
        f"--output={job_dir}/node%t.out",
    ]
    mounts = [*profile.defaults.mounts, *spec.mounts]
    binds = []
    for m in mounts:
        src, dst, ro = parse_mount(m)
        binds.append(f"{expand_home(src, home)}:{dst}" + (":ro" if ro else ""))
    if workdir:
        binds.insert(0, f"{workdir}:{WORKSPACE}:ro")
    if shape.runtime == "pyxis":
        assert shape.image is not None
        srun += [f"--container-image={shape.image}", f"--container-workdir={WORKSPACE}"]
        if binds:
            srun.append(f"--container-mounts={','.join(binds)}")
        launcher = ["torchrun"]
    elif shape.runtime == "apptainer":
        assert shape.image is not None
        launcher = [
            "apptainer",
            "exec",
            "--pwd",
            WORKSPACE,
            *(["--nv"] if shape.gpus_per_node else []),
            *(a for b in binds for a in ("--bind", b)),
            f"docker://{shape.image}",
            "torchrun",
        ]
    else:
        assert shape.python is not None
        if mounts:
            out.append(
                "# note: mounts apply to containers; this job runs on the nodes' "
                f"own Python, so {', '.join(mounts)} are not mounted"
            )
        if workdir:
            out.append(f"cd {q(workdir)}")
        launcher = [expand_home(shape.python, home), "-m", "torch.distributed.run"]
    # groups kept on one line each; _Var words are the script's own variables (expanded,
    # in double quotes), every other word is quoted for the shell (never expanded)
    one: list[list[str | _Var]] = [[w] for w in srun[1:]]
    args: list[list[str | _Var]] = [[a] for a in spec.args]
    groups: list[list[str | _Var]] = [
        [srun[0]],
        *one,
        [*launcher],
        ["--nnodes", _Var("$SLURM_JOB_NUM_NODES")],
        ["--nproc-per-node", str(shape.nproc_per_node)],
        ["--rdzv-backend", "c10d"],
        ["--rdzv-endpoint", _Var("$addr:$port")],
        ["--rdzv-id", job_id],
        ["--max-restarts", str(spec.max_restarts)],
        ["--tee", "3"],
        [spec.script or ""],
        *args,
    ]
    shown = [" ".join(f'"{w.text}"' if isinstance(w, _Var) else q(w) for w in g) for g in groups]
    out.append("exec " + " \\\n    ".join(_wrap(shown)))
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class _Var:
    """A word of the script that is a shell expansion of its own (``$addr:$port``)."""

    text: str


def _wrap(words: list[str], width: int = 88) -> list[str]:
    """Words joined into lines of at most ``width`` characters (a word is never split)."""
    lines: list[str] = []
    cur = ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines
