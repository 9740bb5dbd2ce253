package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// relayd bridge (protocol 4.6): a controller reaches relayd through any
// exec channel by running `relayd bridge`, which copies its stdin to
// relayd's Unix socket (--socket, mode 0600) and the replies to its
// stdout. The end of the bridge's stdin, or its death, is a transport loss.

// bridge is one `relayd bridge` the test started, with its pipes.
type bridge struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	token string
	done  chan struct{}
	code  int
}

// startBridge runs argv (a relayd bridge, possibly through docker exec -i).
func startBridge(t *testing.T, token string, argv ...string) *bridge {
	t.Helper()
	b := &bridge{t: t, cmd: exec.Command(argv[0], argv[1:]...), token: token, done: make(chan struct{})}
	b.cmd.Env = cleanEnv()
	var err error
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.out = bufio.NewReaderSize(stdout, 1<<20)
	var stderr bytes.Buffer
	b.cmd.Stderr = &stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait() // this pid only
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill() // the bridge this test started
		<-b.done
		if t.Failed() {
			t.Logf("bridge stderr: %s", stderr.String())
		}
	})
	return b
}

func (b *bridge) send(m msg) {
	b.t.Helper()
	if _, ok := m["token"]; !ok {
		m["token"] = b.token
	}
	line, _ := json.Marshal(m)
	if _, err := b.in.Write(append(line, '\n')); err != nil {
		b.t.Fatalf("write to the bridge: %v", err)
	}
}

// read returns the next line the bridge printed, or nil at its end.
func (b *bridge) read(timeout time.Duration) msg {
	b.t.Helper()
	type got struct {
		line []byte
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		line, err := b.out.ReadBytes('\n')
		ch <- got{line, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			return nil
		}
		var m msg
		d := json.NewDecoder(bytes.NewReader(g.line))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			b.t.Fatalf("the bridge printed %q; want JSON", g.line)
		}
		return m
	case <-time.After(timeout):
		b.t.Fatalf("no line from the bridge within %s", timeout)
		return nil
	}
}

func (b *bridge) request(m msg) msg {
	b.t.Helper()
	b.send(m)
	r := b.read(30 * time.Second)
	if r == nil {
		b.t.Fatalf("the bridge ended instead of answering %v", m["kind"])
	}
	return r
}

func (b *bridge) exited(timeout time.Duration) (int, bool) {
	select {
	case <-b.done:
		return b.code, true
	case <-time.After(timeout):
		return 0, false
	}
}

func hostBridge(t *testing.T, d *daemon) *bridge {
	t.Helper()
	return startBridge(t, d.token, relaydBin, "bridge", "--socket", filepath.Join(d.dir, "relayd.sock"))
}

func TestBridgeServesTheProtocol(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		sock := filepath.Join(d.dir, "relayd.sock")
		fi, err := os.Stat(sock)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("--socket %s: %v %v; want a socket, mode 0600", sock, fi, err)
		}
		b := hostBridge(t, d)
		r := b.request(msg{"kind": "ready"})
		exts, _ := r["extensions"].([]any)
		if r["kind"] != "ready" || !slices.Contains(exts, any("bridge")) {
			t.Fatalf("ready through the bridge: %v; want extensions to list bridge", r)
		}
		x := b.request(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "printf 'a\\000b'; exit 3"}})
		if x["kind"] != "executed" || x["stdout"] != "a\x00b" || num(t, x, "exitCode") != 3 {
			t.Fatalf("execute through the bridge: %v", x)
		}
		// The token is still required.
		if e := b.request(msg{"kind": "ready", "token": "wrong"}); e["kind"] != "error" {
			t.Fatalf("a wrong token through the bridge got %v; want an error", e)
		}
		if code, ok := b.exited(10 * time.Second); !ok || code != 0 {
			t.Fatalf("bridge after relayd closed the connection: exited %v, code %d; want 0", ok, code)
		}
	})
}

// The end of the bridge's stdin is the end of the controller's stream: the
// running execution is settled (transport loss), its reply still comes,
// and the bridge then exits 0. Its death settles too.
func TestBridgeEndIsTransportLoss(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		for _, how := range []string{"stdin closed", "bridge killed"} {
			t.Run(strings.ReplaceAll(how, " ", "-"), func(t *testing.T) {
				b := hostBridge(t, d)
				pidfile := d.pidFile(strings.ReplaceAll(how, " ", "-") + ".pid")
				b.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo $$ > " + pidfile + "; exec sleep 60"}})
				pid := waitPid(t, pidfile)
				if how == "stdin closed" {
					b.in.Close()
					if r := b.read(15 * time.Second); r == nil || r["kind"] != "executed" {
						t.Fatalf("after the bridge's stdin ended: %v; want the executed reply owed", r)
					}
					if code, ok := b.exited(10 * time.Second); !ok || code != 0 {
						t.Fatalf("bridge: exited %v, code %d; want 0 once relayd closed", ok, code)
					}
				} else {
					_ = b.cmd.Process.Signal(syscall.SIGKILL) // the bridge this test started
				}
				waitFor(t, 15*time.Second, "the subject to be settled after "+how, func() bool { return !alive(pid) })
			})
		}
	})
}

// A --socket asked for that another relayd serves, or that cannot be
// made, is a startup error; a stale socket file (nobody answers) is
// replaced. (The default one that cannot be made is only a warning: not
// tested here, where relayd runs as root and /run is writable.)
func TestBridgeSocketAtStartup(t *testing.T) {
	first := startRelayd(t, opts{})
	taken := filepath.Join(first.dir, "relayd.sock")
	d := prepare(t, opts{args: []string{"--socket", taken}, noStart: true})
	d.launch()
	if code := d.wait(20 * time.Second); code != 2 || !strings.Contains(d.logs.String(), "another relayd serves this socket") {
		t.Fatalf("relayd on a socket another relayd serves: exit %d, log %s; want 2 and why", code, tail(d.logs.String(), 500))
	}

	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody answers: a killed relayd's
	d = startRelayd(t, opts{args: []string{"--socket", stale}})
	b := startBridge(t, d.token, relaydBin, "bridge", "--socket", stale)
	if r := b.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("through a socket that replaced a stale one: %v", r)
	}

	// The socket's twin names a socket too: asked for, so an error.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d = prepare(t, opts{env: []string{"RELAYD_SOCKET=" + filepath.Join(notDir, "relayd.sock")}, noStart: true})
	d.launch()
	if code := d.wait(20 * time.Second); code != 2 || !strings.Contains(d.logs.String(), "--socket") {
		t.Fatalf("RELAYD_SOCKET under a file: exit %d, log %s; want 2 naming --socket", code, tail(d.logs.String(), 500))
	}

	out, err := exec.Command(relaydBin, "bridge", "--socket", filepath.Join(t.TempDir(), "none.sock")).CombinedOutput()
	if code := exitCodeOf(err); code != 2 || !strings.Contains(string(out), "relayd bridge:") {
		t.Fatalf("bridge to no relayd: exit %d, %q; want 2 and one line", code, out)
	}
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
