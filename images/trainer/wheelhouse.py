"""Build an offline wheelhouse of the trainer image's lock for a GPU host without internet access.

    python images/trainer/wheelhouse.py --base base-freeze.txt --dest wheels/ \\
        [--constraints images/trainer/offline/constraints.txt ...] [--omit images/trainer/offline/omit.txt] \\
        [--plan-only]

The wheelhouse holds the lock's wheels (images/trainer/requirements.lock) minus the packages the base
image already has, with the recorded substitutions applied. The base is a `pip freeze` or `pip list
--format=freeze` of the target image (NAME==VERSION; a bare NAME means "present, version unknown").

Which lock packages are carried:
- a package named in --omit is left out;
- a package of a --constraints file is carried at the constraint's version (a substitution);
- a package the base has at the lock's version is left out;
- a package the base has at another (or an unknown) version is left out, unless requirements.in pins it
  exactly (verl, vllm, transformers, ray...): those decide the stack, so the lock's version is carried and
  shadows the base's;
- everything else is carried.

Wheels are fetched with `pip download --no-deps` for CPython 3.12 manylinux x86_64 (glibc tags 2.17 to 2.39:
the host's glibc must be at least the newest tag a fetched wheel has) and checked against the lock's sha256;
antlr4-python3-runtime, which PyPI has only as an sdist, is built into a wheel. The folder also gets plan.txt
(what was carried or left out, and why), constraints.txt (the substitutions) and requirements.txt; on the GPU host:

    pip install --no-index --no-deps --find-links DIR -r DIR/requirements.txt   # into the image's python
    # or, when the image's site-packages is read-only:
    pip install --no-index --no-deps --target /opt/site DIR/*.whl && export PYTHONPATH=/opt/site
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "requirements.lock"
REQUIREMENTS_IN = HERE / "requirements.in"
SDIST_ONLY = {"antlr4-python3-runtime"}
PYTHON_VERSION = "3.12"
PLATFORMS = [f"manylinux_2_{v}_x86_64" for v in range(39, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]


def normalize(name: str) -> str:
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """'2.11.0+cu130' -> '2.11.0': a local build of the same release counts as the same version."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str | None = None


@dataclass(frozen=True)
class Decision:
    name: str
    version: str
    carry: bool
    reason: str
    sha256: str | None = None


def strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def parse_lock(text: str) -> dict[str, Pin]:
    pins: dict[str, Pin] = {}
    for raw in text.splitlines():
        line = strip_comment(raw)
        if not line:
            continue
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+)(?:\s+--hash=sha256:([0-9a-f]{64}))?", line)
        if not m:
            raise ValueError(f"lock line not understood: {raw!r}")
        pins[normalize(m[1])] = Pin(normalize(m[1]), m[2], m[3])
    return pins


def parse_base(text: str) -> dict[str, str | None]:
    """`pip freeze` / `pip list --format=freeze` / bare names -> {name: version or None}."""
    base: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = strip_comment(raw)
        if not line or line.startswith("-"):
            continue
        if " @ " in line:  # direct reference: present, version unknown
            base[normalize(line.split(" @ ", 1)[0])] = None
            continue
        m = re.match(r"^([A-Za-z0-9._-]+)\s*(?:(?:==|\s)\s*(\S+))?$", line)
        if not m:
            raise ValueError(f"base package line not understood: {raw!r}")
        base[normalize(m[1])] = m[2]
    return base


def parse_constraints(texts: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in texts:
        for raw in text.splitlines():
            line = strip_comment(raw)
            if not line:
                continue
            m = re.match(r"^([A-Za-z0-9._-]+)==(\S+)$", line)
            if not m:
                raise ValueError(f"constraint must be NAME==VERSION: {raw!r}")
            out[normalize(m[1])] = m[2]
    return out


def parse_names(text: str) -> set[str]:
    return {normalize(strip_comment(raw).split()[0]) for raw in text.splitlines() if strip_comment(raw)}


def exact_top_level(text: str) -> set[str]:
    """Names requirements.in pins with ==: the packages that decide the stack."""
    names = set()
    for raw in text.splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==", strip_comment(raw))
        if m:
            names.add(normalize(m[1]))
    return names


def decide(
    lock: dict[str, Pin],
    base: dict[str, str | None],
    constraints: dict[str, str],
    omit: set[str],
    exact: set[str],
) -> list[Decision]:
    unknown = sorted(set(constraints) - set(lock))
    if unknown:
        raise ValueError(f"constraints name packages the lock does not have: {', '.join(unknown)}")
    decisions = []
    for _, pin in sorted(lock.items()):
        decisions.append(decide_one(pin, base, constraints, omit, exact))
    return decisions


def decide_one(
    pin: Pin, base: dict[str, str | None], constraints: dict[str, str], omit: set[str], exact: set[str]
) -> Decision:
    name = pin.name
    if name in omit:
        return Decision(name, pin.version, False, "omitted (omit list)")
    if name in constraints and constraints[name] != pin.version:
        return Decision(name, constraints[name], True, f"substitution for the lock's {pin.version}")
    if name not in base:
        return Decision(name, pin.version, True, "not in the base", pin.sha256)
    have = base[name]
    if have is not None and public_version(have) == pin.version:
        return Decision(name, pin.version, False, f"base has {have}")
    if name in exact or name in constraints:
        return Decision(name, pin.version, True, f"pinned exactly; base has {have or 'another version'}", pin.sha256)
    return Decision(name, pin.version, False, f"base has {have or 'it'} (lock: {pin.version})")


def render_plan(decisions: list[Decision]) -> str:
    carried = [d for d in decisions if d.carry]
    lines = [f"# carried: {len(carried)}; left out: {len(decisions) - len(carried)}"]
    lines += [f"{'carry' if d.carry else 'skip '} {d.name}=={d.version}  # {d.reason}" for d in decisions]
    return "\n".join(lines) + "\n"


def pip_download(requirements: list[str], dest: Path, binary: bool = True) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(requirements) + "\n")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(dest), "-r", f.name]
    if binary:
        cmd += ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
        cmd += ["--abi", "cp312", "--abi", "abi3", "--abi", "none"]
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
        cmd += ["--platform", "any"]
    else:
        cmd += ["--no-binary=:all:"]
    subprocess.run(cmd, check=True)


def build_sdist_wheels(sdists: Path, dest: Path) -> None:
    for sdist in sorted(sdists.glob("*.tar.gz")):
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest), str(sdist)], check=True
        )


def wheel_name(path: Path) -> str:
    return normalize(path.name.split("-", 1)[0])


def dist_name(sdist: Path) -> str:
    """'antlr4-python3-runtime-4.9.3.tar.gz' -> 'antlr4-python3-runtime'."""
    return normalize(re.split(r"-(?=\d)", sdist.name, maxsplit=1)[0])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_wheels(decisions: list[Decision], dest: Path, sdists: Path) -> list[str]:
    """Every carried package has exactly one wheel; lock hashes match (sdist hash for sdist-only ones)."""
    problems = []
    wheels: dict[str, list[Path]] = {}
    for w in dest.glob("*.whl"):
        wheels.setdefault(wheel_name(w), []).append(w)
    for d in (d for d in decisions if d.carry):
        found = wheels.get(d.name, [])
        if len(found) != 1:
            problems.append(f"{d.name}: {len(found)} wheels")
            continue
        if d.sha256 is None:
            continue
        if d.name in SDIST_ONLY:
            got = {sha256(s) for s in sdists.glob("*.tar.gz") if dist_name(s) == d.name}
        else:
            got = {sha256(found[0])}
        if d.sha256 not in got:
            problems.append(f"{d.name}: sha256 differs from the lock")
    return problems


def write_outputs(decisions: list[Decision], constraints: dict[str, str], dest: Path) -> None:
    (dest / "plan.txt").write_text(render_plan(decisions))
    (dest / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
    (dest / "requirements.txt").write_text("".join(f"{d.name}=={d.version}\n" for d in decisions if d.carry))


def build(decisions: list[Decision], constraints: dict[str, str], dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    carried = [d for d in decisions if d.carry]
    binary = [f"{d.name}=={d.version}" for d in carried if d.name not in SDIST_ONLY]
    sdist = [f"{d.name}=={d.version}" for d in carried if d.name in SDIST_ONLY]
    pip_download(binary, dest)
    sdists = dest / ".sdist"
    if sdist:
        sdists.mkdir(exist_ok=True)
        pip_download(sdist, sdists, binary=False)
        build_sdist_wheels(sdists, dest)
    write_outputs(decisions, constraints, dest)
    return check_wheels(decisions, dest, sdists)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="pip freeze (or list of names) of the base image")
    p.add_argument("--dest", type=Path, required=True, help="wheelhouse folder (created)")
    p.add_argument("--lock", type=Path, default=LOCK)
    p.add_argument("--requirements-in", type=Path, default=REQUIREMENTS_IN)
    p.add_argument("--constraints", type=Path, action="append", default=[], help="substitutions (repeatable)")
    p.add_argument("--omit", type=Path, action="append", default=[], help="names to leave out (repeatable)")
    p.add_argument("--plan-only", action="store_true", help="print what would be carried and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    constraints = parse_constraints(p.read_text() for p in a.constraints)
    omit: set[str] = set().union(*(parse_names(p.read_text()) for p in a.omit))
    decisions = decide(
        parse_lock(a.lock.read_text()),
        parse_base(a.base.read_text()),
        constraints,
        omit,
        exact_top_level(a.requirements_in.read_text()),
    )
    if a.plan_only:
        print(render_plan(decisions), end="")
        return 0
    problems = build(decisions, constraints, a.dest)
    for problem in problems:
        print(f"wheelhouse: {problem}", file=sys.stderr)
    size = sum(w.stat().st_size for w in a.dest.glob("*.whl"))
    print(f"{a.dest}: {sum(d.carry for d in decisions)} packages, {size / 2**20:.0f} MiB; plan in {a.dest}/plan.txt")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
