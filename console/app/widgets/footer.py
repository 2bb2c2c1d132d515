"""A footer that shows the keys that matter most when not all of them fit.

Textual's :class:`~textual.widgets.Footer` lays its keys out in one row and cuts what does not
fit at the right edge (its own compact mode only narrows the gaps), so on a narrow terminal
the keys that come last (help, quit) are the ones lost. :class:`FittedFooter` shows the
screen's keys in their usual order, compact, and leaves out the least important ones (by the
screen's ``FOOTER_KEEP`` order) until the rest fit the width; ``?`` (help, kept first) lists
every key. It is rebuilt when the keys or their labels change, or when a resize changes which
of them fit, never on a focus move that changes nothing shown (rebuilding costs every key
widget, about 0.4 s on a 2-core machine).

A key whose first binding in the focus chain is hidden (``show=False``) and is one that the
screen names as passing the key on when it has nothing to do (``pass_on``: a log pane's
escape clears its search, else goes back) shows the next shown binding of that key: what the
key does in the common case.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel, KeyGroup

#: Columns of the command palette key at the right edge (``▏^p palette``).
_PALETTE_W = 12


@dataclass(frozen=True)
class FooterItem:
    """One entry of the footer: a key, or a group of keys with one label (``nN Match``).

    Attributes:
        bindings: ``(binding, enabled, tooltip)`` of each key, in order.
        group: the group's label, or ``None`` for a single key.
    """

    bindings: tuple[tuple[Binding, bool, str], ...]
    group: str | None = None

    @property
    def action(self) -> str:
        """The action of its (first) binding: what ``FOOTER_KEEP`` names."""
        return self.bindings[0][0].action


def footer_items(
    screen: Screen[object], displays: dict[str, str], pass_on: Collection[str] = ()
) -> list[FooterItem]:
    """The keys a footer shows on ``screen``, in Textual's order, groups combined: one item
    per action of each shown binding (:attr:`Screen.active_bindings`), plus the next shown
    binding of a key whose active binding is hidden and its action one of ``pass_on`` (see
    the module docstring). ``displays``: filled with each binding's key display (``G``,
    ``esc``)."""
    active = screen.active_bindings
    shown: list[tuple[Binding, bool, str]] = []
    for key, (_, binding, enabled, tooltip) in active.items():
        if binding.show:
            shown.append((binding, enabled, tooltip))
        elif binding.action in pass_on:
            later = _next_shown(screen, key, binding)
            if later is not None:
                shown.append((later, True, later.tooltip))
    by_action: dict[str, list[tuple[Binding, bool, str]]] = {}
    for b in shown:
        by_action.setdefault(b[0].action, []).append(b)
    items: list[FooterItem] = []
    pending: list[tuple[Binding, bool, str]] = []
    group: Binding.Group | None = None

    def close() -> None:
        nonlocal pending, group
        if pending:
            if group is not None and len(pending) > 1:
                items.append(FooterItem(tuple(pending), group.description))
            else:
                items.extend(FooterItem((b,)) for b in pending)
        pending, group = [], None

    for multi in by_action.values():
        first = multi[0]
        displays[first[0].key] = screen.app.get_key_display(first[0])
        if first[0].group is None or first[0].group != group:
            close()
            group = first[0].group
        pending.append(first)
    close()
    return items


def _next_shown(screen: Screen[object], key: str, first: Binding) -> Binding | None:
    """The next binding of ``key`` after ``first`` in the focus chain that is shown."""
    seen = False
    for _node, bindings in screen._binding_chain:
        for b in bindings.key_to_bindings.get(key, []):
            if b is first:
                seen = True
            elif seen and b.show:
                return b
    return None


def item_width(item: FooterItem, displays: dict[str, str]) -> int:
    """Columns an item takes in a compact footer, its gap included: ``G Follow`` is the key,
    a space and the label; a group is its keys side by side, a space and its label."""
    if item.group is not None:
        return 1 + sum(len(displays[b.key]) for b, _, _ in item.bindings) + 1 + len(item.group) + 1
    b = item.bindings[0][0]
    return len(displays[b.key]) + (1 + len(b.description) if b.description else 0) + 1


def fit(
    items: Sequence[FooterItem], keep: Sequence[str], width: int, displays: dict[str, str]
) -> list[FooterItem]:
    """The items that fit ``width`` columns, in their order: those whose action ``keep``
    does not name are left out first, then ``keep``'s own from its end."""
    rank = {action: i for i, action in enumerate(keep)}
    chosen = list(items)
    by_drop = sorted(items, key=lambda it: -rank.get(it.action, len(keep)))
    for it in by_drop:
        if sum(item_width(i, displays) for i in chosen) <= width:
            break
        chosen.remove(it)
    return chosen


class FittedFooter(Footer):
    """A compact footer showing the keys that fit, most important first (see the module
    docstring); ``keep``: actions in the order they matter (the rest go first);
    ``pass_on``: hidden actions that pass their key on when they have nothing to do."""

    DEFAULT_CSS = """
    FittedFooter { padding-left: 1; }
    FittedFooter.-compact KeyGroup.-compact { margin: 0; padding-left: 0; }
    FittedFooter.-compact FooterLabel { margin: 0 1 0 1; }
    """

    def __init__(
        self, keep: Iterable[str] = (), pass_on: Iterable[str] = (), **kwargs: object
    ) -> None:
        super().__init__(compact=True, **kwargs)  # type: ignore[arg-type]
        self.keep = tuple(keep)
        self.pass_on = frozenset(pass_on)
        self.shown_actions: tuple[str, ...] = ()
        """The actions of the keys shown now, in order."""
        self._shown: tuple[object, ...] | None = None

    def _plan(self) -> tuple[list[FooterItem], dict[str, str]]:
        displays: dict[str, str] = {}
        items = footer_items(self.screen, displays, self.pass_on)
        width = self.size.width or self.app.size.width
        palette = _PALETTE_W if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE else 0
        return fit(items, self.keep, max(width - palette - 1, 0), displays), displays

    def _signature(self) -> tuple[object, ...]:
        items, displays = self._plan()
        return tuple(
            (
                tuple(
                    (b.key, b.action, b.description, displays[b.key], enabled)
                    for b, enabled, _ in it.bindings
                ),
                it.group,
            )
            for it in items
        )

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        items, displays = self._plan()
        self.shown_actions = tuple(it.action for it in items)
        for it in items:
            if it.group is not None:
                with KeyGroup(classes="-compact"):
                    for b, enabled, tooltip in it.bindings:
                        yield FooterKey(
                            b.key,
                            displays[b.key],
                            "",
                            b.action,
                            disabled=not enabled,
                            tooltip=tooltip or b.description,
                            classes="-grouped",
                        ).data_bind(compact=Footer.compact)
                yield FooterLabel(it.group)
            else:
                b, enabled, tooltip = it.bindings[0]
                yield FooterKey(
                    b.key,
                    displays[b.key],
                    b.description,
                    b.action,
                    disabled=not enabled,
                    tooltip=tooltip,
                ).data_bind(compact=Footer.compact)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _, binding, enabled, tooltip = found
                yield FooterKey(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    classes="-command-palette",
                    disabled=not enabled,
                    tooltip=binding.tooltip or binding.description,
                )

    def bindings_changed(self, screen: Screen[object]) -> None:
        """Recompose when what it would show changed (keys, labels, enabled state)."""
        if self.is_attached and screen is self.screen:
            shown = self._signature()
            if shown == self._shown and self._bindings_ready:
                return
            self._shown = shown
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        """A new width may fit more or fewer keys."""
        if self._bindings_ready and self.is_attached:
            self.bindings_changed(self.screen)
