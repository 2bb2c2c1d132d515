"""Docker engine errors from real reports (shared cases dock-01, dock-02) get one clear reason."""

from __future__ import annotations

from pathlib import Path

from remote.docker import explain_engine_error

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "docker-gpu"


def _error_text(name: str) -> str:
    lines = (CASES / name).read_text().splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith("$ "))


def test_dock_01_no_gpu_device_driver() -> None:
    got = explain_engine_error(_error_text("dock-01.txt"))
    assert got is not None
    reason, fix = got
    assert "NVIDIA Container Toolkit is not installed or not registered" in reason
    assert "nvidia-ctk runtime configure --runtime=docker" in fix
    assert "restart dockerd" in fix


def test_dock_02_nvml_insufficient_permissions() -> None:
    got = explain_engine_error(_error_text("dock-02.txt"))
    assert got is not None
    reason, fix = got
    assert "could not initialise NVML" in reason
    assert "insufficient permissions" in reason
    assert "never created" in reason
    assert "/dev/nvidia*" in fix and "config.toml" in fix


def test_unknown_error_is_not_explained() -> None:
    assert explain_engine_error("Conflict. The container name is already in use") is None
