"""The headless CLI's shared parts: the command group, error mapping, the service of a command
and the job output every command prints the same way.

Data goes to stdout (job ids, tables, JSON, log lines); diagnostics go to stderr. Every
deliberate error prints ``error: <what, where>`` and ``  fix: <how>`` on stderr and exits 2 for
bad input (spec, profile, flags) or 1 for everything else. ``submit --follow`` exits with the
job's exit code.

A closed stdout (``gpuconsole top --json | head -n 1``, a pager quit early) ends the command at
once with exit 0, like any Unix filter: data is written with :func:`out`, which turns the
broken pipe into :class:`OutputClosed`; streaming commands also watch stdout while they wait
(:func:`while_stdout_open`), so a quiet stream ends too. :func:`run` then points stdout at
``/dev/null`` so the interpreter's last flush cannot fail again (Python docs, "signal: Note on
SIGPIPE").
"""

from __future__ import annotations

import atexit
import errno
import gc
import logging
import os
import select
import stat
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from console.errors import ConfigError, PlanError, UsageError
from remote.errors import GpuConsoleError

if TYPE_CHECKING:  # the service stack is imported by the commands that use it (start-up)
    from console.jobs.logs import JobLogLine
    from console.jobs.store import JobRecord
    from console.profiles import Profile
    from console.service import Service

T = TypeVar("T")
log = logging.getLogger("gpuconsole")


def err(msg: str) -> None:
    """Print a diagnostic line on stderr (data goes to stdout); a closed stderr is ignored."""
    try:
        click.echo(msg, err=True)
    except OSError:
        pass


class OutputClosed(Exception):
    """Stdout was closed by its reader (a pipe's reader exited, a pager quit): the command
    ends with exit 0 (see :func:`run`). Not an ``OSError``, so no handler of I/O errors on
    the way up mistakes it for a host or file failure."""


def out(text: str) -> None:
    """Print a line of data on stdout.

    Raises:
        OutputClosed: stdout's reader is gone (EPIPE).
    """
    try:
        click.echo(text)
    except BrokenPipeError as e:
        raise OutputClosed() from e
    except OSError as e:
        if e.errno in (errno.EPIPE, errno.ESHUTDOWN):
            raise OutputClosed() from e
        raise


def stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader is gone (poll says ``POLLERR`` or
    ``POLLHUP`` on the writing end, as Linux does for a pipe without readers). ``False`` for
    terminals and files, and where it cannot be told."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
            return False
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (tests, a closed fd)
        return False


#: How often a waiting streaming command checks whether stdout's reader is gone (s).
STDOUT_WATCH_S = 0.2


async def while_stdout_open(aw: Coroutine[Any, Any, T]) -> T:
    """Run ``aw`` until it returns, or until stdout's reader is gone (checked every
    :data:`STDOUT_WATCH_S` s): then ``aw`` is cancelled and awaited.

    Raises:
        OutputClosed: stdout was closed while ``aw`` ran (or ``aw`` itself raised it).
    """
    import asyncio

    task: asyncio.Task[T] = asyncio.ensure_future(aw)

    async def watch() -> None:
        while not stdout_closed():
            await asyncio.sleep(STDOUT_WATCH_S)

    watcher = asyncio.create_task(watch(), name="stdout-watch")
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise OutputClosed()
    finally:
        for t in (watcher, task):
            t.cancel()
        await asyncio.gather(watcher, task, return_exceptions=True)


def discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null: the interpreter's final flush of what is still
    buffered must not raise ``BrokenPipeError`` again (Python docs, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; map gpuconsole errors to a message and an exit status
    (a closed stdout: exit 0, see the module docstring). Ctrl-C: ``interrupted``, exit 130,
    also before the coroutine started (it is closed, not left un-awaited), and tasks that
    end with an error while asyncio cancels them go to the debug log, not stderr."""
    global _after_interrupt, _interrupt_note
    _after_interrupt = False  # (in-process tests call run() again and again)
    _interrupt_note = None
    main = _quiet_when_interrupted(coro)
    try:
        import asyncio

        return asyncio.run(main)
    except OutputClosed:
        discard_stdout()
        raise SystemExit(0) from None
    except BrokenPipeError:
        if not stdout_closed():
            raise
        discard_stdout()  # a write to stdout outside `out` (click.echo of a table)
        raise SystemExit(0) from None
    except GpuConsoleError as e:
        err(f"error: {e.message}")
        if e.hint:
            err(f"  fix: {e.hint}")
        raise SystemExit(2 if isinstance(e, (ConfigError, PlanError, UsageError)) else 1) from None
    except KeyboardInterrupt:
        # the command may have ended with an error just as Ctrl-C came: its task's exception,
        # never retrieved, is reported when the task is collected; the handler hears it now
        _after_interrupt = True
        main.close()  # interrupted before asyncio.run started them: no "never awaited"
        coro.close()
        # asyncio.run's own end can be cut between making a coroutine and starting it
        # (Runner.close: shutdown_asyncgens, shutdown_default_executor); the "never awaited"
        # warning when that coroutine is collected later says nothing to the person who
        # pressed Ctrl-C
        import warnings

        warnings.filterwarnings(
            "ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning
        )
        quiet_teardown()
        from console.entry import INTERRUPTED_EXIT, say_interrupted

        say_interrupted()  # once, also if the command's end is interrupted again
        if _interrupt_note is not None:
            err(_interrupt_note)
        raise SystemExit(INTERRUPTED_EXIT) from None


#: What a Ctrl-C from now on leaves done, said after ``interrupted`` (:func:`note_done`).
_interrupt_note: str | None = None


def note_done(note: str) -> None:
    """Say ``note`` after ``interrupted`` if Ctrl-C comes from now on: what the command has
    already done that the interruption does not undo (a job submitted keeps running)."""
    global _interrupt_note
    _interrupt_note = note


#: Set by :func:`run` once Ctrl-C ended the command (:func:`_quiet_when_interrupted`).
_after_interrupt = False


async def _quiet_when_interrupted(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on a loop whose exception handler, once Ctrl-C has cancelled the
    command, logs at debug level what asyncio reports while it cancels the remaining tasks
    (a host listing cut off mid-answer ends with that host's error, not a cancellation, and
    ``asyncio.run`` would log it with a traceback as "unhandled exception during
    asyncio.run() shutdown"). Before that, asyncio's handler is kept."""
    import asyncio

    loop = asyncio.get_running_loop()
    interrupted = False

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if interrupted or _after_interrupt or isinstance(sys.exc_info()[1], KeyboardInterrupt):
            logging.getLogger("gpuconsole").debug(
                "after interrupt: %s: %r", context.get("message"), context.get("exception")
            )
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        return await coro
    except asyncio.CancelledError:  # asyncio.run cancels the command on Ctrl-C
        interrupted = True
        raise


def quiet_teardown() -> None:
    """After Ctrl-C, objects the interrupt left half-built (an event loop interrupted inside
    its constructor) may fail in their finalizers; the interpreter would print each as
    "Exception ignored in ..." with a traceback. The user asked to stop: those go to the
    debug log instead (:data:`sys.unraisablehook`)."""

    def hook(u: Any) -> None:
        logging.getLogger("gpuconsole").debug(
            "ignored after interrupt: %r in %r", u.exc_value, u.object
        )

    sys.unraisablehook = hook


def _nonempty_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``-p ""`` is a mistake (an unset shell variable), not a request for the default."""
    if value is not None and not value.strip():
        raise click.BadParameter(
            "is empty: give a profile's name or a profile file's path, or leave -p out for "
            "the default ($GPUCONSOLE_PROFILE, your default, then `local`)"
        )
    return value


@click.group(invoke_without_command=True)
@click.option(
    "--profile",
    "-p",
    "profile",
    metavar="NAME|PATH",
    default=None,
    callback=_nonempty_profile,
    help="Profile to use (default: $GPUCONSOLE_PROFILE, your default, then `local`).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Debug logging (stderr; the app's log file while the app runs).",
)
@click.option("--readonly", is_flag=True, help="App: hide stop, submit, exec and notebooks.")
@click.option(
    "--replay",
    "replay",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="App: show a telemetry recording (`top --record`) instead of live hosts.",
)
@click.version_option(package_name="gpuconsole")
@click.pass_context
def main(
    ctx: click.Context, profile: str | None, verbose: bool, readonly: bool, replay: Path | None
) -> None:
    """Launch torchrun jobs in containers on your GPU hosts, follow their logs, watch the fleet.

    Without a command: the interactive console (fleet, jobs, log panes).
    """
    ctx.obj = {"profile": profile}
    if ctx.invoked_subcommand is None:
        raise SystemExit(_app(ctx, verbose, readonly, replay))
    # Registered first, so it runs after every exit handler the command registers (LIFO).
    atexit.register(freeze_heap_at_exit)
    handler = logging.StreamHandler(sys.stderr)
    if not verbose:  # as the commands' own lines: "warning: ..." (-v: the log's full form)
        handler.setFormatter(_SayFormatter())
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[handler],
    )
    if not verbose:
        logging.getLogger("asyncssh").setLevel(logging.ERROR)


@main.command("help")
@click.argument("command", nargs=-1)
@click.pass_context
def help_command(ctx: click.Context, command: tuple[str, ...]) -> None:
    """Show gpuconsole's help, or a command's (`gpuconsole help logs` = `gpuconsole logs
    --help`)."""
    group = ctx.parent.command if ctx.parent is not None else main
    parent = ctx.parent
    cmd: click.Command = group
    path = [parent.info_name if parent is not None and parent.info_name else "gpuconsole"]
    for name in command:
        sub = cmd.get_command(ctx, name) if isinstance(cmd, click.Group) else None
        if sub is None:
            where = " ".join(path)
            names = ", ".join(cmd.list_commands(ctx)) if isinstance(cmd, click.Group) else ""
            raise click.UsageError(
                f"no command {name!r} in `{where}`" + (f"; commands: {names}" if names else "")
            )
        cmd = sub
        path.append(name)
    with click.Context(cmd, info_name=" ".join(path), parent=None) as sub_ctx:
        click.echo(cmd.get_help(sub_ctx))


class _SayFormatter(logging.Formatter):
    """A log record on stderr as the commands say things: ``warning: <message>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {super().format(record)}"


def freeze_heap_at_exit() -> None:
    """Move every object the garbage collector tracks to its permanent generation
    (``gc.freeze``), so the interpreter's collections at shutdown do not walk the heap the
    command imported (modules, classes, pydantic schemas; about 45 ms of ``gpuconsole ps``'s
    CPU time on the 2-core dev machine, docs/benchmarks.md "CLI start-up").

    Registered with :mod:`atexit` when a headless command starts, so it runs after the
    command's own exit handlers; stdout and stderr are still flushed by the interpreter after
    it. What it changes: cyclic garbage still alive at exit is no longer collected, so its
    finalizers (``__del__``, weakref callbacks) do not run; the CLI closes what it opens
    (service, store, transports) before it returns, and CPython does not promise to run
    finalizers at exit anyway (``object.__del__``)."""
    gc.freeze()


def _app(ctx: click.Context, verbose: bool, readonly: bool, replay: Path | None) -> int:
    """Run the Textual app; logging goes to ``<state dir>/gpuconsole.log`` meanwhile (stderr
    would corrupt the screen)."""
    from console.config import config_dir, load_config
    from console.jobs.store import state_dir

    try:
        config = load_config()
        profile = command_profile(ctx)
        log_file = state_dir() / "gpuconsole.log"
    except GpuConsoleError as e:
        err(f"error: {e.message}")
        if e.hint:
            err(f"  fix: {e.hint}")
        return 2
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        filename=str(log_file),
    )
    logging.getLogger("asyncssh").setLevel(logging.DEBUG if verbose else logging.WARNING)
    from console.app.app import GpuConsoleApp, keymap_errors

    problems = keymap_errors(config.keymap)
    if problems:
        path = config_dir() / "config.yaml"
        for bid, p in problems:
            line = config.keymap_line(bid)
            err(f"error: {path}{f':{line}' if line else ''}: {p}")
        err(
            "  fix: the binding ids: press `?` in the console (each key that applies there, "
            'what it does and its binding id), or see "Keys and config" in README.md'
        )
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        err("error: the interactive console needs a terminal")
        err("  fix: run it in a terminal, or use the headless commands (`gpuconsole --help`)")
        return 2
    from console.service import Service

    app = GpuConsoleApp(Service(profile), config=config, readonly=readonly, replay=replay)
    rc = app.run()
    return rc or 0


def command_profile(ctx: click.Context) -> Profile:
    """The profile named by ``--profile`` (else ``$GPUCONSOLE_PROFILE``, the default, ``local``).

    Raises:
        ConfigError: the profile cannot be found or read.
    """
    from console.profiles import resolve_profile

    ref: str | None = ctx.obj["profile"]
    return resolve_profile(ref)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused, then freeze what it allocated.

    For the start-up of a command: importing the service stack and loading the profile
    allocate tens of thousands of objects that live as long as the process (modules, classes,
    pydantic schemas), and the collections they would trigger only walk them (about 10 ms of
    ``gpuconsole ps``, docs/benchmarks.md "CLI start-up"). At the end every tracked object is
    moved to the permanent generation (``gc.freeze``, as the ``gc`` docs advise for objects
    that live as long as the process), so later collections skip them too, and the collector
    runs again if it ran before (also when the block raises). Cyclic garbage made in the
    block is not collected; keep the block to imports and one-off set-up.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@asynccontextmanager
async def command_service(ctx: click.Context) -> AsyncIterator[Service]:
    """The service of a command (its profile, the state dir's store), closed at the end."""
    with collector_paused():
        from console.service import Service

        svc = Service(command_profile(ctx))
    async with svc:
        yield svc


def print_line(line: JobLogLine, timestamps: bool) -> None:
    """One log line on stdout: ``[node:rank] text``, after Docker's timestamp if asked.

    Raises:
        OutputClosed: stdout's reader is gone.
    """
    from remote.docker import format_ns

    prefix = f"{format_ns(line.ts_ns)} " if timestamps else ""
    out(f"{prefix}{line.tag()} {line.text}")


class FollowStateLines:
    """Says on stderr when a followed node's log stream drops and when it resumes: one
    ``n<node> on <host>: log stream lost (<why>); reconnecting`` line per outage and one
    ``n<node> on <host>: log stream resumed`` line after it (stdout carries only log lines).
    Likewise one ``warning: n<node> on <host>: cannot archive its log: <file>: <why>; the
    follow goes on (fix: ...)`` line when its archive cannot be written (a full state dir)
    and one ``... archived again`` line when it can.

    Args:
        job: the followed job (its nodes name the hosts).
    """

    def __init__(self, job: JobRecord) -> None:
        self.job_id = job.id
        self.hosts = {n.node_rank: n.host for n in job.nodes}
        self.reconnecting: set[int] = set()

    def __call__(self, event: object) -> None:
        """Take a :class:`~console.events.FollowStateChanged` or
        :class:`~console.events.ArchiveStateChanged` (others are ignored)."""
        from console.events import ArchiveStateChanged, FollowStateChanged

        if isinstance(event, ArchiveStateChanged) and event.job_id == self.job_id:
            where = f"n{event.node_rank} on {self.hosts.get(event.node_rank, '?')}"
            if event.error is not None:
                fix = f" (fix: {event.hint})" if event.hint else ""
                err(
                    f"warning: {where}: cannot archive its log: {event.error}; the follow "
                    f"goes on{fix}"
                )
            else:
                err(f"{where}: its log is archived again")
            return
        if not isinstance(event, FollowStateChanged) or event.job_id != self.job_id:
            return
        node = event.node_rank
        where = f"n{node} on {self.hosts.get(node, '?')}"
        if event.state == "reconnecting" and node not in self.reconnecting:
            self.reconnecting.add(node)
            why = f" ({event.detail})" if event.detail else ""
            err(f"{where}: log stream lost{why}; reconnecting")
        elif event.state == "following" and node in self.reconnecting:
            self.reconnecting.discard(node)
            err(f"{where}: log stream resumed")
        elif event.state == "ended":
            self.reconnecting.discard(node)


async def follow_job(
    svc: Service,
    job: JobRecord,
    *,
    tail: int | None,
    timestamps: bool,
    node: int | None = None,
    since_ns: int | None = None,
) -> int:
    """Follow a job's logs to its end (gang teardown on a failure); return the exit code.

    A node's reconnects are said on stderr (:class:`FollowStateLines`).

    Raises:
        OutputClosed: stdout's reader is gone (the job keeps running).
    """
    import asyncio

    from console.events import ArchiveStateChanged, FollowStateChanged
    from console.jobs.status import STOPPED_EXIT_CODE

    async def pump() -> None:
        lines = svc.follow(job, node=node, since_ns=since_ns, tail=tail)
        try:
            async for line in lines:
                print_line(line, timestamps)
        finally:  # a closed stdout ends the follow here, not in a finalizer task later
            if isinstance(lines, AsyncGenerator):
                await lines.aclose()

    sub = svc.bus.subscribe(FollowStateLines(job), kinds=(FollowStateChanged, ArchiveStateChanged))
    try:
        await while_stdout_open(pump())
    except (KeyboardInterrupt, asyncio.CancelledError):
        err(f"stopped following; the job keeps running (`gpuconsole stop {job.id}`)")
        return 130
    finally:
        sub.close()
    job = await svc.refresh_job(job)
    print_summary(job)
    if job.state == "succeeded":
        return 0
    if job.state == "stopped":
        return STOPPED_EXIT_CODE  # 128 + SIGTERM, as a shell reports a stopped process
    codes = [n.exit_code for n in job.nodes if n.exit_code]
    if job.failure and (code := job.failure.get("exit_code")):
        return int(code)
    return codes[0] if codes else 1


def print_summary(job: JobRecord) -> None:
    """The job's end state per node and its first failure (reason, fix) on stderr."""
    from console.jobs.status import format_node_state, job_summary

    nodes = ", ".join(f"n{n.node_rank} {format_node_state(n)}" for n in job.nodes)
    err(f"job {job.id} {job.state} ({nodes})")
    if job.failure:
        f = job.failure
        rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
        code = f", exit code {f['exit_code']}" if f.get("exit_code") is not None else ""
        err(f"  first failure: node {f['node']} on {f['host']}{rank}{code}: {f['reason']}")
        if f.get("fix"):
            err(f"  fix: {f['fix']}")
    elif summary := job_summary(job):
        err(f"  {summary}")
