//go:build tools

// Package tools pins CoreDNS for the real node's cluster DNS (kubernetes plugin; nothing forwarded).
package tools

import (
	_ "github.com/coredns/coredns"
)
