"""The URLs a Jupyter server logs at start, and the same URL through a forwarded local port.

Formats read (from Jupyter's own source):

- jupyter_server/serverapp.py (Jupyter Server 1.x/2.x, `ServerApp`, also under `LabApp`):
  `running_server_info` logs "Jupyter Server {version} is running at:" then `display_url`, which
  is `public_url` and, when it differs, `"\\n    " + local_url` (so a second line indented by 4
  spaces, `http://127.0.0.1:PORT/...` or `http://[::1]:PORT/...` when `ip` is IPv6). `_get_urlparts`
  builds every URL: scheme `https` when a certfile is set, else `http`; netloc `{ip}:{port}`
  (`[ip]` for IPv6, `localhost` for an empty ip); path `default_url` (it starts with `base_url`,
  e.g. `/lab`, `/tree`, `/prefix/lab`); query `token=<token>`, or `token=...` when the token came
  from config (not logged), no query when there is no token. `http+unix://` when serving on a
  UNIX socket (not forwardable by port: not read). `launch_browser` logs at CRITICAL "To access
  the server, open this file in a browser:" / "Or copy and paste one of these URLs:" followed by
  `connect_url` (Jupyter Server 1.x: the second URL on a line starting `     or `).
- notebook/notebookapp.py (classic Notebook <7, `NotebookApp`, and old `LabApp` on top of it):
  `notebook_info` logs "The Jupyter Notebook is running at:" and `display_url` (very early
  versions on the same line). `display_url`'s host for a wildcard ip: 5.0-5.4
  `[all ip addresses on your system]`; 5.5-5.7 `(hostname or 127.0.0.1)`; 6.x the hostname,
  then a second line `" or " + http://127.0.0.1:PORT/...`. `_url`/`_tcp_url` build
  `proto://ip:port/base_url` (proto `https` with a certfile); `_concat_token` adds `token=...`
  for a token from config. 5.x `start` logged at CRITICAL "Copy/paste this URL into your browser
  when you connect for the first time, to login with a token:" (6.x: "Or copy and paste one of
  these URLs:"); some 5.x releases appended the token to a URL that already had it, hence
  `?token=X&token=X` (jupyter/notebook issue #3620).
- `jupyter notebook list` / `jupyter server list`: `URL :: root_dir`, one server a line.

Docker log collectors pad lines with spaces to a fixed width; URLs end at the first whitespace.
A URL must carry an explicit port (every URL above does): that leaves out other links in the
log, such as the Welcome line's `https://jupyter.org/community.html`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ServerUrl", "local_url", "notebook_to_open", "parse_server_urls"]

#: scheme, then the host in one of four forms: `(a or b)` or `[all ip addresses on your
#: system]` (NotebookApp 5.x's wildcard ip), `[v6]`, or a name / IPv4 address; then the
#: explicit port and the rest up to whitespace or a bracket (RFC 3986 allows `[` `]` only
#: around an IPv6 host: a log record glued on after the URL, "...token=X[I 16:38:05.776
#: NotebookApp]", is not part of it).
_URL_RE = re.compile(
    r"(?<![\w+.-])(?P<scheme>https?)://"
    r"(?:\((?P<or_a>[^\s()]+) or (?P<or_b>[^\s()]+)\)"
    r"|\[(?P<all>all ip addresses on your system)\]"
    r"|\[(?P<v6>[0-9A-Fa-f:.%]+)\]"
    r"|(?P<host>[A-Za-z0-9_.~%-]+))"
    r":(?P<port>\d{1,5})"
    r"(?P<rest>[/?#][^\s\[\]]*)?"
)

#: host names a browser on the server's own machine reaches it by
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: the token Jupyter Server logs in place of one that came from config
#: (jupyter_server/serverapp.py `_get_urlparts`)
_HIDDEN_TOKEN = "..."


@dataclass(frozen=True)
class ServerUrl:
    """One Jupyter server URL as logged.

    scheme: "http" or "https". host: as logged, IPv6 without brackets (the container's hostname,
    `localhost`, `127.0.0.1`, `::1`, or NotebookApp 5.0-5.4's `all ip addresses on your
    system`). alt_host: the second host of NotebookApp's `(a or b)` form, else None.
    port: TCP port the server listens on inside the container.
    path: the URL path, `base_url` included (`/`, `/lab`, `/tree`, `/prefix/lab`), as logged
    (percent-encoded). token: the login token, None when the URL has none (no token, a password,
    or a token from config that Jupyter logs as `...`). line: the log line it came from, padding
    stripped.
    """

    scheme: str
    host: str
    port: int
    path: str
    token: str | None
    line: str
    alt_host: str | None = None


def _token(query: str) -> str | None:
    """The token of a query string; `?token=X&token=X` (notebook issue #3620) gives X once.

    Different repeated tokens do not occur in Jupyter's output; the first one wins."""
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get("token", [])
    for value in values:
        if value and value != _HIDDEN_TOKEN:
            return value
    return None


def _split_rest(rest: str) -> tuple[str, str]:
    """(path, query) of what follows the port; path "/" when the URL has none."""
    rest = rest.split("#", 1)[0]
    path, _, query = rest.partition("?")
    return (path or "/", query)


#: A shell prompt before a command line (``$ ``, ``# ``, ``user@host:~$ ``, ``(env) $ ``,
#: PowerShell's ``PS C:\> ``): a URL in a command the user typed (another tool's argument,
#: ``curl``) is not one the server logged.
_PROMPT_RE = re.compile(
    r"^(?:\([\w.-]+\)\s+)?(?:[\w.-]+@[\w.-]+(?::\S*)?\s?)?[$#%]\s+\S|^PS [A-Za-z]:\\[^>]*>\s"
)


def parse_server_urls(text: str) -> list[ServerUrl]:
    """Every Jupyter server URL in `text` (a startup log, or `jupyter server list` output), in
    the order first logged, each once: URLs with the same scheme, host, port, path and token are
    one (NotebookApp and Jupyter Server log the same URL at INFO and again at CRITICAL), and a
    URL without a token is left out where the same one is there with its token.

    Reads the formats in this module's docstring; `file:` and `http+unix:` URLs and URLs
    without an explicit port are not servers reachable by a forwarded TCP port and are left out,
    and so are URLs on a command line typed after a shell prompt (a user's own command).
    """
    found: list[ServerUrl] = []
    seen: set[tuple[str, str, int, str, str | None]] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if _PROMPT_RE.match(line):
            continue
        for m in _URL_RE.finditer(line):
            port = int(m["port"])
            if not 0 < port < 65536:
                continue
            host = m["or_a"] or m["all"] or m["v6"] or m["host"]
            path, query = _split_rest(m["rest"] or "")
            url = ServerUrl(
                scheme=m["scheme"],
                host=host,
                port=port,
                path=path,
                token=_token(query),
                line=line,
                alt_host=m["or_b"],
            )
            key = (url.scheme, url.host, url.port, url.path, url.token)
            if key not in seen:
                seen.add(key)
                found.append(url)
    # the same server mentioned without its token ("password for http://localhost:8888:", a
    # tool's own output) is the one logged with it
    tokened = {(u.scheme, u.host, u.port, u.path) for u in found if u.token}
    return [u for u in found if u.token or (u.scheme, u.host, u.port, u.path) not in tokened]


def notebook_to_open(urls: Sequence[ServerUrl]) -> ServerUrl | None:
    """The one URL to open of those one server logged: the first with a loopback host
    (`127.0.0.1`, `localhost`, `::1`, or `(hostname or 127.0.0.1)`), else the first; None for
    none. Any of them gives the same `local_url` when they share port, path and token."""
    for url in urls:
        if url.host in _LOOPBACK or url.alt_host in _LOOPBACK:
            return url
    return urls[0] if urls else None


def local_url(url: ServerUrl, local_port: int) -> str:
    """`url` through a local port forwarded to the server's port: `http://127.0.0.1:<local_port>`
    + path + `?token=<token>` (no query without a token). The container's host name is dropped;
    the path (with base_url) and token are kept; the scheme is the server's own (`https` stays
    `https`: the tunnel carries TLS unchanged)."""
    if not 0 < local_port < 65536:
        raise ValueError(f"local port {local_port} is not a TCP port (1-65535)")
    out = f"{url.scheme}://127.0.0.1:{local_port}{url.path}"
    if url.token is not None:
        out += "?" + urllib.parse.urlencode({"token": url.token})
    return out
