package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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

// manyFields is a line of about n bytes with a wrong token and as many
// small fields as fit: about 112,000 in 1 MiB.
func manyFields(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"token":"wrong","kind":"execute","command":"/bin/true"`)
	for i := 0; b.Len() < n-16; i++ {
		fmt.Fprintf(&b, `,"%x":0`, i)
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

// Unauthenticated peers cannot grow relayd's memory beyond their line
// buffers (rule 6.11): 64 connections each send a 1 MiB line of about
// 112,000 small fields with a wrong token, all at once, and each gets its
// unauthenticated error. Building every field of such a line cost 16 MiB,
// and 64 of them took relayd to 700 MiB; what remains is the line reader's
// buffer and one copy of the line per connection.
func TestUnauthenticatedLinesCostTheirBytes(t *testing.T) {
	d := startRelayd(t, opts{})
	pid := d.cmd.Process.Pid
	before := peakRSS(t, pid)
	line := manyFields(1<<20 - 1)
	const conns = 64
	clients := make([]*client, conns)
	for i := range clients {
		clients[i] = d.dial()
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.c.Write(line)
		}()
	}
	wg.Wait()
	for i, c := range clients {
		if cat := category(t, c.read(30*time.Second)); cat != "unauthenticated" {
			t.Fatalf("connection %d: %s; want unauthenticated", i, cat)
		}
	}
	after := peakRSS(t, pid)
	t.Logf("relayd's peak RSS: %d MiB before, %d MiB after %d unauthenticated 1 MiB lines", before>>20, after>>20, conns)
	if grew := after - before; grew > rssLimit(conns*3<<20) {
		t.Fatalf("relayd's peak RSS grew by %d MiB for %d unauthenticated 1 MiB lines; want at most the line buffers, %d MiB",
			grew>>20, conns, rssLimit(conns*3<<20)>>20)
	}
	if r := d.connect().request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("ready after the flood: %v", r)
	}
	d.stopClean()
}
