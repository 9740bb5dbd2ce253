//go:build !linux || (!amd64 && !arm64)

package main

import "syscall"

// catchUncaught has no handler for this architecture: signals that Go's
// runtime cannot deliver (32 to 34) keep their default disposition here.
func catchUncaught() []syscall.Signal { return nil }

func countedSignals(syscall.Signal) uint64 { return 0 }
