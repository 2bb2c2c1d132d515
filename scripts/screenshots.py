"""Write the README's screenshots (docs/img/{fleet,jobs,logs}.svg), exported by Textual from
the same replayed data as the snapshot tests (tests/app/demo_data.py).

    .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.app.demo_data import make_app, show_fleet, show_logs, show_progress  # noqa: E402

OUT = REPO / "docs" / "img"
SIZE = (120, 36)


async def shoot(name: str, state_dir: Path) -> Path:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await show_fleet(app)
        show_progress(app)
        if name in ("jobs", "logs"):
            await pilot.press("2")
            await pilot.pause()
        if name == "fleet":  # a busy GPU: its history chart and processes below the table
            await pilot.press("down")
        if name == "jobs":
            await pilot.press("down", "down")
        if name == "logs":
            await show_logs(app)
        await pilot.pause(0.3)
        return Path(app.save_screenshot(filename=f"{name}.svg", path=str(OUT)))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPUCONSOLE_STATE_DIR"] = tmp
        os.environ["GPUCONSOLE_CONFIG_DIR"] = tmp
        for name in ("fleet", "jobs", "logs"):
            print(asyncio.run(shoot(name, Path(tmp))))


if __name__ == "__main__":
    main()
