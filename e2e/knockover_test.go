package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
			_ = c.c.SetWriteDeadline(time.Now().Add(90 * time.Second))
			_, _ = c.c.Write(line)
		}()
	}
	wg.Wait()
	for i, c := range clients {
		if cat := category(t, c.read(90*time.Second)); cat != "unauthenticated" {
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

// shrugSignals are the signals of rule 6.8: every one that can be caught
// but SIGTERM and SIGINT, real-time signals included, and SIGPROF, SIGURG
// and signals 32 to 34, which Go's runtime keeps for itself.
func shrugSignals() []syscall.Signal {
	var out []syscall.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM, syscall.SIGINT:
			continue
		}
		out = append(out, s)
	}
	return out
}

// running fails the test unless relayd is alive and not stopped.
func (d *daemon) running(t *testing.T, after string) {
	t.Helper()
	time.Sleep(20 * time.Millisecond) // a stop or a death takes effect at once
	_, state, ok := statOf(d.cmd.Process.Pid)
	if !ok || state == 'Z' || state == 'X' || state == 'T' || state == 't' {
		t.Fatalf("after %s relayd is in state %q (alive: %v); want running", after, state, ok)
	}
}

// answers fails the test unless c gets a ready reply within 5 s.
func answers(t *testing.T, c *client, after string) {
	t.Helper()
	c.send(msg{"kind": "ready"})
	if r := c.read(5 * time.Second); r == nil || r["kind"] != "ready" {
		t.Fatalf("after %s relayd answered ready with %v", after, r)
	}
}

// deadlineHolds fails the test unless an execute's timeoutMs is still
// enforced: the subject sleeps 30 s and is settled after 300 ms.
func deadlineHolds(t *testing.T, c *client) {
	t.Helper()
	began := time.Now()
	r := c.sh(`exec sleep 30`, msg{"timeoutMs": 300})
	wantExit(t, r, "framework_timeout", 124)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("a 300 ms deadline took %s", took)
	}
}

// Rule 6.8: every catchable signal but SIGTERM and SIGINT, sent to relayd
// (kill-sent SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP and SIGSYS, the
// stops SIGTSTP, SIGTTIN and SIGTTOU, every real-time signal, ...), is
// logged and changes nothing: relayd neither dies nor stops, answers, and
// enforces deadlines. A storm of signals is logged at a bounded rate.
func TestSignalsShruggedOff(t *testing.T) {
	d := startRelayd(t, opts{})
	c := d.connect()
	for _, s := range shrugSignals() {
		d.signal(s)
		d.running(t, "signal "+strconv.Itoa(int(s)))
		answers(t, c, "signal "+strconv.Itoa(int(s)))
	}
	deadlineHolds(t, c)

	// A storm: 3,000 each of three signals, one of them caught by relayd's
	// own handler (34, SIGRTMIN to the C library), one Go's runtime would
	// die of, one it would stop at.
	storm := []syscall.Signal{syscall.SIGABRT, syscall.Signal(34), syscall.SIGTSTP}
	before := strings.Count(d.logs.String(), "\n")
	for i := 0; i < 3000; i++ {
		for _, s := range storm {
			d.signal(s)
		}
	}
	d.running(t, "a storm of signals")
	answers(t, c, "a storm of signals")
	time.Sleep(1200 * time.Millisecond) // relayd reads its own handler's counts each second
	if lines := strings.Count(d.logs.String(), "\n") - before; lines > 2*len(storm) {
		t.Fatalf("a storm of %d signals wrote %d log lines; want at most %d", 3000*len(storm), lines, 2*len(storm))
	}
	for _, want := range []string{`"signal":"SIGABRT"`, `"signal":"SIGRTMIN+0"`, `"signal":"SIGTSTP"`, `"signal":"SIGSEGV"`, `"signal":"SIGRTMIN+30"`} {
		if !strings.Contains(d.logs.String(), want) {
			t.Errorf("relayd's log has no line with %s", want)
		}
	}
	d.stopClean()
}

// The real attack of issue 10, finding 5: a subject running as relayd's
// user signals its parent, relayd, with every catchable signal but SIGTERM
// and SIGINT (abort, kill-sent faults, stops, real-time signals). relayd
// neither dies nor stops, and the next execute's deadline holds.
func TestSubjectSignalsRelayd(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.connect()
		var nums []string
		for _, s := range shrugSignals() {
			nums = append(nums, strconv.Itoa(int(s)))
		}
		r := c.sh(`for s in `+strings.Join(nums, " ")+`; do kill -$s $PPID || echo "kill -$s failed"; done; echo still-here`, nil)
		if r["stdout"] != "still-here\n" {
			t.Fatalf("the subject printed %q; want still-here", r["stdout"])
		}
		d.running(t, "a subject's signals")
		answers(t, c, "a subject's signals")
		deadlineHolds(t, c)
		d.stopClean()
	})
}

// Subjects start with default dispositions and an empty signal mask (rule
// 6.8), even though relayd catches nearly every signal, and even when
// relayd itself was started with every signal it could be given ignored.
func TestSubjectsStartWithDefaultSignals(t *testing.T) {
	for _, inherited := range []bool{false, true} {
		name := "plain"
		if inherited {
			name = "relayd started with every signal ignored"
		}
		t.Run(name, func(t *testing.T) {
			d := prepare(t, opts{})
			if inherited {
				var nums []string
				for s := 1; s <= 64; s++ {
					if s != 9 && s != 19 {
						nums = append(nums, strconv.Itoa(s))
					}
				}
				script := `trap '' ` + strings.Join(nums, " ") + ` 2>/dev/null; exec "$0" "$@"`
				d.cmd.Args = append([]string{"sh", "-c", script}, d.cmd.Args...)
				d.cmd.Path = "/bin/sh"
			}
			d.start()
			c := d.connect()
			r := c.request(msg{"kind": "execute", "command": "/bin/cat", "args": []string{"/proc/self/status"}})
			wantExit(t, r, "exited", 0)
			fields := map[string]string{}
			for _, line := range strings.Split(r["stdout"].(string), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					fields[k] = strings.TrimSpace(v)
				}
			}
			for _, f := range []string{"SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"} {
				if fields[f] != "0000000000000000" {
					t.Errorf("the subject's %s is %q; want none", f, fields[f])
				}
			}
			d.stopClean()
		})
	}
}
