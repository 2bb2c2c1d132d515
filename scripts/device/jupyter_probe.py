"""Run code in a kernel of a running JupyterLab, the way a user's notebook cell would.

    python scripts/device/jupyter_probe.py URL_WITH_TOKEN [CODE]

URL_WITH_TOKEN is the URL ``gpuconsole notebook`` printed (``http://127.0.0.1:PORT/lab?token=T``).
Prints one JSON object: the kernel spec names, and the ``stream`` output, ``result`` and
``error`` of CODE (default: whether CUDA is available in the kernel, its device count and the
first device's name). Exits 0 when the cell ran without an error.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.jupyterclient import Jupyter

DEFAULT_CODE = (
    "import torch\n"
    "print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())\n"
    "torch.cuda.get_device_name(0) if torch.cuda.is_available() else None"
)


def main() -> int:
    """Parse the URL, start a kernel, run the code, print what came back."""
    url = urllib.parse.urlsplit(sys.argv[1])
    token = urllib.parse.parse_qs(url.query).get("token", [""])[0]
    j = Jupyter(f"{url.scheme}://{url.netloc}", token)
    status, specs = j.get("/api/kernelspecs")
    kid = j.start_kernel()
    try:
        got = j.execute(kid, sys.argv[2] if len(sys.argv) > 2 else DEFAULT_CODE)
    finally:
        j.delete_kernel(kid)
    kernels = sorted(specs.get("kernelspecs", {})) if isinstance(specs, dict) else []
    print(json.dumps({"kernelspecs_status": status, "kernelspecs": kernels, **got}, indent=1))
    return 0 if got["error"] is None and got["reply"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
