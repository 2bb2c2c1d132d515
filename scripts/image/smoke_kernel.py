"""Smoke test of the image's Python 3 kernel, run by scripts/lib/build-image.

Starts the ``python3`` kernel (ipykernel) through jupyter_client, as Jupyter
does for a notebook, executes ``import torch; torch.__version__`` and checks
the result starts with the expected torch version (argv[1], e.g. 2.13.0; the
wheel's local version adds ``+cpu``). Exit status 0 on success, 1 otherwise.
"""

from __future__ import annotations

import sys
from typing import Any

from jupyter_client.manager import start_new_kernel

TIMEOUT_S = 60.0  # kernel start and execution, seconds


def main() -> int:
    """Run the check; return the process exit status."""
    expected = sys.argv[1]
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT_S)
    results: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "execute_result":
            results.append(msg["content"]["data"]["text/plain"])
        elif msg["msg_type"] == "error":
            results.append("error: " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])

    try:
        reply = kc.execute_interactive(
            "import torch; torch.__version__", timeout=TIMEOUT_S, output_hook=hook
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    status = reply["content"]["status"]
    print(f"python3 kernel: status {status}, result {results}")
    ok = status == "ok" and len(results) == 1 and results[0].strip("'").startswith(expected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
