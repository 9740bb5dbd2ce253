package testharness

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ModuleRoot is the directory of the relayd module (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles ./cmd/NAME of the module into out, with extra go build
// flags (e.g. "-race", "-tags", "relayd_faults").
func Build(out, name string, extra ...string) error {
	args := append([]string{"build", "-o", out}, extra...)
	args = append(args, "./cmd/"+name)
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w: %s", name, err, stderr.String())
	}
	return nil
}

// RaceOK says whether binaries can be built with the race detector (cgo,
// hence gcc) and RELAYD_E2E_NORACE does not ask otherwise.
func RaceOK() bool {
	if os.Getenv("RELAYD_E2E_NORACE") != "" {
		return false
	}
	_, err := exec.LookPath("gcc")
	return err == nil
}

// NewToken returns a fresh random token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// CleanEnv is the process's environment without relayd's configuration
// (RELAYD_*), so that a relayd under test reads only what its test gives it.
func CleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAYD_") {
			out = append(out, kv)
		}
	}
	return out
}

// Options configure a relayd.
type Options struct {
	Bin    string // the relayd binary
	Dir    string // its directory (token file, workspace); "" makes a temporary one that Stop removes
	Listen string // --listen; "" for 127.0.0.1:0, whose port is read from the log
	// Connect, when set, makes a dial-out relayd (--connect instead of
	// --listen); it logs no address, so start it with Launch.
	Connect string
	Args    []string // more flags, after the harness's own
	Env     []string // its environment; nil for CleanEnv()
	// LogKeep is how many bytes of relayd's log are kept (the last ones);
	// 0 keeps 64 MiB.
	LogKeep int
}

// Relayd is one relayd a test or benchmark started. Cmd may be changed
// between Prepare and Start (wrapped in unshare, say).
type Relayd struct {
	Cmd       *exec.Cmd
	Dir       string
	Workspace string
	Token     string
	TokenFile string
	Addr      string // set by Start
	Socket    string // its --socket (listen mode), when the harness chose it (the test named none)
	Logs      *Log
	Exited    chan struct{} // closed when the process has exited and been waited for
	exitCode  int
	ownDir    bool
}

// Prepare writes a fresh token file (0600) and makes a workspace in the
// relayd's directory, and builds its command: --listen, --token-file,
// --workspace, then o.Args. Nothing is started.
func Prepare(o Options) (*Relayd, error) {
	r := &Relayd{Dir: o.Dir, Token: NewToken(), Logs: NewLog(o.LogKeep), Exited: make(chan struct{})}
	if r.Dir == "" {
		dir, err := os.MkdirTemp("", "relayd-test-")
		if err != nil {
			return nil, err
		}
		r.Dir, r.ownDir = dir, true
	}
	r.Workspace = filepath.Join(r.Dir, "workspace")
	r.TokenFile = filepath.Join(r.Dir, "token")
	if err := os.Mkdir(r.Workspace, 0o755); err != nil {
		r.removeDir()
		return nil, err
	}
	if err := os.WriteFile(r.TokenFile, []byte(r.Token+"\n"), 0o600); err != nil {
		r.removeDir()
		return nil, err
	}
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	mode := []string{"--listen", listen}
	if o.Connect != "" {
		mode = []string{"--connect", o.Connect}
	}
	args := append(append(mode, "--token-file", r.TokenFile, "--workspace", r.Workspace), o.Args...)
	r.Cmd = exec.Command(o.Bin, args...)
	r.Cmd.Dir = r.Dir
	r.Cmd.Env = o.Env
	if r.Cmd.Env == nil {
		r.Cmd.Env = CleanEnv()
	}
	if !names(args, r.Cmd.Env, "socket") {
		// Its own socket for relayd bridge, not the default one in the
		// machine's /run/relayd that relayds of other tests would share
		// (the twin of --socket, so that the command line stays as the
		// test wrote it).
		r.Socket = filepath.Join(r.Dir, "relayd.sock")
		r.Cmd.Env = append(slices.Clip(r.Cmd.Env), "RELAYD_SOCKET="+r.Socket)
	}
	if !names(args, r.Cmd.Env, "state-dir") {
		// Its own state directory, not the machine's /run/relayd: relayd
		// keeps its records of running scopes and its store of marks there,
		// and one relayd settles what another left recorded.
		r.Cmd.Env = append(slices.Clip(r.Cmd.Env), "RELAYD_STATE_DIR="+filepath.Join(r.Dir, "state"))
	}
	r.Cmd.Stdout = r.Logs
	r.Cmd.Stderr = r.Logs
	return r, nil
}

// names reports whether relayd's flags or environment set the flag
// (--state-dir, or its twin RELAYD_STATE_DIR).
func names(args, env []string, flag string) bool {
	for _, a := range args {
		if a == "--"+flag || strings.HasPrefix(a, "--"+flag+"=") {
			return true
		}
	}
	twin := "RELAYD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) + "="
	for _, kv := range env {
		if strings.HasPrefix(kv, twin) {
			return true
		}
	}
	return false
}

// Launch starts the prepared command without waiting for it to listen.
func (r *Relayd) Launch() error {
	if err := r.Cmd.Start(); err != nil {
		return fmt.Errorf("starting relayd: %w", err)
	}
	go func() {
		err := r.Cmd.Wait() // waits for this pid only
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			r.exitCode = ee.ExitCode()
		default:
			r.exitCode = -1
		}
		close(r.Exited)
	}()
	return nil
}

// WaitListening waits up to timeout for relayd to log the address it
// listens on, and sets Addr.
func (r *Relayd) WaitListening(timeout time.Duration) error {
	select {
	case <-r.Logs.listening:
		r.Addr = r.Logs.Addr()
		return nil
	case <-r.Exited:
		return fmt.Errorf("relayd exited with status %d at start: %s", r.exitCode, r.Logs.LastLine())
	case <-time.After(timeout):
		return fmt.Errorf("relayd did not log its address within %s: %s", timeout, r.Logs.LastLine())
	}
}

// Start is Launch then WaitListening(20s); on failure relayd is killed.
func (r *Relayd) Start() error {
	if err := r.Launch(); err != nil {
		return err
	}
	if err := r.WaitListening(20 * time.Second); err != nil {
		r.Kill()
		return err
	}
	return nil
}

// Start prepares and starts a relayd: Prepare(o), then Start.
func Start(o Options) (*Relayd, error) {
	r, err := Prepare(o)
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	return r, nil
}

// Pid is relayd's process id (0 before Launch).
func (r *Relayd) Pid() int {
	if r.Cmd.Process == nil {
		return 0
	}
	return r.Cmd.Process.Pid
}

// ExitCode is relayd's exit status, once Exited is closed (-1: not a
// normal exit).
func (r *Relayd) ExitCode() int {
	<-r.Exited
	return r.exitCode
}

// Wait waits up to timeout for relayd to exit and returns its status.
func (r *Relayd) Wait(timeout time.Duration) (int, error) {
	select {
	case <-r.Exited:
		return r.exitCode, nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("relayd (pid %d) did not exit within %s", r.Pid(), timeout)
	}
}

// Stop sends SIGTERM (relayd settles what runs), waits up to timeout, and
// returns relayd's exit status; when it does not exit in time it is killed
// and Stop returns an error. A directory Prepare made is removed.
func (r *Relayd) Stop(timeout time.Duration) (int, error) {
	if r.Cmd.Process != nil {
		_ = r.Cmd.Process.Signal(syscall.SIGTERM) // the process this harness started
		if code, err := r.Wait(timeout); err != nil {
			r.Kill()
			return code, err
		}
	}
	r.removeDir()
	return r.exitCode, nil
}

// Kill SIGKILLs relayd if it still runs, waits for it, and removes a
// directory Prepare made.
func (r *Relayd) Kill() {
	if r.Cmd.Process != nil {
		select {
		case <-r.Exited:
		default:
			_ = r.Cmd.Process.Signal(syscall.SIGKILL)
			<-r.Exited
		}
	}
	r.removeDir()
}

func (r *Relayd) removeDir() {
	if r.ownDir {
		os.RemoveAll(r.Dir)
	}
}

// Log takes relayd's log: it finds the "listening" line and keeps the last
// bytes of the log (bounded: a benchmark makes hundreds of thousands of
// lines).
type Log struct {
	mu        sync.Mutex
	keep      int
	buf       []byte
	partial   []byte // the line being written, for the listening check
	address   string
	listening chan struct{}
}

// NewLog returns a Log that keeps the last keep bytes (0: 64 MiB).
func NewLog(keep int) *Log {
	if keep <= 0 {
		keep = 64 << 20
	}
	return &Log{keep: keep, listening: make(chan struct{})}
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > l.keep {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-l.keep/2:]...)
	}
	if l.address != "" {
		return len(p), nil
	}
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := l.partial[:i]
		l.partial = l.partial[i+1:]
		var rec struct {
			Message string `json:"message"`
			Addr    string `json:"addr"`
		}
		if bytes.Contains(line, []byte(`"listening"`)) && json.Unmarshal(line, &rec) == nil &&
			rec.Message == "listening" && rec.Addr != "" {
			l.address = rec.Addr
			l.partial = nil
			close(l.listening)
			break
		}
	}
	if len(l.partial) > 64<<10 {
		l.partial = l.partial[:0]
	}
	return len(p), nil
}

// String is the log kept.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// Addr is the address of relayd's "listening" line, or "".
func (l *Log) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.address
}

// Listening is closed once relayd has logged its address.
func (l *Log) Listening() <-chan struct{} { return l.listening }

// LastLine is the log's last line, or its message (and error) when it is
// JSON, for error messages.
func (l *Log) LastLine() string {
	lines := strings.Split(l.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if line == "" {
			continue
		}
		var rec struct {
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message != "" {
			if rec.Error != "" {
				return rec.Message + ": " + rec.Error
			}
			return rec.Message
		}
		return line
	}
	return "(no log)"
}
