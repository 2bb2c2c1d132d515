"""``gpuconsole diagnose FILE... [-]``: the root cause of a failure from saved text.

Takes any text saved from any run, also runs gpuconsole did not launch: a job's log, a console
paste (timestamps, ``[rankN]:``, Slurm/Kubernetes prefixes, Markdown quoting), a kernel log,
docker's or nvidia-smi's errors, a pynvml traceback. Several files are read as one incident
(a training log beside the host's ``dmesg``). Prints the cause, the evidence lines, the fix
and the consequences (``--json``: one JSON object). Exit 0 when a cause was found, 1 when none,
2 when a file cannot be read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from console.cli.base import main, out, run
from console.diagnosis import Diagnosis, FactValue, diagnose
from console.errors import UsageError

__all__ = ["MAX_BYTES", "diagnosis_json"]

#: Read at most this much of each file (its end: failure summaries come last), bytes.
MAX_BYTES = 64 * 1024 * 1024


def _read(name: str) -> tuple[str, bool]:
    """The text of ``name`` (``-``: stdin), invalid UTF-8 replaced; and whether it was cut."""
    try:
        if name == "-":
            data = sys.stdin.buffer.read()
        else:
            with Path(name).open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - MAX_BYTES))
                data = f.read(MAX_BYTES)
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror or e}",
                         "give a readable file, or - for standard input") from e
    cut = name != "-" and len(data) >= MAX_BYTES
    if name == "-" and len(data) > MAX_BYTES:
        data, cut = data[-MAX_BYTES:], True
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
        "consequences": [{"kind": c.kind, "summary": c.summary, "evidence": list(c.evidence)}
                         for c in d.consequences],
        "inputs": list(d.inputs),
        "files": files,
    }


def _human(d: Diagnosis) -> str:
    lines = [f"cause: {d.summary}", f"  ({d.kind}" + (
        f"; ranks {', '.join(map(str, d.ranks))})" if d.ranks else ")")]
    if d.evidence:
        lines.append("evidence:")
        lines += [f"  {e}" for e in d.evidence[:12]]
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


async def _diagnose(files: tuple[str, ...], as_json: bool) -> None:
    texts: list[str] = []
    for name in files:
        text, cut = _read(name)
        if cut:
            click.echo(f"note: {name}: read its last {MAX_BYTES // 2**20} MiB only", err=True)
        texts.append(text)
    found = diagnose("\n".join(texts))
    if as_json:
        out(json.dumps(diagnosis_json(found, list(files))))
    elif found is None:
        out("no known failure found in " + ", ".join(files))
    else:
        out(_human(found))
    if found is None:
        raise SystemExit(1)
