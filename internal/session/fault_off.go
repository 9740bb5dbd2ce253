//go:build !relayd_faults

package session

// debugInfo is a test seam: only the relayd_faults build reports relayd's
// own resources in ready.
func debugInfo() map[string]int { return nil }
