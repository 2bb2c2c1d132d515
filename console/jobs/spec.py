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
    mounts: ["~/.cache/gpuconsole/example-out:/out"]
    shm_size: 1g             # or ipc: host
    max_restarts: 0
    rdzv_port: 29400
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from console.errors import ConfigError
from console.yamlsrc import Lines, load_yaml, validation_error

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}$")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SHM_RE = re.compile(r"^\d+(\.\d+)?[bkmgBKMG]?$")


class JobSpec(BaseModel):
    """A job as written by a person (see the module docstring for an example).

    Attributes:
        gpus_per_node: ``"all"``, a count, a list of GPU indices (nvidia-smi order), or 0 for a
            CPU job (gloo).
        nproc_per_node: torchrun processes per node; default the GPU count, or 1 on CPU.
        workdir: local folder, relative to the spec file; synced to every host.
        exclude: shell patterns of workdir entries not synced (``data``, ``*.ckpt``,
            ``runs/*``); ``.git``, ``.venv`` and caches are never synced.
        mounts: ``host_path:container_path[:ro]``; host paths absolute or ``~/...`` (the
            host user's home).
        shm_size: Docker ``--shm-size`` (``1g``, ``512m``); ignored with ``ipc: host``.
        rdzv_port: TCP port of the c10d rendezvous store on node 0.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    image: str | None = None
    nodes: int | list[str] = 1
    gpus_per_node: Literal["all"] | int | list[int] = "all"
    nproc_per_node: int | None = Field(None, ge=1)
    workdir: str | None = None
    exclude: list[str] = Field(default_factory=list)
    script: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[str] = Field(default_factory=list)
    shm_size: str | None = None
    ipc: Literal["host"] | None = None
    max_restarts: int = Field(0, ge=0)
    rdzv_port: int | None = Field(None, ge=1, le=65535)

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
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1")
        if isinstance(v, list):
            if not v:
                raise ValueError("the host list is empty")
            if len(set(v)) != len(v):
                raise ValueError("a host is listed twice")
        return v

    @field_validator("gpus_per_node")
    @classmethod
    def _gpus(cls, v: str | int | list[int]) -> str | int | list[int]:
        if isinstance(v, int) and v < 0:
            raise ValueError("must be 'all', a count >= 0 or a list of GPU indices")
        if isinstance(v, list):
            if not v or any(i < 0 for i in v) or len(set(v)) != len(v):
                raise ValueError("the GPU index list must be non-empty, distinct and >= 0")
        return v

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            parse_mount(m)
        return v

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str | None) -> str | None:
        if v is not None and not _SHM_RE.match(v):
            raise ValueError("must be a size like 512m or 8g")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
        return v


def parse_mount(m: str) -> tuple[str, str, bool]:
    """Split ``host:container[:ro|rw]`` into ``(host, container, read_only)``.

    Raises:
        ValueError: wrong form, or a relative path.
    """
    parts = m.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"mount {m!r} must be host_path:container_path[:ro]")
    src, dst = parts[0], parts[1]
    if not (src.startswith("/") or src == "~" or src.startswith("~/")):
        raise ValueError(f"mount {m!r}: the host path must be absolute or start with ~/")
    if not dst.startswith("/"):
        raise ValueError(f"mount {m!r}: the container path must be absolute")
    return src, dst, len(parts) == 3 and parts[2] == "ro"


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus where it came from and its resolved environment.

    Attributes:
        spec: the validated spec.
        source: the spec file.
        base_dir: folder that relative paths (``workdir``) are taken from.
        env: the environment with ``${VAR}`` references resolved from the local environment.
        secret_env: keys whose value came from a ``${VAR}`` reference (never printed).
    """

    spec: JobSpec
    source: str
    base_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()

    @property
    def workdir(self) -> Path | None:
        """The local workdir as an absolute path, or ``None``."""
        if self.spec.workdir is None:
            return None
        return (self.base_dir / os.path.expanduser(self.spec.workdir)).resolve()

    def spec_hash(self, extra: str = "") -> str:
        """12 hex digits of SHA-256 over the spec (secrets by name only) and ``extra``."""
        data = self.spec.model_dump(mode="json")
        data["env"] = {k: ("${secret}" if k in self.secret_env else v) for k, v in self.env.items()}
        blob = json.dumps(data, sort_keys=True) + extra
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def load_spec(path: Path, overrides: dict[str, Any] | None = None) -> LoadedSpec:
    """Load, override and validate a job spec file.

    Args:
        path: the YAML spec.
        overrides: field values from CLI flags (``None`` values ignored).

    Raises:
        ConfigError: malformed YAML, unknown field, bad value or an unset ``${VAR}``, naming
            the file, the line and the field.
    """
    data, lines = load_yaml(path, "job spec")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    data.update(given)
    try:
        return validate_spec(data, str(path), path.parent.resolve(), lines)
    except ConfigError as e:
        root = re.split(r"[.\[]", e.field or "")[0]
        if root in given:  # the bad value came from a flag, not from the file
            raise ConfigError(e.detail, e.hint, field=f"--{root.replace('_', '-')}") from e
        raise


def validate_spec(
    data: dict[str, Any], source: str, base_dir: Path, lines: Lines | None = None
) -> LoadedSpec:
    """Validate spec data (see :func:`load_spec`)."""
    lines = lines or {}
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, JobSpec, source, lines) from e
    env, secrets = resolve_env(spec.env, source, lines)
    loaded = LoadedSpec(spec, source, base_dir, env, secrets)
    wd = loaded.workdir
    if wd is not None and not wd.is_dir():
        raise ConfigError(
            f"workdir {wd} is not a folder",
            "workdir is relative to the spec file's folder",
            path=source,
            line=lines.get(("workdir",)),
            field="workdir",
        )
    if wd is not None and not (wd / spec.script).is_file():
        raise ConfigError(
            f"script {spec.script!r} is not in the workdir {wd}",
            "script is a path inside workdir",
            path=source,
            line=lines.get(("script",)),
            field="script",
        )
    return loaded


def resolve_env(
    env: dict[str, str], source: str, lines: Lines
) -> tuple[dict[str, str], frozenset[str]]:
    """Replace ``${VAR}`` with the local environment's value; such keys become secret.

    Raises:
        ConfigError: a referenced variable is not set locally.
    """
    out: dict[str, str] = {}
    secrets: set[str] = set()
    for key, value in env.items():
        names = _VAR_RE.findall(value)
        for name in names:
            if name not in os.environ:
                raise ConfigError(
                    f"references ${{{name}}}, which is not set in your environment",
                    f"export {name}=... before submitting, or remove the reference",
                    path=source,
                    line=lines.get(("env", key)),
                    field=f"env.{key}",
                )
        if names:
            secrets.add(key)
            value = _VAR_RE.sub(lambda m: os.environ[m.group(1)], value)
        out[key] = value
    return out, frozenset(secrets)
