package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// settleGrace is relayd's --term-grace in the settlement section.
const settleGrace = 500 * time.Millisecond

// treeScript builds n members under one sh: every tenth a setsid escapee,
// every tenth ignoring SIGTERM (so settling waits the whole grace), the
// rest plain children. Each member's pid goes to pids; done is written once
// all are started, and sh then waits.
func treeScript(n int, pids, done string) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1))
  case $((i %% 10)) in
    0) sh -c 'trap "" TERM; exec sleep 300' & echo $! >> %[2]s ;;
    1) setsid sleep 300 & echo $! >> %[2]s ;;
    *) sleep 300 & echo $! >> %[2]s ;;
  esac
done; echo built > %[3]s; wait`, n, shq(pids), shq(done))
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// settleRun is one tree ended by timeoutMs.
type settleRun struct {
	over      time.Duration // from the deadline to the reply, less the grace
	built     time.Duration // from the execute to the tree being complete
	late      bool          // the tree was not complete at the deadline: no sample
	survivors int
}

// settle is section 3: trees of 10, 100 and 1,000 members ended by
// timeoutMs, per mechanism: the time from the deadline to the executed
// reply less the grace period, and the members still alive after it. The
// baseline is the same tree settled by this process itself, with nothing
// to prove: SIGTERM to each member, the grace, SIGKILL to each one left,
// and /proc polled until every member is dead.
//
// relayd starts its timer when the subject has started, a little after the
// execute is sent; the deadline here is taken from the send, so the figure
// includes that spawn (a few ms) and errs high. The timeout is set from the
// time the previous trees took to build, so that each tree is complete
// before its deadline; a tree that was not is retried, not counted.
func (b *bench) settle() {
	sec := b.report.section("settle", fmt.Sprintf("Settlement: trees ended by timeoutMs, --term-grace %s; time from the deadline to the executed reply, less the grace", settleGrace))
	sizes := []int{10, 100, 1000}
	reps := map[int]int{10: b.pick(15, 3), 100: b.pick(8, 2), 1000: b.pick(4, 1)}
	bareReps := map[int]int{10: b.pick(10, 2), 100: b.pick(5, 1), 1000: b.pick(3, 1)}
	sec.note("a tenth of each tree are setsid escapees, a tenth ignore SIGTERM; the deadline is taken at the send of the execute, so the figure includes relayd's spawn of the subject")
	sec.note("bare settle: the same tree under a sh this program starts; SIGTERM to each member, the grace, SIGKILL to each one alive, then /proc polled until all are dead (zombies count as dead); from the first SIGTERM, less the grace")
	sec.note("survivors: members still alive (per /proc/PID/stat) when the executed reply is read")

	dir, err := os.MkdirTemp("", "relaybench-settle-")
	bare := map[int]*figure{}
	if err == nil {
		defer os.RemoveAll(dir)
		t := b.trees("bare settle", sizes, bareReps, b.pickDur(60*time.Second, 30*time.Second),
			func(n int, _ time.Duration, rep int) (settleRun, error) { return bareSettleOnce(dir, n, rep) })
		for _, n := range sizes {
			bare[n] = sec.add(t.figures[n])
		}
	}
	for _, mech := range []string{"process-group", "cgroup"} {
		name := func(n int) string { return fmt.Sprintf("%s, %s members", mech, commas(n)) }
		why := ""
		var d *daemon
		var cl *benchClient
		if mech == "cgroup" && b.cgSkip != "" {
			why = b.cgSkip
		} else if d, err = startRelayd(b.cfg.relayd, startOpts{scope: mech,
			args: []string{"--term-grace", settleGrace.String(), "--teardown-timeout", "10s"}}); err != nil {
			why = err.Error()
		} else if cl, err = d.connect(); err != nil {
			why = err.Error()
		}
		if why != "" {
			if d != nil {
				b.stopDaemon(d, "settle, "+mech)
			}
			for _, n := range sizes {
				f := sec.add(skipped(name(n), "ms", why))
				if n == 1000 {
					f.target("≤ grace + 100 ms, 0 survivors", nil)
				}
			}
			continue
		}
		t := b.trees(mech, sizes, reps, b.pickDur(120*time.Second, 60*time.Second),
			func(n int, timeout time.Duration, rep int) (settleRun, error) {
				return settleOnce(d, cl, n, timeout, rep)
			})
		cl.close()
		b.stopDaemon(d, "settle, "+mech)
		for _, n := range sizes {
			f := sec.add(t.figures[n]).against(bare[n])
			if n == 1000 {
				f.target("≤ grace + 100 ms, 0 survivors", func(f *figure) bool {
					return f.Median <= 100 && len(t.survivors) > 0 && quantile(t.survivors, 1) == 0
				})
			}
		}
		fs := measured(mech+": survivors per tree", "count", t.survivors, false)
		if len(t.survivors) > 0 {
			fs.Detail = fmt.Sprintf("at most %.0f in %d trees", quantile(t.survivors, 1), len(t.survivors))
		}
		sec.add(fs.target("0 in every tree", func(f *figure) bool { return quantile(t.survivors, 1) == 0 }))
	}
}

// treeTimer sets each tree's deadline from how long members took to start
// in the trees before, so that a tree is complete before its deadline.
type treeTimer struct{ perMember time.Duration }

func newTreeTimer() *treeTimer { return &treeTimer{perMember: 15 * time.Millisecond} }

// timeout is the timeoutMs to give a tree of n members.
func (tt *treeTimer) timeout(n int) time.Duration {
	return 300*time.Millisecond + time.Duration(1.3*float64(n)*float64(tt.perMember))
}

// learn takes the build time of a tree of n members into the estimate; a
// tree not complete by its deadline with no build time doubles it.
func (tt *treeTimer) learn(n int, r settleRun) {
	if r.built > 0 {
		per := r.built / time.Duration(n)
		tt.perMember = max(per, (tt.perMember+per)/2)
	}
	if r.late && r.built == 0 {
		tt.perMember *= 2
	}
}

// treeResults are the figures of one way of settling trees.
type treeResults struct {
	figures   map[int]*figure
	survivors []float64
}

// trees settles trees of each size reps times with once, within budget
// (each size gets at least one tree). The timeout given to once is the
// deadline to set: long enough for the tree to be built, learnt from the
// trees before.
func (b *bench) trees(label string, sizes []int, reps map[int]int, budget time.Duration,
	once func(n int, timeout time.Duration, rep int) (settleRun, error)) treeResults {
	res := treeResults{figures: map[int]*figure{}, survivors: []float64{}}
	began := time.Now()
	tt := newTreeTimer()
	for _, n := range sizes {
		name := fmt.Sprintf("%s, %s members", label, commas(n))
		var overs, builds []float64
		why := ""
		retries := 0
		for rep := 0; len(overs) < reps[n]; rep++ {
			if len(overs) > 0 && b.cut(began, budget) {
				b.report.note("settle, %s, %s members: %d of %d repetitions within the time budget", label, commas(n), len(overs), reps[n])
				break
			}
			timeout := tt.timeout(n)
			logf("settle: %s, %d members (deadline %s)", label, n, timeout.Round(time.Millisecond))
			r, err := once(n, timeout, rep)
			if err != nil {
				why = "failed: " + err.Error()
				break
			}
			tt.learn(n, r)
			if r.late {
				if retries++; retries > 3 {
					why = "the tree was not complete by its deadline in 4 tries"
					break
				}
				continue
			}
			overs = append(overs, float64(r.over.Microseconds())/1e3)
			builds = append(builds, r.built.Seconds())
			res.survivors = append(res.survivors, float64(r.survivors))
		}
		if why != "" {
			res.figures[n] = skipped(name, "ms", why)
			continue
		}
		f := measured(name, "ms", overs, false)
		if len(builds) > 0 {
			f.Detail = fmt.Sprintf("trees built in %.2f s (median)", quantile(builds, 0.5))
		}
		res.figures[n] = f
	}
	return res
}

// bareSettleOnce builds a tree of n members under a sh this process starts
// (in a new session), then settles it itself: SIGTERM to the sh and each
// member, the grace, SIGKILL to each member alive, and /proc polled until
// none is.
func bareSettleOnce(dir string, n, rep int) (settleRun, error) {
	var r settleRun
	pidsPath := filepath.Join(dir, fmt.Sprintf("bare-%d-%d.pids", n, rep))
	donePath := pidsPath + ".done"
	defer killLeftovers(pidsPath)
	began := time.Now()
	sh, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", treeScript(n, pidsPath, donePath)},
		&syscall.ProcAttr{Files: []uintptr{devNull, devNull, devNull}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return r, fmt.Errorf("starting the tree: %w", err)
	}
	forget := atCleanup(func() { // an interrupted run leaves no tree behind
		_ = syscall.Kill(sh, syscall.SIGKILL)
		killLeftovers(pidsPath)
	})
	defer forget()
	defer func() {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(sh, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}()
	for {
		if _, err := os.Stat(donePath); err == nil {
			break
		}
		if time.Since(began) > 5*time.Minute {
			_ = syscall.Kill(sh, syscall.SIGKILL)
			return r, errors.New("the tree was not built within 5 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.built = time.Since(began)
	pids := append(readPids(pidsPath), sh)
	t0 := time.Now()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM) // the tree this process started
	}
	time.Sleep(time.Until(t0.Add(settleGrace)))
	for _, pid := range pids {
		if member(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for member(pid) {
			if time.Now().After(deadline) {
				return r, fmt.Errorf("member %d still alive 30s after SIGKILL", pid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	r.over = time.Since(t0) - settleGrace
	return r, nil
}

// settleOnce runs one tree of n members with timeoutMs and measures its
// settlement.
func settleOnce(d *daemon, cl *benchClient, n int, timeout time.Duration, rep int) (settleRun, error) {
	var r settleRun
	pidsPath := filepath.Join(d.Dir, fmt.Sprintf("tree-%d-%d.pids", n, rep))
	donePath := pidsPath + ".done"
	req := client.Request{Command: "/bin/sh", Args: []string{"-c", treeScript(n, pidsPath, donePath)}, Timeout: timeout}
	type got struct {
		e   client.Executed
		at  time.Time
		err error
	}
	ch := make(chan got, 1)
	sent := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+settleGrace+40*time.Second)
		defer cancel()
		e, err := cl.Execute(ctx, req)
		ch <- got{e, time.Now(), err}
	}()
	deadline := sent.Add(timeout)
	var res got
	var builtAt time.Time
wait:
	for {
		select {
		case res = <-ch:
			break wait
		case <-time.After(5 * time.Millisecond):
		}
		if builtAt.IsZero() {
			if _, err := os.Stat(donePath); err == nil {
				builtAt = time.Now()
			}
		}
		if !builtAt.IsZero() {
			res = <-ch
			break wait
		}
	}
	defer killLeftovers(pidsPath)
	if res.err != nil {
		return r, res.err
	}
	if res.e.Termination != client.FrameworkTimeout || res.e.Settlement != client.Settled {
		return r, fmt.Errorf("got %s, %s (%s); want framework_timeout, settled", res.e.Termination, res.e.Settlement, res.e.Detail)
	}
	// Survivors: each member's state, at once.
	pids := readPids(pidsPath)
	for _, pid := range pids {
		if member(pid) {
			r.survivors++
		}
	}
	r.over = res.at.Sub(deadline) - settleGrace
	if builtAt.IsZero() {
		r.late = true
		return r, nil
	}
	r.built = builtAt.Sub(sent)
	r.late = builtAt.After(deadline.Add(-20*time.Millisecond)) || len(pids) != n
	return r, nil
}

// killLeftovers SIGKILLs members of a tree that outlived its settlement
// (processes this run's own subject started and listed), and waits a little
// for them to go, so that the next tree starts on a clean machine.
func killLeftovers(pidsPath string) {
	pids := readPids(pidsPath)
	for _, pid := range pids {
		if member(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for member(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	os.Remove(pidsPath)
	os.Remove(pidsPath + ".done")
}

// member is true while pid is alive and still a tree member ("sleep 300",
// or the sh that becomes one), not another process that got the pid.
func member(pid int) bool {
	if !alive(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(b), "300")
}

func readPids(path string) []int { return testharness.ReadPids(path) }

// commas writes 1000 as 1,000.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
