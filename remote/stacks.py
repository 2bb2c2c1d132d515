"""Taking one node's Python stacks with py-spy (``remote/agent/stacks.py`` on the node).

The bundle, ``~/.cache/gpuconsole/stacks/<sha>/`` on a host (content-addressed, uploaded once
per host and version like the telemetry agent), holds ``stacks.py`` and the ``py-spy`` binary
for the host's CPU. py-spy (https://github.com/benfred/py-spy, MIT) comes from this machine:

1. ``$GPUCONSOLE_PY_SPY``: a path to a Linux py-spy binary (a laptop that is not Linux, or
   hosts of another CPU: unzip ``py_spy-*-manylinux*_<cpu>.whl`` from PyPI and point at its
   ``py_spy-*.data/scripts/py-spy``);
2. the ``py-spy`` installed beside gpuconsole (its dependency; a Linux wheel ships the binary),
   then one on ``PATH``;

each taken only when its ELF header names the host's CPU (``uname -m``). Nothing is
installed on a host.

Three ways to run it, one per runtime (the console's backends choose):

- :func:`in_sidecar`: a Docker job. A short-lived container of the job's own image joins the
  job container's PID namespace with the one capability py-spy needs (``SYS_PTRACE``), the
  bundle mounted read-only; the job container keeps ``--cap-drop ALL``.
- :func:`on_host`: a ``runtime: host`` job: ``python3 stacks.py --root-pid PID`` over SSH as
  the job's user (the kernel's ptrace policy decides; the console says what to change).
- :func:`in_allocation`: a Slurm job: ``srun --overlap --jobid N -w NODE`` from the login host
  (the bundle in the login host's home, which the compute nodes must share, as Slurm's own
  job scripts do).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote.docker import Engine
from remote.errors import GpuConsoleError
from remote.transport import Transport

BUNDLE_BASE = ".cache/gpuconsole/stacks"
#: where the bundle is mounted in a sidecar
SIDECAR_DIR = "/opt/gpuconsole-stacks"
#: the env var naming a py-spy binary to ship
PY_SPY_ENV = "GPUCONSOLE_PY_SPY"
#: label of a stacks sidecar (never a job: no job-id label)
SIDECAR_KIND = "stacks"
_SCRIPT = Path(__file__).resolve().parent / "agent" / "stacks.py"
#: ELF ``e_machine`` of each ``uname -m`` answer
_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}
#: seconds one node's capture may take (py-spy's dumps run several at once, 20 s each at most)
NODE_TIMEOUT_S = 90.0


class StacksUnavailable(GpuConsoleError):
    """Stacks cannot be taken on a host (no py-spy for its CPU, no Python there)."""


def elf_machine(data: bytes) -> int | None:
    """The ``e_machine`` of an ELF file's header (little-endian files), ``None`` if not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF" or data[5] != 1:
        return None
    return int.from_bytes(data[18:20], "little")


def _candidates() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    if env := os.environ.get(PY_SPY_ENV):
        out.append((f"${PY_SPY_ENV}", Path(env)))
    beside = Path(sys.executable).parent / "py-spy"
    out.append(("the py-spy installed with gpuconsole", beside))
    if (found := shutil.which("py-spy")) is not None:
        out.append(("py-spy on PATH", Path(found)))
    return out


def py_spy_for(machine: str) -> bytes:
    """The bytes of a py-spy binary for a host whose ``uname -m`` is ``machine``.

    Raises:
        StacksUnavailable: none found (what was looked at, and how to get one).
    """
    want = _ELF_MACHINES.get(machine)
    seen: list[str] = []
    for what, path in _candidates():
        try:
            data = path.read_bytes()
        except OSError as e:
            if what.startswith("$"):
                seen.append(f"{what} ({path}): {e.strerror or e}")
            continue
        got = elf_machine(data)
        if got is not None and got == want:
            return data
        seen.append(f"{what} ({path}) is not a Linux {machine} binary")
    raise StacksUnavailable(
        f"no py-spy binary for a Linux {machine} host"
        + (f": {'; '.join(seen)}" if seen else " (none installed here)"),
        f"pip download --no-deps --only-binary=:all: --platform manylinux2014_{machine} "
        f"py-spy, unzip the wheel and set {PY_SPY_ENV}=<its py_spy-*.data/scripts/py-spy>",
    )


async def host_machine(transport: Transport) -> str:
    """The host's ``uname -m``."""
    return (await transport.check(["uname", "-m"], timeout=30.0)).strip()


async def deploy(transport: Transport, machine: str | None = None) -> str:
    """Upload the bundle for ``machine`` (a ``uname -m``; default: this host's CPU) unless it
    is there; returns its folder."""
    machine = machine or await host_machine(transport)
    files = {"stacks.py": _SCRIPT.read_bytes(), "py-spy": py_spy_for(machine)}
    return await transport.put_bundle(files, BUNDLE_BASE, executable=("py-spy",))


def script_args(folder: str, *, native: bool, mask: Sequence[str] = ()) -> list[str]:
    """The arguments after the interpreter: the script and py-spy in ``folder``, and each
    rank's Flight Recorder asked for its buffer (its NCCL dump pipe; a rank without one says
    why); the values of the environment variables ``mask`` names (secrets) are replaced by
    ``${NAME}`` in the command lines it reports (names only here: the values stay on the
    node)."""
    args = [f"{folder}/stacks.py", "--py-spy", f"{folder}/py-spy", "--flight-recorder"]
    for name in sorted(mask):
        args += ["--mask-env", name]
    return [*args, "--native"] if native else args


def parse_document(host: str, out: bytes | str, err: bytes | str) -> dict[str, Any]:
    """The JSON document ``stacks.py`` printed (its last line).

    Raises:
        StacksUnavailable: it printed none (the error output's last line says why).
    """
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if lines:
        try:
            doc = json.loads(lines[-1])
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("version") == 1:
            return doc
    why = (err.decode("utf-8", "replace") if isinstance(err, bytes) else err).strip()
    last = why.splitlines()[-1] if why else (text.strip().splitlines() or ["no output"])[-1]
    raise StacksUnavailable(f"{host}: the stacks script printed no result: {last}", None)


async def in_sidecar(
    transport: Transport,
    engine: Engine,
    container_id: str,
    *,
    native: bool,
    mask: Sequence[str] = (),
) -> dict[str, Any]:
    """A Docker node's stacks, read by a sidecar in its PID namespace (module docstring).

    Raises:
        StacksUnavailable, TransportError, DockerError: it could not run.
    """
    folder = await deploy(transport)
    status, out, err = await engine.run_sidecar(
        container_id,
        ["python3", "-I", "-S", *script_args(SIDECAR_DIR, native=native, mask=mask)],
        binds={folder: SIDECAR_DIR},
        cap_add="SYS_PTRACE",
        labels={"io.gpuconsole.kind": SIDECAR_KIND, "io.gpuconsole.stacks-of": container_id},
        timeout=NODE_TIMEOUT_S,
    )
    if status == 127 or b"executable file not found" in err:
        raise StacksUnavailable(
            f"the job's image has no python3 to run the stacks script (exit {status})",
            "stacks need a python3 on the image's PATH (every PyTorch image has one)",
        )
    return parse_document(transport.name, out, err)


async def on_host(
    transport: Transport, python: str, root_pid: int, *, native: bool, mask: Sequence[str] = ()
) -> dict[str, Any]:
    """A ``runtime: host`` node's stacks: the process tree under ``root_pid`` (torchrun),
    read as the SSH user with the host's ``python``."""
    folder = await deploy(transport)
    argv = [python, "-I", "-S", *script_args(folder, native=native, mask=mask)]
    argv += ["--root-pid", str(root_pid)]
    res = await transport.run(argv, timeout=NODE_TIMEOUT_S)
    return parse_document(transport.name, res.stdout, res.stderr)


def srun_on(slurm_job_id: str, node: str) -> list[str]:
    """``srun`` of one task on ``node`` inside a running Slurm job's allocation, beside its
    own steps (``--overlap``), without srun's own messages."""
    return [
        "srun",
        "--overlap",
        f"--jobid={slurm_job_id}",
        f"--nodelist={node}",
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
    ]


async def in_allocation(
    login: Transport, slurm_job_id: str, node: str, *, native: bool, mask: Sequence[str] = ()
) -> dict[str, Any]:
    """A Slurm job's stacks on one of its nodes: ``srun --overlap`` into the allocation runs
    the script there, which reads the processes of that job on that node (``SLURM_JOB_ID``
    and ``SLURMD_NODENAME``, which slurmd sets for every task and its children). py-spy is
    the one for the node's CPU (its ``uname -m``, asked the same way: a cluster's login host
    may differ from its compute nodes)."""
    srun = srun_on(slurm_job_id, node)
    machine = (await login.check([*srun, "uname", "-m"], timeout=NODE_TIMEOUT_S)).strip()
    folder = await deploy(login, machine or None)
    argv = [
        *srun,
        "python3",
        "-I",
        "-S",
        *script_args(folder, native=native, mask=mask),
        "--env",
        f"SLURM_JOB_ID={slurm_job_id}",
        # the node's own processes only, also where several slurmd share one machine
        "--env",
        f"SLURMD_NODENAME={node}",
    ]
    res = await login.run(argv, timeout=NODE_TIMEOUT_S)
    return parse_document(login.name, res.stdout, res.stderr)


#: where the ranks' dumps are uploaded for PyTorch's analyser (removed after its run)
FR_BASE = ".cache/gpuconsole/frdumps"
#: where they are mounted in the analyser's container
FR_DIR = "/opt/gpuconsole-frdumps"
#: label of the analyser's container
FR_KIND = "fr-trace"
#: seconds PyTorch's analyser may take
FR_TIMEOUT_S = 120.0


async def _upload_dumps(transport: Transport, files: dict[str, bytes]) -> str:
    """The dump files in a folder of this run's own on the host: a nonce file makes it
    unique, so two captures of the same dumps at once never share (and remove) one folder
    (the analyser reads only the files named with its prefix)."""
    return await transport.put_bundle({**files, "run": os.urandom(8).hex().encode()}, FR_BASE)


async def _remove(transport: Transport, folder: str) -> None:
    try:
        await transport.run(["rm", "-rf", "--", folder], timeout=30.0)
    except GpuConsoleError:  # left in the cache folder; the next upload of these dumps reuses it
        pass


def _text(out: bytes | str, err: bytes | str) -> str:
    def s(b: bytes | str) -> str:
        return b.decode("utf-8", "replace") if isinstance(b, bytes) else b

    return s(out) + s(err)


async def fr_trace_in_container(
    transport: Transport,
    engine: Engine,
    container_id: str,
    python: str,
    files: dict[str, bytes],
    args: list[str],
) -> tuple[int, str]:
    """PyTorch's Flight Recorder analyser over ``files`` (the ranks' dumps) in a container of
    the job container's image: ``python`` ``args`` (``-m ...fr_trace {dir} -p PREFIX``,
    ``{dir}`` standing for the dumps' folder), no capability, no network, the dumps mounted
    read-only. Returns its exit status and its output (stdout, then stderr).

    Raises:
        TransportError, DockerError: it could not run.
    """
    folder = await _upload_dumps(transport, files)
    try:
        status, out, err = await engine.run_sidecar(
            container_id,
            [python, *(a.replace("{dir}", FR_DIR) for a in args)],
            binds={folder: FR_DIR},
            cap_add=None,
            labels={"io.gpuconsole.kind": FR_KIND, "io.gpuconsole.fr-trace-of": container_id},
            timeout=FR_TIMEOUT_S,
            join_pid=False,
        )
    finally:
        await _remove(transport, folder)
    return status, _text(out, err)


async def fr_trace_on_host(
    transport: Transport, python: str, files: dict[str, bytes], args: list[str]
) -> tuple[int, str]:
    """The analyser with the job's own ``python`` on a host (``args`` with ``{dir}`` for the
    dumps' folder); its exit status and output."""
    folder = await _upload_dumps(transport, files)
    try:
        argv = [python, *(a.replace("{dir}", folder) for a in args)]
        res = await transport.run(argv, timeout=FR_TIMEOUT_S)
    finally:
        await _remove(transport, folder)
    return res.returncode, _text(res.stdout, res.stderr)


async def fr_trace_in_allocation(
    login: Transport,
    slurm_job_id: str,
    node: str,
    python: str,
    files: dict[str, bytes],
    args: list[str],
) -> tuple[int, str]:
    """The analyser with the job's ``python`` on one of a running Slurm job's nodes (``srun
    --overlap``; the dumps in the login host's home, which the nodes share)."""
    folder = await _upload_dumps(login, files)
    try:
        argv = [
            *srun_on(slurm_job_id, node),
            python,
            *(a.replace("{dir}", folder) for a in args),
        ]
        res = await login.run(argv, timeout=FR_TIMEOUT_S)
    finally:
        await _remove(login, folder)
    return res.returncode, _text(res.stdout, res.stderr)
