"""Job specs: what to run (YAML file, CLI flags override), validated with pydantic.

Example (``scripts/examples/ddp-cpu.yaml``)::

    name: ddp-example
    image: gpuconsole/torch:2.13.0-cpu
    nodes: 1                 # a count (the profile's first N hosts) or a list of host names
    gpus_per_node: 0         # all | N | [0, 1] | 0 = CPU job (gloo)
    nproc_per_node: 2        # default: the GPU count, or 1
    workdir: .               # relative to the spec file; synced to each host, at /workspace
    exclude: [data, "*.ckpt"]  # not synced (.git, .venv and caches never are)
    script: train_ddp.py
    args: ["--steps", "20"]
    env: {WANDB_API_KEY: "${WANDB_API_KEY}"}   # ${VAR} = taken from your environment, secret
    mounts: ["~/.cache/gpuconsole/example-out:/out"]  # host path: absolute or ~/ on the host
    shm_size: 1g             # or ipc: host
    max_restarts: 0
    rdzv_port: 29400

A notebook (``gpuconsole notebook SPEC``) is a spec with ``kind: notebook``: one node running
JupyterLab instead of torchrun, so ``script``, ``args``, ``nproc_per_node``, ``exclude``,
``max_restarts`` and ``rdzv_port`` do not apply, and ``workdir`` names a folder *on the host*
(absolute or ``~/...``; default :data:`NOTEBOOK_WORKDIR`), created if missing and mounted
read-write at ``/workspace``, so notebooks persist there::

    kind: notebook
    name: explore
    nodes: [gpu1]
    gpus_per_node: 1
    workdir: ~/notebooks/explore
    mounts: ["/data:/data:ro"]
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from console.errors import ConfigError
from console.fields import Given, ImageRef, Mount, NoNul, OneLine, Size, env_names, parse_mount
from console.jobs.labels import JOB_NAME_RE
from console.slurm.fields import SlurmTime
from console.yamlsrc import Lines, combine, load_yaml, validation_errors

__all__ = [
    "JobSpec",
    "LoadedSpec",
    "load_spec",
    "parse_mount",
    "resolve_env",
    "validate_spec",
]

NAME_RE = JOB_NAME_RE
#: What an env value interpolates, read left to right as Docker Compose and Kubernetes do:
#: ``$$`` is one literal ``$`` (so ``$${X}`` is the literal text ``${X}``), ``${NAME}`` is
#: the local environment's ``NAME``; any other ``$`` stays as written.
_VAR_RE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)\})")
#: Most torchrun processes per node (a sanity bound: hosts have at most a few hundred cores).
MAX_NPROC = 1024
#: Most nodes of one job.
MAX_NODES = 1024
#: A notebook's folder on the host when its spec or ``--workdir`` names none.
NOTEBOOK_WORKDIR = "~/gpuconsole/notebooks"

#: The flags of ``gpuconsole notebook`` whose name is not ``--field-name`` (spec field ->
#: flag as typed): its errors name ``--gpus``, not ``gpus_per_node`` or ``--gpus-per-node``.
NOTEBOOK_FLAGS: Mapping[str, str] = MappingProxyType({"gpus_per_node": "--gpus", "nodes": "--host"})
#: Fields that need Docker (refused with ``runtime: host``).
DOCKER_ONLY = ("image", "mounts", "shm_size", "ipc")
#: Fields of a training spec that a ``kind: notebook`` spec may not set.
NOT_FOR_NOTEBOOKS = ("script", "args", "nproc_per_node", "exclude", "max_restarts", "rdzv_port")


class JobSpec(BaseModel):
    """A job as written by a person (see the module docstring for an example).

    Attributes:
        kind: ``train`` (torchrun runs ``script``) or ``notebook`` (JupyterLab on one node,
            see the module docstring).
        runtime: ``docker`` (a container per node) or ``host`` (torchrun in the host's Python,
            no Docker: :mod:`remote.hostengine`); default: the hosts' ``runtime`` in the
            profile, else ``docker``.
        python: ``runtime: host`` (also implied by ``python``) and Slurm jobs on the nodes'
            own Python: the python that has torch, run as ``python -m
            torch.distributed.run`` (a path on the hosts, or a conda environment's name);
            default: the profile host's ``python`` (Slurm: ``slurm.python``), else
            ``python3``.
        image: a Docker image reference (checked against Docker's reference grammar).
        gpus_per_node: ``"all"``, a count, a list of GPU indices (nvidia-smi order), or 0 for a
            CPU job (gloo).
        nproc_per_node: torchrun processes per node, 1-1024; default the GPU count, or 1 on
            CPU.
        workdir: local folder, relative to the spec file; synced to every host. For a
            notebook: a folder on the host (absolute or ``~/``), mounted read-write.
        exclude: shell patterns of workdir entries not synced (``data``, ``*.ckpt``,
            ``runs/*``); ``.git``, ``.venv`` and caches are never synced.
        script: a path inside ``workdir`` (relative; ``..`` may not leave it); required for
            ``kind: train``.
        args: the script's arguments, passed as given (no shell); torchrun itself replaces
            ``${local_rank}`` with each process's local rank.
        mounts: ``host_path:container_path[:ro]``; host paths absolute or ``~/...`` (the
            host user's home) on the GPU host; relative host paths are refused.
        shm_size: Docker ``--shm-size`` (``1g``, ``512m``); ignored with ``ipc: host``.
        rdzv_port: TCP port of the c10d rendezvous store on node 0.
        time_limit: Slurm profiles only: the job's ``sbatch --time`` (default: the
            profile's ``slurm.time_limit``, else the partition's).
        flight_recorder: PyTorch's Flight Recorder on for the job (default): every rank
            keeps its last collectives in a ring buffer, dumped on a watchdog timeout or on
            demand (:func:`console.jobs.flightrec.flight_recorder_env`); ``false`` sets none of
            its variables.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["train", "notebook"] = "train"
    name: str
    runtime: Literal["docker", "host"] | None = None
    python: Given | None = None
    image: ImageRef | None = None
    nodes: int | list[OneLine] = 1
    gpus_per_node: Literal["all"] | int | list[int] = "all"
    nproc_per_node: int | None = Field(None, ge=1, le=MAX_NPROC)
    workdir: Given | None = None
    exclude: list[OneLine] = Field(default_factory=list)
    script: Given | None = None
    args: list[NoNul] = Field(default_factory=list)
    env: dict[str, NoNul] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    shm_size: Size | None = None
    ipc: Literal["host"] | None = None
    max_restarts: int = Field(0, ge=0, le=1000)
    rdzv_port: int | None = Field(None, ge=1, le=65535)
    time_limit: SlurmTime | None = None
    flight_recorder: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                "must be lowercase letters, digits, '.', '_' or '-', starting with a letter "
                "or digit, at most 48 characters"
            )
        return v

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: int | list[str]) -> int | list[str]:
        if isinstance(v, int) and not 1 <= v <= MAX_NODES:
            raise ValueError(f"must be from 1 to {MAX_NODES}")
        if isinstance(v, list):
            if not v:
                raise ValueError("the host list is empty")
            if len(set(v)) != len(v):
                raise ValueError("a host is listed twice")
        return v

    @field_validator("gpus_per_node")
    @classmethod
    def _gpus(cls, v: str | int | list[int]) -> str | int | list[int]:
        if isinstance(v, int) and not 0 <= v <= 1024:
            raise ValueError("must be 'all', a count from 0 to 1024, or a list of GPU indices")
        if isinstance(v, list):
            if not v or any(not 0 <= i < 1024 for i in v) or len(set(v)) != len(v):
                raise ValueError("the GPU index list must be non-empty, distinct and 0-1023")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return env_names(v)


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus where it came from and its resolved environment.

    Attributes:
        spec: the validated spec.
        source: the spec file.
        base_dir: folder that relative paths (``workdir``) are taken from.
        env: the environment with ``${VAR}`` references resolved from the local environment.
        secret_env: keys whose value came from a ``${VAR}`` reference (never printed).
        lines: the file's key paths -> 1-based lines (see :mod:`console.yamlsrc`).
        flags: top-level fields whose value came from a command-line flag.
        flag_names: the flag of such a field where it is not ``--field-name`` (e.g.
            :data:`NOTEBOOK_FLAGS`).
    """

    spec: JobSpec
    source: str
    base_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()
    lines: Lines = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    flag_names: Mapping[str, str] = field(default_factory=dict)

    @property
    def workdir(self) -> Path | None:
        """The local workdir as an absolute path, or ``None`` (also for a notebook, whose
        workdir is on the host: :attr:`host_workdir`)."""
        if self.spec.workdir is None or self.spec.kind == "notebook":
            return None
        given = self.base_dir / os.path.expanduser(self.spec.workdir)
        try:
            return resolve_path(given)
        except OSError:  # a symbolic link loop: validation reports it (_workdir_problems)
            return Path(os.path.abspath(given))

    @property
    def host_workdir(self) -> str | None:
        """A notebook's folder on the host (``~/`` not expanded yet), else ``None``."""
        if self.spec.kind != "notebook":
            return None
        return self.spec.workdir or NOTEBOOK_WORKDIR

    def blame(self, field_name: str) -> dict[str, Any]:
        """Where a field's value came from, as :class:`ConfigError` keyword arguments:
        ``--flag`` when a flag gave it, else the spec file, its line and the field."""
        return blame(field_name, self.source, self.lines, self.flags, self.flag_names)

    def name_of(self, field_name: str) -> str:
        """The name a message gives a top-level field: its flag (``--gpus``) when a flag
        gave its value, else the field (``gpus_per_node``)."""
        if field_name in self.flags:
            return flag_name(field_name, self.flag_names)
        return field_name

    def how_to_set(self, field_name: str, value: str) -> str:
        """A fix that sets a top-level field, in the terms its value came in: ``pass
        `--gpus 0``` for a flag's value, else ``set `gpus_per_node: 0```."""
        if field_name in self.flags:
            return f"pass `{flag_name(field_name, self.flag_names)} {value}`"
        return f"set `{field_name}: {value}`"

    def place(self, field_name: str) -> str:
        """``file:line: field: `` (or ``--flag: ``): a prefix for messages about a field."""
        b = self.blame(field_name)
        where = (
            f"{b['path']}:{b['line']}: "
            if b.get("line")
            else (f"{b['path']}: " if b.get("path") else "")
        )
        return f"{where}{b['field']}: "

    def spec_hash(self, extra: str = "") -> str:
        """12 hex digits of SHA-256 over the spec (secrets by name only) and ``extra``."""
        data = self.spec.model_dump(mode="json")
        data["env"] = {k: ("${secret}" if k in self.secret_env else v) for k, v in self.env.items()}
        blob = json.dumps(data, sort_keys=True) + extra
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def flag_name(field_name: str, flag_names: Mapping[str, str] | None = None) -> str:
    """The flag that sets top-level field ``field_name``: ``flag_names``' entry, else
    ``--field-name`` (``submit``'s flags)."""
    return (flag_names or {}).get(field_name) or f"--{field_name.replace('_', '-')}"


def blame(
    field_name: str,
    source: str,
    lines: Lines,
    flags: frozenset[str] = frozenset(),
    flag_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """See :meth:`LoadedSpec.blame`; ``field_name`` like ``nodes[1]`` or ``env.TOKEN``."""
    root = re.split(r"[.\[]", field_name)[0]
    if root in flags:
        return {"field": flag_name(root, flag_names)}
    loc: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", field_name):
        loc.append(int(part[1:-1]) if part.startswith("[") else part)
    from console.yamlsrc import line_of

    return {"path": source, "line": line_of(lines, tuple(loc)), "field": field_name}


def load_spec(path: Path, overrides: dict[str, Any] | None = None) -> LoadedSpec:
    """Load, override and validate a job spec file.

    Args:
        path: the YAML spec.
        overrides: field values from CLI flags (``None`` values ignored).

    Raises:
        ConfigError: malformed YAML, unknown field, bad value or an unset ``${VAR}``, naming
            the file, the line and the field (or the flag, for a flag's value); every
            problem of the file at once (:class:`console.yamlsrc.ConfigErrors`).
    """
    data, lines = load_yaml(path, "job spec")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    data.update(given)
    return validate_spec(data, str(path), path.parent.resolve(), lines, frozenset(given))


def _flag_blamed(
    e: ConfigError, flags: frozenset[str], flag_names: Mapping[str, str] | None = None
) -> ConfigError:
    root = re.split(r"[.\[]", e.field or "")[0]
    if root in flags:  # the bad value came from a flag, not from the file
        return ConfigError(e.detail, e.hint, field=flag_name(root, flag_names))
    return e


def validate_spec(
    data: dict[str, Any],
    source: str,
    base_dir: Path,
    lines: Lines | None = None,
    flags: frozenset[str] = frozenset(),
    flag_names: Mapping[str, str] | None = None,
) -> LoadedSpec:
    """Validate spec data (see :func:`load_spec`); ``flags`` names the fields that came from
    flags, ``flag_names`` those flags where they are not ``--field-name``
    (:data:`NOTEBOOK_FLAGS`)."""
    lines = lines or {}
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as e:
        problems = validation_errors(e, JobSpec, source, lines)
        problems += _files_beside(e, data, source, base_dir, lines, flags, flag_names)
        problems.sort(key=lambda p: p.line if p.line is not None else 0)
        raise combine([_flag_blamed(p, flags, flag_names) for p in problems]) from e
    problems = []
    try:
        env, secrets = resolve_env(spec.env, source, lines)
    except ConfigError as e:
        problems.append(e)
        env, secrets = dict(spec.env), frozenset()
    loaded = LoadedSpec(spec, source, base_dir, env, secrets, lines, flags, dict(flag_names or {}))
    problems += _kind_problems(loaded) or _workdir_problems(loaded)
    if problems:
        raise combine([_flag_blamed(p, flags, flag_names) for p in problems])
    return loaded


def _files_beside(
    e: ValidationError,
    data: dict[str, Any],
    source: str,
    base_dir: Path,
    lines: Lines,
    flags: frozenset[str],
    flag_names: Mapping[str, str] | None,
) -> list[ConfigError]:
    """The workdir / script problems of a spec whose other fields failed validation, when
    ``kind``, ``workdir`` and ``script`` themselves are valid: every problem of the file is
    reported at once, not the files only after the fields are fixed."""
    if any(err["loc"] and err["loc"][0] in ("kind", "workdir", "script") for err in e.errors()):
        return []
    known = {k: data[k] for k in ("kind", "workdir", "script") if k in data}
    partial = JobSpec.model_construct(**known)
    loaded = LoadedSpec(
        partial, source, base_dir, {}, frozenset(), lines, flags, dict(flag_names or {})
    )
    return _workdir_problems(loaded)


def _kind_problems(loaded: LoadedSpec) -> list[ConfigError]:
    """What ``kind`` rules out: a training job without a script; a notebook with torchrun's
    fields, on more than one node, or with a workdir that is not a host path."""
    spec = loaded.spec
    if spec.runtime == "host" or (spec.python is not None and spec.runtime != "docker"):
        out = [
            ConfigError(
                f"`{f}` needs Docker; `runtime: host` runs torchrun in the host's Python",
                f"remove `{f}`, or use `runtime: docker`",
                **loaded.blame(f),
            )
            for f in DOCKER_ONLY
            if f in spec.model_fields_set
        ]
        if spec.kind == "notebook":
            out.append(
                ConfigError(
                    "a notebook runs in a container (JupyterLab from the image)",
                    "remove `runtime: host`",
                    **loaded.blame("runtime"),
                )
            )
        if out:
            return out
    elif spec.python is not None and spec.runtime == "docker":
        return [
            ConfigError(
                "`python` is for `runtime: host` (a container uses its image's)",
                "remove `python`, or set `runtime: host`",
                **loaded.blame("python"),
            )
        ]
    if spec.kind == "train":
        if spec.script is None:
            return [
                ConfigError(
                    "a training job needs `script` (the file torchrun runs)",
                    "add `script: train.py`, or `kind: notebook` for JupyterLab",
                    **loaded.blame("script"),
                )
            ]
        return []
    out = [
        ConfigError(
            f"a notebook takes no `{f}` (JupyterLab runs instead of torchrun)",
            f"remove `{f}`, or drop `kind: notebook`",
            **loaded.blame(f),
        )
        for f in NOT_FOR_NOTEBOOKS
        if f in spec.model_fields_set
    ]
    if not (spec.nodes == 1 or (isinstance(spec.nodes, list) and len(spec.nodes) == 1)):
        out.append(
            ConfigError(
                "a notebook runs on one node",
                "`nodes: 1`, or `nodes: [HOST]` (--host HOST)",
                **loaded.blame("nodes"),
            )
        )
    wd = spec.workdir
    if wd is not None and not (wd.startswith("/") or wd == "~" or wd.startswith("~/")):
        out.append(
            ConfigError(
                f"{wd!r}: a notebook's workdir is a folder on the host",
                "give an absolute path or ~/... (created if missing)",
                **loaded.blame("workdir"),
            )
        )
    return out


def resolve_path(path: Path) -> Path:
    """``path.resolve()``, a symbolic link loop raised as ``OSError`` (``ELOOP``, the link
    where the loop was found as ``filename``) on every Python: 3.11's pathlib raises
    ``RuntimeError("Symlink loop from ...")``."""
    try:
        return path.resolve()
    except RuntimeError as e:
        where = str(e).removeprefix("Symlink loop from ").strip("'\"") or str(path)
        raise OSError(errno.ELOOP, "symbolic link loop", where) from e


def _loop_problem(loaded: LoadedSpec, field_name: str, path: Path) -> ConfigError | None:
    """A problem naming the link that loops when ``path`` cannot be resolved."""
    try:
        resolve_path(path)
    except OSError as e:
        at = e.filename or path
        return ConfigError(
            f"{path}: the symbolic link {at} loops (following it leads back to itself)",
            f"point {at} at a real file or folder, or change {loaded.name_of(field_name)}",
            **loaded.blame(field_name),
        )
    return None


def _workdir_problems(loaded: LoadedSpec) -> list[ConfigError]:
    spec = loaded.spec
    if spec.script is None:  # a notebook (the model checked its host workdir)
        return []
    if spec.workdir is not None:
        looped = _loop_problem(
            loaded, "workdir", loaded.base_dir / os.path.expanduser(spec.workdir)
        )
        if looped is not None:
            return [looped]
    wd = loaded.workdir
    if wd is not None and not wd.is_dir():
        return [
            ConfigError(
                f"workdir {wd} is not a folder",
                "workdir is relative to the spec file's folder",
                **loaded.blame("workdir"),
            )
        ]
    script = PurePosixPath(spec.script)
    if wd is not None and script.is_absolute():
        return [
            ConfigError(
                f"{spec.script!r} is an absolute path; it must be inside the workdir {wd}",
                "give the path relative to workdir",
                **loaded.blame("script"),
            )
        ]
    depth = 0
    for part in script.parts:
        depth += -1 if part == ".." else (0 if part in (".", "/") else 1)
        if depth < 0:
            return [
                ConfigError(
                    f"{spec.script!r} leaves the workdir",
                    "script is a path inside workdir (no `..` above it)",
                    **loaded.blame("script"),
                )
            ]
    if wd is None:
        return []
    looped = _loop_problem(loaded, "script", wd / spec.script)
    if looped is not None:
        return [looped]
    target = resolve_path(wd / spec.script)
    if not target.is_relative_to(wd):
        return [
            ConfigError(
                f"{spec.script!r} leads outside the workdir {wd} (a symbolic link)",
                "script is a file inside workdir",
                **loaded.blame("script"),
            )
        ]
    if not target.is_file():
        return [
            ConfigError(
                f"{spec.script!r} is not in the workdir {wd}",
                "script is a path inside workdir",
                **loaded.blame("script"),
            )
        ]
    from remote.transport import excluded, unsyncable_name, unsyncable_names

    rel = PurePosixPath(os.path.normpath(spec.script))
    parents = [str(p) for p in reversed(rel.parents) if str(p) != "."]
    hit = next(
        (
            path
            for path in [*parents, str(rel)]
            if excluded(path, PurePosixPath(path).name, spec.exclude)
        ),
        None,
    )
    if hit is not None:
        return [
            ConfigError(
                f"{spec.script!r} is left out of the synced workdir by `exclude` (it matches "
                f"{hit!r}): the job would not find it",
                "narrow the `exclude` patterns so the script (and its folder) is synced",
                **loaded.blame("exclude"),
            )
        ]

    bad = unsyncable_names(wd, spec.exclude)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        first, why = bad[0]
        shown = os.fsencode(first).decode("utf-8", "backslashreplace")
        pattern = first if first.isascii() or unsyncable_name(first) is None else "*"
        return [
            ConfigError(
                f"{wd / shown}{more}: {why}",
                f"rename it, or leave it out: `exclude: ['{pattern}']`"
                if pattern != "*"
                else "rename it, or leave it out with an `exclude:` pattern that matches it",
                **loaded.blame("workdir"),
            )
        ]
    return []


def env_references(value: str) -> list[str]:
    """The variables an env value references (``${NAME}``, not the escaped ``$${NAME}``), in
    order (see :data:`_VAR_RE`)."""
    return [m.group(2) for m in _VAR_RE.finditer(value) if m.group(2) is not None]


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with ``$$`` made ``$`` and each ``${NAME}`` replaced by ``environ[NAME]``
    (``""`` when unset; :func:`resolve_env` refuses unset names first)."""
    return _VAR_RE.sub(lambda m: "$" if m.group(1) else environ.get(m.group(2), ""), value)


def resolve_env(
    env: dict[str, str],
    source: str | None,
    lines: Lines,
    prefix: tuple[str, ...] = ("env",),
) -> tuple[dict[str, str], frozenset[str]]:
    """Replace ``${VAR}`` with the local environment's value (``$$`` is a literal ``$``:
    :func:`interpolate`); keys that reference a variable become secret.

    Args:
        prefix: the key path of ``env`` in the file (``("defaults", "env")`` in a profile).

    Raises:
        ConfigError: referenced variables are not set locally (all of them, each with its
            line).
    """
    out: dict[str, str] = {}
    secrets: set[str] = set()
    problems: list[ConfigError] = []
    for key, value in env.items():
        names = env_references(value)
        for name in names:
            if name not in os.environ:
                problems.append(
                    ConfigError(
                        f"references ${{{name}}}, which is not set in your environment",
                        f"export {name}=... before submitting, remove the reference, or write "
                        f"$${{{name}}} for the literal text ${{{name}}}",
                        path=source,
                        line=lines.get((*prefix, key)),
                        field=".".join((*prefix, key)),
                    )
                )
            elif "\x00" in os.environ[name]:
                problems.append(
                    ConfigError(
                        f"${{{name}}} holds a NUL character",
                        f"fix the value of {name}",
                        path=source,
                        line=lines.get((*prefix, key)),
                        field=".".join((*prefix, key)),
                    )
                )
        if names:
            secrets.add(key)
        out[key] = interpolate(value, os.environ)
    if problems:
        raise combine(problems)
    return out, frozenset(secrets)
