package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/testharness"
)

var (
	relaydBin string // the relayd under test
	faultBin  string // the same, built with the relayd_faults tag (test seams)
	// afterAll holds what TestMain undoes once every test has run (an
	// image the docker tests built for this run).
	afterAll []func()
)

func TestMain(m *testing.M) {
	// The test process is a child subreaper: anything relayd leaves behind
	// when it exits comes here, so the leak check below can see it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot become a child subreaper:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "relayd-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relaydBin = filepath.Join(dir, "relayd")
	faultBin = filepath.Join(dir, "relayd-faults")
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		os.Setenv("RELAYD_E2E_NORACE", "1") // measure relayd, not the race detector
	}
	if err := build(relaydBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := build(faultBin, "-tags", "relayd_faults"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A binary built with the race detector sleeps a second before it
	// exits 0 (atexit_sleep_ms), only so that its other threads may still
	// run into a race: relayd and each relayd bridge, a second every time
	// a test stops one (a race build's shims skip it: internal/exec's
	// race_on.go). A race found before the exit still makes it exit 66.
	if raceOK() {
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	cgroupSkip = probeCgroup()
	code := m.Run()
	for _, f := range afterAll {
		f()
	}
	if leaks := leftovers(); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: processes left behind by the tests (now killed): %v\n", leaks)
		if code == 0 {
			code = 1
		}
	}
	os.RemoveAll(dir)
	if attacksDir != "" {
		os.RemoveAll(attacksDir)
	}
	os.Exit(code)
}

// build compiles relayd, with the race detector when cgo is available.
func build(out string, extra ...string) error {
	if raceOK() {
		extra = append(extra, "-race")
	}
	return testharness.Build(out, "relayd", extra...)
}

func raceOK() bool { return testharness.RaceOK() }

// leftovers kills and lists the live processes reparented to the test
// process: escapees that outlived their relayd.
func leftovers() []string {
	out := testharness.Leftovers(os.Getpid())
	// Reap what we were given, so the process table stays clean.
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			break
		}
	}
	return out
}

func statOf(pid int) (ppid int, state byte, ok bool) {
	s, err := testharness.ReadStat(pid)
	return s.PPID, s.State, err == nil
}

func cmdline(pid int) string { return testharness.Cmdline(pid) }

// alive is true while pid exists and is not a zombie.
func alive(pid int) bool { return testharness.Alive(pid) }

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// daemon is one relayd under test: a testharness.Relayd (h) and the
// fields tests use. cmd may be replaced between prepare and start (wrapped
// in unshare or nsenter); start and launch run whatever it is then.
type daemon struct {
	t         testing.TB
	h         *testharness.Relayd
	cmd       *exec.Cmd
	dir       string
	workspace string
	token     string
	addr      string
	logs      *testharness.Log
	exited    chan struct{}
	pidFiles  []string
	init      int // host pid of relayd when it runs as PID 1 of a namespace
}

type opts struct {
	scope   string // --scope, when set
	args    []string
	env     []string // extra environment for relayd
	bin     string
	noStart bool // build the command only
}

func newToken() string { return testharness.NewToken() }

// startRelayd starts relayd on a free loopback port with a fresh token file
// and workspace, and waits until it logs its address.
func startRelayd(t testing.TB, o opts) *daemon {
	t.Helper()
	d := prepare(t, o)
	d.start()
	return d
}

func prepare(t testing.TB, o opts) *daemon {
	t.Helper()
	dir := t.TempDir()
	bin := o.bin
	if bin == "" {
		bin = relaydBin
	}
	args := []string{"--term-grace", "300ms", "--teardown-timeout", "3s"}
	if o.scope != "" {
		args = append(args, "--scope", o.scope)
	}
	// Each relayd records its running scopes in its test's directory, not in
	// the machine's /run/relayd (a test's o.env may name another), and
	// serves relayd bridge there (t.TempDir's name is at most 64 bytes
	// long, so the socket's path fits a sockaddr_un).
	h, err := testharness.Prepare(testharness.Options{Bin: bin, Dir: dir, Args: append(args, o.args...),
		Env: append(append(cleanEnv(), "RELAYD_STATE_DIR="+filepath.Join(dir, "state"),
			"RELAYD_SOCKET="+filepath.Join(dir, "relayd.sock")), o.env...)})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, h: h, cmd: h.Cmd, dir: dir, workspace: h.Workspace, token: h.Token, logs: h.Logs, exited: h.Exited}
	// relayd gets a process group of its own: a test subject that signals
	// relayd's group then reaches only relayd, which the test started.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(d.cleanup)
	return d
}

func cleanEnv() []string { return testharness.CleanEnv() }

// launch starts d.cmd, whatever it is by now, without waiting for it to
// listen (a dial-out relayd never does).
func (d *daemon) launch() {
	d.t.Helper()
	d.h.Cmd = d.cmd
	if err := d.h.Launch(); err != nil {
		d.t.Fatal(err)
	}
}

// exitCode is relayd's exit status once it has exited.
func (d *daemon) exitCode() int { return d.h.ExitCode() }

func (d *daemon) start() {
	d.t.Helper()
	d.launch()
	if err := d.h.WaitListening(20 * time.Second); err != nil {
		d.t.Fatalf("%v; log: %s", err, d.logs.String())
	}
	d.addr = d.h.Addr
}

// pidFile names a file in the test's directory where a subject writes a pid;
// the test's cleanup kills whatever pid it holds.
func (d *daemon) pidFile(name string) string {
	p := filepath.Join(d.dir, name)
	d.pidFiles = append(d.pidFiles, p)
	return p
}

func (d *daemon) cleanup() {
	d.h.Kill()
	for _, p := range d.pidFiles {
		// Written by our own subject, but relayd has usually settled it
		// long since and its pid may be another's now: only a process
		// that started before the file was written is killed.
		testharness.KillFromFile(p)
	}
	if d.t.Failed() {
		d.t.Logf("relayd log:\n%s", tail(d.logs.String(), 6000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func readPids(path string) []int { return testharness.ReadPids(path) }

// waitPid waits for a pid file to hold a pid and returns it.
func waitPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "pid file "+filepath.Base(path), func() bool {
		pids := readPids(path)
		if len(pids) == 0 {
			return false
		}
		pid = pids[0]
		return true
	})
	return pid
}

// signal sends sig to relayd itself: the process the test started, or, in
// a namespace, relayd as its PID 1 (started by the test through unshare).
func (d *daemon) signal(sig syscall.Signal) {
	pid := d.cmd.Process.Pid
	if d.init != 0 {
		pid = d.init
	}
	_ = syscall.Kill(pid, sig)
}

// stop sends SIGTERM and returns relayd's exit status.
func (d *daemon) stop() int {
	d.t.Helper()
	d.signal(syscall.SIGTERM)
	return d.wait(15 * time.Second)
}

func (d *daemon) wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.exited:
		return d.exitCode()
	case <-time.After(timeout):
		d.t.Fatalf("relayd did not exit within %s", timeout)
		return -1
	}
}

// stopClean asserts the clean shutdown that ends every test: SIGTERM, exit 0.
func (d *daemon) stopClean() {
	d.t.Helper()
	if code := d.stop(); code != 0 {
		d.t.Fatalf("relayd exited %d after SIGTERM; want 0", code)
	}
}

// client is one controller connection.
type client struct {
	t     testing.TB
	c     net.Conn
	r     *bufio.Reader
	token string
}

func (d *daemon) dial() *client {
	d.t.Helper()
	w, err := testharness.DialWire(d.addr, d.token, 5*time.Second)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { w.Conn.Close() })
	return &client{t: d.t, c: w.Conn, r: w.R, token: d.token}
}

// wire is the raw line connection (testharness.Wire) the client wraps.
func (cl *client) wire() testharness.Wire {
	return testharness.Wire{Conn: cl.c, R: cl.r, Token: cl.token}
}

// connect dials and does the ready handshake.
func (d *daemon) connect() *client {
	d.t.Helper()
	cl := d.dial()
	r := cl.request(msg{"kind": "ready"})
	if r["kind"] != "ready" {
		d.t.Fatalf("handshake: got %v; want ready", r)
	}
	return cl
}

type msg = map[string]any

func (cl *client) send(m msg) {
	cl.t.Helper()
	if err := cl.wire().Send(m); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

func (cl *client) sendRaw(b []byte) {
	cl.t.Helper()
	if err := cl.wire().SendRaw(b); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

// read returns the next reply, or nil when the connection ended.
func (cl *client) read(timeout time.Duration) msg {
	cl.t.Helper()
	line, err := cl.wire().ReadLine(timeout)
	if errors.Is(err, testharness.ErrNoReply) {
		cl.t.Fatal(err)
	}
	if err != nil {
		return nil
	}
	var m msg
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		cl.t.Fatalf("reply is not JSON: %q", line)
	}
	return m
}

func (cl *client) request(m msg) msg {
	cl.t.Helper()
	cl.send(m)
	r := cl.read(30 * time.Second)
	if r == nil {
		cl.t.Fatalf("connection closed instead of a reply to %v", m["kind"])
	}
	return r
}

// sh runs a shell script as the subject and returns the executed reply.
func (cl *client) sh(script string, extra msg) msg {
	cl.t.Helper()
	m := msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", script}}
	for k, v := range extra {
		m[k] = v
	}
	r := cl.request(m)
	if r["kind"] != "executed" {
		cl.t.Fatalf("got %v; want executed", r)
	}
	return r
}

// closedByPeer reports whether relayd closed the connection within timeout.
func (cl *client) closedByPeer(timeout time.Duration) bool {
	_ = cl.c.SetReadDeadline(time.Now().Add(timeout))
	for {
		if _, err := cl.r.ReadBytes('\n'); err != nil {
			ne, ok := err.(net.Error)
			return !(ok && ne.Timeout())
		}
	}
}

func num(t testing.TB, m msg, field string) int64 {
	t.Helper()
	n, ok := m[field].(json.Number)
	if !ok {
		t.Fatalf("%s = %v (%T); want a number in %v", field, m[field], m[field], m)
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantExit checks termination and exit code.
func wantExit(t testing.TB, r msg, termination string, code int64) {
	t.Helper()
	if r["termination"] != termination || num(t, r, "exitCode") != code {
		t.Fatalf("got termination %v exitCode %v; want %s %d (reply %v)", r["termination"], r["exitCode"], termination, code, r)
	}
}

func survivorPids(t testing.TB, r msg) []int {
	t.Helper()
	list, ok := r["survivors"].([]any)
	if !ok {
		t.Fatalf("survivors = %v; want an array", r["survivors"])
	}
	var out []int
	for _, s := range list {
		p, _ := s.(map[string]any)["pid"].(json.Number).Int64()
		out = append(out, int(p))
	}
	return out
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// q quotes a path for a shell script.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// eachScope runs a lifecycle test once per scope mechanism; cgroup is
// skipped, with the reason, where this machine has no usable cgroup v2.
func eachScope(t *testing.T, test func(t *testing.T, mech string)) {
	for _, mech := range []string{"process-group", "cgroup"} {
		t.Run(mech, func(t *testing.T) {
			if mech == "cgroup" && cgroupSkip != "" {
				t.Skip(cgroupSkip)
			}
			test(t, mech)
		})
	}
}

// eachScopeParallel is eachScope with the mechanisms' runs at once
// (t.Parallel), for a test whose time is mostly waiting: each run has a
// relayd, a directory and markers of its own, and signals only the pids
// it started.
func eachScopeParallel(t *testing.T, test func(t *testing.T, mech string)) {
	for _, mech := range []string{"process-group", "cgroup"} {
		t.Run(mech, func(t *testing.T) {
			if mech == "cgroup" && cgroupSkip != "" {
				t.Skip(cgroupSkip)
			}
			t.Parallel()
			test(t, mech)
		})
	}
}

// noKillVariant runs a settling test once more with the cgroup mechanism
// acting as on a kernel without cgroup.kill (freeze, kill each, thaw): a
// seam only the relayd_faults build has.
func noKillVariant(t *testing.T, test func(t *testing.T, o opts)) {
	t.Run("cgroup-without-cgroup.kill", func(t *testing.T) {
		if cgroupSkip != "" {
			t.Skip(cgroupSkip)
		}
		test(t, opts{scope: "cgroup", bin: faultBin, env: []string{"RELAYD_FAULT_NO_CGROUP_KILL=1"}})
	})
}

// cgroupSkip says why the cgroup mechanism cannot run here ("" when it can);
// TestMain asks relayd itself.
var cgroupSkip string

func probeCgroup() string {
	h, err := testharness.Start(testharness.Options{Bin: relaydBin, Args: []string{"--scope", "cgroup"}})
	if err != nil {
		return "relayd --scope cgroup refused to start: " + err.Error()
	}
	if code, err := h.Stop(15 * time.Second); err != nil || code != 0 {
		return fmt.Sprintf("relayd --scope cgroup did not stop cleanly: exit %d, %v", code, err)
	}
	return ""
}

// killPid SIGKILLs a process a test's own subject started, if still alive
// and younger than this test run (testharness.KillOurs): a pid that ended
// and was taken by an older process is left alone.
func killPid(pid int) { testharness.KillOurs(pid) }

// rssLimit scales a memory bound for the relayd under test: the race
// detector multiplies a program's memory several times over.
func rssLimit(bytes int) int {
	if raceOK() {
		return bytes * 6
	}
	return bytes
}
