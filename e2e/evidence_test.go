package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The attack programs of testdata/attacks, built once with gcc.
var (
	attacksOnce sync.Once
	attacksDir  string
	attacksErr  error
)

// attack returns the path of the attack program name, building every one
// the first time; the test is skipped, saying why, where gcc is missing.
func attack(t testing.TB, name string) string {
	t.Helper()
	attacksOnce.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			attacksErr = fmt.Errorf("gcc not installed (apt-get install gcc; .ci/run installs it): %w", err)
			return
		}
		attacksDir, attacksErr = os.MkdirTemp("", "relayd-attacks-")
		if attacksErr != nil {
			return
		}
		for _, prog := range []string{"leaderexit", "cloneparent", "chain"} {
			src := filepath.Join("..", "testdata", "attacks", prog+".c")
			out, err := exec.Command("gcc", "-O2", "-Wall", "-o", filepath.Join(attacksDir, prog), src, "-lpthread").CombinedOutput()
			if err != nil {
				attacksErr = fmt.Errorf("gcc %s: %v: %s", src, err, out)
				return
			}
		}
	})
	if attacksErr != nil {
		t.Skip(attacksErr)
	}
	return filepath.Join(attacksDir, name)
}

// marked lists the live processes whose command line holds marker, and the
// live thread groups among pids (a zombie main thread with live threads
// has no command line to read).
func marked(marker string, pids []int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) {
			if _, state, ok := statOf(pid); ok && state != 'Z' {
				out = append(out, pid)
			}
		}
	}
	for _, pid := range pids {
		if threadGroupLives(pid) && !contains(out, pid) {
			out = append(out, pid)
		}
	}
	return out
}

// threadGroupLives reports whether any thread of pid is alive: /proc/PID/stat
// says Z for a process whose main thread exited while others run.
func threadGroupLives(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X' {
			return true
		}
	}
	return false
}

// markedAlive looks for marked processes for a while: a fork-and-exit
// chain can hide from one scan of /proc, not from many.
func markedAlive(marker string, pids []int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		if found := marked(marker, pids); len(found) > 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killMarked SIGKILLs the processes this test created (they carry its
// marker) until three scans in a row find none, or their lifetime ends.
func killMarked(t testing.TB, marker string, pids []int) {
	deadline := time.Now().Add(30 * time.Second)
	empty := 0
	for empty < 3 && time.Now().Before(deadline) {
		found := marked(marker, pids)
		if len(found) == 0 {
			empty++
			time.Sleep(2 * time.Millisecond)
			continue
		}
		empty = 0
		for _, pid := range found {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if empty < 3 {
		t.Errorf("processes of marker %s still alive after 30s", marker)
	}
}

// pidsIn reads the numbers that follow the words of the attack programs'
// output ("pid 12", "subject 12 sibling 13", "child 14").
func pidsIn(stdout string) []int {
	var out []int
	for _, f := range strings.Fields(stdout) {
		if n, err := strconv.Atoi(f); err == nil && n > 1 {
			out = append(out, n)
		}
	}
	return out
}

func evidenceRuns() int {
	if n, err := strconv.Atoi(os.Getenv("RELAYD_EVIDENCE_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// hidingTricks are the subjects of rule 6.5 that try to hide a member
// from the evidence.
var hidingTricks = []struct {
	name string
	prog string
	args []string
}{
	{"threads outlive the main thread", "leaderexit", nil},
	{"clone(CLONE_PARENT)", "cloneparent", nil},
	{"clone(CLONE_PARENT) and setsid", "cloneparent", []string{"setsid"}},
	{"fork-and-exit chain", "chain", []string{"stay"}},
	{"fork-and-exit chain with setsid", "chain", []string{"stay", "setsid"}},
	{"eight fork-and-exit chains", "chain", []string{"stay", "setsid", "wide"}},
}

// Rule 6.5: a framework timeout of a subject that hides a member is never
// "settled", nor verify "quiescent", while a member lives. Each trick runs
// RELAYD_EVIDENCE_RUNS times (3 by default) per mechanism, and the test logs
// how many settlements were settled, destroyed and failed.
func TestHidingTricks(t *testing.T) { eachScopeParallel(t, testHidingTricks) }

func testHidingTricks(t *testing.T, mech string) {
	for _, trick := range hidingTricks {
		t.Run(trick.name, func(t *testing.T) {
			prog := attack(t, trick.prog)
			d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "200ms", "--teardown-timeout", "2s"}})
			counts := map[string]int{}
			for i := 0; i < evidenceRuns(); i++ {
				marker := "relayd-attack-" + newToken()
				c := d.connect()
				r := c.request(msg{"kind": "execute", "command": prog, "args": append([]string{marker, "30"}, trick.args...),
					"timeoutMs": 300})
				wantExit(t, r, "framework_timeout", 124)
				pids := pidsIn(fmt.Sprint(r["stdout"]))
				settlement := fmt.Sprint(r["settlement"])
				counts[settlement]++
				alive := markedAlive(marker, pids, 300*time.Millisecond)
				if settlement == "settled" && len(alive) > 0 {
					t.Errorf("run %d: settled while members %v live (stdout %q)", i, alive, r["stdout"])
				}
				v := c.request(msg{"kind": "verify"})
				if v["quiescent"] == true && len(markedAlive(marker, pids, 100*time.Millisecond)) > 0 {
					t.Errorf("run %d: verify quiescent while members live", i)
				}
				killMarked(t, marker, pids)
				c.c.Close()
			}
			t.Logf("%s, %s: %d runs: settled %d, destroyed %d, failed %d", mech, trick.name, evidenceRuns(),
				counts["settled"], counts["destroyed"], counts["failed"])
			d.stop() // 0 or 1: a destroyed settlement makes relayd exit 1
		})
	}
}

// Rule 6.1 with rule 6.5: a subject that exits after hiding a member with
// clone(CLONE_PARENT) and setsid leaves a survivor, and the reply and
// verify list it.
func TestHiddenSurvivorListed(t *testing.T) { eachScope(t, testHiddenSurvivorListed) }

func testHiddenSurvivorListed(t *testing.T, mech string) {
	prog := attack(t, "cloneparent")
	d := startRelayd(t, opts{scope: mech})
	marker := "relayd-attack-" + newToken()
	defer killMarked(t, marker, nil)
	c := d.connect()
	r := c.request(msg{"kind": "execute", "command": prog, "args": []string{marker, "30", "setsid", "exit"}})
	wantExit(t, r, "exited", 0)
	pids := pidsIn(fmt.Sprint(r["stdout"]))
	if len(pids) != 2 {
		t.Fatalf("stdout %q; want the subject's and the sibling's pids", r["stdout"])
	}
	sibling := pids[1]
	if got := survivorPids(t, r); !contains(got, sibling) {
		t.Fatalf("survivors %v lack the CLONE_PARENT sibling %d", got, sibling)
	}
	v := c.request(msg{"kind": "verify"})
	if got := survivorPids(t, v); !contains(got, sibling) {
		t.Fatalf("verify survivors %v lack the CLONE_PARENT sibling %d", got, sibling)
	}
	if !alive(sibling) {
		t.Fatal("the survivor was signalled")
	}
	killMarked(t, marker, nil)
	d.stopClean()
}
