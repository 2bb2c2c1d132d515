"""`gpuconsole notebook` (issue 9): JupyterLab in a container, reached through an SSH tunnel.

This package so far holds the first part: reading the URLs a Jupyter server logs at start and
rewriting them to the forwarded local address (console/notebook/urls.py)."""

from __future__ import annotations

from console.notebook.urls import ServerUrl, local_url, notebook_to_open, parse_server_urls

__all__ = ["ServerUrl", "local_url", "notebook_to_open", "parse_server_urls"]
