//go:build tools

// Package tools pins the container registry the image push test pushes to, on 127.0.0.1.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
