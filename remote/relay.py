"""The engine relay of SSH hosts (``remote/agent/relay.py``): its bundle and its one command.

A log follow over SSH reads the host's Docker socket through the relay, run by an exec channel
of its own (:meth:`remote.ssh.SSHTransport.open_engine_stream`), so dockerd's one write per
log line reaches the console as a few large SSH packets instead of one packet per line (see
the relay's docstring).

Shipped like the telemetry agent (:mod:`remote.telemetry.stream`): uploaded once per host into
the content-addressed folder ``~/<RELAY_BASE>/<sha256[:16]>/`` (:meth:`Transport.put_bundle`)
and started with one command and no SFTP session when the host has it: ``sh`` checks the
script is there (status :data:`LAUNCH_MISSING` when not: upload, start again) and hands over
(``exec``) to the host's python, run ``-I -S`` (no site, no user site, no ``PYTHON*``
variables). The python, the script and the socket are positional parameters of a constant
``sh -c`` script, never spliced into shell text.
"""

from __future__ import annotations

import functools
from importlib import resources

from remote.agent.relay import EXIT_NO_SOCKET as EXIT_NO_SOCKET
from remote.agent.relay import READY as READY
from remote.transport import bundle_digest

#: Where the relay bundle is uploaded, relative to the host user's home.
RELAY_BASE = ".cache/gpuconsole/relay"
#: ``sh`` exits with this when the host has no copy of the bundle (the relay never does).
LAUNCH_MISSING = 97

#: ``sh -c`` script: $1 the relay's path (absolute, or under $HOME), $2 the python, $3 the
#: engine's socket.
_LAUNCH = (
    'case "$1" in /*) f="$1";; *) f="$HOME/$1";; esac; '
    f'[ -f "$f" ] || exit {LAUNCH_MISSING}; '
    'exec "$2" -I -S "$f" "$3"'
)


@functools.cache
def relay_files() -> dict[str, bytes]:
    """The files of the bundle: ``{"relay.py": <bytes>}`` (read once per process)."""
    return {"relay.py": resources.files("remote.agent").joinpath("relay.py").read_bytes()}


@functools.cache
def relay_script() -> str:
    """The bundle's ``relay.py`` relative to the host user's home (where
    :meth:`Transport.put_bundle` puts it)."""
    return f"{RELAY_BASE}/{bundle_digest(relay_files())}/relay.py"


def relay_argv(python: str, socket_path: str, script: str | None = None) -> list[str]:
    """The one command that runs the relay between its stdin/stdout and ``socket_path``.

    Exit status :data:`LAUNCH_MISSING` when the host lacks the bundle, 127 (126) when
    ``python`` is not there (not executable), :data:`EXIT_NO_SOCKET` when the socket cannot
    be connected; see ``remote/agent/relay.py`` for the rest.

    Args:
        python: the host's python (3.8+): a name on its PATH or a path.
        socket_path: the engine's unix socket on the host.
        script: the relay's path on the host (default: :func:`relay_script`, under $HOME).
    """
    return ["sh", "-c", _LAUNCH, "sh", script or relay_script(), python, socket_path]
