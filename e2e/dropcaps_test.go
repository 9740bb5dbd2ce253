package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Capabilities are a thread's, and a child takes the forking thread's. The
// shim's loop runs on whichever thread Go's poller wakes, so with
// --drop-capabilities it must fork every subject from the thread that
// dropped them. The relayd_faults build moves the loop to another thread
// before each start (RELAYD_FAULT_SHIM_HOP); still, no subject holds
// CAP_SYS_PTRACE, in its effective set or its bounding set.
func TestDropCapsEverySubject(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the subjects run as relayd's user, root, with CAP_SYS_PTRACE dropped")
	}
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, bin: faultBin, env: []string{"RELAYD_FAULT_SHIM_HOP=1"},
			args: []string{"--drop-capabilities", "SYS_PTRACE"}})
		c := d.connect()
		const sysPtrace = 19
		for i := 0; i < 12; i++ {
			r := c.sh(`while read k v; do case $k in CapEff:|CapBnd:) echo "$k $v";; esac; done < /proc/self/status`, nil)
			wantExit(t, r, "exited", 0)
			out, _ := r["stdout"].(string)
			lines := strings.Fields(out)
			if len(lines) != 4 {
				t.Fatalf("execute %d: stdout %q; want CapEff and CapBnd", i, out)
			}
			for j := 0; j < 4; j += 2 {
				v, err := strconv.ParseUint(lines[j+1], 16, 64)
				if err != nil {
					t.Fatalf("execute %d: %s %q: %v", i, lines[j], lines[j+1], err)
				}
				if v>>sysPtrace&1 != 0 {
					t.Fatalf("execute %d: %s %s holds CAP_SYS_PTRACE, dropped with --drop-capabilities", i, lines[j], lines[j+1])
				}
			}
		}
	})
}
