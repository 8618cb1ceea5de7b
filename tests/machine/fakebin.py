"""Stand-ins for the commands a gpufit machine calls, for the boot-script scenarios.

One program, named by the link it runs as (``aws``, ``gcloud``, ``docker``, ``torchrun``,
``systemd-run``, ``systemctl``, ``systemd-cat``, ``shutdown``, ``poweroff``, and the
scenario's own ``fakejob`` and ``fakehook``). Each call is appended to ``$GPUFIT_FAKE/calls.jsonl``
with its argv, the fake clock and, for the job's commands, its environment. The bucket is a
folder (``$GPUFIT_FAKE/buckets/NAME/KEY``) that ``aws s3`` and ``gcloud storage`` read and
write as the real commands would; secrets and behaviours come from ``$GPUFIT_FAKE/knobs.json``.
Standard library only (it runs with ``python -SE``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

FAKE = Path(os.environ["GPUFIT_FAKE"])
JOB_ENV = ("PATH", "VIRTUAL_ENV", "HF_TOKEN", "PWD")
"""Variables recorded for the job's commands (plus GPUFIT_* and the scenario's secrets)."""


def knobs() -> dict[str, Any]:
    return json.loads((FAKE / "knobs.json").read_text())


def clock() -> int:
    return int((FAKE / "clock").read_text().strip() or 0)


def record(cmd: str, argv: list[str], **extra: Any) -> None:
    line = json.dumps({"cmd": cmd, "argv": argv, "t": clock(), "pid": os.getpid(), **extra}) + "\n"
    with open(FAKE / "calls.jsonl", "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(line)


def job_env(secrets: list[str]) -> dict[str, str]:
    wanted = set(JOB_ENV) | set(secrets)
    return {
        k: v for k, v in os.environ.items() if k in wanted or (k.startswith("GPUFIT_") and k != "GPUFIT_FAKE")
    }


def next_attempt(name: str) -> int:
    counter = FAKE / f"{name}.count"
    with open(FAKE / "counters.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
    return n


# --------------------------------------------------------------------------- the bucket


def local(url: str) -> Path:
    """``s3://b/k`` or ``gs://b/k`` → the fake bucket's file or folder."""
    scheme, _, rest = url.partition("://")
    assert scheme in ("s3", "gs"), url
    return FAKE / "buckets" / rest


def copy_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.rglob("*"):
        if item.is_file() and not item.is_symlink():
            target = dst / item.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, target)


def sync(src: str, dst: str) -> int:
    source = local(src) if "://" in src else Path(src)
    target = local(dst) if "://" in dst else Path(dst)
    if not source.exists():
        if "://" in src:
            return 0  # an empty prefix syncs nothing
        print(f"The user-provided path {src} does not exist.", file=sys.stderr)
        return 255
    copy_tree(source, target)
    return 0


def cp(src: str, dst: str) -> int:
    source = local(src) if "://" in src else Path(src)
    if not source.is_file():
        print(f"fatal error: {src} not found", file=sys.stderr)
        return 1
    if dst == "-":
        sys.stdout.write(source.read_text())
        return 0
    target = local(dst) if "://" in dst else Path(dst)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return 0


def listing(url: str, gcs: bool) -> int:
    """Objects whose key starts with the URL's key, as ``aws s3 ls`` (date, size, name) and
    ``gcloud storage ls`` (URLs) list a prefix; exit 1 when there are none."""
    scheme, _, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    root = FAKE / "buckets" / bucket
    keys = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and str(p.relative_to(root)).startswith(prefix)
    )
    if not keys:
        return 1
    for key in keys:
        if gcs:
            print(f"{scheme}://{bucket}/{key}")
        else:
            print(f"2026-12-02 12:00:00 {(root / key).stat().st_size:>10} {key.rsplit('/', 1)[-1]}")
    return 0


def flag(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def positional(argv: list[str]) -> list[str]:
    """Arguments that are not flags (flags here take no value, or one given with ``=``); a lone
    ``-`` is an argument (standard input or output, as ``aws s3 cp SRC -`` takes it)."""
    return [a for a in argv if a == "-" or not a.startswith("-")]


# --------------------------------------------------------------------------- commands


def aws(argv: list[str]) -> int:
    k = knobs()
    record("aws", argv)
    service, op = argv[0], argv[1]
    rest = argv[2:]
    if service == "s3":
        args = positional(rest)
        if op == "sync":
            return sync(args[0], args[1])
        if op == "cp":
            return cp(args[0], args[1])
        if op == "ls":
            return listing(args[0], gcs=False)
    if service == "secretsmanager" and op == "get-secret-value":
        ref = flag(rest, "--secret-id") or ""
        region = flag(rest, "--region") or ""
        if ref.startswith("arn:") and ref.split(":")[3] != region:
            # Secrets are regional: another region's endpoint does not know the ARN
            # (https://docs.aws.amazon.com/secretsmanager/latest/userguide/create-manage-multi-region-secrets.html).
            print(
                "An error occurred (ResourceNotFoundException) when calling the GetSecretValue operation: "
                "Secrets Manager can't find the specified secret.",
                file=sys.stderr,
            )
            return 254
        if ref in k.get("failing_secrets", []) or ref not in k.get("secrets", {}):
            print(
                f"An error occurred (AccessDeniedException) when calling GetSecretValue on {ref}",
                file=sys.stderr,
            )
            return 254
        print(k["secrets"][ref])
        return 0
    if service == "autoscaling":
        if op == "describe-auto-scaling-instances":
            print(k.get("aws_group_lookup", k.get("group", "None")))
            return 0
        if op in k.get("failing_calls", []):
            return 254
        return 0
    print(f"fake aws: {service} {op} not faked", file=sys.stderr)
    return 2


def gcloud(argv: list[str]) -> int:
    k = knobs()
    record("gcloud", argv)
    words = positional(argv)
    if words[:1] == ["storage"]:
        op, args = words[1], words[2:]
        if op == "rsync":
            return sync(args[0], args[1])
        if op == "cp":
            return cp(args[0], args[1])
        if op == "cat":
            return cp(args[0], "-")
        if op == "ls":
            return listing(args[0], gcs=True)
    if words[:3] == ["secrets", "versions", "access"]:
        name, project = flag(argv, "--secret") or "", flag(argv, "--project") or ""
        for ref in (f"projects/{project}/secrets/{name}", name):
            if ref in k.get("failing_secrets", []):
                break
            if ref in k.get("secrets", {}):
                print(k["secrets"][ref])
                return 0
        print(f"ERROR: (gcloud.secrets.versions.access) PERMISSION_DENIED: {name}", file=sys.stderr)
        return 1
    if words[:3] == ["compute", "instance-groups", "managed"]:
        return 1 if words[3] in k.get("failing_calls", []) else 0
    print(f"fake gcloud: {' '.join(words[:3])} not faked", file=sys.stderr)
    return 2


def behave(name: str, argv: list[str]) -> int:
    """fakejob / torchrun: record, then act as the scenario's attempt says."""
    k = knobs()
    attempt = next_attempt(name)
    plans = k.get(name, [{"exit": 0}])
    plan = plans[min(attempt, len(plans)) - 1]
    record(name, argv, attempt=attempt, env=job_env(k.get("record_env", [])), cwd=os.getcwd())
    (FAKE / "pids").mkdir(exist_ok=True)
    (FAKE / "pids" / str(os.getpid())).touch()
    for file in plan.get("write", []):
        target = Path("outputs") / file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{name} attempt {attempt}\n")
    (FAKE / "job-started").touch()
    if plan.get("block"):

        def terminated(signum: int, frame: Any) -> None:
            record(f"{name}-terminated", [str(signum)])
            sys.exit(int(plan.get("on_term", 128 + signum)))

        signal.signal(signal.SIGTERM, terminated)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return 99
    return int(plan.get("exit", 0))


def hook(argv: list[str]) -> int:
    k = knobs()
    n = next_attempt("fakehook")
    record("fakehook", argv, env=job_env(k.get("record_env", [])), cwd=os.getcwd())
    Path("outputs").mkdir(exist_ok=True)
    Path("outputs", f"checkpoint-{n}.pt").write_text("weights\n")
    (FAKE / "hook-ran").touch()
    if k.get("hook_hangs"):
        (FAKE / "pids").mkdir(exist_ok=True)
        (FAKE / "pids" / str(os.getpid())).touch()
        time.sleep(60)
    return 0


def docker_image_inspect(ref: str) -> int:
    """``docker image inspect --format '{{range .RepoDigests}}...' REPO@DIGEST``: the registry
    served the image under knob ``registry_digest`` (default: the digest asked for); an image
    Docker does not hold under that reference is "No such image", exit 1, as docker answers."""
    repo, _, digest = ref.partition("@")
    served = knobs().get("registry_digest") or digest
    if served != digest:
        sys.stderr.write(f"Error response from daemon: No such image: {ref}\n")
        return 1
    print(f"{repo}@{served}")
    return 0


def main() -> int:
    name = Path(sys.argv[0]).name
    argv = sys.argv[1:]
    if name == "aws":
        return aws(argv)
    if name == "gcloud":
        return gcloud(argv)
    if name in ("fakejob", "torchrun"):
        return behave(name, argv)
    if name == "fakehook":
        return hook(argv)
    if name == "nvidia-smi":  # -L: one line per GPU the machine shows (none: the driver is not up)
        gpus = int(knobs().get("gpus", 0))
        for i in range(gpus):
            print(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})")
        return 0 if gpus else 9
    if name == "systemd-cat":
        sys.stderr.write(sys.stdin.read())
        return 0
    record(name, argv)
    if name == "docker" and argv[:2] == ["image", "inspect"]:
        return docker_image_inspect(argv[-1])
    if name == "docker" and argv[:1] == ["run"] and "docker run" in knobs().get("failing_calls", []):
        return 125
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
