"""The operator and trainer images, built here from the Dockerfiles users read, and put into the node.

- Builder: buildah (daemonless, `--isolation chroot`), with its own storage under the cache, so the
  host's container storage is never touched.
- Base: no registry can be pulled from here, so `FROM python:3.12-slim-bookworm` is served by a
  stand-in built locally: a Debian bookworm minbase (mmdebstrap, from Debian's packages) with this
  machine's CPython 3.12 in /usr/local, committed under the public base's name. The Dockerfiles build
  unchanged (`--pull-never`); on a machine with a registry they build on the real base.
- Build-time settings of this machine (its TLS-intercepting CA for pip, apt's validity options, the
  cached wheels) are bind-mounted into the build's RUN steps only, never baked into an image.
- Cache: each image is tagged `grpo.local/<name>:<digest>`, the digest of everything that goes in
  (the Dockerfile, the files it COPYs, the base's recipe); a tag already in storage is not rebuilt,
  and buildah's layer cache keeps the trainer's multi-GB dependency layer across source changes.
- Into the node: `buildah push … docker-archive:` then `ctr images import` into the node's
  containerd (skipped when containerd already holds that tag).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .build import cache_root
from .errors import DevClusterError

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "grpo.local"
BASE_REFERENCE = "docker.io/library/python:3.12-slim-bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What python:3.12-slim-bookworm carries beyond minbase: CPython's shared-library needs, CA certificates,
# /etc/services and time zones.
BASE_PACKAGES = (
    "ca-certificates", "netbase", "tzdata", "libssl3", "libffi8", "libsqlite3-0", "libncursesw6",
    "libreadline8", "libbz2-1.0", "liblzma5", "zlib1g", "libuuid1",
)
# Never part of an image's inputs (the build context ignores them too: .containerignore).
IGNORED = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".ruff_cache", ".hypothesis")
# Host files that adapt a build to this machine, mounted into RUN steps when they exist.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_APT_OPTIONS = Path("/etc/apt/apt.conf.d/99artifact-registry")
BUILD_MOUNT = "/run/grpo-build"
SDIST_BUILD_REQUIREMENT = "wheel==0.45.1"


@dataclass(frozen=True)
class ImageRecipe:
    """One image of ours: a name, the Dockerfile (relative to the repository root) and its build args."""

    name: str
    dockerfile: str
    build_args: tuple[tuple[str, str], ...] = ()
    # The requirements lock it installs, relative to the Dockerfile's folder (its wheels are cached).
    lock: str = "requirements.lock"

    def reference(self, digest: str) -> str:
        return f"{REGISTRY}/{self.name}:{digest[:12]}"


OPERATOR = ImageRecipe("grpo-operator", "images/operator/Dockerfile")
# The image users run: verl with vLLM and every CUDA wheel (11.4 GB; README "Images" has the figures).
TRAINER = ImageRecipe("grpo-trainer", "images/trainer/Dockerfile")
# The same Dockerfile without the GPU serving stack: what the real node runs (rehearsal, preflight,
# converter, `ray start`), small enough for CI's disk and time.
TRAINER_REHEARSAL = ImageRecipe("grpo-trainer", "images/trainer/Dockerfile",
                                (("TRAINER_LOCK", "requirements-rehearsal.lock"),), "requirements-rehearsal.lock")
RECIPES = {"operator": OPERATOR, "trainer": TRAINER_REHEARSAL, "trainer-full": TRAINER}


# --------------------------------------------------------------------------- pure: what goes in


def copy_sources(dockerfile: str, build_args: dict[str, str] | None = None) -> list[str]:
    """The build-context paths a Dockerfile's COPY/ADD instructions read (not `--from` stages), with
    `${ARG}`s replaced by the build args or the ARG's default."""
    sources: list[str] = []
    arg_values: dict[str, str] = {}
    logical = dockerfile.replace("\\\n", " ")
    for line in logical.splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if words and words[0].upper() == "ARG" and len(words) == 2:
            name, _, default = words[1].partition("=")
            arg_values[name] = (build_args or {}).get(name, default)
            continue
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        words = [_substitute(w, arg_values) for w in words]
        args = words[1:]
        if any(a.startswith("--from") for a in args):
            continue
        paths = [a for a in args if not a.startswith("--")]
        sources.extend(paths[:-1])  # the last one is the destination
    return sources


def _substitute(word: str, args: dict[str, str]) -> str:
    for name, value in args.items():
        word = word.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return word


def ignored(relative: str) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in Path(relative).parts for pattern in IGNORED)


def context_files(root: Path, sources: Iterable[str]) -> list[Path]:
    """Every file the sources name, sorted, minus what the build context ignores."""
    files: set[Path] = set()
    for source in sources:
        path = root / source
        if path.is_dir():
            files.update(p for p in path.rglob("*") if p.is_file() and not ignored(str(p.relative_to(root))))
        elif path.is_file():
            files.add(path)
        else:
            raise DevClusterError("images", f"{source} (COPY in a Dockerfile) does not exist under {root}")
    return sorted(files)


def input_digest(root: Path, recipe: ImageRecipe, base_key: str) -> str:
    """sha256 of the Dockerfile, the files it copies (path and bytes) and the base's recipe."""
    digest = hashlib.sha256()
    dockerfile = (root / recipe.dockerfile).read_bytes()
    digest.update(dockerfile)
    digest.update(base_key.encode())
    digest.update(repr(recipe.build_args).encode())
    for path in context_files(root, copy_sources(dockerfile.decode(), dict(recipe.build_args))):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def base_key(python_version: str) -> str:
    """Changes whenever what the base is built from changes (the image name keeps the public one)."""
    recipe = f"{DEBIAN_SUITE} minbase {' '.join(sorted(BASE_PACKAGES))} cpython {python_version} v2"
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- buildah


def images_dir() -> Path:
    return cache_root() / "images"


def _require(program: str, package: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise DevClusterError("images", f"`{program}` is not installed; install the Debian package {package} "
                              "(hack/bootstrap does)")
    return path


def _run(argv: list[str], what: str, log, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise DevClusterError("images", f"{what} failed (exit {result.returncode}):\n{tail}")
    return result


class Buildah:
    """The buildah CLI on a storage of our own (overlay, under the cache), never the host's."""

    def __init__(self, directory: Path | None = None, log=sys.stderr) -> None:
        self.directory = directory or images_dir()
        self.log = log
        self.program = _require("buildah", "buildah")

    def argv(self, *args: str) -> list[str]:
        return [self.program, "--root", str(self.directory / "storage"), "--runroot", str(self.directory / "run"),
                "--storage-driver", "overlay", *args]

    def network_args(self) -> list[str]:
        """RUN steps share the host's network (chroot isolation does anyway); buildah would otherwise
        create /etc/cni on the host for a CNI network it never uses."""
        return ["--network", "host", "--cni-config-dir", str(self.directory / "cni")]

    def run(self, *args: str, what: str, **kwargs) -> subprocess.CompletedProcess:
        return _run(self.argv(*args), what, self.log, **kwargs)

    def has(self, reference: str) -> bool:
        result = subprocess.run(self.argv("inspect", "--type", "image", reference), capture_output=True, check=False)
        return result.returncode == 0

    def label(self, reference: str, key: str) -> str | None:
        if not self.has(reference):
            return None
        result = self.run("inspect", "--type", "image", "--format", f'{{{{index .ImageAnnotations "{key}"}}}}',
                          reference, what=f"reading {reference}")
        value = result.stdout.strip()
        return value if value and value != "<no value>" else None


def find_python312() -> Path:
    """This machine's CPython 3.12 install prefix, the interpreter the stand-in base carries."""
    candidates = [Path(os.environ["GRPO_BASE_PYTHON_PREFIX"])] if "GRPO_BASE_PYTHON_PREFIX" in os.environ else []
    candidates += sorted(Path.home().glob(".pyenv/versions/3.12.*"), reverse=True)
    for prefix in candidates:
        if (prefix / "bin" / "python3.12").is_file() and (prefix / "lib" / "libpython3.12.so.1.0").is_file():
            # The scripts' shebangs name the real path: a prefix reached through a link (a linked
            # ~/.pyenv) would leave pip pointing at a path the image does not have.
            return prefix.resolve()
    raise DevClusterError("images", "no CPython 3.12 with a shared libpython found (pyenv's 3.12.x, or set "
                          "GRPO_BASE_PYTHON_PREFIX to an install prefix); the stand-in base needs one")


def _relocate_scripts(bin_dir: Path, old_prefix: Path) -> None:
    """pip & co. have `#!<old prefix>/bin/python3.12`; in the image the interpreter is /usr/local."""
    for script in bin_dir.iterdir():
        if not script.is_file() or script.is_symlink():
            continue
        head = script.read_bytes()[:256]
        if head.startswith(b"#!") and str(old_prefix).encode() in head.split(b"\n", 1)[0]:
            text = script.read_bytes()
            first, rest = text.split(b"\n", 1)
            script.write_bytes(first.replace(str(old_prefix).encode(), b"/usr/local") + b"\n" + rest)


def build_base(buildah: Buildah) -> str:
    """The stand-in for python:3.12-slim-bookworm; returns its recipe key (rebuilt when that changes)."""
    prefix = find_python312()
    key = base_key(prefix.name)
    if buildah.label(BASE_REFERENCE, "grpo.dev/base-key") == key:
        return key
    mmdebstrap = _require("mmdebstrap", "mmdebstrap")
    started = time.monotonic()
    print(f"[images] building the stand-in base {BASE_REFERENCE} (Debian {DEBIAN_SUITE} minbase + CPython "
          f"{prefix.name})", file=buildah.log, flush=True)
    with tempfile.TemporaryDirectory(prefix="grpo-base-", dir=buildah.directory) as tmp:
        rootfs = Path(tmp) / "rootfs"
        aptopts = [f"--aptopt={HOST_APT_OPTIONS}"] if HOST_APT_OPTIONS.is_file() else []
        _run([mmdebstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", *aptopts,
              "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
              DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR], "mmdebstrap", buildah.log)
        local = rootfs / "usr" / "local"
        for part in ("bin", "lib", "include"):
            shutil.copytree(prefix / part, local / part, symlinks=True, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("test", "__pycache__", "idle_test"))
        _relocate_scripts(local / "bin", prefix)
        for link, target in (("python", "python3"), ("pip", "pip3")):
            if not (local / "bin" / link).exists():
                (local / "bin" / link).symlink_to(target)
        _run(["chroot", str(rootfs), "ldconfig"], "ldconfig in the base", buildah.log)
        _run(["chroot", str(rootfs), "python3", "-c", "import ssl, sqlite3, ctypes, venv, ensurepip"],
             "checking the base's CPython", buildah.log)
        _run(["chroot", str(rootfs), "pip", "--version"], "checking the base's pip (its shebang relocated)",
             buildah.log)
        container = buildah.run("from", "scratch", what="buildah from scratch").stdout.strip()
        try:
            buildah.run("copy", container, str(rootfs), "/", what="copying the base's root filesystem")
            buildah.run("config", "--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--env", "LANG=C.UTF-8", "--env", f"PYTHON_VERSION={prefix.name}", "--cmd", "python3",
                        "--annotation", f"grpo.dev/base-key={key}",
                        "--annotation", "grpo.dev/stand-in=built locally from Debian packages; not the public image",
                        container, what="configuring the base")
            buildah.run("commit", "--rm", container, BASE_REFERENCE, what="committing the base")
        except BaseException:
            subprocess.run(buildah.argv("rm", container), capture_output=True, check=False)
            raise
    print(f"[images] base built in {time.monotonic() - started:.0f}s", file=buildah.log, flush=True)
    return key


@dataclass(frozen=True)
class BuiltImage:
    recipe: ImageRecipe
    reference: str
    seconds: float  # 0 when it came from the cache
    size: str


def pip_config(ca_bundle: str | None, wheels: str | None) -> str:
    """/etc/pip.conf for RUN steps: trust this machine's CA; install only from the cached wheelhouse."""
    lines = ["[global]"]
    if ca_bundle:
        lines.append(f"cert = {ca_bundle}")
    if wheels:
        lines += [f"find-links = {wheels}", "no-index = true"]
    return "\n".join(lines) + "\n"


def _build_volumes(recipe: ImageRecipe, wheels: Path | None) -> Iterator[str]:
    """Bind mounts for RUN steps only: this machine's CA for pip, apt's options, a pip config."""
    config_dir = images_dir() / "build-config" / recipe.name
    config_dir.mkdir(parents=True, exist_ok=True)
    ca = f"{BUILD_MOUNT}/ca.pem" if HOST_CA_BUNDLE.is_file() else None
    if ca:
        yield f"--volume={HOST_CA_BUNDLE}:{ca}:ro"
    if wheels is not None:
        yield f"--volume={wheels}:{BUILD_MOUNT}/wheels:ro"
    (config_dir / "pip.conf").write_text(pip_config(ca, f"{BUILD_MOUNT}/wheels" if wheels else None))
    yield f"--volume={config_dir / 'pip.conf'}:/etc/pip.conf:ro"
    if HOST_APT_OPTIONS.is_file():
        yield f"--volume={HOST_APT_OPTIONS}:/etc/apt/apt.conf.d/{HOST_APT_OPTIONS.name}:ro"


def image_size(buildah: Buildah, reference: str) -> str:
    """As buildah reports it (e.g. "351 MB")."""
    result = buildah.run("images", "--json", reference, what=f"sizing {reference}")
    entries = json.loads(result.stdout or "[]")
    return str(entries[0].get("size", "?")) if entries else "?"


def build_image(buildah: Buildah, recipe: ImageRecipe, base: str, root: Path = ROOT,
                wheels: Path | None = None) -> BuiltImage:
    reference = recipe.reference(input_digest(root, recipe, base))
    if buildah.has(reference):
        return BuiltImage(recipe, reference, 0.0, image_size(buildah, reference))
    started = time.monotonic()
    print(f"[images] building {reference} from {recipe.dockerfile}", file=buildah.log, flush=True)
    buildah.run("bud", "--isolation", "chroot", "--pull-never", "--layers", "--format", "docker",
                *buildah.network_args(), *(f"--build-arg={k}={v}" for k, v in recipe.build_args),
                *_build_volumes(recipe, wheels), "-f", str(root / recipe.dockerfile), "-t", reference, str(root),
                what=f"building {recipe.dockerfile}")
    seconds = time.monotonic() - started
    print(f"[images] built {reference} in {seconds:.0f}s", file=buildah.log, flush=True)
    return BuiltImage(recipe, reference, seconds, image_size(buildah, reference))


# --------------------------------------------------------------------------- wheels


def wheelhouse(lock: Path, platform_script: Path, log=sys.stderr) -> Path:
    """Every wheel (and sdist) of a lock for the image's platform, downloaded once, cached by the lock's hash.

    The build then installs with `--no-index` from it: a rebuild needs no network, and CI's cache keeps
    the trainer's ~4 GB of wheels across runs.
    """
    key = hashlib.sha256(lock.read_bytes() + platform_script.read_bytes()).hexdigest()[:12]
    directory = images_dir() / "wheels" / f"{lock.parent.name}-{key}"
    if (directory / ".complete").is_file():
        return directory
    started = time.monotonic()
    print(f"[images] downloading the wheels of {lock.relative_to(ROOT)} (first time; cached in {directory})",
          file=log, flush=True)
    partial = directory.with_name(directory.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    # antlr4-python3-runtime is only on PyPI as an sdist (platform.sh names its version): fetched as that
    # sdist, which pip builds inside the image with setuptools (in the lock) and wheel (pip < 23.3's build
    # requirement for setuptools projects: the base's pip is 23.2) from the same wheelhouse.
    script = (
        'set -euo pipefail; source "$1"; lock="$2"; dest="$3"; py="$4"\n'
        'grep -v "^antlr4-python3-runtime==" "$lock" > "$dest/.binary.lock"\n'
        '"$py" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$dest" -r "$dest/.binary.lock"\n'
        'if grep -q "^antlr4-python3-runtime==" "$lock"; then\n'
        '  "$py" -m pip download -q --no-deps --no-binary=:all: -d "$dest" "antlr4-python3-runtime==$ANTLR4_VERSION"\n'
        f'  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$dest" "{SDIST_BUILD_REQUIREMENT}"\n'
        'fi\n'
    )
    _run(["bash", "-c", script, "wheelhouse", str(platform_script), str(lock), str(partial), sys.executable],
         f"downloading the wheels of {lock}", log)
    (partial / ".complete").write_text(f"{time.monotonic() - started:.0f}s\n")
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    print(f"[images] wheels ready in {time.monotonic() - started:.0f}s", file=log, flush=True)
    return directory


# --------------------------------------------------------------------------- the pause image, archives


PAUSE_REFERENCE = "registry.k8s.io/pause:3.10"


def build_pause(buildah: Buildah) -> str:
    """The sandbox image, from the pinned Kubernetes module's own pause.c (gcc -static, a scratch image)."""
    if buildah.has(PAUSE_REFERENCE):
        return PAUSE_REFERENCE
    from .components import KUBELET

    result = _run(["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"], "locating the kubernetes module",
                  buildah.log, cwd=KUBELET.module_dir)
    source = Path(result.stdout.strip()) / "build" / "pause" / "linux" / "pause.c"
    with tempfile.TemporaryDirectory(prefix="grpo-pause-", dir=buildah.directory) as tmp:
        binary = Path(tmp) / "pause"
        _run([_require("gcc", "gcc"), "-Os", "-static", "-DVERSION=3.10", "-o", str(binary), str(source)],
             "compiling pause.c", buildah.log)
        container = buildah.run("from", "scratch", what="buildah from scratch").stdout.strip()
        try:
            buildah.run("copy", container, str(binary), "/pause", what="copying pause")
            buildah.run("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container,
                        what="configuring pause")
            buildah.run("commit", "--rm", container, PAUSE_REFERENCE, what="committing pause")
        except BaseException:
            subprocess.run(buildah.argv("rm", container), capture_output=True, check=False)
            raise
    return PAUSE_REFERENCE


def export_command(buildah: Buildah, reference: str) -> list[str]:
    """`buildah push` of `reference` as a docker-archive (keeping its name) to stdout: piped straight into
    `ctr images import -`, so no multi-GB archive is ever written to disk."""
    return buildah.argv("push", "--quiet", reference, f"docker-archive:/dev/stdout:{reference}")


def content_store_blobs(containerd_root: Path) -> dict[str, int]:
    """digest -> size of every blob a containerd holds (the files of its content store)."""
    blobs = containerd_root / "io.containerd.content.v1.content" / "blobs" / "sha256"
    if not blobs.is_dir():
        return {}
    return {f"sha256:{p.name}": p.stat().st_size for p in blobs.iterdir() if p.is_file()}


OCI_NAME_ANNOTATION = "io.containerd.image.name"


def write_oci_archive_of_new_blobs(buildah: Buildah, reference: str, present: dict[str, int], out: BinaryIO,
                                   scratch: Path) -> int:
    """An OCI archive of `reference` on `out` that carries only the blobs containerd lacks (`present`: what it
    has), for `ctr images import`, which takes the rest from its content store. Returns the bytes of blobs sent.

    A rebuilt trainer image differs from the one imported last in its top layers (our sources); its 6 GB
    dependency layer is the same blob. buildah pushes into an OCI layout holding a sparse stand-in of the right
    size for every blob containerd has (its blob reuse looks at the file's existence and size), so it writes only
    the new ones; layers are pushed uncompressed, so their digests are the ones a docker-archive import stored."""
    layout = scratch / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text('{"schemaVersion": 2, "manifests": []}')
    stand_ins = set()
    for digest, size in present.items():
        name = digest.split(":", 1)[1]
        with open(blobs / name, "wb") as handle:
            handle.truncate(size)  # sparse: no disk taken
        stand_ins.add(name)
    buildah.run("push", "--quiet", "--disable-compression", "--format", "oci", reference, f"oci:{layout}:{reference}",
                what=f"pushing {reference} into an OCI layout")
    index = json.loads((layout / "index.json").read_text())
    for manifest in index["manifests"]:
        manifest.setdefault("annotations", {})[OCI_NAME_ANNOTATION] = reference
    sent = 0
    with tarfile.open(fileobj=out, mode="w|") as archive:
        small = (("oci-layout", (layout / "oci-layout").read_bytes()), ("index.json", json.dumps(index).encode()))
        for name, data in small:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for blob in sorted(blobs.iterdir()):
            if blob.name not in stand_ins:
                archive.add(blob, arcname=f"blobs/sha256/{blob.name}")
                sent += blob.stat().st_size
    return sent


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """One builder of our images at a time, across processes: hack/test builds them while the cluster starts in
    another process, whose real node builds the pause image; two builders would both build what is missing."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with open(images_dir() / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_node_images(which: Iterable[str] = ("operator", "trainer"), log=sys.stderr) -> dict[str, BuiltImage]:
    """Build (or take from the cache) the named images of RECIPES; the base and the pause image too."""
    buildah = Buildah(log=log)
    with build_lock():
        base = build_base(buildah)
        build_pause(buildah)
        built: dict[str, BuiltImage] = {}
        for name in which:
            recipe = RECIPES[name]
            lock = ROOT / Path(recipe.dockerfile).parent / recipe.lock
            platform = ROOT / Path(recipe.dockerfile).parent / "platform.sh"
            wheels = wheelhouse(lock, platform, log) if lock.is_file() and platform.is_file() else None
            built[name] = build_image(buildah, recipe, base, wheels=wheels)
    return built


# The names users pull: the chart's image.repository and operator.defaultTrainerImage. The rehearsal variant is a
# test image, pushed under a name of its own so it is never taken for the trainer.
PUSHED_NAMES = {"operator": "grpo-operator", "trainer-full": "grpo-trainer", "trainer": "grpo-trainer-rehearsal"}
CHART_FILE = ROOT / "charts" / "grpo-operator" / "Chart.yaml"


def chart_version() -> str:
    """The chart's appVersion: the tag pushed images get, as the chart's image.tag defaults to it."""
    for line in CHART_FILE.read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise DevClusterError("images", f"no appVersion in {CHART_FILE}")


@dataclass(frozen=True)
class Push:
    name: str
    source: str  # the local build, grpo.local/<name>:<digest>
    target: str  # <registry>/<pushed name>:<chart version>


def pushes(built: dict[str, BuiltImage], registry: str, version: str) -> list[Push]:
    """Pure: where each built image goes."""
    return [Push(name, image.reference, f"{registry.rstrip('/')}/{PUSHED_NAMES[name]}:{version}")
            for name, image in built.items()]


def helm_values(done: list[Push]) -> list[str]:
    """The `helm install --set` flags that make the chart use the pushed images."""
    values = []
    for push in done:
        repository, tag = push.target.rsplit(":", 1)
        if push.name == "operator":
            values += [f"image.repository={repository}", f"image.tag={tag}"]
        elif push.name == "trainer-full":
            values.append(f"operator.defaultTrainerImage={push.target}")
    return values


def push_images(which: Iterable[str], registry: str, tls_verify: bool = True, log=sys.stderr) -> list[Push]:
    """Build (cached) and push the named images to `registry` with buildah; the registry's credentials are
    buildah's own (`buildah login`, or REGISTRY_AUTH_FILE)."""
    built = build_node_images(which, log=log)
    buildah = Buildah(log=log)
    done = pushes(built, registry, chart_version())
    for push in done:
        print(f"[images] pushing {push.source} to {push.target}", file=log, flush=True)
        buildah.run("push", "--quiet", f"--tls-verify={str(tls_verify).lower()}", push.source,
                    f"docker://{push.target}", what=f"buildah push {push.target}")
    return done


@dataclass(frozen=True)
class NodeImageExport:
    """How our images go from buildah's storage into a node's containerd: whole (a docker-archive stream), or
    only their blobs containerd lacks (an OCI archive, when it holds an earlier build of the same image)."""

    buildah: Buildah

    def whole(self, reference: str) -> list[str]:
        return export_command(self.buildah, reference)

    def new_blobs(self, reference: str, present: dict[str, int], out: BinaryIO, scratch: Path) -> int:
        return write_oci_archive_of_new_blobs(self.buildah, reference, present, out, scratch)
