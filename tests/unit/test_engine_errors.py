"""Docker engine errors at launch are explained by console.diagnosis (shared cases dock-01,
dock-02): the error gpuconsole shows carries the diagnosis' summary and fix."""

from __future__ import annotations

from pathlib import Path

from console.jobs.launch import explain_engine_error
from remote.errors import DockerError, ImageNotFound, RemoteCommandFailed

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "docker-gpu"


def _engine_error(name: str) -> DockerError:
    """The DockerError remote.docker.Engine.call raises for the case's daemon message."""
    lines = (CASES / name).read_text().splitlines()
    text = "\n".join(ln for ln in lines if not ln.startswith("$ "))
    return DockerError("gpu-node-01", f"Docker engine: {text}")


def test_dock_01_no_gpu_device_driver() -> None:
    got = explain_engine_error(_engine_error("dock-01.txt"))
    assert isinstance(got, DockerError) and got.host == "gpu-node-01"
    assert "NVIDIA Container Toolkit is not installed or not registered" in got.message
    assert got.hint is not None
    assert "nvidia-ctk runtime configure --runtime=docker" in got.hint
    assert "restart dockerd" in got.hint


def test_dock_02_nvml_insufficient_permissions() -> None:
    got = explain_engine_error(_engine_error("dock-02.txt"))
    assert "could not initialise NVML" in got.message
    assert "insufficient permissions" in got.message
    assert "never created" in got.message
    assert got.hint is not None
    assert "/dev/nvidia*" in got.hint and "config.toml" in got.hint


def test_failed_pull_keeps_its_type_and_names_the_tag() -> None:
    error = ImageNotFound(
        "gpu-node-01",
        "image 'nvcr.io/nvidia/tritonserver:23.04-py' is not on the host and could not be "
        "pulled: Docker engine: manifest for nvcr.io/nvidia/tritonserver:23.04-py not found: "
        "manifest unknown: manifest unknown",
        "check the image name and tag, or build/load the image on the host",
    )
    got = explain_engine_error(error)
    assert isinstance(got, ImageNotFound)
    assert "tag not found" in got.message
    assert "nvcr.io/nvidia/tritonserver:23.04-py" in got.message


def test_unknown_engine_error_is_kept_as_is() -> None:
    error = DockerError("gpu-node-01", "Docker engine: invalid reference format")
    assert explain_engine_error(error) is error


def test_other_errors_are_not_engine_errors() -> None:
    error = RemoteCommandFailed("gpu-node-01", ["nvidia-smi"], 9, "")
    assert explain_engine_error(error) is error
