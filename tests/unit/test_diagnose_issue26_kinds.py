"""Issue 26's kinds, each checked on a real variant beside its corpus cases
(tests/data/diagnose/corpus/*/expected.yaml, ids named per test) and on a near miss."""

from __future__ import annotations

from console.diagnosis import diagnose


def test_slurmstepd_execve_failure_is_the_root_and_its_errno_the_exit_code() -> None:
    """slm-013/slm-014; a variant from firelab/windninja#624 (a command not on the node)."""
    text = ("slurmstepd: error: execve(): mkdir: No such file or directory\n"
            "slurmstepd: error: execve(): mkdir: No such file or directory\n"
            "srun: error: gpu-node-07: tasks 15-19: Exited with exit code 2\n")
    d = diagnose(text)
    assert d is not None and d.kind == "slurm_exec_failed"
    assert (d.facts["path"], d.facts["reason"]) == ("mkdir", "No such file or directory")
    assert [c.kind for c in d.consequences] == ["exit_code"]
    # near miss: a program's own execve error, not slurmstepd's
    d2 = diagnose("error: execve(): /usr/bin/foo: No such file or directory\n")
    assert d2 is None or d2.kind != "slurm_exec_failed"
