"""The console's own settings (not a profile): ``<user config dir>/config.yaml``.

Layers, later wins: built-in defaults < ``config.yaml`` < command-line flags. Example::

    interval: 1.0              # telemetry sampling interval (s)
    log_buffer_lines: 100000   # lines each log pane keeps in memory (the archive keeps all)
    jobs_refresh_s: 5          # how often the jobs view reconciles with the hosts (s)
    theme: textual-dark
    keymap:                    # binding id -> keys (comma separated), like posting's keymap
      logs.search: ctrl+f
      jobs.stop: ctrl+k

Binding ids: ``?`` in the app lists every key that applies on the screen, what it does and its
binding id (right column); README.md's "Keys and config" and docs/architecture.md list them all. A
key YAML reads as a number (``app.fleet: 1``) is taken as that key's name; a key that another
binding of the same screen already has is refused (:func:`console.app.app.keymap_errors`).
The directory is ``$GPUCONSOLE_CONFIG_DIR`` if set.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from console.yamlsrc import load_yaml, validation_error


class AppConfig(BaseModel):
    """Settings of the interactive app (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    interval: float = Field(1.0, ge=0.1, le=60, description="telemetry interval (s)")
    log_buffer_lines: int = Field(
        100_000, ge=1_000, le=10_000_000, description="lines kept per log pane"
    )
    jobs_refresh_s: float = Field(5.0, ge=1, le=600, description="jobs view refresh (s)")
    theme: str | None = None
    keymap: dict[str, str] = Field(
        default_factory=dict, description="binding id -> keys, e.g. logs.search: ctrl+f"
    )
    _lines: dict[str, int] = PrivateAttr(default_factory=dict)

    @field_validator("keymap", mode="before")
    @classmethod
    def _number_keys(cls, v: object) -> object:
        """YAML reads ``app.fleet: 1`` as the number 1: a whole number is the key of its
        digit (``1``, ``5``); a list of keys is joined as Textual's comma-separated keys;
        ``true``, ``1.5`` and an empty value stay errors (the fix says to quote them)."""

        def key(k: object) -> object:
            return str(k) if isinstance(k, int) and not isinstance(k, bool) else k

        if isinstance(v, dict):
            return {
                bid: ",".join(str(key(k)) for k in keys)
                if isinstance(keys, list) and all(isinstance(key(k), str) for k in keys)
                else key(keys)
                for bid, keys in v.items()
            }
        return v

    def keymap_line(self, binding_id: str) -> int | None:
        """The line of ``config.yaml`` that remaps ``binding_id`` (1-based), if read from a
        file."""
        return self._lines.get(binding_id)


def config_dir() -> Path:
    """``$GPUCONSOLE_CONFIG_DIR`` or platformdirs' user config dir for gpuconsole."""
    return Path(
        os.environ.get("GPUCONSOLE_CONFIG_DIR") or platformdirs.user_config_dir("gpuconsole")
    )


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
        config = AppConfig.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, AppConfig, str(path), lines) from e
    config._lines = {
        str(loc[1]): line for loc, line in lines.items() if len(loc) == 2 and loc[0] == "keymap"
    }
    return config
