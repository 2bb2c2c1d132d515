"""NVIDIA's Xid catalogue as data: every documented Xid, its meaning, NVIDIA's resolution and
its place in a failure chain.

Sources:

* NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer),
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and the spreadsheet
  it offers (sheet "Catalog": Code, Mnemonic, Description, Resolution Bucket (Immediate
  Action), Resolution Bucket (Investigatory Action)). :data:`CATALOG_ROWS` holds those five
  columns for Xid 1-172 as transcribed, spreadsheet revision of 2025-10-29, by
  ``leptonai/gpud`` (``components/accelerator/nvidia/xid/catalog_generated.go``, generated
  from that page; commit 4a8de33a3f02e207f39e9023d67125592d599731). Line breaks inside cells
  are joined with one space; nothing else is changed. Xid 162-172 have no resolution in that
  revision (empty strings).
* NVIDIA, "Error Recovery and Response Flags" (A100 GPU memory error management),
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html,
  and NVML's ``nvmlDeviceGpuRecoveryAction_t``: the recovery actions an Xid 154 line names
  (:data:`RECOVERY_ACTIONS`).
* ``tests/data/diagnose/xid-catalog-sources.md``: the same page read independently (plus
  NVIDIA/NVSentinel's xiderrorsmapping.csv and dcgm-exporter's Xid texts, with URLs and
  commits); ``tests/unit/test_xid_catalog.py`` checks every mnemonic and immediate bucket here
  against its table. Where that table has prose instead of a bucket (Xid 162-170, power
  smoothing and confidential computing), the action here is ``unknown``.
* Kernel log spellings of Xid 45, 119 and 154 and of GSP messages: the real reports in
  ``tests/data/diagnose/corpus/gpu/`` (gpu-001 Xid 119, gpu-002 Xid 45 "caused by previous
  Xid 149", gpu-004 Xid 62 then 154) and ``tests/data/cases/dmesg-xid/``.

What this module adds to NVIDIA's columns, per Xid (:class:`XidInfo`):

* ``action``: the immediate bucket as one :data:`Action` word (a person's verb in
  :data:`ACTION_TEXT`; ``RESTART_BM`` -> ``reboot``). Workflow buckets are resolved to what
  their catalogue rows say: ``WORKFLOW_XID_48`` (double-bit ECC) -> ``reset_gpu`` (the memory
  error page: a DBE leaves a row remapping pending that a GPU reset applies),
  ``WORKFLOW_XID_45`` -> ``follow_root`` (the investigatory column: "Not Solo: IGNORE (follow
  other Xid)"), ``XID_154`` -> ``recovery_action`` (read the action the line names),
  ``WORKFLOW_NVLINK_ERR``/``WORKFLOW_NVLINK5_ERR`` -> ``nvlink`` (decode the link error; the
  catalogue's "XID 144-150 Decode" sheet makes its fatal rows RESET_GPU).
* ``role`` in a chain of events on one GPU (:data:`Role`): ``consequence`` (Xid 45: channels
  torn down after an earlier error), ``summary`` (Xid 154: the driver's verdict on an earlier
  Xid, not a cause), ``app`` (a fault of the running application's channel: the immediate
  action is RESTART_APP, and Xid 43, whose IGNORE means the GPU stays usable), ``root`` (a
  fault of the GPU, its memory, firmware or interconnect that starts a chain: NVLink 74 and
  144-150, GSP 119/120, 79, ECC 48/94/95, 62, row remapping 63/64, 92, and every other Xid
  whose immediate action is not RESTART_APP/IGNORE), ``info`` (IGNORE, unused numbers).
* ``short``: a few words for a table cell.

The host agent (``remote/agent/agent.py``) is shipped alone and cannot import this module; its
``XID_MEANINGS`` table repeats :func:`agent_meanings` and ``tests/unit/test_xid_catalog.py``
checks they are equal. ``remote/telemetry/faults.py`` derives its ``XID_INFO`` classes from
here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: URL of NVIDIA's catalogue page.
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
#: The spreadsheet revision :data:`CATALOG_ROWS` was transcribed from.
CATALOG_REVISION = "2025-10-29"

#: (code, mnemonic, description, immediate bucket, investigatory bucket), NVIDIA's columns.
CATALOG_ROWS: tuple[tuple[int, str, str, str, str], ...] = (
    (1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused", "CONTACT_SUPPORT", ""),
    (5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused", "CONTACT_SUPPORT", ""),
    (6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused", "CONTACT_SUPPORT", ""),
    (7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused", "CONTACT_SUPPORT", ""),
    (
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing",
        "RESTART_APP",
        "CONTACT_SUPPORT",
    ),
    (9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused", "CONTACT_SUPPORT", ""),
    (10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused", "CONTACT_SUPPORT", ""),
    (
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        "RESTART_APP",
        "CHECK_APP/CUDA",
    ),
    (12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "Graphics Engine Exception",
        "RESTART_APP",
        "WORKFLOW_XID_13",
    ),
    (14, "ROBUST_CHANNEL_FAKE_ERROR", "Unused", "IGNORE", "CONTACT_SUPPORT"),
    (15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused", "CONTACT_SUPPORT", ""),
    (16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused", "CONTACT_SUPPORT", "CONTACT_SUPPORT"),
    (17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused", "CONTACT_SUPPORT", ""),
    (20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", ""),
    (23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused", "CONTACT_SUPPORT", ""),
    (24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused", "CONTACT_SUPPORT", ""),
    (
        25,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "Invalid or illegal push buffer stream",
        "RESTART_APP",
        "CHECK_APP/CUDA",
    ),
    (26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused", "CONTACT_SUPPORT", ""),
    (27, "ROBUST_CHANNEL_VP_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused", "CONTACT_SUPPORT", ""),
    (
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault",
        "RESTART_APP",
        "WORKFLOW_XID_31",
    ),
    (
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream",
        "RESTART_APP",
        "CHECK_APP/CUDA",
    ),
    (33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (
        37,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD",
        "Driver firmware error",
        "IGNORE",
        "CHECK_APP/CUDA",
    ),
    (
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "Driver firmware error",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    (42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics Engine fault during context switch",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors -- Most likely to see when running "
        "multiple cuda applications and hitting a DBE",
        "WORKFLOW_XID_45",
        "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)",
    ),
    (
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "GPU stopped processing",
        "RESET_GPU",
        "CONTACT_SUPPORT",
    ),
    (47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double Bit ECC Error",
        "WORKFLOW_XID_48",
        "WORKFLOW_XID_48",
    ),
    (49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "Unused", "CONTACT_SUPPORT", ""),
    (50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused", "CONTACT_SUPPORT", ""),
    (52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "Unused", "CONTACT_SUPPORT", ""),
    (53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused", "CONTACT_SUPPORT", ""),
    (
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power is not connected to the GPU board",
        "CHECK_MECHANICALS",
        "CONTACT_SUPPORT",
    ),
    (55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", "CONTACT_SUPPORT", ""),
    (57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (58, "FB_MEMORY_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (59, "PMU_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", "INVESTIGATE_SW"),
    (61, "PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT", ""),
    (
        62,
        "PMU_HALT_ERROR",
        "Internal micro-controller halt (newer drivers)",
        "RESET_GPU",
        "CONTACT_SUPPORT",
    ),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", "IGNORE"),
    (
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "GPU memory remapping failure",
        "RESET_GPU",
        "CONTACT_SUPPORT",
    ),
    (65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (
        66,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        "Illegal access by driver",
        "IGNORE",
        "INVESTIGATE_SW",
    ),
    (
        67,
        "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION",
        "Illegal access by driver",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    (
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR",
        "Graphics Engine class error",
        "RESTART_APP",
        "CHECK_APP/CUDA",
    ),
    (70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    (75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", "UPDATE_SWFW"),
    (
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        "RESTART_BM",
        "CONTACT_SUPPORT",
    ),
    (
        80,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH",
        "Corrupted data sent to GPU",
        "RESTART_APP",
        "CHECK_APP/CUDA",
    ),
    (81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    (87, "NVTELEMETRY_DRIVER_REPORT", "Unused", "CONTACT_SUPPORT", ""),
    (88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (90, "LTC_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (91, "RESERVED_XID", "Unused", "CONTACT_SUPPORT", ""),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "CONTACT_SUPPORT"),
    (
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "Non-fatal violation of provisioned InfoROM wear limit",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained memory error",
        "RESTART_APP",
        "IGNORE (sympathetic)",
    ),
    (
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained memory error",
        "RESET_GPU",
        "IGNORE (sympathetic)",
    ),
    (96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE", "IGNORE"),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE", "IGNORE"),
    (108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", "IGNORE", "XID_137_FLOW"),
    (
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "Context Switch Timeout Error",
        "RESET_GPU",
        "CONTACT_SUPPORT",
    ),
    (110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "INVESTIGATE_SW"),
    (111, "BUNDLE_ERROR_EVENT", "Unused", "CONTACT_SUPPORT", ""),
    (112, "DISP_SUPERVISOR_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (113, "DP_LT_FAILURE", "Unused", "CONTACT_SUPPORT", ""),
    (114, "HEAD_RG_UNDERFLOW", "Unused", "CONTACT_SUPPORT", ""),
    (115, "CORE_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", ""),
    (116, "WINDOW_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", ""),
    (117, "CURSOR_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", ""),
    (118, "HEAD_REGS", "Unused", "CONTACT_SUPPORT", ""),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "INVESTIGATE_SW"),
    (120, "GSP_ERROR", "GSP Error", "RESET_GPU", "INVESTIGATE_SW"),
    (121, "C2C_ERROR", "C2C Error", "IGNORE", "CONTACT_SUPPORT"),
    (122, "SPI_PMU_RPC_READ_FAIL", "Unused", "CONTACT_SUPPORT", ""),
    (123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", "CONTACT_SUPPORT", ""),
    (124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", "CONTACT_SUPPORT", ""),
    (125, "INFOROM_FS_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", "INVESTIGATE_LINK_SI"),
    (137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", "XID_137_FLOW"),
    (138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", "CONTACT_SUPPORT", ""),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    (
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "ECC Unrecovered Error",
        "RESET_GPU",
        "CONTACT_SUPPORT",
    ),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE", "CONTACT_SUPPORT"),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT", ""),
    (143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", "CONTACT_SUPPORT"),
    (144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    (145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    (146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    (
        147,
        "NVLINK_TREX_ERROR",
        "NVLINK: TREX Error",
        "WORKFLOW_NVLINK5_ERR",
        "WORKFLOW_NVLINK5_ERR",
    ),
    (
        148,
        "NVLINK_NVLPW_CTRL_ERROR",
        "NVLINK: NVLPW_CTRL Error",
        "WORKFLOW_NVLINK5_ERR",
        "WORKFLOW_NVLINK5_ERR",
    ),
    (
        149,
        "NVLINK_NETIR_ERROR",
        "NVLINK: NETIR Error",
        "WORKFLOW_NVLINK5_ERR",
        "WORKFLOW_NVLINK5_ERR",
    ),
    (150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    (
        151,
        "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        "Key rotation Error",
        "RESTART_VM",
        "CONTACT_SUPPORT",
    ),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE", "CONTACT_SUPPORT"),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE", "CONTACT_SUPPORT"),
    (
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU Recovery Action Changed",
        "XID_154",
        "N/A Informational only regarding another Xid",
    ),
    (
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLINK: SW Defined Error",
        "RESET_GPU",
        "INVESTIGATE_SW_USER",
    ),
    (156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", "IGNORE"),
    (
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource Retirement Failure",
        "IGNORE",
        "CONTACT_SUPPORT",
    ),
    (158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", "CONTACT_SUPPORT"),
    (
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI Non-Data Error",
        "CHECK_UVM",
        "SYMPATHETIC_REPORT_SOLO",
    ),
    (160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", "INVESTIGATE_SW"),
    (161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", "INVESTIGATE_SW"),
    (162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "", ""),
    (163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "", ""),
    (164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "", ""),
    (165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "", ""),
    (
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        "CC traffic seen prior to link properly being configured for encrypted traffic",
        "",
        "",
    ),
    (167, "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", "", ""),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", "", ""),
    (169, "SEC2_HALT_ERROR", "Internal micro-controller halt", "", ""),
    (170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", "", ""),
    (
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "Additional to Xid 48 providing more details on particulars of fault to "
        "differentiate DRAM/SRAM",
        "",
        "",
    ),
    (
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "Additional to Xid 48 providing more details on particulars of fault to "
        "differentiate DRAM/SRAM",
        "",
        "",
    ),
)

Action = Literal[
    "reboot",  # RESTART_BM: reboot (power-cycle) the bare-metal host
    "reset_gpu",  # RESET_GPU: stop the GPU's processes, reset it (nvidia-smi -r) or reboot
    "restart_vm",  # RESTART_VM
    "restart_app",  # RESTART_APP: the application failed; the GPU stays usable
    "check_mechanicals",  # CHECK_MECHANICALS: power cables, seating, cooling
    "nvlink",  # WORKFLOW_NVLINK_ERR / WORKFLOW_NVLINK5_ERR: decode the link error
    "check_uvm",  # CHECK_UVM
    "update_sw",  # UPDATE_SWFW: driver / firmware update
    "contact_support",  # CONTACT_SUPPORT
    "recovery_action",  # XID_154: the action is the one the line names
    "follow_root",  # WORKFLOW_XID_45: act on the earlier Xid that caused it
    "ignore",  # IGNORE
    "unknown",  # no resolution in the catalogue revision
]
Role = Literal["root", "app", "consequence", "summary", "info"]

#: Action -> the words shown after an Xid (``Xid 79 fallen off the bus: reboot``).
ACTION_TEXT: dict[str, str] = {
    "reboot": "reboot",
    "reset_gpu": "reset GPU",
    "restart_vm": "restart VM",
    "restart_app": "restart app",
    "check_mechanicals": "check power/seating",
    "nvlink": "reset GPU if the link error is fatal",
    "check_uvm": "check UVM",
    "update_sw": "update driver/firmware",
    "contact_support": "contact support",
    "recovery_action": "see recovery action",
    "follow_root": "follow earlier Xid",
    "ignore": "no action",
    "unknown": "see NVIDIA catalogue",
}

#: How hard an action hits (higher = take the GPU out sooner); picks a chain's headline.
ACTION_RANK: dict[str, int] = {
    "reboot": 9,
    "reset_gpu": 8,
    "restart_vm": 7,
    "nvlink": 6,
    "check_mechanicals": 6,
    "contact_support": 4,
    "update_sw": 4,
    "check_uvm": 4,
    "restart_app": 3,
    "unknown": 2,
    "recovery_action": 1,
    "ignore": 1,
    "follow_root": 0,
}

_BUCKET_ACTION: dict[str, Action] = {
    "RESTART_BM": "reboot",
    "RESET_GPU": "reset_gpu",
    "RESTART_VM": "restart_vm",
    "RESTART_APP": "restart_app",
    "CHECK_MECHANICALS": "check_mechanicals",
    "WORKFLOW_NVLINK_ERR": "nvlink",
    "WORKFLOW_NVLINK5_ERR": "nvlink",
    "CHECK_UVM": "check_uvm",
    "UPDATE_SWFW": "update_sw",
    "CONTACT_SUPPORT": "contact_support",
    "XID_154": "recovery_action",
    "WORKFLOW_XID_45": "follow_root",
    "WORKFLOW_XID_48": "reset_gpu",
    "IGNORE": "ignore",
    "": "unknown",
}

#: Xid 154's recovery actions (``nvmlDeviceGpuRecoveryAction_t``: value, the line's words)
#: -> action.
RECOVERY_ACTIONS: dict[int, tuple[str, Action]] = {
    0: ("None", "ignore"),
    1: ("GPU Reset Required", "reset_gpu"),
    2: ("Node Reboot Required", "reboot"),
    3: ("Drain P2P", "nvlink"),
    4: ("Drain and Reset", "reset_gpu"),
    5: ("Recover IMEX Domain", "contact_support"),
    6: ("Bus Reset", "reset_gpu"),
    7: ("System Reboot", "reboot"),
}

#: Chain roles that are not derived from the immediate bucket (see the module docstring).
_ROLE_OVERRIDES: dict[int, Role] = {
    45: "consequence",
    154: "summary",
    43: "app",  # IGNORE for the GPU: the application's channel was reset, the GPU is usable
    63: "root",
    92: "root",  # IGNORE, but a memory health event that later Xids follow
    94: "root",  # RESTART_APP, but a memory error of the GPU (the brief's ECC chain: 48/94/95)
    74: "root",
    **{x: "root" for x in range(144, 151)},
}

#: Short words for a table cell where NVIDIA's description is long or generic.
_SHORT: dict[int, str] = {
    8: "GPU stopped processing (timeout)",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    46: "GPU stopped processing",
    48: "double-bit ECC error",
    54: "aux power not connected",
    62: "micro-controller halt",
    63: "row remapping event",
    64: "row remapping failure",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC rate",
    93: "InfoROM wear limit",
    94: "contained memory error",
    95: "uncontained memory error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
    143: "GPU init error",
    154: "recovery action changed",
    156: "resource retirement event",
    158: "GPU fatal timeout",
    166: "NVLink CC traffic before encryption",
    168: "reduced GPU memory capacity",
    171: "uncorrectable DRAM error",
    172: "uncorrectable SRAM error",
}


@dataclass(frozen=True)
class XidInfo:
    """One Xid of NVIDIA's catalogue.

    Attributes:
        code: the Xid number.
        mnemonic: NVIDIA's name (``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS``).
        description: NVIDIA's description (``GPU has fallen off the bus``; ``Unused``).
        immediate: NVIDIA's immediate-action bucket as written (``RESTART_BM``).
        investigatory: NVIDIA's investigatory bucket as written (may be empty).
        action: ``immediate`` as an :data:`Action`.
        role: see :data:`Role`.
        short: a few words for a table cell.
        used: the catalogue does not mark it ``Unused``.
    """

    code: int
    mnemonic: str
    description: str
    immediate: str
    investigatory: str
    action: Action
    role: Role
    short: str
    used: bool

    @property
    def action_text(self) -> str:
        """The action as a person's words (:data:`ACTION_TEXT`)."""
        return ACTION_TEXT[self.action]

    @property
    def headline(self) -> str:
        """``Xid 79 fallen off the bus: reboot``."""
        return f"Xid {self.code} {self.short}: {self.action_text}"


def _role(code: int, action: Action, used: bool) -> Role:
    if code in _ROLE_OVERRIDES:
        return _ROLE_OVERRIDES[code]
    if not used or action == "ignore":
        return "info"
    if action == "restart_app":
        return "app"
    return "root"


def _short(code: int, description: str) -> str:
    if code in _SHORT:
        return _SHORT[code]
    text = description.strip()
    if len(text) > 1 and not text[:2].isupper():  # "Graphics Engine ..." but not "NVLINK"
        text = text[0].lower() + text[1:]
    return text


def _build() -> dict[int, XidInfo]:
    out: dict[int, XidInfo] = {}
    for code, mnemonic, description, immediate, investigatory in CATALOG_ROWS:
        action = _BUCKET_ACTION[immediate]
        used = description != "Unused"
        out[code] = XidInfo(
            code=code,
            mnemonic=mnemonic,
            description=description,
            immediate=immediate,
            investigatory=investigatory,
            action=action,
            role=_role(code, action, used),
            short=_short(code, description),
            used=used,
        )
    return out


#: Xid -> :class:`XidInfo`, every number in the catalogue (1-172).
XID_CATALOG: dict[int, XidInfo] = _build()


def xid_info(code: int) -> XidInfo:
    """The catalogue entry of ``code``; an Xid the catalogue does not list gets a stand-in
    (``unknown`` action, ``root`` role: an unlisted error is not assumed harmless)."""
    info = XID_CATALOG.get(code)
    if info is not None:
        return info
    return XidInfo(
        code=code,
        mnemonic="",
        description="not in NVIDIA's catalogue",
        immediate="",
        investigatory="",
        action="unknown",
        role="root",
        short="unlisted Xid",
        used=True,
    )


def agent_meanings() -> dict[int, str]:
    """What the host agent's ``XID_MEANINGS`` must hold: every used Xid -> NVIDIA's
    description (the ``detail`` of an NVML Xid event, which carries no text of its own)."""
    return {c: i.description for c, i in XID_CATALOG.items() if i.used}


# -- kernel-log wording that carries catalogue facts -------------------------------------------

#: ``Xid (PCI:...): 45, ... caused by previous Xid 149`` (the root it names).
CAUSED_BY_RE = re.compile(r"caused by previous Xid (?P<xid>\d+)")
#: ``Xid (PCI:...): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
#: Required)``.
RECOVERY_RE = re.compile(
    r"recovery action changed from (?P<old>0x[0-9a-fA-F]+|\d+)(?: \([^)]*\))? to "
    r"(?P<new>0x[0-9a-fA-F]+|\d+)(?: \((?P<words>[^)]*)\))?"
)
#: GSP RPC timeouts as printed with or without an Xid: ``Timeout waiting for RPC from GSP!``
#: (older drivers, also ``GSP0``/``GPU0 GSP``), ``Timeout after 6s of waiting for RPC response
#: from GPU4 GSP!``. Without an Xid line they mean what Xid 119 means.
GSP_TIMEOUT_RE = re.compile(
    r"Timeout (?:after \d+s of )?waiting for RPC (?:response )?from (?:GPU(?P<gpu>\d+) )?GSP"
)
#: The driver's other GSP timeout wordings, which name no GPU (open-gpu-kernel-modules
#: ``src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c``: "Back to back GSP RPC timeout detected! GPU
#: marked for reset", "_kgspRpcRecvPoll: GSP RM heartbeat timed out", "_kgspIsHeartbeatTimedOut:
#: Heartbeat timed out, ... timeout 5200", the "GSP Timeout" banner; ``rpc.c``
#: ``_issueRpcAndWait``: "rpcRecvPoll timedout for fn %d sequence %u!"). An Xid 154 (recovery
#: action changed) right after them is the driver's summary of that timeout.
GSP_TIMEOUT_WORDS_RE = re.compile(
    r"GSP RPC timeout|rpcRecvPoll timedout|GSP RM heartbeat timed out"
    r"|_kgspIsHeartbeatTimedOut: Heartbeat timed out|\*+ ?GSP Timeout ?\*+"
    r"|Timeout (?:after \d+s of )?waiting for RPC (?:response )?from (?:GPU\d+ )?GSP"
)
#: The banner ``kernel_gsp.c`` prints on a GSP RPC's first timeout, right before that
#: timeout's Xid 119 (``_kgspLogXid119``, ``_kgspLogRpcTimeout`` in newer drivers; their
#: "GPU%d " prefix names the GPU): "NVRM: GPU6 _kgspLogRpcTimeout: ****** GSP Timeout ******".
#: Without the Xid line (an excerpt cut after it) it means what Xid 119 means.
GSP_TIMEOUT_BANNER_RE = re.compile(r"(?:\bGPU(?P<gpu>\d+) )?_kgsp\w*: \*+ ?GSP Timeout ?\*+")
#: Follow-up lines of a GSP RPC failure (``GPU4 GSP RPC buffer contains function 103``,
#: ``GPU4 RPC history``): details of the Xid 119 before them, never an event.
GSP_DETAIL_RE = re.compile(r"\bGPU(?P<gpu>\d+) (?:GSP RPC buffer|RPC (?:event )?history)")


def recovery_action(detail: str) -> tuple[int, str, Action] | None:
    """The new recovery action an Xid 154 line names: ``(value, words, action)``, or ``None``."""
    m = RECOVERY_RE.search(detail)
    if m is None:
        return None
    value = int(m["new"], 0)
    words, action = RECOVERY_ACTIONS.get(value, (m["words"] or f"0x{value:x}", "unknown"))
    return value, m["words"] or words, action


__all__ = [
    "ACTION_RANK",
    "ACTION_TEXT",
    "CATALOG_REVISION",
    "CATALOG_ROWS",
    "CATALOG_URL",
    "CAUSED_BY_RE",
    "GSP_DETAIL_RE",
    "GSP_TIMEOUT_BANNER_RE",
    "GSP_TIMEOUT_RE",
    "GSP_TIMEOUT_WORDS_RE",
    "RECOVERY_ACTIONS",
    "RECOVERY_RE",
    "XID_CATALOG",
    "Action",
    "Role",
    "XidInfo",
    "agent_meanings",
    "recovery_action",
    "xid_info",
]
