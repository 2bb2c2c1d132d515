"""Profiles: the hosts gpuconsole may use and the defaults for jobs on them.

A profile is a YAML file (``profiles/*.yaml`` in the repo, or the user's config dir), validated
with pydantic. Lookup order: ``--profile NAME|PATH``, then ``$GPUCONSOLE_PROFILE``, then
``<user config dir>/profiles/default.yaml``, then the bundled ``local`` profile (this machine,
no SSH). ``NAME`` is looked up in ``<user config dir>/profiles/NAME.yaml`` and then among the
bundled profiles.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from console.errors import ConfigError
from console.fields import (
    AppriseUrl,
    Given,
    ImageRef,
    Mount,
    NoNul,
    OneLine,
    Size,
    Word,
    env_names,
    not_blank,
)
from console.slurm.fields import SlurmTime
from console.yamlsrc import (
    ConfigErrors,
    Lines,
    combine,
    line_of,
    parse_yaml_bytes,
    read_source,
    validation_errors,
)
from remote.transport import DEFAULT_DOCKER_SOCKET, LocalTransport, Transport

if TYPE_CHECKING:
    from console.alerts.config import AlertsConfig


#: The repo's ``profiles/`` folder (bundled profiles).
def _bundled_dir() -> Path:
    """The bundled profiles: the installed wheel's ``console/bundled_profiles`` (pyproject.toml
    maps the repo's ``profiles/`` there), else the checkout's top-level ``profiles/``."""
    here = Path(__file__).resolve().parent
    packaged = here / "bundled_profiles"
    return packaged if packaged.is_dir() else here.parent / "profiles"


BUNDLED_DIR = _bundled_dir()
"""The bundled profiles' folder (see :func:`_bundled_dir`)."""

_Strict = ConfigDict(extra="forbid", defer_build=True, strict=True)
#: Longest ``connect_timeout`` (s): a wait for one host's handshake, not a way to hang.
MAX_CONNECT_TIMEOUT_S = 600
_CAP_RE = re.compile(r"^(CAP_)?[A-Z][A-Z0-9_]{0,40}$")
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class HostConfig(BaseModel):
    """One host of a profile.

    Fields left unset defer to ``~/.ssh/config`` (asyncssh reads it), so ``hostname`` may be a
    config alias and nothing else.
    """

    model_config = _Strict

    transport: Literal["ssh", "local"] = "ssh"
    hostname: Word | None = Field(None, description="host name, IP or ~/.ssh/config alias")
    port: int | None = Field(None, ge=1, le=65535)
    user: Word | None = None
    identity_file: Given | None = None
    jump: str | None = Field(None, description="jump host, [user@]host[:port] like ssh -J")
    address: Annotated[Word, AfterValidator(not_blank)] | None = Field(
        None, description="IP other nodes use to reach this host"
    )
    docker_socket: OneLine | None = Field(
        None,
        description="engine socket; default /var/run/docker.sock ($DOCKER_HOST=unix://"
        "... wins for a local host)",
    )
    runtime: Literal["docker", "host"] = Field(
        "docker",
        description="how jobs run here by default: docker containers, or host "
        "(torchrun in the host's Python, no Docker); a spec's `runtime` wins",
    )
    python: Given | None = Field(
        None,
        description="runtime host: the python with torch (a path, or a conda env "
        "name); default python3",
    )
    relay_python: Given = Field(
        "python3",
        description="the host's Python 3.8+ (a name on its PATH, or a path) that runs "
        "gpuconsole's log relay; without a usable one log follows read the Docker socket "
        "directly (more SSH packets, more console CPU)",
    )

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str | None) -> str | None:
        from remote.ssh import check_hostname  # asyncssh: only where SSH is configured

        return None if v is None else check_hostname(v)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and (not v or len(v) > 256 or any(c in v for c in ":/")):
            raise ValueError(f"{v[:40]!r} is not a user name (1-256 characters, no ':' or '/')")
        return v

    @field_validator("jump")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        if v is not None:
            from remote.ssh import parse_jump

            parse_jump(v)
        return v

    @field_validator("docker_socket")
    @classmethod
    def _socket(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path")
        return v


class JobDefaults(BaseModel):
    """Defaults applied to every job run with a profile (a job spec overrides them)."""

    model_config = _Strict

    image: ImageRef | None = None
    shm_size: Size | None = "1g"
    ipc: Literal["host"] | None = None
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, NoNul] = Field(
        default_factory=dict, description="${VAR} is taken from your environment, secret"
    )
    cap_add: list[str] = Field(default_factory=list)
    privileged: bool = False
    user: Word | None = Field(None, description="uid:gid the container runs as")
    pull: Literal["missing", "never"] = "missing"
    rdzv_port: int = Field(29400, ge=1, le=65535)
    stop_grace: float = Field(
        30.0, ge=0, le=3600, allow_inf_nan=False, description="seconds between SIGTERM and SIGKILL"
    )
    exclude_slow: bool = Field(
        False,
        description="submit leaves out the GPUs the last `gpuconsole bench` flagged "
        "(as --exclude-slow)",
    )

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return env_names(v)

    @field_validator("cap_add")
    @classmethod
    def _caps(cls, v: list[str]) -> list[str]:
        for c in v:
            if not _CAP_RE.match(c):
                raise ValueError(f"{c[:40]!r} is not a capability name like SYS_PTRACE")
        return v


class SlurmConfig(BaseModel):
    """A Slurm cluster (``scheduler: slurm``): its login host and the jobs' defaults there.

    Attributes:
        login_host: the profile host (under ``hosts``) that runs sbatch, squeue, scancel.
        partition / account: sbatch ``--partition`` / ``--account`` (default: Slurm's).
        time_limit: sbatch ``--time`` when a spec gives none (default: the partition's).
        python: the Python with torch on the nodes, for jobs without a container.
        container: the cluster's container plugin: ``pyxis`` (srun ``--container-image``,
            enroot), ``apptainer`` (``apptainer exec docker://IMAGE``) or ``none`` (every job
            runs on the nodes' own Python).
        sbatch_args: more sbatch options, one per item (``--qos=high``), written as
            ``#SBATCH`` lines.
        job_dir: where each job's folder (script, env file, output files) goes on the login
            host; it must be on a filesystem the compute nodes share (``~/`` = the login
            user's home).
    """

    model_config = _Strict

    login_host: OneLine
    partition: Word | None = None
    account: Word | None = None
    time_limit: SlurmTime | None = None
    python: Given = "python3"
    container: Literal["pyxis", "apptainer", "none"] = "none"
    sbatch_args: list[OneLine] = Field(default_factory=list)
    job_dir: OneLine = "~/.cache/gpuconsole/slurm"

    @field_validator("sbatch_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            if not a.startswith("-"):
                raise ValueError(f"{a[:40]!r} is not an sbatch option (like `--qos=high`)")
        return v

    @field_validator("job_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        if not (v.startswith("/") or v == "~" or v.startswith("~/")):
            raise ValueError(f"{v[:40]!r}: give an absolute path or ~/...")
        return v


class Profile(BaseModel):
    """A named set of hosts plus job defaults.

    Attributes:
        name: the profile's name (its file name without ``.yaml``).
        source: the file it was read from (``None`` for the built-in fallback).
    """

    model_config = _Strict

    name: OneLine = "local"
    source: str | None = None
    hosts: dict[str, HostConfig] = Field(min_length=1)
    known_hosts: Given | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = Field(
        10.0,
        gt=0,
        le=MAX_CONNECT_TIMEOUT_S,
        allow_inf_nan=False,
        description="seconds for the TCP connect and SSH handshake",
    )
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    alerts: dict[str, object] | None = Field(
        None, description="alert rules (console/alerts/config.py; typed: `alert_rules`)"
    )
    price_per_gpu_hour: float | None = Field(
        None, ge=0, le=10_000, allow_inf_nan=False, description="USD per GPU hour (idle GPUs' cost)"
    )
    notify: list[AppriseUrl] = Field(
        default_factory=list, description="Apprise URLs alerts are sent to"
    )
    scheduler: Literal["ssh", "slurm"] = Field(
        "ssh", description="ssh: jobs run in Docker on `hosts`; slurm: sbatch on `slurm`"
    )
    slurm: SlurmConfig | None = Field(
        None, validate_default=True, description="the Slurm cluster (scheduler: slurm)"
    )
    _lines: Lines = PrivateAttr(default_factory=dict)
    _alert_rules: AlertsConfig | None = PrivateAttr(None)

    @field_validator("hosts")
    @classmethod
    def _names(cls, hosts: dict[str, HostConfig]) -> dict[str, HostConfig]:
        for name in hosts:
            if not _HOST_NAME_RE.match(name):
                shown = (
                    repr(name) if len(name) <= 40 else f"{name[:20]!r}... ({len(name)} characters)"
                )
                raise ValueError(
                    f"host name {shown} must be 1-63 letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit"
                )
        return hosts

    @field_validator("slurm")
    @classmethod
    def _slurm(cls, v: SlurmConfig | None, info: ValidationInfo) -> SlurmConfig | None:
        """``slurm:`` goes with ``scheduler: slurm``; its login host is the one host. Runs
        after ``hosts`` and ``scheduler`` (declared before it), so it sees both."""
        scheduler = info.data.get("scheduler", "ssh")
        hosts = info.data.get("hosts") or {}
        if scheduler == "ssh":
            if v is not None:
                raise ValueError("a `slurm:` section needs `scheduler: slurm`")
            return v
        if v is None:
            raise ValueError(
                "`scheduler: slurm` needs a `slurm:` section with `login_host` (one of `hosts`)"
            )
        if hosts and v.login_host not in hosts:
            raise ValueError(
                f"login_host {v.login_host!r} is not under `hosts` ({', '.join(hosts)})"
            )
        if len(hosts) > 1:
            raise ValueError(
                "a Slurm profile's `hosts` holds only the login host "
                f"({v.login_host}); Slurm picks the compute nodes"
            )
        return v

    @property
    def lines(self) -> Lines:
        """The profile file's key paths -> 1-based lines (empty for a built-in profile)."""
        return self._lines

    @property
    def alert_rules(self) -> AlertsConfig:
        """The ``alerts:`` section as :class:`~console.alerts.config.AlertsConfig` (every rule
        at its defaults where the profile has none).

        :func:`load_profile_file` validates a file's section with the rest of the file; the
        models are otherwise built on first use, so commands that evaluate no rule (``ps``,
        ``logs``) do not pay for them (about 15 ms of start-up).

        Raises:
            ConfigError: the section is invalid (naming file, line and field).
        """
        if self._alert_rules is None:
            self._alert_rules = _alert_rules(self.alerts or {}, self.source, self._lines)
        return self._alert_rules

    def host_runtime(self, host: str) -> str:
        """The host's default runtime (``docker`` or ``host``); ``docker`` for a host not in
        the profile."""
        cfg = self.hosts.get(host)
        return cfg.runtime if cfg is not None else "docker"

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
        from remote.ssh import SSHTarget, SSHTransport  # asyncssh: only for SSH hosts

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
                relay_python=cfg.relay_python,
            ),
        )


def user_profiles_dir() -> Path:
    """``<user config dir>/profiles`` (platformdirs; ``$GPUCONSOLE_CONFIG_DIR`` overrides)."""
    base = os.environ.get("GPUCONSOLE_CONFIG_DIR") or platformdirs.user_config_dir("gpuconsole")
    return Path(base) / "profiles"


def load_profile_file(path: Path) -> Profile:
    """Read and validate one profile file (or take its validated copy from
    :mod:`console.profilecache` when the file has not changed since it was validated); the
    key and known_hosts files it names are checked on every load.

    Raises:
        ConfigError: unreadable, malformed or invalid, naming file, line and field.
    """
    from console import profilecache

    raw = read_source(path, "profile")
    cached = profilecache.load(path, raw)
    if cached is not None:
        profile, lines = cached
    else:
        profile, lines = _validate_file(path, raw)
        profilecache.store(path, raw, profile, lines)
    problems = file_problems(profile, lines)
    if problems:
        raise combine(problems)
    profile._lines = lines
    return profile


def _validate_file(path: Path, raw: bytes) -> tuple[Profile, Lines]:
    """Parse and validate a profile file's bytes; returns the profile and its line map.

    Raises:
        ConfigError: malformed or invalid, every problem naming file, line and field.
    """
    data, lines = parse_yaml_bytes(raw, str(path), "profile")
    data.setdefault("name", path.stem)
    data["source"] = str(path)
    rules: AlertsConfig | None = None
    problems: list[ConfigError] = []
    section = data.get("alerts")
    if isinstance(section, dict):
        try:
            rules = _alert_rules(section, str(path), lines)
        except ConfigError as e:
            problems += e.problems if isinstance(e, ConfigErrors) else [e]
    try:
        profile = Profile.model_validate(data)
    except ValidationError as e:
        problems += validation_errors(e, Profile, str(path), lines)
        raise combine(sorted(problems, key=lambda c: c.line or 0)) from e
    if problems:
        raise combine(problems)
    profile._lines = lines
    profile._alert_rules = rules
    return profile, lines


def _alert_rules(section: dict[str, object], source: str | None, lines: Lines) -> AlertsConfig:
    """Validate a profile's ``alerts:`` section.

    Raises:
        ConfigError: invalid, one problem per field, with file and line where known.
    """
    from console.alerts.config import AlertsConfig

    try:
        return AlertsConfig.model_validate(section)
    except ValidationError as e:
        raise combine(
            validation_errors(e, AlertsConfig, source or "profile", lines, prefix=("alerts",))
        ) from e


def file_problems(profile: Profile, lines: Lines) -> list[ConfigError]:
    """The profile's local files that exist but cannot be used: an identity file that is not
    a private key, a known_hosts file that is not one (binary, not UTF-8). Missing files are
    left to the connection (a missing key is reported with the host)."""
    out: list[ConfigError] = []
    source = profile.source
    if profile.known_hosts is not None:
        from remote.ssh import check_known_hosts  # asyncssh: only where SSH is configured

        why = check_known_hosts(profile.known_hosts)
        if why:
            out.append(
                ConfigError(
                    why,
                    "point known_hosts at an OpenSSH known_hosts file "
                    "(lines of `host key-type base64-key`)",
                    path=source,
                    line=line_of(lines, ("known_hosts",)),
                    field="known_hosts",
                )
            )
    checked: dict[str, str | None] = {}  # a fleet's hosts usually share one key
    for name, host in profile.hosts.items():
        if host.identity_file is not None:
            from remote.ssh import check_private_key

            if host.identity_file not in checked:
                checked[host.identity_file] = check_private_key(host.identity_file)
            why = checked[host.identity_file]
            if why:
                loc = ("hosts", name, "identity_file")
                out.append(
                    ConfigError(
                        why,
                        "point identity_file at a private key such as "
                        "~/.ssh/id_ed25519 (not the .pub file)",
                        path=source,
                        line=line_of(lines, loc),
                        field=".".join(loc),
                    )
                )
    return out


def _find(name: str) -> Path | None:
    for folder in (user_profiles_dir(), BUNDLED_DIR):
        p = folder / f"{name}.yaml"
        if p.exists():  # not a regular file: read_source says what it is
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
        if default.exists():
            return load_profile_file(default)
        ref = "local"
    as_path = Path(os.path.expanduser(ref))
    if ref.endswith((".yaml", ".yml")) or os.sep in ref:
        if not as_path.exists():
            raise ConfigError(f"profile file {ref} does not exist", "give an existing YAML file")
        return load_profile_file(as_path)  # a FIFO, device or directory: read_source says so
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
