package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// Rule 6.8 and section 4.3: the verify a controller sends after the
// executed reply a shutdown made is answered. Maka's controller sends it,
// and records a connection closed before it as an infrastructure failure.
// The connection waits for it (or for the controller's close) until
// --teardown-timeout after the shutdown began; a verify already read when
// every execution has been answered is answered all the same (before, the
// loop picked at random between the end and the verify).

// shutdownVerifyRounds is how many relayds are stopped with SIGTERM under
// a running execute and then asked to verify, the mechanisms taking turns;
// shutdownVerifyBatch of them run at once.
const (
	shutdownVerifyRounds = 100
	shutdownVerifyBatch  = 10
)

func TestShutdownVerifyAfterExecuted(t *testing.T) {
	shutdownVerifyRuns(t, shutdownVerifyRounds, false)
}

// The verify may come before the shutdown's executed reply is written (the
// subject ignores SIGTERM for the grace): it is answered after it.
func TestShutdownVerifyBeforeExecuted(t *testing.T) {
	shutdownVerifyRuns(t, shutdownVerifyBatch, true)
}

// shutdownVerifyRuns runs rounds of shutdownThenVerify, a batch at a time,
// the mechanisms taking turns (process-group alone where cgroup cannot
// run), and fails the test with every round that went wrong.
func shutdownVerifyRuns(t *testing.T, rounds int, early bool) {
	mechs := []string{"process-group", "cgroup"}
	if cgroupSkip != "" {
		t.Logf("process-group only: %s", cgroupSkip)
		mechs = mechs[:1]
	}
	var mu sync.Mutex
	var bad []string
	for first := 0; first < rounds; first += shutdownVerifyBatch {
		var wg sync.WaitGroup
		for i := first; i < min(first+shutdownVerifyBatch, rounds); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mech := mechs[i%len(mechs)]
				if err := shutdownThenVerify(mech, early); err != nil {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("round %d (%s): %v", i, mech, err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d rounds lost the verify after SIGTERM:\n%s", len(bad), rounds, strings.Join(bad, "\n"))
	}
}

// shutdownThenVerify starts relayd, runs a long execute, sends relayd
// SIGTERM, reads the executed reply and sends verify (early: sends verify
// right after the signal, before the reply), and checks the verified
// reply, the connection's close and relayd's exit status 0. It uses the
// harness directly, not the test's helpers, so that rounds can run at once.
func shutdownThenVerify(mech string, early bool) error {
	// CleanEnv holds the GORACE TestMain set: no second's sleep at
	// relayd's exit.
	r, err := testharness.Start(testharness.Options{Bin: relaydBin, Env: testharness.CleanEnv(), LogKeep: 1 << 16,
		Args: []string{"--scope", mech, "--socket", "", "--term-grace", "500ms", "--teardown-timeout", "5s"}})
	if err != nil {
		return err
	}
	defer r.Kill()
	fail := func(format string, args ...any) error {
		return fmt.Errorf(format+"\nrelayd log:\n%s", append(args, tail(r.Logs.String(), 3000))...)
	}
	w, err := testharness.DialWire(r.Addr, r.Token, 10*time.Second)
	if err != nil {
		return err
	}
	defer w.Conn.Close()
	script := "exec sleep 300"
	if early {
		script = `trap "" TERM; while :; do sleep 0.1; done`
	}
	if err := w.Send(map[string]any{"kind": "execute", "id": "x", "command": "/bin/sh", "args": []string{"-c", script}, "stream": true}); err != nil {
		return err
	}
	read := func() (map[string]any, error) {
		for {
			line, err := w.ReadLine(20 * time.Second)
			if err != nil {
				return nil, err
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, fmt.Errorf("%q: %w", line, err)
			}
			if m["kind"] != "output" {
				return m, nil
			}
		}
	}
	if m, err := read(); err != nil || m["kind"] != "started" {
		return fail("got %v, %v; want started", m, err)
	}
	_ = r.Cmd.Process.Signal(syscall.SIGTERM) // the relayd this round started
	verify := map[string]any{"kind": "verify", "id": "v"}
	if early {
		if err := w.Send(verify); err != nil {
			return err
		}
	}
	e, err := read()
	if err != nil || e["kind"] != "executed" || e["termination"] != "framework_timeout" || e["settlement"] != "settled" {
		return fail("got %v, %v; want executed, framework_timeout, settled", e, err)
	}
	if !early {
		if err := w.Send(verify); err != nil {
			return fail("sending verify after the shutdown's executed: %v", err)
		}
	}
	v, err := read()
	if err != nil || v["kind"] != "verified" || v["id"] != "v" || v["quiescent"] != true {
		return fail("verify after SIGTERM: got %v, %v; want verified, quiescent", v, err)
	}
	if s, ok := v["survivors"].([]any); !ok || len(s) != 0 {
		return fail("verified %v; want survivors []", v)
	}
	if line, err := w.ReadLine(10 * time.Second); !errors.Is(err, io.EOF) {
		return fail("after the verified reply: got %q, %v; want the connection closed", line, err)
	}
	if code, err := r.Wait(10 * time.Second); err != nil || code != 0 {
		return fail("relayd exited %d, %v; want 0", code, err)
	}
	return nil
}
