"""console.diagnosis.gpu through ``console.diagnosis.diagnose``: the handed GPU/driver/NVML
cases (tests/data/cases/, expectations in /work/shared/cases/README.md rows xid-*, err-*,
nvml-*) with their exact values, and the rule behaviours the corpus does not pin down."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from console.cli.diagnose import diagnose_command
from console.diagnosis import Diagnosis, diagnose
from console.diagnosis.common import not_a_failure
from console.diagnosis.gpu import kernel_text
from console.diagnosis.lines import normalize

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"


def _diagnose(*names: str) -> Diagnosis:
    text = "\n".join((CASES / n).read_text(encoding="utf-8") for n in names)
    d = diagnose(text)
    assert d is not None, names
    return d


def test_xid_01_two_gpus_app_faults_for_many_processes_are_suspect_hardware() -> None:
    d = _diagnose("dmesg-xid/xid-01.txt")
    assert d.kind == "xid"
    # both GPUs: 3x Xid 31 on db:00 (RESTART_APP beats Xid 43's IGNORE), 4x Xid 43 on 3d:00
    assert d.facts["xid"] == 31 and d.facts["pci"] == "0000:db:00"
    assert d.facts["uuid"] == "GPU-00000000-0000-0000-0000-0000000000db"
    assert d.facts["count"] == 3 and d.facts["gpus"] == 2
    assert d.facts["verdict"] == "suspect_hardware"
    assert d.facts["xid_class"] == "hw"  # many processes over days: not one app's fault
    assert "pids 13641, 14323, 33275" in d.summary
    assert "0000:3d:00" in d.summary and "suspect hardware" in d.summary
    assert d.fix.startswith("Drain GPU 0000:3d:00, 0000:db:00") and "dcgmi diag" in d.fix
    # the other GPU's chain is its own event, not a consequence of db:00's: named beside it
    assert d.consequences == ()
    assert (
        "on the other GPU: 4x Xid 43 (GPU stopped processing) on 0000:3d:00 from "
        "Wed Jan 27 23:04:35 2021 to Thu Jan 28 02:13:33 2021" in d.summary
    )
    assert d.facts["other_gpus"] == "0000:3d:00"
    assert any("Xid (PCI:0000:3d:00): 43, pid=35521" in e for e in d.evidence)


def test_xid_02_chain_root_is_62_after_the_app_fault_with_45s_as_consequences() -> None:
    d = _diagnose("dmesg-xid/xid-02.txt")
    assert d.kind == "xid"
    assert d.facts["xid"] == 62 and d.facts["pci"] == "0000:0a:00"
    assert d.facts["action"] == "reset GPU"
    assert d.facts["uuid"] == "GPU-00000000-0000-0000-0000-00000000000a"
    assert "pid" not in d.facts  # pid='<unknown>' is unknown, not a number
    assert d.facts["chain_xid"] == 31 and d.facts["chain_pid"] == 13332
    assert "at 14370.687545" in d.summary
    assert "Xid 31 (GPU memory page fault) pid 13332 (cuda_plot_k32_v) at 14328.198504" in d.summary
    assert "reset it once idle" in d.fix
    [cleanup] = d.consequences
    assert cleanup.kind == "xid"
    assert cleanup.summary.startswith(
        "8x Xid 45 (preemptive cleanup) on 0000:0a:00 from 14370.688139 to 14397.322674"
    )
    assert not any("RT throttling" in e for e in d.evidence)


def test_xid_04_fallen_off_the_bus_without_an_xid_is_gpu_lost() -> None:
    d = _diagnose("dmesg-xid/xid-04.txt")
    assert d.kind == "gpu_lost"
    assert d.facts["pci"] == "0000:b3:00.0" and d.facts["xid"] == 79
    assert d.facts["pci_device_id"] == "10de:26b5"
    assert d.facts["gpus_missing"] == 1 and d.facts["driver_version"] == "570.158.01"
    assert d.facts["action"] == "reboot"
    assert "at 1843.308145" in d.summary
    assert "reboot" in d.fix and "seating" in d.fix
    # the three wrapped lines are one message
    assert any("fallen off the bus and is not responding" in e for e in d.evidence)
    assert any("(PCI ID: 10de:26b5)" in e for e in d.evidence)
    assert not any("loading NVIDIA" in e for e in d.evidence)


def test_err_01_lost_gpu_by_the_bus_id_in_the_message_one_event() -> None:
    d = _diagnose("nvidia-smi-errors/err-01.txt")
    assert d.kind == "gpu_lost"
    assert d.facts["pci"] == "0000:01:00.0" and d.facts["reason"] == "GPU is lost"
    assert d.facts["repeats"] == 3 and "lost" not in d.facts  # one GPU, not GPU0..2
    assert d.facts["action"] == "reboot"
    assert "2019-03-05 15:17:06 +0330" in d.summary
    assert d.fix.startswith("Drain the node and reboot")


def test_err_03_no_gpus_and_the_stalled_plugin_is_the_same_fault() -> None:
    a = _diagnose("nvidia-smi-errors/err-03a.txt")
    assert a.kind == "no_gpus" and "lspci" in a.fix and "kernel log" in a.fix
    both = _diagnose("nvidia-smi-errors/err-03a.txt", "nvidia-smi-errors/err-03b.txt")
    assert both.kind == "no_gpus" and both.consequences == ()
    assert "never finished" in both.summary
    b = _diagnose("nvidia-smi-errors/err-03b.txt")
    assert b.kind == "no_gpus"
    assert any("Discovering GPU devices" in e for e in b.evidence)


def test_err_04_driver_unreachable_caused_by_the_unattended_upgrade() -> None:
    alone = _diagnose("nvidia-smi-errors/err-04a.txt")
    assert alone.kind == "driver_unreachable" and "upgrade_time" not in alone.facts
    d = _diagnose("nvidia-smi-errors/err-04a.txt", "nvidia-smi-errors/err-04b.txt")
    assert d.kind == "driver_unreachable"
    assert d.facts["upgrade_time"] == "2021-06-04 06:41:09"
    assert d.facts["unattended"] == "yes"
    assert d.facts["package"] == "libnvidia-common-460"
    assert d.facts["old_driver"] == "460.73.01" and d.facts["new_driver"] == "460.80"
    assert "libnvidia-common-460 460.73.01-0ubuntu0.20.04.1 -> 460.80-0ubuntu0.20.04.2" in d.summary
    assert d.fix.startswith("Reinstall one consistent NVIDIA driver version and reboot")
    assert "unattended" in d.fix
    assert any(e.startswith("Upgrade: libnvidia-common-460") for e in d.evidence)


def test_err_05_version_mismatch_names_the_library_version() -> None:
    d = _diagnose("nvidia-smi-errors/err-05.txt")
    assert d.kind == "driver_version_mismatch"
    assert d.facts["library_version"] == "570.124"
    assert "kernel_module_version" not in d.facts  # not in this output
    assert "(570.124)" in d.fix and "reboot" in d.fix


def test_nvml_01_not_supported_is_no_gpu_fault_and_missing_function_is() -> None:
    a = diagnose((CASES / "pynvml/nvml-01a.txt").read_text())
    assert a is None  # fan = None on an SXM board: no failure at all, not an exception
    b = _diagnose("pynvml/nvml-01b.txt")
    assert b.kind == "nvml_function_not_found"
    assert "--query-compute-apps" in b.fix
    assert any("_nvmlGetFunctionPointer" in e for e in b.evidence)


def test_nvml_03_gpu_is_lost_without_a_bus_id() -> None:
    d = _diagnose("pynvml/nvml-03.txt")
    assert d.kind == "gpu_lost"
    assert d.facts["exception"] == "NVMLError_GpuIsLost"
    assert d.facts["nvml_function"] == "nvmlDeviceGetHandleByIndex"
    assert "pci" not in d.facts and d.facts["action"] == "reboot"


def test_nvml_04_library_not_found_from_the_oserror_of_a_cut_traceback() -> None:
    d = _diagnose("pynvml/nvml-04.txt")
    assert d.kind == "nvml_library_not_found"
    assert d.facts["nvml_function"] == "nvmlInit"
    assert any(e.startswith("OSError: libnvidia-ml.so.1") for e in d.evidence)


# -- rule behaviour ----------------------------------------------------------------------------


def test_app_xid_ranks_below_the_applications_own_cuda_error() -> None:
    """An Xid 31 in the same text as a rank's CUDA error (the handed trun-12): the error is
    the root, the Xid a consequence (xid_class app)."""
    kernel = (CASES / "dmesg-xid/xid-02.txt").read_text().splitlines()[1]  # the Xid 31
    text = (CASES / "torchrun/trun-12.txt").read_text() + "\n" + kernel + "\n"
    d = diagnose(text)
    assert d is not None and d.kind == "cuda_illegal_memory_access"
    assert "xid" in {c.kind for c in d.consequences}


@pytest.mark.parametrize("prefix", ["", "> ", "    ", "Mar 21 02:07:08 gpu-node-01 kernel: "])
def test_xid_chain_survives_collector_decorations(prefix: str) -> None:
    text = "\n".join(
        prefix + ln for ln in (CASES / "dmesg-xid/xid-02.txt").read_text().splitlines()
    )
    d = diagnose(text)
    assert d is not None and d.kind == "xid" and d.facts["xid"] == 62


def test_wrapped_fallen_off_notice_with_a_stamp_on_every_line() -> None:
    """journalctl prints the driver's three-line notice with a prefix on each line."""
    lines = (CASES / "dmesg-xid/xid-04.txt").read_text().splitlines()[:3]
    text = "\n".join(
        "Feb 14 05:03:41 gpu-node-01 kernel: " + ln.strip()[ln.strip().find("NVRM:") :]
        for ln in lines
    )
    d = diagnose(text)
    assert d is not None and d.kind == "gpu_lost" and d.facts["pci"] == "0000:b3:00.0"


def test_kernel_text_keeps_one_line_per_normalised_line() -> None:
    text = (CASES / "dmesg-xid/xid-04.txt").read_text()
    lines = normalize(text)
    rebuilt = kernel_text(lines, text).split("\n")
    assert len(rebuilt) == len(lines)
    assert rebuilt[0] == "[1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0"
    assert rebuilt[1].startswith(" ")  # continuation stays a continuation


def test_healthy_driver_notices_are_not_failures() -> None:
    text = (
        "[    6.252567] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.148.06  Mon May  "
        "5 11:36:21 UTC 2025\n"
    )
    assert diagnose(text) is None


def test_nvml_01a_cli_finds_nothing_and_exits_1() -> None:
    """Handed case nvml-01a: ``gpuconsole diagnose`` says no failure (exit 1, README row)."""
    result = CliRunner().invoke(diagnose_command, [str(CASES / "pynvml/nvml-01a.txt")])
    assert result.exit_code == 1, result.output
    assert "no known failure found" in result.output


def test_not_a_failure_is_only_not_supported() -> None:
    last = (CASES / "pynvml/nvml-01a.txt").read_text().strip().splitlines()[-1]
    assert not_a_failure(last)  # pynvml.NVMLError_NotSupported: Not Supported
    assert not_a_failure(last.replace("pynvml.", ""))  # old pynvml, unqualified name
    lost = [
        ln for ln in (CASES / "pynvml/nvml-03.txt").read_text().splitlines() if "GpuIsLost" in ln
    ][-1]
    assert not not_a_failure(lost)
    assert not not_a_failure("KeyError: 'x'")
