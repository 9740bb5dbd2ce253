//go:build docker

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// manyTrials is how many containers TestDockerManyTrials runs at once, and
// startAtOnce how many docker run it has going at a time (two cores here).
const (
	manyTrials  = 32
	startAtOnce = 4
)

// 32 containers at once, each with relayd as PID 1 (run.sh, a port of its
// own on 127.0.0.1), driven concurrently by this one controller: every
// container is up and connected before the first execute goes out; then
// each connection runs two executions, each printing a nonce of its own
// given in its environment and exiting with a code of its own; every reply
// must carry its own connection's token, id, nonce and code.
func TestDockerManyTrials(t *testing.T) {
	trials := make([]*trial, manyTrials)
	for i := range trials {
		trials[i] = newTrial(t)
	}
	// One docker rm for all of them, before each trial's own cleanup, which
	// then finds nothing left to remove.
	t.Cleanup(func() {
		args := []string{"rm", "--force", "--volumes"}
		for _, tr := range trials {
			args = append(args, tr.name)
		}
		if out, err := docker(2*time.Minute, args...); err != nil && !strings.Contains(out, "No such container") {
			t.Errorf("removing the trials: %v", err)
		}
	})

	script := readDeploy(t, "run.sh")
	began := time.Now()
	errs := make([]error, manyTrials)
	each(manyTrials, startAtOnce, func(i int) { errs[i] = trials[i].run("run.sh", script) })
	failIfAny(t, "starting", errs)
	started := time.Since(began)

	type conn struct {
		c net.Conn
		r *bufio.Reader
	}
	conns := make([]conn, manyTrials)
	each(manyTrials, manyTrials, func(i int) {
		c, r, ready, err := trials[i].handshake(30 * time.Second)
		if err == nil && ready["token"] != trials[i].token {
			err = fmt.Errorf("%s: ready carries token %v; want the trial's own", trials[i].name, ready["token"])
		}
		conns[i], errs[i] = conn{c, r}, err
	})
	t.Cleanup(func() {
		for _, c := range conns {
			if c.c != nil {
				c.c.Close()
			}
		}
	})
	failIfAny(t, "connecting", errs)
	if seen := published(t, trials); len(seen) != manyTrials {
		t.Fatalf("%d distinct published ports for %d trials", len(seen), manyTrials)
	}
	connected := time.Since(began)

	each(manyTrials, manyTrials, func(i int) {
		for round := 0; round < 2 && errs[i] == nil; round++ {
			errs[i] = trialRoundTrip(trials[i], conns[i].c, conns[i].r, i, round)
		}
	})
	failIfAny(t, "executing", errs)
	t.Logf("%d containers: started in %s, all connected after %s, all replies checked after %s",
		manyTrials, started.Round(time.Millisecond), connected.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// trialRoundTrip sends trial i's execute of round round on its connection and
// checks the reply: its token, id, stdout (a nonce given in the execute's
// environment) and exit code are this trial's and this round's.
func trialRoundTrip(tr *trial, c net.Conn, r *bufio.Reader, i, round int) error {
	nonce := strings.TrimPrefix(newToken(), "tok-")
	id := fmt.Sprintf("%s-%d", tr.name, round)
	code := 1 + i + round*manyTrials // 1..64: different for every execution
	req, _ := json.Marshal(msg{"token": tr.token, "kind": "execute", "id": id, "command": "/bin/sh",
		"args":        []string{"-c", `echo "$NONCE"; exit "$CODE"`},
		"environment": map[string]string{"NONCE": nonce, "CODE": fmt.Sprint(code)}})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("%s: execute: %w", tr.name, err)
	}
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%s: no reply to execute %s: %w", tr.name, id, err)
	}
	var m msg
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return fmt.Errorf("%s: reply is not JSON: %q", tr.name, line)
	}
	got := fmt.Sprint(m["kind"], " ", m["token"] == tr.token, " ", m["id"], " ", m["termination"], " ", m["exitCode"], " ", m["stdout"])
	want := fmt.Sprint("executed true ", id, " exited ", code, " ", nonce+"\n")
	if got != want {
		return fmt.Errorf("%s: got reply %q (kind, own token, id, termination, exit code, stdout); want %q", tr.name, got, want)
	}
	return nil
}

// published returns the distinct addresses the trials' ports were
// published on, each checked against docker port.
func published(t *testing.T, trials []*trial) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, tr := range trials {
		if out := mustDocker(t, "port", tr.name, "7700/tcp"); out != tr.addr {
			t.Fatalf("docker port %s prints %q; want %s only", tr.name, out, tr.addr)
		}
		seen[tr.addr] = true
	}
	return seen
}

// each calls f(0) ... f(n-1), at most limit at a time, and returns when all
// have returned.
func each(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// failIfAny fails the test with every error of errs.
func failIfAny(t *testing.T, what string, errs []error) {
	t.Helper()
	n := 0
	for _, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", what, err)
			n++
		}
	}
	if n > 0 {
		t.Fatalf("%s: %d of %d trials failed", what, n, len(errs))
	}
}
