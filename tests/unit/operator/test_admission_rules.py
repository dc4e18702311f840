"""What verl 0.9.1 would refuse minutes into a run on 8 GPUs is refused when the GRPOJob is applied.

Each rule twice: the CRD carries it as CEL (the apiserver's verdict at `kubectl apply`, proven against
the real apiserver in tests/e2e/test_operator.py), and plan() judges it again with the numbers, naming
the field (the operator's verdict for a spec that reached it around the CRD).
"""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import SPEC_RULE_MESSAGES
from grpo_operator.crd import build_crd
from grpo_operator.plan import PlanError, actor_gpus
from grpojob_fixtures import plan_of, spec_with


def _spec_rules() -> dict[str, str]:
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return {r["message"]: r["rule"] for r in spec["x-kubernetes-validations"]}


def _refusal(body: dict[str, Any], edit: Any) -> PlanError:
    with pytest.raises(PlanError) as err:
        plan_of(spec_with(body, edit))
    return err.value


@pytest.mark.parametrize(
    ("rule", "fields"),
    [
        ("step", ["self.data.trainBatchSize", "self.algorithm.groupSize", "self.placement.roles.actor.replicas"]),
        ("update", ["self.algorithm.miniBatchSize", "self.algorithm.groupSize", "self.placement.gpusPerNode"]),
        ("micro", ["self.algorithm.microBatchSizePerGPU", "self.algorithm.miniBatchSize"]),
        ("temperature", ["self.rollout.temperature", "self.algorithm.groupSize"]),
        ("gpu_memory", ["self.rollout.gpuMemoryUtilization"]),
    ],
)
def test_the_crd_carries_each_rule_on_the_fields_it_judges(rule: str, fields: list[str]) -> None:
    rules = _spec_rules()
    assert SPEC_RULE_MESSAGES[rule] in rules, rule
    for field in fields:
        assert field in rules[SPEC_RULE_MESSAGES[rule]], (rule, field)


def test_step_sequences_not_divisible_by_the_actor_gpus_name_train_batch_size(colocated_body: dict) -> None:
    # verl: "real_train_batch_size (9) must be divisible by minimal possible batch size (8)"
    err = _refusal(colocated_body, lambda s: s.update(data={**s["data"], "trainBatchSize": 9},
                                                      algorithm={"groupSize": 3}))
    assert err.field == "data.trainBatchSize"
    assert "9 x groupSize 3 = 27 sequences do not split over 8 actor GPUs" in err.message
    assert SPEC_RULE_MESSAGES["step"] in err.message


def test_actor_gpus_count_every_replica(colocated_body: dict) -> None:
    spec = spec_with(colocated_body, lambda s: s["placement"]["roles"]["actor"].update(gpus=4, replicas=3))
    assert actor_gpus(spec) == 12
    err = _refusal(colocated_body, lambda s: s["placement"]["roles"]["actor"].update(gpus=4, replicas=3))
    assert err.field == "data.trainBatchSize" and "over 12 actor GPUs" in err.message


def test_update_sequences_not_divisible_by_the_actor_gpus_name_mini_batch_size(colocated_body: dict) -> None:
    # A step of 10 prompts x 8 = 80 sequences splits over 16 GPUs; an update of 5 x 8 = 40 does not.
    def edit(s: dict) -> None:
        s["placement"].update(gpusPerNode=8)
        s["placement"]["roles"]["actor"].update(gpus=8, replicas=2)
        s["algorithm"] = {"miniBatchSize": 5, "microBatchSizePerGPU": 1}
        s["data"]["trainBatchSize"] = 10

    err = _refusal(colocated_body, edit)
    assert err.field == "algorithm.miniBatchSize"
    assert "5 x groupSize 8 = 40 sequences per update do not split over 16 actor GPUs" in err.message


def test_micro_batch_not_dividing_each_gpus_share_names_micro_batch_size(colocated_body: dict) -> None:
    # 32 prompts x 8 / 8 GPUs = 32 sequences per GPU per update; 3 does not divide 32.
    err = _refusal(colocated_body, lambda s: s.update(data={**s["data"], "trainBatchSize": 32},
                                                      algorithm={"microBatchSizePerGPU": 3}))
    assert err.field == "algorithm.microBatchSizePerGPU"
    assert "3 does not divide the 32 sequences each actor GPU gets per update" in err.message


def test_divisible_batches_plan(colocated_body: dict) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(data={**s["data"], "trainBatchSize": 32},
                                                        algorithm={"microBatchSizePerGPU": 8, "miniBatchSize": 16}))
    assert plan_of(spec).actor.gpus == 8


def test_temperature_zero_with_groups_names_temperature(colocated_body: dict) -> None:
    err = _refusal(colocated_body, lambda s: s.update(rollout={"temperature": 0}))
    assert err.field == "rollout.temperature"
    assert "GRPO's advantage is zero" in err.message


def test_gpu_memory_utilization_of_one_names_the_field(colocated_body: dict) -> None:
    err = _refusal(colocated_body, lambda s: s.update(rollout={"gpuMemoryUtilization": 1.0}))
    assert err.field == "rollout.gpuMemoryUtilization"
    assert "1.0 in colocated mode" in err.message and "below 1.0" in err.message


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("actor_rollout_ref.rollout.n", "algorithm.groupSize"),
        ("data.train_batch_size", "data.trainBatchSize"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "algorithm.microBatchSizePerGPU"),
        ("actor_rollout_ref.rollout.temperature", "rollout.temperature"),
    ],
)
def test_spec_verl_cannot_set_what_a_judged_field_sets(colocated_body: dict, key: str, field: str) -> None:
    err = _refusal(colocated_body, lambda s: s.update(verl={key: 1}))
    assert err.field == f"verl.{key}"
    assert f"set spec.{field} instead" in err.message


@pytest.mark.parametrize(("edit", "field"), [
    (lambda s: s.update(checkpoints={"volume": {"size": "0"}}), "checkpoints.volume.size"),
    (lambda s: s.update(preflight={"resources": {"memory": "0Gi"}}), "preflight.resources.memory"),
    (lambda s: s["placement"].update(gpuMemory=0), "placement.gpuMemory"),
])
def test_zero_quantities_are_refused_before_a_child_is_refused_by_the_apiserver(
        colocated_body: dict, edit: Any, field: str) -> None:
    err = _refusal(colocated_body, edit)
    assert err.field == field and "is not a positive quantity" in err.message
