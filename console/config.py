"""The console's own settings (not a profile): ``<user config dir>/config.yaml``.

Layers, later wins: built-in defaults < ``config.yaml`` < command-line flags. Example::

    interval: 1.0              # telemetry sampling interval (s)
    log_buffer_lines: 100000   # lines each log pane keeps in memory (the archive keeps all)
    jobs_refresh_s: 5          # how often the jobs view reconciles with the hosts (s)
    theme: textual-dark
    keymap:                    # binding id -> keys (comma separated), like posting's keymap
      logs.search: ctrl+f
      jobs.stop: ctrl+k

Binding ids are listed by ``?`` in the app and in docs/architecture.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from console.yamlsrc import load_yaml, validation_error


class AppConfig(BaseModel):
    """Settings of the interactive app (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    interval: float = Field(1.0, ge=0.1, le=60, description="telemetry interval (s)")
    log_buffer_lines: int = Field(100_000, ge=1_000, le=10_000_000,
                                  description="lines kept per log pane")
    jobs_refresh_s: float = Field(5.0, ge=1, le=600, description="jobs view refresh (s)")
    theme: str | None = None
    keymap: dict[str, str] = Field(default_factory=dict,
                                   description="binding id -> keys, e.g. logs.search: ctrl+f")


def config_dir() -> Path:
    """``$GPUCONSOLE_CONFIG_DIR`` or platformdirs' user config dir for gpuconsole."""
    return Path(os.environ.get("GPUCONSOLE_CONFIG_DIR")
                or platformdirs.user_config_dir("gpuconsole"))


def load_config(path: Path | None = None) -> AppConfig:
    """Read ``config.yaml`` (defaults when it does not exist).

    Raises:
        ConfigError: malformed or invalid, naming the file, line and field.
    """
    path = path or config_dir() / "config.yaml"
    if not path.exists():  # a directory or FIFO in its place: read_source says what it is
        return AppConfig()
    data, lines = load_yaml(path, "config")
    try:
        return AppConfig.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, AppConfig, str(path), lines) from e
