"""Real FSDP checkpoints for the converter's tests, written once per set of inputs and kept in a cache.

Writing one takes a gloo process group of up to 4 CPU processes importing torch and verl (tests/unit/export/
fsdp_writer.py): 13 processes a run for the layouts the tests use. What such a checkpoint holds depends only
on the writer's spec, the writer's own code and the versions of torch, transformers and verl, so the cache
is keyed by exactly those; a digest of the files, checked on every use, catches a cached copy that a test
or a person changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

WRITER = Path(__file__).resolve().parent / "unit" / "export" / "fsdp_writer.py"
DIGEST_FILE = ".files-sha256"
if str(WRITER.parent) not in sys.path:
    sys.path.insert(0, str(WRITER.parent))

from fsdp_writer import WriterSpec  # noqa: E402

__all__ = ["WriterSpec", "cache_key", "cached_checkpoint", "copy_checkpoint"]


def cache_root() -> Path:
    return Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-operator")) / "fsdp-checkpoints"


def cache_key(spec: WriterSpec) -> str:
    """What the files depend on: the spec (not where it is written), the writer, and the libraries' versions."""
    inputs = {k: v for k, v in asdict(spec).items() if k != "out_root"}
    versions = {name: metadata.version(name) for name in ("torch", "transformers", "verl")}
    digest = hashlib.sha256(json.dumps([inputs, versions], sort_keys=True).encode())
    digest.update(WRITER.read_bytes())
    return digest.hexdigest()[:20]


def files_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != DIGEST_FILE):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _intact(root: Path) -> bool:
    recorded = root / DIGEST_FILE
    return recorded.is_file() and recorded.read_text().strip() == files_digest(root)


def write(spec: WriterSpec) -> None:
    proc = subprocess.run([sys.executable, str(WRITER), json.dumps(asdict(spec))], capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"FSDP checkpoint writer failed:\n{proc.stderr[-4000:]}")


def cached_checkpoint(spec: WriterSpec) -> Path:
    """The checkpoint root `spec` describes (its out_root is ignored), written on a miss. Read it, never write
    to it: copy_checkpoint gives a private copy to damage."""
    root = cache_root() / cache_key(spec)
    if root.is_dir() and _intact(root):
        root.chmod(0o755)  # written as 0700 by an earlier version of this helper
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # Written beside its place and renamed into it, so that parallel test workers never see half a checkpoint.
    staging = Path(tempfile.mkdtemp(prefix=f"{root.name}.partial-", dir=root.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would follow every copy: the converter pod reads its copy as uid 1000
    try:
        write(WriterSpec(**{**asdict(spec), "out_root": str(staging)}))
        (staging / DIGEST_FILE).write_text(files_digest(staging))
        if root.is_dir():
            shutil.rmtree(root)  # a damaged copy
        try:
            staging.rename(root)
        except OSError:
            if not (root.is_dir() and _intact(root)):  # another worker's rename won; anything else is an error
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def copy_checkpoint(spec: WriterSpec, destination: Path) -> Path:
    """A private copy of the cached checkpoint at `destination` (created), without the cache's digest file."""
    shutil.copytree(cached_checkpoint(spec), destination, ignore=shutil.ignore_patterns(DIGEST_FILE),
                    dirs_exist_ok=True)
    return destination
