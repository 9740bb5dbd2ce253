package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Pty sessions (protocol 4.7): an interactive shell on a terminal, read
// as a screen, typed into, resized, and still with exact statuses.

// term reads a pty session's screen.
type term struct {
	t    testing.TB
	cl   *client
	name string
	next int64
	seen strings.Builder
	pos  int // in seen, after what the last until matched
}

// until reads until the screen showed want since the last until, or fails.
func (s *term) until(want string) {
	s.t.Helper()
	from := s.pos
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.seen.String()[from:], want) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the terminal did not show %q; it showed %q", want, s.seen.String()[from:])
		}
		r := s.cl.request(msg{"kind": "read", "session": s.name, "from": s.next, "waitMs": 2000})
		if r["kind"] != "terminal" {
			s.t.Fatalf("read: %v", r)
		}
		s.seen.WriteString(r["data"].(string))
		s.next = num(s.t, r, "next")
	}
	s.pos = from + strings.Index(s.seen.String()[from:], want) + len(want)
}

// running reports whether a process whose command line is argv runs.
func running(argv string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == argv {
			return true
		}
	}
	return false
}

func (s *term) typeKeys(keys string) {
	s.t.Helper()
	s.cl.send(msg{"kind": "stdin", "session": s.name, "data": keys})
}

func TestSessionPty(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		dir := t.TempDir()
		name := openSession(t, cl, msg{"cwd": dir, "pty": msg{"rows": 24, "cols": 80}})
		s := &term{t: t, cl: cl, name: name}
		s.typeKeys("echo $((6*7)) $TERM; tty\r")
		s.until("42 xterm-256color")
		s.until("/dev/pts/")

		// A command through execute: its status from the channel, even on a terminal.
		r := cl.run(name, "cd "+dir+" && stty size && (exit 6)", nil)
		wantExit(t, r, "exited", 6)
		if !strings.Contains(r["stdout"].(string), "24 80") || r["cwd"] != dir {
			t.Fatalf("execute on the pty session: %v", r)
		}
		cl.send(msg{"kind": "resize", "session": name, "rows": 40, "cols": 100})
		waitFor(t, 10*time.Second, "the resize", func() bool {
			r := cl.run(name, "stty size", nil)
			return strings.Contains(r["stdout"].(string), "40 100")
		})

		// A real python3 REPL.
		s.typeKeys("python3 -i -q\r")
		s.until(">>> ")
		s.typeKeys("print(6 * 7 + 1)\r")
		s.until("43")
		s.typeKeys("exit()\r")
		s.until("bash-")

		// A real vim: open, type, save, quit; the file is written.
		file := filepath.Join(dir, "notes.txt")
		s.typeKeys("vi -u NONE -N " + file + "\r")
		s.until("notes.txt")
		s.typeKeys("ihello from vim\x1b:wq\r")
		waitFor(t, 10*time.Second, "vim to write the file", func() bool {
			b, err := os.ReadFile(file)
			return err == nil && string(b) == "hello from vim\n"
		})
		s.until("bash-") // vim quit: the prompt again
		r = cl.run(name, "echo back", nil)
		wantExit(t, r, "exited", 0)

		// Ctrl-C as a keystroke interrupts the foreground job.
		s.typeKeys("sleep 987.25; echo after-sleep\r")
		waitFor(t, 10*time.Second, "sleep in the foreground", func() bool { return running("sleep\x00987.25\x00") })
		e := cl.request(msg{"kind": "execute", "session": name, "script": "true"})
		if e["kind"] != "error" || !strings.Contains(e["error"].(map[string]any)["message"].(string), "foreground") {
			t.Fatalf("execute while sleep has the terminal: %v; want busy", e)
		}
		s.typeKeys("\x03")
		waitFor(t, 10*time.Second, "the prompt after Ctrl-C", func() bool {
			e := cl.request(msg{"kind": "execute", "session": name, "script": "true"})
			return e["kind"] == "executed"
		})
		r = cl.run(name, "echo alive", nil)
		if !strings.Contains(r["stdout"].(string), "alive") {
			t.Fatalf("after Ctrl-C: %v", r)
		}
		if c := cl.request(msg{"kind": "close", "session": name}); c["kind"] != "closed" || c["settlement"] != "settled" {
			t.Fatalf("close: %v", c)
		}
	})
}

// TestSessionReadsAreBounded: reads that wait are bounded per connection
// (rule 6.11): one past the bound is busy, and the waiting ones answer.
func TestSessionReadsAreBounded(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	name := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
	r := cl.request(msg{"kind": "read", "session": name, "waitMs": 2000})
	far := num(t, r, "next") + 1<<40 // nothing will come there
	for i := 0; i < 4; i++ {
		cl.send(msg{"kind": "read", "session": name, "from": far, "waitMs": 1000})
	}
	e := cl.request(msg{"kind": "read", "session": name, "from": far, "waitMs": 1000})
	if e["kind"] != "error" || !strings.Contains(fmt.Sprint(e["error"]), "busy") {
		t.Fatalf("a fifth waiting read: %v; want busy", e)
	}
	for i := 0; i < 4; i++ {
		if r := cl.read(10 * time.Second); r["kind"] != "terminal" {
			t.Fatalf("a waiting read: %v", r)
		}
	}
}

// TestSessionPtyReadAfterEnd: a pty session's shell that printed and
// exited at once (a person's "cmd; exit") is read after its end: the
// last bytes and "ended", not a not-found. relayctl shell reads again
// only once a read answered; on a loaded machine the shell's exit and
// its scope's settling came first, and the output before "exit" was lost.
func TestSessionPtyReadAfterEnd(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		name := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
		cl.send(msg{"kind": "stdin", "session": name, "data": "echo last-$((6*7)); exit 7\r"})
		waitFor(t, 20*time.Second, "the session to end", func() bool {
			list, _ := cl.request(msg{"kind": "status"})["sessions"].([]any)
			return len(list) == 0
		})
		var seen strings.Builder
		var next int64
		for i := 0; ; i++ {
			r := cl.request(msg{"kind": "read", "session": name, "from": next, "waitMs": 2000})
			if r["kind"] != "terminal" {
				t.Fatalf("read %d after the end: %v; want its terminal", i, r)
			}
			seen.WriteString(r["data"].(string))
			next = num(t, r, "next")
			if r["ended"] == true {
				break
			}
		}
		if !strings.Contains(seen.String(), "last-42") {
			t.Fatalf("the screen after the end showed %q; want last-42", seen.String())
		}
		// Typing into it is still a not-found: only its screen is kept.
		if e := cl.request(msg{"kind": "stdin", "session": name, "data": "x", "id": 9}); e["kind"] != "error" {
			t.Fatalf("stdin to an ended session: %v; want an error", e)
		}
	})
}

// A pty session whose terminal is busy printing when relayd stops: the
// terminal's last bytes come after the session ended, and relayd still
// exits 0 (they reached its ring after the end, which panicked relayd).
func TestSessionPtyOutputAtShutdown(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		for round := 0; round < 5; round++ {
			d := startRelayd(t, opts{scope: mech})
			cl := d.connect()
			name := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
			s := &term{t: t, cl: cl, name: name}
			s.typeKeys("stty raw -echo; echo rea''dy; cat\r")
			s.until("ready")
			for i := 0; i < 20; i++ {
				s.typeKeys("k")
			}
			s.until("kkkkkkkkkkkkkkkkkkkk")
			d.stopClean()
		}
	})
}

// TestSessionPtyCommandOutput: a command's stdout on a pty session is
// what the command printed, as the terminal shows it, and nothing of the
// line relayd typed (its nonce), of readline's echo or of the prompt that
// follows; the screen shows all of it. Multi-line scripts and output the
// command prints after a long silence too.
func TestSessionPtyCommandOutput(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		name := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
		for _, c := range []struct{ script, want string }{
			{"echo hi", "hi\r\n"},
			{"true", ""},
			{"printf 'a\\nb'", "a\r\nb"},
			{"for i in 1 2; do\necho $i\ndone", "1\r\n2\r\n"},
			{"sleep 0.3; echo late", "late\r\n"},
			{"echo '" + strings.Repeat("x", 150) + "'", strings.Repeat("x", 150) + "\r\n"},
		} {
			r := cl.run(name, c.script, nil)
			wantExit(t, r, "exited", 0)
			if r["stdout"] != c.want {
				t.Fatalf("%q on a pty session: stdout %q; want %q", c.script, r["stdout"], c.want)
			}
		}
		s := &term{t: t, cl: cl, name: name}
		s.until("echo hi") // the screen shows what was typed, and the output
		s.until("late")
	})
}

// Detaching from a pty session, as relayctl shell does (its connection
// closed while a read waits for the screen), is normal: relayd logs no
// warning for the reply it can no longer write.
func TestDetachLogsNoWarning(t *testing.T) {
	// At debug level, so that the failed write is seen whatever its level.
	d := startRelayd(t, opts{args: []string{"--log-level", "debug"}})
	defer d.stopClean()
	opener := d.connect()
	opened := opener.request(msg{"kind": "open", "pty": msg{"rows": 24, "cols": 80}})
	if opened["kind"] != "opened" {
		t.Fatalf("open: %v", opened)
	}
	name := opened["session"]
	viewer := d.connect()
	var next any
	waitFor(t, 10*time.Second, "the prompt on the screen", func() bool {
		r := viewer.request(msg{"kind": "read", "session": name, "from": 0})
		next = r["next"]
		return fmt.Sprint(r["data"]) != ""
	})
	viewer.send(msg{"kind": "read", "session": name, "from": next, "waitMs": 60000})
	waitFor(t, 10*time.Second, "the viewer's connection to close", func() bool {
		viewer.c.Close() // the detach: the read still waits
		return strings.Contains(d.logs.String(), `"reason":"peer closed"`)
	})
	// Something new on the screen ends the waiting read; its reply finds
	// the connection gone.
	opener.send(msg{"kind": "stdin", "session": name, "data": "echo more\r"})
	waitFor(t, 20*time.Second, "the waiting read's reply to fail", func() bool {
		return strings.Contains(d.logs.String(), "write to peer failed")
	})
	if logs := d.logs.String(); strings.Contains(logs, `"level":"warn"`) {
		t.Fatalf("a detach logged a warning:\n%s", logs)
	}
}
