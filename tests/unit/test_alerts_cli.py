"""``gpuconsole alerts``: list, ack, silence, unsilence over the real alert store (SQLite in
a temporary state dir), and the exit codes of bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from console.alerts.model import Alert, AlertChanged
from console.alerts.store import AlertStore
from console.cli import main


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AlertStore:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GPUCONSOLE_PROFILE", "local")
    s = AlertStore(tmp_path, profile="local")  # the CLI's profile: alerts are per profile
    now = time.time()
    alert = Alert(
        key="host_unreachable/b",
        rule="host_unreachable",
        severity="critical",
        summary="host b unreachable for 75 s: connection refused",
        host="b",
        since=now - 75,
        fired_at=now - 15,
    )
    s.record([AlertChanged(alert, "fired", now - 15)])
    return s


def test_list_ack_silence_unsilence(store: AlertStore) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["alerts"])
    assert res.exit_code == 0, res.output
    assert "critical firing" in res.output and "host_unreachable/b" in res.output
    res = runner.invoke(main, ["alerts", "--json"])
    row = json.loads(res.output)
    assert (row["key"], row["state"], row["host"]) == ("host_unreachable/b", "firing", "b")

    res = runner.invoke(main, ["alerts", "ack", "host_unreachable/b"])
    assert res.exit_code == 0 and "acknowledged host_unreachable/b" in res.output
    assert [a.key for a in store.acks()] == ["host_unreachable/b"]
    # shown at once, with no watch running to apply it
    assert "critical acked" in runner.invoke(main, ["alerts"]).output

    res = runner.invoke(
        main, ["alerts", "silence", "--host", "b", "--for", "2h", "--comment", "maintenance"]
    )
    assert res.exit_code == 0, res.output
    (sil,) = store.silences()
    assert sil.host == "b" and 7190 < sil.until - sil.created_at <= 7200
    assert "critical silenced" in runner.invoke(main, ["alerts"]).output
    res = runner.invoke(main, ["alerts", "silences"])
    assert res.output.splitlines()[0].split() == ["ID", "STATE", "LEFT", "UNTIL", "MATCHES"]
    assert "active" in res.output and "maintenance" in res.output
    res = runner.invoke(main, ["alerts", "unsilence", str(sil.id)])
    assert res.exit_code == 0 and store.silences() == []


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["alerts", "ack", "gpu_temperature/a/gpu0"], "KEY: no firing alert"),
        (
            ["alerts", "silence", "host_unreachable/b", "--for", "2x"],
            "--for: '2x' is not a duration",
        ),
        (["alerts", "silence", "--for", "1h"], "KEY: give an alert key"),
        (["alerts", "unsilence", "99"], "ID: no silence 99"),
        (["alerts", "silence", "host_unreachable/b", "--for", "400d"], "--for: 400d is longer"),
    ],
)
def test_bad_input_names_the_argument_and_exits_2(
    store: AlertStore, args: list[str], names: str
) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert f"error: {names}" in res.output and "fix:" in res.output


def test_a_silence_that_matches_nothing_firing_says_so(store: AlertStore) -> None:
    res = CliRunner().invoke(main, ["alerts", "silence", "gpu_temperature/a/*", "--for", "1h"])
    assert res.exit_code == 0
    assert "note: no firing alert matches it now" in res.output
