package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The hardest escapee: it double-forks, calls setsid, ignores SIGTERM and
// forks again in a loop, each child recording its pid and writing into the
// workspace. After settlement every process it made is dead and the
// workspace stays still.
func TestForkingEscapeeSettled(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) { forkingEscapee(t, opts{scope: mech}) })
	noKillVariant(t, forkingEscapee)
}

func forkingEscapee(t *testing.T, o opts) {
	d := startRelayd(t, o)
	pids := d.pidFile("forker.pids")
	forker := filepath.Join(d.dir, "forker.sh")
	script := fmt.Sprintf(`trap '' TERM
echo $$ >> %[1]s
while :; do
  sh -c 'trap "" TERM; echo $$ >> %[1]s; date +%%s%%N > %[2]s/beat-$$; sleep 0.3' &
  sleep 0.01
done
`, q(pids), q(d.workspace))
	if err := os.WriteFile(forker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := d.connect()
	c.send(msg{"kind": "execute", "command": "/bin/sh",
		"args": []string{"-c", fmt.Sprintf(`( setsid sh %s & ) ; exec sleep 300`, q(forker))}, "timeoutMs": 1500})
	r := c.read(15 * time.Second)
	wantExit(t, r, "framework_timeout", 124)
	if r["settlement"] != "settled" {
		t.Fatalf("settlement %v; want settled", r["settlement"])
	}
	recorded := readPids(pids)
	if len(recorded) < 10 {
		t.Fatalf("only %d processes recorded: the forker did not get going", len(recorded))
	}
	for _, pid := range recorded {
		if alive(pid) {
			t.Errorf("process %d (%s) of the forking escapee survived", pid, cmdline(pid))
		}
	}
	before := snapshot(t, d.workspace)
	time.Sleep(500 * time.Millisecond)
	if snapshot(t, d.workspace) != before {
		t.Fatal("the workspace changed after settlement")
	}
	d.stopClean()
}

// Under --scope auto, a machine with a usable cgroup v2 hierarchy gets the
// cgroup mechanism, reported in ready and in every executed reply.
func TestAutoPicksCgroupWhereUsable(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	d := startRelayd(t, opts{})
	c := d.connect()
	if s := c.request(msg{"kind": "ready"})["scope"]; s != "cgroup" {
		t.Fatalf("ready.scope %v; want cgroup", s)
	}
	r := c.sh("exit 0", nil)
	if sc, _ := r["scope"].(map[string]any); sc["mechanism"] != "cgroup" {
		t.Fatalf("executed.scope %v; want mechanism cgroup", r["scope"])
	}
	d.stopClean()
}

// Cgroup leaves never leak: each execution's leaf is removed once empty, a
// leaf with survivors once they are gone, relayd's subtree when it exits,
// and empty leftovers of a relayd that died are removed at the next start.
func TestCgroupLeavesDoNotLeak(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	d := startRelayd(t, opts{scope: "cgroup"})
	subtree := subtreeOf(t, d)
	c := d.connect()
	for i := 0; i < 5; i++ {
		c.sh("exit 0", nil)
	}
	svc := d.pidFile("svc.pid")
	c.sh("sleep 300 & echo $! > "+q(svc)+"; exit 0", nil)
	c.sh("sleep 300", msg{"timeoutMs": 50})
	leaves := func() []string {
		entries, _ := os.ReadDir(subtree)
		var out []string
		for _, e := range entries {
			if e.IsDir() && e.Name() != "daemon" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if l := leaves(); len(l) != 1 {
		t.Fatalf("leaves %v; want only the one that holds a survivor", l)
	}
	killPid(waitPid(t, svc))
	waitFor(t, 5*time.Second, "the survivor's leaf to be removed", func() bool { return len(leaves()) == 0 })
	d.stopClean()
	if _, err := os.Stat(subtree); err == nil {
		t.Fatalf("relayd left its subtree %s behind", subtree)
	}

	// A relayd that died without cleaning up: its empty leaves go at the next start.
	base := filepath.Dir(subtree)
	stale := filepath.Join(base, "relayd-"+strconv.Itoa(deadPid(t)))
	for _, dir := range []string{stale, filepath.Join(stale, "daemon"), filepath.Join(stale, "x-7")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		os.Remove(filepath.Join(stale, "x-7"))
		os.Remove(filepath.Join(stale, "daemon"))
		os.Remove(stale)
	})
	d2 := startRelayd(t, opts{scope: "cgroup"})
	if _, err := os.Stat(stale); err == nil {
		t.Fatalf("the stale subtree %s was not removed at startup", stale)
	}
	d2.stopClean()
}

// subtreeOf reads relayd's cgroup subtree from its startup log.
func subtreeOf(t testing.TB, d *daemon) string {
	t.Helper()
	logs := d.logs.String()
	i := strings.Index(logs, `"subtree":"`)
	if i < 0 {
		t.Fatalf("no subtree in the startup log: %s", logs)
	}
	rest := logs[i+len(`"subtree":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// deadPid returns a pid that no process has now.
func deadPid(t *testing.T) int {
	for pid := 4000000; pid > 3000000; pid -= 7 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return pid
		}
	}
	t.Fatal("no free pid found")
	return 0
}
