"""The kinds the second held-out set (tests/data/diagnose/corpus/holdout2/) and a new user's
reports found missing, tested as kinds: each rule on its case and on the real variants added
to the corpus (sources in the areas' expected.yaml), plus the texts it must leave alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.diagnosis import Diagnosis, diagnose

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "diagnose" / "corpus"


def _text(rel: str) -> str:
    path = CORPUS / f"{rel}.txt" if not rel.startswith("cases/") else DATA / rel
    return path.read_text(encoding="utf-8")


def _diagnose(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None
    return d


# -- hold2-003: a cut traceback tail under [rankN]: -----------------------------------------


def test_a_cut_rank_traceback_ends_in_its_dotted_exception() -> None:
    d = _diagnose(_text("holdout2/hold2-003"))
    assert d.kind == "exception" and d.ranks == (0,)
    assert d.facts["exception_type"] == "torch.distributed.DistStoreError"
    assert d.facts["exception"] == "DistStoreError"
    assert d.evidence == (
        "[rank0]: torch.distributed.DistStoreError: wait timeout after "
        "300000ms, keys: /broadcast_from/0/75465",
    )


def test_frames_without_a_rank_prefix_or_an_exception_line_are_no_exception() -> None:
    # open-r1#690: a launcher traceback cut before its exception line
    assert diagnose(_text("torch/trc-048")) is None


# -- hold2-004: the agents' rank-assignment keys never all arrived ---------------------------


def test_store_wait_on_torchelastic_role_info_is_rendezvous_failed() -> None:
    d = _diagnose(_text("holdout2/hold2-004"))
    assert d.kind == "rendezvous_failed"
    assert d.facts["timeout_s"] == 900 and d.facts["nodes"] == 2
    assert "never completed the rendezvous" in d.summary and "no worker started" in d.summary
    assert "torchelastic/role_info/0, torchelastic/role_info/1" in d.summary


def test_the_same_message_wrapped_before_its_keys() -> None:
    line = next(ln for ln in _text("holdout2/hold2-004").splitlines() if "wait timeout" in ln)
    head, keys = line.strip("`").split("keys: ")
    d = _diagnose(f"{head}keys:\n{keys}\n")
    assert d.kind == "rendezvous_failed" and d.facts["nodes"] == 2
    assert any(e.startswith("/none/torchelastic/role_info/0") for e in d.evidence)


# -- pytorch#76287: the store host lost mid-run -----------------------------------------------


@pytest.mark.parametrize("rel", ["torch/trc-046", "torch/trc-047"])
def test_keep_alive_failures_say_the_store_was_lost_mid_run(rel: str) -> None:
    d = _diagnose(_text(rel))
    assert d.kind == "rendezvous_connection" and d.facts["phase"] == "mid_run"
    assert "lost mid-run" in d.summary and "workers had started" in d.summary
    assert "no worker started" not in d.summary
    assert any("keep-alive heartbeat" in e for e in d.evidence)


def test_a_store_never_reached_still_says_no_worker_started() -> None:
    d = _diagnose(_text("holdout2/hold2-001"))
    assert d.kind == "rendezvous_connection" and "phase" not in d.facts
    assert d.summary.endswith("no worker started")


# -- hold2-005: a relay's prefix on every line --------------------------------------------------


def test_a_summary_relayed_with_stderr_prefixes_is_read() -> None:
    d = _diagnose(_text("holdout2/hold2-005"))
    assert d.kind == "exit_code"
    assert (d.facts["rank"], d.facts["exitcode"], d.facts["pid"]) == (1, 1, 8835)
    assert all(not e.startswith("stderr:") for e in d.evidence)


# -- hold2-021 / gpu-020: a device handle's Unknown Error -------------------------------------


def test_device_handle_unknown_error_without_bus_evidence_is_nvml_error() -> None:
    d = _diagnose(_text("holdout2/hold2-021"))
    assert d.kind == "nvml_error"
    assert d.facts["nvml_return"] == "NVML_ERROR_UNKNOWN" and d.facts["nvml_code"] == 999
    assert d.facts["pci"] == "0000:B1:00.0"
    assert d.facts["nvml_function"] == "nvmlDeviceGetHandleByIndex"
    assert "Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error" in d.evidence


def test_device_handle_unknown_error_with_pcie_bus_errors_is_gpu_lost() -> None:
    d = _diagnose(_text("gpu/gpu-020"))
    assert d.kind == "gpu_lost" and d.facts["pci"] == "0000:03:00.0"
    assert any("PCIe Bus Error" in e for e in d.evidence)
    # the same evidence turns hold2-021's message into a lost GPU too
    aer = next(ln for ln in _text("gpu/gpu-020").splitlines() if "PCIe Bus Error" in ln)
    assert _diagnose(_text("holdout2/hold2-021") + "\n" + aer + "\n").kind == "gpu_lost"


# -- hold2-029: the toolkit reporting the host driver's state ----------------------------------


@pytest.mark.parametrize("rel", ["holdout2/hold2-029", "docker/dkr-038", "docker/dkr-039"])
def test_toolkit_nvml_version_mismatch_is_the_hosts_driver(rel: str) -> None:
    d = _diagnose(_text(rel))
    assert d.kind == "driver_version_mismatch"
    assert [c.kind for c in d.consequences][:1] == ["toolkit_nvml_init"]
    assert "reboot" in d.fix


def test_toolkit_driver_not_loaded_stays_toolkit_nvml_init() -> None:
    d = _diagnose(_text("docker/dkr-003"))
    assert d.kind == "toolkit_nvml_init" and d.facts["nvml_error"] == "driver not loaded"


# -- docker/hub-feedback#2429: the registry is the pull's -----------------------------------


@pytest.mark.parametrize(
    ("rel", "registry"),
    [("docker/dkr-036", "docker.io"), ("docker/dkr-037", "registry-1.docker.io")],
)
def test_rate_limit_names_the_pulls_registry_not_the_advice_link(rel: str, registry: str) -> None:
    d = _diagnose(_text(rel))
    assert d.kind == "registry_rate_limited" and d.facts["registry"] == registry
    assert "www.docker.com" not in d.summary


# -- xid-01: another GPU's chain is named, not a consequence -----------------------------------


def test_xid_chains_on_two_gpus_are_both_named_and_neither_a_consequence() -> None:
    d = _diagnose(_text("cases/dmesg-xid/xid-01.txt"))
    assert d.kind == "xid" and d.facts["pci"] == "0000:db:00"
    assert d.facts["other_gpus"] == "0000:3d:00" and d.facts["gpus"] == 2
    assert "0000:3d:00" in d.summary and "0000:db:00" in d.summary
    assert d.summary.count("suspect hardware") == 2  # README: flag both GPUs
    assert d.fix.startswith("Drain GPU 0000:3d:00, 0000:db:00")
    assert not any(c.kind == "xid" for c in d.consequences)
