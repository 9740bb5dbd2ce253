package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

var (
	relaydBin string
	tmpDir    string
	stopAtEnd []func() // what TestMain undoes after every test and example
)

func TestMain(m *testing.M) {
	var err error
	tmpDir, err = os.MkdirTemp("", "relayd-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relaydBin = filepath.Join(tmpDir, "relayd")
	if err := testharness.Build(relaydBin, "relayd"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range stopAtEnd {
		f()
	}
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// start starts a relayd (process-group scopes, short settle) that the
// test's cleanup stops, asserting a clean exit.
func start(t *testing.T, args ...string) *testharness.Relayd {
	t.Helper()
	r, err := testharness.Start(testharness.Options{Bin: relaydBin, Dir: t.TempDir(),
		Args: append([]string{"--scope", "process-group", "--term-grace", "300ms", "--teardown-timeout", "3s",
			"--state-dir", filepath.Join(t.TempDir(), "state")}, args...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		code, err := r.Stop(15 * time.Second)
		if err != nil || code != 0 {
			t.Errorf("relayd: exit %d, %v after SIGTERM; want 0. Log:\n%s", code, err, r.Logs.String())
		}
	})
	return r
}

func dial(t *testing.T, r *testharness.Relayd) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, r.Addr, r.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func sh(script string) client.Request {
	return client.Request{Command: "/bin/sh", Args: []string{"-c", script}}
}

// killLater SIGKILLs, at the test's end, the pid a test's own subject
// wrote to path.
func killLater(t *testing.T, path string) {
	t.Cleanup(func() {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && testharness.Alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// waitFor polls cond every 10 ms until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pid %d to be gone", pid), func() bool { return !testharness.Alive(pid) })
}

func TestDialHandshake(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	h := c.Handshake()
	if h.Protocol != 1 || h.Cwd != r.Workspace || h.Scope != "process-group" {
		t.Fatalf("handshake %+v; want protocol 1, cwd %s, scope process-group", h, r.Workspace)
	}
	if _, err := c.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
}

func TestExecute(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	ctx := context.Background()
	e, err := c.Execute(ctx, sh("echo out; echo $GREETING; pwd; exit 7"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Termination != client.Exited || e.ExitCode != 7 || e.Settlement != client.SettlementNone {
		t.Fatalf("got %s %d %s; want exited 7 none", e.Termination, e.ExitCode, e.Settlement)
	}
	if e.Stdout != "out\n\n"+r.Workspace+"\n" || e.Diagnostic.Category != client.DiagNone || e.Execution == "" {
		t.Fatalf("got stdout %q, diagnostic %+v, execution %q", e.Stdout, e.Diagnostic, e.Execution)
	}
	// The same connection takes the next execution, with every field.
	sub := filepath.Join(r.Workspace, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	req := sh("echo $GREETING $SECRET; pwd")
	req.Environment = map[string]string{"GREETING": "hello"}
	req.Credentials = map[string]string{"SECRET": "s3"}
	req.Cwd = "sub"
	e, err = c.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if e.ExitCode != 0 || e.Stdout != "hello s3\n"+sub+"\n" {
		t.Fatalf("got exit %d stdout %q; want 0 %q", e.ExitCode, e.Stdout, "hello s3\n"+sub+"\n")
	}
	req = sh("echo dropped")
	req.DiscardStdout = true
	if e, err = c.Execute(ctx, req); err != nil || e.Stdout != "" {
		t.Fatalf("DiscardStdout: got %q, %v; want an empty stdout", e.Stdout, err)
	}
	if e, err = c.Execute(ctx, client.Request{Command: "/nonexistent/program"}); err != nil || e.ExitCode != client.ExitNotFound {
		t.Fatalf("missing program: got exit %d, %v; want %d", e.ExitCode, err, client.ExitNotFound)
	}
}

func TestCarrier(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	// A frame for the payload "ok" (base64 b2s).
	const tok = "0123456789abcdef0123456789abcdef"
	req := sh(`printf 'MAKA-EVAL-RESULT-V1 %s 2 %s b2s\n' "$MAKA_EVAL_RESULT_TOKEN" "$(printf ok | sha256sum | cut -d' ' -f1)"`)
	req.ResultToken = tok
	e, err := c.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if e.Stdout != "ok" || e.Diagnostic.Category != client.DiagNone {
		t.Fatalf("carrier: got stdout %q diagnostic %+v; want ok, none", e.Stdout, e.Diagnostic)
	}
	req = sh("echo no frame")
	req.ResultToken = tok
	if e, err = c.Execute(context.Background(), req); err != nil || e.Diagnostic.Category != client.DiagMissing ||
		!e.Diagnostic.Counted() || *e.Diagnostic.Bytes != 9 {
		t.Fatalf("carrier without a frame: got %+v, %v; want %s with bytes 9", e.Diagnostic, err, client.DiagMissing)
	}
}

// A framework timeout: relayd settles the scope, grandchildren included,
// and the client's wait allows for it.
func TestFrameworkTimeout(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	pidFile := filepath.Join(r.Dir, "pid")
	killLater(t, pidFile)
	req := sh("sleep 30 & echo $! > " + pidFile + "; wait")
	req.Timeout = 300 * time.Millisecond
	e, err := c.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if e.Termination != client.FrameworkTimeout || e.ExitCode != client.ExitFramework || e.Settlement != client.Settled {
		t.Fatalf("got %s %d %s; want framework_timeout 124 settled", e.Termination, e.ExitCode, e.Settlement)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 1 || testharness.Alive(pid) {
		t.Fatalf("the subject's child %d (pid file %q) is alive after settled", pid, b)
	}
}

// Survivors are reported by Execute and by Verify, and left alone.
func TestSurvivorsAndVerify(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	pidFile := filepath.Join(r.Dir, "pid")
	killLater(t, pidFile)
	e, err := c.Execute(context.Background(), sh("sleep 30 >/dev/null 2>&1 & echo $! > "+pidFile))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Its argv may still be sh's: the reply can come before the fork execs
	// sleep; and it is empty when relayd read it in the middle of that exec
	// (the kernel has switched the process to its new memory but not yet
	// laid out its arguments). Found by CI.
	if len(e.Survivors) != 1 || e.Survivors[0].PID != pid {
		t.Fatalf("survivors %+v; want one, pid %d", e.Survivors, pid)
	}
	if argv := e.Survivors[0].Argv; len(argv) > 0 && argv[0] != "/bin/sh" && argv[0] != "sh" && argv[0] != "sleep" {
		t.Fatalf("survivor argv %q; want sh's or sleep's", argv)
	}
	v, err := c.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !v.Quiescent || len(v.Survivors) != 1 || v.Survivors[0].PID != pid {
		t.Fatalf("verified %+v; want quiescent with survivor %d", v, pid)
	}
	if !testharness.Alive(pid) {
		t.Fatal("the survivor was killed")
	}
}

// Verify while an Execute waits: relayd settles the execution, whose
// Execute returns framework_timeout, then answers verify.
func TestVerifyEndsARunningExecution(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	started := filepath.Join(r.Dir, "started")
	done := make(chan client.Executed, 1)
	go func() {
		e, err := c.Execute(context.Background(), sh("touch "+started+"; exec sleep 30"))
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	waitFile(t, started)
	// One execution at a time: the client says busy without asking relayd.
	if _, err := c.Execute(context.Background(), sh("true")); !errors.Is(err, client.ErrBusy) {
		t.Fatalf("second Execute: %v; want ErrBusy", err)
	}
	v, err := c.Verify(context.Background())
	if err != nil || !v.Quiescent {
		t.Fatalf("Verify: %+v, %v; want quiescent", v, err)
	}
	e := <-done
	if e.Termination != client.FrameworkTimeout || e.Settlement != client.Settled {
		t.Fatalf("the running execution: %s %s; want framework_timeout settled", e.Termination, e.Settlement)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, path+" to appear", func() bool { _, err := os.Stat(path); return err == nil })
}

// Cancelling ctx closes the connection: relayd settles the execution
// (transport loss) and the call returns the context's error.
func TestCancelClosesAndSettles(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	pidFile := filepath.Join(r.Dir, "pid")
	killLater(t, pidFile)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFile(t, pidFile)
		cancel()
	}()
	_, err := c.Execute(ctx, sh("echo $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 30"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v; want context.Canceled", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
	if _, err := c.Ready(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Ready after cancel: %v; want ErrClosed", err)
	}
}

// Every error category a client can provoke comes back as an *Error that
// matches its sentinel.
func TestErrorCategories(t *testing.T) {
	r := start(t, "--max-line-bytes", "4096")
	ctx := context.Background()
	t.Run("unauthenticated", func(t *testing.T) {
		_, err := client.Dial(ctx, r.Addr, "wrong-token")
		var pe *client.Error
		if !errors.Is(err, client.ErrUnauthenticated) || !errors.As(err, &pe) || pe.Message == "" {
			t.Fatalf("Dial with a wrong token: %v; want ErrUnauthenticated with a message", err)
		}
	})
	t.Run("bad-request", func(t *testing.T) {
		c := dial(t, r)
		_, err := c.Execute(ctx, client.Request{Command: "/bin/true", Environment: map[string]string{"RELAYD_X": "1"}})
		if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "RELAYD_") {
			t.Fatalf("got %v; want ErrBadRequest naming RELAYD_", err)
		}
		if _, err := c.Execute(ctx, client.Request{Command: "/bin/true", Timeout: -1}); !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("negative Timeout: %v; want ErrBadRequest", err)
		}
		// The connection is still good.
		if e, err := c.Execute(ctx, client.Request{Command: "/bin/true"}); err != nil || e.ExitCode != 0 {
			t.Fatalf("after bad-request: %+v, %v", e, err)
		}
	})
	t.Run("line-too-long", func(t *testing.T) {
		c := dial(t, r)
		_, err := c.Execute(ctx, client.Request{Command: "/bin/true", Args: []string{strings.Repeat("x", 5000)}})
		if !errors.Is(err, client.ErrLineTooLong) {
			t.Fatalf("got %v; want ErrLineTooLong", err)
		}
	})
	t.Run("shutting-down", func(t *testing.T) {
		r := start(t)
		c := dial(t, r)
		started := filepath.Join(r.Dir, "started")
		done := make(chan error, 1)
		go func() {
			_, err := c.Execute(ctx, sh("touch "+started+"; exec sleep 30"))
			done <- err
		}()
		waitFile(t, started)
		c2 := dial(t, r)
		_ = r.Cmd.Process.Signal(syscall.SIGTERM) // our relayd
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err = c2.Execute(ctx, client.Request{Command: "/bin/true"}); err != nil {
				break
			}
		}
		if !errors.Is(err, client.ErrShuttingDown) && !errors.Is(err, client.ErrConnLost) {
			t.Fatalf("execute during shutdown: %v; want ErrShuttingDown (or the connection closed)", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("the running execution during shutdown: %v; want its executed reply", err)
		}
	})
}

// A relayd that dials out is handed to the Accept that waits for its
// token; one that arrives before its Accept is held.
func TestListenerDialOut(t *testing.T) {
	ln, err := client.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	launch := func() *testharness.Relayd {
		r, err := testharness.Prepare(testharness.Options{Bin: relaydBin, Dir: t.TempDir(), Connect: ln.Addr().String(),
			Args: []string{"--scope", "process-group", "--state-dir", filepath.Join(t.TempDir(), "state")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Launch(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Kill)
		return r
	}
	a, b := launch(), launch()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range []*testharness.Relayd{b, a} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ln.Accept(ctx, r.Token)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			e, err := c.Execute(ctx, sh("echo $PWD"))
			if err != nil || e.Stdout != r.Workspace+"\n" {
				t.Errorf("dial-out execute: %q, %v; want %s (its own relayd's workspace)", e.Stdout, err, r.Workspace)
			}
			if v, err := c.Verify(ctx); err != nil || !v.Quiescent {
				t.Errorf("Verify: %+v, %v", v, err)
			}
			// After verify a dial-out relayd exits 0.
			if code, err := r.Wait(15 * time.Second); err != nil || code != 0 {
				t.Errorf("relayd after verify: exit %d, %v; want 0", code, err)
			}
		}()
		time.Sleep(200 * time.Millisecond) // let one relayd be held before its Accept (either way must work)
	}
	wg.Wait()
	// A peer that is not relayd is closed, and Accept keeps waiting.
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintf(nc, "{\"kind\":\"hello\"}\n")
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("a peer that sent no ready was answered; want it closed")
	}
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if _, err := ln.Accept(short, "nobody"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept for a token nobody has: %v; want DeadlineExceeded", err)
	}
}

// A Pool runs executions at once: each subject waits until all of them
// run, which a pool that ran one at a time would never see.
func TestPoolRunsConcurrently(t *testing.T) {
	r := start(t)
	const n = 3
	pool := client.NewPool(n, func(ctx context.Context) (*client.Conn, error) {
		return client.Dial(ctx, r.Addr, r.Token)
	})
	defer pool.Close()
	barrier := filepath.Join(r.Dir, "barrier")
	if err := os.Mkdir(barrier, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`touch %s/$1; i=0; while [ $(ls %s | wc -l) -lt %d ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 1; sleep 0.01; done`,
		barrier, barrier, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := pool.Execute(context.Background(), client.Request{Command: "/bin/sh", Args: []string{"-c", script, "sh", strconv.Itoa(i)}})
			if err != nil || e.ExitCode != 0 {
				t.Errorf("execution %d: exit %d, %v; want 0 (all %d at once)", i, e.ExitCode, err, n)
			}
		}()
	}
	wg.Wait()
	// Connections are reused: the next one needs no dial.
	if e, err := pool.Execute(context.Background(), client.Request{Command: "/bin/true"}); err != nil || e.ExitCode != 0 {
		t.Fatalf("reuse: %+v, %v", e, err)
	}
}
