//go:build race

package exec

import "syscall"

// endShim ends a shim of a binary built with the race detector without
// the detector's own exit: a second's sleep (atexit_sleep_ms), so that
// other threads may still run into a race, then exit status 66 if one
// was found. A shim's output is /dev/null and relayd reads no shim's exit
// status, so neither is seen by anyone; the sleep only held up each stop
// of relayd, which waits for its idle shims to exit (Shims.Close). A
// shim gets no environment (faultEnv), so GORACE cannot turn it off.
// Release builds (CGO_ENABLED=0) cannot have the race detector.
func endShim(code int) { syscall.Exit(code) }
