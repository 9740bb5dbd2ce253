package session

import "sync/atomic"

// runners are goroutines kept, once their execution ended, for the next
// ones. An execution's goroutine grows its stack from the runtime's start
// size to some 16 KiB on every execute, three copies that each walk every
// frame (3 % of relayd's CPU per execute in process-group mode: perf of
// relayd and pprof of BenchmarkExecuteTrue); one that ran an execution
// has that stack already. At most maxIdleRunners wait, until relayd stops;
// the others end. What runs here must not leave its OS thread locked
// (asUser's locked threads are goroutines of their own).
type runners struct {
	work     chan func() // unbuffered: a send is taken by a waiting runner, or not at all
	idle     atomic.Int32
	stopping <-chan struct{}
}

// maxIdleRunners bounds the waiting runners: each holds its stack (the
// GC halves an idle one's).
const maxIdleRunners = 8

func newRunners(stopping <-chan struct{}) *runners {
	return &runners{work: make(chan func()), stopping: stopping}
}

// run runs f on a waiting runner, else on a new goroutine.
func (r *runners) run(f func()) {
	select {
	case r.work <- f:
	default:
		go r.loop(f)
	}
}

func (r *runners) loop(f func()) {
	for {
		f()
		if r.idle.Add(1) > maxIdleRunners {
			r.idle.Add(-1)
			return
		}
		select {
		case f = <-r.work:
			r.idle.Add(-1)
		case <-r.stopping:
			r.idle.Add(-1)
			return
		}
	}
}
