"""console/notebook/urls.py: the URLs a Jupyter server logs at start, read from real logs
(tests/data/cases/jupyter/, sources in SOURCES.md there) and rewritten to a forwarded port.

Expected values were written from the logs (and ../shared/cases/README.md rows jup-01, jup-02,
jup-04) before the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.notebook import ServerUrl, local_url, notebook_to_open, parse_server_urls

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "jupyter"

TOK1 = "0" * 47 + "1"
TOK2 = "0" * 47 + "2"
TOK4 = "0" * 47 + "4"


def _read(name: str) -> str:
    return (CASES / name).read_text(encoding="utf-8")


def _key(u: ServerUrl) -> tuple[str, str, int, str, str | None]:
    return (u.scheme, u.host, u.port, u.path, u.token)


# (file, [(scheme, host, port, path, token)], alt_host of the first)
CASE_TABLE: list[tuple[str, list[tuple[str, str, int, str, str | None]], str | None]] = [
    # jup-01: LabApp line and the Copy/paste line with `&token=X` repeated: one URL
    ("jup-01.txt", [("http", "a5933af67d37", 8888, "/", TOK1)], None),
    # jup-02: Jupyter Server 2.x, padded lines: container hostname and 127.0.0.1
    (
        "jup-02.txt",
        [("http", "bb318c6ed218", 8888, "/lab", TOK2), ("http", "127.0.0.1", 8888, "/lab", TOK2)],
        None,
    ),
    # jup-04: NotebookApp `(host or 127.0.0.1)`, logged twice: one URL
    ("jup-04.txt", [("http", "81dd24e2a351", 8888, "/", TOK4)], "127.0.0.1"),
    (
        "real-ipv6-server2.txt",
        [("http", "HOSTNAME", 8888, "/", "TOKEN"), ("http", "::1", 8888, "/", "TOKEN")],
        None,
    ),
    (
        "real-server1-or-docker.txt",
        [
            ("http", "8625965541eb", 8888, "/lab", "0" * 46 + "13"),
            ("http", "127.0.0.1", 8888, "/lab", "0" * 46 + "13"),
        ],
        None,
    ),
    (
        "real-notebook7-tree.txt",
        [
            ("http", "localhost", 8888, "/tree", "0" * 44 + "7505"),
            ("http", "127.0.0.1", 8888, "/tree", "0" * 44 + "7505"),
        ],
        None,
    ),
    (
        "real-tf-docker-or-host.txt",
        [("http", "2950c268081b", 8888, "/", "0" * 45 + "438")],
        "127.0.0.1",
    ),
    ("real-labapp-inline.txt", [("http", "localhost", 8888, "/", "0" * 44 + "1967")], None),
    (
        "real-notebook-list-no-token.txt",
        [
            ("http", "localhost", 8889, "/", None),
            ("http", "localhost", 8888, "/", None),
            ("http", "localhost", 8891, "/", None),
            ("http", "localhost", 8890, "/", None),
        ],
        None,
    ),
    # records glued on after the URL: "...token=X[I 16:38:05.776 NotebookApp]"
    (
        "real-vscode-glued-records.txt",
        [
            ("http", "localhost", 8888, "/", "0" * 44 + "9089"),
            ("http", "127.0.0.1", 8888, "/", "0" * 44 + "9089"),
        ],
        None,
    ),
]


@pytest.mark.parametrize(("name", "expected", "alt"), CASE_TABLE, ids=[c[0] for c in CASE_TABLE])
def test_cases(
    name: str, expected: list[tuple[str, str, int, str, str | None]], alt: str | None
) -> None:
    text = _read(name)
    urls = parse_server_urls(text)
    assert [_key(u) for u in urls] == expected
    assert urls[0].alt_host == alt
    raw_lines = text.splitlines()
    for u in urls:
        # the line it came from, padding stripped, is a line of the log
        assert u.line == u.line.strip()
        assert any(raw.strip() == u.line for raw in raw_lines)


def test_jup02_padding_gone_and_one_notebook() -> None:
    urls = parse_server_urls(_read("jup-02.txt"))
    assert all(" " not in (u.token or "") for u in urls)
    chosen = notebook_to_open(urls)
    assert chosen is not None and chosen.host == "127.0.0.1"
    assert local_url(chosen, 18888) == f"http://127.0.0.1:18888/lab?token={TOK2}"


def test_jup01_repeated_token_rewritten_once() -> None:
    (url,) = parse_server_urls(_read("jup-01.txt"))
    assert local_url(url, 40001) == f"http://127.0.0.1:40001/?token={TOK1}"


def test_jup04_or_form_rewritten() -> None:
    (url,) = parse_server_urls(_read("jup-04.txt"))
    assert local_url(url, 8888) == f"http://127.0.0.1:8888/?token={TOK4}"
    assert "81dd24e2a351" not in local_url(url, 8888)


def test_ipv6_and_no_token_rewritten() -> None:
    v6 = parse_server_urls(_read("real-ipv6-server2.txt"))
    assert notebook_to_open(v6) == v6[1]  # [::1] is loopback
    assert local_url(v6[1], 9000) == "http://127.0.0.1:9000/?token=TOKEN"
    listed = parse_server_urls(_read("real-notebook-list-no-token.txt"))
    assert local_url(listed[0], 9001) == "http://127.0.0.1:9001/"


def test_welcome_url_without_port_is_not_a_server() -> None:
    urls = parse_server_urls(_read("real-ipv6-server2.txt"))
    assert all("jupyter.org" not in u.host for u in urls)


# Single URLs in the shape jupyter_server/serverapp.py `_get_urlparts` (and notebook's
# notebookapp.py `_url`/`display_url`) builds (scheme "https"
# when a certfile is set; path = default_url, which starts with base_url; query
# `token=<token>`, or `token=...` when the token came from config): URL strings, not logs.
@pytest.mark.parametrize(
    ("text", "key", "local"),
    [
        (
            "https://gpu-node-01:8888/lab?token=abc123",
            ("https", "gpu-node-01", 8888, "/lab", "abc123"),
            "https://127.0.0.1:7000/lab?token=abc123",
        ),
        (
            "http://127.0.0.1:8888/user/user1/lab?token=abc123",
            ("http", "127.0.0.1", 8888, "/user/user1/lab", "abc123"),
            "http://127.0.0.1:7000/user/user1/lab?token=abc123",
        ),
        (
            "http://127.0.0.1:8888/lab?token=...",
            ("http", "127.0.0.1", 8888, "/lab", None),
            "http://127.0.0.1:7000/lab",
        ),
        (
            "http://[fe80::1]:8890/tree",
            ("http", "fe80::1", 8890, "/tree", None),
            "http://127.0.0.1:7000/tree",
        ),
        ("http://localhost:8888", ("http", "localhost", 8888, "/", None), "http://127.0.0.1:7000/"),
        # notebook 5.0-5.4 notebookapp.py `display_url` with ip='' (wildcard)
        (
            "http://[all ip addresses on your system]:8888/?token=abc123",
            ("http", "all ip addresses on your system", 8888, "/", "abc123"),
            "http://127.0.0.1:7000/?token=abc123",
        ),
    ],
)
def test_source_shaped_urls(
    text: str, key: tuple[str, str, int, str, str | None], local: str
) -> None:
    (url,) = parse_server_urls(text)
    assert _key(url) == key
    assert local_url(url, 7000) == local


def test_not_server_urls() -> None:
    assert parse_server_urls("") == []
    assert parse_server_urls("file:///home/jovyan/.local/share/jupyter/runtime/x.html") == []
    assert parse_server_urls("http+unix://%2Ftmp%2Fjupyter.sock/lab?token=abc") == []
    assert parse_server_urls("see https://jupyter.org/community.html.") == []


def test_local_url_rejects_bad_port() -> None:
    (url,) = parse_server_urls("http://127.0.0.1:8888/lab")
    with pytest.raises(ValueError):
        local_url(url, 0)
    with pytest.raises(ValueError):
        local_url(url, 65536)


def test_notebook_to_open_empty() -> None:
    assert notebook_to_open([]) is None
