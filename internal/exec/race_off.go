//go:build !race

package exec

import "os"

// endShim ends a shim: os.Exit (race_on.go: how a race build's shim ends).
func endShim(code int) { os.Exit(code) }
