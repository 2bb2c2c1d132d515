"""Gang supervisor: runs one node's torchrun and ends it when another node of the job fails.

Shipped to the hosts as a file (bind-mounted read-only into every node's container of a
multi-node job, see :mod:`remote.gang`) and run by the image's ``python3``; it needs the
standard library and the image's ``torch.distributed.TCPStore``, nothing on the host.

Why: a torchrun agent whose own workers are healthy only polls the rendezvous for waiting
nodes (``num_nodes_waiting``); it never looks at the rendezvous's ``closed`` flag, which a
failed agent sets on its way out. Its workers notice a dead peer at their next collective
(gloo: at once; NCCL: after the collective timeout), so a node can outlive its gang by up to
that timeout.

How: node 0's supervisor hosts the job's rendezvous TCPStore itself (torchrun there runs with
``is_host=0``), so the store outlives node 0's torchrun. Every supervisor starts torchrun,
watches the store key ``gpuconsole/gang/<run id>/first`` (polled every 0.1 s) and:

- when its own torchrun exits non-zero (or it is told to stop), writes that key once
  (``compare_set``: the first writer wins) with ``{"node", "exit_code", "kind"}``;
- when the key appears with another node's failure, or the store cannot be reached any more,
  sends SIGTERM to its torchrun, then SIGKILL to its process group after ``--grace`` s.

Exit status: torchrun's own when it succeeded or failed first; 128 + N when this supervisor
got signal N from outside (``docker stop``: 143) and no other node had failed first, also
when another node recorded its stop first (a stop signals every node at about the same time,
so each is ``stopped``, none a teardown; 0 if torchrun still exited 0);
:data:`TEARDOWN_EXIT_CODE` when this node was ended because another node failed (the signal
of a teardown, its own or the console's, included) or was stopped alone (also when its own
torchrun failed after the gang had already failed, or after the store was gone). The
outcome is written as JSON to :data:`MARKER_FILE` in the container (``torchrun_exit``:
torchrun's own code, e.g. 1 after the SignalException of a SIGTERM; ``cause``: the other
node's end that came first, for a teardown or a stop); from then on SIGTERM and SIGINT are
ignored, so the exit status is always the one recorded::

    {"node": 1, "outcome": "first_failure" | "teardown" | "succeeded" | "stopped",
     "torchrun_exit": 1, "cause": {"node": 0, "exit_code": 1, "kind": "failed"} | null}

``cause.kind``: ``failed`` (that node's torchrun exited non-zero), ``stopped`` (that node's
supervisor got SIGTERM/SIGINT, e.g. ``docker stop``) or ``store_lost`` (node 0's store went
away; ``node`` is 0, ``exit_code`` null). Lines it prints start with ``[gpuconsole-gang]``.

Before exiting, every supervisor sets ``done/<node>``; node 0's waits for all of them (at most
``--linger`` s) so the store stays up until the other nodes have decided.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

#: Exit status of a node ended because another node of its job failed or stopped.
TEARDOWN_EXIT_CODE = 75
#: Where the outcome is written in the container (JSON, see the module docstring).
MARKER_FILE = "/tmp/gpuconsole-gang.json"
#: Environment variable naming another marker path (runtime host: the node's own folder, as
#: several jobs share the host's /tmp).
MARKER_ENV = "GPUCONSOLE_GANG_MARKER"
#: Key prefix in the rendezvous store (torchrun's own keys start with ``torch.rendezvous``).
KEY_PREFIX = "gpuconsole/gang"
#: Seconds between two looks at the store.
POLL_S = 0.1


def say(msg: str) -> None:
    """One line on stderr, tagged, in a single write."""
    sys.stderr.write(f"[gpuconsole-gang] {msg}\n")
    sys.stderr.flush()


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """``gang.py [options] -- torchrun ...``: the options and the command."""
    if "--" not in argv:
        raise SystemExit(
            "usage: gang.py --node-rank R --nnodes N --store HOST:PORT "
            "--run-id ID [--host-store] [--grace S] -- torchrun ..."
        )
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="gang.py")
    p.add_argument("--node-rank", type=int, required=True)
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--store", required=True, help="HOST:PORT of the rendezvous store")
    p.add_argument("--run-id", required=True)
    p.add_argument("--host-store", action="store_true", help="host the store (node 0)")
    p.add_argument("--grace", type=float, default=10.0, help="SIGTERM to SIGKILL, seconds")
    p.add_argument(
        "--linger",
        type=float,
        default=30.0,
        help="node 0: seconds to keep the store up for the other nodes",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for node 0's store at start",
    )
    return p.parse_args(argv[:cut]), argv[cut + 1 :]


class Gang:
    """One node's view of the job's store (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.dist: Any = importlib.import_module("torch.distributed")
        host, _, port = args.store.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.node = args.node_rank
        self.nnodes = args.nnodes
        self.prefix = f"{KEY_PREFIX}/{args.run_id}"
        self.first_key = f"{self.prefix}/first"
        self.server: Any = None
        if args.host_store:
            self.server = self.dist.TCPStore(
                self.host,
                self.port,
                is_master=True,
                wait_for_workers=False,
                timeout=timedelta(seconds=60),
            )

    def client(self, timeout_s: float) -> Any:
        """A new client connection (TCPStore objects are not shared between threads)."""
        return self.dist.TCPStore(
            self.host,
            self.port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )

    def mark(self, store: Any, kind: str, exit_code: int | None) -> dict[str, Any]:
        """Write this node's end as the first one unless another got there first; returns
        the value that is there now."""
        mine = json.dumps({"node": self.node, "exit_code": exit_code, "kind": kind})
        got = store.compare_set(self.first_key, "", mine)
        return dict(json.loads(bytes(got).decode()))

    def read_first(self, store: Any) -> dict[str, Any] | None:
        """The first end recorded, or ``None`` (raises when the store is unreachable)."""
        if not store.check([self.first_key]):
            return None
        return dict(json.loads(bytes(store.get(self.first_key)).decode()))

    def done(self, store: Any) -> None:
        """Say this node has decided (node 0 keeps the store up until all have)."""
        store.set(f"{self.prefix}/done/{self.node}", "1")

    def linger(self, seconds: float) -> None:
        """Node 0: wait until every node said done, at most ``seconds``."""
        if self.server is None:
            return
        keys = [f"{self.prefix}/done/{r}" for r in range(self.nnodes)]
        try:
            self.server.wait(keys, timedelta(seconds=seconds))
        except Exception as e:  # timeout: a node that never answers must not keep us up
            say(f"not every node reported its end within {seconds:.0f} s ({e})")


class Supervisor:
    """Runs torchrun and the store watcher; :meth:`run` returns the exit status."""

    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.args = args
        self.command = command
        self.gang = Gang(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.cause: dict[str, Any] | None = None  # why this node is being torn down
        self.signalled: int | None = None  # SIGTERM/SIGINT received from outside
        self.finished = threading.Event()

    def on_signal(self, signum: int, _frame: object) -> None:
        """docker stop / Ctrl-C: pass it on to torchrun (its own shutdown path)."""
        self.signalled = signum
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def teardown(self, cause: dict[str, Any]) -> None:
        """SIGTERM torchrun now, SIGKILL its process group after the grace period."""
        with self.lock:
            if self.cause is not None or self.finished.is_set():
                return
            self.cause = cause
        what = (
            "node 0's rendezvous store is gone"
            if cause["kind"] == "store_lost"
            else f"node {cause['node']} {cause['kind']} (exit code {cause['exit_code']})"
        )
        say(f"{what}: stopping node {self.gang.node} (gang teardown)")
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        if not self.finished.wait(self.args.grace):
            say(f"torchrun still running after {self.args.grace:.0f} s: SIGKILL")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def watch(self) -> None:
        """Thread: connect to the store, then poll the first-end key until torchrun ends."""
        deadline = time.monotonic() + self.args.connect_timeout
        store = None
        while store is None and not self.finished.is_set():
            try:
                store = self.gang.client(timeout_s=10)
            except Exception as e:
                if time.monotonic() > deadline:
                    self.teardown({"node": 0, "exit_code": None, "kind": "store_lost"})
                    return
                say(f"store {self.args.store} not reachable yet ({type(e).__name__})")
                time.sleep(1.0)
        misses = 0
        while not self.finished.wait(POLL_S):
            try:
                first = self.gang.read_first(store)
                misses = 0
            except Exception:
                misses += 1  # a dead server refuses at once; allow a blip of one retry
                if misses < 3:
                    try:
                        store = self.gang.client(timeout_s=2)
                    except Exception:
                        pass
                    continue
                self.teardown({"node": 0, "exit_code": None, "kind": "store_lost"})
                return
            if first is not None and first.get("node") != self.gang.node:
                self.teardown(first)
                return

    def run(self) -> int:
        """Start torchrun, watch, decide the outcome; the container's exit status."""
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self.on_signal)
        # its own process group, so a SIGKILL after the grace reaches its workers too
        self.proc = subprocess.Popen(self.command, start_new_session=True)
        watcher = threading.Thread(target=self.watch, name="gang-watch", daemon=True)
        watcher.start()
        while True:
            try:
                code = self.proc.wait()
                break
            except InterruptedError:
                continue
        code = 128 - code if code < 0 else code
        with self.lock:
            self.finished.set()
            cause = self.cause
        outcome, status = self.decide(code, cause)
        self.write_marker(outcome, code, status)
        # Decided and recorded: a signal from now on (a console's teardown crossing this
        # node's own) has nothing left to stop. Ignored, not handled: the interpreter's
        # shutdown puts handled signals back to the default, and a SIGTERM then would end
        # the process with 143 against the 75 or 0 just recorded.
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        return status

    def decide(self, code: int, cause: dict[str, Any] | None) -> tuple[str, int]:
        """Record this node's end in the store; the outcome and exit status."""
        store = None
        try:
            store = self.gang.client(timeout_s=10)
        except Exception:
            pass
        try:
            if self.signalled is not None:
                return self.stopped(store, code)
            if cause is not None:
                return "teardown", TEARDOWN_EXIT_CODE
            if code == 0:
                return "succeeded", 0
            kind = "failed"
            if store is None:
                if self.gang.server is None:  # node 0's store went away first
                    self.cause = {"node": 0, "exit_code": None, "kind": "store_lost"}
                    say(
                        f"torchrun exited {code} and node 0's store is gone: "
                        "counted as gang teardown"
                    )
                    return "teardown", TEARDOWN_EXIT_CODE
                return kind, code
            first = self.gang.mark(store, kind, code)
            if first.get("node") == self.gang.node:
                say(
                    f"node {self.gang.node} {kind} (exit code {code}): "
                    "the other nodes are being stopped"
                )
                return ("first_failure" if kind == "failed" else kind), code
            self.cause = first
            say(
                f"torchrun exited {code} after node {first.get('node')} "
                f"{first.get('kind')}: counted as gang teardown"
            )
            return "teardown", TEARDOWN_EXIT_CODE
        finally:
            if store is not None:
                try:
                    self.gang.done(store)
                except Exception:
                    pass
            self.gang.linger(self.args.linger)

    def stopped(self, store: Any, code: int) -> tuple[str, int]:
        """This node got SIGTERM/SIGINT from outside (``docker stop``, the host runtime's
        stop). When another node had failed first (or node 0's store went away), that signal
        is the gang's teardown (this supervisor's, or the console's): ``teardown``, exit
        :data:`TEARDOWN_EXIT_CODE`. Else the job (or this node) was stopped: ``stopped``,
        whichever node recorded its stop first (a stop signals every node at about the same
        time), the other nodes are told, and the exit status is the one a shell reports for
        a process ended by that signal (143 for SIGTERM) unless torchrun still exited 0;
        torchrun's own code (1 after its SignalException) is said here and kept in the
        marker."""
        assert self.signalled is not None
        if store is not None:
            try:
                first = self.gang.mark(store, "stopped", code)
            except Exception:
                first = None
            if first is not None and first.get("node") != self.gang.node and self.cause is None:
                self.cause = first
        cause = self.cause
        if cause is not None and cause.get("kind") != "stopped":
            say(
                f"torchrun exited {code} after node {cause.get('node')} {cause.get('kind')}: "
                "counted as gang teardown"
            )
            return "teardown", TEARDOWN_EXIT_CODE
        status = 0 if code == 0 else 128 + self.signalled
        name = signal.Signals(self.signalled).name
        say(
            f"node {self.gang.node} stopped by {name} (torchrun exited {code}; exit status "
            f"{status})" + ("" if cause is not None else ": the other nodes are being stopped")
        )
        return "stopped", status

    def write_marker(self, outcome: str, code: int, status: int) -> None:
        """The outcome as JSON in :data:`MARKER_FILE` (read back by the console)."""
        data = {
            "node": self.gang.node,
            "outcome": outcome,
            "torchrun_exit": code,
            "exit_status": status,
            "cause": self.cause if outcome in ("teardown", "stopped") else None,
        }
        try:
            with open(os.environ.get(MARKER_ENV) or MARKER_FILE, "w", encoding="utf-8") as f:
                json.dump(data, f)
        except OSError as e:
            say(f"cannot write {MARKER_FILE}: {e}")


def main(argv: list[str]) -> int:
    """Entry point: ``python3 gang.py [options] -- torchrun ...``."""
    args, command = parse_args(argv)
    if not command:
        raise SystemExit("gang.py: no command after --")
    return Supervisor(args, command).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
