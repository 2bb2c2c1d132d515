#!/usr/bin/env python3
"""Write the bad-input corpus under tests/data/fuzz/ (deterministic: seed 7).

Every file written is invalid by construction: ``gpuconsole submit FILE --dry-run`` (specs)
and ``gpuconsole -p FILE submit valid-spec.yaml --dry-run`` (profiles) must each end with one
``error:`` line, a ``fix:`` and exit 2, before any host is contacted.
tests/unit/test_fuzz_corpus.py runs them all.

    spec/named-*.yaml, profile/named-*.yaml   the cases of issue 7, one each
    spec/m###-*.yaml, profile/m###-*.yaml     mutations of the valid bases
    files/                                    helper files the profiles point at
    valid-spec.yaml, valid-profile.yaml       the bases (valid; the test checks that)

Paths inside the files are relative: specs' workdir to the spec file, profiles'
identity_file/known_hosts to the repository root (the test runs there).

Usage: python scripts/gen_fuzz_corpus.py [--out tests/data/fuzz]
"""

from __future__ import annotations

import argparse
import copy
import random
import shutil
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SEED = 7
UNSET = "${GPUCONSOLE_FUZZ_UNSET_VAR}"

SPEC: dict[str, Any] = {
    "name": "fuzz-base",
    "image": "gpuconsole/torch:2.13.0-cpu",
    "nodes": 1,
    "gpus_per_node": 0,
    "nproc_per_node": 2,
    "workdir": "../../../../scripts/examples",
    "exclude": ["data", "*.ckpt"],
    "script": "train_ddp.py",
    "args": ["--steps", "20", "--out", "/out"],
    "env": {"PLAIN": "visible"},
    "mounts": ["~/.cache/gpuconsole/example-out:/out"],
    "shm_size": "1g",
    "max_restarts": 0,
    "rdzv_port": 29400,
}

PROFILE: dict[str, Any] = {
    "known_hosts": "tests/data/fuzz/files/known_hosts",
    "accept_new_host_keys": False,
    "connect_timeout": 5,
    "hosts": {
        "gpu1": {"hostname": "gpu1.example.org", "user": "ubuntu", "port": 22},
        "gpu2": {
            "hostname": "gpu2.example.org",
            "user": "ubuntu",
            "jump": "me@bastion.example.org:2222",
            "address": "10.0.0.12",
        },
    },
    "defaults": {
        "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "shm_size": "8g",
        "mounts": ["~/data:/data:ro", "/scratch/runs:/runs"],
        "env": {"NCCL_DEBUG": "WARN"},
        "cap_add": ["SYS_PTRACE"],
        "pull": "missing",
    },
}

#: field -> values that must each be refused.
SPEC_BAD: dict[str, list[Any]] = {
    "name": ["Bad Name", "", "x" * 49, "-lead", 5, ["a"], "a\u202eb", None, True],
    "image": [
        "/",
        "UPPER/x",
        "a b",
        "x:",
        ":tag",
        "a@sha256:12",
        "a" * 300,
        5,
        "a\nb",
        "a//b",
        "-a",
        "a:b:c",
        "http://reg/x",
    ],
    "nodes": [0, -1, [], ["a", "a"], "two", 2000, ["zz"], 99, 1.5, {"a": 1}],
    "gpus_per_node": [-1, "some", [], [0, 0], [-1], 1.5, 2000, "1", [1, "x"]],
    "nproc_per_node": [0, -2, 5000, "x", 1.5, [1], 10**30],
    "workdir": ["/nonexistent-gpuconsole-fuzz", "no/such/dir", 5, "a\x07b"],
    "script": [
        "../x.py",
        "/etc/passwd",
        "nope.py",
        "a\nb",
        "",
        "../../../../../etc/passwd",
        "sub/../../x.py",
        7,
    ],
    "args": ["notalist", [1, 2], [["nested"]], [{"a": 1}], [None]],
    "env": [
        {"9BAD": "x"},
        {"A": UNSET},
        {"A": 1},
        {"A-B": "x"},
        "notamap",
        {"": "x"},
        {"A": ["x"]},
        {"A": None},
    ],
    "mounts": [
        "./checkpoints:/workspace/checkpoints",
        ["rel:/x"],
        ["/a:rel"],
        ["/a:/b:rx"],
        ["/a"],
        ["/a:/workspace"],
        [5],
        ["./checkpoints:/workspace/checkpoints"],
        ["/a:/b:ro:x"],
        ["/a\n:/b"],
    ],
    "shm_size": ["lots", "-1g", "999999999g", 5, "1.5.5g", "1t"],
    "ipc": ["private", "none", 1, True],
    "max_restarts": [-1, 5000, "x", 1.5],
    "rdzv_port": [0, 70000, "x", -5, 65536],
    "exclude": ["notalist", [1], [["a"]]],
}

PROFILE_BAD: list[tuple[str, tuple[Any, ...], Any]] = [
    ("hosts-empty", ("hosts",), {}),
    ("hosts-notamap", ("hosts",), "gpu1"),
    ("hosts-list", ("hosts",), ["gpu1"]),
    ("host-name-space", ("hosts", "a b"), {}),
    ("host-name-slash", ("hosts", "a/b"), {}),
    ("host-name-long", ("hosts", "h" * 100), {}),
    ("host-notamap", ("hosts", "gpu1"), "gpu1.example.org"),
    ("hostname-space", ("hosts", "gpu1", "hostname"), "a b"),
    ("hostname-long", ("hosts", "gpu1", "hostname"), "x" * 300),
    ("hostname-label", ("hosts", "gpu1", "hostname"), "a" * 70 + ".example.org"),
    ("hostname-int", ("hosts", "gpu1", "hostname"), 5),
    ("hostname-bidi", ("hosts", "gpu1", "hostname"), "gpu\u202e1"),
    ("port-zero", ("hosts", "gpu1", "port"), 0),
    ("port-big", ("hosts", "gpu1", "port"), 70000),
    ("port-text", ("hosts", "gpu1", "port"), "ssh"),
    ("user-newline", ("hosts", "gpu1", "user"), "root\nx"),
    ("user-empty", ("hosts", "gpu1", "user"), ""),
    ("user-colon", ("hosts", "gpu1", "user"), "a:b"),
    ("user-space", ("hosts", "gpu1", "user"), "a b"),
    ("user-list", ("hosts", "gpu1", "user"), ["a"]),
    ("jump-notaport", ("hosts", "gpu2", "jump"), "bastion:notaport"),
    ("jump-bigport", ("hosts", "gpu2", "jump"), "bastion:99999"),
    ("jump-emptyuser", ("hosts", "gpu2", "jump"), "@bastion"),
    ("jump-nohost", ("hosts", "gpu2", "jump"), "me@"),
    ("jump-space", ("hosts", "gpu2", "jump"), "a b"),
    ("jump-v6tail", ("hosts", "gpu2", "jump"), "[::1]x"),
    ("jump-empty", ("hosts", "gpu2", "jump"), ""),
    ("jump-port0", ("hosts", "gpu2", "jump"), "bastion:0"),
    ("identity-notakey", ("hosts", "gpu1", "identity_file"), "tests/data/fuzz/files/not-a-key"),
    ("identity-pub", ("hosts", "gpu1", "identity_file"), "tests/data/fuzz/files/id_test.pub"),
    ("identity-dir", ("hosts", "gpu1", "identity_file"), "tests/data/fuzz/files"),
    ("identity-newline", ("hosts", "gpu1", "identity_file"), "~/.ssh/id\nx"),
    ("known-hosts-binary", ("known_hosts",), "tests/data/fuzz/files/known_hosts.bin"),
    ("known-hosts-latin1", ("known_hosts",), "tests/data/fuzz/files/known_hosts.latin1"),
    ("known-hosts-dir", ("known_hosts",), "tests/data/fuzz/files"),
    ("address-space", ("hosts", "gpu2", "address"), "10.0.0.1 x"),
    ("socket-relative", ("hosts", "gpu1", "docker_socket"), "docker.sock"),
    ("transport-telnet", ("hosts", "gpu1", "transport"), "telnet"),
    ("unknown-host-field", ("hosts", "gpu1", "hostnme"), "x"),
    ("unknown-top-field", ("hostz",), {}),
    ("accept-maybe", ("accept_new_host_keys",), "maybe"),
    ("timeout-zero", ("connect_timeout",), 0),
    ("timeout-text", ("connect_timeout",), "soon"),
    ("defaults-notamap", ("defaults",), "x"),
    ("defaults-image-slash", ("defaults", "image"), "/"),
    ("defaults-image-upper", ("defaults", "image"), "NVCR.io/Nvidia/PyTorch"),
    ("defaults-mount-relative", ("defaults", "mounts"), ["./data:/data"]),
    ("defaults-mount-relative2", ("defaults", "mounts"), ["data:/data:ro"]),
    ("defaults-mount-form", ("defaults", "mounts"), ["/data"]),
    ("defaults-env-unset", ("defaults", "env"), {"WANDB_API_KEY": UNSET}),
    ("defaults-env-name", ("defaults", "env"), {"9X": "y"}),
    ("defaults-env-value", ("defaults", "env"), {"X": ["y"]}),
    ("defaults-shm", ("defaults", "shm_size"), "huge"),
    ("defaults-ipc", ("defaults", "ipc"), "private"),
    ("defaults-cap", ("defaults", "cap_add"), ["sys ptrace"]),
    ("defaults-user", ("defaults", "user"), "1000 1000"),
    ("defaults-pull", ("defaults", "pull"), "always"),
    ("defaults-port", ("defaults", "rdzv_port"), 0),
    ("defaults-grace", ("defaults", "stop_grace"), -1),
    ("defaults-privileged", ("defaults", "privileged"), "yes please"),
    ("defaults-unknown", ("defaults", "imagee"), "x"),
    ("name-newline", ("name",), "a\nb"),
]


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=False, width=1000)


def set_path(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    cur = out
    for p in path[:-1]:
        if not isinstance(cur.get(p), dict):
            cur[p] = {}
        cur = cur[p]
    cur[path[-1]] = value
    return out


def deep(n: int) -> str:
    return "[" * n + "]" * n


def bomb(levels: int, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def yaml_level(base: str, rng: random.Random) -> list[tuple[str, str | bytes]]:
    """Mutations of the text itself: syntax, characters, YAML features."""
    lines = base.splitlines()
    out: list[tuple[str, str | bytes]] = []
    out.append(("empty", ""))
    out.append(("comment-only", "# nothing\n"))
    out.append(("a-list", "- name: x\n- script: y\n"))
    out.append(("a-scalar", "just text\n"))
    out.append(("multi-doc", base + "---\n" + base))
    out.append(("unclosed-bracket", base + "extra: [a, b\n"))
    out.append(("tab-indent", base + "env:\n\tA: b\n"))
    out.append(("bad-indent", base.replace("\n", "\n   ", 2)))
    out.append(("unknown-tag", base + "extra: !fancy x\n"))
    out.append(("python-tag", base + "extra: !!python/object:os.system ls\n"))
    out.append(("binary-tag", "name: !!binary AAAA\n" + base))
    out.append(("set-key", "? [a, b]\n: c\n" + base))
    out.append(("undefined-alias", base + "extra: *nowhere\n"))
    out.append(("dup-anchor", "a: &x 1\nb: &x 2\n" + base))
    out.append(("deep-list", base + "extra: " + deep(5000) + "\n"))
    out.append(("deep-map", base + "extra: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n"))
    out.append(
        (
            "deep-block",
            base + "".join(f"{'  ' * i}k{i}:\n" for i in range(200)) + "  " * 200 + "x\n",
        )
    )
    out.append(("self-alias", base + "extra: &me [1, *me]\n"))
    out.append(("self-alias-map", base + "extra: &me {a: *me}\n"))
    out.append(("billion-laughs", bomb(9) + base))
    out.append(("laughs-wide", bomb(4, 400) + base))
    out.append(("nul-byte", base.replace("\n", "\n\x00", 1)))
    out.append(("nul-escape", base + 'extra: "a\\0b"\n'))
    out.append(("bel-raw", base.replace("\n", "\x07\n", 1)))
    out.append(("esc-raw", base + "extra: \x1b[31m\n"))
    out.append(("latin1", (base + "extra: caf\xe9\n").encode("latin-1")))
    out.append(("utf16", base.encode("utf-16")))
    out.append(("bom-then-junk", "\ufeff" + base + ":\n"))
    out.append(("colon-only", ":\n"))
    out.append(("only-dashes", "---\n---\n"))
    out.append(("long-line", base + "extra: " + "x" * 20_000 + "\n"))
    out.append(("many-keys", base + "".join(f"k{i}: {i}\n" for i in range(2000))))
    for i in range(6):
        key = rng.choice([ln.split(":")[0] for ln in lines if ln and not ln.startswith(" ")])
        out.append((f"dup-{key}-{i}", base + f"{key}: again\n"))
    for i in range(8):
        # a random control character spliced in at a random place
        pos = rng.randrange(len(base))
        c = rng.choice(
            ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\ufffe", "\ud800"]
        )
        text = base[:pos] + c + base[pos:]
        out.append((f"ctl-{i}", text.encode("utf-8", "surrogatepass")))
    return out


def spec_mutations(rng: random.Random) -> list[tuple[str, str | bytes]]:
    out: list[tuple[str, str | bytes]] = []
    for field, values in SPEC_BAD.items():
        for i, v in enumerate(values):
            out.append((f"{field}-{i}", dump({**SPEC, field: v})))
    for field in ("name", "script"):
        d = dict(SPEC)
        del d[field]
        out.append((f"missing-{field}", dump(d)))
    for field in list(SPEC):
        d = dict(SPEC)
        v = d.pop(field)
        typo = field[:-1] if len(field) > 3 else field + "x"
        d[typo] = v
        out.append((f"typo-{field}", dump(d)))
    for i in range(25):  # several bad fields at once: all must be reported
        picks = rng.sample(sorted(SPEC_BAD), rng.randint(2, 4))
        d = dict(SPEC)
        for f in picks:
            d[f] = rng.choice(SPEC_BAD[f])
        out.append((f"multi-{i}", dump(d)))
    out += yaml_level(dump(SPEC), rng)
    return out


def profile_mutations(rng: random.Random) -> list[tuple[str, str | bytes]]:
    out: list[tuple[str, str | bytes]] = []
    for name, path, value in PROFILE_BAD:
        out.append((name, dump(set_path(PROFILE, path, value))))
    for i in range(20):
        picks = rng.sample(PROFILE_BAD, rng.randint(2, 3))
        d = PROFILE
        for _, path, value in picks:
            d = set_path(d, path, value)
        out.append((f"multi-{i}", dump(d)))
    out += yaml_level(dump(PROFILE), rng)
    return out


NAMED_SPECS: dict[str, str | bytes] = {
    "image-slash": dump({**SPEC, "image": "/"}),
    "deep-nesting": dump(SPEC) + "args: " + deep(10_000) + "\n",
    "self-alias": dump(SPEC) + "extra: &loop [*loop]\n",
    "billion-laughs": bomb(9) + dump(SPEC),
    "nul-in-args": dump(SPEC).replace("- '20'", '- "2\\00"'),
    "nul-in-name": 'name: "a\\0b"\n' + dump({k: v for k, v in SPEC.items() if k != "name"}),
    "nul-raw-byte": dump(SPEC).replace("train_ddp.py", "train\x00ddp.py"),
    "duplicate-key": dump(SPEC) + "name: fuzz-again\n",
    "nproc-too-many": dump({**SPEC, "nproc_per_node": 100_000}),
    "script-escapes": dump({**SPEC, "script": "../../../../etc/passwd"}),
    "script-absolute": dump({**SPEC, "script": "/etc/passwd"}),
    "relative-mount": dump({**SPEC, "mounts": ["./checkpoints:/workspace/checkpoints"]}),
    "all-errors": dump({**SPEC, "name": "Bad Name", "nodes": 0, "max_restarts": -1}),
    "unknown-host": dump({**SPEC, "nodes": ["gpu1", "nope"]}),
    "env-unset": dump({**SPEC, "env": {"TOKEN": UNSET}}),
    "user-newline-in-env-name": dump({**SPEC, "env": {"A\nB": "x"}}),
}

NAMED_PROFILES: dict[str, str | bytes] = {
    "jump-notaport": dump(set_path(PROFILE, ("hosts", "gpu2", "jump"), "bastion:notaport")),
    "jump-port-99999": dump(set_path(PROFILE, ("hosts", "gpu2", "jump"), "bastion:99999")),
    "user-newline": dump(set_path(PROFILE, ("hosts", "gpu1", "user"), "root\nevil")),
    "identity-not-a-key": dump(
        set_path(PROFILE, ("hosts", "gpu1", "identity_file"), "tests/data/fuzz/files/not-a-key")
    ),
    "host-key-5000": dump(set_path(PROFILE, ("hosts", "h" * 5000), {"hostname": "10.0.0.9"})),
    "known-hosts-binary": dump(
        set_path(PROFILE, ("known_hosts",), "tests/data/fuzz/files/known_hosts.bin")
    ),
    "defaults-mounts-relative": dump(set_path(PROFILE, ("defaults", "mounts"), ["./data:/data"])),
    "defaults-env-unset": dump(set_path(PROFILE, ("defaults", "env"), {"TOKEN": UNSET})),
    "image-slash": dump(set_path(PROFILE, ("defaults", "image"), "/")),
    "nul-in-user": dump(PROFILE).replace("user: ubuntu", 'user: "ubu\\0ntu"', 1),
    "duplicate-key": dump(PROFILE) + "known_hosts: /tmp/other\n",
    "billion-laughs": bomb(9) + dump(PROFILE),
    "deep-nesting": dump(PROFILE) + "extra: " + deep(10_000) + "\n",
    "self-alias": dump(PROFILE) + "extra: &loop {a: *loop}\n",
}


def helper_files(folder: Path, rng: random.Random) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "not-a-key").write_text("this is not a private key\n")
    (folder / "id_test.pub").write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmG3Yd1xVqXfJY0rQm8mZ7rS1b6w9fQy0n2lqk8B1aP fuzz\n"
    )
    (folder / "known_hosts").write_text(
        "gpu1.example.org ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIBmG3Yd1xVqXfJY0rQm8mZ7rS1b6w9fQy0n2lqk8B1aP\n"
    )
    (folder / "known_hosts.bin").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    (folder / "known_hosts.latin1").write_bytes(b"caf\xe9 ssh-ed25519 AAAA\n")


def write(folder: Path, name: str, content: str | bytes) -> None:
    p = folder / f"{name}.yaml"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_bytes(content.encode("utf-8", "surrogatepass"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "fuzz")
    out = ap.parse_args().out
    rng = random.Random(SEED)
    for sub in ("spec", "profile", "files"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    helper_files(out / "files", rng)
    base_spec = dict(SPEC, workdir="../../../scripts/examples")
    (out / "valid-spec.yaml").write_text(dump(base_spec))
    (out / "valid-profile.yaml").write_text(dump(PROFILE))
    for name, content in NAMED_SPECS.items():
        write(out / "spec", f"named-{name}", content)
    for name, content in NAMED_PROFILES.items():
        write(out / "profile", f"named-{name}", content)
    for i, (name, content) in enumerate(spec_mutations(rng)):
        write(out / "spec", f"m{i:03d}-{name}", content)
    for i, (name, content) in enumerate(profile_mutations(rng)):
        write(out / "profile", f"m{i:03d}-{name}", content)
    n_spec = len(list((out / "spec").iterdir()))
    n_prof = len(list((out / "profile").iterdir()))
    print(f"wrote {n_spec} specs and {n_prof} profiles under {out}")


if __name__ == "__main__":
    main()
