"""``gpuconsole alerts``: the firing alerts, acknowledge, silence (headless; the store is the
one ``watch`` and the app use, so an ack here stops their pages too). Every subcommand works on
the alerts of the command's profile (``-p``; those its ``watch`` or app raised), as they do.

``alerts`` lists firing alerts (``--json``: one object per alert; ``--history N``: the last
transitions); ``alerts ack KEY`` acknowledges; ``alerts silence KEY --for 2h`` (or
``--rule``/``--host``/``--job`` globs; at most a year) silences notifications, also of alerts
not firing yet (it says when nothing firing matches); ``alerts silences`` lists them (ended ones
for a day) and ``alerts unsilence ID`` deletes one. An unknown key or a bad duration is bad
input (exit 2).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from console.cli.base import command_profile, err, main, out, run
from console.errors import UsageError

if TYPE_CHECKING:  # imported where used: `gpuconsole --help` must not load the store
    from console.alerts.model import Alert
    from console.alerts.store import AlertStore

__all__ = ["MAX_SILENCE_S", "alert_json"]

#: The longest silence ``alerts silence --for`` accepts, seconds (a year).
MAX_SILENCE_S = 365 * 86400.0


def _store(ctx: click.Context) -> AlertStore:
    """The alert store of the command's profile."""
    from console.alerts.store import profile_store

    profile = command_profile(ctx)
    return profile_store(profile.name, profile.hosts)


def alert_json(alert: Alert, now: float) -> dict[str, object]:
    """The ``--json`` object of one alert: its fields (times in Unix s) plus ``state``."""
    from console.alerts.rows import alert_state
    from console.alerts.store import alert_to_json

    data: dict[str, object] = json.loads(alert_to_json(alert))
    data["state"] = alert_state(alert, now)
    return data


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per alert.")
@click.option(
    "--history",
    type=click.IntRange(1, 10_000),
    default=None,
    metavar="N",
    help="Show the last N transitions (fired, resolved, acknowledged...) instead.",
)
@click.pass_context
def alerts(ctx: click.Context, as_json: bool, history: int | None) -> None:
    """Firing alerts of the profile's `watch` and app; ack and silence them."""
    if ctx.invoked_subcommand is not None:
        return
    run(_list(ctx, as_json, history))


async def _list(ctx: click.Context, as_json: bool, history: int | None) -> None:
    from console.alerts.rows import age_text, alert_state
    from console.texttable import text_table

    store = _store(ctx)
    now = time.time()
    try:
        if history is not None:
            for ch in reversed(store.history(history)):
                if as_json:
                    out(
                        json.dumps(
                            {"change": ch.change, "at": ch.at, "alert": alert_json(ch.alert, now)}
                        )
                    )
                else:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ch.at))
                    out(f"{when}  {ch.change:<12} {ch.alert.key}  {ch.alert.summary}")
            return
        firing = store.firing_now(now)
        if as_json:
            for a in firing:
                out(json.dumps(alert_json(a, now)))
            return
        if not firing:
            out("no alerts firing")
            return
        rows = [("SEV", "STATE", "FOR", "KEY", "SUMMARY")]
        rows += [
            (a.severity, alert_state(a, now), age_text(now - a.since), a.key, a.summary)
            for a in firing
        ]
        for line in text_table(rows, min_widths=(8, 8, 7, 39), sep=" "):
            out(line)
    finally:
        store.close()


def _firing_keys(store: AlertStore) -> str:
    keys = [a.key for a in store.firing()]
    return ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else "") if keys else "none"


@alerts.command("ack")
@click.argument("key")
@click.pass_context
def ack(ctx: click.Context, key: str) -> None:
    """Acknowledge a firing alert: it stays listed until it resolves, with no more pages."""
    run(_ack(ctx, key))


async def _ack(ctx: click.Context, key: str) -> None:
    store = _store(ctx)
    try:
        got = store.acknowledge(key, time.time(), by="gpuconsole alerts ack")
    except KeyError:
        raise UsageError(
            f"KEY: no firing alert {key!r}", f"give one of the firing keys: {_firing_keys(store)}"
        ) from None
    finally:
        store.close()
    out(f"acknowledged {got.key}")


@alerts.command("silence")
@click.argument("key", required=False)
@click.option("--for", "duration", required=True, metavar="DURATION", help="How long: 30m, 2h, 1d.")
@click.option("--rule", help="Silence every alert of this rule (glob).")
@click.option("--host", help="Silence every alert of this host (glob).")
@click.option("--job", help="Silence every alert of this job name (glob).")
@click.option("--comment", help="Why (kept with the silence).")
@click.pass_context
def silence(
    ctx: click.Context,
    key: str | None,
    duration: str,
    rule: str | None,
    host: str | None,
    job: str | None,
    comment: str | None,
) -> None:
    """Silence notifications of an alert KEY (or of --rule/--host/--job globs) for a while."""
    run(_silence(ctx, key, duration, rule, host, job, comment))


async def _silence(
    ctx: click.Context,
    key: str | None,
    duration: str,
    rule: str | None,
    host: str | None,
    job: str | None,
    comment: str | None,
) -> None:
    from console.fields import duration_s

    seconds = duration_s(duration)
    if seconds is None or seconds <= 0:
        raise UsageError(f"--for: {duration!r} is not a duration", "write it as 30m, 2h or 1d")
    if seconds > MAX_SILENCE_S:
        raise UsageError(
            f"--for: {duration} is longer than a year",
            "silence for at most 365d; disable the rule in the profile instead",
        )
    if not any((key, rule, host, job)):
        raise UsageError(
            "KEY: give an alert key or --rule/--host/--job",
            "`gpuconsole alerts` lists the firing keys",
        )
    now = time.time()
    from console.alerts.store import Silence

    store = _store(ctx)
    try:
        got = store.add_silence(
            Silence(
                id=0,
                until=now + seconds,
                created_at=now,
                key=key,
                rule=rule,
                host=host,
                job=job,
                by="gpuconsole alerts silence",
                comment=comment,
            )
        )
        matching = [a.key for a in store.firing() if got.matches(a)]
    finally:
        store.close()
    until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(got.until))
    out(f"silence {got.id}: {got.describe()} until {until}")
    if not matching:
        err(
            "note: no firing alert matches it now (it will silence matching alerts that fire "
            "before it ends); `gpuconsole alerts` lists the firing keys"
        )


@alerts.command("silences")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per silence.")
@click.pass_context
def silences(ctx: click.Context, as_json: bool) -> None:
    """The silences in force (and those ended within the last day)."""
    run(_silences(ctx, as_json))


async def _silences(ctx: click.Context, as_json: bool) -> None:
    now = time.time()
    from console.alerts.rows import age_text
    from console.texttable import text_table

    store = _store(ctx)
    try:
        found = store.silences(now)
    finally:
        store.close()
    if as_json:
        for s in found:
            out(json.dumps({**asdict(s), "active": s.active(now)}))
        return
    rows = [("ID", "STATE", "LEFT", "UNTIL", "MATCHES")]
    for s in found:
        rows.append(
            (
                str(s.id),
                "active" if s.active(now) else "ended",
                age_text(s.until - now) if s.active(now) else "-",
                time.strftime("%Y-%m-%d %H:%M", time.localtime(s.until)),
                s.describe() + (f"  ({s.comment})" if s.comment else ""),
            )
        )
    if found:
        for line in text_table(
            rows, right={0}, min_widths=(4, 7, 9, 16), sep=("  ", " ", " ", "  ")
        ):
            out(line)


@alerts.command("unsilence")
@click.argument("silence_id", type=int, metavar="ID")
@click.pass_context
def unsilence(ctx: click.Context, silence_id: int) -> None:
    """End a silence now (its ID from `alerts silences`)."""
    run(_unsilence(ctx, silence_id))


async def _unsilence(ctx: click.Context, silence_id: int) -> None:
    store = _store(ctx)
    try:
        if not store.remove_silence(silence_id):
            raise UsageError(
                f"ID: no silence {silence_id}", "`gpuconsole alerts silences` lists them"
            )
    finally:
        store.close()
    out(f"silence {silence_id} ended")
