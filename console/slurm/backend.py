"""The Slurm backend's effects: everything runs on the profile's login host over its
transport (SSH), as argv lists (no shell string is built from a user's value; the few
``sh -c`` programs here are constants taking paths as arguments).

A job's folder ``<slurm.job_dir>/<job id>`` on the login host (a filesystem the nodes share)
holds ``job.sbatch`` (the script, :mod:`console.slurm.script`), ``env`` (the environment,
mode 0600, written through stdin), ``job.json`` (the record ``ps`` adopts jobs from, secrets
masked, with the Slurm job id), ``batch.out`` and ``node<N>.out`` (the outputs). Slurm is
the truth for the state (``scontrol show job``, then ``sacct``, then ``sacct -c`` for a
cluster without an accounting daemon); the local store caches it.

Logs: each output file is read from a byte offset (``tail -c +N | head -c MAX | base64``, so
offsets count bytes exactly) into the local archive; the offsets are kept beside the
archive (``logs/<job id>/slurm-offsets.json``), so reading again never repeats a line. The
batch output (the script's and srun's lines) is archived as node 0's, where the batch script
runs. Files carry no timestamps: a line's time is when gpuconsole read it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from console.diagnosis.engine import diagnose
from console.errors import JobError, PlanError
from console.jobs.labels import check_job_id
from console.jobs.logs import JobLogLine, tag_line
from console.jobs.plan import job_env, new_job_id
from console.jobs.spec import LoadedSpec
from console.jobs.store import FailureRecord, JobRecord, NodeRecord, Store
from console.profiles import Profile
from console.session import Session
from console.slurm.fields import PENDING_HOST
from console.slurm.script import (
    BATCH_OUT,
    ENV_FILE,
    RECORD_FILE,
    SCRIPT_FILE,
    SlurmJobShape,
    expand_home,
    job_shape,
    node_out,
    render_sbatch,
    slurm_config,
)
from console.slurm.state import (
    STATE_KINDS,
    STATE_REASONS,
    SlurmJob,
    TaskEnd,
    job_from_sacct,
    job_from_scontrol,
    node_states,
    parse_scontrol,
    task_ends,
)
from remote.docker import LogLine
from remote.errors import GpuConsoleError
from remote.transport import WORKDIR_CACHE, CommandResult, Transport, workdir_digest

log = logging.getLogger("gpuconsole.slurm")

#: Most bytes of one output file read per poll (base64 on the wire: a third more).
READ_MAX = 4 << 20
#: Seconds between polls of the output files while following.
POLL_S = 0.5
#: Seconds between state checks (scontrol) while following.
STATE_EVERY_S = 2.0
#: Lines of each output file the failure diagnosis reads (from the end).
DIAGNOSIS_TAIL = 3000
#: Writes stdin to the file "$1" readable by its owner only (umask 077 before it exists).
_WRITE_PRIVATE = 'umask 077 && cat > "$1"'
#: Prints every job record under "$1", one per line.
_LIST_RECORDS = 'for f in "$1"/*/job.json; do [ -f "$f" ] && { cat "$f"; echo; }; done; true'
#: Prints base64 of the bytes of "$2" from byte offset "$1" (0-based), at most "$3" bytes.
_READ_FROM = '[ -f "$2" ] || exit 0; tail -c +"$(( $1 + 1 ))" -- "$2" | head -c "$3" | base64 -w0'
_DIAGNOSIS_FILES = 'for f in "$@"; do [ -f "$f" ] && { tail -n "$0" -- "$f"; echo; }; done; true'


@dataclass(frozen=True)
class SlurmPlan:
    """A planned Slurm submission.

    Attributes:
        job_id: the gpuconsole job id.
        login_host: the profile host sbatch runs on.
        job_dir: the job's folder there.
        workdir: the synced workdir there (computed, not synced, in a dry run), or ``None``.
        script: the sbatch script.
        shape: nodes, GPUs, workers, runtime.
        env: the job's environment (written to the env file, never shown).
        secret: the secret keys of ``env``.
        created_at: Unix seconds.
    """

    job_id: str
    login_host: str
    job_dir: str
    workdir: str | None
    script: str
    shape: SlurmJobShape
    env: dict[str, str]
    secret: frozenset[str]
    created_at: float


def slurm_id(job: JobRecord) -> str | None:
    """The Slurm job id of a gpuconsole job (kept as its nodes' ``container_id``)."""
    return job.nodes[0].container_id if job.nodes else None


def _first_line(r: CommandResult) -> str:
    text = (r.stderr.strip() or r.stdout.strip()).splitlines()
    errors = [ln for ln in text if "error" in ln.lower()]
    return (errors or text or [f"exit status {r.returncode}"])[0].strip()


async def _login(session: Session, profile: Profile) -> tuple[str, Transport]:
    host = slurm_config(profile).login_host
    return host, await session.connected(host)


async def _preflight(t: Transport, host: str, shape: SlurmJobShape, home: str) -> None:
    """sbatch exists on the login host, and with runtime ``host`` the Python imports torch.

    Raises:
        PlanError: one line naming what is missing, with a fix.
    """
    r = await t.run(["sbatch", "--version"])
    if r.returncode != 0:
        raise PlanError(
            f"login host {host}: sbatch does not run ({_first_line(r)})",
            "point slurm.login_host at a host with the Slurm client commands "
            "(sbatch, squeue, scancel) on its PATH",
        )
    if shape.python is not None:
        python = expand_home(shape.python, home)
        r = await t.run([python, "-c", "import torch; print(torch.__version__)"])
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
            raise PlanError(
                f"login host {host}: {shape.python} cannot import torch ({last})",
                "set `python:` in the spec or `slurm.python` in the profile to "
                "a Python with torch (e.g. a venv's bin/python) on a shared path",
            )


async def plan_slurm(session: Session, loaded: LoadedSpec, *, dry_run: bool) -> SlurmPlan:
    """Check the spec against the cluster and render the script: the login host is asked
    for its home, sbatch and (runtime host) a Python with torch, and sbatch validates the
    script (``--test-only``: partition, account, node count, time limit). Without
    ``dry_run`` the workdir is synced to the login host (content-addressed).

    Raises:
        PlanError: the spec does not fit (see :func:`console.slurm.script.job_shape`), the
            login host lacks sbatch or a Python with torch, or sbatch refuses the job
            (its error line, one line).
        ConfigError: an unset ``${VAR}`` in the profile's env.
        TransportError: the login host cannot be reached.
    """
    profile = session.profile
    cfg = slurm_config(profile)
    shape = job_shape(loaded, profile)
    env, secret = job_env(loaded, profile)
    host, t = await _login(session, profile)
    home = await t.home()
    await _preflight(t, host, shape, home)
    workdir: str | None = None
    local = loaded.workdir
    if local is not None:  # where sync_workdir puts it (content-addressed)
        digest = await asyncio.to_thread(workdir_digest, local, loaded.spec.exclude)
        workdir = f"{home}/{WORKDIR_CACHE}/{digest[:16]}"
    job_id = new_job_id(loaded.spec.name)
    job_dir = f"{expand_home(cfg.job_dir, home).rstrip('/')}/{job_id}"
    script = render_sbatch(
        loaded,
        profile,
        job_id,
        job_dir=job_dir,
        workdir=workdir,
        home=home,
        env_names=tuple(sorted(env)),
        secret_names=secret,
    )
    r = await t.run(["sbatch", "--test-only"], input=script.encode())
    if r.returncode != 0:
        raise PlanError(
            f"sbatch on {host} refuses the job: {_first_line(r)}",
            "check the profile's slurm.partition/account/sbatch_args and the "
            "spec's nodes, gpus_per_node and time_limit against `sinfo`",
        )
    if local is not None and not dry_run:  # only once sbatch would take the job
        workdir = await t.sync_workdir(local, loaded.spec.exclude)
        script = render_sbatch(
            loaded,
            profile,
            job_id,
            job_dir=job_dir,
            workdir=workdir,
            home=home,
            env_names=tuple(sorted(env)),
            secret_names=secret,
        )
    return SlurmPlan(job_id, host, job_dir, workdir, script, shape, env, secret, time.time())


def _env_file(env: dict[str, str]) -> bytes:
    """The env file: ``NAME='value'`` lines the batch script sources under ``set -a``."""
    from console.jobs.plan import shell_word

    return "".join(f"{k}={shell_word(v)}\n" for k, v in env.items()).encode()


async def submit_slurm(
    session: Session, store: Store, loaded: LoadedSpec, plan: SlurmPlan
) -> JobRecord:
    """Write the job folder (env file 0600 through stdin), ``sbatch --parsable`` the script
    (on stdin), write ``job.json`` and store the job (one node record per node, hosts
    filled in once Slurm allocated them). A refused sbatch removes the folder again.

    Raises:
        PlanError: sbatch refused the job (its error line).
        TransportError: the login host cannot be reached.
    """
    t = await session.connected(plan.login_host)
    d = plan.job_dir
    r = await t.run(["mkdir", "-p", "-m", "700", "--", d])
    if r.returncode != 0:
        raise PlanError(
            f"cannot create the job folder {d} on {plan.login_host}: {_first_line(r)}",
            "point slurm.job_dir at a writable shared folder",
        )
    sent = False  # sbatch was started: Slurm may have queued the job
    try:
        for name, data in ((ENV_FILE, _env_file(plan.env)), (SCRIPT_FILE, plan.script.encode())):
            r = await t.run(["sh", "-c", _WRITE_PRIVATE, "sh", f"{d}/{name}"], input=data)
            if r.returncode != 0:
                raise PlanError(
                    f"cannot write {d}/{name} on {plan.login_host}: {_first_line(r)}",
                    "check the job folder's filesystem",
                )
        sent = True
        r = await t.run(["sbatch", "--parsable"], input=plan.script.encode())
        if r.returncode != 0:
            sent = False
            raise PlanError(
                f"sbatch on {plan.login_host} refused the job: {_first_line(r)}",
                "check the profile's slurm: section and the spec against `sinfo`",
            )
        sid = r.stdout.strip().split(";")[0]
        record = JobRecord(
            id=plan.job_id,
            name=loaded.spec.name,
            profile=session.profile.name,
            profile_source=session.profile.source,
            spec={
                **loaded.spec.model_dump(mode="json"),
                "env": {
                    k: ("${secret}" if k in loaded.secret_env else v) for k, v in loaded.env.items()
                },
            },
            spec_hash=loaded.spec_hash(),
            created_at=plan.created_at,
            node_count=plan.shape.nodes,
            nodes=[
                NodeRecord(plan.job_id, i, PENDING_HOST, f"slurm-{sid}-n{i}", sid)
                for i in range(plan.shape.nodes)
            ],
        )
        meta = {
            "id": record.id,
            "name": record.name,
            "slurm_id": sid,
            "spec": record.spec,
            "spec_hash": record.spec_hash,
            "created_at": record.created_at,
            "node_count": record.node_count,
            "profile": record.profile,
        }
        w = await t.run(
            ["sh", "-c", _WRITE_PRIVATE, "sh", f"{d}/{RECORD_FILE}"],
            input=json.dumps(meta).encode(),
        )
        if w.returncode != 0:
            log.warning("job %s: %s not written: %s", record.id, RECORD_FILE, _first_line(w))
        await store.call(store.add_job, record)
    except BaseException:
        # all or nothing, like a Docker launch: a submission interrupted (Ctrl-C) or failed
        # once sbatch ran is cancelled by its unique job name (--job-name=<job id>), even
        # when sbatch's answer never came back, and its folder removed
        await asyncio.shield(_undo_submit(t, plan, cancel=sent))
        raise
    return record


async def _undo_submit(t: Transport, plan: SlurmPlan, *, cancel: bool) -> None:
    """Cancel what sbatch may have queued for ``plan`` (``cancel``) and remove its folder;
    said on the log (warning), since the person who pressed Ctrl-C sees only ``interrupted``."""
    if cancel:
        r = await t.run(["scancel", f"--name={plan.job_id}"])
        if r.returncode == 0:
            log.warning(
                "submission of %s did not complete: its Slurm job was cancelled and "
                "its folder %s removed",
                plan.job_id,
                plan.job_dir,
            )
        else:
            log.warning(
                "submission of %s did not complete and its Slurm job could not be "
                "cancelled (%s): run `scancel --name=%s` on %s",
                plan.job_id,
                _first_line(r),
                plan.job_id,
                plan.login_host,
            )
    await t.run(["rm", "-rf", "--", plan.job_dir])


async def query(t: Transport, sid: str) -> SlurmJob | None:
    """The job as Slurm knows it: ``scontrol show job`` (pending, running, and ended for
    ``MinJobAge``), else ``sacct`` (accounting), else ``sacct -c`` (job completion file);
    ``None`` when none of them knows it."""
    r = await t.run(["scontrol", "show", "job", "-o", sid])
    if r.returncode == 0:
        fields = parse_scontrol(r.stdout)
        if fields.get("JobId") == sid:
            return job_from_scontrol(fields)
    fmt = ["-P", "-n", "-X", "-j", sid, "-o", "JobID,State,ExitCode,NodeList"]
    for extra in ([], ["-c"]):
        r = await t.run(["sacct", *extra, *fmt])
        if r.returncode == 0:
            found = job_from_sacct(r.stdout, sid)
            if found is not None:
                return found
    return None


async def _cat(t: Transport, path: str) -> str:
    r = await t.run(["sh", "-c", '[ -f "$1" ] && cat -- "$1"; true', "sh", path])
    return r.stdout


async def refresh_slurm(session: Session, store: Store, job: JobRecord) -> JobRecord:
    """Reconcile a job with Slurm: its state, its nodes' names, states and exit codes
    (srun's task lines in the batch output) and, once it failed, its diagnosis.

    A login host that cannot be reached leaves the record as it was, naming why in
    ``job.unreachable``; a job Slurm no longer knows (and never saw end) becomes ``lost``.
    """
    sid = slurm_id(job)
    if sid is None or job.removed_at is not None:
        return job
    profile = session.profile
    try:
        _, t = await _login(session, profile)
        sj = await query(t, sid)
        ends: dict[int, TaskEnd] = {}
        jdir = _job_dir(profile, await t.home(), job.id)
        if sj is not None and sj.state not in ("pending", "running", "unknown"):
            ends = task_ends(await _cat(t, f"{jdir}/{BATCH_OUT}"))
    except GpuConsoleError as e:
        job.unreachable[slurm_config(profile).login_host] = e.message
        return job
    if sj is None:
        if job.state in ("pending", "running", "unknown"):
            job.state = "lost"
            for n in job.nodes:
                n.state = "lost"
            await store.call(store.update_nodes, job.nodes)
            await store.call(store.update_job, job.id, state="lost")
        return job
    stop = job.stop_requested_at is not None
    states = node_states(sj, len(job.nodes), ends, stop_requested=stop)
    for n, (state, code) in zip(job.nodes, states):
        if n.node_rank < len(sj.nodes):
            n.host = sj.nodes[n.node_rank]
        n.state, n.exit_code = state, code
        n.stop_requested = stop
    state = sj.state
    if stop and state not in ("pending", "running", "succeeded"):
        state = "stopped"
    job.state, job.exit_code = state, sj.shown_code
    if state == "failed" and job.failure is None:
        job.failure = await explain_slurm_failure(t, jdir, job, sj, ends)
    await store.call(store.update_nodes, job.nodes)
    await store.call(
        store.update_job, job.id, state=job.state, exit_code=job.exit_code, failure=job.failure
    )
    return job


def _job_dir(profile: Profile, home: str, job_id: str) -> str:
    return f"{expand_home(slurm_config(profile).job_dir, home).rstrip('/')}/{job_id}"


async def explain_slurm_failure(
    t: Transport, job_dir: str, job: JobRecord, sj: SlurmJob, ends: dict[int, TaskEnd]
) -> FailureRecord:
    """The first failure: the node srun reported first with a non-zero exit (else node 0),
    diagnosed from the failed node's output, the other nodes' and the batch output (srun's
    and slurmstepd's lines: the step's cancellation and the tasks' ends are consequences of
    an error above them); Slurm's own state (time limit, node failure, OOM) names the cause
    where the outputs show none."""
    failed = [n for n in job.nodes if n.state == "failed"]
    never = len(job.nodes) + len(ends)

    def order(n: NodeRecord) -> int:
        end = ends.get(n.node_rank)
        return end.order if end is not None else never

    node = min(failed, key=order, default=job.nodes[0])
    base = job_dir
    files = [f"{base}/{node_out(node.node_rank)}"]
    files += [f"{base}/{node_out(n.node_rank)}" for n in job.nodes if n is not node][:3]
    files.append(f"{base}/{BATCH_OUT}")
    r = await t.run(["sh", "-c", _DIAGNOSIS_FILES, str(DIAGNOSIS_TAIL), *files])
    text = r.stdout
    out: FailureRecord = {
        "node": node.node_rank,
        "host": node.host,
        "exit_code": node.exit_code if node.exit_code is not None else sj.exit_code,
        "rank": None,
        "reason": f"Slurm job {sj.slurm_id} ended {sj.slurm_state}",
        "fix": None,
    }
    diag = diagnose(text) if text.strip() else None
    own = STATE_REASONS.get(sj.slurm_state)
    if diag is None or (
        own is not None and diag.kind in ("exit_code", "signal", "stopped", "sigkill")
    ):
        if own is not None:
            out["reason"], out["fix"] = own
            out["kind"] = STATE_KINDS[sj.slurm_state]
        if diag is not None:
            out["consequences"] = [f"{diag.kind}: {diag.summary}"]
        return out
    out["kind"] = diag.kind
    out["reason"] = diag.summary
    out["fix"] = diag.fix
    out["evidence"] = list(diag.evidence[:8])
    cons = [f"{c.kind}: {c.summary}" for c in diag.consequences]
    if cons:
        out["consequences"] = cons
    if diag.ranks:
        out["rank"] = diag.ranks[0]
    return out


async def adopt_slurm(session: Session, store: Store) -> list[str]:
    """Store the jobs whose folders are on the login host but not in the store (another
    machine submitted them, or the state dir was lost); returns their ids. Their state
    comes from Slurm at the next refresh.

    Raises:
        TransportError: the login host cannot be reached.
    """
    profile = session.profile
    _, t = await _login(session, profile)
    base = expand_home(slurm_config(profile).job_dir, await t.home()).rstrip("/")
    r = await t.run(["sh", "-c", _LIST_RECORDS, "sh", base])
    adopted = []
    for line in r.stdout.splitlines():
        try:
            meta = json.loads(line)
            sid, count = str(meta["slurm_id"]), int(meta["node_count"])
            job_id = check_job_id(str(meta["id"]))
            record = JobRecord(
                id=job_id,
                name=str(meta["name"]),
                profile=profile.name,
                profile_source=profile.source,
                spec=dict(meta.get("spec") or {}),
                spec_hash=str(meta.get("spec_hash", "")),
                created_at=float(meta.get("created_at", 0.0)),
                node_count=count,
                state="unknown",
                nodes=[
                    NodeRecord(job_id, i, PENDING_HOST, f"slurm-{sid}-n{i}", sid)
                    for i in range(count)
                ],
            )
        except (ValueError, KeyError, TypeError) as e:
            log.warning("job record not read on %s: %s", t.describe(), e)
            continue
        if await store.call(store.get, job_id) is None and await store.call(
            store.add_job, record, if_absent=True
        ):
            adopted.append(job_id)
            stop = meta.get("stop_requested_at")
            if isinstance(stop, (int, float)):
                await store.call(store.update_job, job_id, stop_requested_at=float(stop))
    return adopted


async def stop_slurm(session: Session, store: Store, job: JobRecord, grace: float) -> bool:
    """``scancel --signal=TERM`` (the job's steps: every torchrun agent gets SIGTERM), then
    plain ``scancel`` (SIGTERM, SIGKILL after the cluster's KillWait) once ``grace`` s passed
    and the job still runs; a pending job is cancelled at once. Returns whether the job was
    pending or running.

    Raises:
        JobError: scancel failed (its message).
        TransportError: the login host cannot be reached.
    """
    sid = slurm_id(job)
    _, t = await _login(session, session.profile)
    sj = await query(t, sid) if sid else None
    if sid is None or sj is None or sj.state not in ("pending", "running"):
        return False
    now = time.time()
    job.stop_requested_at = now
    await store.call(store.update_job, job.id, stop_requested_at=now)
    await _mark_stopped(t, _job_dir(session.profile, await t.home(), job.id), now)
    if sj.state == "running" and grace > 0:
        r = await t.run(["scancel", "--signal=TERM", sid])
        if r.returncode != 0:
            raise JobError(
                f"scancel --signal=TERM {sid}: {_first_line(r)}",
                "see `squeue -j` on the login host",
            )
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            sj = await query(t, sid)
            if sj is None or sj.state not in ("pending", "running"):
                return True
    r = await t.run(["scancel", sid])
    if r.returncode != 0:
        raise JobError(f"scancel {sid}: {_first_line(r)}", "see `squeue -j` on the login host")
    for _ in range(int(30 / POLL_S)):  # until Slurm says it ended (KillWait, epilog)
        sj = await query(t, sid)
        if sj is None or sj.state not in ("pending", "running"):
            break
        await asyncio.sleep(POLL_S)
    return True


async def _mark_stopped(t: Transport, job_dir: str, at: float) -> None:
    """Record the stop in the job's ``job.json`` (``stop_requested_at``), so a console that
    adopts the job later knows its end was a stop, not a failure (Slurm says FAILED when the
    SIGTERMed agents exit non-zero)."""
    path = f"{job_dir}/{RECORD_FILE}"
    try:
        meta = json.loads(await _cat(t, path))
    except ValueError:
        return
    meta["stop_requested_at"] = at
    r = await t.run(["sh", "-c", _WRITE_PRIVATE, "sh", path], input=json.dumps(meta).encode())
    if r.returncode != 0:
        log.warning("%s not updated: %s", path, _first_line(r))


async def remove_slurm(session: Session, store: Store, job: JobRecord) -> None:
    """Archive the rest of the job's output, then remove its folder on the login host
    (script, env file, outputs, record); the synced workdir stays (content-addressed,
    other jobs may share it).

    Raises:
        TransportError: the login host cannot be reached.
    """
    await sync_logs(session, store, job, final=True)
    _, t = await _login(session, session.profile)
    r = await t.run(["rm", "-rf", "--", _job_dir(session.profile, await t.home(), job.id)])
    if r.returncode != 0:
        raise JobError(
            f"cannot remove the job folder of {job.id}: {_first_line(r)}",
            "remove it by hand on the login host",
        )


# -- logs -------------------------------------------------------------------------------------


def _offsets_path(store: Store, job_id: str) -> Path:
    return store.job_log_dir(job_id) / "slurm-offsets.json"


def _load_offsets(store: Store, job_id: str) -> dict[str, int]:
    try:
        data = json.loads(_offsets_path(store, job_id).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save_offsets(store: Store, job_id: str, offsets: dict[str, int]) -> None:
    p = _offsets_path(store, job_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(offsets))
    tmp.replace(p)


class _Clock:
    """Strictly increasing ns timestamps (the files have none: the time of reading)."""

    def __init__(self, after: int = 0) -> None:
        self.last = after

    def __call__(self) -> int:
        self.last = max(time.time_ns(), self.last + 1)
        return self.last


async def _read_new(t: Transport, path: str, offset: int, final: bool) -> tuple[list[str], int]:
    """Whole lines of ``path`` from byte ``offset`` (a last line without its newline only
    when ``final``) and the offset after them."""
    r = await t.run(["sh", "-c", _READ_FROM, "sh", str(offset), path, str(READ_MAX)])
    data = base64.b64decode(r.stdout.strip() or b"")
    if not data:
        return [], offset
    end = data.rfind(b"\n") + 1
    if final and len(data) < READ_MAX:
        end = len(data)
    if end == 0:
        return [], offset
    text = data[:end].decode("utf-8", errors="replace")
    return text.removesuffix("\n").split("\n"), offset + end


async def sync_logs(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    final: bool = False,
    clock: _Clock | None = None,
) -> dict[int, list[LogLine]]:
    """Read what the job's output files gained since the last read into the archive;
    returns the new lines per node (the batch output's as node 0's). ``final``: the job
    ended, a last line without a newline counts too. A login host that cannot be reached
    adds nothing (why: ``job.unreachable``)."""
    if job.removed_at is not None:
        return {}
    try:
        _, t = await _login(session, session.profile)
        base = _job_dir(session.profile, await t.home(), job.id)
    except GpuConsoleError as e:
        job.unreachable[slurm_config(session.profile).login_host] = e.message
        return {}
    offsets = await asyncio.to_thread(_load_offsets, store, job.id)
    clock = clock or _Clock()
    new: dict[int, list[LogLine]] = {}
    files = [(n.node_rank, node_out(n.node_rank)) for n in job.nodes] + [(0, BATCH_OUT)]
    for rank, name in files:
        while True:
            try:
                lines, off = await _read_new(t, f"{base}/{name}", offsets.get(name, 0), final)
            except GpuConsoleError as e:
                job.unreachable[slurm_config(session.profile).login_host] = e.message
                lines, off = [], offsets.get(name, 0)
            if not lines:
                break
            offsets[name] = off
            new.setdefault(rank, []).extend(LogLine(clock(), ln) for ln in lines)
    for rank, got in new.items():
        await store.call(store.archive, job.id, rank, got)
    if new:
        await asyncio.to_thread(_save_offsets, store, job.id, offsets)
    return new


def _archived(store: Store, job_id: str, rank: int) -> list[LogLine]:
    return list(store.read_archive(job_id, rank))


def _node_of(job: JobRecord, rank: int) -> NodeRecord:
    return next(n for n in job.nodes if n.node_rank == rank)


async def read_slurm_logs(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    node: int | None = None,
    since_ns: int | None = None,
    tail: int | None = None,
) -> list[JobLogLine]:
    """A job's lines so far (the output files' news archived first), merged in time order
    and rank-tagged like a Docker job's."""
    await sync_logs(session, store, job, final=job.state not in ("pending", "running"))
    out: list[JobLogLine] = []
    for n in job.nodes:
        if node is not None and n.node_rank != node:
            continue
        if tail is not None:
            lines = await store.call(store.read_archive_tail, job.id, n.node_rank, tail)
        else:
            lines = await store.call(_archived, store, job.id, n.node_rank)
        out += [tag_line(n, ln) for ln in lines if since_ns is None or ln.ts_ns >= since_ns]
    out.sort(key=lambda ln: (ln.ts_ns, ln.node_rank))
    if tail is not None:
        out = out[-tail:] if tail > 0 else []
    return out


async def follow_slurm(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    node: int | None = None,
    since_ns: int | None = None,
    tail: int | None = None,
    refresh: Callable[[JobRecord], Awaitable[JobRecord]],
) -> AsyncIterator[list[JobLogLine]]:
    """Follow a job's output files until Slurm says it ended (then one last read), in
    batches of one node's lines; ``refresh`` reconciles the job (every
    :data:`STATE_EVERY_S` s)."""
    first = await read_slurm_logs(session, store, job, node=node, since_ns=since_ns, tail=tail)
    clock = _Clock(max((ln.ts_ns for ln in first), default=0))
    for n in job.nodes:
        batch = [ln for ln in first if ln.node_rank == n.node_rank]
        if batch:
            yield batch
    checked = 0.0
    while True:
        ended = False
        if time.monotonic() - checked >= STATE_EVERY_S:
            checked = time.monotonic()
            job = await refresh(job)
            ended = job.state not in ("pending", "running", "unknown") or job.removed_at is not None
        new = await sync_logs(session, store, job, final=ended, clock=clock)
        for rank, lines in sorted(new.items()):
            if node is None or rank == node:
                n = _node_of(job, rank)
                yield [tag_line(n, ln) for ln in lines]
        if ended:
            return
        await asyncio.sleep(POLL_S)
