"""Rules for Jupyter Server, JupyterLab and the classic Notebook failing to start or to serve.

A notebook job's container runs ``jupyter lab`` (console/jobs/plan.py ``notebook_command``);
when the server does not come up, its log says why in one of a few fixed messages. Each rule
matches the stable part of the message's format string, on the normalised lines (any log
prefix ``[C 2026-12-01 13:05:41.655 ServerApp]``, ``[W 10:28:19.134 NotebookApp]``, a compose or
kubectl prefix, Markdown quoting in a report is tolerated).

Primary sources:

- jupyter-server/jupyter_server ``jupyter_server/serverapp.py`` (2.x), ``ServerApp``:
  ``_find_http_port`` / ``_bind_http_server``: ``The port %i is already in use, trying another
  port.``, ``The port %i is already in use.`` (port_retries=0), ``Permission to listen on port
  %i denied.``, ``ERROR: the Jupyter server could not be started because port %i is not
  available.`` / ``... because no available port could be found.``; ``start_app``: ``Running as
  root is not recommended. Use --allow-root to bypass.``; ``_root_dir_validate``: ``No such
  directory: '%r'`` (a TraitError, logged by traitlets' ``catch_config_error`` after ``Bad
  config encountered during initialization:``), ``No such preferred dir: '%r'``.
- jupyter/notebook ``notebook/notebookapp.py`` (classic Notebook <= 6, also NbClassic and
  JupyterLab 1-2's LabApp): the same wording with ``notebook server`` for ``Jupyter server``
  (``The port %i is already in use, trying another random port.`` in older releases,
  ``Permission to listen on port %i denied`` without the period), ``No such notebook dir:
  '%r'``.
- jupyter/jupyter_core ``jupyter_core/command.py``: ``Jupyter command `%s` not found.``
  (older: ``Error executing Jupyter command '%s': [Errno 2] No such file or directory``);
  ``jupyter_core/application.py`` ``_runtime_dir_default`` creating ``~/.local/share/jupyter/
  runtime`` (``PermissionError: [Errno 13] Permission denied: '<dir>'`` for a uid whose HOME is
  not writable).
- jupyter_server ``services/contents/filemanager.py`` / ``fileio.py``: ``HTTPError(403,
  "Permission denied: %s")``, logged as ``Permission denied: <file>`` / ``403 POST
  /api/contents ...: Permission denied: <file>`` (root_dir not writable for the server's uid).
- jupyter/jupyter_client ``jupyter_client/restarter.py`` (``KernelRestarter``, also
  ``IOLoopKernelRestarter`` / ``AsyncIOLoopKernelRestarter``): ``KernelRestarter: restarting
  kernel (%i/%i), %s random ports``, ``KernelRestarter: restart failed``; jupyter_server
  ``services/kernels/kernelmanager.py`` ``_handle_kernel_died``: ``Kernel %s died, removing
  from map.``
- moby / runc: ``exec: "jupyter": executable file not found in $PATH`` (the container's command
  is missing; docker.py names no generic missing-command cause); dash / bash: ``/bin/sh: 1:
  jupyter: not found``, ``bash: jupyter: command not found``.

Not causes here: ``403 GET /api/...`` / ``Blocking Cross Origin`` lines without a reason (a
client with a wrong token or origin; the server is up), and port retries that end with the
server running (``is running at``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from console.diagnosis.common import NCCL_INFO, own_words
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]


def _make(
    kind: CauseKind,
    summary: str,
    fix: str,
    evidence: Iterable[str],
    facts: dict[str, FactValue | None],
) -> Diagnosis:
    return _diag(kind, summary, (), fix, evidence, facts)


def _tidy_path(value: str) -> str:
    """A path as the message quotes it (``'%r'`` of a path: ``''/x''``, ``u'D:\\x'``, in
    backticks) without the quotes, a ``u`` prefix and a sentence's closing punctuation."""
    v = value.strip().rstrip(".,;`").strip()
    for _ in range(3):
        v = v.strip("'\"`").strip()
        if v[:2] in ("u'", 'u"'):
            v = v[1:]
    return v


# -- the port ------------------------------------------------------------------------------

#: ``ServerApp`` / ``NotebookApp`` giving up (``self.log.critical`` then ``self.exit(1)``).
_PORT_FATAL = re.compile(
    r"(?:Jupyter|notebook) server could not be started because (?:port (?P<port>\d+) is not "
    r"available|no available port could be found)",
    re.I,
)
#: Each port tried: taken (EADDRINUSE) or refused (EACCES; Windows' reserved port ranges).
_PORT_TAKEN = re.compile(r"\bThe port (?P<port>\d+) is already in use\b")
_PORT_DENIED = re.compile(r"\bPermission to listen on port (?P<port>\d+) denied")
#: The server came up after all (a retry found a port).
_RUNNING = re.compile(r"\bis running at\b", re.I)
#: EADDRINUSE raised out of the server's bind (a version without the retry loop's handling).
_ERRNO_IN_USE = re.compile(
    r"\[Errno (?:98|48|10048)\] (?:Address already in use|Only one usage)"
    r"|\bEADDRINUSE\b"
)
_JUPYTER_FRAME = re.compile(
    r"(?:jupyter_server|notebook|jupyterlab)[/\\]\w+\.py|serverapp\.py"
    r"|notebookapp\.py|ServerApp|NotebookApp|LabApp"
)
_PORT_ARG = re.compile(r"--(?:ServerApp\.|NotebookApp\.)?port[= ](?P<port>\d+)\b")


def _port(lines: Sequence[Line]) -> Diagnosis | None:
    fatal = next(((ln, m) for ln in lines if (m := _PORT_FATAL.search(ln.text))), None)
    taken = [(ln, m) for ln in lines if (m := _PORT_TAKEN.search(ln.text))]
    denied = [(ln, m) for ln in lines if (m := _PORT_DENIED.search(ln.text))]
    tries = sorted(taken + denied, key=lambda t: t[0].index)
    errno = next((ln for ln in lines if _ERRNO_IN_USE.search(ln.text)), None)
    if fatal is None:
        if tries:
            last = tries[-1][0].index
            if any(_RUNNING.search(ln.text) for ln in lines[last:]):
                return None  # a retry found a free port: the server is up
        elif errno is None or not any(_JUPYTER_FRAME.search(ln.text) for ln in lines):
            return None
    port: int | None = None
    if fatal is not None and fatal[1]["port"]:
        port = int(fatal[1]["port"])
    elif tries:
        port = int(tries[0][1]["port"])
    else:
        port = next((int(m["port"]) for ln in lines if (m := _PORT_ARG.search(ln.text))), None)
    reason = "in use" if taken or errno is not None else "permission denied" if denied else None
    evidence = [t[0].raw for t in tries[:2]]
    if fatal is not None:
        evidence.append(fatal[0].raw)
    elif errno is not None and not tries:
        evidence.append(errno.raw)
    which = f"port {port}" if port is not None else "its port"
    several = len({int(m["port"]) for _, m in tries}) > 1
    if reason == "permission denied":
        why = (
            "the system refused permission to listen (EACCES) on "
            f"{which}{' and on every retry port' if several else ''}"
        )
        fix = (
            f"start it on another port; on Windows `netsh int ipv4 show excludedportrange "
            f"protocol=tcp` lists the reserved ranges {which} falls into"
        )
    else:
        why = (
            f"another process already listens on {which}"
            f"{' and on every retry port' if several else ''} (EADDRINUSE)"
        )
        fix = (
            f"free {which} (`ss -ltnp 'sport = :{port or '<port>'}'` on the host: a stale "
            "notebook or another server) or start the notebook again on another port"
        )
    return _make(
        "jupyter_port_unavailable",
        f"the Jupyter server could not be started: {why}, so it exited without serving",
        fix,
        evidence,
        {"port": port, "reason": reason},
    )


# -- root ----------------------------------------------------------------------------------

_ROOT = re.compile(r"Running as root is not recommended\b")


def _root(lines: Sequence[Line]) -> Diagnosis | None:
    for ln in lines:
        if not _ROOT.search(ln.text):
            continue
        nxt = lines[ln.index + 1].text if ln.index + 1 < len(lines) else ""
        if "allow-root" not in ln.text and "allow-root" not in nxt:
            continue  # another program's advice, not Jupyter's refusal
        evidence = [ln.raw] + ([lines[ln.index + 1].raw] if "allow-root" not in ln.text else [])
        return _make(
            "jupyter_root_refused",
            "Jupyter refused to start as root (uid 0) without --allow-root "
            "(ServerApp/NotebookApp.allow_root is False) and exited",
            "add --allow-root to the server's command (or c.ServerApp.allow_root = True), or run "
            "the container as a non-root user (--user / USER in the image)",
            evidence,
            {},
        )
    return None


# -- root_dir / notebook_dir ---------------------------------------------------------------

_NO_DIR = re.compile(
    r"No such (?P<what>notebook dir|preferred dir|directory): u?(?P<q>['\"`]+)(?P<path>.*?)(?P=q)"
)


def _dir_missing(lines: Sequence[Line]) -> Diagnosis | None:
    for ln in lines:
        if (m := _NO_DIR.search(ln.text)) is None:
            continue
        path = m["path"].strip() or None
        trait = {"notebook dir": "notebook_dir", "preferred dir": "preferred_dir"}.get(
            m["what"], "root_dir"
        )
        bad = next(
            (
                x.raw
                for x in lines[max(0, ln.index - 2) : ln.index]
                if "Bad config encountered" in x.text
            ),
            None,
        )
        return _make(
            "jupyter_dir_missing",
            f"the Jupyter server's {trait} {path or '(the configured folder)'} does not exist, "
            "so it failed its configuration check and exited before serving",
            f"create {path or 'the folder'} (or mount the workdir there) or point {trait} / "
            "--notebook-dir at an existing folder",
            ([bad] if bad else []) + [ln.raw],
            {"path": path, "setting": trait},
        )
    return None


# -- permissions ---------------------------------------------------------------------------

_PERM = re.compile(
    r"(?:PermissionError|OSError): \[Errno 13\] Permission denied: (?P<path>['\"][^'\"]+['\"])"
)
#: A path of Jupyter's own (data, runtime, config dirs under HOME) or a Jupyter frame nearby.
_JUPYTER_PATH = re.compile(r"/\.local\b|jupyter|/\.ipython\b|runtime", re.I)
_JUPYTER_TB = re.compile(
    r"jupyter_core|jupyter_server|runtime_dir|notebookapp|serverapp"
    r"|jupyter-lab|jupyter-notebook",
    re.I,
)
#: The contents API refusing to write in root_dir (403 with its reason).
_CONTENTS = re.compile(
    r"^\[[DIWEC] [^\]]*\]\s+Permission denied: (?P<path>\S.*?)\s*$"
    r"|\b403 (?:GET|POST|PUT|PATCH|DELETE) \S+.*?: Permission denied: (?P<path2>\S.*?)\s*$"
    # the notebook server's tornado log of the same refusal (NotebookApp, notebook < 7):
    # "[W 21:14:41.319 NotebookApp] HTTP 403: Forbidden (Permission denied: work/x.ipynb)"
    r"|\bHTTP 403: Forbidden \(Permission denied: (?P<path3>[^)\s][^)]*)\)"
)


def _permission(lines: Sequence[Line]) -> Diagnosis | None:
    jupyter_tb = any(_JUPYTER_TB.search(ln.text) for ln in lines)
    for ln in lines:
        if (m := _PERM.search(ln.text)) is None:
            continue
        path = _tidy_path(m["path"])
        if not (_JUPYTER_PATH.search(path) or jupyter_tb):
            continue
        return _make(
            "jupyter_permission",
            f"Jupyter could not create its own files: permission denied on {path} (its data / "
            "runtime dir under HOME, not writable by the container's uid), so it did not start",
            "give the server a writable HOME (-e HOME=/tmp) or set JUPYTER_RUNTIME_DIR / "
            "JUPYTER_DATA_DIR to a writable folder; or make the mounted home writable for the "
            "container's uid (or run as the image's user)",
            [ln.raw],
            {"path": path},
        )
    for ln in lines:
        if (m := _CONTENTS.search(ln.text.strip())) is None:
            continue
        path = _tidy_path(m["path"] or m["path2"] or m["path3"])
        return _make(
            "jupyter_permission",
            f"the Jupyter server may not write in its folder: creating or saving {path} was "
            "refused (403 Permission denied); the root_dir / mounted workdir is not writable "
            "for the server's uid",
            "make the mounted workdir writable for the container's uid (chown / chmod on the "
            "host, or run the container with --user matching the folder's owner)",
            [ln.raw],
            {"path": path},
        )
    return None


# -- not installed -------------------------------------------------------------------------

_MISSING = (
    # jupyter_core/command.py
    re.compile(r"Jupyter command [`'\"](?P<cmd>jupyter-[\w.-]+)[`'\"] not found"),
    re.compile(r"Error executing Jupyter command '(?P<sub>[\w.-]+)': \[Errno 2\] No such file"),
    # runc / moby, also quoted in a JSON or Go-quoted message
    re.compile(r"exec: \\*\"(?P<cmd>jupyter(?:-[\w.-]+)?)\\*\": executable file not found"),
    # dash / bash
    re.compile(
        r"(?:^|\s)-?(?:/bin/|/usr/bin/)?(?:ba|da)?sh: (?:line )?(?:\d+: )?"
        r"(?P<cmd>jupyter(?:-[\w.-]+)?): (?:command )?not found"
    ),
    # python -m jupyter / a missing server package
    re.compile(
        r"(?:python[\d.]*: |ModuleNotFoundError: )No module named "
        r"'?(?P<mod>jupyter(?:lab|_server)?)'?\s*$"
    ),
)


def _not_installed(lines: Sequence[Line]) -> Diagnosis | None:
    for pattern in _MISSING:
        for ln in lines:
            if (m := pattern.search(ln.text)) is None:
                continue
            groups = m.groupdict()
            if groups.get("sub"):
                cmd = f"jupyter-{groups['sub']}"
            elif groups.get("mod"):
                cmd = {"jupyterlab": "jupyter-lab", "jupyter_server": "jupyter-server"}.get(
                    groups["mod"], "jupyter"
                )
            else:
                cmd = groups["cmd"]
            what = (
                "Jupyter itself"
                if cmd == "jupyter"
                else f"the `{cmd}` command (package "
                f"{_PACKAGES.get(cmd, cmd.removeprefix('jupyter-'))})"
            )
            return _make(
                "jupyter_not_installed",
                f"{what} is not installed in the container (or not on its PATH), so the "
                "notebook server could not be started",
                f"use an image with JupyterLab (gpuconsole/torch rev >= 3) or install it in the "
                f"image (`pip install {_PACKAGES.get(cmd, 'jupyterlab')}`); check PATH / the "
                "environment activation",
                [ln.raw],
                {"command": cmd},
            )
    return None


_PACKAGES = {
    "jupyter": "jupyterlab",
    "jupyter-lab": "jupyterlab",
    "jupyter-notebook": "notebook",
    "jupyter-server": "jupyter_server",
    "jupyter-nbclassic": "nbclassic",
}


# -- the kernel ----------------------------------------------------------------------------

_RESTARTING = re.compile(r"KernelRestarter: restarting kernel \((?P<n>\d+)/(?P<max>\d+)\)")
_RESTART_FAILED = re.compile(r"KernelRestarter: restart failed")
_DIED = re.compile(r"\bKernel (?P<id>[\w-]+) died, removing from map")


def _kernel_died(lines: Sequence[Line]) -> Diagnosis | None:
    restarts = [(ln, m) for ln in lines if (m := _RESTARTING.search(ln.text))]
    failed = next((ln for ln in lines if _RESTART_FAILED.search(ln.text)), None)
    died = next(((ln, m) for ln in lines if (m := _DIED.search(ln.text))), None)
    if not restarts and failed is None and died is None:
        return None
    count = max((int(m["n"]) for _, m in restarts), default=0)
    kernel = died[1]["id"] if died else None
    evidence = [restarts[0][0].raw] if restarts else []
    evidence += [x.raw for x in (failed, died[0] if died else None) if x is not None]
    if failed is not None or died is not None:
        summary = (
            f"the notebook's kernel process died{' on every restart' if count else ''} "
            f"and the server gave up after {count} automatic restart"
            f"{'' if count == 1 else 's'}: the kernel is gone (the server still runs)"
        )
    else:
        summary = (
            f"the notebook's kernel process died and the server restarted it ({count} "
            "time" + ("" if count == 1 else "s") + "); its variables are lost"
        )
    return _make(
        "jupyter_kernel_died",
        summary,
        "look for why the kernel process died: an OOM kill (`docker inspect` OOMKilled, dmesg; "
        "raise the memory limit or use less), a crash in a native library, or a kernelspec whose "
        "command fails (run it by hand: `jupyter kernelspec list`)",
        evidence,
        {"restarts": count or None, "kernel": kernel},
    )


def _jupyter(ctx: Context) -> list[Diagnosis]:
    """Every Jupyter start / serve failure the text shows (the engine ranks them)."""
    checks = (_not_installed, _root, _dir_missing, _permission, _port, _kernel_died)
    return [d for check in checks if (d := check(ctx.lines)) is not None]


#: The rules of this module (the engine ranks what they find).
RULES = (_jupyter,)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: no line it reads needs PyTorch's chatter words (``device``, ``torch``,
#: ``process``, ``warning``: the server's levels are ``[W ...]``), nor NCCL's INFO lines.
NEEDS = {rule: Needs(own_words(), alone=True, unless=(NCCL_INFO,)) for rule in RULES}
