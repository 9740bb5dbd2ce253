//go:build relayd_profile

package main

import (
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile to $RELAYD_CPUPROFILE until relayd
// exits, in a binary built with -tags relayd_profile only:
//
//	go build -tags relayd_profile -o /tmp/relayd-prof ./cmd/relayd
//	RELAYD_CPUPROFILE=/tmp/cpu.out /tmp/relayd-prof ...   # then SIGTERM it
//	go tool pprof -top /tmp/relayd-prof /tmp/cpu.out
//
// The path is the profile's, not a secret; release builds have no hook.
func startProfile() (stop func()) {
	path := os.Getenv("RELAYD_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
