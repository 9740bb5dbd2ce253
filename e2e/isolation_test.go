package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The attacks of issue 16 on the isolation of executions (protocol rule
// 6.12) and on what outlives relayd (rule 6.10). Each runs in both
// mechanisms and counts its outcomes in the log; RELAYD_ISOLATION_RUNS sets
// how often each race is tried (3 by default), RELAYD_ISOLATION_MANY how
// many executions TestIsolationManyEndedAtOnce ends at once (500).

func isolationRuns() int {
	if n, err := strconv.Atoi(os.Getenv("RELAYD_ISOLATION_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// writeScript writes a fixture script into the test's directory.
func writeScript(t *testing.T, d *daemon, name, body string) string {
	t.Helper()
	p := filepath.Join(d.dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// isoWorker is a worker that double-forks away from its subject: it
// records its pid and its child's in $1, and when it gets SIGTERM it
// writes its pid to $2 and exits, so that a signal sent to it shows.
const isoWorker = `trap 'echo $$ >> "$2"; exit 0' TERM
echo $$ >> "$1"
sleep 300 &
echo $! >> "$1"
wait
`

// Rule 6.12, finding 1: execution B double-forks a worker (setsid -f) while
// execution A, on another connection, is busy; then A is ended by verify.
// A's settlement must not signal B's worker, and must end settled. In the
// second shape B exits right after starting the worker, a service that rule
// 6.1 protects: A's settlement must still be settled (not destroyed by a
// wait on B's service), the service must live on, and relayd exits 0.
func TestIsolationConcurrentDaemons(t *testing.T) {
	eachScopeParallel(t, func(t *testing.T, mech string) {
		t.Run("neighbour running", func(t *testing.T) { concurrentDaemons(t, mech, false) })
		t.Run("neighbour exited", func(t *testing.T) { concurrentDaemons(t, mech, true) })
	})
}

func concurrentDaemons(t *testing.T, mech string, bExits bool) {
	runs := isolationRuns()
	settlements := map[string]int{}
	var signalled, dead, badExit int
	for i := 0; i < runs; i++ {
		d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "200ms", "--teardown-timeout", "2s"}})
		worker := writeScript(t, d, "worker.sh", isoWorker)
		pids, sigs := d.pidFile("worker.pids"), filepath.Join(d.dir, "signalled")
		aStarted := d.pidFile("a.pid")

		// A is busy: it forks every 10 ms, so a tracker cannot prove it idle.
		a := d.connect()
		a.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c",
			fmt.Sprintf(`echo $$ > %s; while :; do sleep 0.01; done`, q(aStarted))}})
		waitPid(t, aStarted)

		b := d.connect()
		bScript := fmt.Sprintf(`setsid -f sh %s %s %s </dev/null >/dev/null 2>&1; `, q(worker), q(pids), q(sigs))
		if bExits {
			bScript += "exit 0"
		} else {
			bScript += "exec sleep 300"
		}
		b.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", bScript}})
		if bExits {
			r := b.read(15 * time.Second)
			wantExit(t, r, "exited", 0)
		}
		w := waitPid(t, pids)
		time.Sleep(150 * time.Millisecond) // a look or two of the tracker's

		a.send(msg{"kind": "verify"})
		r := a.read(15 * time.Second)
		if r == nil || r["kind"] != "executed" {
			t.Fatalf("run %d: A's verify got %v; want executed", i, r)
		}
		if v := a.read(15 * time.Second); v == nil || v["kind"] != "verified" {
			t.Fatalf("run %d: A's verify got %v after executed; want verified", i, v)
		}
		settlements[fmt.Sprint(r["settlement"])]++
		if r["termination"] != "framework_timeout" || r["settlement"] != "settled" {
			t.Errorf("run %d: A ended %v/%v; want framework_timeout/settled (B's worker must not count for A)",
				i, r["termination"], r["settlement"])
		}
		time.Sleep(200 * time.Millisecond) // a signal sent to the worker has landed
		if b, _ := os.ReadFile(sigs); len(bytes.TrimSpace(b)) > 0 {
			signalled++
			t.Errorf("run %d: B's worker %d got SIGTERM from A's settlement", i, w)
		}
		if !alive(w) {
			dead++
			t.Errorf("run %d: B's worker %d is dead after A's settlement", i, w)
		}
		if !bExits {
			b.send(msg{"kind": "verify"}) // B's own end settles its worker: that is B's business
			if r := b.read(15 * time.Second); r == nil || r["kind"] != "executed" {
				t.Fatalf("run %d: B's verify got %v; want executed", i, r)
			}
		}
		a.c.Close()
		b.c.Close()
		for _, pid := range readPids(pids) {
			killPid(pid)
		}
		if code := d.stop(); code != 0 {
			badExit++
			t.Errorf("run %d: relayd exited %d after SIGTERM; want 0", i, code)
		}
	}
	t.Logf("%s, B exits=%v: %d runs: A settled %d, destroyed %d, failed %d; B's worker SIGTERMed %d, dead %d; relayd exit non-zero %d",
		mech, bExits, runs, settlements["settled"], settlements["destroyed"], settlements["failed"], signalled, dead, badExit)
}

// python3 returns a python3 interpreter's path (not a pyenv shim, which
// would put a shell between relayd and the subject), or skips.
func python3(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed:", err)
	}
	return p
}

// hidePy is a subject that hides processes with PR_SET_CHILD_SUBREAPER
// (rule 6.5, 6.12): argv is the marker, the pid file and the thread count.
// Every process of it ignores SIGTERM, so that a settlement looks at it
// for a whole grace, and records its pid. A member holds many threads, so
// that a look at the scope takes long. The subject keeps starting children
// R, each of which lives long enough to be seen, makes itself a child
// subreaper and forks C; C calls setsid, forks G and exits after a random
// moment (during a look, after the look read R's children and before it
// reads C's, G is then R's and the look misses it); R exits after another
// random moment (between looks), and G comes to relayd from a subreaper
// whose children no look listed after G was born.
const hidePy = `import ctypes, os, random, signal, sys, threading, time
marker, pids, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def rec():
    fd = os.open(pids, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, b"%d\n" % os.getpid())
    os.close(fd)
rec()
if os.fork() == 0:
    rec()
    threading.stack_size(64 * 1024)
    for _ in range(nthreads):
        threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
    time.sleep(300)
    os._exit(0)
libc = ctypes.CDLL(None, use_errno=True)
def subreaper():
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    rec()
    time.sleep(random.uniform(0.05, 0.1))
    c = os.fork()
    if c == 0:
        os.setsid()
        if os.fork() == 0:
            rec()
            time.sleep(300)
            os._exit(0)
        time.sleep(random.uniform(0.005, 0.04))
        os._exit(0)
    os.waitpid(c, 0)
    time.sleep(random.uniform(0.005, 0.04))
    os._exit(0)
running = 0
while True:
    while running < 24:
        if os.fork() == 0:
            subreaper()
        running += 1
    os.wait()
    running -= 1
`

// Finding 2: a subject that hides its processes behind child subreapers
// which exit between looks, beside one other running scope, with a member
// of 2,000 threads, ended by timeoutMs. The reply may be settled only when
// nothing of the subject is alive after it (destroyed and failed are
// honest answers, counted).
func TestIsolationSubreaperHide(t *testing.T) {
	eachScopeParallel(t, func(t *testing.T, mech string) {
		py := python3(t)
		d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "3s", "--teardown-timeout", "6s"}})
		hide := writeScript(t, d, "hide.py", hidePy)
		other := d.connect()
		other.send(msg{"kind": "execute", "command": "sleep", "args": []string{"600"}})
		counts := map[string]int{}
		var liveAfterSettled []int
		for i := 0; i < isolationRuns(); i++ {
			marker := "relayd-hide-" + newToken()
			pidFile := filepath.Join(d.dir, fmt.Sprintf("hide-%d.pids", i)) // not d.pidFile: see below
			t.Cleanup(func() { killMarked(t, marker, nil) })
			c := d.connect()
			r := c.request(msg{"kind": "execute", "command": py, "args": []string{hide, marker, pidFile, "2000"},
				"timeoutMs": 1500})
			wantExit(t, r, "framework_timeout", 124)
			settlement := fmt.Sprint(r["settlement"])
			counts[settlement]++
			// The marker, not the pid file: a run records thousands of pids,
			// and the counter wraps; a pid of the file may name another's.
			live := markedAlive(marker, nil, 300*time.Millisecond)
			t.Logf("run %d: %s, %d processes recorded, %d alive after the reply", i, settlement, len(readPids(pidFile)), len(live))
			if settlement == "settled" && len(live) > 0 {
				liveAfterSettled = append(liveAfterSettled, len(live))
				t.Errorf("run %d: settled while %d of its processes live: %v", i, len(live), live)
			}
			killMarked(t, marker, nil)
			c.c.Close()
		}
		other.send(msg{"kind": "verify"})
		if r := other.read(15 * time.Second); r == nil || r["settlement"] != "settled" {
			t.Errorf("the other scope's end: %v; want settled", r)
		}
		t.Logf("%s: %d runs: settled %d, destroyed %d, failed %d; settled with live processes %d times (alive: %v)",
			mech, isolationRuns(), counts["settled"], counts["destroyed"], counts["failed"], len(liveAfterSettled), liveAfterSettled)
		d.stop() // 0 or 1: a destroyed settlement makes relayd exit 1
	})
}

// lineage is a survivor that keeps daemonizing: each generation records
// its pid, waits 100 ms, starts the next with setsid -f and exits, so no
// process of it lives long. argv: marker, pid file.
const lineage = `echo $$ >> "$2"
sleep 0.1
exec setsid -f sh "$0" "$1" "$2" </dev/null >/dev/null 2>&1
`

// Finding 3: the survivor of an exited subject on a connection that then
// closed keeps daemonizing. A later execution on another connection is
// answered with no survivors (none of them is its) and its verify lists
// none; a settlement on a third connection leaves the lineage alone.
func TestIsolationClosedConnectionSurvivor(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--term-grace", "200ms", "--teardown-timeout", "2s"}})
		script := writeScript(t, d, "lineage.sh", lineage)
		marker := "relayd-lineage-" + newToken()
		pids := filepath.Join(d.dir, "lineage.pids") // not d.pidFile: killMarked finds the lineage by its marker
		t.Cleanup(func() { killMarked(t, marker, nil) })

		c1 := d.connect()
		r := c1.sh(fmt.Sprintf(`setsid -f sh %s %s %s </dev/null >/dev/null 2>&1; exit 0`, q(script), marker, q(pids)), nil)
		wantExit(t, r, "exited", 0)
		waitFor(t, 5*time.Second, "the lineage to get going", func() bool { return len(readPids(pids)) >= 3 })
		c1.c.Close()
		time.Sleep(300 * time.Millisecond) // relayd has seen the close

		c2 := d.connect()
		r = c2.sh("sleep 2", nil)
		wantExit(t, r, "exited", 0)
		reported := len(survivorPids(t, r))
		if got := survivorPids(t, r); len(got) > 0 {
			theirs := 0
			for _, p := range got {
				if contains(readPids(pids), p) {
					theirs++
				}
			}
			t.Errorf("sleep 2 was answered with survivors %v (%d of them connection 1's lineage); want none", got, theirs)
		}
		v := c2.request(msg{"kind": "verify"})
		if got := survivorPids(t, v); len(got) > 0 {
			t.Errorf("verify after sleep 2: survivors %v; want none", got)
		}
		c2.c.Close()
		time.Sleep(300 * time.Millisecond)

		// A settlement on a third connection, with no other scope kept.
		c3 := d.connect()
		r = c3.sh("sleep 300", msg{"timeoutMs": 1500})
		wantExit(t, r, "framework_timeout", 124)
		if r["settlement"] != "settled" {
			t.Errorf("a sleep's settlement beside another connection's lineage: %v; want settled", r["settlement"])
		}
		v = c3.request(msg{"kind": "verify"})
		if got := survivorPids(t, v); len(got) > 0 || v["quiescent"] != true {
			t.Errorf("verify after the settlement: quiescent %v, survivors %v; want true and none", v["quiescent"], got)
		}
		before := len(readPids(pids))
		time.Sleep(600 * time.Millisecond)
		// A look at /proc can fall between two generations (one mid-exec,
		// its command line not yet there): look a few times.
		living := false
		for i := 0; i < 30 && !living; i++ {
			living = len(marked(marker, nil)) > 0
			time.Sleep(10 * time.Millisecond)
		}
		if after := len(readPids(pids)); after <= before || !living {
			t.Errorf("connection 1's lineage stopped (%d generations, then %d): another execution's settlement killed it", before, after)
		}
		t.Logf("%s: lineage of %d generations; %d survivors reported to sleep 2", mech, len(readPids(pids)), reported)
		killMarked(t, marker, nil)
		d.stopClean()
	})
}

// raiseNofile raises the test process's descriptor limit to at least n (to
// the hard limit at most); relayd inherits it.
func raiseNofile(t *testing.T, n uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	old := lim
	lim.Cur = min(n, lim.Max)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	if lim.Cur < n {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d this test needs", lim.Max, n)
	}
}

// Finding 4, rule 6.7: RELAYD_ISOLATION_MANY (500) executions, each a
// sleep on a connection of its own, ended at the same moment by verify,
// with a 3 s teardown: every executed reply comes within the teardown plus
// 1 s of that moment, and every one is settled.
func TestIsolationManyEndedAtOnce(t *testing.T) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("RELAYD_ISOLATION_MANY")); err == nil && v > 0 {
		n = v
	}
	const teardown = 3 * time.Second
	eachScope(t, func(t *testing.T, mech string) {
		raiseNofile(t, uint64(8*n+1024))
		d := startRelayd(t, opts{scope: mech, args: []string{"--teardown-timeout", teardown.String(),
			"--max-connections", strconv.Itoa(n + 16)}})
		// Not d.pidFile: its cleanup would kill whatever process has one of
		// these hundreds of pids by then; killSleeps checks each.
		started := filepath.Join(d.dir, "many.pids")
		killSleeps := func() {
			for _, pid := range readPids(started) {
				if alive(pid) && cmdline(pid) == "sleep 300" {
					killPid(pid) // a subject of this test
				}
			}
		}
		t.Cleanup(killSleeps)
		clients := make([]*client, n)
		for i := range clients {
			clients[i] = d.connect()
			clients[i].send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c",
				fmt.Sprintf(`echo $$ >> %s; exec sleep 300`, q(started))}})
		}
		waitFor(t, 60*time.Second, fmt.Sprintf("%d subjects to start", n), func() bool { return len(readPids(started)) >= n })
		time.Sleep(500 * time.Millisecond) // past the start: the tracker's looks at their steady pace

		type outcome struct {
			took       time.Duration
			settlement string
			err        error
		}
		outcomes := make([]outcome, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		var began time.Time
		for i, cl := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := cl.wire()
				<-gate
				if err := w.Send(msg{"kind": "verify"}); err != nil {
					outcomes[i].err = err
					return
				}
				line, err := w.ReadLine(teardown + 2*time.Minute) // bounded, and long enough to count today's late replies
				if err != nil {
					outcomes[i].err = err
					return
				}
				outcomes[i].took = time.Since(began)
				var r msg
				if err := json.Unmarshal(line, &r); err != nil || r["kind"] != "executed" {
					outcomes[i].err = fmt.Errorf("got %q; want executed", line)
					return
				}
				outcomes[i].settlement = fmt.Sprint(r["settlement"])
				_, _ = w.ReadLine(10 * time.Second) // verified
			}()
		}
		began = time.Now()
		close(gate)
		wg.Wait()

		counts := map[string]int{}
		var took []time.Duration
		late := 0
		for i, o := range outcomes {
			if o.err != nil {
				counts["error"]++
				if counts["error"] <= 5 {
					t.Errorf("execution %d: %v", i, o.err)
				}
				continue
			}
			counts[o.settlement]++
			took = append(took, o.took)
			if o.took > teardown+time.Second {
				late++
			}
		}
		slices.Sort(took)
		var p50, worst time.Duration
		if len(took) > 0 {
			p50, worst = took[len(took)/2], took[len(took)-1]
		}
		t.Logf("%s: %d executions ended at once: settled %d, destroyed %d, failed %d, errors %d; replies median %s, worst %s, %d later than %s",
			mech, n, counts["settled"], counts["destroyed"], counts["failed"], counts["error"],
			p50.Round(time.Millisecond), worst.Round(time.Millisecond), late, teardown+time.Second)
		if late > 0 {
			t.Errorf("%d of %d replies came later than the teardown plus 1 s (worst %s); want none", late, n, worst.Round(time.Millisecond))
		}
		if counts["settled"] != n {
			t.Errorf("settled %d of %d (destroyed %d, failed %d, errors %d); want all settled",
				counts["settled"], n, counts["destroyed"], counts["failed"], counts["error"])
		}
		var live []int
		for _, pid := range readPids(started) {
			if alive(pid) {
				live = append(live, pid)
			}
		}
		if len(live) > 0 {
			t.Errorf("%d subjects alive after their replies: %v", len(live), live[:min(len(live), 10)])
			killSleeps()
		}
		for _, cl := range clients {
			cl.c.Close()
		}
		d.stopClean()
	})
}

// relaydKilledSubject records its pid, starts a TERM-ignoring escapee in a
// session of its own, and works; every process of it carries the marker
// in its command line. argv: marker, pid file, role.
const relaydKilledSubject = `echo $$ >> "$2"
if [ "$3" = subject ]; then
  ( setsid sh "$0" "$1" "$2" escapee </dev/null >/dev/null 2>&1 & )
else
  trap '' TERM
fi
while :; do sleep 0.2; done
`

// Finding 5, rule 6.10: relayd (not PID 1; orphans come to the test
// process) is SIGKILLed at a random moment of an execution, its first
// millisecond included, and no successor is started: one term-grace (plus
// 3 s) after the kill nothing of the execution is alive. Then: a successor
// relayd with the same --state-dir never signals an unrelated process
// that reused a recorded pid. The random moments of the two mechanisms run
// at once (their time is the wait after each kill); the reused pids one
// after the other, as each sets the machine's ns_last_pid.
func TestIsolationRelaydKilled(t *testing.T) {
	t.Run("random moments", func(t *testing.T) { eachScopeParallel(t, relaydKilledAtRandom) })
	t.Run("reused pid", func(t *testing.T) { eachScope(t, reusedPidAfterDeath) })
}

func relaydKilledAtRandom(t *testing.T, mech string) {
	const grace = 300 * time.Millisecond
	runs := 2 * max(isolationRuns(), 2)
	var started, leftRunning int
	for i := 0; i < runs; i++ {
		var delay time.Duration
		switch i {
		case 0: // at once: the first millisecond
		case 1:
			delay = time.Millisecond
		default:
			delay = time.Duration(rand.Int64N(int64(200 * time.Millisecond)))
		}
		o := deathOpts(t, mech)
		o.args = append(o.args, "--term-grace", grace.String())
		d := startRelayd(t, o)
		script := writeScript(t, d, "subject.sh", relaydKilledSubject)
		marker := "relayd-killed-" + newToken()
		pids := d.pidFile("subject.pids")
		t.Cleanup(func() { killMarked(t, marker, nil) })
		c := d.connect()
		c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{script, marker, pids, "subject"}})
		if delay > 0 {
			time.Sleep(delay)
		}
		d.signal(syscall.SIGKILL)
		killed := time.Now()
		d.wait(10 * time.Second)
		time.Sleep(time.Until(killed.Add(grace + 3*time.Second)))
		recorded := readPids(pids)
		if len(recorded) > 0 {
			started++
		}
		if live := markedAlive(marker, recorded, 200*time.Millisecond); len(live) > 0 {
			leftRunning++
			t.Errorf("run %d (killed %s after execute): %d processes of the execution alive %s after relayd's death: %v",
				i, delay, len(live), grace+3*time.Second, live)
		}
		killMarked(t, marker, recorded)
	}
	t.Logf("%s: relayd killed %d times 0-200 ms into an execution: subject started %d, something left running %d",
		mech, runs, started, leftRunning)
}

// reuseNextPid starts cmd so that it gets pid want, by setting the pid
// namespace's last pid just below it (root only); it retries while other
// forks take the pid first. false when it cannot.
func reuseNextPid(want int, cmd func() *exec.Cmd) (*exec.Cmd, bool) {
	for try := 0; try < 50; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(want-1)), 0); err != nil {
			return nil, false
		}
		c := cmd()
		if err := c.Start(); err != nil {
			return nil, false
		}
		if c.Process.Pid == want {
			return c, true
		}
		c.Process.Kill() // ours, with the wrong pid
		c.Wait()
	}
	return nil, false
}

// recordedSubjectStart reads, from the records in stateDir, the subject
// start time of the scope whose session is sid (-1 when none names it).
func recordedSubjectStart(stateDir string, sid int) int64 {
	files, _ := filepath.Glob(filepath.Join(stateDir, "relayd-*.json"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var rec struct {
			Scopes []struct {
				Session      int
				SubjectStart int64
			}
		}
		if json.Unmarshal(b, &rec) != nil {
			continue
		}
		for _, s := range rec.Scopes {
			if s.Session == sid {
				return s.SubjectStart
			}
		}
	}
	return -1
}

func reusedPidAfterDeath(t *testing.T, mech string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to choose the next pid (/proc/sys/kernel/ns_last_pid)")
	}
	o := deathOpts(t, mech)
	o.args = append(o.args, "--term-grace", "5s", "--teardown-timeout", "10s")
	stateDir := ""
	for _, kv := range o.env {
		if v, ok := strings.CutPrefix(kv, "RELAYD_STATE_DIR="); ok {
			stateDir = v
		}
	}
	d := startRelayd(t, o)
	subjectFile, memberFile := d.pidFile("subject.pid"), d.pidFile("member.pid")
	c := d.connect()
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf(
		`echo $$ > %s; (setsid sh -c 'trap "" TERM; echo $$ > %s; exec sleep 300' </dev/null >/dev/null 2>&1 &); exec sleep 300`,
		q(subjectFile), q(memberFile))}})
	subject, member := waitPid(t, subjectFile), waitPid(t, memberFile)
	if mech == "process-group" {
		waitRecorded(t, d, mech, member)
	}
	time.Sleep(200 * time.Millisecond)
	// The settlement: SIGTERM ends the subject; the member ignores it, so the
	// grace runs. While it runs, relayd is killed.
	c.send(msg{"kind": "verify"})
	waitFor(t, 5*time.Second, "the subject to die of SIGTERM", func() bool { return !alive(subject) })
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && recordedSubjectStart(stateDir, subject) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: the record's subjectStart for session %d when relayd was killed: %d (-1: no record)",
		mech, subject, recordedSubjectStart(stateDir, subject))
	d.signal(syscall.SIGKILL)
	d.wait(10 * time.Second)
	killPid(member) // ours; what a successor would settle is not the question here
	waitFor(t, 5*time.Second, "the subject's pid to be free", func() bool {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(subject, &ws, syscall.WNOHANG, nil) // a zombie orphaned to the test process
		_, err := os.Stat(fmt.Sprintf("/proc/%d", subject))
		return errors.Is(err, os.ErrNotExist)
	})

	victim, ok := reuseNextPid(subject, func() *exec.Cmd {
		c := exec.Command("sleep", "300")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return c
	})
	if !ok {
		t.Skipf("could not start a process with the dead subject's pid %d", subject)
	}
	exited := make(chan struct{})
	go func() { victim.Wait(); close(exited) }()
	t.Cleanup(func() { victim.Process.Kill(); <-exited })

	d2 := startRelayd(t, o)
	select {
	case <-exited:
		t.Fatalf("the successor killed process %d, an unrelated session leader that reused the dead subject's pid (%s)\nsuccessor log:\n%s",
			subject, victim.ProcessState, tail(d2.logs.String(), 3000))
	case <-time.After(5*time.Second + time.Second): // a settlement of it would have run its grace
	}
	d2.stopClean()
}
