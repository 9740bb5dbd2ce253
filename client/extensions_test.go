package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// The extensions of protocol section 4.5, against the real relayd.

func TestCaptureStderr(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	req := sh("echo out; echo err >&2; exit 3")
	req.CaptureStderr = true
	e, err := c.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if e.ExitCode != 3 || e.Stdout != "out\n" || e.Stderr != "err\n" || e.StderrTruncated {
		t.Fatalf("got exit %d, stdout %q, stderr %q (truncated %v); want 3, out, err", e.ExitCode, e.Stdout, e.Stderr, e.StderrTruncated)
	}
	// Without it, stderr is not returned.
	if e, err = c.Execute(context.Background(), sh("echo err >&2")); err != nil || e.Stderr != "" {
		t.Fatalf("without CaptureStderr: stderr %q, %v; want none", e.Stderr, err)
	}
}

// started, then output in the order written, all delivered to the
// callbacks before Execute returns, and the reply unchanged by streaming.
func TestStream(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	var events []string
	var stdout, stderr strings.Builder
	req := sh("echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three")
	req.CaptureStderr = true
	req.Started = func(x string) { events = append(events, "started "+x) }
	req.Output = func(o client.Output) {
		events = append(events, o.Stream)
		if o.Dropped != 0 {
			t.Errorf("dropped %d bytes of %s; want none for a reader that keeps up", o.Dropped, o.Stream)
		}
		if o.Stream == "stdout" {
			stdout.WriteString(o.Data)
		} else {
			stderr.WriteString(o.Data)
		}
	}
	e, err := c.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"started " + e.Execution, "stdout", "stderr", "stdout"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("callbacks %q; want %q", events, want)
	}
	if stdout.String() != "one\nthree\n" || stderr.String() != "two\n" || e.Stdout != "one\nthree\n" || e.Stderr != "two\n" {
		t.Fatalf("streamed %q %q, reply %q %q; want one three, two in both", stdout.String(), stderr.String(), e.Stdout, e.Stderr)
	}
}

// A callback that blocks keeps the connection unread; relayd drops what
// it cannot send, without blocking the subject, and Dropped accounts for
// every byte that was not delivered.
func TestStreamDropped(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	const n = 32 << 20 // more than loopback's socket buffers and relayd's 256 KiB
	done := filepath.Join(r.Dir, "done")
	var delivered, dropped int64
	req := sh(fmt.Sprintf("head -c %d /dev/zero; touch %s", n, done))
	req.DiscardStdout = true
	req.Output = func(o client.Output) {
		if delivered == 0 && dropped == 0 {
			waitFile(t, done) // hold the reader until the subject has written everything
		}
		if o.Stream == "stdout" {
			delivered += int64(len(o.Data))
			dropped += o.Dropped
		}
	}
	e, err := c.Execute(context.Background(), req)
	if err != nil || e.ExitCode != 0 {
		t.Fatalf("got exit %d, %v; want 0", e.ExitCode, err)
	}
	if dropped == 0 || delivered+dropped != n {
		t.Fatalf("delivered %d + dropped %d; want some dropped, %d in all", delivered, dropped, n)
	}
}

func TestOnExit(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	for _, tt := range []struct {
		onExit  client.OnExit
		status  int
		settled bool
	}{
		{client.OnExitSettle, 0, true},
		{client.OnExitSettleOnFailure, 3, true},
		{client.OnExitSettleOnFailure, 0, false},
		{client.OnExitLeave, 0, false},
	} {
		t.Run(fmt.Sprintf("%s exit %d", tt.onExit, tt.status), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			killLater(t, pidFile)
			req := sh(fmt.Sprintf("sleep 30 >/dev/null 2>&1 & echo $! > %s; exit %d", pidFile, tt.status))
			req.OnExit = tt.onExit
			e, err := c.Execute(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if e.Termination != client.Exited || e.ExitCode != tt.status {
				t.Fatalf("got %s %d; want exited %d", e.Termination, e.ExitCode, tt.status)
			}
			b, _ := os.ReadFile(pidFile)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if tt.settled {
				if e.Settlement != client.Settled || len(e.Survivors) != 0 || testharness.Alive(pid) {
					t.Fatalf("got settlement %s, survivors %+v, sleep alive %v; want settled, none, gone",
						e.Settlement, e.Survivors, testharness.Alive(pid))
				}
				return
			}
			if e.Settlement != client.SettlementNone || len(e.Survivors) != 1 || !testharness.Alive(pid) {
				t.Fatalf("got settlement %s, survivors %+v; want none and the sleep left running", e.Settlement, e.Survivors)
			}
		})
	}
}

// A detached execution outlives its connection; another connection
// attaches and gets its real reply, streamed output from then on included.
func TestDetachAttach(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	gate := filepath.Join(r.Dir, "gate")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var name string
	req := sh("echo before; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo after; exit 5")
	req.Detach = 20 * time.Second
	req.Output = func(client.Output) {}
	req.Started = func(x string) { name = x; cancel() } // the controller goes away once it knows the name
	if _, err := c.Execute(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v; want context.Canceled", err)
	}
	if name == "" {
		t.Fatal("no started message before the connection was closed")
	}
	c2 := dial(t, r)
	var streamed strings.Builder
	output := func(o client.Output) {
		if o.Stream == "stdout" {
			streamed.WriteString(o.Data)
		}
	}
	e, err := attach(t, c2, name, output, func() { _ = os.WriteFile(gate, nil, 0o644) })
	if err != nil {
		t.Fatal(err)
	}
	if e.Execution != name || e.Termination != client.Exited || e.ExitCode != 5 || e.Stdout != "before\nafter\n" {
		t.Fatalf("attached reply: %s %s %d %q; want %s exited 5 with all of stdout", e.Execution, e.Termination, e.ExitCode, e.Stdout, name)
	}
	if !strings.HasSuffix(streamed.String(), "after\n") {
		t.Fatalf("streamed after attach: %q; want it to end with after", streamed.String())
	}
	// Taken once: a second attach finds nothing.
	if _, err := c2.Attach(context.Background(), name, nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("second attach: %v; want ErrNotFound", err)
	}
}

// attach attaches to name, retrying while relayd has not yet seen the old
// connection's loss (docs/protocol.md 4.5, "Detach and attach"); then it calls attached
// (nil: nothing) once, in a goroutine, so that a subject gated on it can end.
func attach(t *testing.T, c *client.Conn, name string, output func(client.Output), attached func()) (client.Executed, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		if attached != nil {
			// The reply comes only once the subject ends: let it end a
			// moment after the attach was sent.
			go func() {
				select {
				case <-time.After(300 * time.Millisecond):
					attached()
				case <-ctx.Done():
				}
			}()
		}
		e, err := c.Attach(ctx, name, output)
		cancel()
		if !errors.Is(err, client.ErrNotFound) || time.Now().After(deadline) {
			return e, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An execution that ended while detached keeps its reply for the attach.
func TestAttachAfterEnd(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var name string
	req := sh("sleep 0.3; echo finished")
	req.Detach = 20 * time.Second
	req.Started = func(x string) { name = x; cancel() }
	if _, err := c.Execute(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v; want context.Canceled", err)
	}
	time.Sleep(600 * time.Millisecond) // the subject ends while nobody is attached
	e, err := attach(t, dial(t, r), name, nil, nil)
	if err != nil || e.Stdout != "finished\n" || e.Termination != client.Exited {
		t.Fatalf("attach after the end: %+v, %v; want exited with finished", e, err)
	}
}

func TestAttachNotFound(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	_, err := c.Attach(context.Background(), "x-999", nil)
	var pe *client.Error
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &pe) || pe.Message == "" {
		t.Fatalf("Attach to an unknown execution: %v; want ErrNotFound with a message", err)
	}
	// Not a failure of the connection.
	if e, err := c.Execute(context.Background(), sh("echo ok")); err != nil || e.Stdout != "ok\n" {
		t.Fatalf("after not-found: %q, %v", e.Stdout, err)
	}
}
