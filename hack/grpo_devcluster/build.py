"""Build the control-plane programs with the ordinary `go build`, cached by their pins."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .components import ALL, Component
from .errors import DevClusterError


def cache_root() -> Path:
    return Path(os.environ.get("GRPO_DEVCLUSTER_CACHE", Path.home() / ".cache" / "grpo-devcluster"))


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise DevClusterError(
            "go toolchain",
            "`go` is not on PATH; install Go 1.24 or newer (Debian: golang-go, or the tarball from the Go site)",
        )
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevClusterError("go toolchain", f"`go env GOVERSION` failed: {result.stderr.strip()}")
    return result.stdout.strip()


def component_dir(component: Component, go: str) -> Path:
    return cache_root() / component.cache_key(go)


def is_built(component: Component, go: str) -> bool:
    directory = component_dir(component, go)
    return all((directory / "bin" / name).is_file() for name in component.commands) and (
        directory / ".complete"
    ).is_file()


def build_component(component: Component, go: str, log=sys.stderr) -> Path:
    """Build one component into its versioned cache dir; a no-op when it is already there. One builder per
    component at a time, across processes (hack/test's background build beside a demo or a benchmark): a second
    one would delete the first one's staging directory under its `go build`."""
    directory = component_dir(component, go)
    if is_built(component, go):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(f".{directory.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(component, go):  # built by the process we waited for
            return directory
        return _build_unlocked(component, go, directory, log)


def _build_unlocked(component: Component, go: str, directory: Path, log) -> Path:
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    started = time.monotonic()
    env = _go_env(component)
    for binary, package in component.commands.items():
        print(f"[devcluster] building {component.name}: {binary} ({package})", file=log, flush=True)
        result = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", component.ldflags, "-o", str(staging / "bin" / binary),
             package],
            cwd=component.module_dir,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join(result.stderr.strip().splitlines()[-20:])
            raise DevClusterError(component.name, f"`go build {package}` failed:\n{tail}")
    _copy_manifests(component, staging, env)
    (staging / ".complete").write_text(f"{time.monotonic() - started:.1f}s\n")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    print(f"[devcluster] built {component.name} in {time.monotonic() - started:.0f}s", file=log, flush=True)
    return directory


def _go_env(component: Component) -> dict[str, str]:
    env = dict(os.environ)
    if component.toolchain:
        env["GOTOOLCHAIN"] = component.toolchain
    return env


def _copy_manifests(component: Component, staging: Path, env: dict[str, str]) -> None:
    """Keep the component's manifests (CRDs, webhooks) beside its binaries, read from the pinned modules in Go's
    module cache, so a cluster applies the very files of the version it runs."""
    if not component.manifests:
        return
    target = staging / "manifests"
    target.mkdir()
    for module, patterns in component.manifests:
        result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=component.module_dir,
                                capture_output=True, text=True, check=False, env=env)
        if result.returncode != 0 or not result.stdout.strip():
            raise DevClusterError(component.name, f"cannot locate the module {module}: {result.stderr.strip()}")
        root = Path(result.stdout.strip())
        for pattern in patterns:
            found = sorted(root.glob(pattern))
            if not found:
                raise DevClusterError(component.name, f"no file {pattern} in {root}")
            for path in found:
                shutil.copyfile(path, target / path.name)


def manifests_dir(component: Component, go: str) -> Path:
    return component_dir(component, go) / "manifests"


def build_all(components: tuple[Component, ...] = ALL, log=sys.stderr) -> dict[str, Path]:
    go = go_version()
    return {c.name: build_component(c, go, log=log) for c in components}


def binary(component: Component, name: str) -> Path:
    path = component_dir(component, go_version()) / "bin" / name
    if not path.is_file():
        raise DevClusterError(component.name, f"{path} is missing; run `grpo-devcluster build` first")
    return path
