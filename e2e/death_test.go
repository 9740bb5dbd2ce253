package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/testharness"
)

// Protocol rule 6.10: relayd's own death does not leave work unbounded.
// A relayd is SIGKILLed while an execution runs whose TERM-ignoring escapee
// has left the subject's session (relayd is not PID 1). The execution's
// shim sees its socket to relayd end and settles its subtree by itself:
// nothing of the execution outlives the teardown bound, with no successor.
func TestShimSettlesWhenRelaydDies(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		o := deathOpts(t, mech)
		d := startRelayd(t, o)
		subject, escapee := startEscapee(t, d)
		d.signal(syscall.SIGKILL)
		d.wait(10 * time.Second)
		// --term-grace 300ms, --teardown-timeout 3s (deathOpts).
		waitFor(t, 3*time.Second+time.Second, "the shim to settle the subject and the escapee", func() bool {
			return !alive(escapee) && !alive(subject)
		})
	})
}

// startEscapee runs, on a connection of d, a subject whose TERM-ignoring
// escapee has left its session, and returns both pids once they run.
func startEscapee(t *testing.T, d *daemon) (subject, escapee int) {
	t.Helper()
	subjectFile, escapeeFile := d.pidFile("subject.pid"), d.pidFile("escapee.pid")
	c := d.connect()
	t.Cleanup(func() { c.c.Close() }) // held open until the test ends: its end would be a transport loss
	c.send(msg{"kind": "execute", "command": "/bin/sh", "timeoutMs": 600000, "args": []string{"-c", fmt.Sprintf(
		`echo $$ > %s; (setsid sh -c 'trap "" TERM; echo $$ > %s; exec sleep 300' &) ; exec sleep 300`,
		q(subjectFile), q(escapeeFile))}})
	return waitPid(t, subjectFile), waitPid(t, escapeeFile)
}

// When the shim dies with relayd (both SIGKILLed: the shim is stopped
// first, so that it cannot settle), the next relayd started with the same
// settings settles what they left before it serves, within the teardown
// bound, and logs the scope: from the state record (process-group: the
// subject and the members its shim last listed) or the leaf (cgroup).
func TestSuccessorSettlesWhatAKilledRelaydLeft(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		o := deathOpts(t, mech)
		d := startRelayd(t, o)
		subject, escapee := startEscapee(t, d)
		waitRecorded(t, d, mech, escapee)
		shim, _, ok := statOf(subject)
		if !ok || cmdline(shim) != "relayd-shim" {
			t.Fatalf("the subject's parent %d (%q) is no shim", shim, cmdline(shim))
		}
		if err := syscall.Kill(shim, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		d.signal(syscall.SIGKILL)
		d.wait(10 * time.Second)
		if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the shim to die", func() bool { return !alive(shim) })
		for _, pid := range []int{subject, escapee} {
			if !alive(pid) {
				t.Fatalf("process %d died with relayd and its shim: nothing is left for a successor to settle", pid)
			}
		}

		began := time.Now()
		d2 := startRelayd(t, o)
		waitFor(t, 5*time.Second, "the escapee and the subject to be gone", func() bool { return !alive(escapee) && !alive(subject) })
		if took, bound := time.Since(began), 3*time.Second+2*time.Second; took > bound {
			t.Errorf("the leftovers took %s to settle; want within the teardown timeout (3s) and startup", took)
		}
		line := leftoverLine(t, d2, "x-1")
		if line == nil {
			t.Fatalf("the successor's log names no settled scope x-1:\n%s", d2.logs.String())
		}
		if line["level"] != "warn" || line["outcome"] != "settled" || line["mechanism"] != mech || line["killed"] != true {
			t.Errorf("log line %v; want level warn, outcome settled, mechanism %s, killed true (the escapee ignores SIGTERM)", line, mech)
		}
		if n, _ := line["members"].(float64); n < 2 {
			t.Errorf("log line %v; want at least the subject and the escapee as members", line)
		}
		if where, _ := line["where"].(string); where == "" {
			t.Errorf("log line %v; want where the scope was found", line)
		} else if _, err := os.Stat(where); !os.IsNotExist(err) {
			t.Errorf("%s is still there after its scope was settled (stat: %v)", where, err)
		}
		c2 := d2.connect()
		if r := c2.sh("exit 0", nil); r["termination"] != "exited" {
			t.Fatalf("the successor's first execute: %v", r)
		}
		d2.stopClean()
	})
}

// Rule 6.1 holds across relayd's death: the survivor of a subject that
// exited by itself (a service it was asked to start) is left alone by the
// next relayd, even though the scope was running, and recorded, before the
// subject exited.
func TestSuccessorLeavesSurvivorsAlone(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		o := deathOpts(t, mech)
		d := startRelayd(t, o)
		svcFile, goFile := d.pidFile("svc.pid"), filepath.Join(d.dir, "go")
		c := d.connect()
		c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf(
			`(setsid sh -c 'echo $$ > %s; exec sleep 300' &); while [ ! -e %s ]; do sleep 0.02; done; exit 0`,
			q(svcFile), q(goFile))}})
		svc := waitPid(t, svcFile)
		waitRecorded(t, d, mech, svc) // recorded while the subject ran
		if err := os.WriteFile(goFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		r := c.read(15 * time.Second)
		wantExit(t, r, "exited", 0)
		if !contains(survivorPids(t, r), svc) {
			t.Fatalf("survivors %v; want the service %d", r["survivors"], svc)
		}

		d.signal(syscall.SIGKILL)
		d.wait(10 * time.Second)
		d2 := startRelayd(t, o)
		if !alive(svc) {
			t.Fatalf("the successor killed the service %d of an exited subject:\n%s", svc, d2.logs.String())
		}
		if line := leftoverLine(t, d2, "x-1"); line != nil {
			t.Fatalf("the successor settled the scope of an exited subject: %v", line)
		}
		killPid(svc)
		d2.stopClean()
	})
}

// A record names processes by pid and start time. A pid that now names
// another process (here: one the test started, given a wrong start time in
// a record of a relayd that no longer runs, and made a session leader so
// that the recorded session names it too) is never signalled; the record
// is settled as empty and removed.
func TestSuccessorNeverSignalsAReusedPid(t *testing.T) {
	stateDir := t.TempDir()
	victim := exec.Command("sleep", "300")
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	pid := victim.Process.Pid
	start := startTime(t, pid)
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	dead := deadPid(t)
	rec := map[string]any{"version": 1, "pid": dead, "start": 12345, "bootId": strings.TrimSpace(string(boot)),
		"pidNamespace": ns, "scopes": []any{map[string]any{"name": "x-9", "session": pid, "subjectStart": start + 1,
			"began": 0, "members": [][2]uint64{{uint64(pid), start + 1}}}}}
	b, _ := json.Marshal(rec)
	path := filepath.Join(stateDir, fmt.Sprintf("relayd-%d-12345.json", dead))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	d := startRelayd(t, opts{scope: "process-group", env: []string{"RELAYD_STATE_DIR=" + stateDir}})
	line := leftoverLine(t, d, "x-9")
	if line == nil {
		t.Fatalf("relayd did not log the record's scope x-9:\n%s", d.logs.String())
	}
	if line["members"] != float64(0) || line["outcome"] != "settled" {
		t.Errorf("log line %v; want 0 members, settled", line)
	}
	time.Sleep(100 * time.Millisecond) // a signal, had one been sent, has landed
	if !alive(pid) {
		t.Fatalf("process %d, whose pid a record named with another start time, was killed", pid)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the settled record %s is still there (stat: %v)", path, err)
	}
	d.stopClean()
}

// deathOpts starts relayds that share what a successor needs: the state
// directory, and in cgroup mode a cgroup root of the test's own, so that a
// successor never sees (and settles) another test's leaves.
func deathOpts(t *testing.T, mech string) opts {
	t.Helper()
	o := opts{scope: mech, env: []string{"RELAYD_STATE_DIR=" + filepath.Join(t.TempDir(), "state")}}
	if mech == "cgroup" {
		o.args = []string{"--cgroup-root", testCgroupRoot(t)}
	}
	return o
}

// testCgroupRoot makes a cgroup for one test beside relayd's usual base,
// and removes it, and whatever relayds left in it, at the end.
func testCgroupRoot(t *testing.T) string {
	t.Helper()
	cg, err := env.FindCgroup2("")
	if err != nil {
		t.Skip(err)
	}
	root := filepath.Join(cg.Base, fmt.Sprintf("e2e-death-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// What is left in it after a failure is the test's own subjects'.
		var rm func(string)
		rm = func(dir string) {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.IsDir() {
					rm(filepath.Join(dir, e.Name()))
				}
			}
			_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
			waitFor(t, 5*time.Second, "cgroup "+dir+" to empty", func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
				return err != nil || strings.Contains(string(b), "populated 0")
			})
			if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
				t.Errorf("cgroup %s left behind: %v", dir, err)
			}
		}
		rm(root)
	})
	return root
}

// waitRecorded waits until relayd d has recorded pid as a member of a
// running scope: in its state record (process-group), or in a leaf of its
// subtree (cgroup).
func waitRecorded(t *testing.T, d *daemon, mech string, pid int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("relayd to record process %d", pid), func() bool {
		if mech == "cgroup" {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			return strings.Contains(string(b), fmt.Sprintf("/relayd-%d/x-", d.cmd.Process.Pid))
		}
		stateDir := ""
		for _, kv := range d.cmd.Env {
			if v, ok := strings.CutPrefix(kv, "RELAYD_STATE_DIR="); ok {
				stateDir = v
			}
		}
		files, _ := filepath.Glob(filepath.Join(stateDir, fmt.Sprintf("relayd-%d-*.json", d.cmd.Process.Pid)))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var rec struct {
				Scopes []struct{ Members [][2]uint64 }
			}
			if json.Unmarshal(b, &rec) != nil {
				continue
			}
			for _, s := range rec.Scopes {
				for _, m := range s.Members {
					if int(m[0]) == pid {
						return true
					}
				}
			}
		}
		return false
	})
}

// leftoverLine finds the log line in which relayd d reports settling a
// scope of a relayd that no longer runs, by execution id (or leaf name).
func leftoverLine(t *testing.T, d *daemon, name string) map[string]any {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["execution"] != name {
			continue
		}
		if msg, _ := m["message"].(string); strings.Contains(msg, "relayd which no longer runs") {
			return m
		}
	}
	return nil
}

// startTime reads a process's start time (clock ticks since boot), field 22 of /proc/PID/stat.
func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	st, err := testharness.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.Start
}
