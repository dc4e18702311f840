"""The GRPOJob CustomResourceDefinition, generated from the pydantic models in ``api.py``.

Pydantic writes JSON Schema (``$ref``/``$defs``, ``anyOf`` with ``null`` for optionals, titles);
the apiserver wants a *structural* OpenAPI v3 schema: every node typed, no references, no
nullable unions, and ``x-kubernetes-*`` extensions in place. This module does that translation
and nothing else, so the models stay the single source of truth.

``python -m grpo_operator.crd > crds/grpojob.yaml`` writes the committed file; a unit test fails
when that file drifts from ``build_crd()``.

The CRD carries the operator's version (``VERSION_LABEL``): Helm installs a chart's CRDs but never upgrades
them, so an upgraded operator can meet an older schema, and crd_check.py names the two versions.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from grpo_operator import GROUP, KIND, PLURAL, VERSION, __version__
from grpo_operator.api import RUNTIME_KIND, RUNTIME_PLURAL, GRPOJob, GRPORuntime

VALIDATIONS = "x-kubernetes-validations"
CRD_NAME = f"{PLURAL}.{GROUP}"
# The operator version whose models the schema was generated from (grpo_operator.__version__, the chart's appVersion).
VERSION_LABEL = "app.kubernetes.io/version"
# JSON Schema keywords the apiserver's structural schema has no use for (or refuses).
_DROPPED = {"title", "$defs", "propertyNames", "discriminator", "examples"}


class _DefaultsFromFactories(GenerateJsonSchema):
    """Emit defaults that come from ``default_factory`` too, in the shape the apiserver applies.

    A nested model default is written in full (every defaulted field, recursively): the
    apiserver checks a default against the CEL rules as written, without filling nested
    defaults first, so ``default: {}`` would fail rules such as ``self.mode != ...``. Empty
    list/map defaults are left out: absent and empty mean the same to the operator.
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        if "default_factory" in schema and not schema.get("default_factory_takes_data"):
            value = schema["default_factory"]()  # type: ignore[call-arg]
        else:
            value = schema.get("default", NoDefault)
        if value is None or value is NoDefault:
            return NoDefault
        if isinstance(value, BaseModel):
            value = _prune_empty(value.model_dump(by_alias=True, exclude_none=True, mode="json"))
            return value if value is not None else {}
        return _prune_empty(value) if not isinstance(value, list | dict) or value else NoDefault


def _prune_empty(value: Any) -> Any:
    """Drop empty lists and maps (recursively) from a default value."""
    if isinstance(value, dict):
        pruned = {k: _prune_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [])}
    return value


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Overlay a referencing node's siblings (description, default, rules) on the referenced schema."""
    merged = {**base, **{k: v for k, v in extra.items() if k != VALIDATIONS}}
    rules = [*base.get(VALIDATIONS, []), *extra.get(VALIDATIONS, [])]
    if rules:
        merged[VALIDATIONS] = rules
    return merged


def _is_int_or_string(branches: list[dict[str, Any]]) -> bool:
    return sorted(b.get("type", "") for b in branches) == ["integer", "string"]


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Translate one pydantic JSON Schema node into a structural OpenAPI v3 node."""
    node = {k: v for k, v in node.items() if k not in _DROPPED}
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        return _structural(_merge(target, node), defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        (inner,) = node.pop("allOf")
        return _structural(_merge(inner, node), defs)
    if "anyOf" in node:
        # Optional[X] is "X | null": in Kubernetes an absent field is the null, so drop the branch.
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) == 1:
            return _structural(_merge(branches[0], node), defs)
        if _is_int_or_string(branches):
            # The one union structural schemas allow (resource quantities): the string branch's
            # constraints move to the outer node, where OpenAPI applies them to strings only.
            string = next(b for b in branches if b["type"] == "string")
            out = {**node, **{k: v for k, v in string.items() if k != "type"}}
            out["x-kubernetes-int-or-string"] = True
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            return out
        raise ValueError(f"cannot express union {branches!r} in a structural schema")

    if node.get("type") == "object" or "properties" in node:
        node["type"] = "object"
        if "properties" in node:
            node["properties"] = {k: _structural(v, defs) for k, v in node["properties"].items()}
            node.pop("additionalProperties", None)  # pruning already refuses unknown fields
        elif isinstance(node.get("additionalProperties"), dict):
            node["additionalProperties"] = _structural(node["additionalProperties"], defs)
            if node["additionalProperties"] == {}:
                # map[string]any: values are kept as written
                node.pop("additionalProperties")
                node["x-kubernetes-preserve-unknown-fields"] = True
        elif node.get("additionalProperties") in (True, None):
            node.pop("additionalProperties", None)
            node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "array" and "items" in node:
        node["items"] = _structural(node["items"], defs)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # JSON Schema 2020-12 writes the bound as a number; OpenAPI v3.0 as a flag beside it.
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[limit] = node.pop(bound)
            node[bound] = True
    return _ordered(node)


_FIRST = ("type", "description", "default")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """type, description and default first: the committed YAML reads like `kubectl explain`."""
    head = {k: node[k] for k in _FIRST if k in node}
    return {**head, **{k: v for k, v in sorted(node.items()) if k not in head}}


def _without_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_without_defaults(v) for v in node]
    return node


def _object_schema(model: type[BaseModel], description: str) -> dict[str, Any]:
    """The openAPIV3Schema of a kind whose pydantic model is `model` (apiVersion, kind, metadata, spec, status)."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_DefaultsFromFactories)
    root = _structural(raw, raw.get("$defs", {}))
    props = root["properties"]
    # The apiserver owns metadata's schema; a CRD may only say it is an object.
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"]["description"]}
    props["kind"] = {"type": "string", "description": props["kind"]["description"]}
    props["spec"].pop("default", None)
    if "status" in props:
        # Status is written by the operator and the trainer exactly as they mean it; apiserver
        # defaults there would only add fields nobody wrote.
        props["status"] = _without_defaults(props["status"])
    root["required"] = ["spec"]
    root["description"] = description
    return _ordered(root)


def _spec_schema() -> dict[str, Any]:
    return _object_schema(
        GRPOJob,
        "GRPOJob runs GRPO post-training of a language model with verl on a KubeRay RayJob, pinning actor, "
        "rollout and reward workers to their node pools and keeping checkpoints on a PVC.",
    )


def _crd(kind: str, plural: str, scope: str, short_names: list[str], version: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "grpo-operator",
                "app.kubernetes.io/part-of": "grpo-operator",
                VERSION_LABEL: __version__,
            },
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["ml"],
            },
            "scope": scope,
            "versions": [{"name": VERSION, "served": True, "storage": True, **version}],
        },
    }


def build_crd() -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition for GRPOJob."""
    return _crd(KIND, PLURAL, "Namespaced", ["grpo"], {
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
            {"name": "Reward", "type": "number", "jsonPath": ".status.progress.rewardMean"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": _spec_schema()},
    })


def build_runtime_crd() -> dict[str, Any]:
    """The CustomResourceDefinition for GRPORuntime (cluster-scoped, no status)."""
    schema = _object_schema(
        GRPORuntime,
        "GRPORuntime holds cluster defaults for the GRPOJobs that name it (or for every job, when it is the "
        "default): image, pull secrets, service account, priority, queue, storage class, per-role pod overrides "
        "and multi-node networking. A job's own fields win.",
    )
    return _crd(RUNTIME_KIND, RUNTIME_PLURAL, "Cluster", ["grport"], {
        "additionalPrinterColumns": [
            {"name": "Default", "type": "boolean", "jsonPath": ".spec.default"},
            {"name": "Image", "type": "string", "jsonPath": ".spec.image"},
            {"name": "Queue", "type": "string", "jsonPath": ".spec.queueName"},
            {"name": "Network", "type": "string", "jsonPath": ".spec.network.mode"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": schema},
    })


class _NoAliasDumper(yaml.SafeDumper):
    """Write shared sub-schemas out in full: anchors and aliases confuse readers of a CRD."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml(which: str = PLURAL) -> str:
    """The committed crds/grpojob.yaml (or, for `grporuntimes`, crds/grporuntime.yaml) text: header + YAML."""
    if which == RUNTIME_PLURAL:
        header = ("# Generated by `python -m grpo_operator.crd grporuntimes` from operator/grpo_operator/api/. "
                  "Do not edit.\n")
        return header + yaml.dump(build_runtime_crd(), Dumper=_NoAliasDumper, sort_keys=False, width=120)
    header = "# Generated by `python -m grpo_operator.crd` from operator/grpo_operator/api.py. Do not edit.\n"
    return header + yaml.dump(build_crd(), Dumper=_NoAliasDumper, sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render_yaml(*sys.argv[1:2]))
