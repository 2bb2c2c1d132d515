"""Field types of the Slurm backend shared by the job spec and the profile (no I/O, no
imports beyond pydantic: profiles and specs load it at start-up)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

#: Node host name shown until Slurm allocated the nodes.
PENDING_HOST = "(pending)"

#: sbatch ``--time`` formats (``man sbatch``): ``minutes``, ``minutes:seconds``,
#: ``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes``,
#: ``days-hours:minutes:seconds``; ``UNLIMITED``/``INFINITE`` are the partition's maximum.
TIME_RE = re.compile(
    r"^(?:\d{1,7}|\d{1,7}:\d{1,2}|\d{1,5}:\d{1,2}:\d{1,2}|\d{1,4}-\d{1,2}"
    r"|\d{1,4}-\d{1,2}:\d{1,2}|\d{1,4}-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$"
)


def slurm_time(v: str) -> str:
    """A Slurm time limit as sbatch ``--time`` takes it (see :data:`TIME_RE`)."""
    if not TIME_RE.match(v):
        raise ValueError(
            f"{v[:40]!r} is not a Slurm time limit: give minutes (`30`), `HH:MM:SS` or `D-HH:MM:SS`"
        )
    return v


def _minutes_as_text(v: object) -> object:
    """A bare number of minutes (``time_limit: 30``, read by YAML as an int) as sbatch's
    text; anything else is left to the string check."""
    return str(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else v


SlurmTime = Annotated[str, BeforeValidator(_minutes_as_text), AfterValidator(slurm_time)]
"""A validated sbatch ``--time`` value."""
