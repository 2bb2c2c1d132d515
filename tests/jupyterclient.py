"""A small client of Jupyter Server's REST and websocket APIs (no Jupyter package needed):
start a kernel, run code in it, read what it printed and returned. Used by the notebook
integration tests and by ``scripts/device/jupyter_probe.py`` on the GPU machine."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from websockets.sync.client import connect as ws_connect


def http(
    method: str, url: str, token: str | None, body: Any = None, timeout: float = 60
) -> tuple[int, Any]:
    """One request with ``Authorization: token T`` when a token is given; ``(status, JSON
    body or raw bytes)``; HTTP error statuses are returned."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"token {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = int(r.status), r.read()
    except urllib.error.HTTPError as e:
        status, raw = int(e.code), e.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw


@dataclass
class Jupyter:
    """One Jupyter server: its base URL (``http://127.0.0.1:PORT``) and token."""

    base: str
    token: str

    def get(self, path: str, token: str | None = "") -> tuple[int, Any]:
        """GET ``path`` with the server's token (or ``token``; ``None``: no token)."""
        return http("GET", self.base + path, self.token if token == "" else token)

    def start_kernel(self) -> str:
        """Start a ``python3`` kernel; its id."""
        st, body = http("POST", self.base + "/api/kernels", self.token, {"name": "python3"})
        assert st == 201, (st, body)
        assert body["name"] == "python3"
        return str(body["id"])

    def delete_kernel(self, kid: str) -> None:
        """Shut kernel ``kid`` down."""
        st, body = http("DELETE", f"{self.base}/api/kernels/{kid}", self.token)
        assert st == 204, (st, body)

    def execute(self, kid: str, code: str, timeout: float = 180) -> dict[str, Any]:
        """Run ``code`` in kernel ``kid`` over ``/api/kernels/<id>/channels`` (Jupyter
        messaging protocol 5.3, Jupyter Server's JSON websocket form: one message a frame,
        ``channel`` naming its channel); collects this request's iopub ``stream`` text,
        ``execute_result`` data and ``error``, until iopub ``status: idle`` and the shell
        ``execute_reply`` both came."""
        ws_url = self.base.replace("http://", "ws://") + f"/api/kernels/{kid}/channels"
        session = uuid.uuid4().hex
        msg_id = uuid.uuid4().hex
        msg = {
            "header": {
                "msg_id": msg_id,
                "username": "test",
                "session": session,
                "msg_type": "execute_request",
                "version": "5.3",
                "date": datetime.now(timezone.utc).isoformat(),
            },
            "parent_header": {},
            "metadata": {},
            "buffers": [],
            "channel": "shell",
            "content": {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        }
        got: dict[str, Any] = {"stream": "", "result": None, "error": None, "reply": None}
        idle = False
        deadline = time.monotonic() + timeout
        with ws_connect(
            f"{ws_url}?session_id={session}",
            additional_headers={"Authorization": f"token {self.token}"},
            open_timeout=60,
            max_size=2**24,
        ) as ws:
            ws.send(json.dumps(msg))
            while not (idle and got["reply"] is not None):
                left = deadline - time.monotonic()
                assert left > 0, f"no idle/execute_reply within {timeout} s: {got}"
                frame = ws.recv(timeout=left)
                m = json.loads(frame)
                if m.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = m["header"]["msg_type"], m["content"]
                if kind == "stream":
                    got["stream"] += content["text"]
                elif kind == "execute_result":
                    got["result"] = content["data"]["text/plain"]
                elif kind == "error":
                    got["error"] = content
                elif kind == "status" and content["execution_state"] == "idle":
                    idle = True
                elif kind == "execute_reply":
                    got["reply"] = content["status"]
        return got
