"""Diagnosis: one clear root cause for a failure, from any saved text.

:func:`diagnose` takes a job's log, a console paste, a kernel log, docker's or nvidia-smi's
errors (any mix, any collector's decoration) and returns a :class:`Diagnosis` with its
consequences, or None. Used by ``gpuconsole diagnose``, ``ps``/``describe``, the TUI and the
job-failed alert. Pure functions over text; no I/O.
"""

from console.diagnosis.elastic import (
    ProcessFailure,
    TorchelasticFailure,
    parse_torchelastic_failure,
    parse_torchelastic_failures,
    signal_name,
)
from console.diagnosis.engine import detect_inputs, diagnose
from console.diagnosis.model import Consequence, Diagnosis, FactValue

__all__ = [
    "Consequence",
    "Diagnosis",
    "FactValue",
    "ProcessFailure",
    "TorchelasticFailure",
    "detect_inputs",
    "diagnose",
    "parse_torchelastic_failure",
    "parse_torchelastic_failures",
    "signal_name",
]
