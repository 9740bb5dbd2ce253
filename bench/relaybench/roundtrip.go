package main

import (
	"fmt"
	"strings"
	"time"
)

// series is one thing timed again and again: a bare spawn, an execute
// through relayd, an ssh round trip.
type series struct {
	name    string
	op      func() error
	block   int // ops per round: series take turns, so drift on a busy machine hits each alike
	warm    int // ops before timing
	samples []float64
	skip    string // why it does not run
	pid     int    // the relayd serving it, if any
	conn    *benchClient
}

// interleave times every series in turns of block ops until rounds rounds
// are done or stop says so (after at least two rounds), and returns the
// rounds done. A series whose op fails stops, and says why.
func interleave(list []*series, rounds int, stop func() bool) int {
	for _, s := range list {
		for i := 0; i < s.warm && s.skip == ""; i++ {
			if err := s.op(); err != nil {
				s.skip = "failed: " + err.Error()
			}
		}
	}
	for r := 0; r < rounds; r++ {
		if r >= 2 && stop() {
			return r
		}
		for _, s := range list {
			for i := 0; i < s.block && s.skip == ""; i++ {
				t := time.Now()
				err := s.op()
				d := time.Since(t)
				if err != nil {
					s.skip = "failed: " + err.Error()
					break
				}
				s.samples = append(s.samples, float64(d.Nanoseconds())/1e6)
			}
		}
	}
	return rounds
}

func (s *series) figure(unit string) *figure {
	if s.skip != "" {
		return skipped(s.name, unit, s.skip)
	}
	return measured(s.name, unit, s.samples, false)
}

// roundTrip is section 1 (and 6): execute of /bin/true over one connection,
// per mechanism, against bare spawns, and ssh through a master connection,
// all taking turns in the same run.
func (b *bench) roundTrip() {
	sec := b.report.section("roundtrip", "Round trip: execute /bin/true over one connection")
	logf("round trip: starting relayds and baselines")
	n := b.pick(2000, 200)
	rounds := b.pick(40, 10)
	block := n / rounds
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()

	bare := &series{name: "bare spawn (setsid)", block: block, warm: 20, op: spawnSetsid}
	list := []*series{bare}
	var bareCg, pg, cg, lim, ssh *series
	if b.cfg.only["roundtrip"] {
		bareCg = &series{name: "bare spawn into a cgroup leaf", block: block, warm: 20}
		if b.cgSkip != "" {
			bareCg.skip = b.cgSkip
		} else if base, err := newCgroupBase(); err != nil {
			bareCg.skip = err.Error()
		} else {
			forget := atCleanup(base.close)
			stops = append(stops, func() { base.close(); forget() })
			bareCg.op = base.spawn
		}
		pg = b.relaydSeries("process-group", block, &stops)
		cg = b.relaydSeries("cgroup", block, &stops)
		lim = b.limitsSeries(pg, block)
		list = append(list, bareCg, pg, cg, lim)
	}
	if b.cfg.only["ssh"] {
		ssh = &series{name: "ssh via a master connection", block: max(1, block/10), warm: 3}
		if s, why := b.startSSH(); why != "" {
			ssh.skip = why
			logf("ssh comparison skipped: %s", why)
		} else {
			stops = append(stops, s.stop)
			ssh.op = s.trueRoundTrip
		}
		list = append(list, ssh)
	}
	logf("round trip: %d rounds of %d per series (ssh %d)", rounds, block, max(1, block/10))
	sec.note("the series take turns, %d (ssh %d) at a time, for up to %d rounds; bare spawns are fork/exec of /bin/true in a new session and wait4 on its pid", block, max(1, block/10), rounds)
	began, budget := time.Now(), b.pickDur(120*time.Second, 30*time.Second)
	if done := interleave(list, rounds, func() bool { return b.cut(began, budget) }); done < rounds {
		b.report.note("round trip: %d of %d rounds within the time budget", done, rounds)
	}

	fb := sec.add(bare.figure("ms"))
	if b.cfg.only["roundtrip"] {
		fcg := sec.add(bareCg.figure("ms"))
		fpg := sec.add(pg.figure("ms")).against(fb).target("p50 ≤ 1.3x bare spawn", ratioAtMost(1.3))
		sec.add(cg.figure("ms")).against(fcg).target("p50 ≤ 1.3x bare cgroup spawn", ratioAtMost(1.3))
		sec.add(lim.figure("ms")).against(fpg).target("p50 ≤ 1.05x without limits", ratioAtMost(1.05))
		sec.note("usage (protocol 4.8) is on every reply: the shim sums wait4's rusage, relayd reads its memory cgroup's OOM counter per execute; its cost against a relayd without it is the compare section's (--before); the limits row sets %s on each subject around the shim's fork, on the same relayd and connection", limitsText)
	}
	if b.cfg.only["roundtrip"] {
		b.ptyEcho(sec)
		b.sessionRows(sec)
	}
	if ssh != nil {
		fs := sec.add(ssh.figure("ms")).against(fb)
		if fs.Skipped == "" {
			sec.note("ssh: %s, sshd on 127.0.0.1 with key authentication; `ssh -o ControlPath=SOCKET %s /bin/true` over a master connection, spawned and waited for by this program; the session's HOME is an empty directory, so no rc file runs", sshVersion(), sshUser())
		}
		if pg != nil && pg.skip == "" && fs.Skipped == "" {
			sec.add(measured("relayd process-group, vs ssh", "ms", pg.samples, false).against(fs))
			sec.note("relayd process-group, vs ssh: relayd's round trip with ssh's as the baseline; below 1x is faster than ssh")
		}
	}
}

// benchLimits are the limits of the round trip's limits row: what a
// --default-limits of a deployment would set.
var benchLimits = map[string]uint64{"nofile": 1024, "processes": 4096}

const limitsText = "nofile=1024,processes=4096"

// limitsSeries executes /bin/true with benchLimits over the connection of
// the series base (the same relayd), for the cost of setting them.
func (b *bench) limitsSeries(base *series, block int) *series {
	s := &series{name: "relayd process-group, with " + limitsText, block: block, warm: 20, skip: base.skip}
	req := trueReq
	req.Limits = benchLimits
	s.op = func() error {
		if base.conn == nil {
			return fmt.Errorf("no connection")
		}
		e, err := base.conn.execute(req)
		if err == nil && e.Limits["nofile"] != 1024 {
			return fmt.Errorf("relayd applied %v; want %s", e.Limits, limitsText)
		}
		return err
	}
	return s
}

// relaydSeries starts a relayd with the given mechanism and returns the
// series of executes of /bin/true over one connection to it.
func (b *bench) relaydSeries(mech string, block int, stops *[]func()) *series {
	return b.relaydSeriesOf(b.cfg.relayd, mech, block, stops)
}

// relaydSeriesOf is relaydSeries for the relayd binary bin.
func (b *bench) relaydSeriesOf(bin, mech string, block int, stops *[]func()) *series {
	s := &series{name: "relayd " + mech, block: block, warm: 20}
	d, why := b.relaydFor(bin, mech, "round trip", stops)
	if why != "" {
		s.skip = why
		return s
	}
	s.pid = d.pid
	cl, err := d.connect()
	if err != nil {
		s.skip = err.Error()
		return s
	}
	*stops = append(*stops, cl.close)
	s.conn = cl
	s.op = func() error {
		_, err := cl.execute(trueReq)
		return err
	}
	return s
}

// relaydFor starts a relayd of bin with the mechanism mech, stopped by
// stops (what names it then), or says why it cannot.
func (b *bench) relaydFor(bin, mech, what string, stops *[]func()) (*daemon, string) {
	if mech == "cgroup" && b.cgSkip != "" {
		return nil, b.cgSkip
	}
	d, err := startRelayd(bin, startOpts{scope: mech})
	if err != nil {
		return nil, err.Error()
	}
	*stops = append(*stops, func() { b.stopDaemon(d, what+", "+mech) })
	return d, ""
}

// stopDaemon stops relayd and notes it when it did not exit cleanly.
func (b *bench) stopDaemon(d *daemon, what string) {
	if err := d.stop(); err != nil {
		b.report.note("%s: %v", what, err)
		logf("%s: %v", what, err)
		// What relayd said of it: its warnings and errors, the last few.
		var said []string
		for _, line := range strings.Split(d.Logs.String(), "\n") {
			if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warn"`) {
				said = append(said, line)
			}
		}
		for _, line := range said[max(0, len(said)-12):] {
			logf("%s: relayd (pid %d) said: %s", what, d.pid, line)
		}
	}
}

// ratioAtMost is met when the ratio to the baseline is at most r.
func ratioAtMost(r float64) func(f *figure) bool {
	return func(f *figure) bool { return f.Baseline != nil && f.Ratio <= r }
}

// ratioAtLeast is met when the ratio to the baseline is at least r.
func ratioAtLeast(r float64) func(f *figure) bool {
	return func(f *figure) bool { return f.Baseline != nil && f.Ratio >= r }
}

// medianAtMost is met when the median is at most v.
func medianAtMost(v float64) func(f *figure) bool {
	return func(f *figure) bool { return f.Median <= v }
}
