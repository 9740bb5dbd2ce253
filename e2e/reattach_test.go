package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Reattach (protocol section 4.5): detachMs, attach, not-found.

// errorCategory returns an error reply's category ("" for another reply).
func errorCategory(r msg) string {
	if r["kind"] != "error" {
		return ""
	}
	e, _ := r["error"].(map[string]any)
	return fmt.Sprint(e["category"])
}

// detachedLogged reports whether relayd logged that it detached execution name.
func detachedLogged(d *daemon, name string) bool { return logged(d, name, "execution detached") }

// logged reports whether relayd logged a line about execution name holding text.
func logged(d *daemon, name, text string) bool {
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(line, `"execution":"`+name+`"`) && strings.Contains(line, text) {
			return true
		}
	}
	return false
}

// sessionClosed reports whether relayd logged the end of the session with peer.
func sessionClosed(d *daemon, peer string) bool {
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(line, `"peer":"`+peer+`"`) && strings.Contains(line, `"message":"connection closed"`) {
			return true
		}
	}
	return false
}

// detachedSubject starts a script with detachMs on a fresh connection,
// reads started, and closes the connection: the execution is detached.
func detachedSubject(t *testing.T, d *daemon, script string, extra msg) (name string, pid int) {
	t.Helper()
	pidFile := d.pidFile(fmt.Sprintf("detached-%d.pid", time.Now().UnixNano()))
	c := d.connect()
	m := msg{"kind": "execute", "id": 1, "command": "/bin/sh", "args": []string{"-c", "echo $$ > " + q(pidFile) + "; " + script}}
	for k, v := range extra {
		m[k] = v
	}
	c.send(m)
	name = c.started(1)
	pid = waitPid(t, pidFile)
	c.c.Close()
	return name, pid
}

func TestReattach(t *testing.T) { eachScope(t, testReattach) }

func testReattach(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})

	t.Run("runs on after transport loss; attach gets output from then on and the reply", func(t *testing.T) {
		gate1, gate2 := filepath.Join(d.dir, "gate1-"+mech), filepath.Join(d.dir, "gate2-"+mech)
		name, pid := detachedSubject(t, d, fmt.Sprintf(
			`while [ ! -e %s ]; do sleep 0.02; done; echo early; while [ ! -e %s ]; do sleep 0.02; done; echo late; exit 5`, q(gate1), q(gate2)),
			msg{"detachMs": 5000, "stream": true, "captureStderr": true})
		waitFor(t, 5*time.Second, "relayd to detach "+name, func() bool { return detachedLogged(d, name) })
		// "early" is written while nobody is attached.
		if err := os.WriteFile(gate1, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // several 50 ms flushes: "early" is counted as dropped
		if !alive(pid) {
			t.Fatal("a detachable execution was settled at transport loss")
		}
		// In listen mode verify concerns its own connection: another
		// connection's verify leaves the detached execution alone.
		bystander := d.connect()
		if v := bystander.request(msg{"kind": "verify"}); v["kind"] != "verified" || !alive(pid) {
			t.Fatalf("got %v (subject alive: %v); want verified, the detached execution untouched", v, alive(pid))
		}
		if r := bystander.request(msg{"kind": "ready"}); r["detached"] != nil {
			t.Fatalf("listen-mode ready %v names detached executions; want only dial-out's to", r)
		}
		c := d.connect()
		c.send(msg{"kind": "attach", "id": "again", "execution": name})
		waitFor(t, 5*time.Second, "relayd to attach "+name, func() bool { return logged(d, name, "execution attached") })
		// "late" is written once attached.
		if err := os.WriteFile(gate2, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		outputs, r := c.untilExecuted(10 * time.Second)
		wantExit(t, r, "exited", 5)
		if r["id"] != "again" || r["execution"] != name || r["stdout"] != "early\nlate\n" || r["settlement"] != "none" {
			t.Fatalf("executed %v; want the attach's id, the real status and all of stdout", r)
		}
		out, dropped := streamed(t, outputs, "stdout")
		if out != "late\n" || dropped != int64(len("early\n")) {
			t.Fatalf("attached stream %q, dropped %d; want late, and the 6 bytes written while detached counted as dropped", out, dropped)
		}
		for _, o := range outputs {
			if o["id"] != "again" {
				t.Fatalf("output %v does not echo the attach's id", o)
			}
		}
	})

	t.Run("ended while detached, its reply kept until detachMs", func(t *testing.T) {
		name, pid := detachedSubject(t, d, `sleep 0.1; echo finished; exit 7`, msg{"detachMs": 3000})
		waitFor(t, 5*time.Second, "the detached subject to end", func() bool { return !alive(pid) })
		time.Sleep(300 * time.Millisecond)
		c := d.connect()
		r := c.request(msg{"kind": "attach", "id": 2, "execution": name})
		wantExit(t, r, "exited", 7)
		if r["id"] != json.Number("2") || r["stdout"] != "finished\n" {
			t.Fatalf("got %v; want the kept reply echoing the attach's id", r)
		}
		if again := c.request(msg{"kind": "attach", "id": 3, "execution": name}); errorCategory(again) != "not-found" {
			t.Fatalf("second attach: got %v; want not-found (the reply went to the first)", again)
		}
	})

	t.Run("ended while detached with a stream: what it wrote comes as dropped before the reply", func(t *testing.T) {
		name, pid := detachedSubject(t, d, `sleep 0.1; echo finished; echo oops >&2; exit 7`,
			msg{"detachMs": 3000, "stream": true, "captureStderr": true})
		waitFor(t, 5*time.Second, "the detached subject to end", func() bool { return !alive(pid) })
		time.Sleep(300 * time.Millisecond)
		c := d.connect()
		c.send(msg{"kind": "attach", "id": 4, "execution": name})
		outputs, r := c.untilExecuted(10 * time.Second)
		wantExit(t, r, "exited", 7)
		if r["stdout"] != "finished\n" || r["stderr"] != "oops\n" {
			t.Fatalf("executed %v; want all of stdout and stderr", r)
		}
		for _, stream := range []string{"stdout", "stderr"} {
			want := map[string]int64{"stdout": int64(len("finished\n")), "stderr": int64(len("oops\n"))}[stream]
			if data, dropped := streamed(t, outputs, stream); data != "" || dropped != want {
				t.Fatalf("%s: streamed %q, dropped %d; want the %d bytes written while detached counted (outputs %v)", stream, data, dropped, want, outputs)
			}
		}
		for _, o := range outputs {
			if o["id"] != json.Number("4") {
				t.Fatalf("output %v does not echo the attach's id", o)
			}
		}
	})

	t.Run("nobody attaches within detachMs: settled, then not-found", func(t *testing.T) {
		name, pid := detachedSubject(t, d, `exec sleep 300`, msg{"detachMs": 400})
		time.Sleep(150 * time.Millisecond)
		if !alive(pid) {
			t.Fatal("settled before detachMs passed")
		}
		waitFor(t, 5*time.Second, "the detached execution to be settled after detachMs", func() bool { return !alive(pid) })
		c := d.connect()
		if r := c.request(msg{"kind": "attach", "id": 4, "execution": name}); errorCategory(r) != "not-found" {
			t.Fatalf("attach after detachMs: got %v; want not-found", r)
		}
	})

	t.Run("timeoutMs applies while detached", func(t *testing.T) {
		name, pid := detachedSubject(t, d, `exec sleep 300`, msg{"detachMs": 5000, "timeoutMs": 300})
		waitFor(t, 5*time.Second, "timeoutMs to settle the detached execution", func() bool { return !alive(pid) })
		c := d.connect()
		r := c.request(msg{"kind": "attach", "id": 5, "execution": name})
		wantExit(t, r, "framework_timeout", 124)
		if r["settlement"] != "settled" {
			t.Fatalf("settlement %v; want settled", r["settlement"])
		}
	})

	t.Run("not-found and busy", func(t *testing.T) {
		c := d.connect()
		if r := c.request(msg{"kind": "attach", "id": 6, "execution": "x-999999"}); errorCategory(r) != "not-found" || r["id"] != json.Number("6") {
			t.Fatalf("unknown execution: got %v; want not-found echoing the id", r)
		}
		// Running on its connection: not detached.
		c.send(msg{"kind": "execute", "id": 7, "command": "/bin/sh", "args": []string{"-c", "exec sleep 300"}, "detachMs": 5000})
		name := c.started(7)
		other := d.connect()
		if r := other.request(msg{"kind": "attach", "id": 8, "execution": name}); errorCategory(r) != "not-found" {
			t.Fatalf("attach to an execution that runs on its connection: got %v; want not-found", r)
		}
		// A connection running an execution is busy.
		detachedName, _ := detachedSubject(t, d, `exec sleep 300`, msg{"detachMs": 5000})
		if r := c.request(msg{"kind": "attach", "id": 9, "execution": detachedName}); errorCategory(r) != "busy" {
			t.Fatalf("attach while running: got %v; want busy", r)
		}
		c.send(msg{"kind": "verify"})
		if r := c.read(10 * time.Second); r["kind"] != "executed" || r["termination"] != "framework_timeout" {
			t.Fatalf("got %v; want the running execution settled by verify", r)
		}
		c.read(10 * time.Second) // verified
		// The busy attach did not take the detached execution.
		other.send(msg{"kind": "attach", "id": 10, "execution": detachedName})
		other.send(msg{"kind": "verify"})
		if r := other.read(10 * time.Second); r["kind"] != "executed" || r["id"] != json.Number("10") || r["execution"] != detachedName {
			t.Fatalf("got %v; want the attached execution's reply: a busy attach must not take it", r)
		}
	})

	t.Run("execute and half-close at once: started still comes, then attach", func(t *testing.T) {
		pid := d.pidFile("halfclose.pid")
		c := d.connect()
		c.send(msg{"kind": "execute", "id": "hc", "command": "/bin/sh", "detachMs": 5000,
			"args": []string{"-c", "echo $$ > " + q(pid) + "; sleep 0.5; echo ok"}})
		if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		name := c.started("hc")
		if !c.closedByPeer(5 * time.Second) {
			t.Fatal("relayd kept the half-closed connection open")
		}
		if !alive(waitPid(t, pid)) {
			t.Fatal("the execution was settled at the end of the stream")
		}
		o := d.connect()
		r := o.request(msg{"kind": "attach", "id": "hc2", "execution": name})
		wantExit(t, r, "exited", 0)
		if r["stdout"] != "ok\n" {
			t.Fatalf("got %v", r)
		}
	})

	t.Run("a stream ends at transport loss without detachMs", func(t *testing.T) {
		pid := d.pidFile("undetachable.pid")
		c := d.connect()
		c.send(msg{"kind": "execute", "command": "/bin/sh", "stream": true,
			"args": []string{"-c", "echo $$ > " + q(pid) + "; exec sleep 300"}})
		c.started(nil)
		subject := waitPid(t, pid)
		c.c.Close()
		waitFor(t, 5*time.Second, "rule 6.4 to settle an execution without detachMs", func() bool { return !alive(subject) })
	})
	d.stopClean()
}

// The races of reattach, each many times: an attach against the end of
// detachMs gets either the execution (and its reply, once) or not-found
// (and the execution is settled), never both, never neither; an execution
// that ends at the moment its connection goes keeps its reply.
func TestReattachRaces(t *testing.T) {
	d := startRelayd(t, opts{})
	t.Run("attach against the end of detachMs", func(t *testing.T) {
		won := 0
		for i := 0; i < 20; i++ {
			const detach = 150
			name, pid := detachedSubject(t, d, `exec sleep 300`, msg{"detachMs": detach})
			// Around the deadline: from 40 ms before it to 40 ms after.
			time.Sleep(time.Duration(detach-40+4*i) * time.Millisecond)
			c := d.connect()
			c.send(msg{"kind": "attach", "id": i, "execution": name})
			c.send(msg{"kind": "verify"})
			r := c.read(10 * time.Second)
			switch errorCategory(r) {
			case "not-found": // the deadline won: settled by rule 6.4
				waitFor(t, 5*time.Second, "the execution nobody took to be settled", func() bool { return !alive(pid) })
				if v := c.read(10 * time.Second); v["kind"] != "verified" {
					t.Fatalf("got %v; want verified", v)
				}
			case "":
				won++
				wantExit(t, r, "framework_timeout", 124)
				if r["id"] != json.Number(fmt.Sprint(i)) || alive(pid) {
					t.Fatalf("attach %d: got %v; want the attached execution settled by verify", i, r)
				}
				if v := c.read(10 * time.Second); v["kind"] != "verified" {
					t.Fatalf("got %v; want verified", v)
				}
			default:
				t.Fatalf("attach %d: got %v", i, r)
			}
			c.c.Close()
		}
		t.Logf("%d of 20 attaches around the deadline took the execution", won)
	})
	t.Run("execution ends as its connection goes", func(t *testing.T) {
		kept := 0
		for i := 0; i < 12; i++ {
			c := d.connect()
			script := "echo bye; exit 3"
			if i%2 == 1 {
				script = "sleep 0.05; echo bye; exit 3"
			}
			c.send(msg{"kind": "execute", "id": 1, "command": "/bin/sh", "args": []string{"-c", script}, "detachMs": 3000})
			name := c.started(1)
			peer := c.c.LocalAddr().String()
			c.c.Close()
			waitFor(t, 5*time.Second, "relayd to see the loss", func() bool { return sessionClosed(d, peer) })
			o := d.connect()
			r := o.request(msg{"kind": "attach", "id": "late", "execution": name})
			if !detachedLogged(d, name) {
				// It ended, and was answered, before relayd saw the loss: the
				// reply went to the old connection and nothing is detached.
				if errorCategory(r) != "not-found" {
					t.Fatalf("run %d: got %v; want not-found for an execution answered before the loss", i, r)
				}
				o.c.Close()
				continue
			}
			kept++
			wantExit(t, r, "exited", 3)
			if r["stdout"] != "bye\n" || r["id"] != "late" {
				t.Fatalf("run %d: got %v; want the kept reply", i, r)
			}
			o.c.Close()
		}
		t.Logf("%d of 12 executions were detached and their replies kept", kept)
		if kept == 0 {
			t.Fatal("no execution was detached: the race was never run")
		}
	})
	d.stopClean()
}

// A detached execution when relayd shuts down is settled like any other
// (rule 6.8), and relayd exits 0.
func TestReattachShutdown(t *testing.T) {
	d := startRelayd(t, opts{})
	_, pid := detachedSubject(t, d, `trap '' TERM; while :; do sleep 0.05; done`, msg{"detachMs": 60000})
	time.Sleep(100 * time.Millisecond)
	if code := d.stop(); code != 0 {
		t.Fatalf("relayd exited %d; want 0", code)
	}
	if alive(pid) {
		t.Fatal("the detached execution outlived relayd's shutdown")
	}
}

// controllerScript is a controller in a separate process (python3): in
// "start" mode it runs a subject with detachMs, prints the started
// message, and waits to be killed; in "attach" mode it attaches and
// prints every message up to the executed reply.
const controllerScript = `
import json, socket, sys
mode, addr, token, arg = sys.argv[1:5]
host, port = addr.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=30)
f = s.makefile("rb")
def send(m):
    m["token"] = token
    s.sendall((json.dumps(m) + "\n").encode())
if mode == "start":
    send({"kind": "execute", "id": 1, "command": "/bin/sh", "args": ["-c", arg], "detachMs": 10000, "stream": True})
    print(f.readline().decode().strip(), flush=True)
    while True:
        line = f.readline()
        if not line:
            break
else:
    send({"kind": "attach", "id": "restarted", "execution": arg})
    while True:
        line = f.readline()
        if not line:
            break
        print(line.decode().strip(), flush=True)
        if json.loads(line).get("kind") == "executed":
            break
`

// (b) A detached execution survives a controller restart: the controller,
// a separate process, is killed with SIGKILL mid-execution; a new one
// attaches within detachMs and gets the real executed reply.
func TestReattachAfterControllerKilled(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	d := startRelayd(t, opts{})
	script := filepath.Join(d.dir, "controller.py")
	if err := os.WriteFile(script, []byte(controllerScript), 0o644); err != nil {
		t.Fatal(err)
	}
	subject := d.pidFile("restart.pid")
	first := exec.Command("python3", script, "start", d.addr, d.token,
		"echo $$ > "+q(subject)+"; for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.1; done; exit 9")
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the first controller printed nothing: %v", err)
	}
	var started msg
	if json.Unmarshal([]byte(line), &started) != nil || started["kind"] != "started" {
		t.Fatalf("first controller got %q; want started", line)
	}
	pid := waitPid(t, subject)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if !alive(pid) {
		t.Fatal("the subject died with its controller")
	}

	second := exec.Command("python3", script, "attach", d.addr, d.token, started["execution"].(string))
	second.Stderr = os.Stderr
	got, err := second.Output()
	if err != nil {
		t.Fatalf("the second controller: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	var r msg
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("second controller printed %q", got)
	}
	if r["kind"] != "executed" || r["termination"] != "exited" || fmt.Sprint(r["exitCode"]) != "9" || r["id"] != "restarted" ||
		!strings.HasSuffix(fmt.Sprint(r["stdout"]), "tick 8\n") {
		t.Fatalf("second controller got %v; want the real executed reply echoing its id", r)
	}
	d.stopClean()
}

// (d) Dial-out: relayd calls the controller again while an execution is
// detached; the new session's ready names it; attach brings its reply, and
// verify ends the session (exit 0). A verify without attach settles
// detached executions (relayd serves one controller).
func TestDialOutRedialWhileDetached(t *testing.T) {
	accept := func(t *testing.T, ln net.Listener, d *daemon) *client {
		t.Helper()
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("relayd did not call: %v; log: %s", err, d.logs.String())
		}
		t.Cleanup(func() { conn.Close() })
		return &client{t: t, c: conn, r: bufio.NewReaderSize(conn, 1<<20), token: d.token}
	}
	start := func(t *testing.T) (*daemon, net.Listener) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		d := prepare(t, opts{})
		args := d.cmd.Args[1:]
		for i, a := range args {
			if a == "--listen" {
				args[i], args[i+1] = "--connect", ln.Addr().String()
			}
		}
		d.launch()
		return d, ln
	}
	firstSession := func(t *testing.T, d *daemon, ln net.Listener, script string, detachMs int) (string, int) {
		c := accept(t, ln, d)
		if r := c.read(10 * time.Second); r["kind"] != "ready" || r["detached"] != nil {
			t.Fatalf("first ready %v; want one without detached", r)
		}
		pidFile := d.pidFile("dialout.pid")
		c.send(msg{"kind": "execute", "id": 1, "command": "/bin/sh", "detachMs": detachMs,
			"args": []string{"-c", "echo $$ > " + q(pidFile) + "; " + script}})
		name := c.started(1)
		pid := waitPid(t, pidFile)
		c.c.Close()
		return name, pid
	}

	t.Run("attach on the new session", func(t *testing.T) {
		d, ln := start(t)
		name, pid := firstSession(t, d, ln, "sleep 0.5; echo done", 10000)
		c := accept(t, ln, d)
		r := c.read(10 * time.Second)
		if r["kind"] != "ready" || fmt.Sprint(r["detached"]) != fmt.Sprint([]any{name}) {
			t.Fatalf("second ready %v; want detached [%s]", r, name)
		}
		if !alive(pid) {
			t.Fatal("the detached subject was settled at transport loss")
		}
		e := c.request(msg{"kind": "attach", "id": 2, "execution": name})
		wantExit(t, e, "exited", 0)
		if e["stdout"] != "done\n" || e["id"] != json.Number("2") {
			t.Fatalf("got %v", e)
		}
		if v := c.request(msg{"kind": "verify"}); v["kind"] != "verified" || v["quiescent"] != true {
			t.Fatalf("got %v; want verified, quiescent", v)
		}
		if code := d.wait(15 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d; want 0", code)
		}
	})

	t.Run("verify settles what is detached", func(t *testing.T) {
		d, ln := start(t)
		_, pid := firstSession(t, d, ln, "exec sleep 300", 10000)
		c := accept(t, ln, d)
		if r := c.read(10 * time.Second); r["kind"] != "ready" || r["detached"] == nil {
			t.Fatalf("second ready %v; want detached", r)
		}
		v := c.request(msg{"kind": "verify"})
		if v["kind"] != "verified" || v["quiescent"] != true || alive(pid) {
			t.Fatalf("got %v (subject alive: %v); want verified, quiescent, the detached execution settled", v, alive(pid))
		}
		if code := d.wait(15 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d; want 0", code)
		}
	})

	t.Run("nobody comes back", func(t *testing.T) {
		d, ln := start(t)
		_, pid := firstSession(t, d, ln, "exec sleep 300", 1000)
		ln.Close() // the controller is gone for good
		if code := d.wait(30 * time.Second); code != 3 {
			t.Fatalf("relayd exited %d; want 3 (ended without verify, settled)", code)
		}
		if alive(pid) {
			t.Fatal("the detached execution outlived relayd")
		}
	})
}

// Rule 6.11: executions without a controller cannot pile up. With
// --max-connections 2, two executions wait detached; the third transport
// loss settles its execution at once.
func TestDetachedBounded(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-connections", "2"}})
	var pids []int
	for i := 0; i < 3; i++ {
		name, pid := detachedSubject(t, d, `exec sleep 300`, msg{"detachMs": 60000})
		pids = append(pids, pid)
		if i < 2 {
			waitFor(t, 5*time.Second, "relayd to detach "+name, func() bool { return detachedLogged(d, name) })
		}
	}
	first, second, third := pids[0], pids[1], pids[2]
	waitFor(t, 5*time.Second, "the third execution to be settled at its transport loss", func() bool { return !alive(third) })
	if !alive(first) || !alive(second) {
		t.Fatal("an execution within the bound was settled")
	}
	// The log is copied from relayd's stderr by another goroutine: the
	// line written before the kill may reach d.logs after the death is seen.
	waitFor(t, 5*time.Second, "relayd to log why it settled the third", func() bool {
		return strings.Contains(d.logs.String(), "as many executions are detached as --max-connections allows")
	})
	d.stopClean()
	if alive(first) || alive(second) {
		t.Fatal("detached executions outlived the shutdown")
	}
}
