"""The operator side of gpuconsole: CLI, Textual app, job planning, local state, alerts.

``console`` imports ``remote``, never the reverse. Only ``console.app`` imports textual.
"""
