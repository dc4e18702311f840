"""runtime/per_generation.py: derived once per generation of a job, again after an edit or a re-creation."""

from __future__ import annotations

from grpo_operator.runtime.per_generation import PerGeneration


def _job(generation: int, uid: str = "u1", name: str = "a") -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": generation}, "spec": {}}


def test_derived_once_per_generation_and_again_after_an_edit_or_a_recreation() -> None:
    calls: list[tuple[str, int]] = []

    def derive(job: dict) -> int:
        calls.append((job["metadata"]["uid"], job["metadata"]["generation"]))
        return len(calls)

    cache = PerGeneration(derive)
    assert [cache.of(_job(1)), cache.of(_job(1)), cache.of(_job(2)), cache.of(_job(2, uid="u2"))] == [1, 1, 2, 3]
    assert calls == [("u1", 1), ("u1", 2), ("u2", 2)]


def test_a_refused_spec_is_not_parsed_again_and_the_oldest_jobs_go_first() -> None:
    calls: list[str] = []

    def derive(job: dict) -> None:
        calls.append(job["metadata"]["name"])
        return None

    cache = PerGeneration(derive, limit=2)
    for name in ("a", "a", "b", "c", "a"):
        assert cache.of(_job(1, name=name)) is None
    assert calls == ["a", "b", "c", "a"]  # "a" was the oldest when "c" came
