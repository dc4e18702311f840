"""runtime/job_cache.py: the newest GRPOJob version the operator saw or wrote stands in for a GET."""

from __future__ import annotations

from grpo_operator.runtime.job_cache import JobCache


def _job(revision: str, phase: str, uid: str = "u1", name: str = "a") -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": revision,
                         "managedFields": [{"manager": "kopf"}]},
            "spec": {"model": {"path": "m"}}, "status": {"phase": phase}}


def test_an_event_older_than_our_own_write_does_not_replace_it() -> None:
    cache = JobCache()
    cache.remember(_job("120", "Running"))  # our status write's answer
    cache.remember(_job("118", "Pending"))  # the watch event of an earlier version, delivered after it
    assert cache.get("ns", "a")["status"]["phase"] == "Running"
    cache.remember(_job("125", "Succeeded"))
    assert cache.get("ns", "a")["status"]["phase"] == "Succeeded"
    cache.remember(_job("125", "the same version again"))  # its watch event after our write's answer: kept as is
    assert cache.get("ns", "a")["status"]["phase"] == "Succeeded"


def test_a_recreated_job_of_the_same_name_replaces_the_old_one_whatever_its_revision() -> None:
    cache = JobCache()
    cache.remember(_job("900", "Failed", uid="old"))
    cache.remember(_job("5", "Pending", uid="new"))
    assert cache.get("ns", "a")["metadata"]["uid"] == "new"


def test_a_revision_that_is_not_a_number_is_taken_as_the_latest() -> None:
    cache = JobCache()
    cache.remember(_job("120", "Running"))
    cache.remember(_job("opaque", "Pending"))
    assert cache.get("ns", "a")["status"]["phase"] == "Pending"


def test_copies_are_handed_out_without_managed_fields_and_forgotten_jobs_are_unknown() -> None:
    cache = JobCache()
    cache.remember(_job("1", "Running"))
    copy = cache.get("ns", "a")
    assert "managedFields" not in copy["metadata"]
    copy["status"]["phase"] = "changed by a caller"
    assert cache.get("ns", "a")["status"]["phase"] == "Running"
    cache.forget("ns", "a")
    assert cache.get("ns", "a") is None and len(cache) == 0
