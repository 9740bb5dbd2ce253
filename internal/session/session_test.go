package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/testharness"
)

// The one reaper of this test binary, and its shims. The reaper waits
// for every child of the process, so nothing here uses os/exec.
var (
	testReaper *exec.Reaper
	testShims  *exec.Shims
)

func TestMain(m *testing.M) {
	exec.ShimMain(nil) // the test binary is its own subjects' shim
	ctx, cancel := context.WithCancel(context.Background())
	testReaper = exec.NewReaper(ctx)
	testShims = exec.NewShims(ctx, testReaper, "", time.Second, 3*time.Second)
	code := m.Run()
	testShims.Close()
	cancel()
	os.Exit(code)
}

const testToken = "tok-session-test"

var errNoScope = errors.New("test: the scope cannot be set up")

// server is a Server on a real loopback listener.
type server struct {
	srv     *Server
	addr    string
	served  chan error
	scopes  atomic.Int32 // NewScope calls
	stopped bool
}

// startServer serves a Server whose NewScope always fails.
func startServer(t *testing.T, workspace, artifacts string) *server {
	t.Helper()
	s := &server{served: make(chan error, 1)}
	s.srv = New(Config{
		Token:           []byte(testToken),
		Workspace:       workspace,
		Version:         "test",
		TermGrace:       300 * time.Millisecond,
		TeardownTimeout: 3 * time.Second,
		WriteTimeout:    5 * time.Second,
		MaxLineBytes:    1 << 20,
		MaxStdoutBytes:  1 << 20,
		ArtifactsDir:    artifacts,
		BaseEnv:         env.Base(os.Environ()),
		Shims:           testShims,
		NewScope: func(string) (exec.Scope, error) {
			s.scopes.Add(1)
			return nil, errNoScope
		},
		Mechanism: exec.ProcessGroup,
		Log:       zerolog.Nop(),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	go func() { s.served <- s.srv.Serve(ln) }()
	t.Cleanup(func() {
		if !s.stopped {
			s.shutdown(t)
		}
	})
	return s
}

// shutdown stops the server and waits for Serve to return.
func (s *server) shutdown(t *testing.T) {
	t.Helper()
	s.stopped = true
	s.srv.Shutdown()
	select {
	case err := <-s.served:
		if err != nil {
			t.Errorf("Serve returned %v after Shutdown; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of Shutdown")
	}
}

// client is a raw line connection (testharness.Wire): these tests compare
// replies byte for byte.
type client struct {
	t *testing.T
	w testharness.Wire
}

func (s *server) dial(t *testing.T) *client {
	t.Helper()
	w, err := testharness.DialWire(s.addr, testToken, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Conn.Close() })
	return &client{t: t, w: w}
}

func (cl *client) send(m map[string]any) {
	cl.t.Helper()
	if err := cl.w.Send(m); err != nil {
		cl.t.Fatal(err)
	}
}

// read returns the next reply line, or nil at the end of the stream.
func (cl *client) read() []byte {
	cl.t.Helper()
	line, err := cl.w.ReadLine(20 * time.Second)
	if errors.Is(err, testharness.ErrNoReply) {
		cl.t.Fatal(err)
	}
	return line
}

// reply decodes a reply, keeping every field raw so that exact values can be compared.
func reply(t *testing.T, line []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("reply is not a JSON object: %q", line)
	}
	return m
}

func field(t *testing.T, m map[string]json.RawMessage, name string) string {
	t.Helper()
	v, ok := m[name]
	if !ok {
		t.Fatalf("reply has no %q: %v", name, m)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// emptyScopeUnavailable is the diagnostic of protocol section 5 for a scope
// that could not be set up: bytes 0 and the SHA-256 of nothing.
const emptyScopeUnavailable = `{"category":"execution-scope-unavailable","bytes":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`

// children lists the processes whose parent is the test process.
func children() []int { return testharness.Children(os.Getpid()) }

// Rule 6.6: when the scope cannot be set up, the reply is 111,
// execution-scope-unavailable, and nothing runs or is signalled.
func TestScopeSetupFailureTouchesNothing(t *testing.T) {
	workspace := t.TempDir()
	s := startServer(t, workspace, "")
	cl := s.dial(t)

	cl.send(map[string]any{"kind": "ready", "id": "hello"})
	r := reply(t, cl.read())
	if field(t, r, "kind") != `"ready"` || field(t, r, "token") != strconv.Quote(testToken) || field(t, r, "id") != `"hello"` {
		t.Fatalf("ready reply %v; want kind ready with the token and id", r)
	}
	if field(t, r, "cwd") != strconv.Quote(workspace) || field(t, r, "scope") != `"process-group"` {
		t.Fatalf("ready reply %v; want cwd %s and scope process-group", r, workspace)
	}

	marker := filepath.Join(workspace, "MARKER")
	modes := []struct {
		name  string
		extra map[string]any
	}{
		{"carrier", map[string]any{"resultToken": "0123456789abcdef0123456789abcdef"}},
		{"raw", map[string]any{}},
		{"discard", map[string]any{"captureStdout": false}},
		{"carrier, absolute marker", map[string]any{"resultToken": "ffffffffffffffffffffffffffffffff", "args": []string{"-c", "touch " + marker}}},
	}
	for i, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			before := s.scopes.Load()
			m := map[string]any{"kind": "execute", "id": 7 + i, "command": "/bin/sh", "args": []string{"-c", "touch MARKER"}}
			for k, v := range mode.extra {
				m[k] = v
			}
			cl.send(m)
			r := reply(t, cl.read())
			want := map[string]string{
				"kind":        `"executed"`,
				"id":          strconv.Itoa(7 + i),
				"token":       strconv.Quote(testToken),
				"exitCode":    "111",
				"termination": `"exited"`,
				"diagnostic":  emptyScopeUnavailable,
				"stdout":      `""`,
				"settlement":  `"none"`,
				"survivors":   "[]",
				"execution":   strconv.Quote("x-" + strconv.Itoa(i+1)),
			}
			for name, w := range want {
				if got := field(t, r, name); got != w {
					t.Errorf("%s = %s; want %s", name, got, w)
				}
			}
			if _, ok := r["signal"]; ok {
				t.Errorf("reply has a signal: %v", r)
			}
			if got := s.scopes.Load() - before; got != 1 {
				t.Errorf("NewScope called %d times for one execute; want 1", got)
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("MARKER exists (%v): the subject ran although its scope could not be set up", err)
			}
			if kids := children(); len(kids) > 0 {
				t.Fatalf("the test process has children %v: something was started", kids)
			}
		})
	}

	// The session is still usable, and shutting down ends it and Serve.
	cl.send(map[string]any{"kind": "verify"})
	r = reply(t, cl.read())
	if field(t, r, "kind") != `"verified"` || field(t, r, "quiescent") != "true" || field(t, r, "survivors") != "[]" {
		t.Fatalf("verify reply %v; want verified, quiescent, no survivors", r)
	}
	s.shutdown(t)
	if line := cl.read(); line != nil {
		t.Fatalf("after Shutdown the connection carried %q; want it closed", line)
	}
	if !s.srv.Confirmed() {
		t.Fatal("Confirmed() = false; no settlement ever happened")
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("MARKER exists after shutdown (%v)", err)
	}
}

func TestLastArtifact(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"x-3.stdout.txt", "x-3.stderr.txt", "x-12.stderr.txt", "x-7.stdout.txt",
		"x-abc.stdout.txt", "y-99.stdout.txt", "X-50.stdout.txt", "notes.txt", "x-.txt", "xx-40.stdout.txt",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	tests := []struct {
		dir  string
		want uint64
	}{
		{dir, 12},
		{"", 0},
		{empty, 0},
		{filepath.Join(dir, "missing"), 0},
	}
	for _, tt := range tests {
		if got := lastArtifact(tt.dir); got != tt.want {
			t.Errorf("lastArtifact(%s) = %d; want %d", tt.dir, got, tt.want)
		}
	}

	srv := New(Config{ArtifactsDir: dir, Log: zerolog.Nop()})
	for _, want := range []string{"x-13", "x-14"} {
		if got := srv.newExecutionID(); got != want {
			t.Fatalf("newExecutionID() = %s; want %s", got, want)
		}
	}
	if got := New(Config{Log: zerolog.Nop()}).newExecutionID(); got != "x-1" {
		t.Fatalf("without artifacts, the first id is %s; want x-1", got)
	}
}

// Over the wire: a relayd restarted on the same artifacts directory
// continues the sequence instead of overwriting an earlier execution's files.
func TestExecutionIDsContinueAfterArtifacts(t *testing.T) {
	artifacts := t.TempDir()
	for _, name := range []string{"x-41.stdout.txt", "x-41.stderr.txt", "x-9.stdout.txt"} {
		if err := os.WriteFile(filepath.Join(artifacts, name), []byte("earlier"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, t.TempDir(), artifacts)
	cl := s.dial(t)
	for _, want := range []string{"x-42", "x-43"} {
		cl.send(map[string]any{"kind": "execute", "command": "/bin/true"})
		r := reply(t, cl.read())
		if got := field(t, r, "execution"); got != strconv.Quote(want) {
			t.Fatalf("execution = %s; want %q", got, want)
		}
	}
	for _, name := range []string{"x-41.stdout.txt", "x-41.stderr.txt"} {
		if b, err := os.ReadFile(filepath.Join(artifacts, name)); err != nil || string(b) != "earlier" {
			t.Fatalf("%s = %q, %v; want the earlier relayd's file untouched", name, b, err)
		}
	}
}
