"""Click parameter types shared by the commands' flags."""

from __future__ import annotations

import math

import click


class FiniteFloat(click.FloatRange):
    """A number of a bounded range that is finite: click's ``FloatRange`` lets ``inf`` (with
    no maximum) and ``nan`` (always: every comparison with it is false) through, and a wait of
    ``inf`` or ``1e308`` seconds never ends. Both bounds are required, so every duration flag
    has a largest value; a bad value is click's usage error (exit 2), naming the flag."""

    def __init__(self, min: float, max: float, *, min_open: bool = False) -> None:
        super().__init__(min, max, min_open=min_open)

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Parse ``value`` as a float, refusing NaN and infinities, then check the range."""
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(
                f"{value!r} is not a finite number (give {self._describe_range()})", param, ctx
            )
        result: float = super().convert(number, param, ctx)
        return result
