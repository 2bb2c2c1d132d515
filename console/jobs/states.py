"""The states of a job and of its nodes, as stored (``jobs.state``, ``nodes.state``) and shown.

Node states (what each means: :mod:`console.jobs.status`): ``pending``, ``created`` (created,
never started, its launch over), ``running``, ``succeeded``, ``failed``, ``stopped``, ``lost``,
``unreachable`` (its host could not be asked) and ``unknown`` (a Slurm job in a state word
gpuconsole does not know: :data:`console.slurm.state.STATE_MAP`).

Job states: ``pending``, ``running``, ``succeeded``, ``failed``, ``stopped``, ``lost`` and
``unknown``; every face shows ``removed`` instead once ``rm`` removed the job.

The values are the strings stored and printed (``ps``, ``--json``, the app), so a
:data:`typing.Literal` each: mypy checks every comparison and assignment against them.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["JobState", "NodeState", "ShownState"]

NodeState = Literal[
    "pending",
    "created",
    "running",
    "succeeded",
    "failed",
    "stopped",
    "lost",
    "unreachable",
    "unknown",
]
"""A node's state (the module docstring)."""

JobState = Literal["pending", "running", "succeeded", "failed", "stopped", "lost", "unknown"]
"""A job's state (the module docstring), aggregated from its nodes'
(:func:`console.jobs.status.job_state`; a Slurm job's from Slurm's)."""

ShownState = Literal[JobState, "removed"]
"""A job's state as every face shows it (:func:`console.jobs.status.shown_state`)."""
