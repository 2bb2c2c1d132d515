"""The kinds the third held-out set (tests/data/diagnose/corpus/holdout3/) found missing, tested
as kinds: each rule on its case and on the real variants added to the corpus (sources in the
areas' expected.yaml), plus the texts it must leave alone. Texts derived from a real case (a
line re-wrapped, a prefix added) say so next to the transformation."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from console.diagnosis import Diagnosis, diagnose
from remote.telemetry.faults import scan_kernel_log

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"


def _text(rel: str) -> str:
    return (CORPUS / f"{rel}.txt").read_text(encoding="utf-8")


def _diagnose(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None
    return d


# -- hold3-002 / hold3-004: a traceback cut above its frames, ranks' tracebacks interleaved ---


def test_a_traceback_cut_above_its_frames_ends_in_its_exception() -> None:
    d = _diagnose(_text("holdout3/hold3-002"))
    assert d.kind == "exception" and d.facts["exception"] == "RuntimeError"
    assert d.evidence[0].startswith("RuntimeError: Rank 1 successfully reached monitoredBarrier")


def test_interleaved_tracebacks_keep_the_exception_line_before_them() -> None:
    d = _diagnose(_text("holdout3/hold3-004"))
    assert d.kind == "exception" and d.facts["exception"] == "ValueError"
    assert d.evidence == ("ValueError: `FlatParameter` requires uniform `requires_grad`",)


def test_a_rank_prefixed_exception_line_away_from_its_frames_counts() -> None:
    # derived from hold3-004: the exception line moved below the interleaved frames, with the
    # rank prefix PyTorch's log prefix gives it
    lines = _text("holdout3/hold3-004").splitlines()
    exc = next(ln for ln in lines if ln.startswith("ValueError:"))
    rest = [ln for ln in lines if ln != exc and not ln.startswith("    raise ValueError(")]
    d = _diagnose("\n".join(rest + ["", "[rank1]: " + exc]) + "\n")
    assert d.kind == "exception" and d.ranks == (1,)


def test_log_lines_that_only_mention_an_exception_are_none() -> None:
    # hold3-028 from submitit's ERROR line on: a traceback cut before its exception line
    lines = _text("holdout3/hold3-028").splitlines()
    start = next(i for i, ln in enumerate(lines) if "Submitted job triggered" in ln)
    assert diagnose("\n".join(lines[start:]) + "\n") is None


# -- hold3-018: a message split by a terminal's fixed-width wrap -----------------------------


def test_a_blank_padded_wrap_inside_one_line_is_read() -> None:
    d = _diagnose(_text("holdout3/hold3-018"))
    assert d.kind == "cuda_no_device"
    assert d.facts["error"] == "CUDA driver initialization failed"


def test_a_wrap_onto_the_next_physical_line_at_a_terminal_width_is_read() -> None:
    # derived from hold3-018: the warning without its padding, cut into 120-column rows
    line = next(ln for ln in _text("holdout3/hold3-018").splitlines() if "UserWarning" in ln)
    whole = " ".join(line.split())
    whole = whole.replace("initializati on", "initialization")
    rows = [whole[i : i + 120] for i in range(0, len(whole), 120)]
    assert len(rows[0]) == 120 and "initialization failed" not in rows[0]
    d = _diagnose("\n".join(rows) + "\n")
    assert d.kind == "cuda_no_device"


# -- hold3-019 / hold3-025: the toolkit's device error, CDI injection ------------------------


def test_the_toolkit_device_error_names_the_device() -> None:
    d = _diagnose(_text("holdout3/hold3-019"))
    assert d.kind == "toolkit_hook_failed" and d.facts["stage"] == "device"
    assert str(d.facts["device"]).startswith("MIG-GPU-")
    assert "MIG-<uuid>" in d.summary
    for case, device in (("docker/dkr-040", "2"), ("docker/dkr-041", "false")):
        v = _diagnose(_text(case))
        assert v.kind == "toolkit_hook_failed" and v.facts["device"] == device, case
        assert not v.consequences, case  # the hook's failure is not a consequence of itself


def test_the_device_plugin_volume_mounts_path_as_a_device() -> None:
    # the k3s journal line of NVIDIA/nvidia-container-toolkit#108
    d = _diagnose(
        "Sep 08 08:58:07 REDACTED k3s[8174]:         nvidia-container-cli: device "
        "error: /var/run/nvidia-container-devices: unknown device: unknown\n"
    )
    assert d.kind == "toolkit_hook_failed"
    assert "accept-nvidia-visible-devices-as-volume-mounts" in d.fix


def test_cdi_injection_errors_are_a_stale_or_missing_spec() -> None:
    for case, device in (
        ("holdout3/hold3-025", "/dev/dri/controlD69"),
        ("docker/dkr-042", "/dev/dri/renderD129"),
        ("docker/dkr-043", "nvidia.com/gpu=all"),
    ):
        d = _diagnose(_text(case))
        assert d.kind == "toolkit_hook_failed" and d.facts["device"] == device, case
        assert "nvidia-ctk cdi generate" in d.fix, case


# -- hold3-020: Fabric Manager's own failure -------------------------------------------------


def test_fabric_managers_config_error_is_fabric_manager() -> None:
    d = _diagnose(_text("holdout3/hold3-020"))
    assert d.kind == "fabric_manager"
    assert d.facts["config_item"] == "FABRIC_NODE_CONFIG_FILE"


def test_fabric_manager_with_nothing_to_do_is_none() -> None:
    assert diagnose(_text("holdout3/hold3-022")) is None


# -- hold3-021: a GSP RPC history dump without its timeout line -------------------------------


def test_an_rpc_history_dump_alone_is_a_gsp_timeout() -> None:
    d = _diagnose(_text("holdout3/hold3-021"))
    assert d.kind == "gsp_timeout" and d.facts["gpu"] == 6
    assert "RPC history dump" in d.summary


def test_an_rpc_history_dump_after_its_printed_xid_is_no_second_event() -> None:
    # the first Xid 119 line of gpu-001 above hold3-021's dump
    xid = _text("gpu/gpu-001").splitlines()[0]
    scan = scan_kernel_log(xid + "\n" + _text("holdout3/hold3-021"))
    assert [e.xid for e in scan.events] == [119]
    assert not scan.events[0].inferred


# -- hold3-028: Slurm's JOB line with the reason ---------------------------------------------


def test_the_job_lines_reason_is_reported_over_the_bare_step_line() -> None:
    d = _diagnose(_text("holdout3/hold3-028"))
    assert d.kind == "slurm_cancelled" and d.facts["reason"] == "PREEMPTION"
    assert "DUE TO PREEMPTION" in d.evidence[0]
    assert d.facts["step"] == "37361369.0"
    assert "exception" in {c.kind for c in d.consequences}


# -- hold3-029: the device plugin cannot load NVML -------------------------------------------


def test_the_device_plugins_nvml_failure() -> None:
    for case in ("holdout3/hold3-029", "gpu/gpu-040", "gpu/gpu-041"):
        d = _diagnose(_text(case))
        assert d.kind == "nvml_library_not_found", case
        assert "device plugin" in d.summary, case


# -- hold3-030: a signal said by the shell or by 128+N ----------------------------------------


def test_the_shells_killed_report_and_exit_137_are_sigkill() -> None:
    d = _diagnose(_text("holdout3/hold3-030"))
    assert d.kind == "sigkill" and d.facts["pid"] == 36 and d.facts["exitcode"] == 137
    assert _diagnose(_text("torch/trc-049")).facts["pid"] == 7364
    assert _diagnose(_text("torch/trc-050")).kind == "sigkill"


def test_exit_status_139_is_sigsegv() -> None:
    # derived from hold3-030: the shell's Killed row dropped, the statuses made 139
    rows = [ln for ln in _text("holdout3/hold3-030").splitlines() if " Killed " not in ln]
    d = _diagnose("\n".join(rows).replace("137", "139") + "\n")
    assert d.kind == "sigsegv" and d.facts["exitcode"] == 139


def test_sigkill_with_the_oom_killers_record_is_not_sigkill() -> None:
    # hold3-030's Killed row under the kernel's OOM record of docker/dkr corpus style lines is
    # oom_killed's: the shell rule steps aside
    oom = next(
        ln
        for p in sorted((CORPUS / "docker").glob("*.txt"))
        for ln in p.read_text(encoding="utf-8").splitlines()
        if "Out of memory: Kill" in ln or "Memory cgroup out of memory" in ln
    )
    d = diagnose(oom + "\n" + _text("holdout3/hold3-030"))
    assert d is not None and d.kind != "sigkill"


# -- hold3-009: different SeqNums on different ranks ------------------------------------------


def test_different_seqnums_are_a_collective_mismatch() -> None:
    d = _diagnose(_text("holdout3/hold3-009"))
    assert d.kind == "nccl_timeout"
    seqs = d.facts["seq_by_rank"]
    assert isinstance(seqs, Mapping) and dict(seqs) == {0: 315, 1: 313}
    assert "DIFFERENT collectives" in d.summary and "2 collective(s) ahead" in d.summary


def test_the_same_seqnum_on_every_rank_is_no_mismatch() -> None:
    d = _diagnose(_text("holdout3/hold3-008"))
    assert d.kind == "nccl_timeout" and "seq_by_rank" not in d.facts
