"""Everything that touches a host: transports (local, SSH), the Docker engine, log streams.

This package knows hosts, processes, containers and bytes; it knows nothing of jobs' meaning,
screens or alerts, and never imports ``console`` or ``textual``.
"""
