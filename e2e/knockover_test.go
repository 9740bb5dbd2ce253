package e2e

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Tests of rule 6.8 and 6.11 (issue 10, "a daemon a subject cannot knock
// over"): signals, a descriptor shortage, unauthenticated lines.

// One descriptor shortage never breaks later executions: an execute that
// meets one answers 111 saying why, and once descriptors are free again the
// next execute runs. relayd's RLIMIT_NOFILE is lowered under the
// descriptors it holds, so that any new one fails with EMFILE, then raised
// back.
func TestDescriptorShortageNotCached(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.connect()
		pid := d.cmd.Process.Pid
		var was unix.Rlimit
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &was); err != nil {
			t.Fatalf("prlimit: %v", err)
		}
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 3, Max: was.Max}, nil); err != nil {
			t.Fatalf("prlimit: %v", err)
		}
		short := c.request(msg{"kind": "execute", "command": "/bin/true"})
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &was, nil); err != nil {
			t.Fatalf("prlimit: %v", err)
		}
		det, _ := short["detail"].(string)
		if short["kind"] != "executed" || num(t, short, "exitCode") != 111 || !strings.Contains(det, "too many open files") {
			t.Fatalf("execute with no descriptor to spare: %v; want 111 with a detail naming the shortage", short)
		}
		for i := 0; i < 3; i++ {
			r := c.request(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo ok"}})
			if r["kind"] != "executed" || r["stdout"] != "ok\n" {
				t.Fatalf("execute %d after the shortage ended: %v; want it to run (%q was first)", i+1, r, det)
			}
			wantExit(t, r, "exited", 0)
		}
		d.stopClean()
	})
}
