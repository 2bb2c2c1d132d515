"""`gpuconsole` (the app) from the command line without a terminal: config errors name the
file and the field, exit 2; no terminal is a clear error, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, config: str | None) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    if config is not None:
        (conf / "config.yaml").write_text(config)
    env = dict(
        os.environ, GPUCONSOLE_STATE_DIR=str(tmp_path / "state"), GPUCONSOLE_CONFIG_DIR=str(conf)
    )
    env.pop("GPUCONSOLE_PROFILE", None)
    return subprocess.run(
        [sys.executable, "-m", "console.cli"],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_keymap_names_the_id_and_the_key(tmp_path: Path) -> None:
    res = _run(tmp_path, "keymap:\n  logs.serch: ctrl+f\n  app.jobs: 'notakey!!'\n")
    assert res.returncode == 2
    path = tmp_path / "conf" / "config.yaml"
    assert (
        f"error: {path}:2: keymap: unknown binding id 'logs.serch' (did you mean 'logs.search'?)"
    ) in res.stderr
    assert f"error: {path}:3: keymap: app.jobs: 'notakey!!' is not a key" in res.stderr
    assert "press `?` in the console (each key" in res.stderr  # where the ids are
    assert "Traceback" not in res.stderr


def test_a_key_another_binding_has_is_refused_naming_both(tmp_path: Path) -> None:
    """`app.jobs: q` would silently take Quit's key: refused, naming both ids and the line."""
    res = _run(tmp_path, "theme: textual-dark\nkeymap:\n  app.jobs: q\n")
    assert res.returncode == 2
    path = tmp_path / "conf" / "config.yaml"
    assert (
        f"error: {path}:3: keymap: app.jobs: 'q' is already the key of app.quit (Quit), "
        "which it would replace"
    ) in res.stderr
    assert "Traceback" not in res.stderr


def test_number_and_list_keys_are_key_names(tmp_path: Path) -> None:
    """YAML reads `app.fleet: 1` as a number: it is the key 1 (here moved off `app.jobs`'s
    2); a list is the comma-separated keys; `true` is refused with the fix to quote it."""
    from console.config import load_config

    conf = tmp_path / "config.yaml"
    conf.write_text("keymap:\n  app.fleet: 2\n  app.jobs: [1, j]\n")
    config = load_config(conf)
    assert config.keymap == {"app.fleet": "2", "app.jobs": "1,j"}
    assert (config.keymap_line("app.fleet"), config.keymap_line("app.jobs")) == (2, 3)
    res = _run(tmp_path, "keymap:\n  app.help: true\n")
    assert res.returncode == 2
    path = tmp_path / "conf" / "config.yaml"
    assert f"error: {path}:2: keymap.app.help: Input should be a valid string" in res.stderr
    assert "quote what YAML reads as another type" in res.stderr


def test_bad_config_value_names_file_line_and_field(tmp_path: Path) -> None:
    res = _run(tmp_path, "theme: textual-dark\ninterval: 0\n")
    assert res.returncode == 2
    assert f"{tmp_path / 'conf' / 'config.yaml'}:2: interval:" in res.stderr


def test_no_terminal_is_a_clear_error(tmp_path: Path) -> None:
    res = _run(tmp_path, "keymap: {logs.search: ctrl+f, app.jobs: j}\n")
    assert res.returncode == 2
    assert res.stderr.startswith("error: the interactive console needs a terminal")
