"""Everything that touches a host: transports (local, SSH), the Docker engine, log streams.

This package knows hosts, processes, containers and bytes; it knows nothing of jobs' meaning,
screens or alerts, and never imports ``console`` or ``textual``.
"""

import warnings

# Recent cryptography releases deprecate DSA, and asyncssh names its DSA classes when it is
# imported (remote/ssh.py): every command would print ten lines of
# CryptographyDeprecationWarning on stderr (gpuconsole never offers DSA keys). Only that
# warning, only from asyncssh, is ignored.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
