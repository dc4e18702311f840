"""plan(): roles into worker groups, the CPU/GPU math, and refusals that name field and fix."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, PlanError, parse_quantity, parse_spec, plan
from grpojob_fixtures import IMAGE, NAMESPACE, example_body, pinned_to_pools, plan_of, spec_with


def test_reference_layout_is_actor4_rollout2_reward2_on_one_node(reference: tuple[GRPOJobSpec, Plan]) -> None:
    _, p = reference
    layout = {g.role: (g.gpus, g.replicas) for g in p.groups}
    assert layout == {"actor": (4, 1), "rollout": (2, 1), "reward": (2, 1)}
    assert p.total_gpus == 8
    assert [g.ray_resource for g in p.groups] == ["grpo.dev/actor", "grpo.dev/rollout", "grpo.dev/reward"]
    # No pool label: GPU workers go where the GPUs are (a node label of ours exists on no cloud).
    assert all(dict(g.pod.node_selector) == {} for g in p.groups)


def test_a_roles_node_selector_pins_it_to_its_pool() -> None:
    p = plan_of(spec_with(example_body("reference-disaggregated"), pinned_to_pools))
    assert dict(p.actor.pod.node_selector) == {"grpo.dev/pool": "train"}
    rollout = p.group("rollout")
    assert rollout is not None and dict(rollout.pod.node_selector) == {"grpo.dev/pool": "rollout"}


def test_gpu_roles_tolerate_the_gpu_taint_and_avoid_old_drivers(reference: tuple[GRPOJobSpec, Plan]) -> None:
    _, p = reference
    for g in p.groups:
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in g.pod.tolerations
        assert [t["matchExpressions"] for t in g.pod.node_terms] == [
            [{"key": "nvidia.com/cuda.driver.major", "operator": "Gt", "values": ["579"]}],
            [{"key": "nvidia.com/cuda.driver.major", "operator": "DoesNotExist"}],
        ]
    assert p.head.tolerations == () and p.head.node_terms == ()  # GPU-less: it follows the actor instead


def test_a_users_own_gpu_toleration_is_not_repeated_and_floor_zero_drops_the_affinity() -> None:
    own = {"key": "nvidia.com/gpu", "operator": "Exists"}
    spec = spec_with(example_body("colocated-length"),
                     lambda s: s["placement"]["roles"]["actor"].update(tolerations=[own]))
    p = plan(spec, name="job", namespace=NAMESPACE, default_image=IMAGE, driver_floor=0)
    assert p.actor.pod.tolerations == (own,)
    assert p.actor.pod.node_terms == ()


def test_colocated_has_one_actor_group_with_every_gpu(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    _, p = colocated
    assert [(g.role, g.gpus) for g in p.groups] == [("actor", 8)]
    assert p.group("rollout") is None and p.group("reward") is None


def test_colocated_actor_defaults_to_a_whole_node(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s["placement"].update(roles={}, gpusPerNode=4))
    assert [(g.role, g.gpus, g.replicas) for g in plan_of(spec).groups] == [("actor", 4, 1)]


def test_colocated_model_reward_gets_its_own_group(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["reward"] = {"type": "model", "model": {"claimName": "rm", "path": "rm-7b"}}
        s["placement"]["roles"] = {"actor": {"gpus": 4}, "reward": {"gpus": 2}}

    p = plan_of(spec_with(colocated_body, edit))
    assert [(g.role, g.gpus) for g in p.groups] == [("actor", 4), ("reward", 2)]
    # A reward model on another claim gets its own mount.
    assert p.reward_model_claim == "rm"
    assert p.reward_model_path == "/reward-models/rm-7b"


def test_reward_model_on_the_policy_claim_shares_the_models_mount(reference: tuple[GRPOJobSpec, Plan]) -> None:
    _, p = reference
    assert p.reward_model_claim is None
    assert p.reward_model_path == "/models/reward-model-7b"
    assert p.model_path == "/models/Qwen2-7B-Instruct"


def test_cpu_defaults_to_three_per_gpu_plus_one_and_memory_scales_with_gpus(
    reference: tuple[GRPOJobSpec, Plan],
) -> None:
    _, p = reference
    assert (p.actor.pod.cpu, p.actor.pod.memory) == ("13", "136Gi")
    rollout = p.group("rollout")
    assert rollout is not None and (rollout.pod.cpu, rollout.pod.memory) == ("7", "72Gi")
    assert (p.head.cpu, p.head.memory) == ("8", "32Gi")


def test_cpu_below_three_per_gpu_is_refused_naming_field_and_fix(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, lambda s: s["placement"]["roles"]["actor"].update(resources={"cpu": "8"}))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "placement.roles.actor.resources.cpu"
    assert "at least 12" in err.value.message and "3 CPUs" in err.value.message
    assert str(err.value).startswith("spec.placement.roles.actor.resources.cpu: ")


def test_user_cpu_and_memory_above_the_minimum_are_kept(reference_body: dict[str, Any]) -> None:
    spec = spec_with(
        reference_body,
        lambda s: s["placement"]["roles"]["actor"].update(resources={"cpu": "12000m", "memory": 300 * 2**30}),
    )
    pod = plan_of(spec).actor.pod
    assert (pod.cpu, pod.memory) == ("12000m", str(300 * 2**30))


@pytest.mark.parametrize("kind", ["length", "function"])
def test_reward_pool_refused_for_rule_reward(reference_body: dict[str, Any], kind: str) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["reward"] = {"type": kind}
        if kind == "function":
            s["reward"]["function"] = {"configMapName": "my-reward", "key": "reward.py"}

    with pytest.raises(PlanError) as err:
        plan_of(spec_with(reference_body, edit))
    assert err.value.field == "placement.roles.reward"
    assert err.value.message == (f"a {kind} reward runs on CPU; remove placement.roles.reward or use reward.type=model")


def test_disaggregated_without_rollout_role_is_refused(reference_body: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match=r"needs placement\.roles\.actor and placement\.roles\.rollout"):
        plan_of(spec_with(reference_body, lambda s: s["placement"]["roles"].pop("rollout")))


def test_colocated_with_rollout_role_is_refused(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s["placement"]["roles"].update(rollout={"gpus": 2}))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "placement.roles.rollout"


def test_rollout_gpus_not_a_multiple_of_tensor_parallel_is_refused(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, lambda s: s["placement"]["roles"]["rollout"].update(gpus=3))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "placement.roles.rollout.gpus"
    assert "tensorParallelSize=2" in err.value.message


def test_role_larger_than_a_node_is_refused(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, lambda s: s["placement"]["roles"]["actor"].update(gpus=16))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "placement.roles.actor.gpus"
    assert "replicas" in err.value.message


def test_colocated_tensor_parallel_must_divide_actor_gpus(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(rollout={"tensorParallelSize": 3}))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "rollout.tensorParallelSize"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"trainer.nnodes": 2}, "verl.trainer.nnodes"),
        ({"trainer": {"default_local_dir": "/tmp"}}, "verl.trainer.default_local_dir"),
        ({"actor_rollout_ref.model.path": "/x"}, "verl.actor_rollout_ref.model.path"),
        ({"grpo.reward.type": "model"}, "verl.grpo.reward.type"),
    ],
)
def test_verl_override_of_an_operator_owned_key_is_refused(
    colocated_body: dict[str, Any], overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(PlanError) as err:
        plan_of(spec_with(colocated_body, lambda s: s.update(verl=overrides)))
    assert err.value.field == field
    assert "remove" in err.value.message


def test_missing_image_is_refused_unless_the_operator_has_a_default(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body)
    with pytest.raises(PlanError) as err:
        plan(spec, name="j", namespace=NAMESPACE)
    assert err.value.field == "image"
    assert plan(spec, name="j", namespace=NAMESPACE, default_image=IMAGE).image == IMAGE
    own = spec_with(colocated_body, lambda s: s.update(image="mine:1"))
    assert plan(own, name="j", namespace=NAMESPACE, default_image=IMAGE).image == "mine:1"


def test_names_and_claims(colocated: tuple[GRPOJobSpec, Plan], colocated_body: dict[str, Any]) -> None:
    _, p = colocated
    n = p.names
    assert (n.rayjob, n.configmap, n.checkpoint_pvc, n.export_job) == (
        "qwen2-7b-length",
        "qwen2-7b-length-verl",
        "qwen2-7b-length-checkpoints",
        "qwen2-7b-length-export",
    )
    assert p.creates_checkpoint_pvc and p.checkpoint_claim == "qwen2-7b-length-checkpoints"
    assert p.creates_service_account and p.service_account == "qwen2-7b-length-trainer"
    existing = plan_of(
        spec_with(
            colocated_body,
            lambda s: s.update(checkpoints={"volume": {"claimName": "ckpt"}}, serviceAccountName="sa"),
        )
    )
    assert (existing.creates_checkpoint_pvc, existing.checkpoint_claim) == (False, "ckpt")
    assert (existing.creates_service_account, existing.service_account) == (False, "sa")


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("16", Decimal(16)), (16, Decimal(16)), ("1Gi", Decimal(2**30)), ("2k", Decimal(2000))],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_parse_spec_turns_schema_violations_into_a_plan_error(colocated_body: dict[str, Any]) -> None:
    raw = dict(colocated_body["spec"])
    assert parse_spec(raw).model.claim_name == "models"
    raw["rollout"] = {"tensorParallelSize": 0}
    with pytest.raises(PlanError) as err:
        parse_spec(raw)
    assert err.value.field == "rollout.tensorParallelSize"
    assert "greater than or equal to 1" in err.value.message


def test_disaggregated_model_reward_needs_its_own_pool(reference_body: dict[str, Any]) -> None:
    with pytest.raises(PlanError) as err:
        plan_of(spec_with(reference_body, lambda s: s["placement"]["roles"].pop("reward")))
    assert err.value.field == "placement.roles.reward"
    assert "separate-async" in err.value.message


def test_disaggregated_batch_must_be_a_multiple_of_the_mini_batch(reference_body: dict[str, Any]) -> None:
    with pytest.raises(PlanError) as err:
        plan_of(spec_with(reference_body, lambda s: s.update(algorithm={"miniBatchSize": 100})))
    assert err.value.field == "algorithm.miniBatchSize"


def test_zero_memory_is_refused(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, lambda s: s["placement"]["roles"]["reward"].update(resources={"memory": "0"}))
    with pytest.raises(PlanError) as err:
        plan_of(spec)
    assert err.value.field == "placement.roles.reward.resources.memory"
