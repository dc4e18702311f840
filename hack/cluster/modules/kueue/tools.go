//go:build tools

// Package tools pins the commands the local control plane builds from this module.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
