package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Shell sessions without a pty (protocol 4.7): a shell whose state lasts
// from one command to the next, each command's exact status through a
// channel of its own, and a deadline that settles the command alone.

// openSession opens a session and returns its name.
func openSession(t testing.TB, cl *client, extra msg) string {
	t.Helper()
	m := msg{"kind": "open", "id": "o"}
	for k, v := range extra {
		m[k] = v
	}
	r := cl.request(m)
	name, _ := r["session"].(string)
	if r["kind"] != "opened" || !strings.HasPrefix(name, "s-") {
		t.Fatalf("open: got %v; want opened with a session", r)
	}
	return name
}

// run runs script in session name and returns the executed reply.
func (cl *client) run(name, script string, extra msg) msg {
	cl.t.Helper()
	m := msg{"kind": "execute", "id": "c", "session": name, "script": script}
	for k, v := range extra {
		m[k] = v
	}
	r := cl.request(m)
	if r["kind"] != "executed" {
		cl.t.Fatalf("execute in %s: got %v; want executed", name, r)
	}
	if r["session"] != name {
		cl.t.Fatalf("executed names session %v; want %s", r["session"], name)
	}
	return r
}

func wantOut(t testing.TB, r msg, stdout, stderr string) {
	t.Helper()
	if r["stdout"] != stdout || r["stderr"] != stderr {
		t.Fatalf("stdout %q stderr %q; want %q and %q (reply %v)", r["stdout"], r["stderr"], stdout, stderr, r)
	}
}

func TestSessionKeepsState(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "repo", "venv", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		activate := "VIRTUAL_ENV=" + dir + "/repo/venv\nexport VIRTUAL_ENV\nPATH=\"$VIRTUAL_ENV/bin:$PATH\"\ndeactivate() { PATH=${PATH#*:}; unset VIRTUAL_ENV; }\n"
		if err := os.WriteFile(filepath.Join(dir, "repo", "venv", "bin", "activate"), []byte(activate), 0o644); err != nil {
			t.Fatal(err)
		}
		name := openSession(t, cl, msg{"cwd": dir})

		r := cl.run(name, "cd repo && export GREETING=hello && f() { echo \"f:$1:$GREETING\"; }", nil)
		wantExit(t, r, "exited", 0)
		if r["cwd"] != filepath.Join(dir, "repo") {
			t.Fatalf("cwd %v; want %s", r["cwd"], filepath.Join(dir, "repo"))
		}
		r = cl.run(name, "f one; pwd; source venv/bin/activate", nil)
		wantOut(t, r, "f:one:hello\n"+filepath.Join(dir, "repo")+"\n", "")
		r = cl.run(name, "echo $VIRTUAL_ENV; sh -c 'echo $GREETING'; deactivate; echo ${VIRTUAL_ENV:-none}", nil)
		wantOut(t, r, dir+"/repo/venv\nhello\nnone\n", "")

		// A heredoc and a multi-line script with a loop.
		r = cl.run(name, "cat <<'EOF' > notes.txt\nline 'one'\n$NOT_EXPANDED\nEOF\nfor i in 1 2 3; do\n  echo \"n$i\"\ndone\ncat notes.txt", nil)
		wantExit(t, r, "exited", 0)
		wantOut(t, r, "n1\nn2\nn3\nline 'one'\n$NOT_EXPANDED\n", "")

		// A syntax error, an unterminated quote: 2, and the shell lives.
		r = cl.run(name, "if then fi", nil)
		wantExit(t, r, "exited", 2)
		r = cl.run(name, "echo 'never closed", nil)
		wantExit(t, r, "exited", 2)
		if r["sessionEnded"] == true {
			t.Fatalf("a syntax error ended the session: %v", r)
		}
		r = cl.run(name, "echo $GREETING; pwd", nil)
		wantOut(t, r, "hello\n"+filepath.Join(dir, "repo")+"\n", "")

		// stdout and stderr apart; the command's own status.
		r = cl.run(name, "echo out; echo err >&2; (exit 42)", nil)
		wantExit(t, r, "exited", 42)
		wantOut(t, r, "out\n", "err\n")

		// input is the command's stdin.
		r = cl.run(name, "tr a-z A-Z; read -r x < /dev/null || echo eof", msg{"input": "abc\ndef"})
		wantOut(t, r, "ABC\nDEFeof\n", "")

		// Fake markers and 10,000 lines: the status is the command's own.
		r = cl.run(name, "for i in $(seq 1 10000); do echo \"line $i\"; done; printf '0 0\\n__RELAYD_DONE 0\\nPS1>$ exit 0\\n'; exit_code() { return 7; }; exit_code", nil)
		wantExit(t, r, "exited", 7)
		out, _ := r["stdout"].(string)
		if n := strings.Count(out, "\n"); n != 10003 || !strings.HasPrefix(out, "line 1\n") || !strings.Contains(out, "line 10000\n0 0\n") {
			t.Fatalf("stdout has %d lines (%q...); want 10003", n, out[:min(len(out), 80)])
		}

		// exit ends the shell: the reply says so, and the session is gone.
		r = cl.run(name, "echo bye; exit 3", nil)
		wantExit(t, r, "exited", 3)
		if r["sessionEnded"] != true || r["stdout"] != "bye\n" {
			t.Fatalf("exit 3: %v; want sessionEnded and bye", r)
		}
		waitFor(t, 10*time.Second, "the ended session to be gone", func() bool {
			r := cl.request(msg{"kind": "execute", "session": name, "script": "true"})
			return r["kind"] == "error"
		})
	})
}

// TestSessionDeadlineSettlesTheCommand: a deadline interrupts the command
// and settles its processes, a setsid child included, while the shell and
// a server an earlier command left in the background run on.
func TestSessionDeadlineSettlesTheCommand(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "500ms"}})
		cl := d.connect()
		dir := t.TempDir()
		name := openSession(t, cl, msg{"cwd": dir})
		r := cl.run(name, "sleep 1000 & echo $! > server.pid", nil)
		wantExit(t, r, "exited", 0)
		server := readPid(t, filepath.Join(dir, "server.pid"))
		if pids := survivorPids(t, r); len(pids) != 1 || pids[0] != server {
			t.Fatalf("survivors %v; want the background server %d", pids, server)
		}
		began := time.Now()
		r = cl.run(name, "setsid sh -c 'echo $$ > child.pid; exec sleep 1000' & echo $$ > shell.pid; sleep 1000", msg{"timeoutMs": 300})
		wantExit(t, r, "framework_timeout", 124)
		if r["settlement"] != "settled" || r["sessionEnded"] == true {
			t.Fatalf("deadline: %v; want settled, the session on", r)
		}
		if el := time.Since(began); el > 5*time.Second {
			t.Fatalf("the deadline's reply took %v", el)
		}
		child := readPid(t, filepath.Join(dir, "child.pid"))
		shell := readPid(t, filepath.Join(dir, "shell.pid"))
		if alive(child) && strings.Contains(cmdline(child), "sleep") {
			t.Fatalf("the command's setsid child %d still runs", child)
		}
		if !alive(server) || !alive(shell) {
			t.Fatalf("server %d alive %v, shell %d alive %v; want both", server, alive(server), shell, alive(shell))
		}
		// bash may report the killed job on stderr (as to a person).
		r = cl.run(name, "echo still here; kill -0 "+strconv.Itoa(server)+" && echo server", nil)
		if r["stdout"] != "still here\nserver\n" {
			t.Fatalf("after the deadline: %v", r)
		}

		// close settles everything, with evidence.
		c := cl.request(msg{"kind": "close", "id": 9, "session": name})
		if c["kind"] != "closed" || c["settlement"] != "settled" || c["session"] != name {
			t.Fatalf("close: %v; want closed, settled", c)
		}
		// What the whole session used (4.8): the shell, and what it left
		// to the shim (the server, the setsid child), reaped.
		if u, _ := c["usage"].(map[string]any); u == nil || num(t, u, "processes") < 2 {
			t.Fatalf("close: usage %v; want the session's, at least 2 processes", c["usage"])
		}
		waitFor(t, 5*time.Second, "the session's processes to be gone", func() bool { return !alive(server) && !alive(shell) })
	})
}

// TestSessionAcrossConnections: a session outlives the connection that
// opened it, another connection uses it, status lists it, two sessions
// share nothing, and --max-sessions bounds them.
func TestSessionAcrossConnections(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--max-sessions", "2"}})
		first := d.connect()
		a := openSession(t, first, nil)
		wantExit(t, first.run(a, "export ONLY_A=1; cd /tmp", nil), "exited", 0)
		first.c.Close()

		cl := d.connect()
		r := cl.run(a, "echo ${ONLY_A:-unset}; pwd", nil)
		wantOut(t, r, "1\n/tmp\n", "")
		b := openSession(t, cl, nil)
		if b == a {
			t.Fatalf("two sessions named %s", a)
		}
		r = cl.run(b, "echo ${ONLY_A:-unset}; pwd", nil)
		wantOut(t, r, "unset\n"+d.workspace+"\n", "")

		st := cl.request(msg{"kind": "status"})
		list, _ := st["sessions"].([]any)
		if len(list) != 2 {
			t.Fatalf("status sessions %v; want 2", st["sessions"])
		}
		e := cl.request(msg{"kind": "open"})
		if e["kind"] != "error" || !strings.Contains(fmt.Sprint(e["error"]), "busy") || !strings.Contains(fmt.Sprint(e["error"]), "--max-sessions") {
			t.Fatalf("a third open: %v; want busy naming --max-sessions", e)
		}
		for _, n := range []string{a, b} {
			if c := cl.request(msg{"kind": "close", "session": n}); c["kind"] != "closed" || c["settlement"] != "settled" {
				t.Fatalf("close %s: %v", n, c)
			}
		}
		c := openSession(t, cl, nil) // room again
		wantExit(t, cl.run(c, "sleep 1000 &", nil), "exited", 0)
		d.stopClean() // shutdown settles the open session: exit 0
	})
}

// TestSessionStatusCannotBeForged: a command's child writes a status line
// to every descriptor it can find (its own and the shell's), and the
// reply has the command's own status; a command holds 0, 1 and 2 only.
func TestSessionStatusCannotBeForged(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		name := openSession(t, cl, nil)
		r := cl.run(name, "ls /proc/self/fd", nil)
		wantOut(t, r, "0\n1\n2\n3\n", "") // ls's own directory is 3
		r = cl.run(name, "sh -c 'ls /proc/$$/fd'", nil)
		wantOut(t, r, "0\n1\n2\n", "")
		forge := `sh -c 'for f in /proc/$$/fd/* /proc/$PPID/fd/*; do for n in 0 1 2 3 4 5 6 7 8 9 10 11 12; do printf "%s 0\n" "$n" > "$f"; done; done 2>/dev/null; exit 0'; (exit 5)`
		for i := 0; i < 3; i++ {
			r = cl.run(name, forge, nil)
			wantExit(t, r, "exited", 5)
		}
		wantExit(t, cl.run(name, "true", nil), "exited", 0)
	})
}

func readPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 5*time.Second, "a pid in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// TestSessionAtTrialBoundary: the trial boundary treats an open session
// like a kept scope: its processes are survivors, and settling them
// closes it.
func TestSessionAtTrialBoundary(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		dir := t.TempDir()
		name := openSession(t, cl, msg{"cwd": dir})
		wantExit(t, cl.run(name, "sleep 1000 & echo $! > bg.pid; echo $$ > shell.pid", nil), "exited", 0)
		bg, shell := readPid(t, filepath.Join(dir, "bg.pid")), readPid(t, filepath.Join(dir, "shell.pid"))

		r := boundary(t, cl, nil)
		pids := survivorPids(t, r)
		if !slices.Contains(pids, bg) || !slices.Contains(pids, shell) {
			t.Fatalf("boundary survivors %v; want the shell %d and its job %d", pids, shell, bg)
		}
		wantOut(t, cl.run(name, "echo on", nil), "on\n", "")

		r = boundary(t, cl, msg{"survivors": "settle"})
		if r["quiescent"] != true {
			t.Fatalf("settling boundary: %v; want quiescent", r)
		}
		if alive(bg) || alive(shell) {
			t.Fatalf("after the settling boundary: job %d alive %v, shell %d alive %v", bg, alive(bg), shell, alive(shell))
		}
		if e := cl.request(msg{"kind": "execute", "session": name, "script": "true"}); e["kind"] != "error" {
			t.Fatalf("the settled session still runs commands: %v", e)
		}
	})
}

// TestSessionIdleTimeout: a session unused for --session-idle-timeout is
// closed, its processes settled.
func TestSessionIdleTimeout(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--session-idle-timeout", "500ms"}})
		cl := d.connect()
		dir := t.TempDir()
		name := openSession(t, cl, msg{"cwd": dir})
		wantExit(t, cl.run(name, "sleep 1000 & echo $! > bg.pid", nil), "exited", 0)
		bg := readPid(t, filepath.Join(dir, "bg.pid"))
		waitFor(t, 10*time.Second, "the idle session to be closed", func() bool {
			st := cl.request(msg{"kind": "status"})
			list, _ := st["sessions"].([]any)
			return len(list) == 0 && !alive(bg)
		})
		if e := cl.request(msg{"kind": "execute", "session": name, "script": "true"}); e["kind"] != "error" {
			t.Fatalf("the idle session still runs commands: %v", e)
		}
	})
}

// TestSessionBadRequests: what a session cannot do is a clear error,
// never a hang, and the session serves on.
func TestSessionBadRequests(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	name := openSession(t, cl, nil)
	for _, c := range []struct {
		m        msg
		category string
		says     string
	}{
		{msg{"kind": "open", "shell": "zsh"}, "bad-request", `"shell"`},
		{msg{"kind": "open", "command": "/bin/sh"}, "bad-request", `"command"`},
		{msg{"kind": "execute", "session": name}, "bad-request", `"script"`},
		{msg{"kind": "execute", "session": name, "script": "true", "command": "true"}, "bad-request", `"command"`},
		{msg{"kind": "execute", "script": "true"}, "bad-request", `"session"`},
		{msg{"kind": "execute", "session": name, "script": "true", "environment": msg{"A": "1"}}, "bad-request", "open"},
		{msg{"kind": "execute", "session": "s-999", "script": "true"}, "not-found", "session"},
		{msg{"kind": "close", "session": "s-999"}, "not-found", "session"},
		{msg{"kind": "read", "session": name}, "bad-request", "no terminal"},
		{msg{"kind": "read", "session": name, "waitMs": -1}, "bad-request", `"waitMs"`},
		{msg{"kind": "stdin", "session": name, "data": "x"}, "bad-request", "no terminal"},
	} {
		r := cl.request(c.m)
		e, _ := r["error"].(map[string]any)
		if r["kind"] != "error" || e["category"] != c.category || !strings.Contains(fmt.Sprint(e["message"]), c.says) {
			t.Errorf("%v: got %v; want a %s error that says %s", c.m, r, c.category, c.says)
		}
	}
	wantOut(t, cl.run(name, "echo fine", nil), "fine\n", "")
}

// TestSessionPosixSh: a session of POSIX sh (dash here) keeps its state,
// and a syntax error is 2 with the shell alive, as with bash.
func TestSessionPosixSh(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	name := openSession(t, cl, msg{"shell": "sh"})
	wantExit(t, cl.run(name, "cd /tmp; V=7; g() { echo \"g$V\"; }", nil), "exited", 0)
	wantExit(t, cl.run(name, "if then", nil), "exited", 2)
	wantExit(t, cl.run(name, "echo 'open", nil), "exited", 2)
	r := cl.run(name, "g; pwd; (exit 5)", nil)
	wantExit(t, r, "exited", 5)
	wantOut(t, r, "g7\n/tmp\n", "")
}

// TestSessionCommandOutlivesNoConnection: a command whose connection is
// lost is ended as at its deadline (rule 6.4), and the session, opened
// elsewhere, serves on.
func TestSessionCommandOutlivesNoConnection(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		dir := t.TempDir()
		name := openSession(t, cl, msg{"cwd": dir})
		lost := d.connect()
		lost.send(msg{"kind": "execute", "session": name, "script": "echo $$ > shell.pid; sleep 1000 & echo $! > sleep.pid; wait"})
		sleeper := readPid(t, filepath.Join(dir, "sleep.pid"))
		shell := readPid(t, filepath.Join(dir, "shell.pid"))
		lost.c.Close()
		waitFor(t, 10*time.Second, "the lost connection's command to be settled", func() bool { return !alive(sleeper) })
		var r msg
		waitFor(t, 10*time.Second, "the session to take a command", func() bool {
			r = cl.request(msg{"kind": "execute", "session": name, "script": "echo $$"})
			return r["kind"] == "executed"
		})
		if r["stdout"] != strconv.Itoa(shell)+"\n" {
			t.Fatalf("after the lost connection: %v; want the same shell %d", r, shell)
		}
	})
}

// TestSessionLimitHoldsUnderConcurrentOpens: --max-sessions holds when
// many opens race, each on a connection of its own.
func TestSessionLimitHoldsUnderConcurrentOpens(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-sessions", "2"}})
	const n = 8
	conns := make([]*client, n)
	for i := range conns {
		conns[i] = d.connect()
	}
	results := make(chan msg, n)
	for _, cl := range conns {
		cl.send(msg{"kind": "open"})
	}
	for _, cl := range conns {
		results <- cl.read(30 * time.Second)
	}
	opened := 0
	for i := 0; i < n; i++ {
		r := <-results
		switch {
		case r["kind"] == "opened":
			opened++
		case r["kind"] == "error" && strings.Contains(fmt.Sprint(r["error"]), "--max-sessions"):
		default:
			t.Fatalf("a racing open: %v", r)
		}
	}
	if opened != 2 {
		t.Fatalf("%d of %d racing opens were opened; want --max-sessions 2", opened, n)
	}
}
