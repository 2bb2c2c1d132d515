"""The bench results kept in the state dir: ``<state dir>/bench.json``.

Per profile, host and GPU index the last :data:`KEEP` results, newest first, each with its
verdict at the time (``{"result": GpuBench, "verdict": {...}}``); per profile and host the last
:data:`KEEP` host results (the all-reduce), and the last cross-host all-reduce. Written whole
(temporary file, ``os.replace``) under an ``flock`` on ``bench.json.lock``, so two benches
that end together both keep their results. What ``submit``, the fleet view and ``bench --last``
read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.bench.analysis import Finding, Verdict
from console.bench.model import GpuBench, HostBench
from console.errors import StateError
from console.statefiles import file_error

#: Results kept per GPU and per host.
KEEP = 20
VERSION = 1


@dataclass(frozen=True)
class StoredGpu:
    """A GPU's stored bench and its verdict at the time."""

    result: GpuBench
    verdict: Verdict


def verdict_json(v: Verdict) -> dict[str, Any]:
    """A verdict as JSON (``bench --json``'s and the store's form)."""
    return {
        "flagged": v.flagged,
        "summary": v.summary(),
        "findings": [
            {
                "metric": f.metric,
                "value": f.value,
                "reference": f.reference,
                "basis": f.basis,
                "below_pct": round(f.below_pct, 1),
                "peers": f.peers,
            }
            for f in v.findings
        ],
        "reasons": list(v.reasons),
    }


def verdict_from_json(host: str, index: int | None, d: dict[str, Any]) -> Verdict:
    """Read :func:`verdict_json` back."""
    return Verdict(
        host,
        index,
        bool(d.get("flagged")),
        tuple(
            Finding(
                str(f["metric"]),
                float(f["value"]),
                float(f["reference"]),
                str(f["basis"]),
                float(f["below_pct"]),
                int(f.get("peers") or 0),
            )
            for f in d.get("findings") or ()
        ),
        tuple(str(r) for r in d.get("reasons") or ()),
    )


class BenchStore:
    """``bench.json`` in ``root`` (the state dir)."""

    def __init__(self, root: Path) -> None:
        self.path = root / "bench.json"

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"version": VERSION, "gpus": {}, "hosts": {}, "cross": {}}
        except ValueError:
            raise StateError(
                str(self.path),
                "damaged",
                "is not the bench results' JSON",
                f"move it aside (`mv {self.path} {self.path}.damaged`): the past results are lost",
            ) from None
        except OSError as e:
            raise file_error(e, self.path, what="bench results file", if_lost="past results") from e
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise StateError(
                str(self.path),
                "damaged",
                "is not a bench results file of this gpuconsole",
                f"move it aside (`mv {self.path} {self.path}.damaged`)",
            )
        for k in ("gpus", "hosts", "cross"):
            data.setdefault(k, {})
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise file_error(e, self.path, what="bench results file", if_lost="past results") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, data: dict[str, Any]) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".bench.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except OSError as e:
            raise file_error(e, self.path, what="bench results file", if_lost="past results") from e

    def save(
        self,
        profile: str,
        gpus: list[tuple[GpuBench, Verdict]],
        hosts: list[HostBench],
        cross: HostBench | None = None,
    ) -> None:
        """Add a run's results (newest first, :data:`KEEP` kept per GPU and host).

        Raises:
            StateError: the file cannot be read or written.
        """
        with self._locked():
            data = self._read()
            for g, v in gpus:
                key = f"{profile}\t{g.host}\t{g.index}"
                entry = {"result": g.to_json(), "verdict": verdict_json(v)}
                data["gpus"][key] = [entry, *data["gpus"].get(key, [])][:KEEP]
            for h in hosts:
                key = f"{profile}\t{h.host}"
                data["hosts"][key] = [h.to_json(), *data["hosts"].get(key, [])][:KEEP]
            if cross is not None:
                data["cross"][profile] = [cross.to_json(), *data["cross"].get(profile, [])][:KEEP]
            self._write(data)

    def last_gpus(self, profile: str) -> list[StoredGpu]:
        """The last bench of every GPU of ``profile`` (host, then index order); entries that
        do not read are skipped.

        Raises:
            StateError: the file cannot be read.
        """
        data = self._read()
        out = []
        for key, entries in sorted(data["gpus"].items()):
            prof, _, _ = key.partition("\t")
            if prof != profile or not entries:
                continue
            try:
                g = GpuBench.from_json(entries[0]["result"])
                v = verdict_from_json(g.host, g.index, entries[0]["verdict"])
            except (KeyError, TypeError, ValueError):
                continue
            out.append(StoredGpu(g, v))
        out.sort(
            key=lambda s: (s.result.host, s.result.index if s.result.index is not None else -1)
        )
        return out

    def history(self, profile: str, host: str, index: int) -> list[GpuBench]:
        """Every kept bench of one GPU, newest first."""
        entries = self._read()["gpus"].get(f"{profile}\t{host}\t{index}", [])
        out = []
        for e in entries:
            try:
                out.append(GpuBench.from_json(e["result"]))
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def last_hosts(self, profile: str) -> list[HostBench]:
        """The last bench of every host of ``profile``."""
        data = self._read()
        out = []
        for key, entries in sorted(data["hosts"].items()):
            prof, _, _ = key.partition("\t")
            if prof == profile and entries:
                try:
                    out.append(HostBench.from_json(entries[0]))
                except (KeyError, TypeError, ValueError):
                    continue
        return out

    def last_cross(self, profile: str) -> HostBench | None:
        """The last all-reduce across hosts of ``profile``."""
        entries = self._read()["cross"].get(profile) or []
        try:
            return HostBench.from_json(entries[0]) if entries else None
        except (KeyError, TypeError, ValueError):
            return None

    def slow(self, profile: str) -> dict[str, dict[int, str]]:
        """host -> GPU index -> the verdict's line (``slow: ...; likely: ...``), for the GPUs
        the last bench flagged: what a plan names (:class:`console.jobs.plan.HostFacts`)."""
        return {
            host: {i: s.verdict.summary() for i, s in gpus.items()}
            for host, gpus in self.flagged(profile).items()
        }

    def flagged(self, profile: str) -> dict[str, dict[int, StoredGpu]]:
        """host -> GPU index -> its last bench, for the GPUs the last bench flagged."""
        out: dict[str, dict[int, StoredGpu]] = {}
        for s in self.last_gpus(profile):
            if s.verdict.flagged and s.result.index is not None:
                out.setdefault(s.result.host, {})[s.result.index] = s
        return out
