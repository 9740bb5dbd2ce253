package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Rule 6.11, artifacts: with --artifacts-dir, each stream's artifact stops
// growing at --max-artifact-bytes, set here through its environment twin,
// while the output is still drained: neither the subject nor a survivor that
// writes on after the reply ever blocks.
func TestArtifactLimit(t *testing.T) { eachScope(t, artifactLimit) }

func artifactLimit(t *testing.T, mech string) {
	const limit = 100000
	art := t.TempDir()
	d := startRelayd(t, opts{scope: mech, args: []string{"--artifacts-dir", art},
		env: []string{"RELAYD_MAX_ARTIFACT_BYTES=100kB"}})
	c := d.connect()
	done := filepath.Join(d.dir, "survivor-done")
	pid := d.pidFile("writer.pid")
	// 3 MB on each stream from the subject, then 50 MB more on stdout from a
	// survivor that marks when it has written them all.
	r := c.sh(`head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2
(head -c 50000000 /dev/zero; : > `+q(done)+`) & echo $! > `+q(pid)+`
exit 0`, msg{"timeoutMs": 60000})
	wantExit(t, r, "exited", 0)
	id := r["execution"].(string)
	waitFor(t, 60*time.Second, "the survivor to write 50 MB through the drain", func() bool {
		_, err := os.Stat(done)
		return err == nil
	})
	size := func(stream string) int64 {
		info, err := os.Stat(filepath.Join(art, id+"."+stream+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if got := size(stream); got != limit {
			t.Errorf("%s artifact is %d bytes; want exactly --max-artifact-bytes, %d", stream, got, limit)
		}
	}
	d.stopClean()
}

// Rule 6.11, replies: a subject that leaves 3,000 processes gets at most
// 1,000 listed in survivors, each once, and survivorsOmitted counts the
// rest, in executed and in verified (protocol 4.2, 4.3).
func TestSurvivorsCapped(t *testing.T) { eachScope(t, survivorsCapped) }

func survivorsCapped(t *testing.T, mech string) {
	const n, max = 3000, 1000
	d := startRelayd(t, opts{scope: mech})
	c := d.connect()
	pidFile := d.pidFile("sleepers.pid") // the cleanup kills every pid in it
	r := c.sh(`i=0; while [ $i -lt `+strconv.Itoa(n)+` ]; do sleep 600 & echo $! >> `+q(pidFile)+`; i=$((i+1)); done; exit 0`,
		msg{"timeoutMs": 120000})
	wantExit(t, r, "exited", 0)
	started := readPids(pidFile)
	if len(started) != n {
		t.Fatalf("the subject started %d sleepers; want %d", len(started), n)
	}
	check := func(what string, r msg) {
		t.Helper()
		pids := survivorPids(t, r)
		if len(pids) != max {
			t.Fatalf("%s lists %d survivors; want %d", what, len(pids), max)
		}
		if got := num(t, r, "survivorsOmitted"); got != n-max {
			t.Fatalf("%s.survivorsOmitted = %d; want %d", what, got, n-max)
		}
		seen := map[int]bool{}
		for _, pid := range pids {
			if seen[pid] || !contains(started, pid) {
				t.Fatalf("%s lists pid %d twice or one the subject did not start", what, pid)
			}
			seen[pid] = true
		}
	}
	check("executed", r)
	check("verified", c.request(msg{"kind": "verify"}))
	killAll(t, started)
	d.stopClean()
}

// killAll SIGKILLs processes the test's own subjects started, and waits
// until they are gone.
func killAll(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		killPid(pid)
	}
	waitFor(t, 20*time.Second, "the processes to end", func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
}
