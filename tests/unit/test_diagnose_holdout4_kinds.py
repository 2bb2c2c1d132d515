"""The kinds the fourth held-out set (tests/data/diagnose/corpus/holdout4/) found missing, tested
as kinds: each rule on its case, on variants derived from the case (each transformation said
next to it: a code changed to the other values the primary source prints, a prefix or wrapping
added), and on texts it must leave alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.diagnosis import Diagnosis, diagnose
from console.diagnosis.lines import normalize

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus" / "holdout4"


def _text(case: str) -> str:
    return (CORPUS / f"{case}.txt").read_text(encoding="utf-8")


def _diagnose(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None
    return d


# -- hold4-004/005: DeepSpeed launcher's sigkill_handler "exits with return code = N" ----------


@pytest.mark.parametrize(
    ("code", "kind"), [("-9", "sigkill"), ("-11", "sigsegv"), ("-6", "sigabrt"), ("1", "exit_code")]
)
def test_deepspeed_return_code_names_the_worker_end(code: str, kind: str) -> None:
    # hold4-005 with its return code replaced by the others launch.py prints
    text = _text("hold4-005").replace("return code = -11", f"return code = {code}")
    d = _diagnose(text)
    assert d.kind == kind
    assert d.facts["exitcode"] == int(code) and d.facts["local_rank"] == 1
    assert any(f"exits with return code = {code}" in e for e in d.evidence)


def test_deepspeed_line_with_stray_characters_glued_before_its_prefix() -> None:
    # hold4-004 with typed characters glued before the [ERROR] line's timestamp (as in hold4-005)
    text = _text("hold4-004").replace(
        "[2023-04-14 13:11:27,885] [ERROR]", "fdsui[2023-04-14 13:11:27,885] [ERROR]"
    )
    d = _diagnose(text)
    assert d.kind == "sigkill" and d.facts["exitcode"] == -9


# -- hold4-008: old NCCL socket WARN under torch.multiprocessing.spawn's wrapper ---------------


def test_spawn_wrapper_exception_is_not_the_root() -> None:
    d = _diagnose(_text("hold4-008"))
    assert d.kind == "nccl_system_error"
    assert all(not e.startswith("Exception:") for e in d.evidence)


def test_exception_type_never_ends_with_a_colon() -> None:
    d = _diagnose(
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "    raise Exception(msg)\nException: \n"
    )
    assert d.kind == "exception" and d.facts["exception_type"] == "Exception"


# -- hold4-010 / hold4-020: Ray's prefix and Markdown emphasis in the normaliser -------------


@pytest.mark.parametrize(
    "prefix",
    ["(pid=909608) ", "(RayWorker pid=909608) ", "(RayTrainWorker pid=909608, ip=192.0.2.7) "],
)
def test_ray_prefix_is_a_decoration(prefix: str) -> None:
    line = "gpu-node-01:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC"
    assert normalize(prefix + line)[0].text == line


def test_ncclerror_takes_its_detail_from_a_ray_prefixed_warn() -> None:
    d = _diagnose(_text("hold4-010"))
    assert d.kind == "nccl_unhandled_cuda"
    assert any("peer access is not supported" in e for e in d.evidence)


@pytest.mark.parametrize("mark", ["**", "*", "__", "`"])
def test_emphasis_around_a_line_does_not_block_matching(mark: str) -> None:
    # hold4-020's bold line re-marked with the other CommonMark emphasis / code markers
    text = _text("hold4-020").replace(
        "**pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded**",
        f"{mark}pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded{mark}",
    )
    assert _diagnose(text).kind == "driver_unreachable"


def test_a_bullet_and_a_dunder_name_are_not_emphasis() -> None:
    assert normalize("* item one")[0].text == "* item one"
    assert normalize("__main__")[0].text == "__main__"


# -- hold4-027: crun / runc hook errors ------------------------------------------------------


def test_crun_json_hook_error_is_toolkit_hook_failed() -> None:
    d = _diagnose(_text("hold4-027"))
    assert d.kind == "toolkit_hook_failed" and d.facts["hook"] == "/usr/bin/nvidia-cdi-hook"


def test_a_hook_that_is_not_nvidia_is_left_alone() -> None:
    # hold4-027's line with the hook path replaced by an unrelated OCI hook and no NVIDIA word
    text = (
        'Error: OCI runtime error: crun: {"msg":"error executing hook `/usr/libexec/oci/'
        'hooks.d/other-hook` (exit code: 1)","level":"error"}'
    )
    d = diagnose(text)
    assert d is None or d.kind != "toolkit_hook_failed"


# -- hold4-029/030: Kubernetes container ends ------------------------------------------------


def test_kubeflow_operator_exit_code() -> None:
    d = _diagnose(_text("hold4-029"))
    assert d.kind == "exit_code" and d.facts["exitcode"] == 1


@pytest.mark.parametrize(
    ("code", "reason", "kind"),
    [
        ("137", "Error", "sigkill"),
        ("139", "Error", "sigsegv"),
        ("137", "OOMKilled", "oom_killed"),
        ("2", "Error", "exit_code"),
    ],
)
def test_kubectl_describe_terminated_state(code: str, reason: str, kind: str) -> None:
    # hold4-030's state block with the exit code / reason replaced by the other values
    text = (
        _text("hold4-030")
        .replace("Exit Code:    137", f"Exit Code:    {code}")
        .replace("Reason:       Error", f"Reason:       {reason}")
    )
    d = _diagnose(text)
    assert d.kind == kind and d.facts["exitcode"] == int(code)


def test_exit_code_outside_a_terminated_state_is_left_alone() -> None:
    d = diagnose("Exit Code:    137\n")
    assert d is None or d.kind != "sigkill"


# -- hold4-001: the exception line, not the frame's raise line -------------------------------


def test_rendezvous_evidence_is_the_exception_line() -> None:
    d = _diagnose(_text("hold4-001"))
    assert d.kind == "rendezvous_connection"
    assert not d.evidence[0].lstrip().startswith("raise ")
    assert "The connection to the C10d store has failed" in d.evidence[0]
