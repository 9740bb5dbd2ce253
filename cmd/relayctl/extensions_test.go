package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// The extensions of protocol section 4.5 through relayctl and the real relayd.

// --stream prints stdout as it arrives: relayctl has printed the first line
// while the command still waits for the test.
func TestExecStreamIsLive(t *testing.T) {
	r := start(t)
	gate := filepath.Join(r.Dir, "gate")
	cmd, stdout, stderr := startStreaming(t, r, "echo one; echo warn >&2; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo two")
	first := make(chan string, 1)
	br := bufio.NewReader(stdout)
	go func() { l, _ := br.ReadString('\n'); first <- l }()
	select {
	case l := <-first:
		if l != "one\n" {
			t.Fatalf("first line %q; want one", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relayctl --stream printed nothing while the command ran")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relayctl: %v; stderr %q", err, stderr.String())
	}
	if string(rest) != "two\n" || !strings.HasPrefix(stderr.String(), "warn\n") || !strings.Contains(stderr.String(), "exited, exit 0") {
		t.Fatalf("after the first line: stdout %q, stderr %q; want two, then warn and the summary on stderr", rest, stderr.String())
	}
}

func TestExecStderrAndOnExit(t *testing.T) {
	r := start(t)
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	got := relayctl(t, tok, "exec", "--addr", r.Addr, "--stderr", "--", "sh", "-c", "echo out; echo err >&2; exit 2")
	if got.code != 2 || got.stdout != "out\n" || !strings.HasPrefix(got.stderr, "err\nrelayctl: exited, exit 2") {
		t.Fatalf("--stderr: got %d, stdout %q, stderr %q; want 2, out, err before the summary", got.code, got.stdout, got.stderr)
	}
	got = relayctl(t, tok, "exec", "--addr", r.Addr, "--", "sh", "-c", "echo err >&2")
	if strings.Contains(got.stderr, "err\n") {
		t.Fatalf("without --stderr: stderr %q; want the command's stderr not printed", got.stderr)
	}
	pidFile := filepath.Join(r.Dir, "pid")
	t.Cleanup(func() {
		for _, pid := range pidsIn(pidFile) {
			if testharness.Alive(pid) {
				_ = syscallKill(pid)
			}
		}
	})
	got = relayctl(t, tok, "exec", "--addr", r.Addr, "--on-exit", "settle-on-failure", "--",
		"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > "+pidFile+"; exit 1")
	if got.code != 1 || !strings.Contains(got.stderr, "scope settled") || !strings.Contains(got.stderr, "0 survivors") {
		t.Fatalf("--on-exit settle-on-failure: got %d, stderr %q; want 1, scope settled, 0 survivors", got.code, got.stderr)
	}
	for _, pid := range pidsIn(pidFile) {
		if testharness.Alive(pid) {
			t.Fatalf("the command's sleep %d lives after --on-exit settle-on-failure", pid)
		}
	}
	got = relayctl(t, tok, "exec", "--addr", r.Addr, "--on-exit", "kill", "--", "true")
	if got.code != 125 || !strings.Contains(got.stderr, "settle-on-failure") {
		t.Fatalf("--on-exit kill: got %d, stderr %q; want 125 naming the choices", got.code, got.stderr)
	}
}

// relayctl exec --detach, killed while its command runs; relayctl attach
// takes the execution over and exits with its status.
func TestDetachAttach(t *testing.T) {
	r := start(t)
	gate := filepath.Join(r.Dir, "gate")
	cmd := exec.Command(relayctlBin, "exec", "--addr", r.Addr, "--detach", "30s", "--",
		"sh", "-c", "echo before; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo after; exit 4")
	cmd.Env = append(testharness.CleanEnv(), "RELAYD_TOKEN="+r.Token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	named := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`relayctl attach (x-[0-9]+)`).FindStringSubmatch(sc.Text()); m != nil {
				named <- m[1]
			}
		}
		close(named)
	}()
	var name string
	select {
	case name = <-named:
	case <-time.After(20 * time.Second):
	}
	if name == "" {
		t.Fatal("relayctl exec --detach did not name the execution on stderr")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL) // the relayctl this test started: its connection is lost
	_ = cmd.Wait()
	if err := os.WriteFile(gate, nil, 0o644); err != nil { // the command ends while detached
		t.Fatal(err)
	}
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	got := relayctl(t, tok, "attach", "--addr", r.Addr, name)
	if got.code != 4 || got.stdout != "before\nafter\n" || !strings.Contains(got.stderr, "exited, exit 4") {
		t.Fatalf("attach %s: got %d, stdout %q, stderr %q; want 4 with the whole stdout", name, got.code, got.stdout, got.stderr)
	}
	got = relayctl(t, tok, "attach", "--addr", r.Addr, name)
	if got.code != 125 || !strings.Contains(got.stderr, "not-found") {
		t.Fatalf("attach again: got %d, stderr %q; want 125, not-found", got.code, got.stderr)
	}
}

// A relayctl whose stdout is not read falls behind the stream: relayd drops
// what it cannot send, and relayctl says so on stderr.
func TestExecStreamDroppedNote(t *testing.T) {
	r := start(t)
	const n = 32 << 20
	done := filepath.Join(r.Dir, "done")
	cmd, stdout, stderr := startStreaming(t, r, "head -c 33554432 /dev/zero; touch "+done)
	deadline := time.Now().Add(20 * time.Second)
	for _, err := os.Stat(done); err != nil; _, err = os.Stat(done) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not finish writing within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	printed, _ := io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relayctl: %v; stderr %q", err, stderr.String())
	}
	m := regexp.MustCompile(`relayctl: ([0-9]+) bytes of stdout left out here`).FindAllStringSubmatch(stderr.String(), -1)
	var dropped int64
	for _, x := range m {
		var d int64
		_, _ = fmt.Sscan(x[1], &d)
		dropped += d
	}
	if dropped == 0 || printed+dropped != n {
		t.Fatalf("printed %d + noted as left out %d; want some left out, %d in all (stderr %q)", printed, dropped, n, stderr.String())
	}
}

// --json with --stream: stdout is JSON lines only, each chunk an output
// line as it came and the executed reply last; nothing else is printed.
func TestExecJSONStream(t *testing.T) {
	r := start(t)
	got := relayctl(t, []string{"RELAYD_TOKEN=" + r.Token}, "exec", "--addr", r.Addr, "--json", "--stream", "--stderr",
		"--", "sh", "-c", "echo one; echo two >&2; exit 4")
	if got.code != 4 || got.stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 4 and nothing on stderr (every word is a JSON line on stdout)", got.code, got.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n")
	streamed := map[string]string{}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d %q is not JSON: %v", i+1, l, err)
		}
		switch last := i == len(lines)-1; {
		case last && m["kind"] == "executed":
			if m["exitCode"] != float64(4) || m["termination"] != "exited" {
				t.Fatalf("the executed line %v; want exitCode 4, exited", m)
			}
		case !last && m["kind"] == "output":
			s, _ := m["stream"].(string)
			d, _ := m["data"].(string)
			streamed[s] += d
		default:
			t.Fatalf("line %d of %d is %q; want output lines, then one executed line", i+1, len(lines), l)
		}
	}
	if streamed["stdout"] != "one\n" || streamed["stderr"] != "two\n" {
		t.Fatalf("streamed %q; want stdout one and stderr two", streamed)
	}
}

// startStreaming starts relayctl exec --stream with sh -c script against r;
// the test reads its stdout as it comes. The test's cleanup ends it.
func startStreaming(t *testing.T, r *testharness.Relayd, script string) (*exec.Cmd, io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(relayctlBin, "exec", "--addr", r.Addr, "--stream", "--", "sh", "-c", script)
	cmd.Env = append(testharness.CleanEnv(), "RELAYD_TOKEN="+r.Token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // the relayctl this test started
	return cmd, stdout, stderr
}
