"""The operator image installs exactly its lock: the lock must satisfy the operator's dependencies, and
nothing of the trainer's stack may slip in."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "images" / "operator" / "requirements.lock"
DOCKERFILE = ROOT / "images" / "operator" / "Dockerfile"
LOCK_LINE = re.compile(r"([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}")


def _locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = LOCK_LINE.fullmatch(line.strip())
            assert match, f"not 'name==version --hash=sha256:...': {line}"
            pins[match[1]] = Version(match[2])
    return pins


def _operator_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_lock_pins_every_operator_dependency_within_its_range() -> None:
    pins = _locked()
    for requirement in _operator_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} missing from {LOCK.name}; run images/operator/lock.sh"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} outside {requirement}"


def test_lock_leaves_out_the_trainer_stack() -> None:
    assert not {"torch", "verl", "vllm", "ray", "transformers"} & set(_locked())


def test_lock_leaves_out_the_kubernetes_client() -> None:
    # kopf imports `kubernetes` whenever it is installed (~20 MB of the operator's memory), and the
    # operator itself talks to the API through aiohttp.
    assert "kubernetes" not in _locked()


def test_image_runs_python_on_glibc_malloc_for_heap_trimming() -> None:
    # grpo_operator.runtime.memory hands free heap pages back with malloc_trim; pymalloc's arenas would keep
    # them. bench/operator/bench.py --as-image sets the same variable.
    assert re.search(r"^\s*PYTHONMALLOC=malloc\b", DOCKERFILE.read_text(), re.MULTILINE)


def test_image_runs_as_a_numeric_non_root_user() -> None:
    users = [line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("USER ")]
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so kubelet's runAsNonRoot check can verify it


def test_image_installs_only_the_lock_and_the_operator_package() -> None:
    text = DOCKERFILE.read_text()
    assert "--no-deps --require-hashes -r /tmp/requirements.lock" in text
    copies = [line.split()[-2] for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line]
    assert copies == ["images/operator/requirements.lock", "operator/grpo_operator"]
