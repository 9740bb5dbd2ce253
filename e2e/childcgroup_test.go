package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leafScript is shell that sets $leaf to the subject's own cgroup leaf, a
// directory of relayd's subtree.
func leafScript(subtree string) string {
	return `leaf=` + q(subtree) + `/$(basename "$(sed -n 's/^0:://p' /proc/self/cgroup)")
[ -d "$leaf" ] || exit 3
`
}

// Rule 6.5, finding 9 of issue 10: a root subject that makes a child cgroup
// inside its own leaf and moves a process into it cannot hide that process.
// It is listed in executed.survivors and by verify, and once it is gone the
// leaf goes too, with the child cgroup.
func TestCgroupChildCgroupSurvivor(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	d := startRelayd(t, opts{scope: "cgroup"})
	subtree := subtreeOf(t, d)
	c := d.connect()
	pidFile := d.pidFile("hidden.pid")
	r := c.sh(leafScript(subtree)+`mkdir "$leaf/sub" || exit 4
sh -c 'echo $$ > "$1/sub/cgroup.procs" && echo $$ > "$2" && exec sleep 300' hide "$leaf" `+q(pidFile)+` &
while [ ! -s `+q(pidFile)+` ]; do sleep 0.01; done
exit 0`, nil)
	wantExit(t, r, "exited", 0)
	hidden := waitPid(t, pidFile)
	leaf := filepath.Join(subtree, r["execution"].(string))
	if b, _ := os.ReadFile(filepath.Join(leaf, "sub", "cgroup.procs")); !strings.Contains(string(b), strconv.Itoa(hidden)) {
		t.Fatalf("the hidden process %d is not in %s/sub (cgroup.procs %q): the test did not set up what it means to", hidden, leaf, b)
	}
	if got := survivorPids(t, r); !contains(got, hidden) {
		t.Fatalf("executed.survivors %v; want the process %d hidden in a child cgroup of the leaf", got, hidden)
	}
	v := c.request(msg{"kind": "verify"})
	if got := survivorPids(t, v); !contains(got, hidden) {
		t.Fatalf("verified.survivors %v; want the process %d hidden in a child cgroup of the leaf", got, hidden)
	}
	killPid(hidden)
	waitFor(t, 15*time.Second, "the leaf and its child cgroup to be removed", func() bool {
		_, err := os.Stat(leaf)
		return os.IsNotExist(err)
	})
	d.stopClean()
	if _, err := os.Stat(subtree); err == nil {
		t.Fatalf("relayd left its subtree %s behind", subtree)
	}
}

// Rule 6.5: processes in cgroups below the leaf, two levels down and
// ignoring SIGTERM, are settled when the framework ends the execution, with
// cgroup.kill and without it (freeze, kill each, thaw), and the leaf is
// removed with every cgroup below it.
func TestCgroupChildCgroupSettled(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	t.Run("cgroup", func(t *testing.T) { childCgroupSettled(t, opts{scope: "cgroup"}) })
	noKillVariant(t, childCgroupSettled)
}

func childCgroupSettled(t *testing.T, o opts) {
	d := startRelayd(t, o)
	subtree := subtreeOf(t, d)
	c := d.connect()
	pidFile := d.pidFile("hidden.pid")
	r := c.sh(leafScript(subtree)+`mkdir -p "$leaf/sub/deeper" || exit 4
sh -c 'trap "" TERM; echo $$ > "$1/sub/deeper/cgroup.procs" && echo $$ > "$2" && exec sleep 300' hide "$leaf" `+q(pidFile)+` &
exec sleep 300`, msg{"timeoutMs": 1000})
	wantExit(t, r, "framework_timeout", 124)
	if r["settlement"] != "settled" {
		t.Fatalf("settlement %v; want settled", r["settlement"])
	}
	hidden := waitPid(t, pidFile)
	if alive(hidden) {
		t.Fatalf("the process %d hidden two cgroups below the leaf outlived a settled scope", hidden)
	}
	leaf := filepath.Join(subtree, r["execution"].(string))
	waitFor(t, 5*time.Second, "the settled leaf and the cgroups below it to be removed", func() bool {
		_, err := os.Stat(leaf)
		return os.IsNotExist(err)
	})
	d.stopClean()
}

// The cgroups that a dead relayd's subject made below its leaf do not keep
// the leaf, or the dead relayd's subtree, from going at the next start.
func TestCgroupStaleChildCgroupsRemoved(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	d := startRelayd(t, opts{scope: "cgroup"})
	base := filepath.Dir(subtreeOf(t, d))
	d.stopClean()
	stale := filepath.Join(base, "relayd-"+strconv.Itoa(deadPid(t)))
	dirs := []string{stale, filepath.Join(stale, "daemon"), filepath.Join(stale, "x-7"),
		filepath.Join(stale, "x-7", "sub"), filepath.Join(stale, "x-7", "sub", "deeper"), filepath.Join(stale, "x-7", "other")}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	})
	d2 := startRelayd(t, opts{scope: "cgroup"})
	if _, err := os.Stat(stale); err == nil {
		t.Fatalf("the stale subtree %s, whose leaf has cgroups below it, was not removed at startup", stale)
	}
	d2.stopClean()
}

// relayd never delegates its cgroups: a subject running as another user
// (--subject-user) can make no cgroup below its leaf, move no process, and
// write no control file of relayd's tree. (As relayd's own user, root, it
// could: SECURITY.md says so.)
func TestCgroupSubjectUserCannotWriteTree(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	d := startRelayd(t, opts{scope: "cgroup", args: []string{"--subject-user", "nobody", "--workspace", "/"}})
	subtree := subtreeOf(t, d)
	c := d.connect()
	r := c.sh(leafScript(subtree)+`mkdir "$leaf/sub" 2>/dev/null && echo made-cgroup
echo $$ 2>/dev/null > "$leaf/../daemon/cgroup.procs" && echo moved-out
echo $$ 2>/dev/null > "$leaf/cgroup.procs" && echo wrote-procs
echo +pids 2>/dev/null > "$leaf/cgroup.subtree_control" && echo wrote-subtree-control
echo 1 2>/dev/null > "$leaf/cgroup.freeze" && echo froze
echo done`, nil)
	wantExit(t, r, "exited", 0)
	if r["stdout"] != "done\n" {
		t.Fatalf("a subject running as nobody wrote relayd's cgroup tree: %q", r["stdout"])
	}
	d.stopClean()
}
