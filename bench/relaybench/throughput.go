package main

import (
	"fmt"
	"sync"
	"time"
)

// loadSeries is one way of running /bin/true from many goroutines at once:
// bare spawns, or connections to a relayd.
type loadSeries struct {
	name  string
	op    func(worker int) error
	rates []float64 // executes per second, one per window
	total int
	spent time.Duration
	skip  string
}

// run runs op from workers goroutines for d, and adds the rate of each
// window of win. An op still running at the end is not counted, and the
// next chunk waits for it.
func (s *loadSeries) run(workers int, d, win time.Duration) {
	if s.skip != "" {
		return
	}
	nwin := max(1, int(d/win))
	counts := make([][]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		counts[w] = make([]int, nwin)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := s.op(w); err != nil {
					errs[w] = err
					return
				}
				i := int(time.Since(start) / win)
				if i >= nwin {
					return
				}
				counts[w][i]++
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			s.skip = "failed: " + err.Error()
			return
		}
	}
	for i := 0; i < nwin; i++ {
		n := 0
		for w := range counts {
			n += counts[w][i]
		}
		s.rates = append(s.rates, float64(n)/win.Seconds())
		s.total += n
	}
	s.spent += time.Duration(nwin) * win
}

func (s *loadSeries) figure() *figure {
	if s.skip != "" {
		return skipped(s.name, "exec/s", s.skip)
	}
	f := measured(s.name, "exec/s", s.rates, true)
	if s.spent > 0 {
		f.Detail = fmt.Sprintf("%d executes in %s: %.0f/s overall", s.total, s.spent.Round(time.Millisecond), float64(s.total)/s.spent.Seconds())
	}
	return f
}

// throughput is section 2: 1, 8 and 32 connections executing /bin/true for a
// fixed time, against bare spawns from as many goroutines, per mechanism.
// Series take turns in chunks, so drift on a busy machine hits each alike.
func (b *bench) throughput() {
	sec := b.report.section("throughput", "Throughput: /bin/true from N sessions (relayd, one connection each) or N goroutines (bare) at once; executes per second")
	levels := []int{1, 8, 32}
	sec.note("each series runs for %d chunks of %s, taking turns with the others; the rate is counted per %s window", b.pick(5, 2), b.pickDur(time.Second, 500*time.Millisecond), 250*time.Millisecond)
	chunk := b.pickDur(time.Second, 500*time.Millisecond)
	chunks := b.pick(5, 2)
	win := 250 * time.Millisecond
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	// One relayd per mechanism, with top connections to each.
	top := levels[len(levels)-1]
	pgConns := b.connsOf(b.cfg.relayd, "process-group", top, "throughput", &stops)
	cgConns := b.connsOf(b.cfg.relayd, "cgroup", top, "throughput", &stops)
	pgOp, pgSkip := pgConns.op, pgConns.skip
	cgOp, cgSkip := cgConns.op, cgConns.skip
	var cgSpawn func(int) error
	bareCgSkip := b.cgSkip
	if bareCgSkip == "" {
		if base, err := newCgroupBase(); err != nil {
			bareCgSkip = err.Error()
		} else {
			forget := atCleanup(base.close)
			stops = append(stops, func() { base.close(); forget() })
			cgSpawn = func(int) error { return base.spawn() }
		}
	}
	for _, n := range levels {
		logf("throughput: %d at once, %d chunks of %s per series", n, chunks, chunk)
		bare := &loadSeries{name: fmt.Sprintf("bare spawn (setsid) x%d", n), op: func(int) error { return spawnSetsid() }}
		bareCg := &loadSeries{name: fmt.Sprintf("bare cgroup spawn x%d", n), op: cgSpawn, skip: bareCgSkip}
		pg := &loadSeries{name: fmt.Sprintf("relayd process-group x%d", n), op: pgOp, skip: pgSkip}
		cg := &loadSeries{name: fmt.Sprintf("relayd cgroup x%d", n), op: cgOp, skip: cgSkip}
		list := []*loadSeries{bare, pg, bareCg, cg}
		for c := 0; c < chunks; c++ {
			for _, s := range list {
				s.run(n, chunk, win)
			}
		}
		fb, fbc := bare.figure(), bareCg.figure()
		sec.add(fb)
		fpg := sec.add(pg.figure()).against(fb)
		sec.add(fbc)
		fcg := sec.add(cg.figure()).against(fbc)
		if n == 32 {
			fpg.target("≥ 0.8x bare", ratioAtLeast(0.8))
			fcg.target("≥ 0.8x bare cgroup", ratioAtLeast(0.8))
		}
	}
}
