"""``top --json`` over real SSH hosts without an NVIDIA driver: the hosts stream host samples.

The test hosts have no GPU, no libnvidia-ml and no nvidia-smi. Before the fix the agent exited
3, the nvidia-smi fallback failed, and each host's stream restarted every 10 s: one ``seq 0``
sample per host per 10 s, ``cpu_pct`` always null ("no interval yet"). Now the agent stays up
and streams one sample per interval, state ``no_driver``, CPU % from its second sample on.
"""

from __future__ import annotations

import json
import threading
import time

from tests.integration.conftest import CLI

NO_DRIVER = (
    "no NVIDIA driver: nvidia-smi not found (NVML: libnvidia-ml.so.1 could not be "
    "loaded (NVML Shared Library Not Found))"
)


def test_top_json_streams_cpu_of_hosts_without_a_driver(cli: CLI) -> None:
    proc = cli.popen("top", "--json", "--interval", "1")
    guard = threading.Timer(90, proc.kill)  # a silent stream fails the test, never hangs it
    guard.start()
    seqs: dict[str, list[int]] = {"a": [], "b": []}
    first_rx: dict[str, float] = {}
    cpu_after: dict[str, float] = {}  # host -> seconds from its first sample to a CPU %
    try:
        assert proc.stdout is not None
        while len(cpu_after) < 2 or min(len(v) for v in seqs.values()) < 6:
            line = proc.stdout.readline()
            assert line, f"top ended: {proc.wait()}"
            rec = json.loads(line)
            host, s = rec["host"], rec["sample"]
            now = time.monotonic()
            first_rx.setdefault(host, now)
            seqs[host].append(s["seq"])
            assert (s["source"], s["state"], s["state_detail"]) == ("nvml", "no_driver", NO_DRIVER)
            assert s["gpus"] == [] and s["processes"] is None
            assert s["host"]["mem_total_mib"] is not None
            if s["host"]["cpu_pct"] is not None and host not in cpu_after:
                cpu_after[host] = now - first_rx[host]
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()
    # CPU % within a few seconds of the host's first sample (the second sample has it)
    assert all(dt < 3.0 for dt in cpu_after.values()), cpu_after
    # one stream per host, never restarted: seq counts up from 0 without going back
    for host, got in seqs.items():
        assert got == list(range(len(got))), (host, got)
