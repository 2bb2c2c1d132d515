"""Profiles: the hosts gpuconsole may use and the defaults for jobs on them.

A profile is a YAML file (``profiles/*.yaml`` in the repo, or the user's config dir), validated
with pydantic. Lookup order: ``--profile NAME|PATH``, then ``$GPUCONSOLE_PROFILE``, then
``<user config dir>/profiles/default.yaml``, then the bundled ``local`` profile (this machine,
no SSH). ``NAME`` is looked up in ``<user config dir>/profiles/NAME.yaml`` and then among the
bundled profiles.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from console.errors import ConfigError
from console.yamlsrc import load_yaml, validation_error
from remote.ssh import SSHTarget, SSHTransport
from remote.transport import DEFAULT_DOCKER_SOCKET, LocalTransport, Transport

#: The repo's ``profiles/`` folder (bundled profiles).
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "profiles"

_Strict = ConfigDict(extra="forbid")


class HostConfig(BaseModel):
    """One host of a profile.

    Fields left unset defer to ``~/.ssh/config`` (asyncssh reads it), so ``hostname`` may be a
    config alias and nothing else.
    """

    model_config = _Strict

    transport: Literal["ssh", "local"] = "ssh"
    hostname: str | None = Field(None, description="host name, IP or ~/.ssh/config alias")
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = None
    jump: str | None = Field(None, description="jump host, [user@]host[:port] like ssh -J")
    address: str | None = Field(None, description="IP other nodes use to reach this host")
    docker_socket: str | None = Field(
        None, description="engine socket; default /var/run/docker.sock ($DOCKER_HOST=unix://"
        "... wins for a local host)")


class JobDefaults(BaseModel):
    """Defaults applied to every job run with a profile (a job spec overrides them)."""

    model_config = _Strict

    image: str | None = None
    shm_size: str | None = "1g"
    ipc: Literal["host"] | None = None
    mounts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cap_add: list[str] = Field(default_factory=list)
    privileged: bool = False
    user: str | None = Field(None, description="uid:gid the container runs as")
    pull: Literal["missing", "never"] = "missing"
    rdzv_port: int = Field(29400, ge=1, le=65535)
    stop_grace: float = Field(30.0, ge=0, description="seconds between SIGTERM and SIGKILL")


class Profile(BaseModel):
    """A named set of hosts plus job defaults.

    Attributes:
        name: the profile's name (its file name without ``.yaml``).
        source: the file it was read from (``None`` for the built-in fallback).
    """

    model_config = _Strict

    name: str = "local"
    source: str | None = None
    hosts: dict[str, HostConfig] = Field(min_length=1)
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = Field(10.0, gt=0)
    defaults: JobDefaults = Field(default_factory=JobDefaults)

    @field_validator("hosts")
    @classmethod
    def _names(cls, hosts: dict[str, HostConfig]) -> dict[str, HostConfig]:
        for name in hosts:
            if not name or any(c.isspace() or c in "/:" for c in name):
                raise ValueError(f"host name {name!r} must not contain spaces, '/' or ':'")
        return hosts

    def transport(self, host: str) -> Transport:
        """A transport for the named host.

        Raises:
            ConfigError: the host is not in this profile.
        """
        cfg = self.hosts.get(host)
        if cfg is None:
            raise ConfigError(
                f"unknown host {host!r} in profile {self.name!r}",
                f"hosts in this profile: {', '.join(self.hosts)}",
            )
        if cfg.transport == "local":
            return LocalTransport(host, cfg.docker_socket, cfg.address)
        return SSHTransport(
            host,
            SSHTarget(
                hostname=cfg.hostname or host,
                port=cfg.port,
                user=cfg.user,
                identity_file=cfg.identity_file,
                jump=cfg.jump,
                known_hosts=self.known_hosts,
                accept_new_host_keys=self.accept_new_host_keys,
                address=cfg.address,
                docker_socket=cfg.docker_socket or DEFAULT_DOCKER_SOCKET,
                connect_timeout=self.connect_timeout,
            ),
        )


def user_profiles_dir() -> Path:
    """``<user config dir>/profiles`` (platformdirs; ``$GPUCONSOLE_CONFIG_DIR`` overrides)."""
    base = os.environ.get("GPUCONSOLE_CONFIG_DIR") or platformdirs.user_config_dir("gpuconsole")
    return Path(base) / "profiles"


def load_profile_file(path: Path) -> Profile:
    """Read and validate one profile file.

    Raises:
        ConfigError: unreadable, malformed or invalid, naming file, line and field.
    """
    data, lines = load_yaml(path, "profile")
    data.setdefault("name", path.stem)
    data["source"] = str(path)
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, Profile, str(path), lines) from e


def _find(name: str) -> Path | None:
    for folder in (user_profiles_dir(), BUNDLED_DIR):
        p = folder / f"{name}.yaml"
        if p.is_file():
            return p
    return None


def resolve_profile(ref: str | None = None) -> Profile:
    """Find and load a profile (see the module docstring for the lookup order).

    Args:
        ref: a profile name or a path to a YAML file, or ``None``.

    Raises:
        ConfigError: the profile does not exist or is invalid.
    """
    ref = ref or os.environ.get("GPUCONSOLE_PROFILE") or None
    if ref is None:
        default = user_profiles_dir() / "default.yaml"
        if default.is_file():
            return load_profile_file(default)
        ref = "local"
    as_path = Path(os.path.expanduser(ref))
    if ref.endswith((".yaml", ".yml")) or os.sep in ref:
        if not as_path.is_file():
            raise ConfigError(f"profile file {ref} does not exist", "give an existing YAML file")
        return load_profile_file(as_path)
    found = _find(ref)
    if found is not None:
        return load_profile_file(found)
    if ref == "local":
        return Profile(name="local", hosts={"local": HostConfig(transport="local")})
    known = sorted({p.stem for d in (user_profiles_dir(), BUNDLED_DIR) for p in d.glob("*.yaml")})
    raise ConfigError(
        f"no profile named {ref!r}",
        f"known profiles: {', '.join(known) or 'local'}; or pass a path to a YAML file",
    )
