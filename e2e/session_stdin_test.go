package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A session's command with "stream" and "stdin" (protocol 4.7: "input and
// stdin feed the command"; everything else as for any execution): output
// messages while it runs, stdin through a FIFO relayd makes for each
// command (docs/scopes.md, "Shell sessions").

// fifoTmp is a temporary directory for relayd (TMPDIR) where the test
// sees the FIFO directories its session commands get; others may pass
// through it, as through /tmp.
func fifoTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "relayd-fifo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fifosIn lists what relayd left in its temporary directory.
func fifosIn(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func wantNoFifo(t testing.TB, dir, when string) {
	t.Helper()
	if left := fifosIn(t, dir); len(left) != 0 {
		t.Fatalf("%s, relayd's temporary directory holds %v; want nothing", when, left)
	}
}

// runStarted sends a session's execute that answers started (stream or
// stdin) and returns the execution's name.
func (cl *client) runStarted(name, script string, extra msg) string {
	cl.t.Helper()
	m := msg{"kind": "execute", "id": "c", "session": name, "script": script}
	for k, v := range extra {
		m[k] = v
	}
	cl.send(m)
	r := cl.read(10 * time.Second)
	if r == nil || r["kind"] != "started" {
		cl.t.Fatalf("execute %v in %s: got %v; want started", extra, name, r)
	}
	return r["execution"].(string)
}

func TestSessionStreamOutput(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		name := openSession(t, cl, nil)
		cl.runStarted(name, "echo one; echo two >&2; for i in $(seq 1 2000); do echo line $i; done; exit_code() { return 5; }; exit_code", msg{"stream": true})
		outputs, r := cl.untilExecuted(30 * time.Second)
		wantExit(t, r, "exited", 5)
		stdout, dropped := streamed(t, outputs, "stdout")
		stderr, _ := streamed(t, outputs, "stderr")
		if dropped != 0 || stdout != r["stdout"] || stderr != "two\n" || r["stderr"] != "two\n" ||
			!strings.HasPrefix(stdout, "one\nline 1\n") || !strings.HasSuffix(stdout, "line 2000\n") {
			t.Fatalf("streamed stdout %q... (dropped %d), stderr %q; reply %v", stdout[:min(len(stdout), 40)], dropped, stderr, r)
		}
		// Nothing of it follows the reply: the next reply comes first.
		r = cl.run(name, "echo after", nil)
		wantOut(t, r, "after\n", "")

		// A pty session streams the terminal, as a pty execution does.
		pty := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
		cl.runStarted(pty, "printf 'tty:%s\\n' ok", msg{"stream": true})
		outputs, r = cl.untilExecuted(30 * time.Second)
		wantExit(t, r, "exited", 0)
		data, _ := streamed(t, outputs, "pty")
		if !strings.Contains(data, "tty:ok") || !strings.Contains(r["stdout"].(string), "tty:ok") {
			t.Fatalf("pty session: streamed %q; reply %v", data, r)
		}
	})
}

func TestSessionStdin(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		tmp := fifoTmp(t)
		d := startRelayd(t, opts{scope: mech, env: []string{"TMPDIR=" + tmp}, args: []string{"--max-line-bytes", "4194304"}})
		defer d.stopClean()
		cl := d.connect()
		name := openSession(t, cl, nil)

		// Bytes of every value, NULs, and a chunk larger than a pipe holds.
		data := make([]byte, 0, 3<<20)
		for i := range 1 << 20 {
			data = append(data, byte(i*7))
		}
		data = append(data, 0, 0, 'x', 0)
		sum := sha256.Sum256(data)
		x := cl.runStarted(name, "sha256sum; echo end", msg{"stdin": true})
		if _, err := sendStdin(cl, x, data[:5], 5, false); err != nil {
			t.Fatal(err)
		}
		if _, err := sendStdin(cl, x, data[5:], 1<<20, true); err != nil {
			t.Fatal(err)
		}
		r := cl.read(30 * time.Second)
		wantExit(t, r, "exited", 0)
		if want := hex.EncodeToString(sum[:]) + "  -\nend\n"; r["stdout"] != want {
			t.Fatalf("stdin of %d bytes: stdout %q; want %q", len(data), r["stdout"], want)
		}
		wantNoFifo(t, tmp, "after the command")

		// The shell's own read, line by line, and the end of file.
		x = cl.runStarted(name, "while read -r l; do printf '[%s]' \"$l\"; done; echo", msg{"stdin": true})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "a b\nc"})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "\nd\n", "eof": true})
		r = cl.read(30 * time.Second)
		wantOut(t, r, "[a b][c][d]\n", "")

		// input and stdin: input first.
		x = cl.runStarted(name, "cat", msg{"stdin": true, "input": "in-"})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "more", "eof": true})
		wantOut(t, cl.read(30*time.Second), "in-more", "")

		// A command that does not read its stdin ends, and its FIFO goes.
		cl.runStarted(name, "echo skipped", msg{"stdin": true})
		wantOut(t, cl.read(30*time.Second), "skipped\n", "")
		wantNoFifo(t, tmp, "after a command that did not read its stdin")
		r = cl.run(name, "readlink /proc/self/fd/0", nil)
		wantOut(t, r, "/dev/null\n", "")

		// A deadline while the shell itself reads (read), and while a
		// program does (cat): the command is interrupted, the session serves on.
		for _, script := range []string{"read -r x; echo got $x", "cat; echo after"} {
			cl.runStarted(name, script, msg{"stdin": true, "timeoutMs": 300})
			r = cl.read(30 * time.Second)
			wantExit(t, r, "framework_timeout", 124)
			if r["sessionEnded"] == true {
				t.Fatalf("%s: the deadline ended the session: %v", script, r)
			}
			wantOut(t, cl.run(name, "echo alive", nil), "alive\n", "")
			wantNoFifo(t, tmp, "after a deadline")
		}

		// An sh (dash) session takes input, NULs included, through the FIFO.
		sh := openSession(t, cl, msg{"shell": "sh"})
		bin := []byte{0, 1, 2, 0xff, 0, '\n', 'z'}
		bs := sha256.Sum256(bin)
		r = cl.run(sh, "sha256sum", msg{"input": base64.StdEncoding.EncodeToString(bin), "inputEncoding": "base64"})
		wantOut(t, r, hex.EncodeToString(bs[:])+"  -\n", "")
		x = cl.runStarted(sh, "cat; echo .", msg{"stdin": true})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "dash", "eof": true})
		wantOut(t, cl.read(30*time.Second), "dash.\n", "")

		// With a pty, stdin is keystrokes into the terminal; its end of
		// file leaves the terminal as it is.
		pty := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
		x = cl.runStarted(pty, "read -r k; echo got:$k", msg{"stdin": true})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "typed\r", "eof": true})
		r = cl.read(30 * time.Second)
		wantExit(t, r, "exited", 0)
		if !strings.Contains(r["stdout"].(string), "got:typed") {
			t.Fatalf("pty session's stdin: %v", r)
		}
		if r = cl.run(pty, "echo o''n", nil); !strings.Contains(r["stdout"].(string), "on\r\n") {
			t.Fatalf("the pty session after stdin's end: %v", r)
		}
		// Keystrokes the command left unread are dropped, not read by
		// the shell as its next command line.
		planted := filepath.Join(t.TempDir(), "planted")
		x = cl.runStarted(pty, "read -r k; echo got:$k", msg{"stdin": true})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "one\rtouch " + q(planted) + "\r"})
		if r = cl.read(30 * time.Second); !strings.Contains(r["stdout"].(string), "got:one") {
			t.Fatalf("pty session's stdin: %v", r)
		}
		if r = cl.run(pty, "echo o''k", nil); !strings.Contains(r["stdout"].(string), "ok\r\n") {
			t.Fatalf("the pty session after unread keystrokes: %v", r)
		}
		if _, err := os.Stat(planted); err == nil {
			t.Fatalf("the shell ran the keystrokes its command left unread")
		}

		// close while a command waits for its stdin: no FIFO is left.
		x = cl.runStarted(name, "cat", msg{"stdin": true})
		cl.send(msg{"kind": "stdin", "execution": x, "data": "part"})
		other := d.connect()
		c := other.request(msg{"kind": "close", "session": name})
		if c["kind"] != "closed" {
			t.Fatalf("close: %v", c)
		}
		if r := cl.read(30 * time.Second); r["kind"] != "executed" {
			t.Fatalf("the command of a closed session: %v", r)
		}
		wantNoFifo(t, tmp, "after close")
	})
}

// TestSessionStdinAtShutdown: relayd shutting down while a session's
// command waits for its stdin leaves no FIFO; one a killed relayd left is
// removed by the next relayd that makes one.
func TestSessionStdinAtShutdown(t *testing.T) {
	tmp := fifoTmp(t)
	d := startRelayd(t, opts{env: []string{"TMPDIR=" + tmp}})
	cl := d.connect()
	name := openSession(t, cl, nil)
	cl.runStarted(name, "cat", msg{"stdin": true})
	if len(fifosIn(t, tmp)) != 1 {
		t.Fatalf("while the command runs, %v; want its FIFO's directory", fifosIn(t, tmp))
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("relayd exited %d", code)
	}
	wantNoFifo(t, tmp, "after shutdown")

	d = startRelayd(t, opts{env: []string{"TMPDIR=" + tmp}})
	cl = d.connect()
	name = openSession(t, cl, nil)
	cl.runStarted(name, "cat", msg{"stdin": true})
	left := fifosIn(t, tmp)
	d.signal(syscall.SIGKILL)
	d.wait(30 * time.Second)
	if len(left) != 1 {
		t.Fatalf("while the command runs, %v; want its FIFO's directory", left)
	}

	d = startRelayd(t, opts{env: []string{"TMPDIR=" + tmp}})
	defer d.stopClean()
	cl = d.connect()
	name = openSession(t, cl, nil)
	x := cl.runStarted(name, "cat", msg{"stdin": true})
	cl.send(msg{"kind": "stdin", "execution": x, "data": "ok", "eof": true})
	wantOut(t, cl.read(30*time.Second), "ok", "")
	wantNoFifo(t, tmp, "after a relayd that was killed, and a command of the next")
}

// TestSessionStdinSubjectUser: the FIFO of a session that runs as nobody
// is nobody's, mode 0600, in a directory of relayd's that others pass
// through and cannot list; another uid opens neither.
func TestSessionStdinSubjectUser(t *testing.T) {
	tmp := fifoTmp(t)
	d := startRelayd(t, opts{env: []string{"TMPDIR=" + tmp}, args: []string{"--subject-user", "nobody", "--workspace", "/"}})
	defer d.stopClean()
	cl := d.connect()
	name := openSession(t, cl, nil)
	x := cl.runStarted(name, "readlink /proc/self/fd/0; id -un; cat", msg{"stdin": true, "stream": true})
	var seen string
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(seen, "\n") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the command printed %q", seen)
		}
		r := cl.read(20 * time.Second)
		if r == nil || r["kind"] != "output" {
			t.Fatalf("got %v; want output", r)
		}
		seen += r["data"].(string)
	}
	lines := strings.Split(seen, "\n")
	path := lines[0]
	if lines[1] != "nobody" || !strings.HasPrefix(path, tmp+"/relayd-stdin-") {
		t.Fatalf("the command's stdin is %q, its user %q", path, lines[1])
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	var dst syscall.Stat_t
	if err := syscall.Lstat(filepath.Dir(path), &dst); err != nil {
		t.Fatal(err)
	}
	if st.Mode != syscall.S_IFIFO|0o600 || st.Uid != 65534 || dst.Mode != syscall.S_IFDIR|0o711 || dst.Uid != 0 {
		t.Fatalf("FIFO mode %o uid %d, directory mode %o uid %d; want a 0600 FIFO of nobody's in a 0711 directory of root's",
			st.Mode, st.Uid, dst.Mode, dst.Uid)
	}
	// Another uid: neither the FIFO nor a listing of its directory.
	for _, script := range []string{"exec 3<>" + q(path), "ls " + q(filepath.Dir(path))} {
		cmd := osexec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 12345, Gid: 12345}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), "ermission denied") {
			t.Fatalf("uid 12345: %s: %v %q; want permission denied", script, err, errb.String())
		}
	}
	cl.send(msg{"kind": "stdin", "execution": x, "data": "fed", "eof": true})
	outputs, r := cl.untilExecuted(30 * time.Second)
	rest, _ := streamed(t, outputs, "stdout")
	wantExit(t, r, "exited", 0)
	if seen+rest != r["stdout"] || !strings.HasSuffix(r["stdout"].(string), "nobody\nfed") {
		t.Fatalf("streamed %q then %q; reply %v", seen, rest, r)
	}
	wantNoFifo(t, tmp, "after the command")
}
