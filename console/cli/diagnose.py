"""``gpuconsole diagnose FILE... [-]``: the root cause of a failure from saved text.

Takes any text saved from any run, also runs gpuconsole did not launch: a job's log, a console
paste (timestamps, ``[rankN]:``, Slurm/Kubernetes prefixes, Markdown quoting), a kernel log,
docker's or nvidia-smi's errors, a pynvml traceback. Several files are read as one incident
(a training log beside the host's ``dmesg``). Prints the cause, the evidence lines, the fix
and the consequences (``--json``: one JSON object). Exit 0 when a cause was found, 1 when none,
2 when a file cannot be read.
"""

from __future__ import annotations

import io
import json
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from console.cli.base import main, out, run
from console.errors import UsageError

if TYPE_CHECKING:  # the rules are imported when a file is diagnosed (start-up)
    from console.diagnosis import Diagnosis, FactValue

__all__ = ["MAX_BYTES", "diagnosis_json"]

#: Read at most this much of each input (its end: failure summaries come last), bytes.
MAX_BYTES = 16 * 1024 * 1024
#: Evidence lines longer than this are shortened in the text output (characters).
SHOWN_CHARS = 300
_CHUNK = 1 << 20


def _shown(name: str) -> str:
    return "standard input" if name == "-" else name


def _tail(stream: BinaryIO) -> tuple[bytes, bool]:
    """The last :data:`MAX_BYTES` of a stream read to its end (a pipe, a FIFO such as
    ``<(kubectl logs ...)``); and whether anything before them was dropped."""
    kept = bytearray()
    cut = False
    while chunk := stream.read(_CHUNK):
        kept += chunk
        if len(kept) > 2 * MAX_BYTES:
            del kept[: len(kept) - MAX_BYTES]
            cut = True
    if len(kept) > MAX_BYTES:
        del kept[: len(kept) - MAX_BYTES]
        cut = True
    return bytes(kept), cut


def _read(name: str, stdin: BinaryIO | None = None) -> tuple[str, bool]:
    """The text of ``name`` (``-``: ``stdin``, default ``sys.stdin.buffer``), invalid UTF-8
    replaced; and whether it was cut.

    Raises:
        UsageError: the file cannot be read, is not a file or a stream, or is binary.
    """
    try:
        if name == "-":
            data, cut = _tail(stdin if stdin is not None else sys.stdin.buffer)
        else:
            path = Path(name)
            mode = path.stat().st_mode
            if stat.S_ISDIR(mode):
                raise UsageError(f"FILE: {name} is a directory", "give the log file itself")
            with path.open("rb") as f:
                if stat.S_ISREG(mode):
                    size = f.seek(0, 2)
                    f.seek(max(0, size - MAX_BYTES))
                    data, cut = f.read(MAX_BYTES), size > MAX_BYTES
                elif stat.S_ISFIFO(mode):
                    data, cut = _tail(f)
                else:
                    raise UsageError(
                        f"FILE: {name} is not a file or a pipe",
                        "give a saved log, or - for standard input",
                    )
    except OSError as e:
        raise UsageError(
            f"FILE: cannot read {_shown(name)}: {e.strerror or e}",
            "give a readable file, or - for standard input",
        ) from e
    if b"\0" in data[:8192]:
        raise UsageError(
            f"FILE: {_shown(name)} is binary, not text",
            "give the log as text (a core dump or an archive cannot be read)",
        )
    return data.decode("utf-8", errors="replace"), cut


def _fact(value: FactValue) -> Any:
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value


def diagnosis_json(d: Diagnosis | None, files: list[str]) -> dict[str, Any]:
    """The ``--json`` object: ``found``, ``kind``, ``summary``, ``ranks``, ``fix``,
    ``evidence``, ``facts`` (units in the keys), ``consequences`` (kind, summary, evidence),
    ``inputs`` (what the text was recognised as) and ``files``."""
    if d is None:
        return {"found": False, "files": files}
    return {
        "found": True,
        "kind": d.kind,
        "summary": d.summary,
        "ranks": list(d.ranks),
        "fix": d.fix,
        "evidence": list(d.evidence),
        "facts": {k: _fact(v) for k, v in d.facts.items()},
        "consequences": [
            {"kind": c.kind, "summary": c.summary, "evidence": list(c.evidence)}
            for c in d.consequences
        ],
        "inputs": list(d.inputs),
        "files": files,
    }


def _short(line: str) -> str:
    if len(line) <= SHOWN_CHARS:
        return line
    return f"{line[: SHOWN_CHARS - 40]} ... ({len(line):,} characters)"


def _human(d: Diagnosis) -> str:
    lines = [
        f"cause: {d.summary}",
        f"  ({d.kind}" + (f"; ranks {', '.join(map(str, d.ranks))})" if d.ranks else ")"),
    ]
    if d.evidence:
        lines.append("evidence:")
        lines += [f"  {_short(e)}" for e in d.evidence[:12]]
        if len(d.evidence) > 12:
            lines.append(f"  ... {len(d.evidence) - 12} more")
    lines.append(f"fix: {d.fix}")
    if d.consequences:
        lines.append("consequences (not the cause):")
        lines += [f"  - {c.kind}: {c.summary}" for c in d.consequences]
    if d.inputs:
        lines.append(f"read as: {', '.join(d.inputs)}")
    return "\n".join(lines)


@main.command("diagnose")
@click.argument("files", nargs=-1, required=True, metavar="FILE... (- for stdin)")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
def diagnose_command(files: tuple[str, ...], as_json: bool) -> None:
    """Name the root cause of a failure from saved logs (any run, any collector).

    Reads torchrun/PyTorch/NCCL logs, kernel logs (Xid), docker, NVIDIA Container Toolkit,
    nvidia-smi and NVML errors, Slurm output; several files are one incident. Exit 0 when a
    cause was found, 1 when none, 2 when a file cannot be read.
    """
    run(_diagnose(files, as_json))


async def _read_stdin() -> tuple[str, bool]:
    """:func:`_read` of standard input on a daemon thread: a read that blocks (a terminal, a
    pipe still open) must not hold the event loop, or the first Ctrl-C (asyncio.run cancels
    the command's task) would wait for the input's end; the thread is left to the process's
    exit."""
    import asyncio
    import threading

    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):  # an in-memory stdin (a test runner's)
        return _read("-")
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[str, bool]] = loop.create_future()

    def settle(result: tuple[str, bool] | None, error: BaseException | None) -> None:
        if done.done():  # cancelled by Ctrl-C meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            assert result is not None
            done.set_result(result)

    def work() -> None:
        try:
            # the raw descriptor, not sys.stdin.buffer: a thread blocked inside the buffered
            # reader holds its lock, and the interpreter's exit would abort on it
            result = _read("-", io.FileIO(fd, "rb", closefd=False))
        except BaseException as e:  # handed to the awaiting task, raised there
            loop.call_soon_threadsafe(settle, None, e)
            return
        loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=work, name="diagnose-stdin", daemon=True).start()
    return await done


async def _diagnose(files: tuple[str, ...], as_json: bool) -> None:
    texts: list[str] = []
    for name in files:
        text, cut = await _read_stdin() if name == "-" else _read(name)
        if cut:
            click.echo(
                f"note: {_shown(name)}: read its last {MAX_BYTES // 2**20} MiB only", err=True
            )
        texts.append(text)
    from console.diagnosis import diagnose

    found = diagnose("\n".join(texts))
    if as_json:
        out(json.dumps(diagnosis_json(found, list(files))))
    elif found is None:
        out("no known failure found in " + ", ".join(_shown(f) for f in files))
    else:
        out(_human(found))
    if found is None:
        raise SystemExit(1)
