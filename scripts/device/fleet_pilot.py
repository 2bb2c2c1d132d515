"""The app's fleet view of a running job, driven headless by Textual's pilot.

    python scripts/device/fleet_pilot.py PROFILE.yaml JOB_ID OUT.txt [--timeout S]

Starts the app on PROFILE (the state dir from ``GPUCONSOLE_STATE_DIR``), waits on the fleet
view (the default screen, key ``1``) until a row names JOB_ID, writes the screen's rows as plain
text to OUT.txt, and exits 0; exits 1 (still writing the last screen) if the job never shows.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from console.app.app import GpuConsoleApp
from console.profiles import load_profile_file
from console.service import Service

SIZE = (200, 50)


def screen_rows(app: GpuConsoleApp) -> list[str]:
    """The terminal's rows as plain text."""
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


async def run(profile: Path, job: str, out: Path, timeout: float) -> int:
    """Drive the app until ``job`` is on the fleet view; write the rows to ``out``."""
    app = GpuConsoleApp(Service(load_profile_file(profile)))
    found = False
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        deadline = time.monotonic() + timeout
        rows: list[str] = []
        while time.monotonic() < deadline:
            await pilot.pause(0.5)
            rows = screen_rows(app)
            if any(job in r for r in rows):
                found = True
                await pilot.pause(1.0)  # one more telemetry round drawn
                rows = screen_rows(app)
                break
        out.write_text("\n".join(rows) + "\n")
        await pilot.press("q")
    return 0 if found else 1


def main() -> int:
    """Parse the arguments and run."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("profile", type=Path)
    ap.add_argument("job")
    ap.add_argument("out", type=Path)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    return asyncio.run(run(a.profile, a.job, a.out, a.timeout))


if __name__ == "__main__":
    sys.exit(main())
