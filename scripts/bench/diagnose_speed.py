"""``diagnose`` over a big real-shaped log, against ``grep -E`` of the rules' keywords.

The log (built here, ``--mib`` MiB, deterministic): a long torchrun ``--tee`` run of 8 local
ranks, made of the shapes the corpus's real logs show:

- step lines as the device recording prints them (``tests/data/device/host-runtime-h200/
  follow.out``: ``step N/M loss L samples/s S world_size W``) behind torchrun's
  ``[default<local rank>]:`` prefix, some with an ISO timestamp and ANSI colours;
- every 100,000 lines (an epoch: new communicators, an evaluation barrier), a burst of 64
  ``NCCL_DEBUG=INFO`` lines, the corpus's own ``NCCL INFO`` lines that are not error traces
  (``Ring``, ``Channel``, ``Bootstrap``, ``NET/IB``, ``comm ... Init COMPLETE``) under
  ``host:pid:tid [dev]``, and the ``c10d_logger`` UserWarning the recording shows;
- a tqdm bar redrawn 4 times with ``\\r`` every 100 lines, a coloured (ANSI) timestamp on
  every 10th line;

then, at the end, one real failure: a whole corpus text (``--tail``, default the torch,
NCCL, CUDA OOM and Xid cases below). The diagnosis of the big log must be the diagnosis of
that text alone (checked, printed).

Measured: wall time of ``console.diagnosis.diagnose(text)`` (best of ``--rounds``, in this
process, the text already in memory); with ``--baseline CHECKOUT`` the same call in a child
process importing another checkout (the code before a change; one round, first tail only);
``grep -E -i -c`` of the engine's words (:func:`console.diagnosis.engine.keywords`, the same
alternation) on the same text in a file (page cache warm), and ``grep -c`` of one fixed word
as grep's floor. Prints a markdown table: MiB/s and the ratios.

Run::

    .venv/bin/python scripts/bench/diagnose_speed.py [--mib 100] [--rounds 3]
        [--tail torch/trc-014.txt ...] [--baseline /path/to/old/checkout] [--unfiltered]
        [--profile out.prof]

``--unfiltered`` also times the engine with its pre-filter off (every rule on every line;
one round), the reference the corpus test compares against.
"""

from __future__ import annotations

import argparse
import cProfile
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from console.diagnosis import engine  # noqa: E402

DATA = ROOT / "tests" / "data"
CORPUS = DATA / "diagnose" / "corpus"
#: A torchelastic summary over a rank's traceback, a CUDA OOM, an NCCL watchdog timeout, an Xid.
DEFAULT_TAILS = (
    "torch/trc-014.txt",
    "torch/trc-015.txt",
    "nccl/nccl-003.txt",
    "gpu/gpu-001.txt",
)
_STEP = re.compile(r"step \d+/\d+ loss [\d.]+ samples/s [\d.]+ world_size \d+")
_NCCL_NOISE = re.compile(
    r"NCCL INFO ((?:Ring|Channel|Trees|Bootstrap|NET/|Using network|Connected all|comm 0x|"
    r"cudaDriverVersion|Setting affinity|NCCL_)[^\n]*)"
)
_NOT_NOISE = re.compile(r"-> ?\d+|closed|error|fail|WARN|abort|Abort", re.I)


def _nccl_noise() -> list[str]:
    """The corpus's NCCL INFO lines that are ordinary start-up chatter."""
    out: set[str] = set()
    for path in sorted(CORPUS.glob("*/*.txt")):
        for m in _NCCL_NOISE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if not _NOT_NOISE.search(m[1]) and len(m[1]) > 20:
                out.add(m[1].rstrip())
    return sorted(out)


def _warning() -> list[str]:
    text = (DATA / "device" / "host-runtime-h200" / "follow.out").read_text()
    lines = [ln.split("] ", 1)[1] for ln in text.splitlines() if "UserWarning" in ln]
    return [lines[0], "  return func(*args, **kwargs)"]


def build_log(mib: float, tail: str, seed: int = 26, nccl_every: int = 1000) -> str:
    """``mib`` MiB of training output (see the module docstring), then ``tail``; the NCCL
    burst and the warning every ``nccl_every`` blocks of 100 step lines."""
    rnd = random.Random(seed)
    noise = _nccl_noise()
    warning = _warning()
    target = int(mib * 1024 * 1024) - len(tail.encode())
    parts: list[str] = []
    size = 0
    step, total, blocks = 0, 10_000_000, 0
    while size < target:
        chunk: list[str] = []
        if blocks % nccl_every == 0:  # an epoch: new communicators, NCCL_DEBUG=INFO prints
            chunk += [
                f"[default{k % 8}]:gpu-node-03:{14750 + k % 8}:{15000 + k % 8} "
                f"[{k % 8}] NCCL INFO {rnd.choice(noise)}"
                for k in range(64)
            ]
        for i in range(100):
            step += 1
            rank = i % 8
            loss = 2.5 * (0.9999 ** (step / 8)) + rnd.random() * 0.01
            body = (
                f"step {step // 8}/{total} loss {loss:.4f} "
                f"samples/s {rnd.uniform(2500, 3300):.1f} world_size 8"
            )
            if i % 10 == 3:  # a logger's coloured timestamp
                body = f"\x1b[32m2026-12-02 07:{i % 60:02d}:{rank:02d}\x1b[0m {body}"
            chunk.append(f"[default{rank}]:{body}")
        pct = (step // 8) * 100 // total
        chunk.append(
            "".join(
                f"Steps: {pct:3d}%|{'█' * (pct // 10):<10}| {step // 8 - 3 + k}/{total} "
                f"[12:10<20:44, {rnd.uniform(14, 16):.2f}it/s]\r"
                for k in range(4)
            )
        )
        if blocks % nccl_every == 0:
            chunk += [f"[default0]:{w}" for w in warning]
        blocks += 1
        block = "\n".join(chunk) + "\n"
        parts.append(block)
        size += len(block.encode())
    return "".join(parts) + tail


def _time(fn: object, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


_BASELINE = """
import sys, time
import console
assert console.__file__.startswith(sys.argv[2]), console.__file__  # the checkout's code
from console.diagnosis import diagnose
text = open(sys.argv[1], encoding="utf-8").read()
t0 = time.perf_counter()
d = diagnose(text)
print(time.perf_counter() - t0, d.kind if d else "none")
"""


def _baseline(checkout: str, path: str) -> tuple[float, str]:
    """Seconds one ``diagnose`` of the file takes in another checkout (the code before a
    change), in a child process, and its answer."""
    out = subprocess.run(
        [sys.executable, "-c", _BASELINE, path, str(Path(checkout).resolve())],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": checkout, "PATH": "/usr/bin"},
        cwd=checkout,  # ``-c`` puts the working directory first on sys.path
    )
    seconds, kind = out.stdout.split()
    return float(seconds), kind


def _grep(args: list[str], rounds: int) -> float:
    return _time(lambda: subprocess.run(args, capture_output=True, check=False), rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--mib", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--tail",
        action="append",
        default=None,
        help="corpus text (relative to tests/data/diagnose/corpus) ending the log",
    )
    ap.add_argument(
        "--unfiltered",
        action="store_true",
        help="also time the engine with its pre-filter off (one round)",
    )
    ap.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="also time diagnose in this checkout (one round, first tail only)",
    )
    ap.add_argument(
        "--nccl-every",
        type=int,
        default=1000,
        metavar="BLOCKS",
        help="the NCCL burst and the warning every BLOCKS x 100 step lines "
        "(1000: once an epoch; 1: a dense NCCL_DEBUG=INFO log)",
    )
    ap.add_argument("--profile", help="cProfile one diagnose of the first log into this file")
    args = ap.parse_args()
    words = engine.keywords()
    pattern = "|".join(re.escape(w) for w in words) if words else "a^"
    tails = args.tail or list(DEFAULT_TAILS)
    print(
        f"{len(words)} keywords; best of {args.rounds} rounds; NCCL burst every "
        f"{args.nccl_every * 100:,} step lines"
    )
    head = ["tail (corpus)", "MiB", "diagnosis", "lines kept", "diagnose MiB/s"]
    if args.baseline:
        head += ["before MiB/s", "after / before"]
    if args.unfiltered:
        head += ["unfiltered MiB/s"]
    head += ["grep -E -i MiB/s", "diagnose / grep", "grep -c word MiB/s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|")
    for tail_name in tails:
        tail = (CORPUS / tail_name).read_text(encoding="utf-8", errors="replace")
        text = build_log(args.mib, tail, nccl_every=args.nccl_every)
        size = len(text.encode()) / (1024 * 1024)
        alone = engine.diagnose(tail)
        if args.profile and tail_name == tails[0]:
            cProfile.runctx(
                "engine.diagnose(text)", globals(), {"text": text, "engine": engine}, args.profile
            )
        got = engine.diagnose(text)
        kind = got.kind if got else "none"
        if kind != (alone.kind if alone else "none"):
            kind += f" (alone: {alone.kind if alone else 'none'})"
        kept = engine.kept_text(text)
        row = [tail_name, f"{size:.1f}", kind, f"{kept.count(chr(10)):,} / {text.count(chr(10)):,}"]
        t_diag = _time(lambda t=text: engine.diagnose(t), args.rounds)  # type: ignore[misc]
        row.append(f"{size / t_diag:.1f}")
        with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if args.baseline:
                if tail_name == tails[0]:
                    t_base, base_kind = _baseline(args.baseline, f.name)
                    row += [f"{size / t_base:.2f}", f"{t_base / t_diag:.1f}x"]
                    if base_kind != (got.kind if got else "none"):
                        row[2] += f" (before: {base_kind})"
                else:
                    row += ["-", "-"]
            if args.unfiltered:
                t_unf = _time(lambda t=text: engine.diagnose(t, prefilter=False), 1)  # type: ignore[misc]
                row.append(f"{size / t_unf:.2f}")
            subprocess.run(["cat", f.name], stdout=subprocess.DEVNULL, check=True)
            t_grep = _grep(["grep", "-E", "-i", "-c", pattern, f.name], args.rounds)
            t_word = _grep(["grep", "-c", "Traceback", f.name], args.rounds)
        row += [f"{size / t_grep:.1f}", f"{t_grep / t_diag:.3f}", f"{size / t_word:.1f}"]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
