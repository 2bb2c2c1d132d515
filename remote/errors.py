"""The exception root shared by ``remote`` and ``console``.

Every error gpuconsole raises on purpose derives from :class:`GpuConsoleError`. Each carries a
one-line ``message`` (what went wrong, naming the host, file, line or field) and an optional
``hint`` (the fix). The CLI prints ``error: <message>`` and, when present, ``  fix: <hint>``.
"""

from __future__ import annotations


class GpuConsoleError(Exception):
    """Root of all deliberate gpuconsole errors.

    Args:
        message: one line naming what failed and where (host, file:line, field).
        hint: one line saying how to fix it, or ``None``.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class TransportError(GpuConsoleError):
    """A host could not be reached or a command on it could not be run."""

    def __init__(self, host: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"host {host}: {message}", hint)
        self.host = host
        self.detail = message


class HostUnreachable(TransportError):
    """The host did not answer (connection refused, timed out, name not resolved)."""


class HostKeyRefused(TransportError):
    """The host's SSH key is not trusted; the subclass says why (each has its own fix)."""


class HostKeyUnknown(HostKeyRefused):
    """known_hosts has no key for the host (first contact): the fix is to check the offered
    key's fingerprint and add it."""


class HostKeyChanged(HostKeyRefused):
    """known_hosts has another key for the host: it was reinstalled, or someone is in the
    middle. Never fixed by trusting the new key unchecked (no keyscan, no accept-new)."""


class HostKeyRevoked(HostKeyRefused):
    """The host offered a key that known_hosts marks ``@revoked``."""


class AuthenticationFailed(TransportError):
    """The SSH server refused every key offered."""


class ConnectionLost(TransportError):
    """An established connection dropped; callers may reconnect and resume."""


class RemoteCommandFailed(TransportError):
    """A command run on a host exited non-zero.

    Attributes:
        argv: the command as an argv list.
        returncode: its exit status.
        stderr: its standard error, decoded.
    """

    def __init__(self, host: str, argv: list[str], returncode: int, stderr: str) -> None:
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
        super().__init__(host, f"`{' '.join(argv)}` exited {returncode}: {tail}")
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


class DockerError(TransportError):
    """The Docker engine on a host refused or failed a request."""


class ImageNotFound(DockerError):
    """The job's image is not on the host and could not be pulled."""


class RuntimeUnavailable(TransportError):
    """A host cannot run jobs the way the job asks (``runtime: host``: no usable python, or
    one that cannot import torch); the message names the python, the hint the fix."""
