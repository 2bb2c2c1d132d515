"""The general rules behind the held-out GPU and Docker cases (hold-020, 023, 024, 025) and
their real variants (gpu-033..037, dkr-032..035): exact values, and the near misses each rule
must leave alone. Every text line below is quoted from the public report named beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.diagnosis import diagnose
from console.diagnosis.docker import tidy_value
from remote.telemetry.faults import find_driver_load_problems, scan_xid_records

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"


def _case(rel: str) -> str:
    return (CORPUS / f"{rel}.txt").read_text(encoding="utf-8")


# -- hold-020: the kernel's reason for an unreachable driver ---------------------------------


@pytest.mark.parametrize(
    ("rel", "reason", "line"),
    [
        (
            "holdout/hold-020",
            "other_driver",
            "The NVIDIA probe routine was not called for 3 device(s)",
        ),
        ("gpu/gpu-033", "not_installed", "could not insert 'nvidia_367': Function not implemented"),
        ("gpu/gpu-034", "signature", "could not insert 'nvidia': Key was rejected by service"),
    ],
)
def test_unreachable_driver_names_the_kernels_reason(rel: str, reason: str, line: str) -> None:
    d = diagnose(_case(rel))
    assert d is not None and d.kind == "driver_unreachable"
    assert d.facts["reason"] == reason
    assert any(line in e for e in d.evidence)
    assert any("couldn't communicate" in e for e in d.evidence)


def test_probe_not_called_counts_the_gpus_and_says_to_blacklist_nouveau() -> None:
    d = diagnose(_case("holdout/hold-020"))
    assert d is not None
    assert d.facts["gpus_unbound"] == 3
    assert "3 GPU(s)" in d.summary and "another driver owns them" in d.summary
    assert "nouveau" in d.fix and "initramfs" in d.fix


def test_benign_kernel_notices_explain_nothing() -> None:
    # NVIDIA/k8s-device-plugin#480 (the module loads; the kernel is only tainted) and
    # Mellanox/nv_peer_memory#8 (another module's symbols: nvidia itself is loaded).
    text = "\n".join(
        [
            "[    2.846803] nvidia: module verification failed: signature and/or required key "
            "missing - tainting kernel",
            "[ 4724.350488] nv_peer_mem: Unknown symbol nvidia_p2p_put_pages (err -22)",
            "[    3.011519] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  525.147.05  Wed Oct 25 "
            "20:27:35 UTC 2023",
        ]
    )
    assert find_driver_load_problems(text) == []


def test_the_nvrm_notice_naming_nouveau_is_not_nouveau_loaded() -> None:
    # hold-020's wrapped notice: only its first line is a problem, "nouveau, rivafb, ..." is not
    problems = find_driver_load_problems(_case("holdout/hold-020"))
    assert [p.reason for p in problems] == ["no_device", "other_driver"]


# -- hold-023: Xid records in other tools' formats --------------------------------------------


@pytest.mark.parametrize(
    ("rel", "xid", "pci"),
    [
        ("holdout/hold-023", 31, None),
        ("gpu/gpu-035", 69, None),
        ("gpu/gpu-036", 79, "0000:ae:00"),
    ],
)
def test_xid_records_without_the_kernel_prefix(rel: str, xid: int, pci: str | None) -> None:
    d = diagnose(_case(rel))
    assert d is not None and d.kind == "xid"
    assert d.facts["xid"] == xid
    assert d.facts.get("pci") == pci


def test_device_plugin_record_keeps_the_uuid() -> None:
    d = diagnose(_case("gpu/gpu-035"))
    assert d is not None
    assert d.facts["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"


def test_dcgm_record_names_the_gpu_id() -> None:
    # DCGM dcgmlib/dcgm_errors.h: DCGM_FR_XID_ERROR_MSG "Detected XID %u for GPU %u"
    events = scan_xid_records("Detected XID 43 for GPU 0")
    assert [(e.xid, e.pci_bus_id) for e in events] == [(43, "GPU0")]


def test_a_stamped_table_counts_every_row() -> None:
    events = scan_xid_records(_case("holdout/hold-023"))
    assert [(e.xid, e.time_text) for e in events] == [
        (31, "08-04 06:43:55"),
        (31, "08-19 19:41:00"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        _case("gpu/gpu-037"),  # NVIDIA/DCGM#162: a question naming XID 79
        # NVIDIA/DCGM#112: prose about an Xid seen at some time, no record of it
        'Occasionally, we come across an XID error referred to as "XID 31". This error is '
        "typically caused by a user program.",
        # vllm-project/vllm#53726 (hold-023's prose line): names the Xid, binds it to nothing
        "All six faults on this host, from `/var/log/kern.log`. **Every one is `Xid 31` (MMU "
        "fault). Four are writes, two are reads.**",
    ],
)
def test_prose_naming_an_xid_is_no_event(text: str) -> None:
    assert scan_xid_records(text) == []


def test_a_question_naming_an_xid_is_no_diagnosis() -> None:
    assert diagnose(_case("gpu/gpu-037")) is None


# -- hold-024: NVML failing in the toolkit's detection stage ---------------------------------


@pytest.mark.parametrize("rel", ["holdout/hold-024", "docker/dkr-032", "docker/dkr-033"])
def test_nvml_failure_in_detection_is_toolkit_nvml_init(rel: str) -> None:
    d = diagnose(_case(rel))
    assert d is not None and d.kind == "toolkit_nvml_init"
    assert d.facts["stage"] == "detection"
    assert d.facts["nvml_error"] == "unknown error"
    assert d.facts["error"] == "nvml error: unknown error"


# -- hold-025: the requirement check's other spellings -----------------------------------------


@pytest.mark.parametrize(
    ("rel", "cuda", "condition"),
    [
        ("holdout/hold-025", "9.0", "cuda >= 9.0"),
        ("docker/dkr-034", "10.0", "brand = tesla"),
        ("docker/dkr-035", "10.0", "driver < 385"),
    ],
)
def test_requirement_clauses_read_the_images_cuda(rel: str, cuda: str, condition: str) -> None:
    d = diagnose(_case(rel))
    assert d is not None and d.kind == "driver_too_old"
    assert d.facts["cuda"] == cuda
    assert d.facts["condition"] == condition


def test_a_board_clause_without_a_cuda_requirement_stays_a_hook_failure() -> None:
    # NVIDIA/nvidia-container-toolkit#24's message without the requirement list around it
    d = diagnose(
        "nvidia-container-cli: requirement error: unsatisfied condition: brand = quadrortx: unknown"
    )
    assert d is not None and d.kind == "toolkit_hook_failed"


# -- values lose Markdown / quote punctuation --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("nvml error: unknown error: unknown`", "nvml error: unknown error: unknown"),
        ("`nvidia/cuda:12.1.1-base-ubuntu22.04`.", "nvidia/cuda:12.1.1-base-ubuntu22.04"),
        ("**'pytorch/pytorch:latest'**", "pytorch/pytorch:latest"),
        ("registry.example.org:5000/team/img:1.0", "registry.example.org:5000/team/img:1.0"),
    ],
)
def test_tidy_value(raw: str, clean: str) -> None:
    assert tidy_value(raw) == clean
