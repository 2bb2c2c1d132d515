"""Layout keys of the log panes (``z``, ``tab``/``shift+tab``, ``a``, ``r``) pressed as a burst,
as a terminal delivers a held key or a fast typist: every key is taken and the screen ends on
the layout the keys imply, with the focus on the pane they imply."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from console.app.app import GpuConsoleApp
from console.app.screens.logs import LogsFooter, LogsScreen
from console.app.widgets.logpane import LogPane
from console.app.widgets.logpanes import LogPanes
from console.jobs.logs import JobLogLine
from tests.app.demo_data import T0_NS, jobs, make_app, show_logs

SIZE = (160, 45)
LAYOUT_KEYS = ["z", "tab", "shift+tab", "a", "r"]


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


@dataclass
class Expected:
    """What the README says the keys do, on pane names: n0 n1 (nodes), r0..r3 (ranks),
    M (all ranks merged)."""

    nodes: list[str]
    ranks: list[str]
    split: bool = False
    merged: bool = False
    zoom: str | None = None
    focus: str = ""
    log: list[str] = field(default_factory=list)

    def group(self) -> list[str]:
        return self.ranks if self.split else self.nodes

    def visible(self) -> list[str]:
        if self.zoom is not None:
            return [self.zoom]
        return ["M"] if self.merged else self.group()

    def press(self, key: str) -> None:
        if key == "z":
            if self.zoom is not None:
                self.focus, self.zoom = self.zoom, None
            else:
                v = self.visible()
                self.zoom = self.focus = self.focus if self.focus in v else v[0]
        elif key == "a":
            self.zoom, self.merged = None, not self.merged
            self.focus = self.visible()[0]
        elif key == "r":
            self.split, self.zoom, self.merged = not self.split, None, False
            self.focus = self.group()[0]
        else:
            step = 1 if key == "tab" else -1
            g = self.group()
            if self.zoom is not None and self.zoom in g:
                self.zoom = self.focus = g[(g.index(self.zoom) + step) % len(g)]
            else:
                v = self.visible()
                i = v.index(self.focus) if self.focus in v else -step if step > 0 else 0
                self.focus = v[(i + step) % len(v)]


def burst(app: GpuConsoleApp, keys: list[str]) -> None:
    """Hand the keys to the app all at once, as the terminal driver does when they arrive
    faster than the app takes them (pilot.press would wait for the screen after each)."""
    assert app._driver is not None
    for key in keys:
        event = events.Key(key, "\t" if key == "tab" else key if len(key) == 1 else None)
        event.set_sender(app)
        app._driver.send_message(event)


def names(screen: LogsScreen) -> dict[LogPane, str]:
    panes = screen.query_one(LogPanes)
    out = {p: f"n{i}" for i, p in enumerate(panes.panes)}
    out.update({p: f"r{i}" for i, p in enumerate(panes.rank_panes)})
    assert panes.merged_pane is not None
    out[panes.merged_pane] = "M"
    return out


async def settled(pilot: Pilot[None], panes: LogPanes) -> None:
    for _ in range(200):
        await pilot.pause()
        if not panes.layout_pending and pilot.app._driver is not None:
            await pilot.pause()
            if not panes.layout_pending:
                return
    raise AssertionError("the layout never settled")


@pytest.mark.parametrize("seed", [1, 2])
async def test_330_layout_keys_in_a_burst_end_on_the_layout_they_imply(
    state_dir: Path, seed: int
) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await show_logs(app)
        await pilot.pause()
        panes = screen.query_one(LogPanes)
        name = names(screen)
        assert sorted(name.values()) == ["M", "n0", "n1", "r0", "r1", "r2", "r3"]
        want = Expected(nodes=["n0", "n1"], ranks=["r0", "r1", "r2", "r3"], focus="n0")
        assert name.get(app.focused) == "n0"  # type: ignore[arg-type]
        rnd = random.Random(seed)
        keys = [rnd.choice(LAYOUT_KEYS) for _ in range(330)]
        for key in keys:
            want.press(key)
        layouts_before = panes.layouts
        burst(app, keys)
        await settled(pilot, panes)
        await pilot.pause()
        shown = [name[p] for p in panes.shown_panes]
        assert shown == want.visible()
        displayed = sorted(name[p] for p in name if p.parent is not None and p.parent.display)
        assert displayed == sorted(want.visible())
        assert all(p.region.width > 0 for p in panes.shown_panes)
        assert name.get(app.focused) == want.focus  # type: ignore[arg-type]
        assert (name[panes.zoomed] if panes.zoomed else None) == want.zoom
        assert panes.merged_shown == want.merged and screen.split_ranks == want.split
        # the keys were coalesced: far fewer layouts than keys
        assert panes.layouts - layouts_before < len(keys) // 4
        # and the panes still work: a pane key goes to the pane the layout keys focused
        await pilot.press("w")
        assert isinstance(app.focused, LogPane) and app.focused.wrap


async def test_a_pane_key_applies_the_pending_layout_first(state_dir: Path) -> None:
    """A key that is not a layout key, reaching the panes while a layout is pending, applies
    it before the key's binding is looked up (from the focused pane)."""
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await show_logs(app)
        await pilot.pause()
        panes = screen.query_one(LogPanes)
        left, right = panes.panes
        panes.action_focus_pane(1)
        panes.action_zoom()
        assert panes.layout_pending and app.focused is left
        panes.on_key(events.Key("tab", "\t"))  # a layout key: still coalescing
        assert panes.layout_pending
        panes.on_key(events.Key("w", "w"))
        assert not panes.layout_pending
        assert app.focused is right and panes.shown_panes == [right]
        app.set_keymap({"logs.zoom": "Z"})
        panes.action_zoom()
        panes.on_key(events.Key("Z", "Z"))  # remapped layout keys count as layout keys
        assert panes.layout_pending
        panes.on_key(events.Key("z", "z"))  # z is no longer one
        assert not panes.layout_pending and panes.shown_panes == [left, right]


async def test_the_footer_is_rebuilt_only_when_its_keys_change(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await show_logs(app)
        await pilot.pause()
        footer = screen.query_one(LogsFooter)
        keys = list(footer.query(FooterKey))
        assert "Zoom" in {k.description for k in keys}
        await pilot.press("tab", "z", "z", "shift+tab")
        await pilot.pause()
        assert list(footer.query(FooterKey)) == keys  # the same widgets: not rebuilt
        await pilot.press("slash")  # the prompt's keys are other keys
        await pilot.pause()
        assert "Zoom" not in {k.description for k in footer.query(FooterKey)}
        await pilot.press("escape")
        await pilot.pause()
        assert "Zoom" in {k.description for k in footer.query(FooterKey)}


async def test_rank_panes_are_in_rank_order_whatever_order_ranks_first_write(
    state_dir: Path,
) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        job = next(j for j in jobs() if j.state == "running")
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        host = {n.node_rank: n.host for n in job.nodes}
        for i, (node, rank) in enumerate([(1, 3), (0, 1), (1, 2), (0, 0)]):
            screen.take_lines([JobLogLine(node, host[node], rank, T0_NS + i, f"hello {rank}")])
        while screen.backlog:
            await pilot.pause(0.01)
        await pilot.press("r")
        await pilot.pause()
        panes = screen.query_one(LogPanes)
        titles = [p.title for p in panes.shown_panes]
        assert titles == ["node 0 rank 0", "node 0 rank 1", "node 1 rank 2", "node 1 rank 3"]
        assert [p.region.x for p in panes.shown_panes] == sorted(
            p.region.x for p in panes.shown_panes[:2]
        ) * 2  # 2x2, left to right
        await pilot.press("z", "tab")
        await pilot.pause()
        assert panes.zoomed is not None and panes.zoomed.title == "node 0 rank 1"
