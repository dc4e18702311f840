"""A real, local Kubernetes control plane for tests and the demo.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK (fake GPU nodes and pod
lifecycles) and the KubeRay operator, all real programs built from the Go modules pinned under
hack/cluster/modules, listening on 127.0.0.1 only. There is no container runtime: KWOK plays the
kubelet, and a stand-in answers KubeRay's Ray-dashboard job-status calls.
"""
