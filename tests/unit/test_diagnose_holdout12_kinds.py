"""The kinds holdout12 missed, each on a variant of its own (the corpus cases are in
``tests/data/diagnose/corpus/holdout12``): CUB's and the runtime enum's CUDA error wordings,
the shell's bare ``Aborted``, the notebook server's one-line 403, compose's cut runtime name."""

from __future__ import annotations

from console.diagnosis.engine import diagnose


def test_cubs_cuda_error_and_the_shells_bare_aborted() -> None:
    text = (
        "CUDA error 700 [/usr/include/cub/device/dispatch/dispatch_scan.cuh, 211]: an illegal "
        "memory access was encountered\n"
        "CUDA error 719 [/opt/cub/util_device.cuh, 351]: unspecified launch failure\n"
        "terminate called after throwing an instance of 'thrust::system::system_error'\n"
        "  what():  scan failed: cudaErrorLaunchFailure: unspecified launch failure\n"
        "Aborted\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "cuda_illegal_memory_access"
    only = "\n".join(text.splitlines()[1:]) + "\n"
    d = diagnose(only)
    assert d is not None and d.kind == "cuda_error"
    assert d.facts["cuda_error"] == "unspecified launch failure"
    assert "sigabrt" in {c.kind for c in d.consequences}


def test_a_runtime_enum_alone_reads_as_its_string() -> None:
    d = diagnose("RuntimeError: cuda kernel failed: cudaErrorIllegalInstruction:\n")
    assert d is not None and d.kind == "cuda_error"
    assert d.facts["cuda_error"] == "an illegal instruction was encountered"
    # a query's "not ready" is no error
    assert diagnose("cudaStreamQuery returned cudaErrorNotReady\n") is None


def test_the_notebook_servers_one_line_403() -> None:
    text = (
        "[I 09:00:01.000 NotebookApp] Serving notebooks from local directory: /home/jovyan\n"
        "[W 09:00:12.319 NotebookApp] HTTP 403: Forbidden (Permission denied: "
        "work/analysis.ipynb)\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "jupyter_permission"
    assert d.facts["path"] == "work/analysis.ipynb"


def test_composes_cut_progress_line_does_not_name_the_runtime() -> None:
    text = (
        " ✘ Container trainer  Error response from daemon: unknown or invalid runtime name: ... "
        " 0.0s\n"
        "Error response from daemon: unknown or invalid runtime name: nvidia\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "docker_unknown_runtime"
    assert d.facts["runtime"] == "nvidia"
