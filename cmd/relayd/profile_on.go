//go:build relayd_profile

package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfile writes profiles until relayd exits, in a binary built with
// -tags relayd_profile only: a CPU profile to $RELAYD_CPUPROFILE, every
// allocation to $RELAYD_ALLOCPROFILE (go tool pprof -sample_index=
// alloc_space; a same-load diff with -diff_base shows what a change
// allocates), and the contention of mutexes and blocking (what serializes executions) to
// $RELAYD_MUTEXPROFILE and $RELAYD_BLOCKPROFILE:
//
//	go build -tags relayd_profile -o /tmp/relayd-prof ./cmd/relayd
//	RELAYD_CPUPROFILE=/tmp/cpu.out /tmp/relayd-prof ...   # then SIGTERM it
//	go tool pprof -top /tmp/relayd-prof /tmp/cpu.out
//
// The paths are the profiles', not secrets; release builds have no hook.
func startProfile() (stop func()) {
	var stops []func()
	if path := os.Getenv("RELAYD_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
			} else {
				f.Close()
			}
		}
	}
	if path := os.Getenv("RELAYD_ALLOCPROFILE"); path != "" {
		runtime.MemProfileRate = 1
		stops = append(stops, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		})
	}
	for _, p := range []struct{ env, name string }{{"RELAYD_MUTEXPROFILE", "mutex"}, {"RELAYD_BLOCKPROFILE", "block"}} {
		path := os.Getenv(p.env)
		if path == "" {
			continue
		}
		if p.name == "mutex" {
			runtime.SetMutexProfileFraction(1)
		} else {
			runtime.SetBlockProfileRate(1)
		}
		name := p.name
		stops = append(stops, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup(name).WriteTo(f, 0)
				f.Close()
			}
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
