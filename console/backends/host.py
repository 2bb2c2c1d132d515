"""``runtime: host``: torchrun in the SSH hosts' own Python, no container
(:mod:`remote.hostengine`, :mod:`remote.agent.hostjob`).

Its nodes are listed, stopped, read and removed through the same engine calls as Docker's
(:class:`remote.runtimes.RuntimeEngine` routes by the node's id), so this backend is the
Docker one (:mod:`console.backends.docker`) less what needs a container: ``exec``, ``cp``,
notebooks and dev containers, each refused with the way to do it on the host. Stacks are read
on the host itself, as the SSH user, under the node's torchrun (its ``run.json``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from console.backends.base import Action, Capabilities
from console.backends.docker import DockerBackend
from console.errors import JobError, UsageError


def ptrace_hint(capture: NodeCapture) -> NodeCapture:
    """A capture whose processes were refused by the kernel's ptrace policy (Yama's
    ``kernel.yama.ptrace_scope`` >= 1 lets a user read only its own children, unless it has
    ``CAP_SYS_PTRACE``) says so once for the node, with what to change."""
    import dataclasses

    refused = [p for p in capture.processes if p.error and "permission denied" in p.error]
    if not refused or capture.error is not None:
        return capture
    scope = capture.ptrace_scope
    policy = f"kernel.yama.ptrace_scope is {scope}" if scope is not None else "the kernel"
    return dataclasses.replace(
        capture,
        error=(
            f"{policy} on {capture.host}: user {capture.uid} may not read the job's "
            f"processes ({len(refused)} refused) (fix: `sudo sysctl kernel.yama.ptrace_scope=0` "
            "on the host (a user may then read only its own processes), or run gpuconsole's "
            "profile for this host as root; ptrace_scope 3 forbids it until a reboot)"
        ),
    )


if TYPE_CHECKING:
    from console.jobs.copy import CopyRequest, CopyResult
    from console.jobs.store import JobRecord, NodeRecord
    from console.stacks.model import NodeCapture
    from remote.errors import GpuConsoleError


class HostBackend(DockerBackend):
    """Jobs run by the hosts' own Python (see the module docstring)."""

    name = "host"
    capabilities = Capabilities(
        exec=False, cp=False, notebook=False, shell=False, stacks=True, intake_process=True
    )

    def refusal(
        self,
        action: Action,
        job: JobRecord | None = None,
        node: NodeRecord | None = None,
        host: str | None = None,
    ) -> GpuConsoleError:
        """Each refusal names the host login (``ssh ...``, or this machine) instead."""
        where = node.host if node is not None else host
        assert where is not None, "a host runtime refusal names its node or host"
        if action == "shell":
            prof = self.session.profile
            return UsageError(
                f"host {where} runs jobs without Docker (its profile says "
                "`runtime: host`): a dev container needs Docker",
                f"`ssh {prof.hosts[where].hostname or where}` for a shell there, "
                "or --host a host with Docker",
            )
        if action == "notebook":
            return JobError(
                "a notebook runs in a container (JupyterLab from the image)",
                "remove `runtime: host`",
            )
        job_id = job.id if job is not None else "?"
        argv = self.session.transport(where).ssh_argv()
        if action == "cp":
            if argv is None:
                how = "they are on this machine: copy them with `cp`"
            else:  # scp takes ssh's options, but -P for the port and HOST:PATH
                opts = ["-P" if a == "-p" else a for a in argv[1:-1]]
                how = f"copy with `{shlex.join(['scp', *opts, argv[-1] + ':PATH', '.'])}`"
            return JobError(
                f"job {job_id} runs in {where}'s own Python (runtime: host): its "
                "files are on the host",
                f"{how}; `gpuconsole describe {job_id}` shows its folder",
            )
        login = f"`{shlex.join(argv)}`" if argv else "it runs on this machine"
        return JobError(
            f"job {job_id} runs in {where}'s own Python (runtime: host), not in a container",
            f"log in to the host: {login}; `gpuconsole "
            f"describe {job_id}` shows its folder and command",
        )

    def remove_line(self, job: JobRecord, node: NodeRecord) -> str:
        """A host runtime node is a folder on its host."""
        return f"{node.host}: rm -r ~/.cache/gpuconsole/jobs/{job.id}/{node.container_name}"

    def exec_target(self, job: JobRecord, node: NodeRecord) -> NodeRecord:
        """Refused: a node that runs is a process on its host, not a container (a node that
        does not run says so first, as Docker's).

        Raises:
            JobError: always.
        """
        super().exec_target(job, node)
        raise self.refusal("exec", job, node)

    async def copy(self, job: JobRecord, node: int | None, request: CopyRequest) -> CopyResult:
        """Refused: the files are on the host, reached with ``scp`` (the node is checked
        first, as Docker's).

        Raises:
            UsageError: ``node`` is not a node of the job.
            JobError: the job was removed, else always (the ``scp`` line to use).
        """
        from console.jobs.copy import copy_node

        raise self.refusal("cp", job, copy_node(job, node))

    async def read_dumps(self, job: JobRecord) -> dict[int, dict[int, bytes]]:
        """From each node's folder on its host (the dumps are written there)."""
        from console.backends.base import read_node_dumps

        return await read_node_dumps(self.session, job, "host")

    async def run_fr_trace(
        self,
        job: JobRecord,
        node: NodeRecord,
        python: str,
        files: dict[str, bytes],
        args: list[str],
    ) -> tuple[int, str, str]:
        """With the job's Python on the node's host, as the SSH user
        (:func:`remote.stacks.fr_trace_on_host`)."""
        from remote.stacks import fr_trace_on_host

        t = await self.session.connected(node.host)
        status, out = await fr_trace_on_host(t, python, files, args)
        return status, out, f"on {node.host}, with {python}"

    async def _node_stacks(
        self, node: NodeRecord, native: bool, mask: frozenset[str] = frozenset()
    ) -> NodeCapture:
        """py-spy on the host under the node's torchrun (``run.json``'s child pid), as the
        SSH user: the host's ptrace policy (Yama) decides, and a refusal says what to change."""
        import json

        from console.jobs.labels import gpu_indices
        from console.stacks.model import NodeCapture, parse_node
        from remote.stacks import on_host

        assert node.container_id is not None
        t = await self.session.connected(node.host)
        engine = self.session.engine(node.host)
        info = await engine.inspect(node.container_id)
        raw = await engine.hostrt.read_file(node.container_id, "run.json")
        try:
            child = int(json.loads(raw or b"{}")["child"])
        except (ValueError, KeyError, TypeError):
            return NodeCapture(node.node_rank, node.host, error="its process is not known yet")
        doc = await on_host(t, engine.hostrt.agent_python, child, native=native, mask=sorted(mask))
        capture = parse_node(
            node.node_rank, node.host, doc, gpu_indices(info.labels) if info is not None else ()
        )
        return ptrace_hint(capture)

    async def dev_shell(
        self,
        host: str,
        command: list[str],
        *,
        tty: bool,
        image: str | None = None,
        gpus: Literal["all"] | int | list[int] = 0,
        workdir: str | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> int:
        """Refused: a dev container needs Docker (what to run instead)."""
        raise self.refusal("shell", host=host)
