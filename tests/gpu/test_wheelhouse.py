"""CPU: which lock packages an offline wheelhouse carries (images/trainer/wheelhouse.py)."""

from __future__ import annotations

from pathlib import Path

import wheelhouse as wh

LOCK = """# header
torch==2.11.0 --hash=sha256:{h}
transformers==5.9.0 --hash=sha256:{h}
numpy==2.3.5 --hash=sha256:{h}
xgrammar==0.2.3 --hash=sha256:{h}
wandb==0.31.0 --hash=sha256:{h}
Ray==2.52.1 --hash=sha256:{h}
""".format(h="0" * 64)
REQUIREMENTS_IN = "verl[vllm]==0.9.1\ntransformers==5.9.0\nray[default]==2.52.1\nkopf>=1.38\n"


def decisions(base: str, constraints: str = "", omit: str = "") -> dict[str, wh.Decision]:
    out = wh.decide(
        wh.parse_lock(LOCK),
        wh.parse_base(base),
        wh.parse_constraints([constraints]),
        wh.parse_names(omit),
        wh.exact_top_level(REQUIREMENTS_IN),
    )
    return {d.name: d for d in out}


def test_base_packages_are_left_out_unless_the_stack_pins_another_version() -> None:
    d = decisions("torch==2.11.0+cu130\ntransformers==5.17.0\nnumpy==2.5.2\n")
    assert not d["torch"].carry  # same release, local build tag ignored
    assert d["transformers"].carry and d["transformers"].version == "5.9.0"  # pinned exactly by requirements.in
    assert not d["numpy"].carry  # the base's numpy is kept
    assert d["ray"].carry  # not in the base


def test_a_bare_base_name_counts_as_present_with_unknown_version() -> None:
    d = decisions("numpy\ntransformers\n")
    assert not d["numpy"].carry
    assert d["transformers"].carry  # unknown version of a stack pin: carry the lock's


def test_constraints_substitute_versions_and_omit_list_leaves_packages_out() -> None:
    d = decisions("", constraints="xgrammar==0.2.5.post1  # issue 8\n", omit="wandb  # not used\n")
    assert d["xgrammar"].carry and d["xgrammar"].version == "0.2.5.post1" and d["xgrammar"].sha256 is None
    assert not d["wandb"].carry
    assert d["numpy"].sha256 == "0" * 64


def test_a_constraint_for_a_package_outside_the_lock_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="vllm"):
        decisions("", constraints="vllm==0.99\n")


def test_pip_freeze_lines_with_direct_references_parse() -> None:
    assert wh.parse_base("foo @ file:///x.whl\nBar_Baz==1.0\n-e git+https://x\n") == {"foo": None, "bar-baz": "1.0"}


def test_sdist_names_keep_their_dashes() -> None:
    assert wh.dist_name(Path("antlr4-python3-runtime-4.9.3.tar.gz")) == "antlr4-python3-runtime"


def test_the_recorded_offline_files_parse_against_the_real_lock() -> None:
    here = Path(wh.__file__).parent
    lock = wh.parse_lock((here / "requirements.lock").read_text())
    constraints = wh.parse_constraints(p.read_text() for p in (here / "offline").glob("constraints*.txt"))
    assert set(constraints) <= set(lock)
    assert wh.parse_names((here / "offline" / "omit.txt").read_text()) <= set(lock)
