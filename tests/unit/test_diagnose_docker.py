"""Container-engine, registry, toolkit and Slurm rules: the handed cases dock-01, dock-02,
dock-06, dock-07 (exact values of /work/shared/cases/README.md) and the helpers the rules
share. The corpus cases (dkr-*, slm-*) run in test_diagnose_corpus.py."""

from __future__ import annotations

from pathlib import Path

from console.diagnosis import diagnose
from console.diagnosis.docker import image_of, is_docker_command
from console.diagnosis.lines import normalize
from console.diagnosis.slurm import parse_tasks

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "docker-gpu"


def _case(name: str) -> str:
    return (CASES / name).read_text()


def test_dock_01_no_device_driver_for_gpu() -> None:
    d = diagnose(_case("dock-01.txt"))
    assert d is not None and d.kind == "docker_no_gpu_driver"
    assert d.ranks == ()  # no job rank: the container was never created
    assert "NVIDIA Container Toolkit is not installed or not registered" in d.summary
    assert "never created" in d.summary and "no GPU fault" in d.summary
    assert "nvidia-ctk runtime configure --runtime=docker" in d.fix
    assert "restart dockerd" in d.fix and "nvidia-container-toolkit" in d.fix
    assert d.facts["image"] == "xagentteam/xagentgen:latest"
    assert any(
        'could not select device driver "" with capabilities: [[gpu]]' in e for e in d.evidence
    )
    assert "docker output" in d.inputs


def test_dock_02_toolkit_nvml_insufficient_permissions() -> None:
    d = diagnose(_case("dock-02.txt"))
    assert d is not None and d.kind == "toolkit_nvml_init"
    assert d.facts["nvml_error"] == "insufficient permissions"
    assert d.facts["image"] == "nvidia/cuda:11.0-base"
    assert "could not initialise NVML" in d.summary and "never created" in d.summary
    assert "GPUs are not implicated" in d.summary
    for needle in ("nvidia-smi", "as root", "/dev/nvidia*", "SELinux", "config.toml"):
        assert needle in d.fix
    assert d.ranks == ()
    assert [c.kind for c in d.consequences] == ["toolkit_hook_failed"]


def test_dock_06_unknown_runtime_with_docker_info() -> None:
    d = diagnose(_case("dock-06.txt"))
    assert d is not None and d.kind == "docker_unknown_runtime"
    assert d.facts["runtime"] == "nvidia"
    assert d.facts["runtimes"] == "io.containerd.runc.v2 runc"
    assert "never created" in d.summary and "docker info" in d.summary
    assert "nvidia-ctk runtime configure --runtime=docker" in d.fix
    assert "restart dockerd" in d.fix and "--gpus" in d.fix
    assert any("Runtimes: io.containerd.runc.v2 runc" in e for e in d.evidence)


def test_dock_07_tag_not_found() -> None:
    d = diagnose(_case("dock-07.txt"))
    assert d is not None and d.kind == "image_not_found"
    assert d.facts["image"] == "nvcr.io/nvidia/tritonserver:23.04-py"
    assert d.facts["registry"] == "nvcr.io"
    assert "tag not found" in d.summary
    assert "nvcr.io/nvidia/tritonserver:23.04-py" in d.summary
    assert "not an authentication, network or disk problem" in d.summary
    assert d.consequences == ()


def test_last_attempt_wins() -> None:
    """Real shape (dkr-023): a first run before the daemon was up, a second one failing."""
    text = (
        "$ docker run -d -p 8080:80 nginx\n"
        "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?.\n"
        "$ docker run -d -p 8080:80 nginx\n"
        'docker: Error response from daemon: Conflict. The container name "/web" is already '
        'in use by container "0123". You have to remove (or rename) that container to be '
        "able to reuse that name.\n"
        "$ docker ps\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "name_conflict" and d.facts["name"] == "web"
    assert "docker_daemon_unreachable" not in {c.kind for c in d.consequences}


def test_image_from_command_skips_option_values() -> None:
    lines = normalize(
        "+ docker run --gpus all -it --rm --shm-size=10g -e A -v /a:/b repo/img:1 bash -lc 'x'\n"
    )
    assert image_of(lines) == "repo/img:1"
    assert not is_docker_command("docker: Error response from daemon: x")
    assert is_docker_command("➜  ~ sudo docker pull ubuntu")


def test_manifest_url_on_docker_hub_gives_short_name() -> None:
    lines = normalize(
        "Error response from daemon: Get https://registry-1.docker.io/v2/"
        "library/ubuntu/manifests/latest: net/http: TLS handshake timeout\n"
    )
    assert image_of(lines) == "ubuntu:latest"


def test_srun_task_lists() -> None:
    assert parse_tasks("8-13,15") == (8, 9, 10, 11, 12, 13, 15)
    assert parse_tasks("0") == (0,)


def test_shm_no_space_is_not_disk_full() -> None:
    d = diagnose(
        "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x "
        "(size 9637888), error: No space left on device (28)\n"
    )
    assert d is None or d.kind != "disk_full"


def test_oomkilled_false_is_no_oom() -> None:
    assert diagnose('"OOMKilled": false,\n"ExitCode": 0\n') is None
