package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// Looking without touching (protocol 4.6, issue 32): status answers at
// once with what runs or waits detached, the sessions, the survivors a
// trial boundary would list and the boundaries so far, and changes
// nothing: no execution ends, nothing is signalled.

// executionIn returns the entry of execution name in a status reply.
func executionIn(t *testing.T, st msg, name string) msg {
	t.Helper()
	list, ok := st["executions"].([]any)
	if !ok {
		t.Fatalf("status %v: executions is not an array", st)
	}
	for _, e := range list {
		if m, _ := e.(map[string]any); m["execution"] == name {
			return m
		}
	}
	return nil
}

func TestStatusChangesNothing(t *testing.T) { eachScope(t, testStatusChangesNothing) }

func testStatusChangesNothing(t *testing.T, mech string) {
	d := startRelayd(t, opts{scope: mech})
	defer d.stopClean()

	// A running execution with a deadline, on its own connection.
	runner := d.connect()
	runPid := d.pidFile("running.pid")
	runner.send(msg{"kind": "execute", "id": 3, "command": "/bin/sh", "timeoutMs": 60000, "stream": true,
		"args": []string{"-c", "echo $$ > " + q(runPid) + "; exec sleep 300", "arg-two"}})
	running := runner.started(3)
	runningPid := waitPid(t, runPid)
	// A detached one, and survivors of an exited one (a listening service).
	detached, detachedPid := detachedSubject(t, d, "exec sleep 300", msg{"detachMs": 30000})
	svc := leaveService(t, d, d.connect(), "svc")

	look := d.connect()
	st := look.request(msg{"kind": "status", "id": "s1"})
	if st["kind"] != "status" || st["id"] != "s1" {
		t.Fatalf("got %v; want a status reply echoing id s1", st)
	}
	if sessions, ok := st["sessions"].([]any); !ok || len(sessions) != 0 {
		t.Fatalf("status %v: sessions = %v; want []", st, st["sessions"])
	}
	if _, ok := st["boundary"]; !ok || num(t, st, "boundary") != 0 {
		t.Fatalf("status %v: boundary = %v; want 0 before any boundary", st, st["boundary"])
	}
	e := executionIn(t, st, running)
	if e == nil {
		t.Fatalf("status %v does not list the running %s", st, running)
	}
	args, _ := e["args"].([]any)
	if e["program"] != "/bin/sh" || len(args) != 3 || args[2] != "arg-two" || e["detached"] != false {
		t.Fatalf("execution %v: want program /bin/sh, its 3 args, not detached", e)
	}
	if started := num(t, e, "startedMs"); started < 0 || started > 60000 {
		t.Fatalf("execution %v: startedMs %d; want how long ago it started", e, started)
	}
	if left := num(t, e, "timeoutMs"); left <= 0 || left > 60000 {
		t.Fatalf("execution %v: timeoutMs %d; want what is left of 60000", e, left)
	}
	if de := executionIn(t, st, detached); de == nil || de["detached"] != true {
		t.Fatalf("status %v: detached %s = %v; want it listed, detached", st, detached, de)
	} else if _, ok := de["timeoutMs"]; ok {
		t.Fatalf("execution %v: timeoutMs without a deadline", de)
	}
	wantTrialSurvivor(t, st, svc.pid, svc.execution, []int{svc.port})
	wantTrialSurvivor(t, st, svc.loop, svc.execution, nil)

	// Nothing changed: the subjects run, the survivors live and beat, the
	// running execution's connection got no reply.
	if line, err := runner.wire().ReadLine(500 * time.Millisecond); !errors.Is(err, testharness.ErrNoReply) {
		t.Fatalf("the running execution's connection got %q (%v) after a status; want nothing", line, err)
	}
	if !alive(runningPid) || !alive(detachedPid) || !alive(svc.pid) || !alive(svc.child) || !beating(svc.beat) {
		t.Fatal("a status ended or signalled something")
	}
	// A second look sees the same; status stays on its connection.
	if st2 := look.request(msg{"kind": "status"}); executionIn(t, st2, running) == nil || num(t, st2, "boundary") != 0 {
		t.Fatalf("second status %v: want the running execution, boundary 0", st2)
	}

	// The boundary it did not draw: then status counts it.
	boundary(t, look, msg{"survivors": "settle"})
	if r := runner.read(10 * time.Second); r == nil || r["kind"] != "executed" {
		t.Fatalf("got %v; want the running execution's executed reply at the boundary", r)
	}
	st = look.request(msg{"kind": "status"})
	if num(t, st, "boundary") != 1 || executionIn(t, st, running) != nil {
		t.Fatalf("status after the boundary %v: want boundary 1 and %s gone", st, running)
	}
}

// relayctl status and relayctl survivors look without touching: run while
// an exec runs on another connection, they leave it running (issue 32,
// finding 1: relayctl survivors was a trial boundary and ended it, 124).
func TestRelayctlStatusLeavesExecRunning(t *testing.T) {
	bin := relayctl(t)
	d := startRelayd(t, opts{})
	svc := leaveService(t, d, d.connect(), "svc")
	env := append(cleanEnv(), "RELAYD_TOKEN="+d.token, "RELAYCTL_ADDR="+d.addr)

	marker := filepath.Join(d.dir, "exec-done")
	execCmd := exec.Command(bin, "exec", "--", "/bin/sh", "-c", "sleep 3; touch "+q(marker))
	execCmd.Env = env
	var execOut bytes.Buffer
	execCmd.Stdout, execCmd.Stderr = &execOut, &execOut
	if err := execCmd.Start(); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() { execDone <- execCmd.Wait() }()
	t.Cleanup(func() { _ = execCmd.Process.Kill() }) // our own child, by pid
	// Not relayd's log: the service's execution logged "program":"sh" too.
	look := d.connect()
	waitFor(t, 10*time.Second, "the exec to run", func() bool {
		xs, _ := look.request(msg{"kind": "status"})["executions"].([]any)
		return len(xs) == 1
	})

	for _, verb := range []string{"status", "survivors"} {
		cmd := exec.Command(bin, verb)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := testharness.RunWithin(cmd, 20*time.Second); err != nil {
			t.Fatalf("relayctl %s: %v; stderr: %s", verb, err, errOut.String())
		}
		if !strings.Contains(out.String(), strconv.Itoa(svc.pid)) || !strings.Contains(out.String(), strconv.Itoa(svc.port)) {
			t.Fatalf("relayctl %s printed\n%s\nwant the survivor %d with its port %d", verb, out.String(), svc.pid, svc.port)
		}
		if verb == "status" && !strings.Contains(out.String(), "/bin/sh -c sleep 3") {
			t.Fatalf("relayctl status printed\n%s\nwant the running exec", out.String())
		}
	}
	select {
	case err := <-execDone:
		t.Fatalf("relayctl exec ended (%v) while the status looked: %s", err, execOut.String())
	default:
	}
	select {
	case err := <-execDone:
		if err != nil {
			t.Fatalf("relayctl exec: %v; want exit 0: %s", err, execOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relayctl exec did not end")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the exec did not run to its end: %v; output %s", err, execOut.String())
	}
	if !alive(svc.pid) || !beating(svc.beat) {
		t.Fatal("a look signalled a survivor")
	}
	if !slices.Contains(strings.Fields(execOut.String()), "exit") {
		t.Fatalf("relayctl exec printed %q; want its summary", execOut.String())
	}
	boundary(t, d.connect(), msg{"survivors": "settle"})
	d.stopClean()
}

// An open shell session's own processes (its shell, here bash --noprofile
// --norc, pid P) are survivors on the wire (protocol 4.7), but relayctl
// shows them as the session's, by its id, in status, survivors and
// verify: a person counting what an agent left sees only that.
func TestRelayctlShowsSessionsApart(t *testing.T) {
	bin := relayctl(t)
	d := startRelayd(t, opts{})
	defer d.stopClean()
	cl := d.connect()
	r := cl.request(msg{"kind": "execute", "command": "sh", "args": []any{"-c", "sleep 300 >/dev/null 2>&1 & echo $!"}})
	left, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(r["stdout"])))
	if err != nil {
		t.Fatalf("the leftover's pid: %v", r)
	}
	t.Cleanup(func() { killPid(left) }) // started by this test
	opened := d.connect().request(msg{"kind": "open"})
	if opened["kind"] != "opened" {
		t.Fatalf("open: %v", opened)
	}
	name := fmt.Sprint(opened["session"])
	var shell int
	waitFor(t, 10*time.Second, "the session's shell in status", func() bool {
		st := cl.request(msg{"kind": "status"})
		ss, _ := st["sessions"].([]any)
		if len(ss) != 1 {
			return false
		}
		pid, err := strconv.Atoi(fmt.Sprint(ss[0].(map[string]any)["pid"]))
		shell = pid
		return err == nil
	})
	env := append(cleanEnv(), "RELAYD_TOKEN="+d.token, "RELAYCTL_ADDR="+d.addr)
	run := func(verb string) (stdout, stderr string) {
		cmd := exec.Command(bin, verb)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := testharness.RunWithin(cmd, 30*time.Second); err != nil {
			t.Fatalf("relayctl %s: %v; stderr: %s", verb, err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	// rows are the lines of text whose first field is pid.
	rows := func(text string, pid int) []string {
		var out []string
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.Itoa(pid) {
				out = append(out, l)
			}
		}
		return out
	}

	out, _ := run("status")
	if !strings.Contains(out, "shell sessions: "+name) {
		t.Errorf("relayctl status does not name the session %s:\n%s", name, out)
	}
	i := strings.Index(out, "survivors (what executions left): 1\n")
	if i < 0 {
		t.Fatalf("relayctl status does not count 1 survivor apart:\n%s", out)
	}
	if r := rows(out[:i], shell); len(r) != 1 || !strings.Contains(r[0], name) {
		t.Errorf("relayctl status does not list the shell %d as %s's: %q\n%s", shell, name, r, out)
	}
	if len(rows(out[i:], shell)) != 0 || len(rows(out[i:], left)) != 1 {
		t.Errorf("relayctl status's survivors are not the leftover %d alone:\n%s", left, out[i:])
	}

	out, errOut := run("survivors")
	if len(rows(out, shell)) != 0 || len(rows(out, left)) != 1 {
		t.Errorf("relayctl survivors lists the session's shell %d, or not the leftover %d:\n%s", shell, left, out)
	}
	if !strings.Contains(errOut, "shell session "+name) {
		t.Errorf("relayctl survivors does not say %s holds a process: %q", name, errOut)
	}

	_, errOut = run("verify")
	if !strings.Contains(errOut, "quiescent, 1 survivor;") || !strings.Contains(errOut, "shell session "+name+" (1 process)") {
		t.Errorf("relayctl verify counts the session's shell as a survivor:\n%s", errOut)
	}
	if !strings.Contains(errOut, fmt.Sprintf("survivor %d sleep 300", left)) ||
		!strings.Contains(errOut, fmt.Sprintf("shell session %s: %d bash", name, shell)) {
		t.Errorf("relayctl verify does not list the leftover as a survivor and the shell as %s's:\n%s", name, errOut)
	}
}
