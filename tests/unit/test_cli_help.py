"""`gpuconsole help [COMMAND...]` prints what `--help` prints; `-p ""` is a usage error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from console.cli import main


@pytest.mark.parametrize(
    "command", [[], ["logs"], ["notebook"], ["alerts"], ["alerts", "ack"], ["top"]]
)
def test_help_prints_the_commands_own_help(command: list[str]) -> None:
    own = CliRunner().invoke(main, [*command, "--help"], prog_name="gpuconsole")
    via = CliRunner().invoke(main, ["help", *command], prog_name="gpuconsole")
    assert own.exit_code == via.exit_code == 0, (own.output, via.output)
    assert via.output == own.output
    assert via.output.startswith("Usage: gpuconsole " + " ".join(command))


def test_help_of_an_unknown_command_names_the_commands() -> None:
    res = CliRunner().invoke(main, ["help", "lgos"], prog_name="gpuconsole")
    assert res.exit_code == 2
    assert "no command 'lgos' in `gpuconsole`" in res.output
    assert "logs" in res.output and "submit" in res.output


def test_help_below_a_command_without_subcommands() -> None:
    res = CliRunner().invoke(main, ["help", "logs", "more"], prog_name="gpuconsole")
    assert res.exit_code == 2
    assert "no command 'more' in `gpuconsole logs`" in res.output


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_profile_is_a_usage_error(value: str) -> None:
    res = CliRunner().invoke(main, ["-p", value, "ps"], prog_name="gpuconsole")
    assert res.exit_code == 2
    assert "Invalid value for '--profile' / '-p': is empty" in res.output
