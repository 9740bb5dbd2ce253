package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Container-shaped tests: relayd as PID 1 of a new PID and mount namespace,
// as in an eval container, with the cgroup hierarchy read-only there as in an
// unprivileged Docker container. They need root and unshare(1).

// startInNamespace starts relayd as PID 1 of a new PID namespace with its
// own /proc, every cgroup2 mount remounted read-only inside it.
func startInNamespace(t *testing.T, o opts) *daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create PID and mount namespaces")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) not installed (util-linux)")
	}
	d := prepare(t, o)
	script := `for m in $(awk '$9 == "cgroup2" {print $5}' /proc/self/mountinfo); do mount -o remount,bind,ro "$m" || exit 97; done; exec "$@"`
	args := append([]string{"--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "/bin/sh", "-c", script, "relayd"}, d.cmd.Args...)
	old := d.cmd
	d.cmd = exec.Command(unshare, args...)
	d.cmd.Dir, d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = old.Dir, old.Env, old.Stdout, old.Stderr
	d.cmd.SysProcAttr = old.SysProcAttr
	d.start()
	d.init = d.nsInit(t)
	return d
}

// nsInit finds the host pid of the namespace's PID 1 (relayd): the child of unshare.
func (d *daemon) nsInit(t *testing.T) int {
	t.Helper()
	var pid int
	waitFor(t, 5*time.Second, "relayd inside the namespace", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", d.cmd.Process.Pid, d.cmd.Process.Pid))
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, _ = strconv.Atoi(f[0])
		return true
	})
	return pid
}

// hostPid translates a pid seen inside the namespace of init (a host pid)
// to the host's pid, through NSpid in /proc/PID/status.
func hostPid(t *testing.T, init, nsPid int) int {
	t.Helper()
	nsLink, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); l != nsLink {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) >= 2 && f[len(f)-1] == strconv.Itoa(nsPid) {
					return pid
				}
			}
		}
	}
	return 0
}

// nsProcesses lists the host pids and states of the namespace's processes other than init.
func nsProcesses(init int) map[int]byte {
	nsLink, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	out := map[int]byte{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == init {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); l == nsLink {
			if cmdline(pid) == "relayd-shim" {
				continue // relayd's own: an idle shim
			}
			if _, state, ok := statOf(pid); ok {
				out[pid] = state
			}
		}
	}
	return out
}

// In a container with a read-only cgroup hierarchy, auto falls back to
// process-group, says why, and still kills escapees; as PID 1 relayd reaps
// every orphan, so no zombie accumulates.
func TestContainerReadOnlyCgroupFallsBack(t *testing.T) {
	d := startInNamespace(t, opts{})
	init := d.init
	c := d.connect()
	if c.request(msg{"kind": "ready"})["scope"] != "process-group" {
		t.Fatal("ready.scope under auto with a read-only cgroup hierarchy is not process-group")
	}
	if !strings.Contains(d.logs.String(), "cgroup v2 unusable") {
		t.Fatal("startup did not log why cgroup was not used")
	}
	// Orphans that end: PID 1 must reap them.
	r := c.sh(`for i in 1 2 3 4 5; do (sleep 0.05 &) ; done; (true &); exit 0`, nil)
	wantExit(t, r, "exited", 0)
	waitFor(t, 5*time.Second, "every orphan to be reaped", func() bool {
		for _, state := range nsProcesses(init) {
			if state == 'Z' {
				return false
			}
		}
		return true
	})
	// Escapees are stopped in the fallback too.
	pids := filepath.Join(d.workspace, "escapees.pid")
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", escapeeScript(d, pids)}, "timeoutMs": 1500})
	r = c.read(15 * time.Second)
	wantExit(t, r, "framework_timeout", 124)
	if r["settlement"] != "settled" {
		t.Fatalf("settlement %v; want settled", r["settlement"])
	}
	if left := nsProcesses(init); len(left) > 0 {
		t.Fatalf("processes left in the namespace after settlement: %v", left)
	}
	d.stopClean()
}

// --scope cgroup where no hierarchy is usable refuses to start, saying why.
func TestContainerScopeCgroupRefused(t *testing.T) {
	d := prepare(t, opts{scope: "cgroup"})
	if os.Geteuid() != 0 {
		t.Skip("needs root to create PID and mount namespaces")
	}
	script := `for m in $(awk '$9 == "cgroup2" {print $5}' /proc/self/mountinfo); do mount -o remount,bind,ro "$m" || exit 97; done; exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "--propagation", "private", "/bin/sh", "-c", script, "relayd"}, d.cmd.Args...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v; want 2: %s", err, out)
	}
	if !strings.Contains(string(out), "--scope cgroup: no usable cgroup v2 hierarchy") {
		t.Fatalf("message %q does not say why", out)
	}
}

// Destroy as PID 1 kills every other process of the namespace (a stray
// service included) and nothing outside it.
func TestContainerDestroyKillsNamespaceOnly(t *testing.T) {
	outside := exec.Command("sleep", "300")
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outside.Process.Kill(); _ = outside.Wait() }()
	d := startInNamespace(t, opts{bin: faultBin, env: []string{"RELAYD_FAULT_PROC_ROOT=/nonexistent-proc"},
		args: []string{"--term-grace", "200ms", "--teardown-timeout", "1s"}})
	init := d.init
	c := d.connect()
	svc := filepath.Join(d.workspace, "svc.pid")
	r := c.sh("sleep 300 & echo $! > "+q(svc)+"; exit 0", nil)
	wantExit(t, r, "exited", 0)
	stray := hostPid(t, init, waitPid(t, svc))
	if stray == 0 || !alive(stray) {
		t.Fatal("the stray service did not start")
	}
	r = c.sh(`trap "" TERM; while :; do sleep 1; done`, msg{"timeoutMs": 200})
	wantExit(t, r, "framework_timeout", 124)
	if s := r["settlement"]; s != "destroyed" && s != "failed" {
		t.Fatalf("settlement %v; want destroyed or failed without evidence", s)
	}
	waitFor(t, 3*time.Second, "the namespace to be emptied", func() bool { return len(nsProcesses(init)) == 0 })
	if !alive(outside.Process.Pid) {
		t.Fatal("destroy killed a process outside relayd's namespace")
	}
	if !alive(init) {
		t.Fatal("relayd (PID 1) did not survive its own destroy")
	}
	// A later subject that dies of its own SIGKILL is its own death, not the destroy's.
	r = c.sh(`kill -KILL $$`, nil)
	wantExit(t, r, "exited", 137)
	if r["signal"] != "SIGKILL" {
		t.Fatalf("signal %v; want SIGKILL", r["signal"])
	}
	if code := d.stop(); code != 1 {
		t.Fatalf("relayd exited %d after a destroy; want 1", code)
	}
}

// As PID 1, the one reaper collects both orphans and subjects: no subject's
// status is lost to the orphan reaping, and no zombie accumulates.
func TestContainerPID1NoStatusLost(t *testing.T) {
	d := startInNamespace(t, opts{})
	c := d.connect()
	for i := 0; i < 40; i++ {
		r := c.sh(fmt.Sprintf(`(sleep 0.01 &) ; (exit 3 &) ; (true &) ; exit %d`, i), nil)
		wantExit(t, r, "exited", int64(i))
	}
	waitFor(t, 5*time.Second, "no zombie in the namespace", func() bool {
		for _, state := range nsProcesses(d.init) {
			if state == 'Z' {
				return false
			}
		}
		return true
	})
	d.stopClean()
}
