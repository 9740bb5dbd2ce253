//go:build relayd_faults

package session

import "runtime"

// debugInfo reports relayd's goroutines in ready, for the chaos test.
func debugInfo() map[string]int {
	return map[string]int{"goroutines": runtime.NumGoroutine()}
}
