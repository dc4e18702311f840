"""Did every role's worker run on its role's node? Read from Ray's state API (list_actors, list_nodes,
list_placement_groups) after a run, and from GPU process samples taken during it (bench/gpu/gpuwatch.py).

A node's role is the `grpo.dev/<role>` resource it declared (the head declares none). An actor's role
comes from what verl 0.9.1 names it:

    <prefix>WorkerDict_<pg>:<rank> (WorkerDict)     actor   FSDP actor and reference, colocated vLLM workers
    vllm_server_<replica>_<node>                    actor   the rollout's vLLM server (colocated with the actor)
    ...reward_colocate_...  (worker group prefix)   reward  the reward model's placeholder workers, in its pool
    vllm_server_reward_<replica>_<node>             reward  the reward model's vLLM server

Every other actor (TaskRunner, TransferQueue, agent and reward loops) is a CPU actor of no role. Every
placement-group bundle that asks for a role resource must sit on that role's node. The check fails when a
role has no actor at all: "every actor of the reward role is on the reward node" says nothing if there is none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ROLE_PREFIX = "grpo.dev/"
ROLES = ("actor", "reward")

_ACTOR_ROLE_BY_NAME: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"reward_colocate_|(^|_)server_reward_"), "reward"),
    (re.compile(r"^vllm_server_\d+_\d+$"), "actor"),
    (re.compile(r"WorkerDict_\d+:\d+$"), "actor"),
)
_ACTOR_ROLE_BY_CLASS = {"WorkerDict": "actor"}
REWARD_SERVER = re.compile(r"(^|_)server_reward_")


def node_role(node: Mapping[str, Any]) -> str:
    """Pure: head, the role of the node's `grpo.dev/<role>` resource, or `none`."""
    roles = sorted(k[len(ROLE_PREFIX) :] for k in (node.get("resources_total") or {}) if k.startswith(ROLE_PREFIX))
    if len(roles) > 1:
        raise ValueError(f"node {node.get('node_id')} declares several roles: {roles}")
    if roles:
        return roles[0]
    return "head" if node.get("is_head_node") else "none"


def actor_role(actor: Mapping[str, Any]) -> str | None:
    """Pure: the role whose node an actor must run on (None: a CPU actor of no role)."""
    name = actor.get("name") or ""
    for pattern, role in _ACTOR_ROLE_BY_NAME:
        if pattern.search(name):
            return role
    return _ACTOR_ROLE_BY_CLASS.get(actor.get("class_name") or "")


@dataclass(frozen=True)
class Placed:
    name: str
    class_name: str
    role: str  # the role it must run on
    node: str  # the role of the node it ran on
    pid: int | None


@dataclass
class PlacementCheck:
    placed: list[Placed] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    gpu_mib_by_role: dict[str, int] = field(default_factory=dict)
    reward_gpu_mib: int | None = None  # None: no GPU process samples (nvidia-smi unavailable)

    @property
    def passed(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        by_role: dict[str, list[str]] = {}
        for p in self.placed:
            by_role.setdefault(p.role, []).append(f"{p.name or p.class_name} on {p.node}")
        return {
            "passed": self.passed,
            "violations": self.violations,
            "actors_by_role": by_role,
            "gpu_mib_by_role": self.gpu_mib_by_role,
            "reward_model_gpu_mib": self.reward_gpu_mib,
        }


def descendants(root: int, parents: Mapping[int, int]) -> set[int]:
    """Pure: the pids whose parent chain reaches root (root included)."""
    out = {root}
    for pid in parents:
        seen, p = set(), pid
        while p not in out and p in parents and p not in seen:
            seen.add(p)
            p = parents[p]
        if p in out:
            out |= seen | {pid}
    return out


def check(
    nodes: Iterable[Mapping[str, Any]],
    actors: Iterable[Mapping[str, Any]],
    placement_groups: Iterable[Mapping[str, Any]],
    gpu_mib_by_pid: Mapping[int, int] | None = None,
    parents: Mapping[int, int] | None = None,
) -> PlacementCheck:
    """Pure: the placement verdict from the state API's records and the GPU process samples."""
    roles = {n["node_id"]: node_role(n) for n in nodes}
    result = PlacementCheck()
    actors = list(actors)
    for actor in actors:
        role = actor_role(actor)
        if role is None:
            continue
        node = roles.get(actor.get("node_id") or "", "unknown")
        p = Placed(actor.get("name") or "", actor.get("class_name") or "", role, node, actor.get("pid"))
        result.placed.append(p)
        if node != role:
            result.violations.append(f"{p.name or p.class_name} ({role}) ran on the {node} node")
    for role in ROLES:
        if not any(p.role == role for p in result.placed):
            result.violations.append(f"no actor of the {role} role was found: nothing to check for it")
    for pg in placement_groups:
        for bundle in pg.get("bundles") or []:
            wanted = [k[len(ROLE_PREFIX) :] for k in bundle.get("unit_resources") or {} if k.startswith(ROLE_PREFIX)]
            node = roles.get(bundle.get("node_id") or "", "unplaced")
            for role in wanted:
                if node != role:
                    result.violations.append(
                        f"placement group {pg.get('name') or pg.get('placement_group_id')}: a {role} bundle is on "
                        f"the {node} node"
                    )
    if gpu_mib_by_pid is not None and parents is not None:
        _gpu_use(result, gpu_mib_by_pid, parents)
    return result


def _gpu_use(result: PlacementCheck, gpu_mib: Mapping[int, int], parents: Mapping[int, int]) -> None:
    """GPU memory of the processes under each role's actors; the reward model's must be above zero."""
    by_role: dict[str, int] = {}
    reward_server_mib = 0
    for p in result.placed:
        if p.pid is None:
            continue
        mib = sum(gpu_mib.get(pid, 0) for pid in descendants(p.pid, parents))
        by_role[p.role] = by_role.get(p.role, 0) + mib
        if REWARD_SERVER.search(p.name):
            reward_server_mib += mib
    result.gpu_mib_by_role = by_role
    result.reward_gpu_mib = reward_server_mib
    if not reward_server_mib:
        result.violations.append("no GPU memory was held by any process of the reward model's vLLM server")
