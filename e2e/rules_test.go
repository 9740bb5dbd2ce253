package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Rule 6.1: an exited subject is left alone; its service survives, is
// reported, keeps being drained, and the reply does not wait for it.
func TestRule1ExitedSubjectLeftAlone(t *testing.T) { eachScope(t, testRule1ExitedSubjectLeftAlone) }

func testRule1ExitedSubjectLeftAlone(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})
	svc := d.pidFile("svc.pid")
	marker := filepath.Join(d.dir, "flooded")
	c := d.connect()
	// The service holds stdout and stderr, then writes 4 MiB to each after
	// the subject has exited: far more than a pipe holds. It can only reach
	// the marker if relayd keeps draining both (no block, no SIGPIPE).
	script := fmt.Sprintf(`(echo $$ > /dev/null; sleep 0.3; head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2; touch %s; exec sleep 300) &
echo $! > %s; echo started; exit 3`, q(marker), q(svc))
	began := time.Now()
	r := c.sh(script, nil)
	took := time.Since(began)
	pid := waitPid(t, svc)
	wantExit(t, r, "exited", 3)
	if r["settlement"] != "none" {
		t.Fatalf("settlement %v; want none", r["settlement"])
	}
	if took > 2*time.Second {
		t.Fatalf("reply took %s while a service held stdout; want it prompt", took)
	}
	if !contains(survivorPids(t, r), pid) {
		t.Fatalf("survivors %v; want to include the service %d", r["survivors"], pid)
	}
	if r["stdout"] != "started\n" {
		t.Fatalf("stdout %q; want only what the subject wrote before it exited", r["stdout"])
	}
	waitFor(t, 10*time.Second, "the service to write 8 MiB through relayd's drains", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if !alive(pid) {
		t.Fatal("the service of an exited subject died")
	}
	v := c.request(msg{"kind": "verify"})
	if v["kind"] != "verified" || v["quiescent"] != true {
		t.Fatalf("verify: got %v; want verified, quiescent", v)
	}
	if !contains(survivorPids(t, v), pid) {
		t.Fatalf("verified.survivors %v; want the service %d", v["survivors"], pid)
	}
	c.c.Close()
	time.Sleep(300 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("closing the connection killed a survivor")
	}
	d.stopClean()
	if !alive(pid) {
		t.Fatal("relayd's shutdown killed a survivor of an exited subject")
	}
}

// escapeeScript starts, besides the subject, a setsid escapee, a
// double-forked escapee and a TERM-ignoring child, each writing a heartbeat
// into the workspace, then records their pids.
func escapeeScript(d *daemon, pids string) string {
	beat := func(name string) string {
		return fmt.Sprintf(`while :; do date +%%s%%N > %s; sleep 0.02; done`, q(filepath.Join(d.workspace, name)))
	}
	return fmt.Sprintf(`
setsid sh -c 'echo $$ >> %[1]s; %[2]s' &
( sh -c 'echo $$ >> %[1]s; exec setsid sh -c '"'"'%[3]s'"'"'' & ) 
sh -c 'trap "" TERM; echo $$ >> %[1]s; %[4]s' &
sh -c 'trap "" TERM; sleep 300 & echo $! >> %[1]s; wait' &
exec sleep 300`, q(pids), beat("beat-setsid"), beat("beat-double"), beat("beat-noterm"))
}

// checkSettled asserts that every recorded process is dead and nothing
// writes into the workspace any more.
func checkSettled(t *testing.T, d *daemon, pids string, want int) {
	t.Helper()
	list := readPids(pids)
	if len(list) < want {
		t.Fatalf("only %d of %d escapees recorded their pid", len(list), want)
	}
	for _, pid := range list {
		if alive(pid) {
			t.Errorf("process %d (%s) survived settlement", pid, cmdline(pid))
		}
	}
	before := snapshot(t, d.workspace)
	time.Sleep(300 * time.Millisecond)
	if after := snapshot(t, d.workspace); after != before {
		t.Fatalf("the workspace changed after settlement (a late write)")
	}
}

func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "%s=%s;", e.Name(), data)
	}
	return b.String()
}

// Rule 6.2: the framework's end (timeoutMs, verify, shutdown) settles the
// whole scope, escapees included, and reports framework_timeout, 124.
func TestRule2FrameworkEndSettles(t *testing.T) { eachScope(t, testRule2FrameworkEndSettles) }

func testRule2FrameworkEndSettles(t *testing.T, mech string) {
	for _, how := range []string{"timeoutMs", "verify", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			d := startRelayd(t, opts{scope: mech})
			pids := d.pidFile("escapees.pid")
			c := d.connect()
			m := msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", escapeeScript(d, pids)}}
			if how == "timeoutMs" {
				m["timeoutMs"] = 1500
			}
			c.send(m)
			waitFor(t, 10*time.Second, "four escapees", func() bool { return len(readPids(pids)) >= 4 })
			began := time.Now()
			switch how {
			case "verify":
				c.send(msg{"kind": "verify"})
			case "shutdown":
				d.signal(syscall.SIGTERM)
			}
			r := c.read(10 * time.Second)
			if r == nil || r["kind"] != "executed" {
				t.Fatalf("got %v; want executed", r)
			}
			wantExit(t, r, "framework_timeout", 124)
			if r["settlement"] != "settled" {
				t.Fatalf("settlement %v; want settled", r["settlement"])
			}
			if took := time.Since(began); took > 3*time.Second+time.Second {
				t.Fatalf("settlement took %s; teardown deadline is 3s", took)
			}
			checkSettled(t, d, pids, 4)
			switch how {
			case "verify":
				v := c.read(5 * time.Second)
				if v["kind"] != "verified" || v["quiescent"] != true {
					t.Fatalf("after the executed reply: %v; want verified, quiescent", v)
				}
				d.stopClean()
			case "shutdown":
				if code := d.wait(10 * time.Second); code != 0 {
					t.Fatalf("relayd exited %d after a confirmed shutdown; want 0", code)
				}
			default:
				d.stopClean()
			}
		})
	}
}

// Rule 6.3: a terminal execution wins. A subject that ends right at its
// deadline is reported either as exited with its own status and its service
// untouched, or as framework_timeout with the scope settled: never a mix,
// and never exited with the status of relayd's own SIGTERM.
func TestRule3TerminalExecutionWins(t *testing.T) { eachScope(t, testRule3TerminalExecutionWins) }

func testRule3TerminalExecutionWins(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})
	c := d.connect()
	sawExit, sawTimeout := 0, 0
	for i := 0; i < 30; i++ {
		svc := d.pidFile(fmt.Sprintf("svc%d.pid", i))
		r := c.sh(fmt.Sprintf(`sleep 300 & echo $! > %s; sleep 0.05; exit 5`, q(svc)), msg{"timeoutMs": 50 + i%3*10})
		pids := readPids(svc) // the subject may not have got that far before its deadline
		switch r["termination"] {
		case "exited":
			sawExit++
			wantExit(t, r, "exited", 5)
			if len(pids) == 0 {
				t.Fatalf("iteration %d: exited 5 but the service pid was never written", i)
			}
			if r["settlement"] != "none" || !contains(survivorPids(t, r), pids[0]) || !alive(pids[0]) {
				t.Fatalf("iteration %d: exited, but settlement %v survivors %v alive %v", i, r["settlement"], r["survivors"], alive(pids[0]))
			}
			_ = syscall.Kill(pids[0], syscall.SIGKILL) // our own service; keep the table small
		case "framework_timeout":
			sawTimeout++
			wantExit(t, r, "framework_timeout", 124)
			if r["settlement"] != "settled" {
				t.Fatalf("iteration %d: framework_timeout with settlement %v", i, r["settlement"])
			}
			if len(pids) > 0 && alive(pids[0]) {
				t.Fatalf("iteration %d: framework_timeout, settled, but the service %d lives", i, pids[0])
			}
		default:
			t.Fatalf("iteration %d: termination %v", i, r["termination"])
		}
	}
	t.Logf("exited %d, framework_timeout %d of 30", sawExit, sawTimeout)
	// Deterministic half: a subject that has exited is never settled by a
	// later verify.
	svc := d.pidFile("late.pid")
	r := c.sh(fmt.Sprintf(`sleep 300 & echo $! > %s; exit 0`, q(svc)), msg{"timeoutMs": 60000})
	wantExit(t, r, "exited", 0)
	pid := waitPid(t, svc)
	v := c.request(msg{"kind": "verify"})
	if v["quiescent"] != true || !alive(pid) {
		t.Fatalf("verify after exit: %v, service alive %v", v, alive(pid))
	}
	d.stopClean()
}

// Rule 6.4: transport loss settles that connection's scope within the
// teardown deadline; another connection's execution is untouched.
func TestRule4TransportLossSettles(t *testing.T) { eachScope(t, testRule4TransportLossSettles) }

func testRule4TransportLossSettles(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})
	lostPids := d.pidFile("lost.pid")
	keptPid := d.pidFile("kept.pid")
	lost := d.connect()
	kept := d.connect()
	lost.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", escapeeScript(d, lostPids)}})
	kept.send(msg{"kind": "execute", "command": "/bin/sh",
		"args": []string{"-c", fmt.Sprintf(`echo $$ > %s; sleep 2; echo done`, q(keptPid))}})
	waitFor(t, 10*time.Second, "escapees", func() bool { return len(readPids(lostPids)) >= 4 })
	other := waitPid(t, keptPid)
	began := time.Now()
	lost.c.Close()
	// No reply can come: the log says when the settlement ended, and how.
	waitFor(t, 3*time.Second+500*time.Millisecond, "the lost connection's scope to be settled", func() bool {
		return strings.Contains(d.logs.String(), `"termination":"framework_timeout","exitCode":124,"settlement":"settled"`)
	})
	t.Logf("settled %s after the connection closed", time.Since(began))
	checkSettled(t, d, lostPids, 4)
	if !alive(other) {
		t.Fatal("another connection's subject was touched by a transport loss")
	}
	r := kept.read(10 * time.Second)
	wantExit(t, r, "exited", 0)
	if r["stdout"] != "done\n" {
		t.Fatalf("other connection's stdout %q", r["stdout"])
	}
	d.stopClean()
}

// evidenceFault returns the environment that lets a test fault a scope's
// evidence (seams only the relayd_faults build has), and the function that
// turns the fault on. process-group: the process table is unreadable from
// the start; cgroup: every read of the leaf fails once armed.
func evidenceFault(t *testing.T, mech string) ([]string, func()) {
	if mech == "process-group" {
		return []string{"RELAYD_FAULT_PROC_ROOT=/nonexistent-proc"}, func() {}
	}
	flag := filepath.Join(t.TempDir(), "fault")
	return []string{"RELAYD_FAULT_CGROUP_READ=" + flag}, func() {
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Rule 6.5: no evidence, no quiescence. With the scope's state unreadable
// (a fault seam only the test build has), a settlement is never "settled":
// it is reported as failed, verify is not quiescent, and relayd exits 1.
func TestRule5NoEvidenceNoQuiescence(t *testing.T) { eachScope(t, testRule5NoEvidenceNoQuiescence) }

func testRule5NoEvidenceNoQuiescence(t *testing.T, mech string) {
	faultEnv, arm := evidenceFault(t, mech)
	d := startRelayd(t, opts{scope: mech, bin: faultBin, env: faultEnv,
		args: []string{"--teardown-timeout", "1s"}})
	pid := d.pidFile("subject.pid")
	c := d.connect()
	began := time.Now()
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf(`echo $$ > %s; exec sleep 300`, q(pid))},
		"timeoutMs": 500})
	waitPid(t, pid)
	arm()
	r := c.read(10 * time.Second)
	wantExit(t, r, "framework_timeout", 124)
	if s := r["settlement"]; s == "settled" || s == "none" {
		t.Fatalf("settlement %v without evidence; want failed or destroyed", s)
	}
	if took := time.Since(began); took > 500*time.Millisecond+time.Second+time.Second {
		t.Fatalf("reply took %s; want within timeoutMs + teardown + a small constant", took)
	}
	v := c.request(msg{"kind": "verify"})
	if v["quiescent"] != false {
		t.Fatalf("verify %v; want quiescent false after an unconfirmed settlement", v)
	}
	if code := d.stop(); code != 1 {
		t.Fatalf("relayd exited %d; want 1 after an unconfirmed settlement", code)
	}
}

// Rule 6.7: settlement is bounded. When nothing can be confirmed, the
// executed reply still comes by the teardown deadline plus a small constant
// and the session goes on.
func TestRule7SettlementBounded(t *testing.T) { eachScope(t, testRule7SettlementBounded) }

func testRule7SettlementBounded(t *testing.T, mech string) {
	faultEnv, arm := evidenceFault(t, mech)
	d := startRelayd(t, opts{scope: mech, bin: faultBin, env: faultEnv,
		args: []string{"--term-grace", "200ms", "--teardown-timeout", "700ms"}})
	pid := d.pidFile("subject.pid")
	c := d.connect()
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf(`trap "" TERM; echo $$ > %s; while :; do sleep 1; done`, q(pid))}})
	waitPid(t, pid)
	arm()
	began := time.Now()
	c.send(msg{"kind": "verify"})
	r := c.read(5 * time.Second)
	took := time.Since(began)
	wantExit(t, r, "framework_timeout", 124)
	if took > 700*time.Millisecond+500*time.Millisecond {
		t.Fatalf("reply took %s; want at most the 700ms deadline plus a small constant", took)
	}
	if v := c.read(5 * time.Second); v["kind"] != "verified" {
		t.Fatalf("got %v; want verified", v)
	}
	if r := c.sh("exit 4", nil); num(t, r, "exitCode") != 4 {
		t.Fatalf("the session did not go on: %v", r)
	}
	d.stop()
}

// Rule 6.6: scope setup failure touches nothing. With scope setup faulted
// (a seam only the test build has), the reply is 111,
// execution-scope-unavailable, with nothing run and nothing signalled.
func TestRule6ScopeSetupFailureTouchesNothing(t *testing.T) {
	eachScope(t, testRule6ScopeSetupFailureTouchesNothing)
}

func testRule6ScopeSetupFailureTouchesNothing(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech, bin: faultBin, env: []string{"RELAYD_FAULT_SCOPE_SETUP=1"}})
	marker := filepath.Join(d.dir, "ran")
	c := d.connect()
	for _, extra := range []msg{{}, {"resultToken": strings.Repeat("ab", 16)}} {
		r := c.sh("touch "+q(marker), extra)
		wantExit(t, r, "exited", 111)
		diag := r["diagnostic"].(map[string]any)
		want := msg{"category": "execution-scope-unavailable", "bytes": json.Number("0"),
			"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
		for k, v := range want {
			if diag[k] != v {
				t.Fatalf("diagnostic %v; want %v", diag, want)
			}
		}
		if r["stdout"] != "" || r["settlement"] != "none" {
			t.Fatalf("stdout %q settlement %v; want \"\" and none", r["stdout"], r["settlement"])
		}
		if det, _ := r["detail"].(string); det == "" {
			t.Fatal("no detail saying why the scope failed")
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the subject ran although its scope could not be set up")
	}
	d.stopClean()
}
