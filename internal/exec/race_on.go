//go:build race

package exec

import "os"

// raceEnv is what of relayd's environment a shim of a binary built with the
// race detector gets besides faultEnv: GORACE, so that the race detector's
// options (a test's atexit_sleep_ms=0, say) are the shim's too. Release
// builds (CGO_ENABLED=0) cannot have the race detector.
func raceEnv() []string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return []string{"GORACE=" + v}
	}
	return nil
}
