package testharness

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A command name with spaces and parentheses does not shift the fields.
func TestReadStatOddName(t *testing.T) {
	src, err := os.Open("/bin/sleep")
	if err != nil {
		t.Skip(err)
	}
	defer src.Close()
	bin := filepath.Join(t.TempDir(), "a) b (c")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	st, err := ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getpid() || st.Dead() || st.Start == 0 {
		t.Fatalf("ReadStat = %+v; want ppid %d, alive, a start time", st, os.Getpid())
	}
	if kids := Children(os.Getpid()); len(kids) != 1 || kids[0] != cmd.Process.Pid {
		t.Fatalf("Children = %v; want [%d]", kids, cmd.Process.Pid)
	}
	if _, err := ReadStat(1 << 30); err == nil {
		t.Fatal("ReadStat of a pid that cannot exist: no error")
	}
}

// The Log finds relayd's "listening" line even when it arrives in pieces,
// and keeps only its bound.
func TestLogListening(t *testing.T) {
	l := NewLog(64)
	line := `{"level":"info","addr":"127.0.0.1:4242","message":"listening"}` + "\n"
	for i := 0; i < len(line); i += 7 {
		_, _ = l.Write([]byte(line[i:min(i+7, len(line))]))
	}
	select {
	case <-l.Listening():
	case <-time.After(time.Second):
		t.Fatal("no listening line found")
	}
	if l.Addr() != "127.0.0.1:4242" {
		t.Fatalf("Addr = %q", l.Addr())
	}
	if n := len(l.String()); n > 64 {
		t.Fatalf("the log keeps %d bytes; want at most 64", n)
	}
}

// A relayd the harness prepares keeps its state and its socket in its
// own directory, never in the machine's /run/relayd, unless the test
// names them.
func TestPrepareOwnStateDir(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    Options
		want string // the state directory relayd is given by the environment; "" for none added
		sock string // and the socket
	}{
		{"default", Options{Bin: "relayd", Dir: dir}, filepath.Join(dir, "state"), filepath.Join(dir, "relayd.sock")},
		{"env given", Options{Bin: "relayd", Dir: dir, Env: []string{"PATH=/bin"}}, filepath.Join(dir, "state"), filepath.Join(dir, "relayd.sock")},
		{"flag", Options{Bin: "relayd", Dir: dir, Args: []string{"--state-dir", "/elsewhere", "--socket", ""}}, "", ""},
		{"flag=", Options{Bin: "relayd", Dir: dir, Args: []string{"--state-dir=/elsewhere", "--socket=/s"}}, "", ""},
		{"env names it", Options{Bin: "relayd", Dir: dir, Env: []string{"RELAYD_STATE_DIR=/elsewhere", "RELAYD_SOCKET=/s"}}, "/elsewhere", "/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(dir, "workspace"))
			r, err := Prepare(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []struct{ twin, want string }{{"RELAYD_STATE_DIR=", tc.want}, {"RELAYD_SOCKET=", tc.sock}} {
				var got []string
				for _, kv := range r.Cmd.Env {
					if s, ok := strings.CutPrefix(kv, v.twin); ok {
						got = append(got, s)
					}
				}
				switch {
				case v.want == "" && len(got) != 0:
					t.Errorf("env has %s%v; want none added (the flag names it)", v.twin, got)
				case v.want != "" && (len(got) != 1 || got[0] != v.want):
					t.Errorf("env has %s%v; want [%s]", v.twin, got, v.want)
				}
			}
		})
	}
}

// TestStartedBy: a process started before its pid file was written is
// the file's; one started after it (a pid taken since) is not.
func TestStartedBy(t *testing.T) {
	before := exec.Command("sleep", "30")
	if err := before.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = before.Process.Kill(); _ = before.Wait() }()
	time.Sleep(50 * time.Millisecond)
	written := time.Now()
	if !StartedBy(before.Process.Pid, written) {
		t.Errorf("a process started before the write is not counted as the file's")
	}
	time.Sleep(100 * time.Millisecond)
	after := exec.Command("sleep", "30")
	if err := after.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = after.Process.Kill(); _ = after.Wait() }()
	if StartedBy(after.Process.Pid, written) {
		t.Errorf("a process started 100 ms after the write is counted as the file's: a reused pid would be killed")
	}
}

// Ours counts a process this test started, and neither this test's
// parent (older than the test run) nor pid 1 nor a pid that has ended.
func TestOurs(t *testing.T) {
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	if !Ours(pid) {
		t.Errorf("a process this test started is not ours")
	}
	if Ours(os.Getppid()) {
		t.Errorf("this test's parent (pid %d) counts as ours: a test would kill a process older than itself", os.Getppid())
	}
	if Ours(1) {
		t.Errorf("pid 1 counts as ours")
	}
	KillOurs(pid)
	_ = c.Wait()
	if c.ProcessState == nil || c.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("KillOurs left the process: %v", c.ProcessState)
	}
	if Ours(pid) {
		t.Errorf("a reaped pid counts as ours")
	}
}
