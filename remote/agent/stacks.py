"""One node's Python stacks: every torchrun rank, its agent and the ranks' children, by py-spy.

Shipped to the hosts in a content-addressed bundle beside the ``py-spy`` binary (see
:mod:`remote.stacks`) and run by a Python 3.8+ with the standard library only: in a sidecar
container that joins a job container's PID namespace (Docker), on the host as the job's user
(``runtime: host``) or inside the job's allocation (``srun --overlap``, Slurm).

It reads ``/proc`` for the processes it may look at (all of its PID namespace but itself and
its own children, narrowed by ``--root-pid`` and ``--env``), tells their roles apart by what
torchrun gives each process (torch/distributed/run.py and torchelastic's
``LocalElasticAgent`` set ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``, ``WORLD_SIZE`` and
``LOCAL_WORLD_SIZE`` in every worker's environment):

- ``rank``: a process with ``RANK`` and ``LOCAL_RANK`` whose ancestors have none (a training
  process torchrun started);
- ``child``: a descendant of a rank (a DataLoader worker, a compile worker), with its rank;
- ``agent``: torchrun itself (``torch.distributed.run``/``torchrun``/``launch`` in argv);
- ``other``: the rest (a shell, gpuconsole's gang supervisor); listed, never dumped.

Each rank, agent and child is dumped with ``py-spy dump --json`` (py-spy's JSON: a list of
threads, each ``{pid, thread_id, thread_name, os_thread_id, active, owns_gil, frames: [{name,
filename, module, short_filename, line, locals, ...}]}``, innermost frame first), several at
once, each with a time limit. py-spy pauses the process while it reads it (a few ms).

Prints one JSON document (``"version": 1``)::

    {"version": 1, "hostname": str, "time": unix s, "py_spy": "py-spy 0.4.3" | null,
     "uid": int, "ptrace_scope": int | null, "error": str | null,
     "processes": [{"pid", "ppid", "uid", "role", "rank", "local_rank", "group_rank",
                    "world_size", "parent_rank", "cmdline": [str], "age_s", "state",
                    "exe": str | null, "threads": [py-spy thread] | null,
                    "error": str | null,
                    "flight_recorder": {"path", "summary", "source": "pipe" | "file",
                                        "age_s", "dump_zlib_b64"} | {"path", "error"}}]}

``flight_recorder`` only with ``--flight-recorder``, on ranks. One capture runs on a host at
a time (:func:`one_at_a_time`).

``error`` at the top: nothing could be dumped (py-spy missing or not runnable). Exit status
0 whenever the document was printed.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

FORMAT_VERSION = 1
#: argv words that make a process torchrun's elastic agent
AGENT_WORDS = ("torch.distributed.run", "torchrun", "torch.distributed.launch")
#: at most this many py-spy processes at once
PARALLEL = 8
#: what py-spy says when the kernel refused to let it read the process
PERMISSION_WORDS = ("Permission denied", "Operation not permitted", "os error 1)", "os error 13)")


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


class Proc:
    """What ``/proc/PID`` says of one process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ppid = 0
        self.state = "?"
        self.start_ticks = 0
        self.uid: int | None = None
        self.cmdline: list[str] = []
        self.env: dict[str, str] | None = None
        stat = read(f"/proc/{pid}/stat")
        if stat is not None:
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            rest = stat.decode("utf-8", "replace").rsplit(")", 1)[-1].split()
            if len(rest) > 19:
                self.state, self.ppid, self.start_ticks = rest[0], int(rest[1]), int(rest[19])
        raw = read(f"/proc/{pid}/cmdline")
        if raw:
            self.cmdline = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]
        status = read(f"/proc/{pid}/status")
        for line in (status or b"").decode("utf-8", "replace").splitlines():
            if line.startswith("Uid:"):
                self.uid = int(line.split()[1])
        env = read(f"/proc/{pid}/environ")
        if env is not None:
            self.env = {}
            for item in env.split(b"\0"):
                k, sep, v = item.partition(b"=")
                if sep:
                    self.env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")

    def env_int(self, key: str) -> int | None:
        v = (self.env or {}).get(key)
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None

    def is_worker(self) -> bool:
        return self.env_int("RANK") is not None and self.env_int("LOCAL_RANK") is not None

    def is_agent(self) -> bool:
        words = " ".join(self.cmdline[:4])
        return any(w in words for w in AGENT_WORDS)


def all_procs() -> dict[int, Proc]:
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = Proc(int(name))
            if p.cmdline or p.ppid:  # gone meanwhile, or a kernel thread
                procs[p.pid] = p
    return procs


def ancestors(procs: dict[int, Proc], pid: int) -> list[int]:
    out, seen = [], {pid}
    while pid in procs and procs[pid].ppid not in seen and procs[pid].ppid > 0:
        pid = procs[pid].ppid
        seen.add(pid)
        out.append(pid)
    return out


def select(
    procs: dict[int, Proc], root: int | None, env: list[tuple[str, str]], me: int
) -> list[Proc]:
    """The processes to report: not this script or its children, under ``root`` when
    given, with every ``env`` pair in their environment."""
    chosen = []
    for p in procs.values():
        up = ancestors(procs, p.pid)
        if p.pid == me or me in up:
            continue
        if root is not None and p.pid != root and root not in up:
            continue
        if env and (p.env is None or any(p.env.get(k) != v for k, v in env)):
            continue
        chosen.append(p)
    return sorted(chosen, key=lambda p: p.pid)


def roles(procs: dict[int, Proc], chosen: list[Proc]) -> dict[int, tuple[str, int | None]]:
    """pid -> (role, the rank a child belongs to)."""
    out: dict[int, tuple[str, int | None]] = {}
    for p in chosen:
        up = [procs[a] for a in ancestors(procs, p.pid) if a in procs]
        rank_above = next((a for a in up if a.is_worker()), None)
        if rank_above is not None:
            out[p.pid] = ("child", rank_above.env_int("RANK"))
        elif p.is_worker():
            out[p.pid] = ("rank", None)
        elif p.is_agent():
            out[p.pid] = ("agent", None)
        else:
            out[p.pid] = ("other", None)
    return out


def py_spy_version(py_spy: str) -> tuple[str | None, str | None]:
    try:
        res = subprocess.run([py_spy, "--version"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"py-spy cannot run here: {e}"
    text = res.stdout.decode("utf-8", "replace").strip()
    if res.returncode != 0 or not text:
        why = res.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"py-spy cannot run here: {why[-1] if why else res.returncode}"
    return text, None


def first_reason(text: str) -> str:
    """py-spy's own error line (it prints ``Error: ...`` then a Rust backtrace)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Error:"):
            return line[len("Error:") :].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


def resume(pid: int) -> None:
    """SIGCONT ``pid``: a py-spy ended in the middle of a read can leave its target stopped
    (py-spy issues 390, 587); a running process ignores it."""
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass


def dump(py_spy: str, pid: int, native: bool, timeout: float) -> tuple[object, str | None]:
    if timeout < 1.0:
        return None, "not read: the node's time for stacks was used up"
    argv = [py_spy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    try:
        res = subprocess.run(argv, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        resume(pid)
        return None, f"py-spy did not answer within {timeout:g} s"
    except OSError as e:
        return None, f"py-spy cannot run: {e}"
    if res.returncode < 0:  # py-spy itself was killed: its target may be left stopped
        resume(pid)
    if res.returncode != 0:
        reason = first_reason(res.stderr.decode("utf-8", "replace"))
        if any(w in reason for w in PERMISSION_WORDS):
            reason = "permission denied: " + reason
        return None, reason
    try:
        threads = json.loads(res.stdout.decode("utf-8", "replace"))
    except ValueError:
        return None, "py-spy printed no JSON: " + first_reason(
            res.stdout.decode("utf-8", "replace")
        )
    return threads, None


class PlainUnpickler(pickle.Unpickler):
    """Reads a Flight Recorder dump: builtin containers and scalars only (a dump is a dict of
    lists, tuples, strings and numbers); any class reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not in a Flight Recorder dump")


#: entries of each rank's buffer kept in the summary (the newest)
FR_ENTRIES = 24


def fr_summary(data: bytes) -> dict[str, Any]:
    """A Flight Recorder dump (PyTorch's pickle, ``FlightRecorder.hpp`` ``dump``: ``version``,
    ``pg_config``, ``pg_status`` {pg: last_enqueued/started/completed_collective}, ``entries``
    [{collective_seq_id, profiling_name, state, input_sizes, process_group, frames...}]) as
    JSON data: its version, each process group's status and the newest entries."""
    import io

    dump = PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(dump, dict):
        raise ValueError("not a Flight Recorder dump")
    entries = []
    for e in (dump.get("entries") or [])[-FR_ENTRIES:]:
        pg = e.get("process_group") or ("", "")
        frames = e.get("frames") or []
        top = next((f for f in frames if "torch/distributed/" not in str(f.get("filename"))), None)
        entries.append(
            {
                "seq": e.get("collective_seq_id"),
                "p2p_seq": e.get("p2p_seq_id"),
                "op": e.get("profiling_name"),
                "state": e.get("state"),
                "pg": str(pg[0]) if pg else "",
                "pg_desc": str(pg[1]) if len(pg) > 1 else "",
                "sizes": e.get("input_sizes"),
                "p2p": bool(e.get("is_p2p")),
                "where": "{} ({}:{})".format(
                    top.get("name"), str(top.get("filename")).rsplit("/", 1)[-1], top.get("line")
                )
                if top
                else None,
            }
        )
    return {
        "version": dump.get("version"),
        "pg_status": dump.get("pg_status") or {},
        "pg_config": dump.get("pg_config") or {},
        "entries": entries,
    }


def fr_dump(p: Proc, wait_s: float) -> dict[str, Any]:
    """Ask a rank for its Flight Recorder buffer through its dump pipe and read the dump.

    PyTorch's NCCL watchdog makes the pipe ``$TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe``
    and dumps to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (older: ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``)
    when anything is written to it
    (ProcessGroupNCCL.cpp, ``DumpPipe``). The paths are the rank's own: they are opened under
    ``/proc/PID/root``, so a sidecar in another mount namespace reaches them too. Returns
    ``{"path", "summary"}`` (:func:`fr_summary`) or ``{"path", "error"}``.
    """
    import errno
    import stat as stat_mod

    env = p.env or {}
    rank = p.env_int("RANK")
    pipe_prefix = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    # the current name first, then the deprecated one, then PyTorch's default
    dump_prefix = (
        env.get("TORCH_FR_DUMP_TEMP_FILE")
        or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        or "/tmp/nccl_trace_rank_"
    )
    root = f"/proc/{p.pid}/root"
    dump = f"{dump_prefix}{rank}"
    if not pipe_prefix:
        return earlier_dump(root, dump, "no dump pipe: TORCH_NCCL_DEBUG_INFO_PIPE_FILE is not set")
    pipe = f"{pipe_prefix}{rank}.pipe"
    try:
        before = os.stat(root + dump).st_mtime_ns
    except OSError:
        before = 0
    try:
        if not stat_mod.S_ISFIFO(os.stat(root + pipe).st_mode):
            return earlier_dump(root, dump, f"{pipe} is not a pipe")
        fd = os.open(root + pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENXIO):
            why = f"no dump pipe {pipe} (PyTorch makes it for NCCL process groups only)"
            return earlier_dump(root, dump, why)
        return earlier_dump(root, dump, f"cannot open {pipe}: {e.strerror or e}")
    try:
        os.write(fd, b"1\n")
    except OSError as e:  # the reader went away between the open and the write
        return earlier_dump(root, dump, f"cannot write {pipe}: {e.strerror or e}")
    finally:
        os.close(fd)
    deadline = time.monotonic() + wait_s
    size = -1
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            st = os.stat(root + dump)
        except OSError:
            continue
        if st.st_mtime_ns > before and st.st_size > 0:
            if st.st_size == size:  # written whole
                data = read(root + dump)
                if data:
                    return dump_record(dump, data, "pipe", 0.0)
            size = st.st_size
    return {"path": dump, "error": f"no dump in {wait_s:g} s after the pipe was written"}


#: a dump larger than this is summarised but not sent whole (PyTorch's analyser then lacks it)
FR_RAW_MAX = 32 << 20


def dump_record(path: str, data: bytes, source: str, age_s: float) -> dict[str, Any]:
    """A rank's dump as the document carries it: its summary (:func:`fr_summary`), the dump
    itself (zlib, base64: PyTorch's analyser needs every rank's whole dump in one place),
    where it came from (``pipe``: asked for now; ``file``: written before, by the NCCL
    watchdog on a timeout or by the job) and its age in seconds."""
    import base64
    import zlib

    try:
        summary = fr_summary(data)
    except Exception as e:  # any unpickling failure: said, never raised
        return {"path": path, "error": f"the dump could not be read: {e}"}
    record: dict[str, Any] = {"path": path, "summary": summary, "source": source}
    record["age_s"] = round(age_s, 1)
    if len(data) <= FR_RAW_MAX:
        record["dump_zlib_b64"] = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
    else:
        record["dump_left_out"] = f"{len(data)} bytes, over {FR_RAW_MAX}"
    return record


def earlier_dump(root: str, path: str, why: str) -> dict[str, Any]:
    """The dump a rank wrote before (``TORCH_FR_DUMP_TEMP_FILE<rank>``: the NCCL watchdog
    writes it when a collective times out, with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``), when it
    cannot be asked for a new one (``why``)."""
    try:
        st = os.stat(root + path)
    except OSError:
        return {"path": path, "error": why}
    data = read(root + path)
    if not data:
        return {"path": path, "error": why}
    return dump_record(path, data, "file", max(0.0, time.time() - st.st_mtime))


def secret_values(procs: Iterable[Proc], names: list[str]) -> list[tuple[str, str]]:
    """The values the variables ``names`` lists have in any of ``procs`` (the job's whole
    PID namespace or process tree: a child started with a clean environment still carries
    the value its parent had, e.g. on its command line), 4 characters or more, longest
    first."""
    found = set()
    for p in procs:
        env = p.env or {}
        for n in names:
            if len(env.get(n) or "") >= 4:
                found.add((n, env[n]))
    return sorted(found, key=lambda nv: (-len(nv[1]), nv[0]))


def masked(p: Proc, values: list[tuple[str, str]]) -> list[str]:
    """``p``'s command line with each secret value (:func:`secret_values`) replaced by
    ``${NAME}``."""
    out = []
    for arg in p.cmdline:
        for name, value in values:
            arg = arg.replace(value, "${" + name + "}")
        out.append(arg)
    return out


def python_of(p: Proc) -> str | None:
    """The interpreter a rank runs, as a path in its own file system: its ``argv[0]`` when
    absolute (torchrun starts each rank with its own ``sys.executable``, which keeps a
    virtual environment's path), else ``/proc/PID/exe`` (the binary itself: a venv's
    symlink resolved)."""
    if p.cmdline and p.cmdline[0].startswith("/"):
        return p.cmdline[0]
    try:
        return os.readlink(f"/proc/{p.pid}/exe")
    except OSError:
        return None


def one_at_a_time(wait_s: float) -> Any:
    """Hold this host's capture lock (``flock`` on this script, which every capture on the
    host shares, also from containers): py-spy attaches to a process once at a time, so a
    second capture at the same moment would read nothing. Returns the held file, or ``None``
    when another capture kept it ``wait_s`` seconds."""
    import fcntl

    f = open(os.path.abspath(__file__), "rb")
    end = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except OSError:
            if time.monotonic() >= end:
                f.close()
                return None
            time.sleep(0.2)


def ptrace_scope() -> int | None:
    raw = read("/proc/sys/kernel/yama/ptrace_scope")
    try:
        return int(raw.decode().strip()) if raw else None
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--py-spy", required=True, help="the py-spy binary")
    ap.add_argument("--native", action="store_true", help="native frames too (py-spy --native)")
    ap.add_argument("--root-pid", type=int, help="only this process and its descendants")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE every process has")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per py-spy dump")
    ap.add_argument(
        "--deadline", type=float, default=70.0, help="seconds for the whole node (then say so)"
    )
    ap.add_argument(
        "--mask-env",
        action="append",
        default=[],
        help="NAME of a secret variable: its value in a command line is reported as ${NAME}",
    )
    ap.add_argument(
        "--flight-recorder",
        action="store_true",
        help="also ask every rank for its Flight Recorder dump (its NCCL dump pipe)",
    )
    a = ap.parse_args(argv)
    end = time.monotonic() + a.deadline  # the wait for the capture lock counts too
    env = [(k, v) for k, _, v in (e.partition("=") for e in a.env if "=" in e)]
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    up_raw = read("/proc/uptime")
    uptime = float(up_raw.split()[0]) if up_raw else None
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "hostname": socket.gethostname(),
        "time": time.time(),
        "uid": os.getuid(),
        "ptrace_scope": ptrace_scope(),
        "py_spy": None,
        "error": None,
        "processes": [],
    }
    version, error = py_spy_version(a.py_spy)
    doc["py_spy"], doc["error"] = version, error
    held = one_at_a_time(a.deadline / 2)
    if held is None:
        doc["error"] = doc["error"] or (
            f"another capture of this host's processes ran for {a.deadline / 2:g} s "
            "(py-spy reads a process once at a time); try again when it is done"
        )
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    procs = all_procs()
    chosen = select(procs, a.root_pid, env, os.getpid())
    kinds = roles(procs, chosen)
    secrets = secret_values(list(procs.values()) + chosen, a.mask_env)
    records: list[dict[str, Any]] = []
    for p in chosen:
        role, parent_rank = kinds[p.pid]
        records.append(
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "uid": p.uid,
                "role": role,
                "rank": p.env_int("RANK") if role == "rank" else None,
                "local_rank": p.env_int("LOCAL_RANK") if role == "rank" else None,
                "group_rank": p.env_int("GROUP_RANK") if role == "rank" else None,
                "world_size": p.env_int("WORLD_SIZE") if role == "rank" else None,
                "parent_rank": parent_rank,
                "cmdline": masked(p, secrets)[:64],
                "age_s": (
                    round(uptime - p.start_ticks / ticks, 3)
                    if uptime is not None and p.start_ticks
                    else None
                ),
                "state": p.state,
                "exe": python_of(p) if role == "rank" else None,
                "threads": None,
                "error": None,
            }
        )
    # ranks first, then agents, then children: what is read before the deadline matters most
    order = {"rank": 0, "agent": 1, "child": 2}
    wanted = sorted((r for r in records if r["role"] != "other"), key=lambda r: order[r["role"]])

    def left(cap: float) -> float:
        return float(max(0.0, min(cap, end - time.monotonic())))

    def one_dump(r: dict[str, Any]) -> tuple[object, str | None]:
        return dump(a.py_spy, int(r["pid"]), a.native, left(a.timeout))

    def one_fr(p: Proc) -> dict[str, Any]:
        if left(15.0) < 2.0:
            return {"path": None, "error": "not asked: the node's time for stacks was used up"}
        try:
            return fr_dump(p, left(15.0))
        except Exception as e:  # said for that rank, never the end of the document
            return {"path": None, "error": f"{type(e).__name__}: {e}"}

    try:
        if error is None and wanted:
            with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
                results = list(pool.map(one_dump, wanted))
            for r, (threads, why) in zip(wanted, results):
                r["threads"], r["error"] = threads, why
        if a.flight_recorder:
            ranks = [(r, procs[int(r["pid"])]) for r in records if r["role"] == "rank"]
            with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
                dumps = list(pool.map(lambda rp: one_fr(rp[1]), ranks))
            for (r, _), d in zip(ranks, dumps):
                r["flight_recorder"] = d
    except Exception as e:  # whatever was read is still printed, with why the rest is not
        doc["error"] = doc["error"] or f"{type(e).__name__}: {e}"
    finally:
        for r in wanted:  # left stopped by a py-spy that ended mid-read (it was not before)
            if r["state"] not in ("T", "t") and Proc(int(r["pid"])).state in ("T", "t"):
                resume(int(r["pid"]))
    doc["processes"] = records
    # default=repr: a dump may hold bytes or sets (the unpickler allows builtin types)
    sys.stdout.write(json.dumps(doc, default=repr) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
