package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// concurrentN is how many docker execs, and relayd executes, the docker
// section runs at once: moby/moby#45595 reports 20 concurrent docker execs
// taking seconds, and harnesses that fan out run more than that.
const concurrentN = 32

// burst is one way of running /bin/true from many workers at once, every op
// timed: docker exec from as many goroutines, or executes over a relayd
// connection each.
type burst struct {
	name  string
	op    func(worker int) error
	lat   []float64 // ms, every op of every round
	rates []float64 // executes per second, one per round
	total int
	spent time.Duration
	skip  string
}

func dockerBurst(env *dockerEnv) *burst {
	s := &burst{name: fmt.Sprintf("docker exec CONTAINER true, %d at once", concurrentN)}
	if env != nil {
		s.op = func(int) error { return env.dockerExec() }
	}
	return s
}

// relaydBurst executes over conns[worker]; nil conns makes a series only
// named (for a skipped section).
func relaydBurst(conns []*benchClient) *burst {
	s := &burst{name: fmt.Sprintf("relayd execute /bin/true, %d connections", concurrentN)}
	if conns != nil {
		s.op = func(w int) error {
			_, err := conns[w].execute(trueReq)
			return err
		}
	}
	return s
}

// run runs op from workers goroutines, each starting ops until d has passed
// (at least one), and waits for the ops still running. Unlike loadSeries, an
// op in flight at the end counts and the round lasts until it ends: a docker
// exec under load can outlast the round, and dropping it would report
// nothing, or only the lucky ones.
func (s *burst) run(workers int, d time.Duration) {
	if s.skip != "" {
		return
	}
	lats := make([][]float64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t := time.Now()
				if err := s.op(w); err != nil {
					errs[w] = err
					return
				}
				lats[w] = append(lats[w], float64(time.Since(t).Nanoseconds())/1e6)
				if time.Since(start) >= d {
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	for _, err := range errs {
		if err != nil {
			s.skip = "failed: " + err.Error()
			return
		}
	}
	s.add(lats, wall)
}

// add counts one round: the ops each worker timed, over the round's wall
// time, so that the rate is the aggregate of all workers.
func (s *burst) add(lats [][]float64, wall time.Duration) {
	n := 0
	for _, l := range lats {
		s.lat = append(s.lat, l...)
		n += len(l)
	}
	if n == 0 || wall <= 0 {
		return
	}
	s.rates = append(s.rates, float64(n)/wall.Seconds())
	s.total += n
	s.spent += wall
}

// figures are the rate (per round; its p99 column the slowest round) and the
// latency of one op (over every op).
func (s *burst) figures() (rate, latency *figure) {
	rn, ln := s.name, s.name+": latency"
	if s.skip != "" {
		return skipped(rn, "exec/s", s.skip), skipped(ln, "ms", s.skip)
	}
	rate = measured(rn, "exec/s", s.rates, true)
	if s.spent > 0 {
		rate.Detail = fmt.Sprintf("%d executes in %s: %.0f/s overall", s.total, s.spent.Round(time.Millisecond), float64(s.total)/s.spent.Seconds())
	}
	return rate, measured(ln, "ms", s.lat, false)
}

// dockerConcurrency is the docker section's second part: concurrentN docker
// execs at once against as many relayd connections executing at once, into
// the same container, taking turns, until rounds are done or the section's
// budget (from began) is spent.
func (b *bench) dockerConcurrency(sec *section, env *dockerEnv, began time.Time, budget time.Duration) {
	conns, why := env.connections(concurrentN)
	defer func() {
		for _, cl := range conns {
			cl.close()
		}
	}()
	dx, rx := dockerBurst(env), relaydBurst(conns)
	if why != "" {
		rx.skip = why
	}
	rounds, chunk := b.pick(4, 2), b.pickDur(2*time.Second, time.Second)
	logf("docker: %d at once, up to %d rounds of %s of docker exec, then of relayd executes", concurrentN, rounds, chunk)
	done := 0
	for done < rounds && (done == 0 || !b.cut(began, budget)) {
		dx.run(concurrentN, chunk)
		rx.run(concurrentN, chunk)
		done++
	}
	if done < rounds {
		b.report.note("docker: %d of %d rounds of %d at once within the time budget", done, rounds, concurrentN)
	}
	dr, dl := dx.figures()
	rr, rl := rx.figures()
	sec.add(dr)
	sec.add(rr).against(dr)
	sec.add(dl)
	sec.add(rl).against(dl)
	sec.note("%d at once (moby/moby#45595 reports 20 concurrent docker execs taking seconds): %d goroutines each running `docker exec CONTAINER true` in a loop, then %d relayd connections each executing /bin/true in a loop, %s each, taking turns, %d rounds; an op still running at a round's end counts, and the round lasts until it ends", concurrentN, concurrentN, concurrentN, chunk, done)
	sec.note("%d at once: the rate is executes per second of all workers together, per round (its p99 column the slowest round; above 1x relayd is faster); the latency is each op's, over every op (below 1x relayd is faster)", concurrentN)
}

// connections dials n more connections to relayd in the container and runs
// one execute on each, so that the timed rounds do not pay for a first one;
// it returns why not when it cannot (the connections made are returned to
// be closed).
func (e *dockerEnv) connections(n int) ([]*benchClient, string) {
	var conns []*benchClient
	for range n {
		cl, err := dialBench(e.addr, e.token, 10*time.Second)
		if err != nil {
			return conns, fmt.Sprintf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		conns = append(conns, cl)
		if _, err := cl.execute(trueReq); err != nil {
			return conns, fmt.Sprintf("connection %d of %d: first execute: %v", len(conns), n, err)
		}
	}
	return conns, ""
}

// running are the docker CLI processes this program started and has not yet
// waited for: an interrupted run kills these, by pid, and no other.
type running struct {
	mu      sync.Mutex
	procs   map[*os.Process]struct{}
	stopped bool
}

// add registers p, started; once kill has run, it kills p instead (a
// worker may start one while the run stops).
func (r *running) add(p *os.Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		p.Kill()
		return
	}
	if r.procs == nil {
		r.procs = map[*os.Process]struct{}{}
	}
	r.procs[p] = struct{}{}
}

// done forgets p, waited for.
func (r *running) done(p *os.Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, p)
}

// kill kills every process registered and not yet waited for, and any
// added later.
func (r *running) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for p := range r.procs {
		if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			logf("docker: killing docker exec (pid %d): %v", p.Pid, err)
		}
	}
}
