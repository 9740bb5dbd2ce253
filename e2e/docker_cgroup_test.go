//go:build docker

package e2e

// The cgroup mechanism inside a container: deploy/docker/run-cgroup.sh
// (printed in the README) gives the container a cgroup v2 directory made for
// the trial on the host, and deploy/docker/rm-cgroup.sh removes it. Checked
// from the host: relayd's own cgroup and each execution's leaf in that
// directory, and the host's /proc once a tree is settled.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/env"
)

// cgroupTrial starts a variant of run-cgroup.sh with CGROUP a fresh
// directory beside this test's own cgroup in the host's cgroup v2
// hierarchy, and removes both with rm-cgroup.sh when the test ends.
func cgroupTrial(t *testing.T, text string) (tr *trial, dir string) {
	t.Helper()
	own, err := env.FindCgroup2("")
	if err != nil || own.Outside {
		t.Skipf("the host has no cgroup v2 hierarchy holding this test's cgroup: %v", err)
	}
	dir = filepath.Join(own.Base, "relayd-test-cg-"+strings.TrimPrefix(newToken(), "tok-")[:12])
	// Registered before the trial's own cleanup, so it runs after it: the
	// directory goes even when the trial never started.
	t.Cleanup(func() {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return
		}
		waitFor(t, 15*time.Second, "the trial's cgroup directory to be removable", func() bool {
			removeTree(dir)
			_, err := os.Stat(dir)
			return errors.Is(err, fs.ErrNotExist)
		})
	})
	tr = startTrialText(t, "run-cgroup.sh", text, "CGROUP="+dir)
	// rm-cgroup.sh, as printed, once the test is done with the container
	// (registered last, so it runs first).
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker(30*time.Second, "logs", tr.name)
			t.Logf("docker logs %s:\n%s", tr.name, tail(logs, 6000))
		}
		script := readDeploy(t, "rm-cgroup.sh")
		var out []byte
		var err error
		// The container's processes are gone when docker rm returns, but
		// the kernel may report their cgroups populated a moment longer.
		for deadline := time.Now().Add(15 * time.Second); ; {
			cmd := exec.Command("/bin/sh", "-ec", script)
			cmd.Env = append(cleanEnv(), "TRIAL="+tr.name, "CGROUP="+dir)
			out, err = cmd.CombinedOutput()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, serr := os.Stat(dir); err != nil || !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("deploy/docker/rm-cgroup.sh: %v: %s; %s still there: %v", err, out, dir, serr)
		}
	})
	return tr, dir
}

// removeTree removes a cgroup directory and those below it, deepest first.
func removeTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// leafPids lists, as the host sees them, the processes in the cgroups below
// dir other than relayd's own leaf (daemon).
func leafPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == "daemon" {
			return filepath.SkipDir
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// The cgroup mechanism in a container, with the settings of run-cgroup.sh
// and variants of it: ready says cgroup, relayd and each execution are in
// the trial's directory on the host, and a framework timeout settles a
// setsid + double-fork + TERM-ignoring tree, every process of which is then
// gone from the host's /proc. With Docker's default seccomp profile clone3
// is refused, and relayd says it enters leaves through its helper; with the
// filter off it is not.
func TestDockerCgroupMechanism(t *testing.T) {
	text := readDeploy(t, "run-cgroup.sh")
	const mount = "  --mount type=bind,source=\"$CGROUP\",target=/sys/fs/cgroup/unified \\\n"
	if !strings.Contains(text, mount) {
		t.Fatalf("deploy/docker/run-cgroup.sh has no line %q", mount)
	}
	const (
		outside = "relayd's own cgroup is in no cgroup2 mount, so the top of /sys/fs/cgroup/unified is the base"
		helper  = "clone3 is refused here (a seccomp filter)"
	)
	tests := []struct {
		name, text string
		logs       []string // what the startup log says
		not        string   // and what it does not
		full       bool     // the checks of every container trial too (trial.check)
	}{
		{"as-printed", text, []string{outside, helper}, "", true},
		{"private-cgroupns", strings.Replace(text, mount, mount+"  --cgroupns=private \\\n", 1), []string{outside, helper}, "", false},
		{"seccomp-unconfined", strings.Replace(text, mount, mount+"  --security-opt seccomp=unconfined \\\n", 1), []string{outside}, helper, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, dir := cgroupTrial(t, tt.text)
			c, ready := tr.connect()
			if ready["scope"] != "cgroup" {
				t.Fatalf("ready.scope = %v; want cgroup", ready["scope"])
			}
			logs := mustDocker(t, "logs", tr.name)
			for _, want := range tt.logs {
				if !strings.Contains(logs, want) {
					t.Fatalf("relayd's startup log does not say %q: %s", want, logs)
				}
			}
			if tt.not != "" && strings.Contains(logs, tt.not) {
				t.Fatalf("relayd's startup log says %q: %s", tt.not, logs)
			}
			// relayd (PID 1 in the container) moved itself into its
			// subtree of the trial's directory on the host.
			// So are its idle shims, and nothing else.
			relayd := tr.inspect("{{.State.Pid}}")
			b, err := os.ReadFile(filepath.Join(dir, "relayd-1", "daemon", "cgroup.procs"))
			pids := strings.Fields(string(b))
			if err != nil || !slices.Contains(pids, relayd) {
				t.Fatalf("%s/relayd-1/daemon/cgroup.procs = %q, %v; want relayd's host pid %s", dir, b, err, relayd)
			}
			for _, p := range pids {
				if pid, _ := strconv.Atoi(p); p != relayd && cmdline(pid) != "relayd-shim" {
					t.Fatalf("%s/relayd-1/daemon/cgroup.procs holds %s (%q); want relayd and its shims only", dir, p, cmdline(pid))
				}
			}
			settleEscapees(t, tr, c, dir)
			if tt.full {
				tr.check(c, ready, 1)
			}
		})
	}
}

// settleEscapees runs a tree that leaves the session, double-forks and
// ignores SIGTERM, sees all of it in the execution's leaf on the host, and
// after the framework timeout finds none of it in the host's /proc.
func settleEscapees(t *testing.T, tr *trial, c *client, dir string) {
	t.Helper()
	tree := `
setsid sh -c 'trap "" TERM; sleep 310 & wait' &
( setsid sh -c 'trap "" TERM; exec sleep 311' & )
sh -c 'trap "" TERM; while :; do sleep 1; done' &
exec sleep 312`
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", tree}, "timeoutMs": 3000})
	var pids []int
	waitFor(t, 10*time.Second, "the tree's five processes in its leaf on the host", func() bool {
		pids = leafPids(dir)
		return len(pids) >= 5
	})
	init, _ := strconv.Atoi(tr.inspect("{{.State.Pid}}"))
	pidns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		t.Fatal(err)
	}
	r := c.read(30 * time.Second)
	wantExit(t, r, "framework_timeout", 124)
	if scope, _ := r["scope"].(map[string]any); r["settlement"] != "settled" || scope["mechanism"] != "cgroup" {
		t.Fatalf("settlement %v scope %v; want settled under cgroup", r["settlement"], r["scope"])
	}
	for _, pid := range pids {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == pidns {
			t.Errorf("process %d (%s) of the settled tree is still on the host", pid, cmdline(pid))
		}
	}
	if left := leafPids(dir); len(left) != 0 {
		t.Errorf("the trial's cgroups still hold %v after the settlement", left)
	}
}
