"""Claims held on a host while a launch checks and creates: the atomic part of "is this job
name (this GPU) free?", so that two consoles racing to launch cannot both pass the check.

A claim is an exclusive ``flock(2)`` on ``~/.cache/gpuconsole/claims/<host name>/<key>.lock``
taken by a small holder process started over the host's transport (:data:`_HOLDER`, Python
standard library only). The holder takes all of its keys or none (non-blocking: a key another
launch holds is reported with what that launch wrote into the file), says so on one stdout
line, then waits for its stdin to close. The kernel drops the locks when it exits, so a claim
never outlives its launch: closing stdin ends it (:meth:`Claim.release`), and so does the
console dying (its SSH connection closes, the holder's stdin sees EOF) or, as a last resort,
:data:`MAX_HOLD_S`. A holder that ends normally removes its lock files while it still holds
them (one that is killed leaves an unlocked file, reused); a launch that locked a file checks
that it is still the one at the path, so a removed file never counts as a claim.

The folder is per machine (``socket.gethostname()``), so hosts sharing one home folder (NFS)
do not share claims. The same machine reached twice in one job (two profile hosts) holds the
key once: a key already held by the same ``owner`` counts as taken.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from remote.errors import GpuConsoleError, TransportError
from remote.transport import RemoteProcess, Transport

log = logging.getLogger("gpuconsole.remote.claims")

#: Where the claims live, under the host user's home.
CLAIMS_DIR = ".cache/gpuconsole/claims"
#: The longest a holder keeps its claims (s) when nothing closes its stdin (a console whose
#: connection hangs without closing): the launch it guards takes seconds.
MAX_HOLD_S = 600.0
#: How long the holder may take to answer (s).
ANSWER_TIMEOUT_S = 30.0

#: argv[1]: owner, argv[2]: what (shown to a launch that finds the key held), argv[3]:
#: seconds at most, argv[4:]: keys. Prints one JSON line: ``{"held": {key: record}}``
#: (empty: all taken, held until stdin closes) or ``{"error": text}``.
_HOLDER = r"""
import fcntl, json, os, re, select, socket, sys, time
owner, what, limit, keys = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
d = os.path.join(os.path.expanduser("~"), ".cache", "gpuconsole", "claims",
                 socket.gethostname())
try:
    os.makedirs(d, mode=0o700, exist_ok=True)
except OSError as e:
    say({"error": "cannot create %s: %s" % (d, e)})
    sys.exit(0)
mine, held = [], {}
for k in keys:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,99}", k):
        say({"error": "bad claim key %r" % k})
        sys.exit(0)
    path = os.path.join(d, k + ".lock")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            say({"error": "cannot open the claim %s: %s" % (k, e)})
            sys.exit(0)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                rec = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                rec = {}
            if not isinstance(rec, dict):
                rec = {}
            os.close(fd)
            if rec.get("owner") != owner:  # the same launch holds it through another host
                held[k] = rec
            break
        try:  # the file its holder removed on release is not the claim any more
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            mine.append((path, fd))
            break
        os.close(fd)
def drop():
    for path, fd in mine:  # removed while still locked: a later launch makes a new one
        try:
            os.unlink(path)
        except OSError:
            pass
if held:
    drop()
    say({"held": held})
    sys.exit(0)
rec = json.dumps({"owner": owner, "what": what, "at": time.time()}).encode()
for path, fd in mine:
    os.ftruncate(fd, 0)
    os.pwrite(fd, rec, 0)
say({"held": {}})
deadline = time.monotonic() + limit
while True:
    left = deadline - time.monotonic()
    if left <= 0:
        break
    ready = select.select([sys.stdin], [], [], left)[0]
    if ready and not os.read(sys.stdin.fileno(), 4096):
        break
drop()
"""


@dataclass(frozen=True)
class Holder:
    """Who holds a key another launch wanted.

    Attributes:
        key: the key.
        owner: the holding launch's owner string (console host, pid, ...), ``""`` if unknown.
        what: what it said it launches (a job id), ``""`` if unknown.
        since: when it took the key (the host's Unix seconds), or ``None``.
    """

    key: str
    owner: str
    what: str
    since: float | None


class ClaimHeld(GpuConsoleError):
    """Some of the keys are held by another launch on ``host`` (none were taken)."""

    def __init__(self, host: str, holders: list[Holder]) -> None:
        keys = ", ".join(h.key for h in holders)
        super().__init__(f"host {host}: claimed by another launch: {keys}")
        self.host = host
        self.holders = holders


class Claim:
    """Keys held on one host until :meth:`release` (see the module docstring)."""

    def __init__(self, host: str, keys: tuple[str, ...], proc: RemoteProcess) -> None:
        self.host = host
        self.keys = keys
        self._proc: RemoteProcess | None = proc

    async def release(self) -> None:
        """Drop the keys (closes the holder's stdin); a second call does nothing. Never
        raises: a host that cannot be told drops them when the connection ends."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            await proc.close()
        except (GpuConsoleError, OSError) as e:
            log.warning(
                "[%s] claims %s not released cleanly (they end with the connection): %s",
                self.host,
                ", ".join(self.keys),
                e,
            )


def _holder(key: str, rec: Any) -> Holder:
    rec = rec if isinstance(rec, dict) else {}
    since = rec.get("at")
    return Holder(
        key,
        str(rec.get("owner") or ""),
        str(rec.get("what") or ""),
        float(since) if isinstance(since, (int, float)) else None,
    )


async def take(
    transport: Transport, keys: list[str], *, owner: str, what: str, hold_s: float = MAX_HOLD_S
) -> Claim:
    """Take every key on the host, or none.

    Args:
        keys: ``[a-z0-9][a-z0-9_.-]*`` names (e.g. ``name-<job name>``, ``gpu-0``).
        owner: unique to this launch (a key it already holds through another profile host of
            the same machine counts as taken).
        what: shown to a launch that finds the keys held (a job id).
        hold_s: the longest the keys are held if nothing releases them.

    Raises:
        ClaimHeld: another launch holds some of the keys (none taken).
        TransportError: the host could not be asked, has no ``python3``, or the claim
            folder cannot be written.
    """
    argv = ["python3", "-c", _HOLDER, owner, what, f"{hold_s:g}", *keys]
    proc = await transport.open_process(argv)
    try:
        line = await asyncio.wait_for(proc.readline(), ANSWER_TIMEOUT_S)
    except BaseException:
        await proc.close()
        raise
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "held" not in answer:
        await proc.close()
        why = (answer or {}).get("error") if isinstance(answer, dict) else None
        if why is None:
            err = (await proc.stderr()).strip().splitlines()
            why = err[-1] if err else f"no answer ({line!r})"
        raise TransportError(
            transport.name,
            f"cannot take the launch claims: {why}",
            "the host needs python3 and a writable ~/" + CLAIMS_DIR,
        )
    held = answer["held"] if isinstance(answer["held"], dict) else {}
    if held:
        await proc.close()
        raise ClaimHeld(transport.name, [_holder(k, v) for k, v in sorted(held.items())])
    return Claim(transport.name, tuple(keys), proc)
