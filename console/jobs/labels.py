"""Job labels: the data contract written on every container gpuconsole starts.

The hosts' containers are the truth about a job; the local store is a cache plus history. Every
label key starts with ``io.gpuconsole.``; ``format`` versions the set (bump it on any change of
meaning, and keep reading older versions).

| key                          | value                                        |
|------------------------------|----------------------------------------------|
| io.gpuconsole.format         | "1"                                          |
| io.gpuconsole.job-id         | job id, ``<name>-<6 hex>``                    |
| io.gpuconsole.job-name       | the spec's ``name``                          |
| io.gpuconsole.node-rank      | this container's node index, "0".."N-1"      |
| io.gpuconsole.node-count     | N, the number of nodes                       |
| io.gpuconsole.nproc-per-node | torchrun processes in this container         |
| io.gpuconsole.host           | the host's name in the profile               |
| io.gpuconsole.spec-hash      | 12 hex of SHA-256 over the spec and workdir  |
| io.gpuconsole.created-at     | Unix seconds when the job was submitted      |
| io.gpuconsole.kind           | ``train``, ``notebook`` (absent: ``train``),  |
|                              | ``shell`` on dev containers (no job labels)  |
| io.gpuconsole.port           | a notebook's JupyterLab port on the host's   |
|                              | 127.0.0.1                                    |
| io.gpuconsole.gpus           | the GPU indices given to the node, ``0,1``   |
|                              | (absent: none; a launch counts them taken)   |
| io.gpuconsole.secret-env     | the env names whose values are secret,       |
|                              | comma-separated (may be empty); a job        |
|                              | container without it shows no env value but  |
|                              | gpuconsole's own (:func:`secret_env_of`)     |
| io.gpuconsole.env            | every env name the run set, comma-separated  |
|                              | (Docker nodes; :data:`remote.docker.         |
|                              | RUN_ENV_LABEL`): ``describe`` shows them     |
|                              | also where the image sets the same value     |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "io.gpuconsole."

#: A job's name (the spec's ``name``): 1-48 of lowercase letters, digits, ``_``, ``.``, ``-``,
#: starting with a letter or digit (also a container name part, a folder name).
JOB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}$")
#: A job's id: its name, ``-`` and 6 hex digits (:func:`console.jobs.plan.new_job_id`).
JOB_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}-[0-9a-f]{6}$")


def check_job_id(job_id: str) -> str:
    """``job_id`` if it has the shape gpuconsole gives ids (:data:`JOB_ID_RE`); ids read
    from hosts (container labels, host-runtime and Slurm job folders) name folders of the
    state dir, so one like ``../../x`` must never be taken.

    Raises:
        ValueError: any other string.
    """
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValueError(f"not a gpuconsole job id: {job_id[:80]!r}")
    return job_id


FORMAT = "1"
K_FORMAT = PREFIX + "format"
K_JOB_ID = PREFIX + "job-id"
K_JOB_NAME = PREFIX + "job-name"
K_NODE_RANK = PREFIX + "node-rank"
K_NODE_COUNT = PREFIX + "node-count"
K_NPROC = PREFIX + "nproc-per-node"
K_HOST = PREFIX + "host"
K_SPEC_HASH = PREFIX + "spec-hash"
K_CREATED = PREFIX + "created-at"
K_KIND = PREFIX + "kind"
K_PORT = PREFIX + "port"
K_SECRET_ENV = PREFIX + "secret-env"
K_GPUS = PREFIX + "gpus"
#: the same key as remote.docker.RUN_ENV_LABEL (which reads it back; not imported here: that
#: module's imports cost the CLI's start 50 ms)
K_RUN_ENV = PREFIX + "env"

#: The variables gpuconsole itself sets on a job's nodes (never secret; every other
#: variable of a job container that lacks :data:`K_SECRET_ENV` is masked).
OWN_ENV = frozenset(
    {
        "PYTHONUNBUFFERED",
        "GPUCONSOLE_JOB_ID",
        "GPUCONSOLE_NODE_RANK",
        "GPUCONSOLE_CONTAINER",
        "GPUCONSOLE_GANG_MARKER",
        "TORCHELASTIC_ERROR_FILE",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
        "CUDA_VISIBLE_DEVICES",
    }
)


def gpu_indices(labels: Mapping[str, str]) -> tuple[int, ...]:
    """The GPU indices a node was given (:data:`K_GPUS`); ``()`` without the label or with a
    malformed one."""
    raw = labels.get(K_GPUS, "")
    try:
        return tuple(int(i) for i in raw.split(",") if i)
    except ValueError:
        return ()


def secret_label(names: frozenset[str] | set[str]) -> dict[str, str]:
    """The :data:`K_SECRET_ENV` label naming ``names`` (env names: no comma in them)."""
    return {K_SECRET_ENV: ",".join(sorted(names))}


def secret_env_of(labels: Mapping[str, str], env: Mapping[str, str]) -> frozenset[str]:
    """The env names of a container (or host-runtime node) whose values are secret, read
    from what is on the host, so a state dir that lost the job's record still masks them:
    the names :data:`K_SECRET_ENV` lists; without that label every name of ``env`` but
    gpuconsole's own (:data:`OWN_ENV`)."""
    raw = labels.get(K_SECRET_ENV)
    if raw is None:
        return frozenset(k for k in env if k not in OWN_ENV)
    return frozenset(n for n in raw.split(",") if n)


#: torchrun writes the first failure here (``TORCHELASTIC_ERROR_FILE``, set on every Docker
#: node by :mod:`console.jobs.plan`); :mod:`console.jobs.status` reads it back after exit.
ERROR_FILE = "/tmp/gpuconsole-error.json"
#: The same for a host-runtime node: a file in the node's folder (several jobs share /tmp).
HOST_ERROR_FILE = "error.json"


@dataclass(frozen=True)
class NodeLabels:
    """The labels of one job container, parsed.

    Raises (from :meth:`parse`): ``ValueError`` when a required label is missing or malformed.
    """

    job_id: str
    job_name: str
    node_rank: int
    node_count: int
    nproc_per_node: int
    host: str
    spec_hash: str
    created_at: float
    kind: str = "train"
    port: int | None = None

    def to_labels(self) -> dict[str, str]:
        """The label dict written on the container."""
        return {
            K_FORMAT: FORMAT,
            K_JOB_ID: self.job_id,
            K_JOB_NAME: self.job_name,
            K_NODE_RANK: str(self.node_rank),
            K_NODE_COUNT: str(self.node_count),
            K_NPROC: str(self.nproc_per_node),
            K_HOST: self.host,
            K_SPEC_HASH: self.spec_hash,
            K_CREATED: f"{self.created_at:.3f}",
            K_KIND: self.kind,
            **({K_PORT: str(self.port)} if self.port is not None else {}),
        }

    @classmethod
    def parse(cls, labels: Mapping[str, str]) -> NodeLabels:
        """Read the labels back from a container."""
        try:
            return cls(
                job_id=check_job_id(labels[K_JOB_ID]),
                job_name=labels[K_JOB_NAME],
                node_rank=int(labels[K_NODE_RANK]),
                node_count=int(labels[K_NODE_COUNT]),
                nproc_per_node=int(labels.get(K_NPROC, "1")),
                host=labels.get(K_HOST, ""),
                spec_hash=labels.get(K_SPEC_HASH, ""),
                created_at=float(labels.get(K_CREATED, "0")),
                kind=labels.get(K_KIND, "train"),
                port=int(labels[K_PORT]) if K_PORT in labels else None,
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a gpuconsole job container: {e}") from e
