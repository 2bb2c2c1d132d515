"""Rules for the container engine, the image registry and the NVIDIA Container Toolkit.

What fails before (or around) the training process: the daemon or its socket, creating the
container (device driver, runtime, the toolkit's prestart hook), pulling the image, names and
published ports, and the memory limit that kills the container.

Primary sources (message format strings, matched on their stable part):

- moby/moby: ``daemon/errors.go`` ``incompatibleDeviceRequest`` (``could not select device
  driver %q with capabilities: %v``), ``daemon/runtime_unix.go`` (``unknown or invalid runtime
  name: %s``), ``daemon/names.go`` (``Conflict. The container name %q is already in use by
  container %q. You have to remove (or rename) that container to be able to reuse that
  name.``), ``distribution/errors.go`` (``manifest for %s not found: %v``, ``pull access
  denied for %s, repository does not exist or may require 'docker login'``), libnetwork's
  port mapper (``Bind for %s failed: port is already allocated``, newer ``failed to bind host
  port for %s: address already in use``; Docker for Mac's ``Bind for %s: unexpected error
  (Failure EADDRINUSE)``, Windows' ``bind: Only one usage of each socket address``),
  ``State.OOMKilled`` of ``docker inspect``.
- docker/cli: ``Cannot connect to the Docker daemon at %s. Is the docker daemon running?``,
  ``permission denied while trying to connect to the Docker daemon socket at %s`` (older:
  ``Got permission denied ...``), the platform warning ``WARNING: The requested image's
  platform (%s) does not match the detected host platform (%s) and no specific platform was
  requested``.
- OCI distribution spec, error codes: ``MANIFEST_UNKNOWN``, ``NAME_UNKNOWN``,
  ``UNAUTHORIZED``, ``DENIED``, ``TOOMANYREQUESTS`` (the daemon prints them lower-cased:
  ``manifest unknown``, ``unauthorized: ...``, ``toomanyrequests: You have reached your pull
  rate limit``).
- NVIDIA/libnvidia-container ``src/cli/*.c``, ``src/nvc_*.c``: ``nvidia-container-cli:
  <stage> error: <msg>`` with stages ``initialization`` (``nvml error: %s``, ``load library
  failed: %s``), ``requirement`` (``unsatisfied condition: %s``), ``mount``, ``container``,
  ``ldcache``, ``detection``; nvidia-container-toolkit's runtime hook and CDI injection
  (``unresolvable CDI devices``).
- podman/containers-common and nerdctl wording of the same failures (``reading manifest %s
  in %s: manifest unknown``, ``the container name %q is already in use``, ``Cannot connect
  to Podman``, ``rootlessport listen tcp ...: bind: address already in use``).
- Linux ``mm/oom_kill.c`` / ``mm/memcontrol.c``: ``Memory cgroup out of memory: Kill(ed)
  process %d (%s)``, ``oom-kill:constraint=CONSTRAINT_MEMCG``; ``Out of memory: Kill(ed)
  process %d (%s)`` for the whole host.

A console paste often shows several attempts (a first ``docker run`` before the daemon was
up, a second one failing on a port): only the errors of the LAST attempt that failed are the
current cause (:func:`_last_attempt`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from console.diagnosis.common import FAILURE_WORDS, GPU_WORDS
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Consequence, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES", "image_of", "is_docker_command"]


# -- the command a line runs, the image it names ------------------------------------------

#: A shell line that runs a container engine: ``$ docker run ...``, ``➜  ~ sudo docker pull``,
#: ``+ docker run`` (set -x), ``# podman run``, a command in backticks. ``docker:`` (the
#: client's error prefix) is not a command.
_COMMAND = re.compile(
    r"^[`'\"]?(?:\([\w.-]+\)\s+)?(?:[^\s`]*[$#%>➜]\s*(?:~\S*\s+)?|\+\s+)?(?:sudo\s+(?:-\S+\s+)*)?"
    r"(?P<tool>docker(?:-compose)?|podman|nerdctl|nvidia-docker)\s+(?P<sub>[a-z][\w-]*)\b"
)
#: ``docker run`` / ``create`` options that take no value (so the next word is not theirs).
_BOOL_FLAGS = frozenset(
    {
        "--rm",
        "--init",
        "--privileged",
        "--detach",
        "--interactive",
        "--tty",
        "--read-only",
        "--no-healthcheck",
        "--publish-all",
        "--oom-kill-disable",
        "--quiet",
        "--all-tags",
        "--disable-content-trust",
        "--help",
        "-q",
        "-a",
        "-P",
        "-d",
        "-i",
        "-t",
    }
)


def is_docker_command(text: str) -> bool:
    """Whether ``text`` is a shell line running docker/podman/nerdctl (``$ docker run ...``)."""
    return _COMMAND.match(text.strip()) is not None


def _continued(lines: Sequence[Line], i: int) -> str:
    """Line ``i`` with the lines a shell joins to it: each ending in a backslash continues on
    the next (``docker run \\`` / ``    --rm \\`` / ``    nvidia/cuda nvidia-smi``)."""
    text, j = lines[i].text, i
    while text.rstrip().endswith("\\") and j + 1 < len(lines):
        j += 1
        text = text.rstrip()[:-1] + " " + lines[j].text.strip()
    return text


def _image_in_command(text: str) -> str | None:
    """The image a ``docker run|create|pull`` command line names (its first operand)."""
    m = _COMMAND.match(text.strip())
    if m is None or m["sub"] not in ("run", "create", "pull"):
        return None
    words = text.strip()[m.end() :].replace("`", " ").split()
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            if "=" in word or word in _BOOL_FLAGS:
                continue
            if re.fullmatch(r"-[a-zA-Z]{2,}", word) and set(word[1:]) <= set("itdPqa"):
                continue  # -it, -dit
            skip = True
            continue
        image = tidy_value(word)
        return image or None
    return None


_IMAGE_IN_ERROR = (
    re.compile(r"manifest for (?P<image>[^\s'\"]+) not found"),
    re.compile(r"pull access denied for (?P<image>[^\s,'\"]+)"),
    re.compile(r"repository (?P<image>[^\s'\"]+) not found"),
    re.compile(r"failed to resolve reference \\?\"(?P<image>[^\"\\\s]+)\\?\""),
    re.compile(r"initializing source docker://(?P<image>[^\s:'\"]+(?::[^\s:'\"]+)?)"),
    re.compile(r"Unable to find image '(?P<image>[^']+)' locally"),
)
# ".../v2/<repository>/manifests/<tag>" (the registry URL the daemon fetched)
_MANIFEST_URL = re.compile(
    r"https?://(?P<host>[^/\s\"']+)/v2/(?P<repo>[^\s\"']+?)/manifests/(?P<tag>[^\s\"'/:]+)"
)
_DOCKER_HUB = ("registry-1.docker.io", "index.docker.io", "docker.io")


def image_of(lines: Sequence[Line]) -> str | None:
    """The image the text is about: named by an error message, else by the last ``docker
    run|create|pull`` command, else rebuilt from a registry manifest URL."""
    for pattern in _IMAGE_IN_ERROR:
        for ln in lines:
            if m := pattern.search(ln.text):
                return tidy_value(m["image"])
    for i in reversed(range(len(lines))):
        if image := _image_in_command(_continued(lines, i)):
            return image
    for ln in lines:
        if m := _MANIFEST_URL.search(ln.text):
            repo = m["repo"]
            if m["host"] in _DOCKER_HUB:
                repo = repo.removeprefix("library/")
                return f"{repo}:{m['tag']}"
            return f"{m['host']}/{repo}:{m['tag']}"
    return None


def _registry_of_image(image: str | None) -> str | None:
    """The registry host an image reference names (its first part with a dot, a port or
    ``localhost``); None for Docker Hub's short names."""
    if not image or "/" not in image:
        return None
    first = image.split("/", 1)[0]
    return first if ("." in first or ":" in first or first == "localhost") else None


# -- findings ------------------------------------------------------------------------------


def _first(
    lines: Sequence[Line], pattern: re.Pattern[str], exclude: re.Pattern[str] | None = None
) -> tuple[Line, re.Match[str]] | None:
    for ln in lines:
        if (m := pattern.search(ln.text)) and not (exclude and exclude.search(ln.text)):
            return ln, m
    return None


def _first_wrapped(
    lines: Sequence[Line],
    pattern: re.Pattern[str],
    span: int = 3,
) -> tuple[list[Line], re.Match[str]] | None:
    """:func:`_first` on single lines, else on runs of up to ``span`` consecutive lines
    joined (with a space, then with nothing): a message hard-wrapped by a terminal, a
    client's repr of the error or a report's width (``Bind for 0.0.0.0:8888`` / ``failed:
    port is already allocated``). Returns the lines the match spans and the match."""
    if (hit := _first(lines, pattern)) is not None:
        return [hit[0]], hit[1]
    for n in range(2, span + 1):  # the fewest lines first
        for i in range(len(lines) - n + 1):
            run = lines[i : i + n]
            for sep in (" ", ""):
                if m := pattern.search(sep.join(ln.text.strip() for ln in run)):
                    return list(run), m
    return None


def _make(
    kind: CauseKind,
    summary: str,
    fix: str,
    evidence: Iterable[str],
    facts: dict[str, FactValue | None],
) -> Diagnosis:
    return _diag(kind, summary, (), fix, evidence, facts)


_HOOK = re.compile(
    r"error running (?:prestart )?hook|running prestart hook|Running hook #\d+"
    r"|OCI runtime create failed|failed to create shim task",
    re.I,
)

_NO_GPU_DRIVER = re.compile(
    r"could not select device driver (?:\\?\"?(?P<driver>[^\"\\\s]*)\\?\"? )?with "
    r"capabilities: "
    r"(?P<caps>\[\[[^\]]*\]\])"
)


def _no_gpu_driver(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _NO_GPU_DRIVER)) is None:
        return None
    ln, m = hit
    driver = m["driver"] or ""
    named = f"named {driver!r} " if driver else ""
    return _make(
        "docker_no_gpu_driver",
        f"Docker has no device driver {named}offering the {m['caps']} capability: the NVIDIA "
        "Container Toolkit is not installed or not registered with dockerd, so the container "
        "was never created (no GPU fault)",
        "install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure "
        "--runtime=docker`, restart dockerd (`sudo systemctl restart docker`); on a host "
        "without an NVIDIA GPU drop --gpus",
        [ln.raw],
        {"image": image, "driver": driver or None, "capabilities": m["caps"]},
    )


#: nvidia-smi's header line: ``| NVIDIA-SMI 551.78   Driver Version: 551.78   CUDA Version: 12.4 |``
#: (the newest CUDA the driver supports).
_SMI_HEADER = re.compile(
    r"Driver Version:\s*(?P<driver>\d+\.\d+(?:\.\d+)?)\s+CUDA Version:\s*(?P<cuda>\d+\.\d+)"
)
#: moby's daemon before the errdefs wording (``daemon/daemon_unix.go``: "Unknown runtime
#: specified %s", what docker-compose v1 and old dockerd print) and since ("unknown or invalid
#: runtime name: %s").
_UNKNOWN_RUNTIME = re.compile(
    r"unknown or invalid runtime name: (?P<name>[\w.-]+)"
    r"|Unknown runtime specified:? (?P<oname>[\w.-]+)"
    r"|default OCI runtime \\?\"(?P<pname>[\w.-]+)\\?\" not found"  # podman
    r"|runtime \\?\"(?P<cname>[\w.-]+)\\?\" binary not installed"  # containerd shim
    # containerd's CRI plugin for a pod whose RuntimeClass names a handler it lacks (Kubernetes
    # events: "Failed to create pod sandbox: ... unable to get OCI runtime for sandbox ...: no
    # runtime for "nvidia" is configured")
    r"|no runtime for \\?\"(?P<kname>[\w.-]+)\\?\" is configured"
)
_RUNTIMES = re.compile(r"^\s*Runtimes:\s*(?P<list>.+)$")


def _runtime_named(m: re.Match[str]) -> str:
    return str(m["name"] or m["oname"] or m["pname"] or m["cname"] or m["kname"])


def _unknown_runtime(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    hits = [(ln, m) for ln in lines if (m := _UNKNOWN_RUNTIME.search(ln.text)) is not None]
    if not hits:
        return None
    # compose's progress line cut to the terminal's width ("runtime name: ...") names none
    ln, m = next(((x, n) for x, n in hits if _runtime_named(n).strip(".")), hits[0])
    name = _runtime_named(m)
    have = next((r["list"].strip() for x in lines if (r := _RUNTIMES.match(x.text))), None)
    known = f" (docker info lists only: {have})" if have else ""
    evidence = [ln.raw] + [x.raw for x in lines if _RUNTIMES.match(x.text)]
    if m["kname"]:
        return _make(
            "docker_unknown_runtime",
            f"containerd on the node has no runtime handler named {name!r}: the pods whose "
            f"RuntimeClass is {name!r} cannot get a sandbox, so none of them starts; the NVIDIA "
            "Container Toolkit has not configured containerd (the GPU operator's toolkit "
            "daemonset has not finished or failed, or containerd was not restarted after it)",
            "check the toolkit daemonset's log on that node, then `sudo nvidia-ctk runtime "
            "configure --runtime=containerd` (runtimes.nvidia in containerd's config) and restart "
            "containerd",
            evidence,
            {"image": image, "runtime": name, "runtimes": have},
        )
    return _make(
        "docker_unknown_runtime",
        f"the Docker daemon has no runtime named {name!r}{known}: the NVIDIA Container Toolkit "
        "is not configured in daemon.json, or dockerd was not restarted after it was; the "
        "container was never created",
        "run `sudo nvidia-ctk runtime configure --runtime=docker` and restart dockerd (check "
        "with `docker info | grep -i runtime`), or drop `--runtime=nvidia` / `runtime: nvidia` "
        "and request GPUs with `--gpus all` (compose: deploy.resources.reservations.devices)",
        evidence,
        {"image": image, "runtime": name, "runtimes": have},
    )


# nvidia-container-cli: <stage> error: <message>  (libnvidia-container's error_exit format)
_TOOLKIT = re.compile(
    r"nvidia-container-cli(?:\.real)?[:\s*_]+(?P<stage>initialization|requirement|mount|container|ldcache"
    r"|detection|device|driver|configuration|list|info)\s+error[:\s*_]+(?P<msg>.*)",
    re.I,
)
_NVML = re.compile(r"nvml error[:\s]+(?P<why>[^:\\\"]+)", re.I)
#: NVML's ``nvmlErrorString(NVML_ERROR_LIB_RM_VERSION_MISMATCH)``-era text as libnvidia-container
#: and nvidia-smi print it (``driver/library version mismatch``, ``Driver/library ...``), and
#: nvidia-smi's ``NVML library version: X`` line under it.
_HOST_MISMATCH = re.compile(r"driver/library version mismatch", re.I)
_LIBRARY_VERSION = re.compile(r"^NVML library version:\s*(?P<v>\d+(?:\.\d+)+)", re.I)
_LOAD_LIBRARY = re.compile(r"load library failed[:\s]+(?P<lib>[\w.+-]+\.so[\w.]*)", re.I)
#: The clause the requirement check printed (``src/nvc_info.c``/``src/cli/common.c``:
#: ``unsatisfied condition: %s``), in the newer ``cuda>=12.8`` and the older spaced ``cuda >= 9.0``
#: spellings, also a board or driver clause of a compound requirement (``brand = tesla``,
#: ``driver < 385``): the image's NVIDIA_REQUIRE_CUDA is ``cuda>=X`` OR'ed with
#: ``brand=...,driver>=...,driver<...`` alternatives, and the toolkit prints the last clause it
#: checked, so the CUDA version the image needs is read from the whole requirement.
_UNSATISFIED = re.compile(
    r"unsatisfied condition[:\s]+(?P<cond>(?P<key>[A-Za-z_]+)\s*(?P<op>[<>=!]=?)\s*"
    r"(?P<val>[\w.]+))",
    re.I,
)
_CUDA_COND = re.compile(r"cuda\s*>=?\s*(?P<v>\d+(?:\.\d+)*)", re.I)
_DRIVER_COND = re.compile(r"driver\s*>=?\s*(?P<v>\d+(?:\.\d+)*)", re.I)
#: The image's CUDA requirement as the hook passes it (``--require=cuda>=10.0 brand=...``) or
#: as the image sets it (``NVIDIA_REQUIRE_CUDA=cuda>=11.6 brand=...``).
_REQUIRE_CUDA = re.compile(
    r"(?:--require=|NVIDIA_REQUIRE_CUDA\W{0,3})\s*cuda\s*>=\s*(?P<v>\d+(?:\.\d+)*)", re.I
)
#: libnvidia-container's device selection (``src/cli/common.c`` ``select_devices``: the
#: ``--device`` list, i.e. NVIDIA_VISIBLE_DEVICES / ``--gpus``, names something that is neither
#: an index, a GPU-/MIG- UUID nor a PCI bus id of this host): ``device error: <dev>: unknown
#: device`` (``nvidia-container-cli.real`` in the LXD snap; ``unknown device id`` in older
#: releases), and the rest of the ``device error:`` stage (``invalid device``...).
_DEVICE_ERROR = re.compile(
    r"device error:\s*(?:(?P<dev>\S.*?):\s*)?(?P<why>unknown device(?: id)?|invalid device"
    r"(?: \w+)?|[^:]+)(?::\s*(?P<dev2>[^:\s]+))?\s*(?::\s*unknown)?[.\s]*$",
    re.I,
)
#: The device plugin's ``volume-mounts`` strategy passes the device list as this path; a
#: toolkit that does not accept it (``accept-nvidia-visible-devices-as-volume-mounts``) reads
#: it as a device name.
_VOLUME_MOUNTS = "/var/run/nvidia-container-devices"
# nvidia-container-toolkit (CDI mode) and a missing hook binary. CDI injection by the engine
# itself (podman, CRI-O, containerd, moby 26+; cncf-tags/container-device-interface
# ``pkg/cdi``: ``unresolvable CDI devices %s``, ``failed to stat CDI host device %q: %v``,
# podman's ``setting up CDI devices: failed to inject devices: ...``): the spec names a device
# the host does not have (any more), typically after a driver upgrade or a GPU change.
_TOOLKIT_OTHER = re.compile(
    r"unresolvable CDI devices? (?P<dev>[^\s:]+)"
    r"|failed to stat CDI host device \\?\"?(?P<node>[^\"\\\s:]+)"
    r"|exec: \\?\"(?P<bin>nvidia-container-runtime(?:-hook)?|nvidia-ctk)\\?\": "
    r"executable file not found"
    # containerd / CRI-O configured with the NVIDIA runtime by its path, the binary absent
    # (Go's os/exec: "fork/exec <path>: no such file or directory")
    r"|fork/exec (?P<binpath>\S*/(?P<bin2>nvidia-container-runtime(?:-hook)?|nvidia-ctk)): "
    r"no such file or directory"
    r"|nvidia-container-runtime-hook: (?P<msg>.+)"
    # a CDI name (``vendor/class=name``) that the engine took for a host device path and
    # stat'ed: podman before 4.1 (no CDI), or docker-compose before 2.30 sending ``devices:``
    # entries to podman's Docker API as device mappings
    r"|\bstat (?P<cdiname>[a-z0-9][\w.-]*\.[a-z]+/[\w.-]+=[\w.:-]+): no such file or directory"
    # crun (src/libcrun/container.c, run_hooks): "error executing hook `%s` (exit code: %d)",
    # inside podman's "OCI runtime error: crun: {"msg":"...","level":"error",...}" JSON record
    r"|error executing hook \\?[`'\"]?(?P<hook>[^`'\"\s\\]+)\\?[`'\"]? \(exit code: (?P<code>\d+)\)"
    # runc (libcontainer/configs/config.go, Hooks.Run) / containerd:
    # "error running hook #0: error running hook: exit status 1, stdout: , stderr: ..."
    r"|error running (?:\w+ )?hook #(?P<num>\d+):+ (?P<hmsg>.+)",
    re.I,
)
# Which hook failed must be NVIDIA's (a crun/runc hook line names any OCI hook).
_NVIDIA_HOOK = re.compile(r"nvidia", re.I)


#: Markdown and quoting punctuation around a value read out of prose: inline code backticks,
#: emphasis, quotes, and a sentence's closing punctuation.
_WRAPPING = "`'\"*_"
_TRAILING = ".,;:!?"


def tidy_value(value: str) -> str:
    """``value`` without the Markdown / quote punctuation a report wraps it in (a backtick
    closing an inline code span, ``**bold**``, quotes, a sentence's final period)."""
    v = value.strip()
    for _ in range(4):
        before = v
        v = v.strip(_WRAPPING).rstrip(_TRAILING).strip()
        if v == before:
            break
    return v


def _clean(msg: str) -> str:
    """A toolkit message without OCI quoting, Markdown markers and the trailing ``: unknown``."""
    msg = re.sub(r"[*_]{1,3}(?=\S)|(?<=\S)[*_]{1,3}(?=\s|$)", "", msg)
    msg = msg.replace("\\\\n", " ").replace("\\n", " ").replace('\\"', "").replace("\\", "")
    msg = re.sub(r"[\"'`]+", "", msg)
    msg = re.sub(r"(?::\s*unknown)?[.\s]*$", "", msg.strip())
    return tidy_value(msg)


def _required_cuda(lines: Sequence[Line]) -> re.Match[str] | None:
    """The ``cuda>=X`` of the image's requirement (the hook's ``--require=`` argument or
    ``NVIDIA_REQUIRE_CUDA``), when the text shows it."""
    return next((m for ln in lines if (m := _REQUIRE_CUDA.search(ln.text))), None)


def _toolkit(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    hit = _first(lines, _TOOLKIT)
    hook = next((ln for ln in lines if _HOOK.search(ln.text)), None)
    consequence: tuple[Consequence, ...] = ()
    if hook is not None:
        consequence = (
            Consequence(
                "toolkit_hook_failed",
                "the NVIDIA prestart hook (nvidia-container-runtime-hook) exited 1, so runc "
                "aborted creating the container",
                (hook.raw,),
            ),
        )
    if hit is None:
        other = _first(lines, _TOOLKIT_OTHER)
        if other is None:
            return None
        ln, m = other
        facts: dict[str, FactValue | None] = {"image": image}
        if m["dev"]:
            dev = tidy_value(m["dev"])
            what = (
                f"the CDI device {dev} cannot be resolved: no CDI spec for the GPUs "
                "(/etc/cdi/nvidia.yaml or /var/run/cdi) or it is out of date"
            )
            fix = (
                "generate the CDI spec: `sudo nvidia-ctk cdi generate --output="
                "/etc/cdi/nvidia.yaml` (again after every driver upgrade), then retry"
            )
            facts["device"] = dev
        elif m["node"]:
            what = (
                f"the CDI spec names the host device {m['node']}, which does not exist: "
                "the spec is stale (generated before a driver upgrade, a GPU change or a "
                "reboot that renumbered the device nodes)"
            )
            fix = (
                "regenerate the CDI spec: `sudo nvidia-ctk cdi generate --output="
                "/etc/cdi/nvidia.yaml` (a recent nvidia-ctk, again after every driver "
                "upgrade), then retry"
            )
            facts["device"] = m["node"]
        elif m["bin"]:
            what = f"the runtime hook binary {m['bin']} is not installed on the host"
            fix = "install nvidia-container-toolkit, then restart dockerd"
        elif m["bin2"]:
            what = (
                f"the container runtime is configured to run {m['binpath']}, which is not "
                "installed on the host (every container it starts fails, pod sandboxes "
                "too)"
            )
            fix = (
                "install nvidia-container-toolkit on the host, or set the runtime's default "
                "back to runc and use a RuntimeClass for GPU pods; then restart containerd "
                "/ dockerd"
            )
        elif m["cdiname"]:
            compose = (
                re.search(
                    r"Error response from daemon|docker[- ]compose|Container \S+\s+"
                    r"Creating",
                    "\n".join(x.text for x in lines),
                )
                is not None
            )
            what = (
                f"the engine took the CDI device name {m['cdiname']} for a host device path "
                "and could not stat it: "
                + (
                    "the compose client sent it as a device mapping (docker-compose before "
                    "2.30 does not pass CDI names through the Docker API)"
                    if compose
                    else "this podman predates CDI support (4.1)"
                )
                + "; the CDI spec is not the problem"
            )
            fix = (
                "use a compose client that passes CDI names (docker-compose 2.30 or newer, "
                "or podman-compose), or run it with `podman run --device "
                f"{m['cdiname']}`"
                if compose
                else "upgrade podman to 4.1 or newer (CDI), or with this podman use the NVIDIA "
                "runtime hook (nvidia-container-toolkit's oci-nvidia-hook) instead of "
                "--device nvidia.com/gpu=..."
            )
            facts["device"] = m["cdiname"]
        elif m["hook"] or m["num"]:
            if not (
                _NVIDIA_HOOK.search(ln.text) or any(_NVIDIA_HOOK.search(x.text) for x in lines)
            ):
                return None  # some other OCI hook
            named: str = m["hook"] or f"#{m['num']}"
            why = f" (exit code {m['code']})" if m["code"] else f": {_clean(m['hmsg'])}"
            cdi = "cdi" in named.lower()
            what = f"the OCI runtime's hook {named} failed{why}" + (
                ": the CDI spec in /etc/cdi or /var/run/cdi names a hook or devices "
                "that do not match the installed driver/toolkit"
                if cdi
                else ""
            )
            fix = (
                "regenerate the CDI spec with the installed toolkit: `sudo nvidia-ctk cdi "
                "generate --output=/etc/cdi/nvidia.yaml` (install nvidia-container-toolkit "
                "if nvidia-ctk is missing), then retry"
                if cdi
                else "run `nvidia-container-cli -k -d /dev/tty info` on the host to see why; "
                "reinstall or upgrade nvidia-container-toolkit"
            )
            facts["hook"] = named
            facts["exitcode"] = int(m["code"]) if m["code"] else None
        else:
            what = f"the NVIDIA runtime hook failed: {_clean(m['msg'])}"
            fix = "run `nvidia-container-cli -k -d /dev/tty info` on the host to see why"
        return _make(
            "toolkit_hook_failed",
            f"NVIDIA Container Toolkit: {what}; the container was never created",
            fix,
            [ln.raw],
            facts,
        )
    ln, m = hit
    stage, msg = m["stage"].lower(), _clean(m["msg"])
    if stage == "device" and (found := _device_error(ln, msg, image)) is not None:
        return found  # the hook's own failure: not a consequence of itself
    facts = {"image": image, "stage": stage, "error": msg}
    nvml = _NVML.search(ln.text)
    library = _LOAD_LIBRARY.search(ln.text)
    cond = _UNSATISFIED.search(ln.text)
    evidence = [ln.raw]
    if nvml and _HOST_MISMATCH.search(nvml["why"]):
        # NVML_ERROR_LIB_RM_VERSION_MISMATCH through the hook: the host's libnvidia-ml and its
        # loaded kernel module differ, a host driver state (the same nvidia-smi shows); the
        # toolkit only reports it
        why = _clean(nvml["why"])
        same = [
            x.raw
            for x in lines
            if x is not ln and (_HOST_MISMATCH.search(x.text) or _LIBRARY_VERSION.search(x.text))
        ]
        lib = next((v["v"] for x in lines if (v := _LIBRARY_VERSION.search(x.text))), None)
        d = _make(
            "driver_version_mismatch",
            "the host's NVIDIA user-space driver library"
            + (f" ({lib})" if lib else "")
            + " and its loaded kernel module are different "
            f"versions (Driver/library version mismatch), so the NVIDIA Container Toolkit's hook "
            f"could not initialise NVML ({stage} stage) and no GPU container can start",
            _NVML_FIXES["driver/library version mismatch"],
            evidence + same[:2],
            {**facts, "nvml_error": why, "library_version": lib},
        )
        return replace(
            d,
            consequences=(
                Consequence(
                    "toolkit_nvml_init",
                    f"the NVIDIA Container Toolkit's hook could not initialise NVML ({why}): the "
                    "container was never created",
                    (ln.raw,),
                ),
                *consequence,
            ),
        )
    if nvml:  # NVML failing in any stage: initialization, detection (libnvidia-container)
        why = _clean(nvml["why"])
        # an unknown error or a lost GPU is the driver's word on a GPU in a bad state; the
        # others (permissions, a missing library or driver) are the host's set-up
        gpus = (
            "a GPU in a bad state may be why (NVML's unknown error: check `nvidia-smi` and "
            "the kernel log for Xids)"
            if re.search(r"unknown error|gpu is lost|fallen off", why, re.I)
            else "the GPUs are not implicated"
        )
        d = _make(
            "toolkit_nvml_init",
            "the NVIDIA Container Toolkit's prestart hook could not initialise NVML on the "
            f"host ({stage} stage): {why}. The container was never created, so the command in "
            f"it never ran; {gpus}",
            _NVML_FIXES.get(why.lower(), _NVML_FIXES["insufficient permissions"]),
            evidence,
            {**facts, "nvml_error": why},
        )
    elif library:
        d = _make(
            "toolkit_library_missing",
            f"the NVIDIA Container Toolkit cannot load {library['lib']}: the NVIDIA driver's "
            "user-space libraries are not installed (or not in the ld cache) on the host; the "
            "container was never created",
            "install the NVIDIA driver on the host (so that `nvidia-smi` works and "
            f"`ldconfig -p | grep {library['lib'].split('.so')[0]}` lists it), then retry",
            evidence,
            {**facts, "library": library["lib"]},
        )
    elif cond and (c := _CUDA_COND.search(cond["cond"]) or _required_cuda(lines)):
        printed = cond["cond"]
        aside = (
            ""
            if _CUDA_COND.search(printed)
            else (
                f" (the toolkit printed the last alternative it checked, '{printed}': no board / "
                "driver exception of the image's requirement applies either)"
            )
        )
        header = next(((x, h) for x in lines if (h := _SMI_HEADER.search(x.text))), None)
        has = (
            f"driver supports {header[1]['cuda']} ({header[1]['driver']})"
            if header
            else "the host's NVIDIA driver supports an older CUDA"
        )
        d = _make(
            "driver_too_old",
            f"the image requires CUDA >= {c['v']} (NVIDIA_REQUIRE_CUDA), {has}{aside}: the "
            "toolkit's hook refused to start the container",
            f"update the host's NVIDIA driver to a branch that supports CUDA {c['v']}"
            + (
                f" (the driver {header[1]['driver']} stops at CUDA {header[1]['cuda']})"
                if header
                else ""
            )
            + ", or use an image built for the CUDA the driver supports"
            + ("" if header else " (nvidia-smi shows it)"),
            evidence + ([header[0].raw] if header else []),
            {
                **facts,
                "cuda": c["v"],
                "condition": printed,
                "driver_cuda": header[1]["cuda"] if header else None,
                "driver_version": header[1]["driver"] if header else None,
            },
        )
    elif cond and (c := _DRIVER_COND.search(cond["cond"])):
        d = _make(
            "driver_too_old",
            f"the image requires NVIDIA driver >= {c['v']} and the host's driver is older: "
            "the toolkit's hook refused to start the container",
            f"update the host's NVIDIA driver to >= {c['v']}, or use an older image",
            evidence,
            {**facts, "driver": c["v"], "condition": cond["cond"]},
        )
    else:
        hint = _HOOK_HINTS.get(stage, "")
        d = _make(
            "toolkit_hook_failed",
            f"the NVIDIA Container Toolkit's hook failed ({stage} error: {msg}); the container "
            "was never created",
            hint
            or "run `nvidia-container-cli -k -d /dev/tty info` on the host to see the "
            "full error; upgrade nvidia-container-toolkit",
            evidence,
            facts,
        )
        consequence = ()
    return replace(d, consequences=consequence)


def _device_error(ln: Line, msg: str, image: str | None) -> Diagnosis | None:
    """libnvidia-container's ``device error:`` stage (:data:`_DEVICE_ERROR`): the device list it
    was given names no GPU / MIG device of this host."""
    m = _DEVICE_ERROR.search(f"device error: {msg}")
    if m is None:
        return None
    dev = tidy_value(m["dev"] or m["dev2"] or "") or None
    why = m["why"].strip()
    facts: dict[str, FactValue | None] = {
        "image": image,
        "stage": "device",
        "error": msg,
        "device": dev,
    }
    if dev == _VOLUME_MOUNTS:
        return _make(
            "toolkit_hook_failed",
            f"the NVIDIA Container Toolkit's hook failed (device error: {dev}: {why}): the GPU "
            "device plugin passes the devices as volume mounts under that path, and the "
            "toolkit is not configured to accept them, so it reads the path as a device name; "
            "the container was never created",
            "set accept-nvidia-visible-devices-as-volume-mounts = true in "
            "/etc/nvidia-container-runtime/config.toml (or switch the device plugin's "
            "DEVICE_LIST_STRATEGY back to envvar), then restart the pod",
            [ln.raw],
            facts,
        )
    named = f"'{dev}'" if dev else "the device it was given"
    mig = (
        " (MIG devices are named by their own MIG-<uuid>, or <gpu>:<mig> index, on R470+ "
        "drivers, not MIG-GPU-<uuid>/<gi>/<ci>)"
        if dev and dev.upper().startswith("MIG")
        else ""
    )
    return _make(
        "toolkit_hook_failed",
        f"the NVIDIA Container Toolkit's hook could not find the device {named} ({why}): "
        "NVIDIA_VISIBLE_DEVICES / --gpus / the LXD or Kubernetes device config names no GPU or "
        f"MIG device of this host{mig}; the container was never created",
        "pass a device that `nvidia-smi -L` lists on the host: an index, a GPU-<uuid>, or with "
        "MIG a MIG-<uuid> (or <gpu>:<mig>); recreate the container if the GPUs changed since "
        "it was defined",
        [ln.raw],
        facts,
    )


_NVML_FIXES = {
    "driver not loaded": (
        "make `nvidia-smi` work on the host first: install/load the NVIDIA driver "
        "(`sudo modprobe nvidia`; check Secure Boot and the dkms build for the running "
        "kernel; reboot after a driver install), then retry"
    ),
    "insufficient permissions": (
        "check `nvidia-smi` on the host as root, /dev/nvidia* permissions, SELinux / "
        "user-namespace (userns-remap, rootless) settings and "
        "/etc/nvidia-container-runtime/config.toml (no-cgroups, user)"
    ),
    "unknown error": (
        "run `nvidia-smi` on the host: if it fails too, reboot the host (driver state); if "
        "not, check /dev/nvidia* and /etc/nvidia-container-runtime/config.toml"
    ),
    "function not found": (
        "the host driver is older than this libnvidia-container needs (an NVML function is "
        "missing): upgrade the NVIDIA driver, or install a toolkit release that supports it"
    ),
    "driver/library version mismatch": (
        "the NVIDIA driver was upgraded without reloading its kernel module: reboot the host "
        "(or reload the nvidia modules), then retry"
    ),
}
_HOOK_HINTS = {
    "mount": (
        "the driver files under /proc/driver/nvidia or the libraries do not match the "
        "loaded driver (upgraded without reboot): reboot the host, then retry"
    ),
    "container": (
        "if it names a cgroup subsystem (cgroup v2 host), upgrade "
        "nvidia-container-toolkit / libnvidia-container to >= 1.8; else run "
        "`nvidia-container-cli -k -d /dev/tty info` on the host"
    ),
    "ldcache": "run `sudo ldconfig` on the host and check the image's /etc/ld.so.cache",
}


# -- registry ------------------------------------------------------------------------------

_NOT_FOUND = re.compile(
    r"manifest unknown|MANIFEST_UNKNOWN|name unknown|NAME_UNKNOWN"
    r"|pull access denied for \S+ repository does not exist"
    r"|pull access denied for [^,\s]+, repository does not exist"
    r"|repository \S+ not found: does not exist or no pull access"
    r"|failed to resolve reference \S+: \S+: not found"
    r"|manifest for \S+ not found",
    re.I,
)


def _image_not_found(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _NOT_FOUND)) is None:
        return None
    ln, m = hit
    name = image or "the image"
    repo = "pull access denied" in m[0] or "repository" in m[0]
    tag = "repository or tag" if repo else "tag"
    if repo:
        summary = (
            f"image not found: {name} does not exist on the registry (or is private "
            "and needs `docker login`)"
        )
    else:
        summary = (
            f"image tag not found: the registry has no {name} ({m[0]}); not an "
            "authentication, network or disk problem"
        )
    return _make(
        "image_not_found",
        summary,
        f"check the image name and {tag} (list the repository's tags on its registry), fix "
        "`image:` in the spec, or `docker login` if the repository is private",
        [ln.raw],
        {"image": image, "registry": _registry_of_image(image)},
    )


_AUTH = re.compile(
    # "Permission denied: " is an errno message (EACCES on a file), never the registry's
    r"(?<![\w-])(?:unauthorized|UNAUTHORIZED)\b|\bDENIED\b"
    r"|(?<!pull access )(?<!Permission )\bdenied: "
    r"|authentication required|no basic auth credentials|incorrect username or password"
    r"|requested access to the resource is denied|invalid username/password"
    r"|authorization failed|401 Unauthorized"
)
#: The registry's own API address in a message (``https://<registry>/v2/...``, the distribution
#: spec's endpoint); any other URL in the message (``https://www.docker.com/increase-rate-limit``,
#: a docs link) is advice, never the registry.
_REGISTRY_URL = re.compile(r"https?://(?P<host>[^/\s\"']+)/v2/")
_URL_HOST = re.compile(r"https?://(?P<host>[^/\s\"']+)")
_HUB_WORDS = re.compile(r"docker\.com\b|docker\.io\b|Docker Hub", re.I)


def _registry_named(line: str, image: str | None) -> str | None:
    """The registry a pull error is about: the host of the registry API URL in the message,
    else the image's registry (its first part with a dot or a port), else ``docker.io`` (Docker
    Hub) for a short image name or a message of Docker Hub's (a docker.com advice link)."""
    if m := _REGISTRY_URL.search(line):
        return m["host"]
    if registry := _registry_of_image(image):
        return registry
    return "docker.io" if image or _HUB_WORDS.search(line) else None


def _registry_auth(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    hit = _first(lines, _AUTH, exclude=_NOT_FOUND)
    if hit is None:
        return None
    ln, _m = hit
    registry = _registry_named(ln.text, image)
    where = registry or "the registry"
    ngc = (
        " (nvcr.io: user `$oauthtoken`, an NGC API key as password)"
        if (registry or "").endswith("nvcr.io")
        else ""
    )
    what = image or "the image"
    if any(_BAD_LOGIN.search(x.text) for x in lines):
        return _make(
            "registry_auth",
            f"{where} rejected the login the client sent for {what} (a wrong or stale stored "
            "login; the repository itself may well be public)",
            f"`docker logout{_hub_or(registry)}` and pull again (public image), or `docker "
            f"login{_hub_or(registry)}` with the right account{ngc}",
            [ln.raw],
            {"registry": registry, "image": image, "refusal": "credentials"},
        )
    return _make(
        "registry_auth",
        f"{where} refused to serve {what} (unauthorized, no login rejected): registries answer "
        "so for a repository or tag that does not exist (a wrong name) as well as for a private "
        "one the client may not read, so check the name first, the login second",
        f"check the repository name and tag of {what} on its registry (the project's packages "
        "/ tags page) and fix `image:`; if it is private, `docker login "
        f"{registry or '<registry>'}` on the host with an account that may pull it{ngc}",
        [ln.raw],
        {"registry": registry, "image": image, "refusal": "anonymous"},
    )


def _hub_or(registry: str | None) -> str:
    """`` <registry>`` for a ``docker login``/``logout`` command, nothing for Docker Hub."""
    hub = registry is None or registry in ("docker.io", "registry-1.docker.io", "index.docker.io")
    return "" if hub else f" {registry}"


#: The registry rejected credentials the client sent (a stale or wrong stored login), not an
#: anonymous request.
_BAD_LOGIN = re.compile(
    r"incorrect username or password|invalid username/password"
    r"|authorization failed|bad credentials",
    re.I,
)


_RATE = re.compile(r"toomanyrequests|TOOMANYREQUESTS|pull rate limit|429 Too Many Requests", re.I)


def _rate_limited(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _RATE)) is None:
        return None
    registry = _registry_named(hit[0].text, image)
    where = "docker.io (Docker Hub)" if registry == "docker.io" else registry or "the registry"
    return _make(
        "registry_rate_limited",
        f"{where} refused the pull: pull rate limit reached "
        "(toomanyrequests); anonymous pulls share the host's IP address quota",
        "`docker login` so pulls count against an account, use a registry mirror / pull "
        "through cache, or retry after the limit window",
        [hit[0].raw],
        {"registry": registry, "image": image},
    )


_REGISTRY_CONTEXT = re.compile(
    r"/v2/|registry|pinging container registry|failed to (?:resolve|do request|fetch|copy)"
    r"|Error response from daemon: Get|error pulling image|Pulling|pull",
    re.I,
)
_NET_ERROR = re.compile(
    r"no such host|i/o timeout|TLS handshake timeout|connection refused|connection reset"
    r"|network is unreachable|no route to host|Temporary failure in name resolution"
    r"|server misbehaving|context deadline exceeded|Client\.Timeout exceeded"
    r"|request canceled while waiting for connection|x509: |proxyconnect"
    r"|server gave HTTP response to HTTPS client|EOF$",
    re.I,
)
_LOOKUP = re.compile(r"lookup (?P<host>[\w.-]+\.[a-z]{2,})(?: on [\d.:\[\]]+)?: ", re.I)
_PINGING = re.compile(r"pinging container registry (?P<host>[\w.:-]+)", re.I)


def _registry_unreachable(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    hit = next(
        (
            ln
            for ln in lines
            if _NET_ERROR.search(ln.text)
            and _REGISTRY_CONTEXT.search(ln.text)
            and not _NOT_FOUND.search(ln.text)
        ),
        None,
    )
    if hit is None:
        return None
    registry = None
    for pattern in (_PINGING, _URL_HOST, _LOOKUP):
        if m := pattern.search(hit.text):
            registry = m["host"]
            break
    registry = registry or _registry_of_image(image)
    why = _NET_ERROR.search(hit.text)
    assert why is not None
    return _make(
        "registry_unreachable",
        f"the host could not reach {registry or 'the registry'} to pull "
        f"{image or 'the image'}: {why[0].rstrip(': ')} (DNS, network, proxy or TLS between "
        "the Docker daemon and the registry); nothing was pulled",
        "check the daemon's network from the host: DNS (`getent hosts "
        f"{registry or '<registry>'}`), proxy settings of the docker service (`systemctl "
        "show docker --property=Environment`), firewall/TLS; retry or use a reachable mirror",
        [hit.raw],
        {"registry": registry, "image": image},
    )


# -- the host and the daemon ---------------------------------------------------------------

_DISK_FULL = re.compile(r"no space left on device|\bENOSPC\b", re.I)
# /dev/shm (NCCL segments, torch's shared-memory files) is shm_exhausted, not the disk
_SHM = re.compile(r"/dev/shm|shared memory|\bshm\b|posix_fallocate|NCCL|</torch_|torch_\d+", re.I)
_PATH = re.compile(r"(?:write|open|mkdir|create|copy)\s+(?P<path>/[^\s:]+)")


# torch.save's zip writer when a write came back short (caffe2/serialize/inline_container.cc:
# "PytorchStreamWriter failed writing file <name>: file write failed", and its check of the
# archive's position, "unexpected pos <n> vs <m>"): the checkpoint's filesystem is full or
# over quota, without the OS's "No space left on device" in the message.
_CHECKPOINT_WRITE = re.compile(
    r"PytorchStreamWriter failed writing file (?P<file>\S+?):? file write failed"
    r"|\[enforce fail at inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+"
)


def _disk_full(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _DISK_FULL, exclude=_SHM)) is None:
        if (saving := _first(lines, _CHECKPOINT_WRITE)) is None:
            return None
        at, said = saving
        return _make(
            "disk_full",
            "torch.save could not write the checkpoint (PyTorch's zip writer: "
            f"'{said.group(0)}'): a short write, almost always the filesystem it writes to is "
            "full or over quota",
            "free space (old checkpoints) or save to a larger volume, then check with `df -h "
            "<checkpoint dir>` before resuming",
            [at.raw],
            {"image": image, "file": said["file"]},
        )
    ln, _m = hit
    path = m["path"] if (m := _PATH.search(ln.text)) else None
    pulling = re.search(
        r"register layer|extract|pull|tar file|overlay|/var/lib/docker", ln.text, re.I
    )
    what = f"pulling {image or 'the image'}" if pulling else f"writing {path or 'a file'}"
    return _make(
        "disk_full",
        f"no space left on device while {what}: the filesystem "
        f"{'of Docker data-root (/var/lib/docker)' if pulling else 'written to'} is full",
        "free space on the host (`docker system df`, `docker system prune`, old checkpoints), "
        "or grow the volume / move Docker's data-root to a larger disk",
        [ln.raw],
        {"image": image, "path": path},
    )


_DAEMON_DOWN = re.compile(
    r"Cannot connect to the Docker daemon(?: at (?P<sock>[^\s.]+(?:\.sock)?))?"
    r"|Is the docker daemon running"
    r"|Cannot connect to Podman|unable to connect to Podman socket"
    r"|cannot access containerd socket|failed to dial \\?\"?/run/containerd/containerd\.sock"
    r"|Error while fetching server API version: \('Connection aborted\.', "
    r"(?:FileNotFoundError|ConnectionRefusedError)"
    r"|dial unix (?P<sock2>\S+\.sock): connect: (?:no such file or directory|connection refused)"
    r"|open //\./pipe/docker_engine",
    re.I,
)


def _daemon_unreachable(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _DAEMON_DOWN)) is None:
        return None
    ln, m = hit
    sock = m["sock"] or m["sock2"]
    return _make(
        "docker_daemon_unreachable",
        f"no container engine answers on {sock or 'its socket'}: the daemon is not running "
        "(or not started yet, or this shell is inside a container without it)",
        "start the daemon on the host (`sudo systemctl start docker`; `systemctl status "
        "docker` / `journalctl -u docker` say why it stopped) and retry; check DOCKER_HOST "
        "and the docker context",
        [ln.raw],
        {"socket": sock, "image": image},
    )


_PERMISSION = re.compile(
    r"permission denied while trying to connect to the (?:Docker )?daemon socket"
    r"|dial unix (?P<sock>\S+\.sock): connect: permission denied"
    r"|Error while fetching server API version: \('Connection aborted\.', PermissionError",
    re.I,
)


def _permission(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if _first(lines, _PERMISSION) is None:
        return None
    sock = next((m["sock"] for x in lines if (m := _PERMISSION.search(x.text)) and m["sock"]), None)
    return _make(
        "docker_permission",
        f"this user may not use the Docker socket ({sock or '/var/run/docker.sock'}: "
        "permission denied): not root and not in the `docker` group",
        "`sudo usermod -aG docker $USER` and log in again (or use sudo / rootless docker)",
        [x.raw for x in lines if _PERMISSION.search(x.text)][:2],
        {"socket": sock or None, "image": image},
    )


_NAME_CONFLICT = re.compile(
    r"container name \\?\"?(?P<name>/?[\w.-]+)\\?\"? is already in use"
    r"|name \\?\"(?P<name2>[\w.-]+)\\?\" is already used by",
    re.I,
)


def _name_conflict(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _NAME_CONFLICT)) is None:
        return None
    ln, m = hit
    name = (m["name"] or m["name2"] or "").lstrip("/")
    return _make(
        "name_conflict",
        f"the container name {name!r} is already in use by another container (running, "
        "stopped, or still being removed), so this one was not created",
        f"remove the old container (`docker rm -f {name}`; if its removal hangs, restart "
        "dockerd) or use another name",
        [ln.raw],
        {"name": name, "image": image},
    )


_PORT = re.compile(
    r"Bind for (?P<a1>[\w.:\[\]]*?):(?P<p1>\d+) failed: port is already allocated"
    r"|failed to bind host port for (?P<a2>[\w.\[\]:]*?):(?P<p2>\d+):[\w.\[\]:]*?/(?:tcp|udp)"
    r": address already in use"
    r"|(?:listen|bind) (?:tcp|udp)[46]? (?P<a3>[\w.\[\]:]*?):(?P<p3>\d+): bind: "
    r"(?:address already in use|Only one usage of each socket address)"  # Linux, Windows
    r"|Bind for (?P<a5>[\w.:\[\]]*?):(?P<p5>\d+): unexpected error \(Failure EADDRINUSE\)"
    r"|exposing port (?:TCP|UDP) (?P<a4>[\w.\[\]:]*?):(?P<p4>\d+) ->",
    re.I,
)


def _port_in_use(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    hit = _first_wrapped(lines, _PORT)
    if hit is None:
        return None
    spanned, m = hit
    port = int(next(p for p in (m["p1"], m["p2"], m["p3"], m["p4"], m["p5"]) if p))
    addr = next((a for a in (m["a1"], m["a2"], m["a3"], m["a4"], m["a5"]) if a), "")
    return _make(
        "port_in_use",
        f"host port {port} is already taken (another container or process listens on "
        f"{addr or '*'}:{port}), so Docker could not publish it and the container did not "
        "start",
        f"publish another host port (`-p <free>:<container port>`) or free {port} (`ss -ltnp "
        f"'sport = :{port}'`); `docker rm` the container that was created",
        [ln.raw for ln in spanned],
        {"port": port, "address": addr or None, "image": image},
    )


_PLATFORM = re.compile(
    r"requested image's platform \((?P<platform>[^)]+)\) does not match the detected host "
    r"platform \((?P<host>[^)]+)\)"
)
_EXEC_FORMAT = re.compile(r"exec format error", re.I)


def _platform_mismatch(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    if (hit := _first(lines, _EXEC_FORMAT)) is None:
        return None
    warn = _first(lines, _PLATFORM)
    platform = warn[1]["platform"] if warn else None
    host = warn[1]["host"] if warn else None
    evidence = ([warn[0].raw] if warn else []) + [hit[0].raw]
    archs = f" ({platform} image on a {host} host)" if warn else ""
    return _make(
        "image_platform_mismatch",
        f"the container's program cannot run on this CPU{archs}: exec format error when the "
        "container starts",
        f"use a build of the image for {host or 'the host'}'s architecture (`--platform`), or "
        "install binfmt/qemu emulation and run with the image's --platform",
        evidence,
        {"platform": platform, "host_platform": host, "image": image},
    )


# -- memory ----------------------------------------------------------------------------------

_CGROUP_OOM = re.compile(
    r"Memory cgroup out of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"|oom-kill:.*constraint=CONSTRAINT_MEMCG.*?,task=(?P<comm2>[^,]+),pid=(?P<pid2>\d+)"
)
_HOST_OOM = re.compile(
    r"(?<!cgroup )Out of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
)
# The first line of the kernel's OOM report (mm/oom_kill.c dump_header: "%s invoked
# oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd"), for a cgroup's limit or the
# host's RAM alike; it names the process that allocated, not the one killed.
_OOM_INVOKED = re.compile(r"\binvoked oom-killer: gfp_mask=")
# docker inspect's State.OOMKilled, Kubernetes' "Reason: OOMKilled"; never "OOMKilled": false
_OOM_FLAG = re.compile(r"\bOOMKilled\b(?!\"?\s*[:=]\s*false)", re.I)
_EXIT_137 = re.compile(r"(?:exit(?:ed)?(?: with)?(?: code| status)?|Exited) \(?137\)?", re.I)
_MEM_LIMIT = re.compile(
    r"(?:^|\s)(?:-m|--memory)[ =]\d|mem_limit|memory limit|limits?:.*memory", re.I
)


def oom_from_kernel(lines: Sequence[Line]) -> tuple[Line, int | None, str, str | None] | None:
    """The kernel's OOM kill line: (line, pid, scope ``container`` for a memory cgroup /
    ``host``, process name); None when there is none."""
    for ln in lines:
        if m := _CGROUP_OOM.search(ln.text):
            pid = m["pid"] or m["pid2"]
            return ln, int(pid), "container", m["comm"] or m["comm2"]
    for ln in lines:
        if m := _HOST_OOM.search(ln.text):
            return ln, int(m["pid"]), "host", m["comm"]
    for ln in lines:
        if _OOM_INVOKED.search(ln.text):
            return ln, None, "host", None
    return None


def _oom(lines: Sequence[Line], image: str | None) -> Diagnosis | None:
    kernel = oom_from_kernel(lines)
    flag = _first(lines, _OOM_FLAG)
    code = _first(lines, _EXIT_137)
    limit = _first(lines, _MEM_LIMIT)
    if kernel is None and flag is None and not (code and limit):
        return None
    evidence: list[str] = []
    pid = comm = None
    scope = "container"
    if kernel is not None:
        ln, pid, scope, comm = kernel
        evidence.append(ln.raw)
        if scope == "host" and (flag or limit):
            scope = "container"
    if flag is not None:
        evidence.append(flag[0].raw)
    elif code is not None and limit is not None:
        evidence += [limit[0].raw, code[0].raw]
    who = (
        f"process {pid} ({comm})"
        if pid is not None
        else "a process (the kernel log shows the OOM killer invoked; its victim's line is "
        "not in the text)"
        if kernel is not None
        else "the container's main process"
    )
    if scope == "host":
        summary = f"the kernel OOM killer killed {who}: the host ran out of RAM (not GPU memory)"
        fix = (
            "lower host memory use (fewer DataLoader workers, smaller prefetch, no dataset "
            "held in RAM per rank) or run on a host with more RAM"
        )
    else:
        summary = (
            f"the container hit its memory limit and the cgroup OOM killer killed "
            f"{who}{' (OOMKilled; exit 137)' if pid is not None or flag or code else ''}; "
            "host RAM, not GPU memory"
        )
        fix = (
            "raise the container's memory limit (docker run -m / the job's memory) or "
            "lower host memory use (fewer DataLoader workers, smaller batches in RAM)"
        )
    return _make(
        "oom_killed",
        summary,
        fix,
        evidence,
        {"pid": pid, "scope": scope, "process": comm, "image": image},
    )


# -- attempts ------------------------------------------------------------------------------

_CHECKS = (
    _daemon_unreachable,
    _permission,
    _disk_full,
    _no_gpu_driver,
    _unknown_runtime,
    _toolkit,
    _image_not_found,
    _registry_auth,
    _rate_limited,
    _registry_unreachable,
    _name_conflict,
    _port_in_use,
    _platform_mismatch,
    _oom,
)


def _attempts(lines: Sequence[Line]) -> list[list[Line]]:
    """The lines split where a new engine command starts (``$ docker run ...``); the first
    part holds whatever came before the first command."""
    parts: list[list[Line]] = [[]]
    for ln in lines:
        if is_docker_command(ln.text) and parts[-1]:
            parts.append([])
        parts[-1].append(ln)
    return parts


def _last_attempt(lines: Sequence[Line]) -> list[Diagnosis]:
    """The findings of the last attempt that failed: an earlier attempt's error (a daemon
    not up yet, a typo since corrected) is history, not the current cause. When earlier
    attempts failed the same way, the first of them is shown too (first in the evidence):
    the report's headline error is usually that one, the later ones its reproductions."""
    parts = _attempts(lines)
    for at in range(len(parts) - 1, -1, -1):
        found = _findings(parts[at], lines)
        if not found:
            continue
        root = found[0]
        for part in parts[:at]:
            same = next((d for d in _findings(part, lines) if d.kind == root.kind), None)
            if same is not None:
                evidence = tuple(dict.fromkeys((*same.evidence[:1], *root.evidence)))
                found[0] = replace(root, evidence=evidence)
                break
        return found
    return []


def _findings(part: Sequence[Line], lines: Sequence[Line]) -> list[Diagnosis]:
    """What every check finds in one attempt (``lines``: the whole text, for its image)."""
    image = image_of(part) or image_of(lines)
    return [d for check in _CHECKS if (d := check(part, image)) is not None]


def _docker(ctx: Context) -> list[Diagnosis]:
    """Every container-engine / registry / toolkit failure of the last failed attempt."""
    return _last_attempt(ctx.lines)


#: The rules of this module (the engine ranks what they find).
RULES = (_docker,)

#: Failure words no line this module matches or reads needs: every such line holds another
#: (checked check by check: a GPU named in ``docker run --gpus`` is on a ``docker`` line, the
#: toolkit's device and driver errors hold ``nvidia`` and ``error``, ``no space left on device``
#: holds ``no space``, a CUDA requirement ``nvidia``, nvidia-smi's header ``nvidia``/``smi``,
#: moby's platform ``WARNING`` ``image``, the daemon's socket ``daemon``). They are the
#: words of a training run's own chatter (``NCCL_DEBUG=INFO``'s ``cudaDev``/``nranks``/
#: ``NCCL_*``/``NET/Socket`` lines, PyTorch's ``UserWarning``s naming the device, the process
#: group, ``torch/distributed/c10d_logger.py``), which this rule then never reads.
_NOT_DOCKER_WORDS = frozenset(
    {
        "warning",
        "torch",
        "c10d",
        "process",
        "device",
        "driver",
        "cuda",
        "cudnn",
        "nranks",
        "nccl_",
        "socket",
        *GPU_WORDS,
    }
)
#: The lines the container engine's errors and commands hold (the engine's pre-filter; see
#: :class:`Needs`): the failure words less :data:`_NOT_DOCKER_WORDS`, and the engines that
#: :data:`_COMMAND` names besides ``docker`` (an attempt starts at its command line).
DOCKER_WORDS: tuple[str, ...] = (
    *(w for w in FAILURE_WORDS if w not in _NOT_DOCKER_WORDS),
    "podman",
    "nerdctl",
)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`): its own.
NEEDS = {rule: Needs(DOCKER_WORDS, alone=True) for rule in RULES}
