"""KWOK configuration: the lifecycle stages it plays and the fake 8-GPU nodes it manages.

The standalone kwok binary ships no stages, so without these nothing would ever become Ready.
Everything here is pure: it returns manifests, the caller writes or applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"

_NOW = "{{ $now := Now }}"

_NODE_CONDITIONS = """
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ or $.metadata.creationTimestamp $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

# Node becomes Ready with its addresses on loopback, so nothing ever dials a routable node address.
_NODE_INITIALIZE = _NOW + _NODE_CONDITIONS + """
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ .metadata.name | Quote }}
  type: Hostname
allocatable: {{ .status.allocatable | toJson }}
capacity: {{ .status.capacity | toJson }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: kwok
  kernelVersion: kwok
  kubeletVersion: kwok
  kubeProxyVersion: kwok
  operatingSystem: linux
  osImage: kwok fake GPU node
phase: Running
"""

_POD_RUNNING = _NOW + """
{{ $root := . }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

# A test makes a Job's pod fail by giving it this annotation, with the message as its value. KubeRay's
# submitter pod carries the GRPOJob's podMetadata too, but is never failed by it: the annotation is
# meant for the converter, and a failed submitter would end the RayJob before there is one.
FAIL_POD_ANNOTATION = "devcluster.grpo.dev/fail"
# A Job pod with this annotation never finishes (the preflight's still does): KubeRay's submitter follows its
# Ray job until it ends, and a GRPO run lasts hours, so a RayJob of such a job stays Running. The operator
# benchmark's jobs carry it (in spec.podMetadata): without it, KWOK ended every submitter at once and an
# overloaded KubeRay, polling the dashboard late, failed and retried the RayJob after its 30 s grace.
KEEP_RUNNING_ANNOTATION = "devcluster.grpo.dev/keep-running"
_COMPONENT = '.metadata.labels["app.kubernetes.io/component"]'
# A test makes a job's Ray head crash at start, as a head whose image or command is broken does: the kubelet's
# CrashLoopBackOff waiting state and its BackOff Event (the value of the annotation names the role that crashes).
CRASH_ANNOTATION = "devcluster.grpo.dev/crash"
# CEL: the pod is not the one the annotation makes crash (that one never becomes Ready: it goes from Pending straight
# into the crash loop, as a head whose container exits at once does, so KubeRay never sees a ready cluster).
_NOT_CRASHING = (
    f"!has(self.metadata.annotations) || !('{CRASH_ANNOTATION}' in self.metadata.annotations) || "
    "!has(self.metadata.labels) || !('grpo.dev/role' in self.metadata.labels) || "
    f"self.metadata.labels['grpo.dev/role'] != self.metadata.annotations['{CRASH_ANNOTATION}']"
)
_CRASH_LOOP = _NOW + """
conditions:
- {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 3
  started: false
  lastState:
    terminated: {exitCode: 1, reason: Error, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
  state:
    waiting:
      reason: CrashLoopBackOff
      message: {{ printf "back-off 40s restarting failed container=%s" .name | Quote }}
{{ end }}
phase: Running
"""
SUBMITTER_COMPONENT = "submitter"
_FAIL_MESSAGE = '{{ index $.metadata.annotations "' + FAIL_POD_ANNOTATION + '" | Quote }}'

# The operator's preflight pods (app.kubernetes.io/component=preflight) run `grpo-train --preflight`,
# which nothing runs here: a KWOK pod ends as the program would, with a verdict as its termination
# message. By default the verdict says plainly that it is simulated and passes (the GRPOJob's Preflight
# condition then reads "1 checks passed" and status.preflight shows the simulated check). A test puts
# the verdict the real check produced for the job's files (tests/e2e/test_preflight.py runs
# grpo_trainer's preflight for that) into this environment variable through the GRPOJob's spec.env,
# which every trainer container gets; the preflight pod then ends with it as grpo-train would: failed, or
# succeeded when the verdict passed (a test of what the operator does with a passing verdict, such as the
# checkpoint claim's size it chose).
PREFLIGHT_COMPONENT = ("app.kubernetes.io/component", "preflight")
PREFLIGHT_VERDICT_ENV = "DEVCLUSTER_PREFLIGHT_VERDICT"
SIMULATED_VERDICT = (
    '{"passed":true,"checks":[{"name":"simulated","field":"","ok":true,'
    '"message":"KWOK simulated the preflight pod: no check ran","value":"","fix":""}]}'
)
# In the per-container range of the status template: that container's value of the variable.
_VERDICT_MESSAGE = (
    '{{ $verdict := "" }}{{ range .env }}{{ if eq .name "' + PREFLIGHT_VERDICT_ENV
    + '" }}{{ $verdict = .value }}{{ end }}{{ end }}{{ $verdict | Quote }}'
)
_VERDICT_QUERY = (
    '.spec.containers.[] | (.env // []) | .[] | select( .name == "' + PREFLIGHT_VERDICT_ENV + '" ) | .value'
)


def _terminated_containers(exit_code: int, reason: str, message: str | None = None) -> str:
    """containerStatuses of every container of the pod, ended with `exit_code`."""
    message_line = f"\n      message: {message}" if message else ""
    return f"""
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      reason: {reason}{message_line}
      startedAt: {{{{ $now | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
"""


def _completed(message: str | None = None) -> str:
    """The status template of a pod whose containers all exited 0 (a Job's pod done), with `message` as their
    termination message."""
    return _NOW + """
conditions:
- {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
""" + _terminated_containers(0, "Completed", message) + "phase: Succeeded\n"


_POD_SUCCEEDED = _completed()

_POD_FAILED = (_NOW + _terminated_containers(1, "Error", _FAIL_MESSAGE)
               + f"message: {_FAIL_MESSAGE}\nphase: Failed\n")

_PREFLIGHT_PASSED = _completed("'" + SIMULATED_VERDICT + "'")

_PREFLIGHT_FAILED = _NOW + _terminated_containers(1, "Error", _VERDICT_MESSAGE) + "phase: Failed\n"
_PREFLIGHT_PASSED_WITH_VERDICT = _completed(_VERDICT_MESSAGE)
# The verdict in the variable passed (grpo-train writes compact JSON: "passed":true first). A jq query: KWOK's
# CEL cannot resolve a container's env entries.
_VERDICT_PASSED = _VERDICT_QUERY + ' | startswith("{\\"passed\\":true")'


STORAGE_CLASS = "devcluster-local"

# The provisioner KWOK plays: a PV pre-bound to the claim; kube-controller-manager's PV controller
# then completes the binding, exactly as it does for a real dynamic provisioner.
_PV_FOR_CLAIM = """
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pvc-{{ .metadata.uid }}
  annotations:
    pv.kubernetes.io/provisioned-by: devcluster.grpo.dev/kwok
spec:
  accessModes: {{ .spec.accessModes | toJson }}
  capacity: {{ .spec.resources.requests | toJson }}
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {{ .spec.storageClassName | Quote }}
  volumeMode: {{ or .spec.volumeMode "Filesystem" | Quote }}
  claimRef:
    apiVersion: v1
    kind: PersistentVolumeClaim
    name: {{ .metadata.name | Quote }}
    namespace: {{ .metadata.namespace | Quote }}
    uid: {{ .metadata.uid | Quote }}
  hostPath:
    path: /nonexistent/devcluster/pvc-{{ .metadata.uid }}
"""


def storage_class() -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS,
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "devcluster.grpo.dev/kwok",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


def _pvc_provision_stage() -> dict:
    cel = [f"self.spec.storageClassName == '{STORAGE_CLASS}'", "!has(self.metadata.deletionTimestamp)",
           "!has(self.spec.volumeName)"]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pvc-provision"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "PersistentVolumeClaim"},
            "selector": {"matchExpressions": [{"cel": {"expression": e}} for e in cel]},
            "steps": [{"apply": {"template": _PV_FOR_CLAIM}}],
        },
    }


def _stage(name: str, kind: str, expressions: list[dict], next_: dict, delay_ms: int = 0,
           immediate_next: bool = False) -> dict:
    spec: dict = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": next_,
    }
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
    if immediate_next:
        spec["immediateNextStage"] = True
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _exists(key: str, present: bool) -> dict:
    return {"key": key, "operator": "Exists" if present else "DoesNotExist"}


def _in(key: str, *values: str) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}


# How long KWOK holds a pod in each stage (Pending to Running, Running to done). Nothing waits on a pod being
# between stages for a while, so a tenth of a second: every GRPOJob's preflight pod and every Ray pod pass
# through two of them.
POD_STAGE_DELAY_MS = 100


def stages(pod_ready_delay_ms: int = POD_STAGE_DELAY_MS) -> list[dict]:
    """The node and pod lifecycle KWOK simulates: nodes go Ready and heartbeat; pods run; Job pods finish."""
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    not_deleted = _exists(".metadata.deletionTimestamp", False)
    owned_by_job = _in(".metadata.ownerReferences.[].kind", "Job")
    component = f'.metadata.labels["{PREFLIGHT_COMPONENT[0]}"]'
    preflight = _in(component, PREFLIGHT_COMPONENT[1])
    not_preflight = {"key": component, "operator": "NotIn", "values": [PREFLIGHT_COMPONENT[1]]}
    verdict = _VERDICT_QUERY
    runs_to_its_end = _exists(f'.metadata.annotations["{KEEP_RUNNING_ANNOTATION}"]', False)
    return [
        _stage("node-initialize", "Node", [{"key": ready, "operator": "NotIn", "values": ["True"]}],
               {"statusTemplate": _NODE_INITIALIZE}),
        _stage("node-heartbeat", "Node", [_in(".status.phase", "Running"), _in(ready, "True")],
               {"statusTemplate": _NOW + _NODE_CONDITIONS}, delay_ms=20000, immediate_next=True),
        _stage("pod-ready", "Pod",
               [not_deleted, _exists(".spec.nodeName", True), _in(".status.phase", "Pending"),
                {"cel": {"expression": _NOT_CRASHING}}],
               {"statusTemplate": _POD_RUNNING}, delay_ms=pod_ready_delay_ms),
        _stage("pod-fail", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job, not_preflight,
                _exists(f'.metadata.annotations["{FAIL_POD_ANNOTATION}"]', True),
                {"key": _COMPONENT, "operator": "NotIn", "values": [SUBMITTER_COMPONENT]}],
               {"statusTemplate": _POD_FAILED}, delay_ms=pod_ready_delay_ms),
        _stage("pod-complete", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job, not_preflight,
                _exists(f'.metadata.annotations["{FAIL_POD_ANNOTATION}"]', False), runs_to_its_end],
               {"statusTemplate": _POD_SUCCEEDED}, delay_ms=pod_ready_delay_ms),
        _stage("pod-complete-submitter", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job,
                _exists(f'.metadata.annotations["{FAIL_POD_ANNOTATION}"]', True), _in(_COMPONENT, SUBMITTER_COMPONENT),
                runs_to_its_end],
               {"statusTemplate": _POD_SUCCEEDED}, delay_ms=pod_ready_delay_ms),
        _stage("preflight-fail", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job, preflight, _exists(verdict, True),
                {"key": _VERDICT_PASSED, "operator": "NotIn", "values": ["true"]}],
               {"statusTemplate": _PREFLIGHT_FAILED}, delay_ms=pod_ready_delay_ms),
        _stage("preflight-pass-verdict", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job, preflight,
                _in(_VERDICT_PASSED, "true")],
               {"statusTemplate": _PREFLIGHT_PASSED_WITH_VERDICT}, delay_ms=pod_ready_delay_ms),
        _stage("preflight-pass", "Pod",
               [not_deleted, _in(".status.phase", "Running"), owned_by_job, preflight, _exists(verdict, False)],
               {"statusTemplate": _PREFLIGHT_PASSED}, delay_ms=pod_ready_delay_ms),
        _stage("pod-crash-loop", "Pod",
               [not_deleted, _exists(".spec.nodeName", True), _in(".status.phase", "Pending"),
                {"cel": {"expression": f"!({_NOT_CRASHING})"}}],
               {"statusTemplate": _CRASH_LOOP,
                "event": {"type": "Warning", "reason": "BackOff", "message": "Back-off restarting failed container"}},
               delay_ms=pod_ready_delay_ms),
        _stage("pod-delete", "Pod", [_exists(".metadata.deletionTimestamp", True)], {"delete": True}),
        _pvc_provision_stage(),
    ]


@dataclass(frozen=True)
class NodePool:
    """A set of identical fake GPU servers sharing a pool label."""

    name: str
    count: int
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1Ti"


DEFAULT_POOLS: tuple[NodePool, ...] = (NodePool("train", 2), NodePool("rollout", 2))

POOL_LABEL = "grpo.dev/pool"


def fake_node(name: str, labels: dict[str, str], allocatable: dict[str, str], taints: tuple[dict, ...] = ()) -> dict:
    """A Node KWOK manages (and makes Ready); `labels` beside the hostname, OS and architecture every node has."""
    spec: dict = {"taints": [dict(t) for t in taints]} if taints else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       **labels},
        },
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def node_manifest(pool: NodePool, index: int) -> dict:
    """A Node shaped like an 8x A100-80GB server, labelled the way the NVIDIA GPU operator labels it."""
    allocatable = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": "110",
        "nvidia.com/gpu": str(pool.gpus),
        "ephemeral-storage": "7Ti",
    }
    return fake_node(f"gpu-{pool.name}-{index}", {
        "type": "kwok",
        "node.kubernetes.io/instance-type": "a2-ultragpu-8g",
        POOL_LABEL: pool.name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": GPU_PRODUCT,
        "nvidia.com/gpu.count": str(pool.gpus),
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/cuda.driver.major": "580",
    }, allocatable)


def node_manifests(pools: tuple[NodePool, ...] = DEFAULT_POOLS) -> list[dict]:
    return [node_manifest(pool, i) for pool in pools for i in range(pool.count)]


def kwok_config_yaml(pod_ready_delay_ms: int = POD_STAGE_DELAY_MS) -> str:
    return yaml.safe_dump_all(stages(pod_ready_delay_ms), sort_keys=False)
