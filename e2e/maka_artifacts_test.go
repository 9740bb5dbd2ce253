package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The names Maka's relay writes and its controller inventories
// (relay_agent.py, SUBJECT_STDOUT_PATH and SUBJECT_STDERR_PATH).
const (
	makaStdout = "maka-subject.stdout.txt"
	makaStderr = "maka-subject.stderr.txt"
)

// wantArtifacts waits for dir to hold exactly Maka's two files with these
// contents: the copies are drained beside the reply, not before it.
func wantArtifacts(t *testing.T, dir, what, stdout, stderr string) {
	t.Helper()
	var got [2]string
	var names []string
	ok := func() bool {
		names = nil
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			names = append(names, e.Name())
		}
		o, _ := os.ReadFile(filepath.Join(dir, makaStdout))
		e, _ := os.ReadFile(filepath.Join(dir, makaStderr))
		got = [2]string{string(o), string(e)}
		return slices.Equal(names, []string{makaStderr, makaStdout}) && got == [2]string{stdout, stderr}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s holds %q, stdout %q, stderr %q; want only %s %q and %s %q",
				what, dir, names, got[0], got[1], makaStdout, stdout, makaStderr, stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantMode(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s has mode %04o; want 0700 (Maka's relay: mkdir -p, chmod 700)", dir, fi.Mode().Perm())
	}
}

// --artifacts-layout maka writes Maka's relay's two files as it writes
// them under Harbor, whose exec merges stderr into stdout: the subject's
// raw output, both streams, whole, in the stdout file and nothing in the
// stderr file, in a directory made with mkdir -p and chmod 700,
// overwritten by each execution (one that writes less leaves nothing of
// the one before, one that never starts leaves them empty), bounded by
// --max-artifact-bytes, with a carrier or without; without captureStdout
// the stdout file holds stderr alone, as the relay sends stdout to
// /dev/null (TestMakaHarborMerge has the rest).
func TestMakaArtifacts(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "logs", "artifacts") // neither exists yet
	d := startRelayd(t, opts{args: []string{"--artifacts-layout", "maka", "--artifacts-dir", dir, "--max-artifact-bytes", "1KiB"}})
	wantMode(t, dir)
	c := d.connect()

	tok := strings.Repeat("5e", 16)
	fr := frame(tok, []byte(`{"answer":42}`))
	r := c.sh(`printf 'noise\n%s\n' '`+fr+`'; printf 'err\001\n' >&2`, msg{"resultToken": tok})
	wantExit(t, r, "exited", 0)
	if r["stdout"] != `{"answer":42}` {
		t.Fatalf("carrier stdout %q; want the payload (the artifact must not change the carrier)", r["stdout"])
	}
	wantArtifacts(t, dir, "carrier", "noise\n"+fr+"\nerr\x01\n", "")

	// Overwritten, not appended, and mode 0700 again after a chmod.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r = c.sh(`printf 'a\377b'; printf e >&2`, nil)
	wantExit(t, r, "exited", 0)
	wantArtifacts(t, dir, "raw", "a\xffbe", "")
	wantMode(t, dir)

	// Bounded by --max-artifact-bytes, per stream.
	r = c.sh(`head -c 5000 /dev/zero | tr '\0' o; head -c 3000 /dev/zero | tr '\0' e >&2`, nil)
	wantExit(t, r, "exited", 0)
	wantArtifacts(t, dir, "past --max-artifact-bytes", strings.Repeat("o", 1024), "")

	r = c.sh(`printf out; printf err >&2`, msg{"captureStdout": false})
	wantExit(t, r, "exited", 0)
	wantArtifacts(t, dir, "captureStdout false", "err", "")

	// The directory removed between executions is made again.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	r = c.sh(`printf again`, nil)
	wantExit(t, r, "exited", 0)
	wantArtifacts(t, dir, "after rm -r", "again", "")
	wantMode(t, dir)

	// An execution that never starts leaves no earlier one's output.
	r = c.request(msg{"kind": "execute", "command": "/nonexistent/program", "args": []string{}})
	wantExit(t, r, "exited", 127)
	wantArtifacts(t, dir, "not found", "", "")

	// Concurrent executions: the one that began last owns the files; an
	// earlier one still running writes no more into them.
	goFile := filepath.Join(d.dir, "go")
	early := d.connect()
	early.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c",
		`printf A1; printf a1 >&2; while [ ! -e ` + q(goFile) + ` ]; do sleep 0.01; done; printf A2; printf a2 >&2`}})
	wantArtifacts(t, dir, "first of two", "A1a1", "")
	wantExit(t, c.sh(`printf B`, nil), "exited", 0)
	wantArtifacts(t, dir, "second of two", "B", "")
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = early.read(10 * time.Second)
	if r["stdout"] != "A1a1A2a2" {
		t.Fatalf("the earlier execution's reply %v; want stdout A1a1A2a2", r)
	}
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		wantArtifacts(t, dir, "after the earlier one ended", "B", "")
	}
	d.stopClean()
}

// relaydRefusal is the one line relayd printed when it refused to start.
func relaydRefusal(t *testing.T, d *daemon) string {
	t.Helper()
	if code := d.wait(10 * time.Second); code != 2 {
		t.Fatalf("exit %d; want 2 (refused to start); log: %s", code, d.logs.String())
	}
	var lines []string
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.HasPrefix(line, "relayd: ") {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("relayd printed %q; want one refusal line; log: %s", lines, d.logs.String())
	}
	return lines[0]
}

// otherNetns starts a sleeper in a network namespace of its own and
// returns its /proc/PID/ns/net; cleanup kills it.
func otherNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	cmd := exec.Command("unshare", "--net", "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare --net: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
	own := childNetns(t)
	waitFor(t, 5*time.Second, "the sleeper in its own network namespace", func() bool {
		l, err := os.Readlink(path)
		return err == nil && l != own
	})
	return path
}

// childNetns is the network namespace a process the test starts runs in:
// relayd's. Not /proc/self/ns/net, the main thread's: a test that enters
// another namespace on a locked thread (deadpeer_test.go) can leave the
// main thread there when its goroutine ran on it.
func childNetns(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	l, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// childNetnsPath is the nsfs path of the network namespace of a child the
// test starts (relayd's namespace), alive until the test ends.
func childNetnsPath(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
}

// bindNetns bind-mounts ns (an nsfs file) on file, as ip netns and
// container runtimes pin a namespace; it is unmounted at cleanup.
func bindNetns(t *testing.T, ns, file string) {
	t.Helper()
	if err := unix.Mount(ns, file, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount %s on %s: %v", ns, file, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(file, unix.MNT_DETACH) })
}

// --require-netns: relayd refuses to start (exit 2, one line naming both
// namespaces) when its subjects would not run in the one named, as a path
// or as net:[INODE], or when it cannot be read; it starts when they would;
// and an execute after the named namespace changed (the bind mount now
// pins another one) is answered 111 execution-scope-unavailable, with
// nothing run, until it is right again.
func TestMakaRequireNetns(t *testing.T) {
	other := otherNetns(t)
	own, err := childNetns(t), error(nil) // relayd's, since the test starts it
	if err != nil {
		t.Fatal(err)
	}
	otherName, err := os.Readlink(other)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ns string
		want     []string
	}{
		{"path of another namespace", other, []string{other, otherName, own}},
		{"net:[INODE] of another namespace", otherName, []string{otherName, own}},
		{"not a namespace", plain, []string{plain, "not a namespace file", own}},
		{"missing", "/proc/0/ns/net", []string{"/proc/0/ns/net", own}},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			d := prepare(t, opts{args: []string{"--require-netns", tc.ns}})
			d.start2(t, -1)
			line := relaydRefusal(t, d)
			for _, w := range append(tc.want, "--require-netns") {
				if !strings.Contains(line, w) {
					t.Fatalf("refusal %q; want it to name %q", line, w)
				}
			}
		})
	}
	t.Run("net:[INODE] of relayd's own", func(t *testing.T) {
		d := startRelayd(t, opts{args: []string{"--require-netns", own}})
		c := d.connect()
		wantExit(t, c.sh("exit 0", nil), "exited", 0)
		d.stopClean()
	})
	t.Run("changed after start", func(t *testing.T) {
		pin := filepath.Join(t.TempDir(), "egress-netns")
		if err := os.WriteFile(pin, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		bindNetns(t, childNetnsPath(t), pin) // relayd's, not the main thread's (childNetns)
		d := startRelayd(t, opts{args: []string{"--require-netns", pin}})
		c := d.connect()
		marker := filepath.Join(d.dir, "ran")
		r := c.sh("touch "+q(marker), nil)
		wantExit(t, r, "exited", 0)
		if err := os.Remove(marker); err != nil {
			t.Fatalf("the subject did not run: %v", err)
		}

		if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		bindNetns(t, other, pin)
		r = c.sh("touch "+q(marker), nil)
		wantExit(t, r, "exited", 111)
		diag, _ := r["diagnostic"].(map[string]any)
		if diag["category"] != "execution-scope-unavailable" {
			t.Fatalf("diagnostic %v; want execution-scope-unavailable", r["diagnostic"])
		}
		detail, _ := r["detail"].(string)
		if !strings.Contains(detail, "--require-netns") || !strings.Contains(detail, otherName) || !strings.Contains(detail, own) {
			t.Fatalf("detail %q; want --require-netns and both namespaces named", detail)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the subject ran although its network namespace was not the required one")
		}

		if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		bindNetns(t, childNetnsPath(t), pin) // relayd's, not the main thread's (childNetns)
		wantExit(t, c.sh("exit 0", nil), "exited", 0)
		d.stopClean()
	})
}

// hasCap reports whether a capability set of a /proc/PID/status holds bit.
func hasCap(t *testing.T, status []byte, set string, bit uint) bool {
	t.Helper()
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, set+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s line %q: %v", set, line, err)
			}
			return n&(1<<bit) != 0
		}
	}
	t.Fatalf("no %s line in %q", set, status)
	return false
}

// With MAKA_EVAL_EGRESS_REQUIRED=1 in its environment relayd refuses to
// start (exit 2, one line naming them) while it holds NET_RAW or NET_ADMIN
// in any capability set, as Maka's relay refuses such a subject, unless
// --drop-capabilities names both (one it does not drop still counts).
// Started without them (setpriv), it runs, and its subject lacks them too.
// --drop-capabilities refuses an unknown name, naming it.
func TestMakaEgressCapabilities(t *testing.T) {
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !hasCap(t, self, "CapBnd", unix.CAP_NET_RAW) || !hasCap(t, self, "CapBnd", unix.CAP_NET_ADMIN) {
		t.Skip("the test process lacks NET_RAW or NET_ADMIN: nothing to refuse")
	}
	required := []string{"MAKA_EVAL_EGRESS_REQUIRED=1"}
	t.Run("refused while held", func(t *testing.T) {
		for _, args := range [][]string{nil, {"--drop-capabilities", "sys_admin,NET_RAW"}} {
			d := prepare(t, opts{env: required, args: args})
			d.start2(t, -1)
			line := relaydRefusal(t, d)
			want := "NET_ADMIN, NET_RAW"
			if args != nil {
				want = "NET_ADMIN (in"
			}
			for _, w := range []string{"MAKA_EVAL_EGRESS_REQUIRED=1", want, "CapBnd", "bypasses the Eval egress policy", "--drop-capabilities"} {
				if !strings.Contains(line, w) {
					t.Fatalf("%q: refusal %q; want it to name %q", args, line, w)
				}
			}
		}
	})
	t.Run("unknown capability", func(t *testing.T) {
		d := prepare(t, opts{env: required, args: []string{"--drop-capabilities", "NET_RAW,NET_ROW"}})
		d.start2(t, -1)
		if line := relaydRefusal(t, d); !strings.Contains(line, `"NET_ROW"`) || !strings.Contains(line, "--drop-capabilities") {
			t.Fatalf("refusal %q; want --drop-capabilities and the unknown name", line)
		}
	})
	t.Run("with --drop-capabilities", func(t *testing.T) {
		d := startRelayd(t, opts{env: append(required, "RELAYD_DROP_CAPABILITIES=cap_net_admin, net_raw")})
		wantExit(t, d.connect().sh("exit 0", nil), "exited", 0)
		d.stopClean()
	})
	t.Run("without them", func(t *testing.T) {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv(1) not installed (util-linux)")
		}
		d := prepare(t, opts{env: required})
		old := d.cmd
		d.cmd = exec.Command(setpriv, append([]string{"--inh-caps", "-net_raw,-net_admin", "--bounding-set", "-net_raw,-net_admin", "--"}, old.Args...)...)
		d.cmd.Dir, d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = old.Dir, old.Env, old.Stdout, old.Stderr
		d.cmd.SysProcAttr = old.SysProcAttr
		d.start()
		r := d.connect().sh("cat /proc/self/status", nil)
		wantExit(t, r, "exited", 0)
		status := []byte(r["stdout"].(string))
		for _, set := range []string{"CapPrm", "CapEff", "CapBnd"} {
			if hasCap(t, status, set, unix.CAP_NET_RAW) || hasCap(t, status, set, unix.CAP_NET_ADMIN) {
				t.Fatalf("the subject holds NET_RAW or NET_ADMIN in %s: %s", set, bytes.TrimSpace(status))
			}
		}
		d.stopClean()
	})
}
