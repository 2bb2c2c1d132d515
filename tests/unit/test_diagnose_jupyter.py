"""console.diagnosis.jupyter on message variants the corpus (tests/data/diagnose/corpus/jupyter)
does not hold: each text is a format string of the primary source filled in (jupyter_server
serverapp.py, notebook notebookapp.py, jupyter_client restarter.py, Linux mm/oom_kill.c), with
the log prefix the server's LogFormatter writes. Synthetic inputs built from those format
strings, not reports."""

from __future__ import annotations

from console.diagnosis import diagnose


def test_classic_notebook_every_retry_port_taken() -> None:
    # notebookapp.py (4.x): "The port %i is already in use, trying another random port." and
    # "ERROR: the notebook server could not be started because no available port could be found."
    text = "\n".join(
        [
            f"[I 09:12:01.{i:03d} NotebookApp] The port {8888 + i} is already in use, trying "
            "another random port."
            for i in range(5)
        ]
        + [
            "[C 09:12:01.200 NotebookApp] ERROR: the notebook server could not be started "
            "because no available port could be found."
        ]
    )
    d = diagnose(text)
    assert d is not None and d.kind == "jupyter_port_unavailable"
    assert d.facts["port"] == 8888 and d.facts["reason"] == "in use"
    assert "every retry port" in d.summary


def test_port_retry_that_found_a_port_is_no_failure() -> None:
    text = (
        "[I 2026-01-02 10:00:00.001 ServerApp] The port 8888 is already in use, trying another "
        "port.\n"
        "[I 2026-01-02 10:00:00.002 ServerApp] Jupyter Server 2.14.0 is running at:\n"
        "[I 2026-01-02 10:00:00.002 ServerApp] http://127.0.0.1:8889/lab\n"
    )
    assert diagnose(text) is None


def test_eaddrinuse_raised_from_serverapp_is_jupyters_port_not_the_c10d_store() -> None:
    # a bind error escaping ServerApp (no retry handling), in a log that mentions torch
    text = (
        "$ jupyter lab --port=8890 --notebook-dir=/workspace/torch-examples\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/jupyter_server/serverapp.py", line 2700,'
        " in _bind_http_server_tcp\n"
        "    self.http_server.listen(self.port, self.ip)\n"
        "OSError: [Errno 98] Address already in use\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "jupyter_port_unavailable"
    assert d.facts["port"] == 8890


def test_preferred_dir_missing() -> None:
    # serverapp.py _preferred_dir_validate: "No such preferred dir: '%r'"
    text = (
        "[C 2026-01-02 10:00:00.001 ServerApp] Bad config encountered during "
        "initialization: No such preferred dir: ''/workspace/notebooks''"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "jupyter_dir_missing"
    assert d.facts["path"] == "/workspace/notebooks" and d.facts["setting"] == "preferred_dir"


def test_kernel_oom_kill_is_the_root_and_the_restart_its_consequence() -> None:
    text = (
        "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:9000000kB\n"
        "[I 2026-01-02 10:00:00.001 ServerApp] AsyncIOLoopKernelRestarter: restarting kernel "
        "(1/5), keep random ports\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "oom_killed"
    assert "jupyter_kernel_died" in {c.kind for c in d.consequences}


def test_token_refusals_are_no_cause() -> None:
    # base/handlers.py: a client without the token / from another origin; the server is up
    text = (
        "[W 2026-01-02 10:00:00.001 ServerApp] Blocking Cross Origin API request for "
        "/api/kernels.  Origin: http://203.0.113.5:8888, Host: 127.0.0.1:8888\n"
        "[W 2026-01-02 10:00:00.002 ServerApp] 403 GET /api/kernels (@127.0.0.1) 1.20ms "
        "referer=None\n"
    )
    assert diagnose(text) is None


def test_bash_command_not_found_for_jupyter_lab() -> None:
    d = diagnose("-bash: jupyter-lab: command not found")
    assert d is not None and d.kind == "jupyter_not_installed"
    assert d.facts["command"] == "jupyter-lab"


def test_root_advice_of_another_tool_is_not_jupyters_refusal() -> None:
    assert diagnose("Running as root is not recommended for this daemon.") is None
