package e2e

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Apache Maka's controller (packages/eval/src/harness-executor.ts) drives a
// dial-out relayd like this, unchanged: it listens, reads ready, sends one
// execute with the fields of its relay contract and no id, cwd or
// timeoutMs, reads one line, and ends the trial with verify sent by
// socket.end(line): the message, then at once a half-close. These tests
// play that controller byte for byte.

// makaExecute is the execute message Maka's controller sends.
func makaExecute(script string) msg {
	return msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", script},
		"environment": msg{"LANG": "C.UTF-8"}, "credentials": msg{},
		"resultToken": strings.Repeat("ab", 16), "captureStdout": true}
}

// endWith sends m and half-closes, as Node's socket.end(line) does.
func (cl *client) endWith(m msg) {
	cl.t.Helper()
	cl.send(m)
	if err := cl.c.(*net.TCPConn).CloseWrite(); err != nil {
		cl.t.Fatalf("half-close: %v", err)
	}
}

func TestMakaController(t *testing.T) {
	t.Run("agent ends, then verify with a half-close", func(t *testing.T) {
		d, c := dialOut(t)
		if r := c.read(10 * time.Second); r["kind"] != "ready" || r["token"] != d.token {
			t.Fatalf("first line %v; want ready with the token", r)
		}
		c.send(makaExecute("echo working"))
		e := c.read(30 * time.Second)
		wantExit(t, e, "exited", 0)
		if e["diagnostic"].(msg)["category"] != "result-frame-missing" || e["id"] != nil {
			t.Fatalf("executed %v; want result-frame-missing and no id", e)
		}
		c.endWith(msg{"kind": "verify"})
		v := c.read(10 * time.Second)
		if v == nil || v["kind"] != "verified" || v["quiescent"] != true {
			t.Fatalf("after verify and a half-close: got %v; want verified, quiescent", v)
		}
		if code := d.wait(10 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d; want 0 after verify", code)
		}
	})
	t.Run("verify with a half-close while the agent runs", func(t *testing.T) {
		d, c := dialOut(t)
		c.read(10 * time.Second)
		pidf := d.pidFile("agent.pid")
		c.send(makaExecute(fmt.Sprintf("echo $$ > %s; exec sleep 300", q(pidf))))
		pid := waitPid(t, pidf)
		// The controller's own timer fired: it ends the trial.
		c.endWith(msg{"kind": "verify"})
		e := c.read(10 * time.Second)
		if e == nil {
			t.Fatal("the connection closed instead of the executed reply")
		}
		wantExit(t, e, "framework_timeout", 124)
		if e["settlement"] != "settled" {
			t.Fatalf("executed %v; want settled", e)
		}
		v := c.read(10 * time.Second)
		if v == nil || v["kind"] != "verified" || v["quiescent"] != true {
			t.Fatalf("got %v; want verified, quiescent, after the executed reply", v)
		}
		if code := d.wait(10 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d; want 0 after verify", code)
		}
		if alive(pid) {
			t.Fatal("the agent outlived verify")
		}
	})
	t.Run("SIGTERM to relayd instead of verify", func(t *testing.T) {
		d, c := dialOut(t)
		c.read(10 * time.Second)
		pidf := d.pidFile("agent.pid")
		c.send(makaExecute(fmt.Sprintf("echo $$ > %s; exec sleep 300", q(pidf))))
		pid := waitPid(t, pidf)
		d.signal(syscall.SIGTERM) // Harbor's agent timeout
		e := c.read(10 * time.Second)
		wantExit(t, e, "framework_timeout", 124)
		if e["settlement"] != "settled" {
			t.Fatalf("executed %v; want settled", e)
		}
		// relayd waits for a verify after the shutdown's executed (rule
		// 6.8); this controller closes instead.
		c.c.Close()
		if code := d.wait(10 * time.Second); code != 3 {
			t.Fatalf("relayd exited %d; want 3: no verify, every settlement confirmed", code)
		}
		if alive(pid) {
			t.Fatal("the agent outlived relayd's shutdown")
		}
	})
}

// TestExitStatuses checks the table of protocol section 2 in both modes.
func TestExitStatuses(t *testing.T) {
	t.Run("listen: shutdown with every settlement confirmed is 0", func(t *testing.T) {
		d := startRelayd(t, opts{})
		c := d.connect()
		wantExit(t, c.sh("exit 3", nil), "exited", 3)
		d.stopClean()
	})
	t.Run("listen: an unconfirmed settlement is 1", func(t *testing.T) {
		testRule5NoEvidenceNoQuiescence(t, "process-group")
	})
	t.Run("refused to start is 2", func(t *testing.T) {
		d := prepare(t, opts{args: []string{"--term-grace", "soon"}})
		d.start2(t, 2)
	})
	t.Run("dial-out: verified is 0", func(t *testing.T) {
		d, c := dialOut(t)
		c.read(10 * time.Second)
		c.endWith(msg{"kind": "verify"})
		if v := c.read(10 * time.Second); v == nil || v["kind"] != "verified" {
			t.Fatalf("got %v; want verified", v)
		}
		if code := d.wait(10 * time.Second); code != 0 {
			t.Fatalf("exit %d; want 0", code)
		}
	})
	t.Run("dial-out: the controller closes without verify is 3", func(t *testing.T) {
		d, c := dialOut(t)
		c.read(10 * time.Second)
		wantExit(t, c.sh("true", nil), "exited", 0)
		c.c.Close()
		if code := d.wait(10 * time.Second); code != 3 {
			t.Fatalf("exit %d; want 3", code)
		}
	})
	t.Run("dial-out: an unconfirmed settlement is 1 even after verify", func(t *testing.T) {
		d, c := dialOutWith(t, opts{scope: "process-group", bin: faultBin,
			env: []string{"RELAYD_FAULT_PROC_ROOT=/nonexistent-proc"}}, "--teardown-timeout", "1s")
		c.read(10 * time.Second)
		pidf := d.pidFile("agent.pid")
		c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf("echo $$ > %s; exec sleep 300", q(pidf))}})
		waitPid(t, pidf)
		c.endWith(msg{"kind": "verify"})
		e := c.read(10 * time.Second)
		if e == nil || e["settlement"] == "settled" || e["settlement"] == "none" {
			t.Fatalf("executed %v; want destroyed or failed", e)
		}
		if v := c.read(10 * time.Second); v == nil || v["quiescent"] != false {
			t.Fatalf("verified %v; want quiescent false", v)
		}
		if code := d.wait(10 * time.Second); code != 1 {
			t.Fatalf("exit %d; want 1", code)
		}
	})
	t.Run("dial-out: shut down before reaching the controller is 2", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		d := prepare(t, opts{args: []string{"--connect", addr, "--connect-timeout", "30s", "--log-level", "debug"}})
		for i, a := range d.cmd.Args {
			if a == "--listen" {
				d.cmd.Args = append(d.cmd.Args[:i:i], d.cmd.Args[i+2:]...)
				break
			}
		}
		d.start2(t, -1)
		waitFor(t, 10*time.Second, "relayd retrying the dial", func() bool {
			return strings.Contains(d.logs.String(), "controller not reachable yet")
		})
		d.signal(syscall.SIGTERM)
		if code := d.wait(10 * time.Second); code != 2 {
			t.Fatalf("exit %d; want 2: nothing ran; log: %s", code, d.logs.String())
		}
	})
}

// start2 starts relayd without waiting for it to listen; with want >= 0 it
// waits for the exit and checks its status.
func (d *daemon) start2(t *testing.T, want int) {
	t.Helper()
	d.launch()
	if want >= 0 {
		if code := d.wait(10 * time.Second); code != want {
			t.Fatalf("exit %d; want %d; log: %s", code, want, d.logs.String())
		}
	}
}
