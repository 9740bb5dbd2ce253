package main

import (
	"fmt"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// compare is the before/after section, run when --before names an older
// relayd binary: the figures where relayd was furthest from its targets,
// for both binaries, taking turns in this one run (these machines are too
// noisy for figures from two runs to compare). Each "after" row has the
// "before" row as its baseline: below 1x is faster (or smaller) than before.
func (b *bench) compare() {
	before := b.cfg.before
	sec := b.report.section("compare", "Before and after: this relayd against --before "+relaydVersion(before)+", in turns")
	sec.note("after: %s (%s); before: %s (%s)", b.cfg.relayd, relaydVersion(b.cfg.relayd), before, relaydVersion(before))
	b.compareRoundTrip(sec, before)
	b.compareThroughput(sec, before)
	b.compareSettle(sec, before)
	b.compareOutput(sec, before)
}

// compareThroughput: 32 connections executing /bin/true at once, per
// mechanism, the two relayds taking turns in chunks; the figure is
// executes per second, counted per window. Ratios above 1x are faster.
func (b *bench) compareThroughput(sec *section, before string) {
	const n = 32
	chunk, chunks, win := b.pickDur(time.Second, 500*time.Millisecond), b.pick(6, 2), 250*time.Millisecond
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	for _, mech := range []string{"process-group", "cgroup"} {
		name := fmt.Sprintf("relayd %s x%d", mech, n)
		old := b.connsOf(before, mech, n, "compare, throughput", &stops)
		old.name = "before: " + name
		now := b.connsOf(b.cfg.relayd, mech, n, "compare, throughput", &stops)
		now.name = name
		logf("compare: %s, %d chunks of %s each", name, chunks, chunk)
		for _, s := range []*loadSeries{old, now} {
			s.run(n, chunk, win) // warm-up: a shim pool grows to the connections
			s.rates, s.total, s.spent = nil, 0, 0
		}
		for c := 0; c < chunks; c++ {
			order := []*loadSeries{old, now}
			if c%2 == 1 {
				order = []*loadSeries{now, old}
			}
			for _, s := range order {
				s.run(n, chunk, win)
			}
		}
		fb := sec.add(old.figure())
		sec.add(now.figure()).against(fb)
	}
}

// connsOf is a load series of n connections to a
// relayd of bin with the mechanism mech; what names it when it stops.
func (b *bench) connsOf(bin, mech string, n int, what string, stops *[]func()) *loadSeries {
	s := &loadSeries{}
	d, why := b.relaydFor(bin, mech, what, stops)
	if why != "" {
		s.skip = why
		return s
	}
	conns := make([]*benchClient, n)
	for i := range conns {
		var err error
		if conns[i], err = d.connect(); err != nil {
			s.skip = err.Error()
			return s
		}
		*stops = append(*stops, conns[i].close)
	}
	s.op = func(w int) error {
		_, err := conns[w].execute(trueReq)
		return err
	}
	return s
}

// compareRoundTrip: execute /bin/true over one connection, per mechanism.
func (b *bench) compareRoundTrip(sec *section, before string) {
	n, rounds := b.pick(1200, 200), b.pick(30, 10)
	block := n / rounds
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	var list []*series
	for _, mech := range []string{"process-group", "cgroup"} {
		after := b.relaydSeries(mech, block, &stops)
		old := b.relaydSeriesOf(before, mech, block, &stops)
		old.name = "before: " + old.name
		list = append(list, after, old)
	}
	logf("compare: round trip, %d rounds of %d per series", rounds, block)
	cpu0, kids0 := map[*series]time.Duration{}, map[*series]map[int]testharness.Stat{}
	for _, s := range list {
		if s.pid > 0 {
			cpu0[s], _ = cpuTime(s.pid)
			kids0[s], _ = childCPU(s.pid)
		}
	}
	began, budget := time.Now(), b.pickDur(60*time.Second, 20*time.Second)
	interleave(list, rounds, func() bool { return b.cut(began, budget) })
	// CPU per execute: relayd's own time (all threads, not its subjects')
	// over the executes it served, warm-up included. It is steadier than
	// the latency on a shared machine.
	cpu, all := map[*series]*figure{}, map[*series]*figure{}
	for _, s := range list {
		c1, err := cpuTime(s.pid)
		kids1, kerr := childCPU(s.pid)
		if s.pid == 0 || err != nil || kerr != nil || len(s.samples) == 0 {
			cpu[s] = skipped(s.name+", CPU per execute", "ms", "no CPU time")
			all[s] = skipped(s.name+", CPU per execute with its shims", "ms", "no CPU time")
			continue
		}
		n := float64(len(s.samples) + s.warm)
		cpu[s] = measured(s.name+", CPU per execute", "ms", []float64{float64((c1 - cpu0[s]).Microseconds()) / 1e3 / n}, false)
		withShims := c1 - cpu0[s] + childCPUSince(kids0[s], kids1)
		all[s] = measured(s.name+", CPU per execute with its shims", "ms", []float64{float64(withShims.Microseconds()) / 1e3 / n}, false)
	}
	for i := 0; i < len(list); i += 2 {
		fb := sec.add(list[i+1].figure("ms"))
		sec.add(list[i].figure("ms")).against(fb)
		cb := sec.add(cpu[list[i+1]])
		sec.add(cpu[list[i]]).against(cb)
		ab := sec.add(all[list[i+1]])
		sec.add(all[list[i]]).against(ab)
	}
	sec.note("CPU per execute: relayd's CPU time (all threads, not its subjects) over the executes it served, to the nanosecond (the sum of its threads' /proc/PID/task/TID/schedstat); one figure per relayd")
	sec.note("with its shims: relayd's and its children's own (the shims, not their subjects), read before and after; a shim that ended between is missing; a relayd without shims has none")
}

// compareSettle: trees of 1,000 members ended by timeoutMs, per mechanism,
// before and after taking turns; the figure is the time from the deadline
// to the reply, less the grace.
func (b *bench) compareSettle(sec *section, before string) {
	const n = 1000
	// 12 rounds: with 6, one binary against itself ranged 0.79x to 1.13x.
	reps := b.pick(12, 2)
	for _, mech := range []string{"process-group", "cgroup"} {
		if mech == "cgroup" && b.cgSkip != "" {
			sec.add(skipped("settle 1,000, "+mech, "ms", b.cgSkip))
			continue
		}
		type side struct {
			name  string
			bin   string
			d     *daemon
			cl    *benchClient
			overs []float64
			why   string
		}
		sides := []*side{{name: "before: settle 1,000, " + mech, bin: before}, {name: "settle 1,000, " + mech, bin: b.cfg.relayd}}
		for _, s := range sides {
			d, err := startRelayd(s.bin, startOpts{scope: mech,
				args: []string{"--term-grace", settleGrace.String(), "--teardown-timeout", "10s"}})
			if err != nil {
				s.why = err.Error()
				continue
			}
			s.d = d
			if s.cl, err = d.connect(); err != nil {
				s.why = err.Error()
			}
		}
		tt := newTreeTimer()
		for rep := 0; rep < reps; rep++ {
			// Who goes first changes each round: the second tree of a round
			// is built while the first one's leftovers are still being
			// reaped, which made even a binary against itself 1.16x.
			order := sides
			if rep%2 == 1 {
				order = []*side{sides[1], sides[0]}
			}
			for _, s := range order {
				if s.why != "" {
					continue
				}
				for try := 0; try < 4; try++ {
					timeout := tt.timeout(n)
					logf("compare: %s (deadline %s)", s.name, timeout.Round(time.Millisecond))
					r, err := settleOnce(s.d, s.cl, n, timeout, 100+rep*10+try)
					if err != nil {
						s.why = "failed: " + err.Error()
						break
					}
					tt.learn(n, r)
					if r.late {
						continue
					}
					if r.survivors > 0 {
						s.why = fmt.Sprintf("%d survivors", r.survivors)
					}
					s.overs = append(s.overs, float64(r.over.Microseconds())/1e3)
					break
				}
			}
		}
		var fb *figure
		for _, s := range sides {
			if s.cl != nil {
				s.cl.close()
			}
			if s.d != nil {
				b.stopDaemon(s.d, "compare, "+s.name)
			}
			f := measured(s.name, "ms", s.overs, false)
			switch {
			case s.why != "":
				f = skipped(s.name, "ms", s.why)
			case len(s.overs) == 0:
				f = skipped(s.name, "ms", "no tree was complete by its deadline in 4 tries")
			}
			if fb == nil {
				fb = sec.add(f)
			} else {
				sec.add(f).against(fb)
			}
		}
	}
}

// compareOutput: 1 GiB to stdout in raw and carrier mode, a fresh relayd
// of each binary per run, in turns; the rate and relayd's peak RSS.
func (b *bench) compareOutput(sec *section, before string) {
	reps := b.pick(6, 2)
	for _, carrier := range []bool{false, true} {
		mode := "raw"
		if carrier {
			mode = "carrier"
		}
		rate := map[string][]float64{}
		rss := map[string][]float64{}
		why := map[string]string{}
		for rep := 0; rep < reps; rep++ {
			order := []string{before, b.cfg.relayd}
			if rep%2 == 1 { // who goes first changes each round, as in compareSettle
				order = []string{b.cfg.relayd, before}
			}
			for _, bin := range order {
				if why[bin] != "" {
					continue
				}
				logf("compare: output, %s mode, %s", mode, bin)
				r, m, _, err := b.outputOnce(bin, carrier)
				if err != nil {
					why[bin] = "failed: " + err.Error()
					continue
				}
				rate[bin] = append(rate[bin], r)
				rss[bin] = append(rss[bin], m)
			}
		}
		add := func(name, unit string, xs []float64, bin string, higher bool, base *figure) *figure {
			f := measured(name, unit, xs, higher)
			if why[bin] != "" {
				f = skipped(name, unit, why[bin])
			}
			f = sec.add(f)
			if base != nil {
				f.against(base)
			}
			return f
		}
		fr := add("before: output, "+mode+" mode", "GB/s", rate[before], before, true, nil)
		add("output, "+mode+" mode", "GB/s", rate[b.cfg.relayd], b.cfg.relayd, true, fr)
		fm := add("before: peak RSS, "+mode+" mode", "MiB", rss[before], before, false, nil)
		add("peak RSS, "+mode+" mode", "MiB", rss[b.cfg.relayd], b.cfg.relayd, false, fm)
	}
}
