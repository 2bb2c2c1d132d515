"""The GPU bench that runs where a job runs (``gpuconsole bench``).

:data:`SCRIPT` (``gpubench.py``, PyTorch) is the job's script: the console stages it with
nvidia-ml-py's ``pynvml.py`` in a folder (:func:`stage`) that the launch path syncs to each host
as the job's workdir, and torchrun runs it with one process per GPU, in the profile's image and
runtime. It prints one JSON document per GPU and one per host on stdout, each on a line that
starts with :data:`MARKER` (``console/bench/model.py`` reads them).
"""

from __future__ import annotations

import shutil
from pathlib import Path

#: This folder (the bench script's source).
HERE = Path(__file__).resolve().parent
#: The script torchrun runs (a path inside the staged workdir).
SCRIPT = "gpubench.py"
#: What starts each document's line on stdout (after torchrun's ``[rankN]:`` tag).
MARKER = "gpuconsole:bench "
#: The documents' schema version (``"v"``).
SCHEMA = 1


def stage(folder: Path) -> Path:
    """Copy the bench script and nvidia-ml-py's ``pynvml.py`` into ``folder`` (created) and
    return it: the workdir of a bench job (content-addressed on the hosts, so copied once).
    ``pynvml.py`` is left out when nvidia-ml-py is not installed here (the script then reads
    the GPU with ``nvidia-smi``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / SCRIPT, folder / SCRIPT)
    try:
        import pynvml

        shutil.copyfile(Path(pynvml.__file__), folder / "pynvml.py")
    except ImportError:  # the script falls back to nvidia-smi
        pass
    return folder
