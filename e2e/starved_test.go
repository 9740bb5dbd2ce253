package e2e

import (
	"testing"
	"time"
)

// A shim starved at a start (runnable, not stopped: a machine starting
// thousands of processes at once) is waited for, up to 10 s, rather than
// taken for lost after 2 s: the execution runs, it does not fail with 111.
// The relayd_faults build delays each shim's start by 3 s.
func TestShimStartStarved(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, bin: faultBin, env: []string{"RELAYD_FAULT_SHIM_START_DELAY=3s"}})
		c := d.connect()
		began := time.Now()
		r := c.sh("echo ran", nil)
		if r["stdout"] != "ran\n" || num(t, r, "exitCode") != 0 {
			t.Fatalf("an execution whose shim was starved 3 s: %v; want it to run", r)
		}
		if took := time.Since(began); took < 3*time.Second {
			t.Fatalf("the execution took %s; the fault did not delay the shim", took)
		}
	})
}
