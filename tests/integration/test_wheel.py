"""The wheel is complete: built from this tree, installed into a fresh venv, it runs
`gpuconsole --help` and the `local` dry run with only its declared dependencies.

The fresh venv has no pip and no system site-packages. Third-party packages are not
downloaded: the distributions the wheel requires (``Requires-Dist``, transitively, markers
evaluated) are linked one by one from the project's .venv into a folder the venv sees through a
``.pth`` file, so an import of anything undeclared fails there as it would for a user. The
console's own modules must come from the wheel, never from this checkout. The dry run needs
the local Docker engine (hence an integration test).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
OWN = ("console", "remote")
#: Files the wheel ships that run in a job's Python (the image's or the host's), never in
#: gpuconsole's: what they import is the job's, not a dependency of gpuconsole.
JOB_SIDE = {"remote/bench/gpubench.py": {"torch"}}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built (pip, build isolation from the configured index) from a copy of this
    tree, so the checkout gets no build/ or egg-info."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(
        REPO,
        src,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".*_cache",
            "tests",
            "docs",
            "snapshot_report.html",
        ),
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (whl,) = (tmp / "dist").glob("gpuconsole-*.whl")
    return whl


def _names(whl: Path) -> set[str]:
    with zipfile.ZipFile(whl) as z:
        return set(z.namelist())


def _metadata(whl: Path) -> tuple[list[Requirement], str]:
    with zipfile.ZipFile(whl) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
        entry = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")))
    msg = Parser().parsestr(meta.decode())
    reqs = [Requirement(r) for r in msg.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})], entry.decode()


def test_wheel_carries_every_module_and_data_file(wheel: Path) -> None:
    names = _names(wheel)
    own_files = {
        str(p.relative_to(REPO))
        for pkg in OWN
        for p in (REPO / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert own_files, "no sources found"
    assert sorted(own_files - names) == []
    assert "remote/agent/agent.py" in names  # shipped to hosts as a file, not imported
    profiles = {p.name for p in (REPO / "profiles").glob("*.yaml")}
    assert {"local.yaml", "example-cluster.yaml"} <= profiles
    assert {
        n.rsplit("/", 1)[1] for n in names if n.startswith("console/bundled_profiles/")
    } == profiles
    with zipfile.ZipFile(wheel) as z:
        for name in profiles:
            assert (
                z.read(f"console/bundled_profiles/{name}")
                == (REPO / "profiles" / name).read_bytes()
            )
    _, entry = _metadata(wheel)
    assert re.search(r"^gpuconsole = console\.entry:main$", entry, re.M)


def test_every_third_party_import_is_declared(wheel: Path) -> None:
    reqs, _ = _metadata(wheel)
    declared = {canonicalize_name(r.name) for r in reqs}
    to_dists = md.packages_distributions()
    missing: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.endswith(".py"):
                continue
            tree = ast.parse(z.read(name), name)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    tops = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top in sys.stdlib_module_names or top in OWN or top == "__future__":
                        continue
                    if top in JOB_SIDE.get(name, ()):
                        continue
                    dists = {canonicalize_name(d) for d in to_dists.get(top, [])}
                    if not dists & declared:
                        missing[top] = f"{name} (distributions: {sorted(dists) or 'none'})"
    assert missing == {}


def _closure(reqs: list[Requirement]) -> set[str]:
    """The installed distributions ``reqs`` need, transitively (extras not followed)."""
    seen: set[str] = set()
    todo = [r.name for r in reqs]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in md.requires(name) or []:
            r = Requirement(line)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return seen


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (no deps) and the declared dependencies linked."""
    tmp = tmp_path_factory.mktemp("venv")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    deps = tmp / "deps"
    deps.mkdir()
    reqs, _ = _metadata(wheel)
    for dist_name in sorted(_closure(reqs)):
        dist = md.distribution(dist_name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops - {"..", "__pycache__"}:
            target = Path(str(dist.locate_file(top)))
            if target.exists() and not (deps / top).exists():
                (deps / top).symlink_to(target)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "_gpuconsole_test_deps.pth").write_text(f"{deps}\n")
    return venv


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "GPUCONSOLE_PROFILE", "VIRTUAL_ENV")
    }
    env["GPUCONSOLE_CONFIG_DIR"] = str(tmp / "config")  # no user profiles: the bundled ones
    env["GPUCONSOLE_STATE_DIR"] = str(tmp / "state")
    return env


def test_installed_wheel_runs_from_its_own_files(venv: Path, tmp_path: Path) -> None:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    code = (
        "import importlib, sys, zipfile\n"
        "import console, remote, console.profiles as p\n"
        "mods = [n[:-3].replace('/', '.').removesuffix('.__init__') for n in sys.argv[1:]]\n"
        "for m in mods: importlib.import_module(m)\n"
        "print(console.__file__); print(remote.__file__); print(p.BUNDLED_DIR)\n"
        "print(p.resolve_profile('example-cluster').source)\n"
        "print(len(mods))\n"
        "print([m for m, v in sys.modules.items() if getattr(v, '__file__', None)"
        f" and v.__file__.startswith({str(REPO)!r})])\n"
    )
    modules = sorted(
        str(p.relative_to(site))
        for pkg in OWN
        for p in (site / pkg).rglob("*.py")
        if "agent" not in p.parts and p.name != "__main__.py"
    )
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, *modules],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    console_file, remote_file, bundled, example, count, from_repo = res.stdout.splitlines()
    assert console_file == str(site / "console" / "__init__.py")
    assert remote_file == str(site / "remote" / "__init__.py")
    assert bundled == str(site / "console" / "bundled_profiles")
    assert example == str(site / "console" / "bundled_profiles" / "example-cluster.yaml")
    assert int(count) == len(modules) > 50
    assert from_repo == "[]"


def test_installed_wheel_help_and_local_dry_run(venv: Path, tmp_path: Path) -> None:
    exe = str(venv / "bin" / "gpuconsole")
    res = subprocess.run(
        [exe, "--help"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    for command in ("submit", "ps", "logs", "exec", "cp", "top"):
        assert re.search(rf"^  {command}\s", res.stdout, re.M), command
    # no `image:` in the spec: it must come from the bundled `local` profile's defaults
    spec = (REPO / "scripts" / "examples" / "ddp-cpu.yaml").read_text()
    spec = re.sub(r"^image:.*\n", "", spec, flags=re.M)
    spec = re.sub(r"^workdir:.*$", f"workdir: {REPO / 'scripts' / 'examples'}", spec, flags=re.M)
    (tmp_path / "job.yaml").write_text(spec)
    res = subprocess.run(
        [exe, "submit", "job.yaml", "--dry-run"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "node 0 on local: GPUs none (CPU)" in res.stdout
    assert " gpuconsole/torch:2.13.0-cpu torchrun --nnodes 1 --nproc-per-node 2 " in res.stdout
