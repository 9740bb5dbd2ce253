package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemon is one relayd this run started.
type daemon struct {
	cmd       *exec.Cmd
	pid       int
	dir       string // temp dir: token file, workspace, pid files
	workspace string
	token     string
	addr      string
	logs      *logSink
	exited    chan struct{}
	exitCode  int
	startedAt time.Time // just before fork/exec
	forget    func()    // unregisters the interrupted run's cleanup
}

// startOpts configure a relayd.
type startOpts struct {
	scope  string   // --scope; "" for the default (auto)
	listen string   // --listen; "" for 127.0.0.1:0, whose port is read from the log
	args   []string // more flags
}

// launch starts relayd without waiting for it to listen.
func launch(bin string, o startOpts) (*daemon, error) {
	dir, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, workspace: filepath.Join(dir, "workspace"), token: randomHex(16),
		logs: newLogSink(), exited: make(chan struct{})}
	if err := os.Mkdir(d.workspace, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(d.token+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen := o.listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := []string{"--listen", listen, "--token-file", tokenFile, "--workspace", d.workspace}
	if o.scope != "" {
		args = append(args, "--scope", o.scope)
	}
	args = append(args, o.args...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Dir = dir
	d.cmd.Env = cleanEnv()
	d.cmd.Stdout = d.logs
	d.cmd.Stderr = d.logs
	d.startedAt = time.Now()
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting relayd: %w", err)
	}
	d.pid = d.cmd.Process.Pid
	go func() {
		err := d.cmd.Wait() // waits for this pid only
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			d.exitCode = ee.ExitCode()
		default:
			d.exitCode = -1
		}
		close(d.exited)
	}()
	d.forget = atCleanup(d.kill)
	return d, nil
}

// startRelayd starts relayd on a free loopback port and waits until it logs
// the address it listens on.
func startRelayd(bin string, o startOpts) (*daemon, error) {
	d, err := launch(bin, o)
	if err != nil {
		return nil, err
	}
	select {
	case <-d.logs.listening:
		d.addr = d.logs.addr()
		return d, nil
	case <-d.exited:
		err = fmt.Errorf("relayd exited with status %d at start: %s", d.exitCode, d.logs.lastLine())
	case <-time.After(20 * time.Second):
		err = fmt.Errorf("relayd did not log its address within 20s: %s", d.logs.lastLine())
	}
	d.stop()
	return nil, err
}

// stop sends SIGTERM to relayd and waits for it to exit; it returns an
// error when relayd exited with a status other than 0 (or had to be killed).
func (d *daemon) stop() error {
	defer d.forget()
	select {
	case <-d.exited:
	default:
		_ = syscall.Kill(d.pid, syscall.SIGTERM) // the pid this run started
		select {
		case <-d.exited:
		case <-time.After(20 * time.Second):
			d.kill()
			return fmt.Errorf("relayd (pid %d) did not exit within 20s of SIGTERM; killed", d.pid)
		}
	}
	os.RemoveAll(d.dir)
	if d.exitCode != 0 {
		return fmt.Errorf("relayd (pid %d) exited with status %d after SIGTERM: %s", d.pid, d.exitCode, d.logs.lastLine())
	}
	return nil
}

// kill is the interrupted run's cleanup: SIGTERM (relayd settles what runs),
// then SIGKILL after a while.
func (d *daemon) kill() {
	select {
	case <-d.exited:
	default:
		_ = syscall.Kill(d.pid, syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(d.pid, syscall.SIGKILL)
			<-d.exited
		}
	}
	os.RemoveAll(d.dir)
}

// status reads a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func (d *daemon) status(field string) (kib float64, err error) {
	return procStatus(d.pid, field)
}

func procStatus(pid int, field string) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// cpuTime is the CPU time pid has used (user and system, all its threads,
// not its children), from /proc/PID/stat, in clock ticks of 10 ms.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAYD_") {
			out = append(out, kv)
		}
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// probeCgroup says why relayd --scope cgroup cannot run here, or "".
func probeCgroup(bin string) string {
	d, err := startRelayd(bin, startOpts{scope: "cgroup"})
	if err != nil {
		return "relayd --scope cgroup refused to start: " + strings.TrimPrefix(err.Error(), "relayd ")
	}
	if err := d.stop(); err != nil {
		return err.Error()
	}
	return ""
}

// logSink takes relayd's log: it finds the "listening" line and keeps the
// last lines for error messages, dropping the rest (relayd logs every
// execution at info level, and this run makes hundreds of thousands).
type logSink struct {
	mu        sync.Mutex
	partial   []byte
	tail      []string
	address   string
	listening chan struct{}
}

func newLogSink() *logSink { return &logSink{listening: make(chan struct{})} }

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if l.address == "" && strings.Contains(line, `"listening"`) {
			var rec struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "listening" && rec.Addr != "" {
				l.address = rec.Addr
				close(l.listening)
			}
		}
		l.tail = append(l.tail, line)
		if len(l.tail) > 20 {
			l.tail = l.tail[1:]
		}
	}
	if len(l.partial) > 64<<10 {
		l.partial = l.partial[:0]
	}
	return len(p), nil
}

func (l *logSink) addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.address
}

// lastLine is relayd's last log line, or its message when it is JSON.
func (l *logSink) lastLine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.tail) - 1; i >= 0; i-- {
		line := strings.TrimSpace(l.tail[i])
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

// client is one controller connection.
type client struct {
	c         net.Conn
	r         *bufio.Reader
	token     string
	mechanism string // from the ready reply
}

func (d *daemon) dial() (*client, error) {
	c, err := net.DialTimeout("tcp", d.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &client{c: c, r: bufio.NewReaderSize(c, 64<<10), token: d.token}, nil
}

// connect dials and does the ready handshake.
func (d *daemon) connect() (*client, error) {
	cl, err := d.dial()
	if err != nil {
		return nil, err
	}
	if err := cl.ready(); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

func (cl *client) close() { cl.c.Close() }

func (cl *client) ready() error {
	r, err := cl.request(map[string]any{"kind": "ready"}, 10*time.Second)
	if err != nil {
		return err
	}
	if r.Kind != "ready" {
		return fmt.Errorf("handshake: got %s; want ready", r.raw())
	}
	_ = json.Unmarshal(r.Scope, &cl.mechanism) // a string in ready
	return nil
}

// reply is what the bench reads of relayd's replies.
type reply struct {
	Kind            string `json:"kind"`
	Termination     string `json:"termination"`
	ExitCode        *int   `json:"exitCode"`
	Settlement      string `json:"settlement"`
	Detail          string `json:"detail"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	Diagnostic      struct {
		Category string `json:"category"`
		Bytes    int64  `json:"bytes"`
	} `json:"diagnostic"`
	Scope json.RawMessage `json:"scope"`
	Error *struct {
		Category string `json:"category"`
		Message  string `json:"message"`
	} `json:"error"`
	line []byte
}

// raw is the reply for an error message, cut short.
func (r *reply) raw() string {
	s := string(r.line)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.TrimSpace(s)
}

// encode builds one request line with the token.
func (cl *client) encode(m map[string]any) []byte {
	m["token"] = cl.token
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

func (cl *client) send(line []byte) error {
	_ = cl.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := cl.c.Write(line)
	return err
}

// read reads one reply within timeout.
func (cl *client) read(timeout time.Duration) (*reply, error) {
	_ = cl.c.SetReadDeadline(time.Now().Add(timeout))
	line, err := cl.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A big reply (1 MiB of raw stdout): collect the whole line.
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = cl.r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil {
		return nil, fmt.Errorf("reading a reply: %w", err)
	}
	r := &reply{line: line}
	if err := json.Unmarshal(line, r); err != nil {
		return nil, fmt.Errorf("reply is not JSON: %q", r.raw())
	}
	return r, nil
}

func (cl *client) request(m map[string]any, timeout time.Duration) (*reply, error) {
	if err := cl.send(cl.encode(m)); err != nil {
		return nil, err
	}
	return cl.read(timeout)
}

// executeLine sends a prepared execute and checks that the subject exited 0.
func (cl *client) executeLine(line []byte, timeout time.Duration) (*reply, error) {
	if err := cl.send(line); err != nil {
		return nil, err
	}
	r, err := cl.read(timeout)
	if err != nil {
		return nil, err
	}
	if r.Kind != "executed" || r.ExitCode == nil || *r.ExitCode != 0 || r.Termination != "exited" {
		return r, fmt.Errorf("got %s; want an executed reply with exit code 0", r.raw())
	}
	return r, nil
}
