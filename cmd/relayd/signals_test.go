package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A subject can send millions of signals: the log gets the first of each
// at once, then one line per window with the count of the rest, and a
// signal quiet for a whole window is logged at once again.
func TestSignalLogBounded(t *testing.T) {
	var buf bytes.Buffer
	l := newSignalLog(zerolog.New(&buf), time.Minute)
	type line struct {
		Signal  string `json:"signal"`
		Count   uint64 `json:"count"`
		Message string `json:"message"`
	}
	lines := func() []line {
		var out []line
		for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if s == "" {
				continue
			}
			var ln line
			if err := json.Unmarshal([]byte(s), &ln); err != nil {
				t.Fatal(err)
			}
			out = append(out, ln)
		}
		buf.Reset()
		return out
	}

	for i := 0; i < 1_000_000; i++ {
		l.received(syscall.SIGUSR1, 1)
		l.received(syscall.Signal(34), 2)
	}
	got := lines()
	if len(got) != 2 || got[0].Signal != "SIGUSR1" || got[0].Count != 1 || got[1].Signal != "SIGRTMIN+0" || got[1].Count != 2 {
		t.Fatalf("2,000,000 signals logged %+v; want one line for the first of each", got)
	}

	l.flush()
	got = lines()
	counts := map[string]uint64{}
	for _, ln := range got {
		counts[ln.Signal] = ln.Count
	}
	if len(got) != 2 || counts["SIGUSR1"] != 999_999 || counts["SIGRTMIN+0"] != 1_999_998 {
		t.Fatalf("the window's end logged %+v; want the count of the rest of each", got)
	}

	l.received(syscall.SIGUSR1, 1) // within the next window: counted
	if got := lines(); len(got) != 0 {
		t.Fatalf("a signal in the window after a busy one logged %+v at once; want it counted", got)
	}
	l.flush() // SIGUSR1: 1 more; SIGRTMIN+0 was quiet and is forgotten
	if got := lines(); len(got) != 1 || got[0].Signal != "SIGUSR1" || got[0].Count != 1 {
		t.Fatalf("window end logged %+v; want SIGUSR1's one", got)
	}
	l.received(syscall.Signal(34), 1)
	if got := lines(); len(got) != 1 || got[0].Signal != "SIGRTMIN+0" {
		t.Fatalf("a signal after a quiet window logged %+v; want it logged at once", got)
	}
}

func TestShruggedSignals(t *testing.T) {
	for _, s := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, 32, 33, 34, 0, 65} {
		if shrugged(s) {
			t.Errorf("shrugged(%d) = true; want false", s)
		}
	}
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE,
		syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGSTKFLT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGCONT, syscall.SIGPIPE, syscall.SIGWINCH, syscall.SIGPWR, 35, 64} {
		if !shrugged(s) {
			t.Errorf("shrugged(%d) = false; want true", s)
		}
	}
}
