"""``py-spy dump`` output as a person saved or pasted it, read back into a capture.

py-spy's text format (``src/dump.rs``, py-spy 0.3-0.4)::

    Process 2385922: python train.py --steps 10
    Python v3.10.12 (/usr/bin/python3.10)

    Thread 2385922 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2050)
        train (train.py:88)
    Thread 0x7F2A... (active+gil): "pt_autograd_0"
        ...

What people paste varies and is read too: several processes one after another, a
``[rankN]:`` (or ``rank N:``) prefix, one stack under several ``Thread ... "MainThread"``
headers (identical stacks folded by hand), ``N processes in:`` / ``N in:`` before a stack that
stands for N processes, ``Node NAME:`` lines, Markdown quoting, timestamps a collector added.
Only each process's main thread is kept (where a rank waits); py-spy's ``--native`` frames
(``func (lib.so)``) are kept as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from console.stacks.model import Capture, Frame, NodeCapture, ProcessStack, ThreadStack

_DECOR = re.compile(
    r"^(?:\s*>\s?)*"  # Markdown quoting
    r"(?:\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\s+)?"  # a collector's timestamp
    # a launcher's rank prefix; the indentation after it is the frame's own
    r"(?:\[?rank\s*(?P<rank>\d{1,7})\]?\s*:)?",
    re.IGNORECASE,
)
_PROCESS = re.compile(r"^Process (?P<pid>\d{1,10}):\s*(?P<cmd>.*)$")
_THREAD = re.compile(
    r"^Thread (?P<tid>0x[0-9A-Fa-f]{1,16}|\d{1,20}) \((?P<state>[a-z+]+)\)"
    r"(?::\s*\"(?P<name>[^\"]*)\")?"
)
_FRAME = re.compile(r"^\s{2,}(?P<name>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d{1,9}))?\)\s*$")
_COUNT = re.compile(r"^(?P<n>\d{1,5})\s+(?:process(?:es)?\s+)?(?:are\s+|is\s+)?in\s*:\s*$", re.I)
_NODE = re.compile(r"^(?:node|host)\s+(?P<node>\S+?)\s*:\s*$", re.I)


@dataclass
class _Block:
    """Threads read so far of one pasted stack (headers that share the frames below them)."""

    headers: list[tuple[int | None, str | None, bool]] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    count: int | None = None
    pid: int | None = None
    rank: int | None = None
    node: str | None = None


def looks_like_pyspy(text: str) -> bool:
    """Whether ``text`` holds a py-spy dump (a thread header followed by a frame line)."""
    lines = text.splitlines()
    for i, raw in enumerate(lines[:-1]):
        line = _DECOR.sub("", raw, count=1)
        if _THREAD.match(line.strip()) and _FRAME.match(_DECOR.sub("", lines[i + 1], count=1)):
            return True
    return False


def parse_pyspy_text(text: str, job_id: str = "-") -> Capture:
    """The processes of a pasted py-spy dump as one capture (see the module docstring):
    every main thread a process, its rank from a ``[rankN]:`` prefix when the paste has one,
    its pid from ``Process N:`` (else the main thread's id)."""
    blocks: list[_Block] = []
    cur: _Block | None = None
    pending_count: int | None = None
    pid: int | None = None
    node: str | None = None

    def close() -> None:
        nonlocal cur
        if cur is not None and cur.headers:
            blocks.append(cur)
        cur = None

    for raw in text.splitlines():
        m = _DECOR.match(raw)
        rank = int(m.group("rank")) if m and m.group("rank") else None
        body = raw[m.end() :] if m else raw
        if not body.strip():
            continue
        if (f := _FRAME.match(body)) is not None and cur is not None:
            line_no = f.group("line")
            file = f.group("file").strip()
            cur.frames.append(
                Frame(f.group("name").strip(), file, file, int(line_no) if line_no else None)
            )
            continue
        stripped = body.strip()
        if (p := _PROCESS.match(stripped)) is not None:
            close()
            pid = int(p.group("pid"))
            continue
        if (c := _COUNT.match(stripped)) is not None:
            close()
            pending_count = int(c.group("n"))
            continue
        if (n := _NODE.match(stripped)) is not None:
            close()
            node = n.group("node")
            continue
        if (t := _THREAD.match(stripped)) is not None:
            tid_text = t.group("tid")
            tid = int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text)
            header = (tid, t.group("name"), "active" in t.group("state"))
            if cur is not None and not cur.frames:
                cur.headers.append(header)  # headers folded over one stack
                continue
            close()
            cur = _Block(headers=[header], count=pending_count, pid=pid, rank=rank, node=node)
            pending_count, pid = None, None
            continue
        if not stripped.startswith("Python v"):  # a Process line's own second line
            pending_count, pid = None, None  # a count or a pid names the stack right after it
    close()
    return _capture(blocks, job_id)


def _capture(blocks: list[_Block], job_id: str) -> Capture:
    procs: list[ProcessStack] = []
    seen_pids: set[int] = set()
    nodes: dict[str | None, int] = {}
    for b in blocks:
        mains = [h for h in b.headers if h[1] in (None, "MainThread")]
        if not mains:
            continue  # another thread of the process above: its main thread is kept
        n_proc = b.count if b.count is not None and len(mains) == 1 else len(mains)
        node_rank = nodes.setdefault(b.node, len(nodes))
        for i in range(n_proc):
            tid, name, active = mains[min(i, len(mains) - 1)]
            pid = b.pid if b.pid is not None and i == 0 else tid
            if pid is not None and pid in seen_pids and i > 0:
                pid = None
            if pid is not None:
                seen_pids.add(pid)
            procs.append(
                ProcessStack(
                    node_rank=node_rank,
                    host=b.node or "-",
                    pid=pid if pid is not None else -1,
                    ppid=0,
                    role="rank",
                    rank=b.rank,
                    local_rank=None,
                    world_size=None,
                    gpu=None,
                    cmdline=(),
                    age_s=None,
                    threads=(ThreadStack(name, tid, active, tuple(b.frames)),),
                    error=None,
                )
            )
    by_node: dict[int, list[ProcessStack]] = {}
    for p in procs:
        by_node.setdefault(p.node_rank, []).append(p)
    host_of = {v: (k or "-") for k, v in nodes.items()}
    return Capture(
        job_id,
        0.0,
        [NodeCapture(n, host_of.get(n, "-"), tuple(ps)) for n, ps in sorted(by_node.items())],
        whole=False,
    )
