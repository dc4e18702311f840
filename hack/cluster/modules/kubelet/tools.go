//go:build tools

// Package tools pins the kubelet of the local cluster's real node, at the control plane's version.
// A module of its own so that adding the node does not change the control plane's build cache key.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
