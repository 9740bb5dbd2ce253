package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The program is looked up as the subject (protocol 4.2): its uid, groups
// and PATH. A first PATH directory only root may search (root's 0700 one,
// as pyenv's shims under /root) is skipped for nobody as execvp skips it,
// and the program found is the one nobody can run, on every path that
// starts a program: an execute under --subject-user, one with "user", a
// session's shell and a program on a pty.

// lookupDirs makes a directory only root may enter, holding prog and bash
// (each printing "root's copy"), and a world-readable one holding prog
// (printing "reachable copy"). It returns the PATH for a subject: the
// first, the second, then the system's.
func lookupDirs(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "relayd-lookup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	private, public := filepath.Join(base, "root"), filepath.Join(base, "pub")
	for _, d := range []struct {
		dir  string
		mode os.FileMode
	}{{base, 0o755}, {private, 0o700}, {public, 0o755}} {
		if err := os.MkdirAll(d.dir, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.dir, d.mode); err != nil { // the umask does not apply
			t.Fatal(err)
		}
	}
	write := func(path, script string) {
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(private, "prog"), "#!/bin/sh\necho \"root's copy\"\n")
	write(filepath.Join(private, "bash"), "#!/bin/sh\necho \"root's copy\"\n")
	write(filepath.Join(public, "prog"), "#!/bin/sh\necho \"reachable copy as $(id -u)\"\n")
	return private + ":" + public + ":/usr/local/bin:/usr/bin:/bin"
}

func TestLookupAsSubject(t *testing.T) {
	needRoot(t)
	path := lookupDirs(t)
	const want = "reachable copy as 65534\n"
	env := msg{"PATH": path}
	eachScope(t, func(t *testing.T, mech string) {
		t.Run("subject-user", func(t *testing.T) {
			d := startRelayd(t, opts{scope: mech, args: []string{"--subject-user", "nobody", "--workspace", "/"}})
			defer d.stopClean()
			r := d.connect().request(msg{"kind": "execute", "command": "prog", "environment": env})
			wantExit(t, r, "exited", 0)
			if r["stdout"] != want {
				t.Fatalf("prog as --subject-user nobody printed %q; want %q (reply %v)", r["stdout"], want, r)
			}
		})
		t.Run("user", func(t *testing.T) {
			d := startRelayd(t, opts{scope: mech})
			defer d.stopClean()
			cl := d.connect()
			r := cl.request(msg{"kind": "execute", "command": "prog", "user": "nobody", "cwd": "/", "environment": env})
			wantExit(t, r, "exited", 0)
			if r["stdout"] != want {
				t.Fatalf("prog with user nobody printed %q; want %q (reply %v)", r["stdout"], want, r)
			}
			// As root, root's own copy is the first: the lookup is the subject's.
			r = cl.request(msg{"kind": "execute", "command": "prog", "cwd": "/", "environment": env})
			if r["stdout"] != "root's copy\n" {
				t.Fatalf("prog as root printed %q; want root's copy (reply %v)", r["stdout"], r)
			}
		})
		t.Run("session", func(t *testing.T) {
			// The session's shell, bash, is looked up too: root's private
			// "bash" comes first in PATH; nobody gets the system's.
			d := startRelayd(t, opts{scope: mech})
			defer d.stopClean()
			cl := d.connect()
			name := openSession(t, cl, msg{"user": "nobody", "cwd": "/", "environment": env})
			r := cl.run(name, "echo $BASH_VERSION; prog", nil)
			wantExit(t, r, "exited", 0)
			out, _ := r["stdout"].(string)
			if lines := strings.Split(out, "\n"); len(lines) != 3 || lines[0] == "" || lines[1]+"\n" != want {
				t.Fatalf("a session of nobody printed %q; want bash's version, then %q", out, want)
			}
		})
		t.Run("pty", func(t *testing.T) {
			d := startRelayd(t, opts{scope: mech})
			defer d.stopClean()
			cl := d.connect()
			ptyExec(t, cl, "prog", nil, msg{"user": "nobody", "cwd": "/", "environment": env})
			var r msg
			for r == nil || r["kind"] != "executed" {
				if r = cl.read(20 * time.Second); r == nil {
					t.Fatal("connection closed before executed")
				}
			}
			wantExit(t, r, "exited", 0)
			if out, _ := r["stdout"].(string); !strings.Contains(out, "reachable copy as 65534") {
				t.Fatalf("prog on a pty as nobody showed %q; want %q (reply %v)", out, want, r)
			}
		})
	})
}
