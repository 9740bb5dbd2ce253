package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Rule 6.8: SIGTERM stops accepting, settles every running execution (each
// controller gets its reply), answers execute on idle connections with
// shutting-down until then, and exits 0 when every settlement was confirmed.
func TestRule8ShutdownSettlesEveryExecution(t *testing.T) {
	eachScope(t, testRule8ShutdownSettlesEveryExecution)
}

func testRule8ShutdownSettlesEveryExecution(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "1s", "--teardown-timeout", "4s"}})
	busy := d.pidFile("busy.pid")
	a := d.connect()
	idle := d.connect()
	a.send(msg{"kind": "execute", "id": "a", "command": "/bin/sh",
		"args": []string{"-c", fmt.Sprintf(`trap "" TERM; echo $$ > %s; while :; do sleep 0.1; done`, q(busy))}})
	pid := waitPid(t, busy)
	d.signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // inside the 1s grace: the subject ignores TERM
	r := idle.request(msg{"kind": "execute", "id": 9, "command": "/bin/true"})
	if r["kind"] != "error" || r["error"].(map[string]any)["category"] != "shutting-down" {
		t.Fatalf("execute during shutdown: got %v; want a shutting-down error", r)
	}
	if r := idle.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("ready during shutdown: got %v", r)
	}
	e := a.read(10 * time.Second)
	if e == nil || e["id"] != "a" {
		t.Fatalf("got %v; want the executed reply of the running execution", e)
	}
	wantExit(t, e, "framework_timeout", 124)
	if e["settlement"] != "settled" {
		t.Fatalf("settlement %v; want settled", e["settlement"])
	}
	if alive(pid) {
		t.Fatal("the TERM-ignoring subject outlived shutdown")
	}
	// The connection whose execution the shutdown ended is answered its
	// verify (section 4.3), then closed.
	if v := a.request(msg{"kind": "verify", "id": "v"}); v["kind"] != "verified" || v["quiescent"] != true {
		t.Fatalf("verify after the shutdown's executed: got %v; want verified, quiescent", v)
	}
	if !a.closedByPeer(5*time.Second) || !idle.closedByPeer(5*time.Second) {
		t.Fatal("connections stayed open after shutdown")
	}
	if code := d.wait(10 * time.Second); code != 0 {
		t.Fatalf("relayd exited %d; want 0 after confirmed settlements", code)
	}
}

// Rule 6.8, second half: a second signal destroys at once.
func TestRule8SecondSignalDestroys(t *testing.T) { eachScope(t, testRule8SecondSignalDestroys) }

func testRule8SecondSignalDestroys(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "6s", "--teardown-timeout", "9s"}})
	busy := d.pidFile("busy.pid")
	c := d.connect()
	c.send(msg{"kind": "execute", "command": "/bin/sh",
		"args": []string{"-c", fmt.Sprintf(`trap "" TERM; echo $$ > %s; while :; do sleep 0.1; done`, q(busy))}})
	pid := waitPid(t, busy)
	d.signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	d.signal(syscall.SIGINT)
	r := c.read(5 * time.Second)
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("reply came %s after the second signal; want at once (grace is 6s)", took)
	}
	wantExit(t, r, "framework_timeout", 124)
	if r["settlement"] != "destroyed" {
		t.Fatalf("settlement %v; want destroyed", r["settlement"])
	}
	if alive(pid) {
		t.Fatal("the subject outlived the destroy")
	}
	if code := d.wait(10 * time.Second); code != 1 {
		t.Fatalf("relayd exited %d after a destroy; want 1", code)
	}
}

// Rule 6.9: one reply per execution, one cleanup per scope, whatever races:
// exit against deadline, verify against transport loss, shutdown against
// everything.
func TestRule9OneReplyPerExecution(t *testing.T) { eachScope(t, testRule9OneReplyPerExecution) }

func testRule9OneReplyPerExecution(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})
	t.Run("exit-vs-deadline-vs-verify", func(t *testing.T) {
		c := d.connect()
		for i := 0; i < 40; i++ {
			c.send(msg{"kind": "execute", "id": i, "command": "/bin/sh",
				"args": []string{"-c", "sleep 0.02"}, "timeoutMs": 20})
			if i%2 == 0 {
				c.send(msg{"kind": "verify", "id": fmt.Sprintf("v%d", i)})
			}
			r := c.read(10 * time.Second)
			if r["kind"] != "executed" || fmt.Sprint(r["id"]) != fmt.Sprint(i) {
				t.Fatalf("iteration %d: got %v; want its executed reply", i, r)
			}
			if i%2 == 0 {
				if v := c.read(10 * time.Second); v["kind"] != "verified" {
					t.Fatalf("iteration %d: got %v; want verified", i, v)
				}
			}
		}
		// Nothing extra is queued: the next reply answers the next request.
		if r := c.request(msg{"kind": "ready", "id": "last"}); r["kind"] != "ready" || r["id"] != "last" {
			t.Fatalf("after the loop: got %v; want ready (an extra reply was queued)", r)
		}
	})
	t.Run("verify-vs-transport-loss", func(t *testing.T) {
		for i := 0; i < 10; i++ {
			pidf := d.pidFile(fmt.Sprintf("vt%d.pid", i))
			c := d.connect()
			c.send(msg{"kind": "execute", "command": "/bin/sh",
				"args": []string{"-c", fmt.Sprintf(`echo $$ > %s; exec sleep 300`, q(pidf))}})
			pid := waitPid(t, pidf)
			c.send(msg{"kind": "verify"})
			c.c.Close()
			waitFor(t, 4*time.Second, "the subject to be settled", func() bool { return !alive(pid) })
		}
	})
	t.Run("shutdown-vs-everything", func(t *testing.T) {
		d := startRelayd(t, opts{scope: mech})
		var clients []*client
		svc := d.pidFile("svc.pid")
		for i := 0; i < 6; i++ {
			c := d.connect()
			script := []string{"exit 0", "sleep 0.05", "exec sleep 300", "sleep 300 & echo $! > " + q(svc) + "; exit 1", "trap '' TERM; sleep 1", "echo hi"}[i]
			c.send(msg{"kind": "execute", "id": i, "command": "/bin/sh", "args": []string{"-c", script}})
			clients = append(clients, c)
		}
		time.Sleep(50 * time.Millisecond)
		d.signal(syscall.SIGTERM)
		for i, c := range clients {
			r := c.read(10 * time.Second)
			if r == nil || r["kind"] != "executed" {
				t.Fatalf("client %d: got %v; want exactly one executed", i, r)
			}
			if extra := c.read(10 * time.Second); extra != nil {
				t.Fatalf("client %d: a second message %v after its executed reply", i, extra)
			}
		}
		if code := d.wait(10 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d; want 0", code)
		}
		counts := map[string]int{}
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(line, `"message":"execution ended"`) {
				i := strings.Index(line, `"execution":"`)
				id := line[i+13:]
				counts[id[:strings.IndexByte(id, '"')]]++
			}
		}
		if len(counts) != 6 {
			t.Fatalf("%d executions logged an end; want 6: %v", len(counts), counts)
		}
		for id, n := range counts {
			if n != 1 {
				t.Fatalf("execution %s ended %d times; want once", id, n)
			}
		}
	})
	d.stopClean()
}
