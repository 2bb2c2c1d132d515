"""Host jobs without Docker (``runtime: host``): one node's process tree, its state and its log.

Shipped to the hosts as a content-addressed bundle (``~/.cache/gpuconsole/hostjob/<sha>/``,
see :mod:`remote.hostengine`) and run with the host's ``python3 -I -S`` (Python 3.8+, standard
library only). Every subcommand reads JSON on stdin where it needs data and answers JSON (or
log records) on stdout; secrets never travel in argv.

State on the host, one folder per node (mode 0700)::

    ~/.cache/gpuconsole/jobs/<job id label>/<name>/
        labels.json   the node's labels (the job's data contract, as on a container)
        spec.json     name, argv, cwd, gpu_ids, python, env names, non-secret env values,
                      created (Unix s)
        env.json      the environment's values (mode 0600); deleted by the supervisor once
                      it has read them
        run.json      written by the supervisor once the command runs: pid/pgid (the
                      supervisor leads the process group), child pid, start ticks of both
                      (/proc/PID/stat field 22, against PID reuse), boot id, unit name,
                      started_at (RFC 3339 with 9 fraction digits, as Docker writes it)
        exit.json     exit_code (128+N for signal N, like Docker), finished_at, by
                      (``supervisor``, ``stop`` or ``lost``), error (could not start)
        log           one record per line, see below
        supervisor.err  the supervisor's own stderr (a traceback if it crashed)

Every file but ``log`` is written whole (temp file, rename); ``exit.json`` is linked into
place, so the first writer wins (the supervisor, else ``stop``, else ``list`` finding the
supervisor gone).

State machine: ``created`` (spec.json only) -> ``running`` (run.json, supervisor alive) ->
``exited`` (exit.json). A supervisor that vanished without exit.json (SIGKILL of the group,
host reboot: boot id changed) is ``exited`` with 137 and finished_at = the log's mtime, and
``list`` records that. A folder whose start failed (argv[0] not found) is ``exited`` with 127
(126: not executable) and the reason in ``error``, as Docker reports it.

Log record (UTF-8, one per line, ordered by time)::

    <receive time, ns since the epoch> <o|e> <text>\\n

``o``/``e``: stdout/stderr. The text is the line without its newline, decoded as UTF-8 with
replacement (so it never holds ``\\n``; ``\\r`` stays). A line longer than
:data:`MAX_LINE_BYTES` is cut into records of that size; a last line without newline is
written at exit. Timestamps never go backwards within a file (``max(now, last)``, taken under
the writer lock), so file order is time order and ``logs --since-ns N`` (records with
``ts >= N``) plus the console's cursor (:class:`remote.logs.LogCursor`) lose and repeat
nothing.

The supervisor (``supervise DIR``, started by ``start``) runs detached from the SSH session:
a transient ``systemd-run --user`` unit where ``systemctl --user`` works and the user
lingers (:func:`systemd_user`; untested on the test hosts, which have no user manager), else
a double fork and ``setsid()`` (its own session and process group; it is also the
"child subreaper" of its tree, so orphans stay findable). It leads the process group and
the command runs in that same group. The node's processes are the group plus every
descendant of the supervisor (:func:`tree_members`): torchrun starts its workers with
``start_new_session=True`` (torch 2.13 ``subprocess_handler.py:66``), outside the group.
``stop``: SIGTERM to the group (torchrun forwards it to its workers), after the grace
SIGKILL to every process of the tree, then the group; it returns once none is left. The
supervisor catches SIGTERM/SIGHUP/SIGINT (a no-op handler, which exec resets to the default
in the child) so a signal to the group ends the command, not the bookkeeping. When the
command exits, the supervisor SIGKILLs whatever is left of the tree (as Docker tears a
container down when its main process ends), drains the pipes and writes exit.json. When the
node's
folder disappears (``rm -rf`` of the job's state), the supervisor stops the command
(SIGTERM, SIGKILL after 10 s): no job runs that ``ps`` could not find.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

#: Where node folders live, relative to the home directory.
JOBS_DIR = "~/.cache/gpuconsole/jobs"
#: Label holding the job id (the folder above the node's).
JOB_ID_LABEL = "io.gpuconsole.job-id"
#: Folder for nodes without a job id label.
NO_JOB = "_"
#: A line longer than this (bytes) is cut into records of this size.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Exit status reported for a supervisor that vanished without recording one (SIGKILL).
LOST_EXIT = 137
#: Seconds ``start`` waits for the supervisor to report the command running or failed.
START_WAIT_S = 15.0
#: Seconds between two looks at a followed log file / a stopping group.
POLL_S = 0.05
#: Grace (s) the supervisor gives its command when its folder was removed.
ORPHAN_GRACE_S = 10.0
#: Bytes ``read`` returns at most by default.
READ_LIMIT = 1 << 20
#: Exit status of a subcommand whose node does not exist.
EXIT_NOT_FOUND = 4
#: Exit status of a refused request (bad input, name in use, running node).
EXIT_REFUSED = 3

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_ENV_NAME_RE = re.compile(r"^[^=\0]+$")


class Refused(Exception):
    """A request this script turns down (exit :data:`EXIT_REFUSED`, message on stderr)."""


class NotFound(Exception):
    """No node of that name (exit :data:`EXIT_NOT_FOUND`)."""


# -- time and records ----------------------------------------------------------------------


def rfc3339_ns(ts_ns: int) -> str:
    """``ts_ns`` (ns since the epoch) as RFC 3339 UTC with 9 fraction digits, as Docker
    writes ``StartedAt``."""
    secs, ns = divmod(ts_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{ns:09d}Z"


def format_record(ts_ns: int, stream: str, text: str) -> bytes:
    """One log record: ``<ts_ns> <o|e> <text>\\n`` (``text`` must hold no ``\\n``)."""
    return f"{ts_ns} {stream} {text}\n".encode("utf-8", "surrogateescape")


def parse_record(line: str) -> tuple[int, str, str] | None:
    """``(ts_ns, stream, text)`` of one record (its trailing newline already removed), or
    ``None`` when the line is not a record."""
    ts, sep, rest = line.partition(" ")
    if not sep or not ts.isdigit() or len(rest) < 2 or rest[1] != " " or rest[0] not in "oe":
        return None
    return int(ts), rest[0], rest[2:]


class LogWriter:
    """Appends records to a node's log; shared by the stdout and stderr readers.

    Each record is one ``os.write`` on an ``O_APPEND`` descriptor; its timestamp is taken
    under the lock and never goes backwards, so the file is ordered by time.
    """

    def __init__(self, path: str, clock: Callable[[], int] = time.time_ns) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.lock = threading.Lock()
        self.last = 0
        self.clock = clock

    def write(self, stream: str, raw: bytes) -> None:
        """Write one line (``raw`` without its newline) read from ``stream`` (``o``/``e``)."""
        text = raw.decode("utf-8", "replace")
        with self.lock:
            ts = max(self.clock(), self.last)
            self.last = ts
            data = format_record(ts, stream, text)
            try:
                while data:
                    n = os.write(self.fd, data)
                    data = data[n:]
            except OSError:
                pass  # disk full or folder gone: the command keeps running

    def close(self) -> None:
        os.close(self.fd)


def pump(pipe: IO[bytes], stream: str, writer: LogWriter) -> None:
    """Copy ``pipe`` into ``writer`` line by line until EOF; a line without newline at EOF
    is written too, a line over :data:`MAX_LINE_BYTES` in pieces of that size."""
    cut = False  # the previous record was a cut piece of a longer line
    while True:
        raw = pipe.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if raw == b"\n" and cut:  # the end of a line that filled its last piece
            cut = False
            continue
        cut = not raw.endswith(b"\n")
        if not cut:
            raw = raw[:-1]
        writer.write(stream, raw)


# -- files ---------------------------------------------------------------------------------


def jobs_root(root: str | None = None) -> str:
    return os.path.expanduser(root or JOBS_DIR)


def write_json(path: str, data: Any, mode: int = 0o600) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same folder, rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def write_first(path: str, data: Any) -> bool:
    """Write ``data`` to ``path`` unless it exists (atomically; the first writer wins).
    Returns whether this call wrote it."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def read_json(path: str) -> Any:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def find_node(root: str, name: str) -> str:
    """The folder of node ``name``.

    Raises:
        NotFound: there is none.
    """
    if not _NAME_RE.match(name):
        raise NotFound(name)
    try:
        jobs = sorted(os.listdir(root))
    except OSError:
        jobs = []
    for job in jobs:
        d = os.path.join(root, job, name)
        if os.path.isfile(os.path.join(d, "spec.json")):
            return d
    raise NotFound(name)


def all_nodes(root: str) -> list[str]:
    out = []
    try:
        jobs = sorted(os.listdir(root))
    except OSError:
        return []
    for job in jobs:
        try:
            names = sorted(os.listdir(os.path.join(root, job)))
        except OSError:
            continue
        for name in names:
            d = os.path.join(root, job, name)
            if os.path.isfile(os.path.join(d, "spec.json")):
                out.append(d)
    return out


# -- processes -----------------------------------------------------------------------------


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgrp, start ticks)`` from ``/proc/PID/stat``, or ``None`` (no such
    process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state); ppid field 4, pgrp field 5, starttime field 22
    try:
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    st = proc_stat(pid)
    return st[3] if st else None


def _live(st: tuple[str, int, int, int] | None) -> bool:
    return st is not None and st[0] not in ("Z", "X")


def proc_table() -> dict[int, tuple[str, int, int, int]]:
    """Every process of ``/proc``: pid -> :func:`proc_stat`."""
    out = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None:
                out[int(entry)] = st
    return out


def tree_members(leader: int, pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid`` plus every live descendant of
    ``leader`` (the supervisor; also those that left the group with ``setsid``, as
    torchrun's workers do: ``start_new_session=True`` in torch's ``SubprocessHandler``).
    Orphans of the tree stay found because the supervisor is their subreaper. Without
    ``/proc``: ``[pgid]`` while ``killpg(pgid, 0)`` succeeds."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    table = proc_table()
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st[1], []).append(pid)
    seen = {pid for pid, st in table.items() if st[2] == pgid}
    if leader in table:
        seen.add(leader)
    todo = list(seen)
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in seen:
                seen.add(kid)
                todo.append(kid)
    return sorted(p for p in seen if _live(table.get(p)))


def supervisor_alive(run: dict[str, Any]) -> bool:
    """Whether the supervisor recorded in ``run`` (run.json) still runs: same boot, its PID
    alive, not a zombie, with the recorded start ticks."""
    if run.get("boot_id") and run.get("boot_id") != boot_id():
        return False
    st = proc_stat(int(run["pid"]))
    return _live(st) and st is not None and st[3] == run.get("ticks")


def our_processes(run: dict[str, Any]) -> list[int]:
    """Live processes of the node (:func:`tree_members` of its supervisor and group), or
    ``[]`` when the group is gone or its leader PID now belongs to another process (PID
    reuse)."""
    if run.get("boot_id") and run.get("boot_id") != boot_id():
        return []
    pgid = int(run["pgid"])
    leader = proc_stat(pgid)
    if _live(leader) and leader is not None and leader[3] != run.get("ticks"):
        return []  # the PID is another process now; its group is not ours
    return tree_members(int(run["pid"]), pgid)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux
    ``prctl(PR_SET_CHILD_SUBREAPER)``), so they stay in its tree; whether that worked."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # 36 = PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError, ImportError):
        return False


def exit_status(returncode: int) -> int:
    """Popen's return code as Docker reports it: 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def systemd_user() -> bool:
    """Whether jobs can be transient units of this user's systemd manager: ``systemctl
    --user`` answers and the user lingers (``loginctl enable-linger``). Without linger the
    manager, and every unit in it, stops when the user's last session ends, so a detached
    process group is the better choice (it survives logout unless logind's
    ``KillUserProcesses=yes``)."""
    if (
        not shutil.which("systemd-run")
        or not shutil.which("systemctl")
        or not shutil.which("loginctl")
    ):
        return False
    try:
        res = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
        )
        if res.returncode != 0:
            return False
        linger = subprocess.run(
            ["loginctl", "show-user", str(os.getuid()), "-p", "Linger"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return linger.stdout.strip() == b"Linger=yes"


# -- node state ----------------------------------------------------------------------------


def node_state(d: str, record: bool = True) -> dict[str, Any]:
    """The node in folder ``d`` as ``list`` reports it (see the module docstring)."""
    spec = read_json(os.path.join(d, "spec.json")) or {}
    labels = read_json(os.path.join(d, "labels.json")) or {}
    run = read_json(os.path.join(d, "run.json"))
    ex = read_json(os.path.join(d, "exit.json"))
    if ex is None and run is not None and not supervisor_alive(run):
        ex = read_json(os.path.join(d, "exit.json"))  # it may have just finished
        if ex is None:
            try:
                mtime = os.stat(os.path.join(d, "log")).st_mtime_ns
            except OSError:
                mtime = time.time_ns()
            lost = {
                "exit_code": LOST_EXIT,
                "finished_at": rfc3339_ns(mtime),
                "finished_ns": mtime,
                "by": "lost",
            }
            if record:
                try:
                    write_first(os.path.join(d, "exit.json"), lost)
                except OSError:
                    pass
                ex = read_json(os.path.join(d, "exit.json")) or lost
            else:
                ex = lost
    if ex is not None:
        status = "exited"
    elif run is not None:
        status = "running"
    else:
        status = "created"
    return {
        "name": spec.get("name", os.path.basename(d)),
        "labels": labels,
        "status": status,
        "exit_code": ex.get("exit_code") if ex else None,
        "error": (ex or {}).get("error", ""),
        "started_at": (run or {}).get("started_at") or (ex or {}).get("started_at"),
        "finished_at": ex.get("finished_at") if ex else None,
        "created": spec.get("created"),
        "gpu_ids": spec.get("gpu_ids", []),
        "pid": (run or {}).get("pid"),
        "pgid": (run or {}).get("pgid"),
        "unit": (run or {}).get("unit"),
    }


# -- subcommands ---------------------------------------------------------------------------


def cmd_create(root: str, req: dict[str, Any]) -> dict[str, Any]:
    """Make a node's folder from the request (see :func:`main`)."""
    name = str(req.get("name", ""))
    if not _NAME_RE.match(name):
        raise Refused(f"invalid node name {name!r}")
    labels = {str(k): str(v) for k, v in (req.get("labels") or {}).items()}
    argv = [str(a) for a in req.get("argv") or []]
    if not argv:
        raise Refused("empty command")
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    for k, v in env.items():
        if not _ENV_NAME_RE.match(k) or "\0" in v:
            raise Refused(f"invalid environment variable {k!r}")
    secret = {str(k) for k in req.get("secret_env") or []}
    cwd = req.get("cwd")
    if cwd is not None and not os.path.isabs(str(cwd)):
        raise Refused(f"working directory {cwd!r} is not an absolute path")
    job = labels.get(JOB_ID_LABEL) or NO_JOB
    if job != NO_JOB and not _NAME_RE.match(job):
        raise Refused(f"invalid job id label {job!r}")
    try:
        find_node(root, name)
    except NotFound:
        pass
    else:
        raise Refused(f"a node named {name!r} already exists")
    os.makedirs(os.path.join(root, job), mode=0o700, exist_ok=True)
    d = os.path.join(root, job, name)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        raise Refused(f"a node named {name!r} already exists") from None
    write_json(os.path.join(d, "labels.json"), labels)
    write_json(os.path.join(d, "env.json"), env)
    spec = {
        "name": name,
        "argv": argv,
        "cwd": cwd,
        "python": req.get("python"),
        "gpu_ids": [str(g) for g in req.get("gpu_ids") or []],
        "env_names": sorted(env),
        "env_public": {k: v for k, v in env.items() if k not in secret},
        "created": time.time(),
    }
    write_json(os.path.join(d, "spec.json"), spec)  # last: its presence makes the node
    return {"id": name}


def _detach(argv: list[str], err_path: str) -> None:
    """Run ``argv`` in a new session, detached (double fork), stdin/stdout to /dev/null and
    stderr to ``err_path``; returns once the intermediate child is reaped."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def cmd_start(root: str, name: str) -> dict[str, Any]:
    """Start node ``name``'s supervisor and wait until its command runs (or failed to)."""
    d = find_node(root, name)
    if os.path.exists(os.path.join(d, "run.json")) or os.path.exists(os.path.join(d, "exit.json")):
        st = node_state(d)
        if st["status"] == "running":
            return {"id": name, "status": "running"}
        raise Refused("node {!r} has already run ({}); create a new one".format(name, st["status"]))
    try:  # one start per node: the first request to make this file starts it
        os.close(
            os.open(os.path.join(d, "start.claim"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        )
    except FileExistsError:
        raise Refused(f"node {name!r} is being started by another request") from None
    script = os.path.abspath(__file__)
    sup = [sys.executable, "-I", "-S", script, "supervise", d]
    started = False
    if systemd_user():  # not exercised by the test hosts (no user manager there)
        unit = f"gpuconsole-{name}"
        write_json(os.path.join(d, "unit.json"), {"unit": unit})
        path = os.environ.get("PATH", "/usr/bin:/bin")
        argv = [
            "systemd-run",
            "--user",
            "--quiet",
            "--collect",
            "--unit",
            unit,
            "--property=KillMode=control-group",
            f"--setenv=PATH={path}",
            *sup,
        ]
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        started = res.returncode == 0
        if not started:  # e.g. linger off and no session bus: the plain way below
            os.unlink(os.path.join(d, "unit.json"))
    if not started:
        _detach(sup, os.path.join(d, "supervisor.err"))
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        ex = read_json(os.path.join(d, "exit.json"))
        if ex is not None and ex.get("error"):
            raise Refused(str(ex["error"]))
        if ex is not None or read_json(os.path.join(d, "run.json")) is not None:
            return {"id": name, "status": node_state(d)["status"]}
        time.sleep(POLL_S)
    err = ""
    try:
        with open(os.path.join(d, "supervisor.err"), encoding="utf-8", errors="replace") as f:
            err = f.read().strip().splitlines()[-1]
    except (OSError, IndexError):
        pass
    raise Refused(
        "the supervisor did not report within {:g} s{}".format(
            START_WAIT_S, (": " + err) if err else ""
        )
    )


def _noop(signum: int, frame: Any) -> None:
    """Signal handler of the supervisor: the signal is for its command, not for it."""


def cmd_supervise(d: str) -> int:
    """The supervisor (see the module docstring); returns its own exit status."""
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader (a systemd unit)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _noop)  # exec resets a handled signal to the default
    become_subreaper()
    spec = read_json(os.path.join(d, "spec.json")) or {}
    env_path = os.path.join(d, "env.json")
    values = read_json(env_path) or {}
    try:
        os.unlink(env_path)
    except OSError:
        pass
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}
    env.update(values)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.get("gpu_ids") or [])
    unit = (read_json(os.path.join(d, "unit.json")) or {}).get("unit")
    me = os.getpid()
    writer = LogWriter(os.path.join(d, "log"))
    started_ns = time.time_ns()
    try:
        child = subprocess.Popen(
            spec["argv"],
            cwd=spec.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
    except OSError as e:
        code = 126 if isinstance(e, PermissionError) else 127
        msg = "cannot run {!r}{}: {}".format(
            spec["argv"][0],
            (" in {}".format(spec["cwd"])) if spec.get("cwd") else "",
            e.strerror or e,
        )
        writer.write("e", ("gpuconsole: " + msg).encode())
        now = time.time_ns()
        write_first(
            os.path.join(d, "exit.json"),
            {
                "exit_code": code,
                "finished_at": rfc3339_ns(now),
                "finished_ns": now,
                "started_at": rfc3339_ns(started_ns),
                "by": "supervisor",
                "error": msg,
            },
        )
        return 0
    write_json(
        os.path.join(d, "run.json"),
        {
            "pid": me,
            "pgid": os.getpgid(0),
            "ticks": start_ticks(me),
            "child": child.pid,
            "child_ticks": start_ticks(child.pid),
            "boot_id": boot_id(),
            "unit": unit,
            "started_at": rfc3339_ns(started_ns),
            "started_ns": started_ns,
        },
    )
    readers = []
    for pipe, stream in ((child.stdout, "o"), (child.stderr, "e")):
        t = threading.Thread(target=pump, args=(pipe, stream, writer), daemon=True)
        t.start()
        readers.append(t)
    orphaned_at: float | None = None
    while True:
        try:
            rc = child.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            pass
        _reap_adopted(me, child.pid)
        if not os.path.isdir(d):  # the node's state was removed: end the command
            if orphaned_at is None:
                orphaned_at = time.monotonic()
                _signal_others(me, signal.SIGTERM, group_only=True)
            elif time.monotonic() - orphaned_at > ORPHAN_GRACE_S:
                _signal_others(me, signal.SIGKILL)
    code = exit_status(rc)
    # as Docker ends a container with its main process: nothing of the tree outlives it
    for _ in range(100):
        if not _signal_others(me, signal.SIGKILL):
            break
        time.sleep(POLL_S)
        _reap_adopted(me, None)
    for t in readers:
        t.join(5.0)
    writer.close()
    now = time.time_ns()
    try:
        write_first(
            os.path.join(d, "exit.json"),
            {
                "exit_code": code,
                "finished_at": rfc3339_ns(now),
                "finished_ns": now,
                "by": "supervisor",
            },
        )
    except OSError:
        pass  # the folder is gone
    return 0


def _reap_adopted(me: int, child: int | None) -> None:
    """Reap this supervisor's zombie children other than ``child`` (orphans of the tree it
    adopted as subreaper; ``child`` is reaped by its Popen)."""
    for pid, st in proc_table().items():
        if st[1] == me and st[0] == "Z" and pid != child:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal_others(me: int, sig: int, group_only: bool = False) -> list[int]:
    """Send ``sig`` to every live process of this node's tree (or only of its process group)
    but this one; returns them."""
    pgid = os.getpgid(0)
    if group_only:
        others = [p for p, st in proc_table().items() if st[2] == pgid and _live(st)]
    else:
        others = tree_members(me, pgid)
    others = [p for p in others if p != me]
    for p in others:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    return others


def _signal_node(run: dict[str, Any], sig: int) -> None:
    """SIGTERM: to the process group (the command forwards it, as torchrun does to its
    workers). SIGKILL: to every process of the tree (:func:`our_processes`), then the group."""
    members = our_processes(run)
    if not members:
        return
    if sig == signal.SIGKILL:  # the supervisor last (killpg): the tree is found through it
        for p in members:
            if p == int(run["pid"]):
                continue
            try:
                os.kill(p, sig)
            except OSError:
                pass
    try:
        os.killpg(int(run["pgid"]), sig)
    except OSError:
        pass


def _wait_gone(run: dict[str, Any], seconds: float) -> bool:
    """Wait up to ``seconds`` for every process of the node to be gone; whether they are."""
    deadline = time.monotonic() + seconds
    while our_processes(run):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def cmd_stop(root: str, name: str, grace: float) -> dict[str, Any]:
    """SIGTERM the node's process group, SIGKILL its whole tree after ``grace`` s; wait
    until none of it is left. Records the exit when the supervisor could not."""
    d = find_node(root, name)
    run = read_json(os.path.join(d, "run.json"))
    if run is None:
        return {"id": name, "status": node_state(d)["status"]}
    unit = run.get("unit")
    _signal_node(run, signal.SIGTERM)
    if not _wait_gone(run, grace):
        for _ in range(5):  # a process may fork while we kill
            _signal_node(run, signal.SIGKILL)
            if _wait_gone(run, 2.0):
                break
        if unit:
            subprocess.run(
                ["systemctl", "--user", "kill", "--signal=SIGKILL", unit],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
            )
        if not _wait_gone(run, 5.0):
            left = " ".join(map(str, our_processes(run)))
            raise Refused(f"processes of node {name!r} survive SIGKILL: {left}")
    # the supervisor normally recorded the command's status; when it was killed itself:
    ex = read_json(os.path.join(d, "exit.json"))
    if ex is None:
        now = time.time_ns()
        write_first(
            os.path.join(d, "exit.json"),
            {
                "exit_code": LOST_EXIT,
                "finished_at": rfc3339_ns(now),
                "finished_ns": now,
                "by": "stop",
            },
        )
    return {"id": name, "status": node_state(d)["status"]}


def cmd_rm(root: str, name: str, force: bool) -> dict[str, Any]:
    """Remove the node's folder (stopping it first with ``force``)."""
    d = find_node(root, name)
    if node_state(d)["status"] == "running":
        if not force:
            raise Refused(f"node {name!r} is running; stop it first or use --force")
        cmd_stop(root, name, 0.0)
    shutil.rmtree(d, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(d))  # the job's folder, once it holds no node
    except OSError:
        pass
    return {"id": name, "removed": True}


def cmd_list(root: str, labels: list[str], name: str | None) -> list[dict[str, Any]]:
    """Every node matching all ``k=v`` / ``k`` label filters (and ``name``)."""
    want: list[tuple[str, str | None]] = []
    for item in labels:
        k, sep, v = item.partition("=")
        want.append((k, v if sep else None))
    if name is not None:
        try:
            dirs = [find_node(root, name)]
        except NotFound:
            return []
    else:
        dirs = all_nodes(root)
    out = []
    for d in dirs:
        have = read_json(os.path.join(d, "labels.json")) or {}
        if all(k in have and (v is None or have[k] == v) for k, v in want):
            out.append(node_state(d))
    return out


def _record_start(f: IO[bytes], pos: int) -> int:
    """Offset of the first record that starts at or after ``pos`` (the file's size if
    none)."""
    if pos == 0:
        return 0
    f.seek(pos - 1)
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return f.tell()
        i = chunk.find(b"\n")
        if i >= 0:
            return f.tell() - len(chunk) + i + 1


def _ts_at(f: IO[bytes], pos: int) -> int | None:
    f.seek(pos)
    ts = f.read(24).partition(b" ")[0]
    return int(ts) if ts.isdigit() else None


def since_offset(f: IO[bytes], size: int, since: int) -> int:
    """Offset of the first record with ``ts >= since`` in a log of ``size`` bytes (records
    are ordered by time: bisection, then a scan of at most 64 KiB and one record)."""
    lo, hi = 0, size
    while hi - lo > (1 << 16):
        mid = (lo + hi) // 2
        start = _record_start(f, mid)
        if start >= hi:
            break
        ts = _ts_at(f, start)
        if ts is None or ts >= since:
            hi = start
        else:
            lo = start
    f.seek(lo)
    pos = lo
    for raw in f:
        if not raw.endswith(b"\n"):
            return pos
        ts_raw = raw.partition(b" ")[0]
        if ts_raw.isdigit() and int(ts_raw) >= since:
            return pos
        pos += len(raw)
    return pos


def tail_offset(f: IO[bytes], size: int, tail: int) -> int:
    """Offset where the last ``tail`` complete records start (read backwards in 1 MiB
    blocks)."""
    need = max(tail, 0) + 1
    pos = size
    while pos > 0:
        step = min(1 << 20, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        i = len(block)
        while True:
            i = block.rfind(b"\n", 0, i)
            if i < 0:
                break
            need -= 1
            if need == 0:
                return pos + i + 1
    return 0


def copy_records(path: str, since: int | None, tail: int | None, out: IO[bytes]) -> int:
    """Write the complete records of the log at ``path`` with ``ts >= since``, the last
    ``tail`` of them, to ``out``; returns the offset after the last one written (0 when the
    log does not exist yet)."""
    try:
        f = open(path, "rb")
    except OSError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        start = 0
        if since is not None:
            start = since_offset(f, size, since)
        if tail is not None:
            start = max(start, tail_offset(f, size, tail))
        f.seek(start)
        pos, pending = start, b""
        while pos < size:
            chunk = f.read(min(1 << 20, size - pos))
            if not chunk:
                break
            pos += len(chunk)
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                out.write(pending[:cut])
                pending = pending[cut:]
        out.flush()
        return pos - len(pending)


def _finished(d: str) -> bool:
    if os.path.exists(os.path.join(d, "exit.json")):
        return True
    run = read_json(os.path.join(d, "run.json"))
    if run is not None:
        return not supervisor_alive(run)
    return not os.path.isdir(d)


def _stdin_closed(timeout: float) -> bool:
    """Wait up to ``timeout`` s; whether stdin reached EOF meanwhile (the reader left)."""
    try:
        r, _, _ = select.select([sys.stdin.buffer], [], [], timeout)
    except (OSError, ValueError):
        time.sleep(timeout)
        return False
    if r:
        try:
            return os.read(sys.stdin.fileno(), 4096) == b""
        except OSError:
            return True
    return False


def cmd_logs(
    root: str, name: str, since: int | None, tail: int | None, follow: bool, out: IO[bytes]
) -> None:
    """Write the node's records, oldest first, to ``out``; with ``follow`` keep writing new
    ones until the command's exit was recorded and the log drained, or stdin closes."""
    d = find_node(root, name)
    path = os.path.join(d, "log")
    offset = copy_records(path, since, tail, out)
    if not follow:
        return
    pending = b""
    f: IO[bytes] | None = None
    try:
        while True:
            done = _finished(d)  # read before the last drain, so nothing is left behind
            if f is None:
                try:
                    f = open(path, "rb")
                    f.seek(offset)
                except OSError:
                    f = None
            chunk = f.read(1 << 20) if f is not None else b""
            if chunk:
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut:
                    out.write(pending[:cut])
                    out.flush()
                    pending = pending[cut:]
                continue
            if done:
                return
            if _stdin_closed(POLL_S):
                return
    finally:
        if f is not None:
            f.close()


def cmd_read(root: str, name: str, path: str, limit: int) -> dict[str, Any] | None:
    """Up to ``limit`` bytes of ``path`` (absolute, or relative to the node's folder, where
    the console puts torchrun's error file and the gang outcome), base64, or ``None``."""
    d = find_node(root, name)
    full = os.path.join(d, path)
    try:
        with open(full, "rb") as f:
            if not os.path.isfile(full):
                return None
            data = f.read(limit)
    except OSError:
        return None
    return {"path": full, "data": base64.b64encode(data).decode("ascii")}


def cmd_ping() -> dict[str, Any]:
    return {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "systemd_user": systemd_user(),
        "boot_id": boot_id(),
    }


def _arg(args: list[str], flag: str) -> str | None:
    if flag in args:
        i = args.index(flag)
        if i + 1 >= len(args):
            raise Refused(f"{flag} needs a value")
        value = args[i + 1]
        del args[i : i + 2]
        return value
    return None


def main(argv: list[str]) -> int:
    """``hostjob.py [--root DIR] <subcommand> ...``; see the module docstring."""
    args = list(argv)
    out = sys.stdout.buffer
    try:
        root = jobs_root(_arg(args, "--root"))
        if not args:
            raise Refused(
                "usage: hostjob.py [--root DIR] "
                "create|start|list|spec|stop|rm|logs|read|ping|supervise ..."
            )
        cmd, rest = args[0], args[1:]
        result: Any
        if cmd == "supervise":
            return cmd_supervise(rest[0])
        if cmd == "create":
            req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
            result = cmd_create(root, req)
        elif cmd == "start":
            result = cmd_start(root, rest[0])
        elif cmd == "list":
            name = _arg(rest, "--name")
            labels = []
            while "--label" in rest:
                labels.append(_arg(rest, "--label") or "")
            result = cmd_list(root, labels, name)
        elif cmd == "stop":
            result = cmd_stop(root, rest[0], float(rest[1]))
        elif cmd == "rm":
            force = "--force" in rest
            rest = [a for a in rest if a != "--force"]
            result = cmd_rm(root, rest[0], force)
        elif cmd == "logs":
            since = _arg(rest, "--since-ns")
            tail = _arg(rest, "--tail")
            follow = "--follow" in rest
            rest = [a for a in rest if a != "--follow"]
            cmd_logs(
                root,
                rest[0],
                int(since) if since is not None else None,
                int(tail) if tail is not None else None,
                follow,
                out,
            )
            return 0
        elif cmd == "read":
            limit = _arg(rest, "--limit")
            result = cmd_read(
                root, rest[0], rest[1], int(limit) if limit is not None else READ_LIMIT
            )
        elif cmd == "spec":
            d = find_node(root, rest[0])
            result = {
                "spec": read_json(os.path.join(d, "spec.json")) or {},
                "labels": read_json(os.path.join(d, "labels.json")) or {},
            }
        elif cmd == "ping":
            result = cmd_ping()
        else:
            raise Refused(f"unknown subcommand {cmd!r}")
    except NotFound as e:
        sys.stderr.write(f"no such node: {e}\n")
        return EXIT_NOT_FOUND
    except Refused as e:
        sys.stderr.write(f"{e}\n")
        return EXIT_REFUSED
    except (IndexError, ValueError) as e:
        sys.stderr.write(f"bad arguments {argv!r}: {e}\n")
        return EXIT_REFUSED
    except BrokenPipeError:
        return 0
    out.write(json.dumps(result).encode("utf-8") + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
