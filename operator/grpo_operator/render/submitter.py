"""KubeRay's submitter pod (``RayJob.spec.submitterPodTemplate``), rendered by us rather than defaulted.

In KubeRay's K8sJobMode the submitter is a Kubernetes Job named like the RayJob whose pod runs
``ray job submit ... -- <entrypoint>`` against the head's dashboard and then ``ray job logs --follow``:
its log is the driver's output. KubeRay v1.5 builds a default pod when the template is absent
(``common.GetSubmitterTemplate``): the head's image, no imagePullSecrets, the namespace's default
ServiceAccount, no placement, labels or securityContext. With a private registry that pod never
pulls (ImagePullBackOff -> SubmissionFailed -> a retry burned), and a namespace enforcing the
"restricted" Pod Security Standard refuses it.

Why not KubeRay's SidecarMode (read in KubeRay v1.5.0's ``rayjob_controller.go``): it appends
``GetDefaultSubmitterContainer`` to the head pod with no securityContext and no way to give it one
(``ValidateRayJobSpec`` refuses ``submitterPodTemplate`` and ``submitterConfig`` in SidecarMode), so
the head pod itself would be refused under "restricted"; its fixed resources (requests below limits)
would also turn the Guaranteed head Burstable, and it forces ``restartPolicy: Never`` on the head.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.common import apply_pod_placement, pod_metadata
from grpo_operator.render.security import restrict

SUBMISSION_MODE = "K8sJobMode"
# KubeRay's name for the container (utils.SubmitterContainerName); `kubectl logs -c` and status.logs use it.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_COMPONENT = "submitter"
# KubeRay's own defaults for its submitter (common/job.go): `ray job submit` and `ray job logs` only
# talk to the dashboard, so a small, burstable pod is enough.
SUBMITTER_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}


def render_submitter_template(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    """The submitter's pod template: our image, pull secrets, service account, the head's placement,
    priority and labels, small resources, restricted securityContext.

    No command: KubeRay writes the ``ray job submit`` script into a container that has none. The
    trainer image is the one whose ``ray`` CLI matches the cluster's Ray, and the head's placement
    puts the submitter where that image is already pulled.
    """
    container: dict[str, Any] = {
        "name": SUBMITTER_CONTAINER,
        "image": plan.image,
        "resources": {kind: dict(amounts) for kind, amounts in SUBMITTER_RESOURCES.items()},
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": plan.service_account,
        # It talks to the Ray dashboard, never to the Kubernetes API.
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    apply_pod_placement(pod_spec, spec, plan.head)
    restrict(pod_spec)
    return {"metadata": pod_metadata(spec, plan, SUBMITTER_COMPONENT), "spec": pod_spec}
