"""Rules for CUDA errors a process raised.

Sources, by rule:

- CUDA Runtime API, "Error Handling" / ``cudaError_t``: the strings ``cudaGetErrorString``
  returns, which PyTorch prints as ``CUDA error: <string>`` (``c10/cuda/CUDAException.cpp``,
  ``C10_CUDA_CHECK``), older PyTorch as ``THCudaCheck FAIL file=... error=<n> : <string>`` or
  ``cuda runtime error (<n>) : <string>``: cudaErrorMemoryAllocation (2, "out of memory"),
  cudaErrorInsufficientDriver (35, "CUDA driver version is insufficient for CUDA runtime
  version"), cudaErrorNoDevice (100, "no CUDA-capable device is detected"),
  cudaErrorInvalidDevice (101, "invalid device ordinal"), cudaErrorInvalidDeviceFunction (98,
  "invalid device function"), cudaErrorNoKernelImageForDevice (209, "no kernel image is
  available for execution on the device"), cudaErrorECCUncorrectable (214, "uncorrectable ECC
  error encountered"), cudaErrorIllegalAddress (700, "an illegal memory access was
  encountered"), cudaErrorAssert (710, "device-side assert triggered"), cudaErrorSystemNotReady
  (802, "system not yet initialized": on NVSwitch systems, Fabric Manager not running),
  cudaErrorSystemDriverMismatch (803, "system has unsupported display driver / cuda driver
  combination"), cudaErrorCompatNotSupportedOnDevice (804, "forward compatibility was attempted
  on non supported HW"); the driver API names (``CUDA_ERROR_*``) of the same codes.
- PyTorch's caching allocator: ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate
  <size>. GPU <n> has a total capacity of ...`` (2.x) / ``... (GPU <n>; <size> total capacity``
  (1.x) (``c10/cuda/CUDACachingAllocator.cpp``).
- ``torch/cuda/__init__.py``: ``_check_driver`` ("The NVIDIA driver on your system is too old
  (found version <n>)", "Found no NVIDIA driver on your system"), ``_check_capability`` ("...
  with CUDA capability sm_<n> is not compatible with the current PyTorch installation"),
  ``_lazy_init`` ("No CUDA GPUs are available", "CUDA driver initialization failed").
- A device-side ``assert`` in a kernel prints ``<file>.cu:<line>: <kernel>: block: [x,y,z],
  thread: [x,y,z] Assertion `<condition>` failed.`` (CUDA C Programming Guide, "Assertion";
  the closing backtick tells it from glibc's host-side ``Assertion `cond' failed.``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from console.diagnosis.common import (
    NCCL_INFO,
    PG_ID,
    PG_NAME,
    PG_RANK,
    TERMINATE,
    join_ranks,
    own_words,
    rank_of,
    unwrapped,
)
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Consequence, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES", "SIGNATURES"]

# Lines NCCL prints about a CUDA call of its own ("Cuda failure 'out of memory'") are the NCCL
# rules' (nccl_cuda_oom, nccl_unhandled_cuda), never these.
_NCCL_OWN = re.compile(r"Cuda failure|NCCL (?:WARN|INFO)|ncclUnhandledCudaError")

#: (cause id, pattern) for the CUDA errors that have an id of their own, most specific first.
SIGNATURES: tuple[tuple[CauseKind, re.Pattern[str]], ...] = (
    (
        "fabric_manager",
        re.compile(
            r"system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY"
        ),
    ),
    (
        "driver_version_mismatch",
        re.compile(
            r"system has unsupported display driver / cuda driver combination"
            r"|cudaErrorSystemDriverMismatch|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
        ),
    ),
    (
        "driver_too_old",
        re.compile(
            r"CUDA driver version is insufficient for CUDA runtime version"
            r"|NVIDIA driver on your system is too old|cudaErrorInsufficientDriver"
            r"|forward compatibility was attempted on non supported HW"
            # cudaErrorUnsupportedPtxVersion (222): "the provided PTX was compiled with an
            # unsupported toolchain", most often PTX from a compiler newer than the driver's JIT
            r"|the provided PTX was compiled with an unsupported toolchain"
            r"|cudaErrorUnsupportedPtxVersion|CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
            r"|cudaErrorCompatNotSupportedOnDevice|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            re.I,
        ),
    ),
    (
        "cuda_no_device",
        re.compile(
            r"no CUDA-capable device is detected|No CUDA GPUs are available"
            r"|CUDA driver initialization failed|Found no NVIDIA driver on your system"
            r"|cudaErrorNoDevice\b|CUDA_ERROR_NO_DEVICE"
            # c10/cuda/CUDAFunctions.cpp device_count_impl (warned as "CUDA initialization: ...",
            # raised by torch.cuda._lazy_init): cudaErrorUnknown, and any other error of
            # cudaGetDeviceCount() (whose own string, e.g. 802/803, an earlier signature names)
            r"|CUDA unknown error - this may be due to an incorrectly set up environment"
            r"|Unexpected error from cudaGetDeviceCount\(\)"
            r"|Setting the available devices to be zero"
        ),
    ),
    (
        "cuda_invalid_device",
        re.compile(r"invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE\b"),
    ),
    (
        "cuda_unsupported_arch",
        re.compile(
            r"no kernel image is available for execution on the device"
            r"|cudaErrorNoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU"
            r"|with CUDA capability (?P<arch>sm_\d+) is not compatible with the current PyTorch"
            r"|CUDA error: invalid device function"
        ),
    ),
    (
        "cuda_ecc",
        re.compile(
            r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable"
            r"|CUDA_ERROR_ECC_UNCORRECTABLE"
        ),
    ),
    (
        "cuda_illegal_memory_access",
        re.compile(
            r"an illegal memory access was encountered|cudaErrorIllegalAddress"
            r"|CUDA_ERROR_ILLEGAL_ADDRESS"
        ),
    ),
    (
        "cuda_device_assert",
        re.compile(
            r"device-side assert(?:ion)? triggered|cudaErrorAssert\b|CUDA_ERROR_ASSERT\b"
            r"|Assertion `(?P<cond>[^`']+)` failed"
        ),
    ),
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA [Ee]rror: out of memory"
            r"|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"
            # torch <= 0.4: "cuda runtime error (2) : out of memory", "THCudaCheck FAIL ...
            # error=2 : out of memory" (cudaErrorMemoryAllocation is 2)
            r"|(?:cuda runtime error \(2\)|\berror=2) : out of memory"
            # cuBLAS / cuDNN status codes for an allocation they could not make ("usually caused
            # by a cudaMalloc() failure": cuBLAS and cuDNN API references)
            r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
            # the caching allocator's message pasted without its head (the head was the
            # issue's title): torch 1.x "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total
            # capacity; ...", torch 2.x "Tried to allocate 2.00 GiB. GPU 0 has a total capacity"
            r"|Tried to allocate [\d.]+ [KMGT]?i?B(?: \(GPU \d+; [\d.]+ [KMGT]?i?B total "
            r"capacity|\. GPU \d+ has a total capacity)"
        ),
    ),
)

# Any other CUDA error string, in PyTorch's wordings of several versions.
_CUDA_ERROR = re.compile(
    # torch's "CUDA error: <string>", and kernel libraries' "CUDA Error: <string> (<code>)" (a
    # parenthesis inside the string stays: "CUDA-capable device(s) is/are busy or unavailable")
    r"CUDA (?:driver )?[Ee]rror: (?P<msg>(?:[^.(\n]|\((?!\d+\)))+)"
    r"|cuda runtime error \((?P<code>\d+)\) : (?P<msg2>[^\n]+?)(?: at \S+)?$"
    r"|THCudaCheck FAIL file=\S+ line=\d+ error=(?P<code3>\d+) : (?P<msg3>.+)$"
    r"|cuDNN error: (?P<msg4>CUDNN_STATUS_\w+)"
    # CUB's CubDebug (cub/util_debug.cuh): "CUDA error 716 [<file>, 351]: misaligned address"
    r"|CUDA error (?P<code5>\d+) \[[^\]]*\]: (?P<msg5>[^\n]+?)\s*$"
    # the runtime's enum name, alone or before its string (thrust's system_error: "after
    # reduction step 1: cudaErrorMisalignedAddress: misaligned address"; cuda-python's
    # CUDAError: "cudaErrorMisalignedAddress:")
    # (not the codes that report a state: cudaErrorNotReady is a query's "not yet")
    r"|\b(?P<enum>cudaError(?!NotReady\b|PeerAccessAlreadyEnabled\b"
    r"|HostMemoryAlreadyRegistered\b)[A-Z]\w*)\b(?::[ \t]*(?P<msg6>[^\n:]*[^\s:])?)?"
    # a cuBLAS status on its own (Caffe's glog "Check failed: status == CUBLAS_STATUS_SUCCESS
    # (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED"; cublas_api.h's cublasStatus_t)
    r"|\b(?P<msg7>CUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|NOT_INITIALIZED|ARCH_MISMATCH"
    r"|INVALID_VALUE|MAPPING_ERROR|NOT_SUPPORTED))\b"
)
#: ``cudaGetErrorString`` of the runtime errors a kernel or a library call reports most
#: (CUDA Runtime API, ``cudaError``), for a text that names only the enum.
_CUDA_ENUM_STRING = {
    "cudaErrorMisalignedAddress": "misaligned address",
    "cudaErrorLaunchFailure": "unspecified launch failure",
    "cudaErrorIllegalInstruction": "an illegal instruction was encountered",
    "cudaErrorInvalidAddressSpace": "operation not supported on global/shared address space",
    "cudaErrorInvalidPc": "invalid program counter",
    "cudaErrorHardwareStackError": "hardware stack error",
    "cudaErrorLaunchTimeout": "the launch timed out and was terminated",
    "cudaErrorLaunchOutOfResources": "too many resources requested for launch",
    "cudaErrorInvalidValue": "invalid argument",
    "cudaErrorInvalidConfiguration": "invalid configuration argument",
    "cudaErrorInvalidResourceHandle": "invalid resource handle",
    "cudaErrorNotPermitted": "operation not permitted",
    "cudaErrorNotSupported": "operation not supported",
    "cudaErrorUnknown": "unknown error",
}

_WHAT = {
    "cuda_oom": "ran out of GPU memory",
    "cuda_illegal_memory_access": "hit a CUDA illegal memory access",
    "cuda_device_assert": "hit a device-side assert in a CUDA kernel",
    "cuda_ecc": "hit an uncorrectable ECC error on its GPU",
    "cuda_no_device": "found no usable GPU",
    "cuda_invalid_device": "asked for a GPU that does not exist (invalid device ordinal)",
    "cuda_unsupported_arch": "has no CUDA kernels for this GPU's architecture",
    "driver_too_old": "needs a newer NVIDIA driver than the host has",
    "fabric_manager": "could not initialise CUDA: error 802 'system not yet initialized'",
    "driver_version_mismatch": "found a CUDA driver library that does not match the kernel module",
    "cuda_error": "hit a CUDA error",
}

_MEANING = {
    "cuda_illegal_memory_access": "a kernel bug or a faulty GPU; failures of other ranks after "
    "it are consequences",
    "cuda_device_assert": "an index out of range in a kernel (e.g. a token id >= the "
    "embedding size, a label >= the number of classes)",
    "cuda_ecc": "a GPU memory hardware fault, not a code bug",
    "cuda_no_device": "CUDA_VISIBLE_DEVICES names no existing GPU, the container got no GPU, "
    "or the driver is not loaded",
    "cuda_invalid_device": "more local ranks (or a higher device index) than visible GPUs",
    "cuda_unsupported_arch": "the PyTorch build was compiled without this GPU's compute capability",
    "driver_too_old": "the host driver supports an older CUDA than the one the program was built "
    "with (PyTorch's CUDA, or the toolkit that compiled its PTX)",
    "fabric_manager": "on an NVSwitch host (HGX/DGX) this means nvidia-fabricmanager is not "
    "running, not finished, or not the driver's exact version",
    "driver_version_mismatch": "the user-space driver (libcuda) and the loaded kernel module "
    "come from different driver versions",
}

_FIX = {
    "cuda_oom": "Lower the batch size or sequence length, or use activation checkpointing / mixed "
    "precision; check no other process holds memory on that GPU "
    "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation)",
    "cuda_illegal_memory_access": "Check the kernel log (dmesg) of {on}'s host for Xid 13/31/43 "
    "on its GPU; rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel that faults",
    "cuda_device_assert": "Rerun with CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA) to find the "
    "op; check the index ranges it uses (vocabulary/embedding size, number of classes)",
    "cuda_ecc": "Drain the node; check `nvidia-smi -q -d ECC` and dmesg for Xid 48/63/94, then "
    "reset or replace the GPU",
    "cuda_no_device": "Check CUDA_VISIBLE_DEVICES and that the container was started with its "
    "GPUs (--gpus / the device request); `nvidia-smi` inside it must list them",
    "cuda_invalid_device": "Start no more processes per node than visible GPUs "
    "(--nproc-per-node <= torch.cuda.device_count()); check CUDA_VISIBLE_DEVICES and gpu ids",
    "cuda_unsupported_arch": "Install a PyTorch build whose CUDA version supports this GPU "
    "(torch.cuda.get_arch_list() must include its sm_XX)",
    "driver_too_old": "Update the host's NVIDIA driver, or use a PyTorch / image built for the "
    "CUDA version the driver supports",
    "fabric_manager": "On the host: start nvidia-fabricmanager with exactly the driver's version "
    "and wait until `nvidia-smi -q` shows the fabric state Completed, then rerun",
    "driver_version_mismatch": "Reboot the host (or reload the nvidia kernel modules) after the "
    "driver upgrade so the module and libraries match",
    "cuda_error": "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel; check dmesg for "
    "Xid errors",
}

# cudaErrorUnknown from cudaGetDeviceCount while nvidia-smi may still work (CUDA's release notes
# and NVIDIA's container toolkit troubleshooting: a wedged driver/UVM state or device nodes the
# process cannot open).
_UNKNOWN_INIT = (
    "CUDA could not initialise (cudaErrorUnknown), so PyTorch set the device count to 0: "
    "the nvidia_uvm module or the /dev/nvidia* device nodes are missing or not accessible "
    "(in a container: it lost its devices), or the driver is in a bad state"
)
#: What PyTorch prints after a CUDA error string (c10/cuda/CUDAException.cpp).
_ADVICE = re.compile(
    r"\s+(?:Compile with `?TORCH_USE_CUDA_DSA|CUDA kernel errors might|For debugging consider"
    r"|Search for `cudaError)"
)
#: cudaErrorDevicesUnavailable (46, "CUDA-capable device(s) is/are busy or unavailable": CUDA
#: Runtime API): the device is in Exclusive Process compute mode and another process has it, or
#: it cannot take a context at all.
_DEVICES_UNAVAILABLE = (
    "the GPU would not take a context: another process holds it in Exclusive Process compute "
    "mode (`nvidia-smi -q -d COMPUTE`), or the GPU is in a bad state"
)
#: The driver asking for a GPU reset (an RM status in an NVRM assertion line).
_RESET_REQUIRED = re.compile(r"NV_ERR_RESET_REQUIRED|\bReset required\b")
_TORCH_OOM = re.compile(
    r"(?:CUDA out of memory\. |^\W*)Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)"
    r"(?:.*?GPU (?P<gpu>\d+))?",
)
_DRIVER_FOUND = re.compile(r"too old \(found version (?P<v>\d+)\)")
_SUPPORTED_ARCHS = re.compile(r"supports CUDA capabilities (?P<archs>(?:sm_\d+\s*)+)")
# The process aborting on the error: faulthandler's report or the shell's.
_ABORT = re.compile(r"Fatal Python error: Aborted|Aborted \(core dumped\)")
# Supporting lines for error 802: the reporter's or the tool's words about the fabric manager.
_FABRIC_WORDS = re.compile(r"fabric ?manager|nv-fabricmanager|NVSwitch", re.I)


def _rank(ctx: Context, hits: Sequence[Line]) -> int | None:
    """The global rank the error belongs to: a rank prefix or ``[Rank N]`` on one of its lines,
    else the root cause of torchelastic's summary."""
    for ln in hits:
        if (rank := rank_of(ln)) is not None:
            return rank
    if ctx.failure and ctx.failure.root_cause:
        return ctx.failure.root_cause.rank
    return None


def _message(kind: CauseKind, hit: Line) -> str:
    """The error string the line carries (``CUDA error: <this>`` or the signature matched)."""
    if (m := _CUDA_ERROR.search(hit.text)) is not None:
        msg = (
            m["msg"]
            or m["msg2"]
            or m["msg3"]
            or m["msg4"]
            or m["msg5"]
            or m["msg6"]
            or m["msg7"]
            or _CUDA_ENUM_STRING.get(m["enum"] or "", m["enum"] or "")
        )
        # PyTorch's advice after the string, on the same line when a paste lost the breaks
        msg = _ADVICE.split(msg, 1)[0]
        msg = msg.strip().strip("*_`").strip()  # a reporter's Markdown emphasis around it
        if msg:
            return msg
    sig = dict(SIGNATURES).get(kind)
    if sig is not None and (m := sig.search(hit.text)) is not None:
        return m.group(0)
    return hit.text.strip()


def _ooms_by_rank(lines: Sequence[Line], hits: Sequence[Line]) -> dict[int, tuple[int | None, str]]:
    """PyTorch's OOM message per rank prefix: ``{rank: (gpu, size tried)}``, the first of
    each rank. Ranks' output interleaved mid-token is split by the normaliser into lines of
    each rank; a message cut after "GPU" continues on that rank's next line ("1 has a total
    capacity of ...")."""
    out: dict[int, tuple[int | None, str]] = {}
    for ln in hits:
        if (r := rank_of(ln)) is None or r in out or not (m := _TORCH_OOM.search(ln.text)):
            continue
        gpu = int(m["gpu"]) if m["gpu"] else None
        if gpu is None and ln.text.rstrip().endswith("GPU"):
            rest = next(
                (
                    c
                    for x in lines[ln.index + 1 : ln.index + 12]
                    if rank_of(x) == r and (c := _GPU_CONTINUED.match(x.text))
                ),
                None,
            )
            gpu = int(rest[1]) if rest else None
        out[r] = (gpu, m["size"])
    return out


#: The rest of PyTorch's OOM message on the rank's next line, when its GPU number was cut off.
_GPU_CONTINUED = re.compile(r"\s*(\d+) has a total capac")


def _diagnosis(ctx: Context, kind: CauseKind, hits: list[Line]) -> Diagnosis:
    hit = hits[0]
    error = _message(kind, hit)
    rank = _rank(ctx, hits)
    pg = pg_name = None
    for ln in hits:
        if m := PG_RANK.search(ln.text):
            if p := PG_ID.search(m["inside"]):
                pg = int(p["pg"])
            if n := PG_NAME.search(m["inside"]):
                pg_name = n["name"]
            break
    thrown = next((m["type"] for ln in ctx.lines if (m := TERMINATE.search(ln.text))), None)
    on = f"rank {rank}" if rank is not None else "a rank" if ctx.failure else "the process"
    where = ""
    if pg is not None:
        where = f" (process group {pg}, {pg_name})" if pg_name else f" (process group {pg})"
    watchdog = any("watchdog" in ln.text.lower() for ln in hits)
    by = "the NCCL watchdog hit " if watchdog else ""
    end = "; the process aborts (SIGABRT)" if thrown or watchdog else ""
    facts: dict[str, FactValue | None] = {
        "rank": rank,
        "error": error,
        "cuda_error": error,
        "process_group": pg,
        "pg_name": pg_name,
        "exception_type": thrown,
    }
    meaning = _MEANING.get(kind)
    evidence = [ln.raw for ln in ctx.lines if TERMINATE.search(ln.text)] + [
        ln.raw for ln in hits[:3]
    ]
    ooms = _ooms_by_rank(ctx.lines, hits) if kind == "cuda_oom" else {}
    if len(ooms) > 1:
        # several ranks hit the same fault: each of them, with its GPU, not the first one
        ranks_hit = tuple(sorted(ooms))
        each = "; ".join(
            f"rank {r}" + (f" on GPU {g}" if g is not None else "") + f": tried {size}"
            for r in ranks_hit
            for g, size in [ooms[r]]
        )
        summary = (
            f"ranks {join_ranks(ranks_hit)}{where} ran out of GPU memory ({each}): "
            "each of them failed the same way, not only the first"
        )
        gpus = tuple(g for r in ranks_hit if (g := ooms[r][0]) is not None)
        facts.update(
            {"rank": None, "ranks": ranks_hit, "gpus": gpus or None, "size": ooms[ranks_hit[0]][1]}
        )
        evidence = [ln.raw for ln in ctx.lines if TERMINATE.search(ln.text)] + [
            next(ln.raw for ln in hits if rank_of(ln) == r and _TORCH_OOM.search(ln.text))
            for r in ranks_hit
        ][:8]
    elif (
        kind == "cuda_oom"
        and (m := next((m for ln in hits if (m := _TORCH_OOM.search(ln.text))), None)) is not None
    ):
        gpu = int(m["gpu"]) if m["gpu"] else None
        on_gpu = f" on GPU {gpu}" if gpu is not None else ""
        summary = f"{on}{where} ran out of GPU memory{on_gpu}: tried to allocate {m['size']}"
        facts.update({"gpu": gpu, "size": m["size"]})
    else:
        summary = f"{on[0].upper()}{on[1:]}{where} {_WHAT[kind]}: {by}'{error}'{end}"
        if kind == "cuda_no_device" and "unknown error" in error.lower():
            meaning = _UNKNOWN_INIT
        if kind == "cuda_error" and "busy or unavailable" in error:
            meaning = _DEVICES_UNAVAILABLE
        if meaning:
            summary += f". {meaning[0].upper()}{meaning[1:]}"
    fix = _FIX[kind].format(on=on)
    reset = next((ln for ln in ctx.lines if _RESET_REQUIRED.search(ln.text)), None)
    if reset is not None:
        # the driver's own word on this GPU: the fault is the GPU's state, not a kernel's
        summary += "; the kernel driver says the GPU needs a reset (NV_ERR_RESET_REQUIRED)"
        fix = (
            "Reset the GPU once it is idle (`nvidia-smi -r -i <index>`) or reboot the node, "
            "then run again; if it recurs, drain the GPU and run `dcgmi diag -r 3`"
        )
        evidence.append(reset.raw)
        facts["reset_required"] = 1
    if (
        kind == "driver_too_old"
        and (m := next((m for ln in hits if (m := _DRIVER_FOUND.search(ln.text))), None))
        is not None
    ):
        found = int(m["v"])
        facts["driver_cuda"] = f"{found // 1000}.{found % 1000 // 10}"
        summary += f" (the driver supports CUDA {facts['driver_cuda']})"
    if kind == "driver_too_old" and (
        h := next((h for ln in ctx.lines if (h := _SMI_DRIVER.search(ln.text))), None)
    ):
        # nvidia-smi's header in the same text: the host's driver (older drivers print no
        # CUDA Version beside it)
        facts["driver_version"] = h["driver"]
        summary += f"; the host's driver is {h['driver']}"
    if kind == "cuda_unsupported_arch" and not dict(SIGNATURES)[kind].search(hit.text):
        gap = _arch_gap(ctx.lines)
        if gap is not None:
            model, arch, cuda = gap
            facts.update({"gpu_model": model, "arch": arch, "build_cuda": cuda})
            summary = (
                f"{on[0].upper()}{on[1:]}{where} hit '{error}' on an {model} ({arch}) with a "
                f"build for CUDA {cuda}, which cannot target {arch}: its kernels do not run on "
                "this GPU"
            )
            named = [
                ln.raw
                for ln in ctx.lines
                if any(p.search(ln.text) for p, a, _ in _NEW_ARCHS if a == arch)
                or any(m["a"] or m["c"] or m["e"] for m in _BUILD_CUDA.finditer(ln.text))
            ]
            evidence += named[:2]
    if kind == "cuda_unsupported_arch":
        for ln in ctx.lines:
            sig = dict(SIGNATURES)["cuda_unsupported_arch"].search(ln.text)
            if sig and sig["arch"]:
                facts["arch"] = sig["arch"]
                evidence.append(ln.raw)
            if m := _SUPPORTED_ARCHS.search(ln.text):
                facts["supported_archs"] = m["archs"].strip()
                evidence.append(ln.raw)
    if kind == "cuda_device_assert":
        cond = next(
            (
                m["cond"]
                for ln in ctx.lines
                if (m := dict(SIGNATURES)[kind].search(ln.text)) and m["cond"]
            ),
            None,
        )
        facts["assertion"] = cond
        if cond:
            summary += f" (Assertion `{cond}` failed)"
            evidence += [next(ln.raw for ln in ctx.lines if f"`{cond}` failed" in ln.text)]
    if kind == "fabric_manager":
        evidence += [ln.raw for ln in ctx.lines if _FABRIC_WORDS.search(ln.text)][:3]
    d = _diag(
        kind,
        summary,
        tuple(sorted(ooms)) if len(ooms) > 1 else (rank,) if rank is not None else (),
        fix,
        evidence,
        facts,
        ctx.failure,
    )
    aborted = next((ln for ln in ctx.lines if _ABORT.search(ln.text)), None)
    if aborted is not None:
        d = replace(
            d,
            consequences=(
                Consequence(
                    "sigabrt",
                    f"{on[0].upper()}{on[1:]} aborted (SIGABRT) on this error",
                    (aborted.raw,),
                ),
            ),
        )
    return d


#: nvidia-smi's header: ``| NVIDIA-SMI 367.57   Driver Version: 367.57   |`` (from R410 also
#: ``CUDA Version: 10.0`` after it).
_SMI_DRIVER = re.compile(r"NVIDIA-SMI \d[\d.]*\s+Driver Version:\s*(?P<driver>\d+\.\d+(?:\.\d+)?)")


# ``torch.cuda.is_available()`` printed False: a shell one-liner and its output line.
_IS_AVAILABLE = re.compile(r"cuda\.is_available\(\)")
_FALSE = re.compile(r"^\s*(?:>>>\s*)?False\s*$")


def _not_available(ctx: Context) -> Diagnosis | None:
    """``torch.cuda.is_available()`` answered False and no CUDA error says why: PyTorch sees no
    GPU (``torch/cuda/__init__.py``: it returns False when the device count is 0 or the build
    has no CUDA)."""
    if any(
        sig.search(text)
        for ln in ctx.lines
        for text in (ln.text, *unwrapped(ctx.lines, ln.index))
        for _, sig in SIGNATURES
    ):
        return None  # a CUDA error says why: that finding (:func:`_cuda`)
    for ln in ctx.lines:
        if not _IS_AVAILABLE.search(ln.text):
            continue
        answer = next(
            (x for x in ctx.lines[ln.index + 1 : ln.index + 6] if _FALSE.match(x.text)), None
        )
        if answer is not None:
            return _diag(
                "cuda_no_device",
                "torch.cuda.is_available() returned False: PyTorch sees no usable GPU. "
                f"{_MEANING['cuda_no_device'][0].upper()}{_MEANING['cuda_no_device'][1:]}, or "
                "a CPU-only PyTorch build (torch.version.cuda is None)",
                (),
                _FIX["cuda_no_device"],
                [ln.raw, answer.raw],
                {"error": "torch.cuda.is_available() is False"},
                ctx.failure,
            )
    return None


#: GPU models by the first CUDA toolkit that can build for their compute capability (NVIDIA's
#: CUDA GPUs table and the toolkit release notes: sm_80 from CUDA 11.0, sm_86 11.1, sm_89 and
#: sm_90 11.8, sm_100 and sm_120 12.8), as reports name them.
_NEW_ARCHS: tuple[tuple[re.Pattern[str], str, tuple[int, int]], ...] = (
    (re.compile(r"\b(?:A100|A800|A30)\b"), "sm_80", (11, 0)),
    (
        re.compile(r"\bRTX ?30[5-9]0(?: ?Ti)?\b|\bRTX ?A[2-6]000\b|\b(?:A10|A16|A40)\b", re.I),
        "sm_86",
        (11, 1),
    ),
    (re.compile(r"\bRTX ?40[6-9]0(?: ?Ti)?\b|\bL40S?\b|\bRTX 6000 Ada\b", re.I), "sm_89", (11, 8)),
    (re.compile(r"\b(?:H100|H200|H800|GH200)\b"), "sm_90", (11, 8)),
    (re.compile(r"\b(?:B100|B200|GB200)\b"), "sm_100", (12, 8)),
    (re.compile(r"\bRTX ?50[6-9]0(?: ?Ti)?\b", re.I), "sm_120", (12, 8)),
)
#: The CUDA version a PyTorch build or its toolkit is for (not the driver's: nvidia-smi's
#: ``CUDA Version:`` beside ``Driver Version:`` is what the driver supports): conda's
#: ``cudatoolkit 10.0``, collect_env's ``CUDA used to build PyTorch: 10.2``, a wheel's
#: ``+cu102``, and "CUDA 10.0" in words.
_BUILD_CUDA = re.compile(
    r"cudatoolkit[ =:-]*(?P<a>\d+)\.(?P<b>\d)"
    r"|CUDA used to build PyTorch: (?P<c>\d+)\.(?P<d>\d)"
    r"|\+cu(?P<e>\d{2,3})\b"
    r"|\bCUDA(?: toolkit| [Vv]ersion)?[ :]*(?P<f>\d+)\.(?P<g>\d)\b",
)


def _arch_gap(lines: Sequence[Line]) -> tuple[str, str, str] | None:
    """``(GPU model, its compute capability, the build's CUDA version)`` when the text names
    one GPU model newer than every CUDA version it names for the build: a PyTorch (or
    extension) built with a toolkit that cannot target that GPU, whose kernels then fail with
    a generic error (``CUBLAS_STATUS_EXECUTION_FAILED``...) instead of "no kernel image"."""
    models: dict[str, tuple[str, tuple[int, int]]] = {}
    versions: list[tuple[int, int]] = []
    for ln in lines:
        for pattern, arch, first in _NEW_ARCHS:
            if m := pattern.search(ln.text):
                models.setdefault(arch, (m.group(0), first))
        if "Driver Version" in ln.text or "NVIDIA-SMI" in ln.text:
            continue
        for m in _BUILD_CUDA.finditer(ln.text):
            if m["e"]:
                tag = m["e"]
                versions.append((int(tag[:-1]), int(tag[-1])))
            else:
                major, minor = (
                    (m["a"], m["b"])
                    if m["a"]
                    else (m["c"], m["d"])
                    if m["c"]
                    else (
                        m["f"],
                        m["g"],
                    )
                )
                versions.append((int(major), int(minor)))
    if len(models) != 1 or not versions:
        return None
    ((arch, (model, first)),) = models.items()
    if max(versions) >= first:
        return None
    newest = max(versions)
    return model, arch, f"{newest[0]}.{newest[1]}"


def _cut_mid_word(lines: Sequence[Line], ln: Line) -> tuple[CauseKind, Line] | None:
    """A signature the line break cut inside a word (a paste or a tool that breaks lines at a
    fixed length: "...CUDA error: an illeg" / "al memory access was encountered ..."): the
    line and the next joined without a separator, when a signature spans the join."""
    if ln.index + 1 >= len(lines) or not ln.text[-1:].isalpha():
        return None
    nxt = lines[ln.index + 1]
    rest = nxt.text
    head, sep, _ = ln.text.partition(": ")
    if sep and " " not in head and rest.startswith(head + sep):
        rest = rest[len(head) + len(sep) :]  # a collector's source tag on both lines (pdsh)
    if not rest[:1].isalpha() or not rest[:1].islower():
        return None
    cut = len(ln.text)
    text = ln.text + rest
    for kind, sig in SIGNATURES:
        m = sig.search(text, max(0, cut - 120), cut + 120)
        if m is not None and m.start() < cut < m.end():
            return kind, replace(ln, text=text, raw=ln.raw + nxt.raw)
    return None


def _cuda(ctx: Context) -> list[Diagnosis]:
    """One diagnosis per CUDA error kind the text shows (the engine ranks them: an ECC error
    explains the illegal address that follows it...)."""
    by_kind: dict[CauseKind, list[Line]] = {}
    for ln in ctx.lines:
        if _NCCL_OWN.search(ln.text):
            continue
        kind = next((k for k, sig in SIGNATURES if sig.search(ln.text)), None)
        if kind is None and _CUDA_ERROR.search(ln.text):
            kind = "cuda_error"
        if kind is None:  # a message split by a terminal's fixed-width wrap
            for text in unwrapped(ctx.lines, ln.index):
                if (
                    kind := next((k for k, sig in SIGNATURES if sig.search(text)), None)
                ) is not None:
                    ln = replace(ln, text=text)
                    break
        if kind in (None, "cuda_error") and (joined := _cut_mid_word(ctx.lines, ln)) is not None:
            kind, ln = joined  # a specific error, cut by the line break
        if kind is not None:
            by_kind.setdefault(kind, []).append(ln)
    if "cuda_error" in by_kind and "cuda_unsupported_arch" not in by_kind and _arch_gap(ctx.lines):
        # a generic kernel failure on a GPU the build's CUDA cannot target: that is why
        by_kind["cuda_unsupported_arch"] = by_kind.pop("cuda_error")
    return [_diagnosis(ctx, kind, hits) for kind, hits in by_kind.items()]


#: The rules of this module (the engine ranks what they find).
RULES = (_cuda, _not_available)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: every line it reads holds ``cuda``, ``error``, ``nvidia``, ``kernel``, ``assert``,
#: ``invalid``... besides PyTorch's chatter words (``device``, ``torch``, ``warning``); only
#: "Setting the available devices to be zero" needs its own. NCCL's INFO lines are NCCL's
#: (``_NCCL_OWN``).
NEEDS = {
    rule: Needs(own_words(added=("available devices",)), alone=True, unless=(NCCL_INFO,))
    for rule in RULES
}
