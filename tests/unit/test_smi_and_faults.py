"""The nvidia-smi fallback parser and the GPU fault classifiers, on the shared cases.

Case files under tests/data/cases/{nvidia-smi-csv,nvidia-smi-errors,pynvml,dmesg-xid}/ are copies
of shared/cases/; the expected values are the ones in that README's table (rows csv-01, csv-02,
csv-03, csv-05, err-01, err-03, err-04, err-05, nvml-01, nvml-03, nvml-04, xid-01, xid-02,
xid-04). Each case is followed by tests that vary it (other bus ids, other fields, other
spellings), so the parsers are checked on the kind of fault, not on the one line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from remote.telemetry.faults import (
    GpuXidSummary,
    HostFault,
    XidEvent,
    classify_driver_upgrade,
    classify_nvml_traceback,
    find_api_mismatch,
    parse_plugin_discovery,
    pci_key,
    scan_kernel_log,
    summarize_xids,
)
from remote.telemetry.schema import GPU_FIELDS, empty_gpu, empty_sample
from remote.telemetry.smi import (
    COMPUTE_APPS_FIELDS,
    QUERY_FIELDS,
    QUERY_FIELDS_LEGACY,
    CsvRow,
    SmiStreamParser,
    classify_smi_failure,
    compute_apps_argv,
    fields_without,
    gpu_from_row,
    parse_csv_rows,
    parse_value,
    processes_from_compute_apps,
    sample_from_fault,
    sample_from_smi,
    smi_argv,
)

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"


def lost(fault: HostFault | None) -> tuple[str, ...]:
    """Bus ids of the GPUs a fault says are lost."""
    assert fault is not None
    return tuple(e.pci_bus_id for e in fault.gpu_errors if e.lost)


def _events(text: str) -> list[XidEvent]:
    """The Xid events of a kernel log, in log order."""
    return scan_kernel_log(text).events


def case(name: str) -> str:
    folder = {
        "csv": "nvidia-smi-csv",
        "err": "nvidia-smi-errors",
        "nvml": "pynvml",
        "xid": "dmesg-xid",
    }[name.split("-")[0]]
    return (CASES / folder / f"{name}.txt").read_text()


def query_of(text: str) -> list[str]:
    """The ``--query-gpu`` field list of the ``$ `` command line of a case."""
    m = re.search(r"--query-gpu=(\S+)", text.splitlines()[0])
    assert m is not None
    return m.group(1).split(",")


def strict_equal(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal values *and* types (0 must not pass for False/None, 1 for True, 200 for 200.0)."""
    assert actual == expected
    for k, v in expected.items():
        assert type(actual[k]) is type(v), (k, actual[k], v)


# ---------------------------------------------------------------------------------------------
# the query


def test_query_fields_and_argv() -> None:
    assert QUERY_FIELDS == (
        "index",
        "uuid",
        "name",
        "pci.bus_id",
        "utilization.gpu",
        "utilization.memory",
        "memory.used",
        "memory.total",
        "temperature.gpu",
        "power.draw",
        "enforced.power.limit",
        "clocks.sm",
        "clocks.mem",
        "fan.speed",
        "pstate",
        "clocks_event_reasons.active",
        "ecc.errors.uncorrected.volatile.total",
        "persistence_mode",
        "mig.mode.current",
        "driver_version",
    )
    assert smi_argv(500) == [
        "nvidia-smi",
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
        "-lms",
        "500",
    ]
    assert "clocks_throttle_reasons.active" in QUERY_FIELDS_LEGACY
    assert "clocks_event_reasons.active" not in QUERY_FIELDS_LEGACY
    assert compute_apps_argv() == [
        "nvidia-smi",
        "--query-compute-apps=gpu_uuid,pid,used_memory",
        "--format=csv,noheader,nounits",
    ]
    with pytest.raises(ValueError):
        smi_argv(0)


def test_invalid_field_message_gives_the_retry_query() -> None:
    fault = classify_smi_failure(
        'Field "clocks_event_reasons.active" is not a valid field to query.\n'
    )
    assert fault is not None and fault.state == "error"
    assert fault.invalid_field == "clocks_event_reasons.active"
    assert fields_without(QUERY_FIELDS, fault.invalid_field) == QUERY_FIELDS_LEGACY
    dropped = fields_without(QUERY_FIELDS, "mig.mode.current")
    assert dropped is not None and "mig.mode.current" not in dropped
    assert fields_without(QUERY_FIELDS, "index") is None


# ---------------------------------------------------------------------------------------------
# csv-01: [N/A] / [Not Supported] = no value, never 0; the zeros are real readings

COLS_01 = [
    "memory.total",
    "memory.free",
    "memory.used",
    "temperature.gpu",
    "fan.speed",
    "utilization.gpu",
    "utilization.memory",
]


@pytest.mark.parametrize(("name", "token"), [("csv-01a", "[N/A]"), ("csv-01b", "[Not Supported]")])
def test_csv01_unknown_fan_is_none_zeros_are_readings(name: str, token: str) -> None:
    text = case(name)
    if name == "csv-01a":
        assert query_of(text) == COLS_01
    rows = parse_csv_rows(text, COLS_01)
    assert len(rows) == 1
    strict_equal(
        rows[0].values,
        {
            "memory.total": 2004,
            "memory.free": 2004,
            "memory.used": 0,
            "temperature.gpu": 44,
            "fan.speed": None,
            "utilization.gpu": 0,
            "utilization.memory": 0,
        },
    )
    assert list(rows[0].errors) == ["fan.speed"]
    assert token in rows[0].errors["fan.speed"]

    gpu = sample_from_smi(rows, None, 0, 0.0, 1.0)["gpus"][0]
    assert gpu["fan_pct"] is None and token in gpu["errors"]["fan_pct"]
    assert gpu["util_gpu_pct"] == 0 and "util_gpu_pct" not in gpu["errors"]
    assert gpu["mem_used_mib"] == 0 and gpu["mem_total_mib"] == 2004 and gpu["temp_c"] == 44


@pytest.mark.parametrize(
    "token",
    [
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Unknown Error]",
        "ERR!",
        "[Requested functionality has been deprecated]",
        "[Insufficient Permissions]",
        "[GPU requires reset]",
        "",
    ],
)
@pytest.mark.parametrize(
    "field",
    [
        "fan.speed",
        "power.draw",
        "pstate",
        "name",
        "persistence_mode",
        "clocks_event_reasons.active",
    ],
)
def test_every_no_value_token_is_none_with_reason(field: str, token: str) -> None:
    value, reason = parse_value(field, token)
    assert value is None
    assert reason is not None and (token in reason or token == "")


def test_units_and_types() -> None:
    assert parse_value("memory.used", "2004 MiB") == (2004, None)
    assert parse_value("power.draw", "123.00 W") == (123.0, None)
    assert parse_value("clocks.sm", "1746 MHz") == (1746, None)
    assert parse_value("utilization.gpu", "53 %") == (53, None)
    assert parse_value("persistence_mode", "Enabled") == (True, None)
    assert parse_value("clocks_event_reasons.active", "0x0000000000000004") == (4, None)
    assert parse_value("driver_version", "550.54.15") == ("550.54.15", None)
    value, reason = parse_value("temperature.gpu", "hot")
    assert value is None and reason is not None and "hot" in reason


# ---------------------------------------------------------------------------------------------
# csv-02: a foreign tool's column list, with units; one bad field spoils only itself

COLS_02 = [
    "name",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "pstate",
    "clocks.current.graphics",
    "clocks.current.memory",
    "power.max_limit",
    "power.default_limit",
]


def test_csv02_mixed_rig_with_units() -> None:
    rows = parse_csv_rows(case("csv-02"), COLS_02)
    assert len(rows) == 8
    assert [r["name"] for r in rows] == ["GeForce GTX 1080 Ti"] * 7 + ["GeForce GTX 1080"]
    strict_equal(
        rows[0].values,
        {
            "name": "GeForce GTX 1080 Ti",
            "utilization.gpu": 53,
            "utilization.memory": 3,
            "temperature.gpu": 84,
            "power.draw": 123.0,
            "power.limit": 262.5,
            "fan.speed": None,
            "pstate": "P2",
            "clocks.current.graphics": 1746,
            "clocks.current.memory": 5310,
            "power.max_limit": 300.0,
            "power.default_limit": 250.0,
        },
    )
    assert list(rows[0].errors) == ["fan.speed"]
    assert "[Unknown Error]" in rows[0].errors["fan.speed"]
    assert [r["fan.speed"] for r in rows[1:]] == [60, 83, 65, 77, 71, 83, 71]
    strict_equal(
        rows[7].values,
        {
            "name": "GeForce GTX 1080",
            "utilization.gpu": 83,
            "utilization.memory": 7,
            "temperature.gpu": 70,
            "power.draw": 181.22,
            "power.limit": 200.0,
            "fan.speed": 71,
            "pstate": "P2",
            "clocks.current.graphics": 1860,
            "clocks.current.memory": 4513,
            "power.max_limit": 216.0,
            "power.default_limit": 200.0,
        },
    )
    # draw above the limit is data, not an error
    for i, draw in ((2, 266.25), (5, 294.91), (6, 267.73)):
        assert rows[i]["power.draw"] == draw and rows[i]["power.limit"] == 262.5
        assert rows[i].errors == {}
    assert all(r.errors == {} for r in rows[1:])

    sample = sample_from_smi(rows, None, 3, 100.0, 1.0)
    assert sample["state"] == "ok" and sample["source"] == "nvidia-smi"
    gpus = sample["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))  # row order
    assert gpus[0]["fan_pct"] is None and "[Unknown Error]" in gpus[0]["errors"]["fan_pct"]
    assert gpus[0]["power_w"] == 123.0 and gpus[0]["power_limit_w"] == 262.5
    assert gpus[0]["mem_clock_mhz"] == 5310 and gpus[0]["pstate"] == "P2"
    assert gpus[5]["power_w"] == 294.91 and "power_w" not in gpus[5]["errors"]
    assert gpus[7]["fan_pct"] == 71 and gpus[7]["temp_c"] == 70
    # not queried -> None with a reason, never 0
    assert gpus[1]["mem_used_mib"] is None and "mem_used_mib" in gpus[1]["errors"]
    assert sample["processes"] is None and "processes" in sample["errors"]


def test_header_row_with_units_and_command_line_are_skipped() -> None:
    text = (
        "$ nvidia-smi --query-gpu=index,name,memory.used --format=csv\n"
        "index, name, memory.used [MiB]\n"
        "0, NVIDIA A100-SXM4-80GB, 1024 MiB\n"
        "1, NVIDIA A100-SXM4-80GB, [N/A]\n"
    )
    rows = parse_csv_rows(text, ["index", "name", "memory.used"])
    assert [r.values for r in rows] == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory.used": 1024},
        {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "memory.used": None},
    ]


def test_a_command_line_after_any_prompt_is_not_a_row() -> None:
    """A root shell's ``# `` prompt (Stability-AI/StableSwarmUI#388: a MIG A100 in an
    unprivileged pod; the command splits into as many commas as the query has fields), a
    Windows prompt, none: the command is never a row. ``[Insufficient Permissions]`` is a
    reading refused, not one the GPU lacks."""
    fields = [
        "gpu_name",
        "driver_version",
        "temperature.gpu",
        "utilization.gpu",
        "utilization.memory",
        "memory.total",
        "memory.free",
        "memory.used",
    ]
    query = "--query-gpu=" + ",".join(fields) + " --format=csv"
    data = (
        "name, driver_version, temperature.gpu, utilization.gpu [%], utilization.memory [%], "
        "memory.total [MiB], memory.free [MiB], memory.used [MiB]\n"
        "NVIDIA A100-SXM4-80GB, 535.161.08, 47, [N/A], [N/A], [Insufficient Permissions], "
        "[Insufficient Permissions], [Insufficient Permissions]\n"
    )
    for prompt in ("# ", "PS C:\\Users\\user1> ", "user1@gpu-node-01:~$ ", ""):
        exe = "nvidia-smi.exe " if prompt.startswith("PS") else "nvidia-smi "
        rejected: list[tuple[int, str]] = []
        (row,) = parse_csv_rows(prompt + exe + query + "\n" + data, fields, rejected=rejected)
        assert rejected == []
        assert row.values["gpu_name"] == "NVIDIA A100-SXM4-80GB"
        assert row.values["temperature.gpu"] == 47
        gpu = gpu_from_row(row, 0)
        assert gpu["util_gpu_pct"] is None and "util_gpu_pct" in gpu["unsupported"]
        assert gpu["mem_used_mib"] is None and "mem_used_mib" not in gpu["unsupported"]
        assert "Insufficient Permissions" in gpu["errors"]["mem_used_mib"]


# ---------------------------------------------------------------------------------------------
# csv-03: 19 columns, a name with spaces, a bare N/A


def test_csv03_nineteen_values() -> None:
    text = case("csv-03")
    cols = query_of(text)
    assert len(cols) == 19
    rows = parse_csv_rows(text, cols)
    assert len(rows) == 1
    values = rows[0].values
    assert len(values) == 19
    strict_equal(
        values,
        {
            "power.limit": 200.0,
            "power.min_limit": 105.0,
            "power.max_limit": 292.0,
            "memory.total": 7979,
            "vbios_version": "90.04.23.00.5F",
            "driver_version": "440.64",
            "name": "GeForce RTX 2080",
            "gpu_uuid": "GPU-00000000-0000-0000-0000-000000000001",
            "power.draw": 176.98,
            "temperature.gpu": 45,
            "temperature.memory": None,
            "clocks.current.graphics": 1965,
            "clocks.sm": 1965,
            "clocks.mem": 7199,
            "utilization.gpu": 86,
            "utilization.memory": 55,
            "fan.speed": 100,
            "pcie.link.width.current": 8,
            "pstate": "P2",
        },
    )
    assert list(rows[0].errors) == ["temperature.memory"]
    assert "N/A" in rows[0].errors["temperature.memory"]

    sample = sample_from_smi(rows, None, 0, 0.0, 1.0)
    gpu = sample["gpus"][0]
    assert gpu["name"] == "GeForce RTX 2080"
    assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert gpu["sm_clock_mhz"] == 1965 and gpu["mem_clock_mhz"] == 7199
    assert gpu["power_limit_w"] == 200.0 and gpu["fan_pct"] == 100
    assert sample["host"]["driver_version"] == "440.64"


# ---------------------------------------------------------------------------------------------
# csv-05: MIG [N/A] = no MIG = off; Disabled = off; such GPUs are ordinary GPUs


def test_csv05a_mig_na_is_off_not_an_error() -> None:
    rows = parse_csv_rows(case("csv-05a"), ["mig.mode.current"])
    assert len(rows) == 1
    strict_equal(rows[0].values, {"mig.mode.current": False})
    assert rows[0].errors == {}
    sample = sample_from_smi(rows, None, 0, 0.0, 1.0)
    assert sample["state"] == "ok"
    assert sample["gpus"][0]["mig_mode"] is False
    assert "mig_mode" not in sample["gpus"][0]["errors"]


def test_csv05b_mig_disabled_is_off() -> None:
    rows = parse_csv_rows(case("csv-05b"), ["mig.mode.current"])
    assert [r.values for r in rows] == [{"mig.mode.current": False}] * 2
    assert all(r["mig.mode.current"] is False and r.errors == {} for r in rows)
    assert parse_value("mig.mode.current", "Enabled") == (True, None)
    value, reason = parse_value("mig.mode.current", "[Unknown Error]")
    assert value is None and reason is not None  # a failed read stays unknown


def full_row(index: int, uuid: str, mig: str) -> str:
    return (
        f"{index}, {uuid}, NVIDIA A100-SXM4-40GB, 00000000:0{index + 7}:00.0, 87, 40, 30000, "
        f"40960, 61, 312.45, 400.00, 1410, 1215, [N/A], P0, 0x0000000000000004, 0, "
        f"Enabled, {mig}, 550.54.15"
    )


def test_mig_off_gpus_still_get_processes() -> None:
    text = "\n".join([full_row(0, "GPU-a0", "Disabled"), full_row(1, "GPU-a1", "Disabled")])
    rows = parse_csv_rows(text, QUERY_FIELDS)
    apps = parse_csv_rows("GPU-a0, 4242, 29500\nGPU-a1, 4243, [N/A]\n", COMPUTE_APPS_FIELDS)
    sample = sample_from_smi(rows, apps, 1, 10.0, 1.0)
    assert [g["mig_mode"] for g in sample["gpus"]] == [False, False]
    assert sample["processes"] == [
        {
            "gpu_index": 0,
            "gpu_uuid": "GPU-a0",
            "pid": 4242,
            "used_mib": 29500,
            "type": "compute",
            "user": None,
            "command": None,
            "container_id": None,
            "rank": None,
            "local_rank": None,
        },
        {
            "gpu_index": 1,
            "gpu_uuid": "GPU-a1",
            "pid": 4243,
            "used_mib": None,
            "type": "compute",
            "user": None,
            "command": None,
            "container_id": None,
            "rank": None,
            "local_rank": None,
        },
    ]
    g = sample["gpus"][0]
    assert g["pci_bus_id"] == "00000000:07:00.0" and g["throttle_reasons"] == ["sw_power_cap"]
    assert g["ecc_volatile_uncorrected"] == 0 and g["persistence_mode"] is True
    assert g["fan_pct"] is None and g["power_w"] == 312.45 and g["power_limit_w"] == 400.0
    assert g["gpm"] is None and "gpm" in g["errors"]
    assert sample_from_smi(rows, [], 1, 10.0, 1.0)["processes"] == []  # read, none running


# ---------------------------------------------------------------------------------------------
# err-01: GPU lost, attributed by the bus id in the message; identical messages = one event


def test_err01_one_lost_gpu_by_bus_id() -> None:
    text = case("err-01")
    fault = classify_smi_failure(text)
    assert fault is not None
    assert fault.state == "gpu_lost"
    assert len(fault.gpu_errors) == 1
    ev = fault.gpu_errors[0]
    assert ev.pci_bus_id == "0000:01:00.0" and ev.lost and ev.reason == "GPU is lost"
    assert ev.repeats == 3
    assert ev.first_seen == datetime(
        2019, 3, 5, 15, 17, 6, tzinfo=timezone(timedelta(hours=3, minutes=30))
    )
    assert lost(fault) == ("0000:01:00.0",)
    assert fault.hint is not None and "reboot" in fault.hint
    assert parse_csv_rows(text, QUERY_FIELDS) == []  # the watchdog's lines are not rows

    known = [
        dict(empty_gpu(i), pci_bus_id=f"00000000:0{i + 1}:00.0", uuid=f"GPU-{i}") for i in range(3)
    ]
    sample = sample_from_fault(fault, 5, 1.0, 1.0, known)
    assert sample["state"] == "gpu_lost"
    assert [(g["index"], g["lost"]) for g in sample["gpus"]] == [(0, True), (1, False), (2, False)]
    for g in sample["gpus"][1:]:  # not lost: readings only missing for this sample
        assert all(g[f] is None for f in GPU_FIELDS)
        assert "missing for this sample" in g["errors"]["util_gpu_pct"]


def test_lost_gpu_found_by_bus_id_not_by_position_or_tag() -> None:
    text = (
        "WARNING: tempcontrol@[GPU0] Problem detected\n"
        "Unable to determine the device handle for GPU 0000:81:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n"
    )
    fault = classify_smi_failure(text)
    assert fault is not None and lost(fault) == ("0000:81:00.0",)
    assert fault.gpu_errors[0].first_seen is None
    known = [
        dict(empty_gpu(i), pci_bus_id=bus)
        for i, bus in enumerate(["00000000:01:00.0", "00000000:41:00.0", "00000000:81:00.0"])
    ]
    sample = sample_from_fault(fault, 0, 0.0, 1.0, known)
    assert [g["lost"] for g in sample["gpus"]] == [False, False, True]
    # two different lost GPUs are two events; a non-lost handle error is not "lost"
    two = classify_smi_failure(text + text.replace("81:00.0", "c1:00.0"))
    assert two is not None and lost(two) == ("0000:81:00.0", "0000:c1:00.0")
    other = classify_smi_failure(
        "Unable to determine the device handle for GPU 0000:41:00.0: Unknown Error\n"
    )
    assert other is not None and other.state == "error" and lost(other) == ()


def test_stream_round_with_a_lost_gpu_keeps_the_others() -> None:
    p = SmiStreamParser(QUERY_FIELDS, 1.0)
    rows = [full_row(0, "GPU-a0", "Disabled"), full_row(1, "GPU-a1", "Disabled")]
    out: list[dict[str, Any]] = []
    for t, line in enumerate(rows + rows):
        out += p.feed(line, float(t))
    assert [s["seq"] for s in out] == [0, 1] and p.known_gpus
    out += p.feed(
        "Unable to determine the device handle for GPU 00000000:08:00.0: GPU is lost", 4.0
    )
    out += p.feed(rows[0], 4.0)
    out += p.flush(5.0)
    last = out[-1]
    assert last["state"] == "gpu_lost"
    assert [(g["index"], g["lost"]) for g in last["gpus"]] == [(0, False), (1, True)]
    assert last["gpus"][0]["util_gpu_pct"] == 87 and last["gpus"][1]["util_gpu_pct"] is None


# ---------------------------------------------------------------------------------------------
# err-03: the driver answers with 0 GPUs -> unhealthy; plugin stall = the same fault


def test_err03a_no_devices_is_no_gpus_not_idle() -> None:
    text = case("err-03a")
    rejected: list[tuple[int, str]] = []
    assert parse_csv_rows(text, QUERY_FIELDS, rejected=rejected) == [] and rejected == []
    fault = classify_smi_failure(text)
    assert fault is not None and fault.state == "no_gpus"
    assert "no GPUs detected" in fault.detail
    assert fault.hint is not None and "lspci" in fault.hint and "kernel log" in fault.hint
    sample = sample_from_fault(fault, 0, 0.0, 1.0)
    assert sample["state"] == "no_gpus" and sample["gpus"] == []
    assert "gpus" not in sample["errors"]  # a valid empty list, not an unknown one
    assert sample["processes"] is None  # not "idle"


def test_err03b_plugin_discovery_never_finished_is_the_same_fault() -> None:
    disc = parse_plugin_discovery(case("err-03b"))
    assert disc.nvml_loaded == datetime(2019, 3, 4, 16, 56, 13)
    assert disc.discovery_started == datetime(2019, 3, 4, 16, 56, 45)
    assert not disc.finished and disc.stalled
    assert classify_smi_failure(case("err-03b")) is None  # not a fault of its own
    both = classify_smi_failure(case("err-03a") + case("err-03b"))
    assert both is not None and both.state == "no_gpus"
    assert len(both.evidence) == 1
    assert "16:56:13" in both.evidence[0] and "16:56:45" in both.evidence[0]
    done = parse_plugin_discovery(
        case("err-03b") + "nvidia-docker-plugin | 2019/03/04 16:56:46 "
        "Provisioning volumes at /var/lib/nvidia-docker/volumes\n"
    )
    assert done.finished and not done.stalled


def test_stream_that_fails_at_once_yields_no_rows() -> None:
    p = SmiStreamParser()
    assert p.feed("No devices were found\n", 1.0) == []
    assert p.flush(2.0) == []
    fault = classify_smi_failure("\n".join(p.unparsed))
    assert fault is not None and fault.state == "no_gpus"
    assert p.fault_sample(fault, 2.0)["state"] == "no_gpus"
    assert p.fault_sample(None, 3.0)["state"] == "error"


# ---------------------------------------------------------------------------------------------
# err-04: driver unreachable (not 0 GPUs); the apt history entry that caused it


def test_err04a_driver_unreachable_every_field_unknown() -> None:
    fault = classify_smi_failure(case("err-04a"))
    assert fault is not None and fault.state == "driver_unreachable"
    empty = sample_from_fault(fault, 0, 0.0, 1.0)
    assert empty["gpus"] == [] and "GPU list unknown" in empty["errors"]["gpus"]  # not "0 GPUs"
    known = [dict(empty_gpu(i), uuid=f"GPU-{i}", util_gpu_pct=50) for i in range(2)]
    sample = sample_from_fault(fault, 1, 0.0, 1.0, known)
    assert sample["state"] == "driver_unreachable"
    assert [g["uuid"] for g in sample["gpus"]] == ["GPU-0", "GPU-1"]
    assert all(g[f] is None and f in g["errors"] for g in sample["gpus"] for f in GPU_FIELDS)


def test_err04b_unattended_upgrade_changed_the_driver() -> None:
    up = classify_driver_upgrade(case("err-04b"))
    assert up is not None
    assert up.start == datetime(2021, 6, 4, 6, 41, 9)
    assert up.unattended and up.commandline == "/usr/bin/unattended-upgrade"
    assert len(up.changes) == 1
    ch = up.changes[0]
    assert (ch.action, ch.name, ch.arch) == ("Upgrade", "libnvidia-common-460", "amd64")
    assert ch.old_version == "460.73.01-0ubuntu0.20.04.1"
    assert ch.new_version == "460.80-0ubuntu0.20.04.2"
    assert (ch.old_driver, ch.new_driver) == ("460.73.01", "460.80")
    assert "automatic upgrade" in up.root_cause and "2021-06-04 06:41:09" in up.root_cause
    assert "reinstall one consistent" in up.fix and "reboot" in up.fix and "hold" in up.fix


def test_driver_upgrade_generalises() -> None:
    text = (
        "Start-Date: 2024-02-01  10:00:00\nCommandline: apt upgrade\n"
        "Requested-By: ops (1000)\nUpgrade: curl:amd64 (7.81.0-1, 7.81.0-2), "
        "nvidia-driver-535:amd64 (535.104.05-0ubuntu1, 535.154.05-0ubuntu1), "
        "libnvidia-compute-535:amd64 (535.104.05-0ubuntu1, "
        "535.154.05-0ubuntu1)\nEnd-Date: 2024-02-01  10:01:00\n\n"
        "Start-Date: 2024-02-02  10:00:00\nCommandline: apt install htop\n"
        "Install: htop:amd64 (3.0.5-7build2)\nEnd-Date: 2024-02-02  10:00:05\n"
    )
    up = classify_driver_upgrade(text)
    assert up is not None and not up.unattended
    assert up.start == datetime(2024, 2, 1, 10, 0, 0)
    assert [c.name for c in up.changes] == ["nvidia-driver-535", "libnvidia-compute-535"]
    assert up.changes[0].new_driver == "535.154.05"
    assert classify_driver_upgrade(text.split("\n\n")[1]) is None


# ---------------------------------------------------------------------------------------------
# err-05: version mismatch; line 2 is the library version, not a data row


def test_err05_version_mismatch() -> None:
    text = case("err-05")
    fault = classify_smi_failure(text)
    assert fault is not None and fault.state == "version_mismatch"
    assert fault.library_version == "570.124" and fault.kernel_module_version is None
    assert "570.124" in fault.detail
    assert fault.hint is not None
    assert "same version" in fault.hint and "reload the nvidia modules" in fault.hint
    assert "reboot" in fault.hint
    for cols in (QUERY_FIELDS, ["driver_version"], ["index"]):
        assert parse_csv_rows(text, cols) == []
    sample = sample_from_fault(fault, 0, 0.0, 1.0, [empty_gpu(0)])
    assert sample["state"] == "version_mismatch"
    assert all(sample["gpus"][0][f] is None for f in GPU_FIELDS)


@pytest.mark.parametrize(
    ("text", "rc", "state"),
    [
        ("bash: nvidia-smi: command not found\n", 127, "no_driver"),
        ("sh: 1: nvidia-smi: not found\n", 127, "no_driver"),
        ("", 127, "no_driver"),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n",
            12,
            "nvml_unavailable",
        ),
        ("Failed to initialize NVML: Unknown Error\n", 255, "error"),
        ("garbage\n", 3, "error"),
    ],
)
def test_other_smi_failures(text: str, rc: int, state: str) -> None:
    fault = classify_smi_failure(text, rc)
    assert fault is not None and fault.state == state
    assert classify_smi_failure("0, 45, 100\n", 0) is None


# ---------------------------------------------------------------------------------------------
# nvml-01: NotSupported on a getter = that field None; missing function = processes unknown


def nvml_sample(n: int = 2) -> dict[str, Any]:
    sample = empty_sample("nvml", 0, 0.0, 1.0)
    for i in range(n):
        g = empty_gpu(i)
        g.update(util_gpu_pct=90, temp_c=60, fan_pct=None, power_w=250.0, mig_mode=None)
        sample["gpus"].append(g)
    sample["processes"] = [{"gpu_index": 0, "pid": 1}]
    return sample


def test_nvml01a_fan_not_supported_is_none_not_fault() -> None:
    f = classify_nvml_traceback(case("nvml-01a"))
    assert f.kind == "not_supported"
    assert f.exception == "NVMLError_NotSupported" and f.message == "Not Supported"
    assert f.nvml_function == "nvmlDeviceGetFanSpeed" and f.fields == ("fan_pct",)
    assert f.host_state is None and not f.gpu_lost and not f.processes_unknown
    assert f.complete
    assert f.returned is not None and f.returned.name == "NVML_ERROR_NOT_SUPPORTED"
    assert not f.returned.host_fault and "not supported" in f.reason


@pytest.mark.parametrize(
    ("func", "fields"),
    [
        ("nvmlDeviceGetPowerUsage", ("power_w",)),
        ("nvmlDeviceGetUtilizationRates", ("util_gpu_pct", "util_mem_pct")),
        ("nvmlDeviceGetComputeRunningProcesses_v3", ("processes",)),
    ],
)
def test_not_supported_maps_the_getter_to_its_fields(func: str, fields: tuple[str, ...]) -> None:
    f = classify_nvml_traceback(case("nvml-01a").replace("nvmlDeviceGetFanSpeed", func))
    assert f.kind == "not_supported" and f.fields == fields
    assert f.processes_unknown == (fields == ("processes",))


def test_nvml01b_missing_function_process_list_unknown() -> None:
    f = classify_nvml_traceback(case("nvml-01b"))
    assert f.kind == "function_not_found"
    assert f.exception is None and not f.complete
    assert f.processes_unknown and f.fields == ("processes",)
    assert f.fallback == "nvidia-smi-compute-apps" and f.host_state is None
    assert f.hint is not None and "--query-compute-apps" in f.hint
    apps = parse_csv_rows("GPU-a0, 77, 1000\n", COMPUTE_APPS_FIELDS)
    sample = nvml_sample()
    sample["gpus"][0]["uuid"] = "GPU-a0"
    procs = processes_from_compute_apps(apps, sample["gpus"])
    assert [(p["gpu_index"], p["pid"], p["used_mib"]) for p in procs] == [(0, 77, 1000)]
    named = classify_nvml_traceback(
        case("nvml-01b") + "    raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)\n"
        "pynvml.NVMLError_FunctionNotFound: Function Not Found\n"
    )
    assert named.kind == "function_not_found" and named.processes_unknown and named.complete


@pytest.mark.parametrize("name", ["nvml-01a", "nvml-01b", "nvml-03", "nvml-04"])
def test_every_truncation_of_a_traceback_classifies(name: str) -> None:
    text = case(name)
    for cut in range(len(text) + 1):
        classify_nvml_traceback(text[:cut])  # must not raise
        classify_nvml_traceback(text[cut:])
    assert classify_nvml_traceback("").kind == "unknown"


# ---------------------------------------------------------------------------------------------
# nvml-03: GPU lost at nvmlDeviceGetHandleByIndex -> that GPU only


@pytest.mark.parametrize("qualified", [False, True])
def test_nvml03_gpu_lost_only_that_gpu(qualified: bool) -> None:
    text = case("nvml-03")
    if qualified:
        text = text.replace("\nNVMLError_GpuIsLost", "\npynvml.NVMLError_GpuIsLost")
        assert "pynvml.NVMLError_GpuIsLost" in text
    f = classify_nvml_traceback(text)
    assert f.kind == "gpu_lost" and f.gpu_lost
    assert f.exception == "NVMLError_GpuIsLost" and f.message == "GPU is lost"
    assert f.nvml_function == "nvmlDeviceGetHandleByIndex"
    assert f.host_state is None and f.hint is not None and "reboot" in f.hint
    # the GPU at the caller's index is lost; the host (and its other GPUs) are not
    assert f.returned is not None and f.returned.code == 15 and f.returned.host_fault


# ---------------------------------------------------------------------------------------------
# nvml-04: libnvidia-ml.so.1 cannot be opened -> NVML unavailable, use nvidia-smi


def test_nvml04_library_not_found() -> None:
    f = classify_nvml_traceback(case("nvml-04"))
    assert f.kind == "library_not_found" and f.host_state == "nvml_unavailable"
    assert f.fallback == "nvidia-smi" and f.nvml_function == "nvmlInit"
    assert not f.complete and f.exception == "OSError"
    assert f.processes_unknown  # unknown, never "no processes"
    full = classify_nvml_traceback(
        case("nvml-04") + "pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found\n"
    )
    assert full.kind == "library_not_found" and full.complete


def test_other_nvml_errors_map_to_host_states() -> None:
    base = case("nvml-01a")
    mism = classify_nvml_traceback(
        base.replace(
            "pynvml.NVMLError_NotSupported: Not Supported",
            "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
        )
    )
    assert mism.host_state == "version_mismatch"
    drv = classify_nvml_traceback(
        base.replace(
            "NVMLError_NotSupported: Not Supported", "NVMLError_DriverNotLoaded: Driver Not Loaded"
        )
    )
    assert drv.host_state == "driver_unreachable"


# ---------------------------------------------------------------------------------------------
# xid-01: two GPUs faulting for many processes over days -> suspect hardware


def by_bus(summaries: list[GpuXidSummary]) -> dict[str, GpuXidSummary]:
    return {s.pci_bus_id: s for s in summaries}


def test_xid01_two_gpus_suspect_hardware() -> None:
    scan = scan_kernel_log(case("xid-01"))
    assert scan.bus_to_uuid == {"0000:db:00": "GPU-00000000-0000-0000-0000-0000000000db"}
    evs = scan.events
    assert len(evs) == 7  # empty "GPU Board Serial Number:" lines are not events, not errors
    s = by_bus(summarize_xids(evs, {"00000000:3D:00.0": 0, "00000000:DB:00.0": 1}))
    assert list(s) == ["0000:3d:00", "0000:db:00"]

    a = s["0000:3d:00"]
    assert a.gpu_index == 0 and a.uuid is None
    assert a.counts == {43: 4}
    assert a.pids == (35521, 36178, 1405, 11101)
    assert [e.pid for e in a.events] == [35521, 36178, 1405, 11101]
    assert {e.channel for e in a.events} == {"00000008"}
    assert a.first.wall_time == datetime(2021, 1, 27, 23, 4, 35)
    assert a.last.wall_time == datetime(2021, 1, 28, 2, 13, 33)
    assert "application fault" in a.diagnosis and "GPU stays usable" in a.diagnosis

    b = s["0000:db:00"]
    assert b.gpu_index == 1 and b.uuid == "GPU-00000000-0000-0000-0000-0000000000db"
    assert b.counts == {31: 3}
    assert b.pids == (13641, 14323, 33275)
    assert b.first.wall_time == datetime(2021, 1, 29, 23, 42, 34)
    assert b.last.wall_time == datetime(2021, 1, 30, 0, 32, 48)
    assert [e.mmu.address for e in b.events if e.mmu] == [
        "0x7fd7_90743000",
        "0x7efe_ba290000",
        "0x7f57_2c9e8000",
    ]
    for e in b.events:
        assert e.mmu is not None
        assert (e.mmu.engine, e.mmu.client, e.mmu.fault_type, e.mmu.access_type) == (
            "GRAPHICS",
            "GPCCLIENT_T1_10",
            "FAULT_PDE",
            "ACCESS_TYPE_VIRT_READ",
        )
        assert e.uuid == "GPU-00000000-0000-0000-0000-0000000000db"
    assert "MMU fault" in b.diagnosis

    for x in (a, b):
        assert x.verdict == "suspect_hardware" and x.drain
        assert "drain" in x.action and "diagnostics" in x.action


def test_single_app_fault_leaves_the_gpu_usable() -> None:
    one = "\n".join(case("xid-01").splitlines()[:2])
    (s,) = summarize_xids(_events(one))
    assert s.verdict == "application_fault" and not s.drain and s.pids == (35521,)
    # the same process faulting repeatedly is one application, not hardware
    same = "\n".join(
        ln.replace("pid=36178", "pid=35521")
        .replace("pid=1405", "pid=35521")
        .replace("pid=11101", "pid=35521")
        for ln in case("xid-01").splitlines()[:5]
    )
    (s2,) = summarize_xids(_events(same))
    assert s2.verdict == "application_fault" and s2.counts == {43: 4} and s2.pids == (35521,)


def test_xid02_chain_needs_reset() -> None:
    evs = _events(case("xid-02"))
    assert len(evs) == 10  # sched: RT throttling skipped
    first = evs[0]
    assert (first.xid, first.pid, first.process_name, first.channel) == (
        31,
        13332,
        "cuda_plot_k32_v",
        "00000010",
    )
    assert first.uptime_s == 14328.198504 and first.wall_time is None
    assert first.mmu is not None
    assert (
        first.mmu.engine,
        first.mmu.client,
        first.mmu.address,
        first.mmu.fault_type,
        first.mmu.access_type,
    ) == (
        "CE2",
        "HUBCLIENT_CE0",
        "0x7f29_5b8c9000",
        "FAULT_PRIV_VIOLATION",
        "ACCESS_TYPE_VIRT_READ",
    )
    halt = evs[1]
    assert (halt.xid, halt.pid, halt.process_name, halt.uptime_s) == (62, None, None, 14370.687545)
    assert len(re.findall(r"\b[0-9a-f]{8}\b", halt.detail)) == 8
    cleanup = evs[2:]
    assert [e.xid for e in cleanup] == [45] * 8
    assert [e.channel for e in cleanup] == [f"{c:08x}" for c in range(8, 16)]
    assert (cleanup[0].uptime_s, cleanup[-1].uptime_s) == (14370.688139, 14397.322674)
    assert all(e.pid is None and e.process_name is None for e in cleanup)
    assert all(e.uuid == "GPU-00000000-0000-0000-0000-00000000000a" for e in evs)

    (s,) = summarize_xids(evs, {"0000:0a:00.0": 0})
    assert s.pci_bus_id == "0000:0a:00" and s.gpu_index == 0
    assert s.uuid == "GPU-00000000-0000-0000-0000-00000000000a"
    assert s.counts == {31: 1, 62: 1, 45: 8} and s.pids == (13332,)
    assert s.verdict == "needs_reset" and s.drain
    assert s.chain_root is first and s.chain_root.pid == 13332
    assert "reset" in s.action and "reboot" in s.action
    assert "cleanup" in s.diagnosis and "13332" in s.diagnosis


def test_reset_chain_root_must_be_recent() -> None:
    far = case("xid-02").replace("[14328.198504]", "[ 1328.198504]")
    (s,) = summarize_xids(_events(far))
    assert s.verdict == "needs_reset" and s.chain_root is None


# ---------------------------------------------------------------------------------------------
# xid-04: "fallen off the bus" over continuation lines -> one Xid 79 event


def test_xid04_fallen_off_the_bus() -> None:
    scan = scan_kernel_log(case("xid-04"))
    (ev,) = scan.events
    assert (ev.xid, ev.inferred, ev.pci_bus_id, ev.pci_device_id, ev.uptime_s) == (
        79,
        True,
        "0000:b3:00.0",
        "10de:26b5",
        1843.308145,
    )
    assert "fallen off the bus and is not responding to commands" in ev.detail
    assert scan.probe_failed_devices == 1
    assert scan.driver_version == "570.158.01" and scan.open_kernel_module is True
    (s,) = summarize_xids(scan.events, {"00000000:B3:00.0": 3})
    assert s.gpu_index == 3 and s.verdict == "gpu_lost" and s.drain
    for word in ("reboot", "power-cycle", "PCIe seating", "power", "cooling"):
        assert word in s.action


def test_fallen_off_variants() -> None:
    text = (
        "[  100.000001] NVRM: GPU at PCI:0000:3b:00: GPU-0000003b\n"
        "[  100.000002] NVRM: Xid (PCI:0000:3b:00): 79, pid=2222, GPU has fallen off the "
        "bus.\n"
        "[  100.000003] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
        "[  200.000000] NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.\n"
    )
    evs = _events(text)
    assert [(e.pci_bus_id, e.xid, e.inferred) for e in evs] == [
        ("0000:3b:00", 79, False),
        ("0000:5e:00.0", 79, True),
    ]
    assert evs[0].uuid == "GPU-0000003b" and evs[0].pid == 2222
    old_banner = "[    5.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  460.73.01  Thu Apr 1\n"
    scan = scan_kernel_log(old_banner)
    assert scan.driver_version == "460.73.01" and scan.open_kernel_module is False


def test_syslog_prefix_and_pci_spellings() -> None:
    line = (
        "Jan 27 23:04:35 gpu-node-01 kernel: [14328.198504] NVRM: Xid (PCI:0000:3d:00): 13, "
        "pid=99, name=python3, Graphics Exception"
    )
    (ev,) = _events(line)
    assert (ev.xid, ev.pid, ev.process_name, ev.uptime_s) == (13, 99, "python3", 14328.198504)
    assert pci_key("PCI:0000:3d:00") == pci_key("00000000:3D:00.0") == pci_key("3d:00.0")
    assert pci_key("0000:3d:00") != pci_key("0000:3e:00")
    assert pci_key("not a bus id") is None


def test_csvrow_is_plain_data() -> None:
    row = CsvRow(fields=("index",), values={"index": 3})
    assert row["index"] == 3 and row.errors == {}


def test_xid_event_defaults() -> None:
    ev = XidEvent(xid=43, pci_bus_id="0000:01:00", time_text="1.0")
    assert ev.pid is None and ev.mmu is None and not ev.inferred


# ---------------------------------------------------------------------------------------------
# the shapes real pastes take (one implementation for the agent's path and `diagnose`)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus" / "gpu"


def corpus(name: str) -> str:
    return (CORPUS / f"{name}.txt").read_text()


def test_ctypes_undefined_symbol_is_function_not_found() -> None:
    """gpu-011: the last traceback is cut; ctypes' AttributeError names the missing symbol."""
    f = classify_nvml_traceback(corpus("gpu-011"))
    assert f.kind == "function_not_found"
    assert f.nvml_function == "nvmlDeviceGetComputeRunningProcesses_v2"
    assert f.fields == ("processes",) and f.processes_unknown
    assert f.fallback == "nvidia-smi-compute-apps"
    # the AttributeError line alone (everything before it cut off)
    last = next(ln for ln in corpus("gpu-011").splitlines() if "undefined symbol" in ln)
    assert classify_nvml_traceback(last).kind == "function_not_found"


def test_traceback_indented_as_a_block_classifies_the_same() -> None:
    for text in (case("nvml-01a"), case("nvml-03"), corpus("gpu-011")):
        plain = classify_nvml_traceback(text)
        quoted = classify_nvml_traceback("\n".join("    " + ln for ln in text.splitlines()))
        assert (quoted.kind, quoted.nvml_function, quoted.exception) == (
            plain.kind,
            plain.nvml_function,
            plain.exception,
        )
    assert (
        classify_nvml_traceback("\n".join("    " + ln for ln in case("nvml-01a").splitlines())).kind
        == "not_supported"
    )


def test_unreadable_stamps_do_not_double_a_printed_xid_79() -> None:
    """gpu-018 (journal lines with a lower-case, full month name) prints Xid 79 and then
    'GPU has fallen off the bus.': one event; the stamp is read."""
    evs = _events(corpus("gpu-018"))
    assert [(e.xid, e.inferred) for e in evs] == [(79, False)]
    assert evs[0].time_text == "april 24 16:22:15" and evs[0].pid == 6755
    # gpu-019 has no stamps at all; quoted in Markdown too
    for text in (corpus("gpu-019"), "\n".join("> " + ln for ln in corpus("gpu-019").splitlines())):
        assert [(e.xid, e.inferred) for e in _events(text)] == [(79, False)]


def test_bare_gsp_timeout_next_to_a_printed_119_without_stamps_is_one_event() -> None:
    """gpud's dmesg -T capture (tests/unit/test_xid_catalog.py GPUD_119) with the stamps cut
    off, its Xid 119 line then the same timeout in the older drivers' wording without an Xid."""
    from tests.unit.test_xid_catalog import GPUD_119

    lines = [ln.split("] ", 1)[1] for ln in GPUD_119.splitlines()]
    bare = lines[2].replace("Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, ", "")
    evs = _events("\n".join([*lines, bare]))
    assert [(e.xid, e.inferred) for e in evs] == [(119, False)]


def test_dmesg_ctime_in_any_case_and_long_names() -> None:
    line = next(ln for ln in case("xid-01").splitlines() if "Xid" in ln)
    (plain,) = _events(line)
    assert plain.wall_time is not None
    for variant in (
        line.replace("Wed Jan", "wed jan"),
        line.replace("Wed Jan", "Wednesday January"),
    ):
        (ev,) = _events(variant)
        assert ev.wall_time == plain.wall_time


@pytest.mark.parametrize(
    "prefix",
    [
        "Feb 14 05:03:41 gpu-node-01 kernel: ",
        "february 14 05:03:41 gpu-node-01 kernel: ",
        "[ 1843.308145] ",
        "> [ 1843.308145] ",
    ],
)
def test_wrapped_notice_with_a_stamp_on_every_line_is_one_message(prefix: str) -> None:
    """xid-04's three-line notice as journalctl / newer dmesg print it: each line stamped."""
    head = case("xid-04").splitlines()[:3]
    text = "\n".join(prefix + ln[ln.index("NVRM:") :] for ln in head)
    (ev,) = _events(text)
    assert (ev.xid, ev.inferred, ev.pci_bus_id, ev.pci_device_id) == (
        79,
        True,
        "0000:b3:00.0",
        "10de:26b5",
    )
    assert (ev.line_no, ev.end_line_no) == (1, 3)
    assert "fallen off the bus and is not responding" in ev.detail


def test_cleanup_lines_only_are_judged_by_the_xid_they_name() -> None:
    """gpu-002: only Xid 45 'caused by previous Xid 149/145' (NVLink5): never an application
    fault; the named root decides the verdict."""
    sums = summarize_xids(_events(corpus("gpu-002")))
    assert len(sums) == 4
    assert {s.verdict for s in sums} == {"hardware_warning"}
    dc = next(s for s in sums if s.pci_bus_id == "0000:dc:00")
    assert "name Xid 149" in dc.diagnosis
    # the same lines naming an Xid 79 (the 45s after a GPU fell off the bus) -> gpu_lost
    lost = corpus("gpu-002").replace("caused by previous Xid 149", "caused by previous Xid 79")
    dc = next(s for s in summarize_xids(_events(lost)) if s.pci_bus_id == "0000:dc:00")
    assert dc.verdict == "gpu_lost" and dc.drain


@pytest.mark.parametrize(
    ("name", "client", "kernel", "who", "count"),
    [
        ("gpu-024", "535.54.03", "530.30.02", None, 1),  # rsyslog, #012 newlines
        ("gpu-025", "595.84", "595.80", ("kwin_wayland", 1005), 1),  # newer wording
        ("gpu-026", "570.148.08", "570.148.06", None, 1),  # every line stamped
        ("gpu-027", "570.153.02", "570.144", None, 3),  # continuation lines, three notices
    ],
)
def test_kernel_api_mismatch_notice(
    name: str, client: str, kernel: str, who: tuple[str, int] | None, count: int
) -> None:
    text = corpus(name)
    for m in (find_api_mismatch(text), scan_kernel_log(text).api_mismatch):
        assert m is not None
        assert (m.client_version, m.kernel_module_version, m.count) == (client, kernel, count)
        assert ((m.client, m.pid) if m.client else None) == who
    assert find_api_mismatch(case("xid-02")) is None
    assert scan_kernel_log(case("xid-04")).api_mismatch is None


def test_typographic_apostrophe_in_smi_messages() -> None:
    """gpu-006: ``couldn<U+2018>t communicate`` from a pasted blog post."""
    fault = classify_smi_failure(corpus("gpu-006"))
    assert fault is not None and fault.state == "driver_unreachable"
    err = case("err-04a")
    assert classify_smi_failure(err.replace("'", "\u2019")) == classify_smi_failure(err)
