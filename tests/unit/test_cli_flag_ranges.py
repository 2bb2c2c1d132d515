"""Numeric flags that cannot be negative are refused by click as bad input (exit 2, the flag
named), before any profile or host is touched."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from console.cli import main


@pytest.mark.parametrize(
    "args",
    [
        ["logs", "some-job", "--tail", "-1"],
        ["logs", "some-job", "--tail", "many"],
    ],
)
def test_bad_tail_is_a_usage_error(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--tail'" in res.output
