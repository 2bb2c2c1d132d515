"""Issue 26's kinds, each checked on a real variant beside its corpus cases
(tests/data/diagnose/corpus/*/expected.yaml, ids named per test) and on a near miss."""

from __future__ import annotations

from pathlib import Path

from console.diagnosis import diagnose


def test_slurmstepd_execve_failure_is_the_root_and_its_errno_the_exit_code() -> None:
    """slm-013/slm-014; a variant from firelab/windninja#624 (a command not on the node)."""
    text = (
        "slurmstepd: error: execve(): mkdir: No such file or directory\n"
        "slurmstepd: error: execve(): mkdir: No such file or directory\n"
        "srun: error: gpu-node-07: tasks 15-19: Exited with exit code 2\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "slurm_exec_failed"
    assert (d.facts["path"], d.facts["reason"]) == ("mkdir", "No such file or directory")
    assert [c.kind for c in d.consequences] == ["exit_code"]
    # near miss: a program's own execve error, not slurmstepd's
    d2 = diagnose("error: execve(): /usr/bin/foo: No such file or directory\n")
    assert d2 is None or d2.kind != "slurm_exec_failed"


def test_older_unknown_runtime_wording_in_markdown_quoting() -> None:
    """dkr-048/dkr-049; rinongal/StyleGAN-nada#62 (docker-compose v1 output quoted with '> ')."""
    text = (
        "> Creating stylegan-nada_nada_1 ... error\n>\n"
        "> ERROR: for stylegan-nada_nada_1  Cannot create container for service nada: "
        "Unknown runtime specified nvidia\n"
        "> ERROR: Encountered errors while bringing up the project.\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "docker_unknown_runtime"
    assert d.facts["runtime"] == "nvidia"


def test_a_cdi_name_stat_as_a_path_is_an_engine_without_cdi() -> None:
    """dkr-050/dkr-051; NVIDIA/nvidia-container-toolkit#63 (podman 3.0.1, inline code)."""
    d = diagnose(
        "`sudo podman run -ti --rm --device=nvidia.com/gpu=0 ubuntu:18.04 nvidia-smi -L`"
        " says:\n`Error: stat nvidia.com/gpu=0: no such file or directory`\n"
        "My Podman version is 3.0.1.\n"
    )
    assert d is not None and d.kind == "toolkit_hook_failed"
    assert d.facts["device"] == "nvidia.com/gpu=0" and "podman" in d.fix
    # near miss: a real device node missing (k8sp/sextant#397) is no CDI name
    d2 = diagnose(
        'error gathering device information while adding custom device "/dev/nvidia0":'
        " lstat /dev/nvidia0: no such file or directory\n"
    )
    assert d2 is None or "CDI device name" not in d2.summary


def test_the_requirement_names_the_drivers_cuda_only_when_the_text_shows_it() -> None:
    """dkr-052/dkr-053; pytorch/test-infra#6465 (no nvidia-smi header: no numbers invented)."""
    text = (
        "docker: Error response from daemon: failed to create task for container: ... "
        "error running prestart hook #0: exit status 1, stdout: , \n\n"
        "stderr: Auto-detected mode as 'legacy'\n"
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, \n"
        "please update your driver to a newer version, or use an earlier cuda container: "
        "unknown.\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "driver_too_old" and d.facts["cuda"] == "12.6"
    assert "driver_cuda" not in d.facts and "supports an older CUDA" in d.summary


def test_early_nccl_warn_lines_without_the_nccl_token() -> None:
    """nccl-037/nccl-038; the libibverbs WARN of the same era alone is no failure."""
    d = diagnose(
        "e66aa18dc444:3171:3171 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]\n"
    )
    assert d is None
    d2 = diagnose(
        "gpu-node-01:3171:3171 [0] include/socket.h:403 WARN Connect to "
        "192.0.2.7<54321> failed : Connection timed out\n"
    )
    assert d2 is not None and d2.kind == "nccl_system_error"
    # a log line with WARN but no NCCL source position is not NCCL's
    assert diagnose("[0] WARN Connection refused by the metrics server\n") is None


def test_nvml_blocked_by_the_host_in_wsl() -> None:
    """gpu-047/gpu-048; staralt/dxgkrnl-dkms#7 (WSL's own nvidia-smi path)."""
    d = diagnose(
        "$ /usr/lib/wsl/lib/nvidia-smi\n"
        "Failed to initialize NVML: GPU access blocked by the operating system\n"
        "Failed to properly shut down NVML: GPU access blocked by the operating "
        "system\n"
    )
    assert d is not None and d.kind == "nvml_blocked_by_host" and d.facts["wsl"] == "yes"


def test_nvml_permission_names_the_reading_and_tolerates_a_misspelling() -> None:
    """gpu-051/gpu-052; NVIDIA/k8s-device-plugin#399 (the reporter's 'Pemmissions')."""
    d = diagnose(
        "On the node with mig enabled, nvidia-device-plugin reports an error when it "
        "starts\nerror starting plugins: unable to add default resources to config: "
        "error visiting devices: error visiting device: error visiting device: error "
        "getting device memory info: Insufficient Pemmissions\n"
    )
    assert d is not None and d.kind == "nvml_permission"
    assert d.facts["reading"] == "device memory info" and d.facts["mig"] == "yes"
    assert "GPU is fine" in d.summary


def test_an_xid_154_alone_stays_the_xid() -> None:
    """gpu-050's near miss: without a GSP timeout before it, the 154 is what the text says."""
    d = diagnose(
        "NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x1 (GPU Reset Required)\n"
    )
    assert d is not None and d.kind == "xid" and d.facts["xid"] == 154


def test_an_unauthorized_pull_names_the_repository_before_the_login() -> None:
    """dkr-054..dkr-056; SideStore/omnisette-server#3 (GHCR, a package not public)."""
    d = diagnose(
        "When pulling the ghcr.io/sidestore/omnisette-server:latest image. I get the "
        'following error:\nError response from daemon: Head "https://ghcr.io/v2/'
        'sidestore/omnisette-server/manifests/latest": unauthorized\n'
    )
    assert d is not None and d.kind == "registry_auth" and d.facts["refusal"] == "anonymous"
    assert d.fix.index("repository name") < d.fix.index("docker login ghcr.io")
    # near miss (dkr-057): a rejected login keeps the login fix, for Docker Hub without a host
    d2 = diagnose(
        "Error response from daemon: Get https://registry-1.docker.io/v2/minio/minio/"
        "manifests/latest: unauthorized: incorrect username or password\n"
    )
    assert d2 is not None and d2.facts["refusal"] == "credentials"
    assert d2.fix.startswith("`docker logout`")


def test_ipython_frames_vouch_for_the_exception_line_below_them() -> None:
    """gpu-053; rapidsai/dask-cuda#583's IPython traceback, its NVML error cut off: the
    permission rule reads the class name in IPython's header line."""
    text = (
        "[BUG] LocalCUDACluster doesn't work with NVIDIA MIG\n"
        "---------------------------------------------------------------------------\n"
        "NVMLError_NoPermission                    Traceback (most recent call last)\n"
        "<ipython-input-1-48e0ebf5a2e9> in <module>\n"
        "     33 \n"
        "---> 35 cluster = LocalCUDACluster(device_memory_limit=1.0,\n"
        "     36                            rmm_managed_memory=True)\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nvml_permission" and d.facts["mig"] == "yes"


def _old_timeout(rank: int, op: str) -> str:
    """PyTorch 1.8's watchdog line (``ProcessGroupNCCL.cpp``: "Caught collective operation
    timeout: WorkNCCL(OpType=..., TensorShape=..., Timeout(ms)=...)", no SeqNum)."""
    return (
        f"[E ProcessGroupNCCL.cpp:566] [Rank {rank}] Caught collective operation timeout: "
        f"WorkNCCL(OpType={op}, TensorShape=[1024], Timeout(ms)=1800000) ran for 1800096 "
        "milliseconds before timing out.\n"
    )


def test_collective_mismatch_names_the_odd_rank() -> None:
    """nccl-040/nccl-041; the old wording without SeqNums: one rank in ALLREDUCE, the others
    in BROADCAST is that rank's mismatch, not a missing rank."""
    text = "".join(_old_timeout(r, "ALLREDUCE" if r == 2 else "BROADCAST") for r in range(4))
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_timeout"
    assert d.ranks == (2,) and d.facts["odd_rank"] == 2
    assert d.facts["mismatch"] == "different collectives"
    assert "missing" not in d.summary.split("not a missing rank")[1]
    # near miss: every rank in the same collective: the cause is a rank that did not report
    same = "".join(_old_timeout(r, "BROADCAST") for r in (0, 1, 3))
    d2 = diagnose(same)
    assert d2 is not None and "mismatch" not in d2.facts and "odd_rank" not in d2.facts


def test_every_rank_with_a_cuda_oom_is_named_with_its_gpu() -> None:
    """Two ranks' OOMs (PyTorch 2.x's message) interleaved mid-token: both ranks and both GPUs,
    the second rank's GPU number from its continued line."""
    text = (
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
        "0 has a total capacity of 79.11 GiB of which 1.1 GiB is free.\n"
        "[rank1]: 1 has a total capacity of 79.11 GiB of which 1.2 GiB is free.\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "cuda_oom"
    assert d.ranks == (0, 1) and d.facts["gpus"] == (0, 1)
    assert "rank 0 on GPU 0" in d.summary and "rank 1 on GPU 1" in d.summary
    # one rank's OOM stays that rank's, with its GPU
    d1 = diagnose(
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "1.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which 0 bytes is free.\n"
    )
    assert d1 is not None and d1.ranks == (3,) and d1.facts["gpu"] == 3


_RICH = (
    "╭───────────────────── Traceback (most recent call last) ──────────────────────╮\n"
    "│ /opt/conda/lib/python3.11/site-packages/kmer_ord/cli/main.py:197 in          │\n"
    "│ run_pipeline                                                                 │\n"
    "│                                                                              │\n"
    "│ ❱ 197 │   runner.run(context)                                                │\n"
    "╰──────────────────────────────────────────────────────────────────────────────╯\n"
)


def test_the_exception_line_after_richs_frame_box_is_the_cause() -> None:
    """rich's traceback box (rich/traceback.py), as a Nextflow task's .command.err showed it
    ending in a bare ``MemoryError``; a bare ``Exception: msg`` line is read the same way."""
    d = diagnose(_RICH + "MemoryError\n")
    assert d is not None and d.kind == "exception" and d.facts["exception"] == "MemoryError"
    d2 = diagnose(_RICH + "Exception: dataset shard 3 is empty\n")
    assert d2 is not None and d2.kind == "exception" and d2.facts["exception"] == "Exception"
    # near miss: a box closed by a plain log line is no exception
    assert diagnose(_RICH + "Done\n") is None


_CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"


def test_a_reset_during_communicator_init_is_the_set_up_failing() -> None:
    """nccl-042/nccl-043; the same reset after that process's communicator finished its init
    (a peer gone mid-run) stays a victim's nccl_remote_error."""
    text = (_CORPUS / "nccl" / "nccl-043.txt").read_text()
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_system_error" and d.facts["phase"] == "init"
    done = (
        "9306dc444753:248281:248335 [3] NCCL INFO ncclCommInitRank comm 0x7f00a8000f00 "
        "rank 3 nranks 8 cudaDev 3 busId 3d000 commId 0x1 - Init COMPLETE\n"
    )
    d2 = diagnose(done + text)
    assert d2 is not None and d2.kind == "nccl_remote_error" and "phase" not in d2.facts
