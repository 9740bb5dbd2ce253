package session

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// goid is the calling goroutine's number, from its stack's first line.
func goid() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.Atoi(string(b[:bytes.IndexByte(b, ' ')]))
	return n
}

func waitIdle(t *testing.T, r *runners, n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.idle.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d runners wait; want %d", r.idle.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The next execution runs on the goroutine of one that ended (its stack
// grown already); at most maxIdleRunners wait; they end when relayd stops.
func TestRunnersReuseTheirGoroutines(t *testing.T) {
	stop := make(chan struct{})
	r := newRunners(stop)
	ran := make(chan int, 1)
	r.run(func() { ran <- goid() })
	first := <-ran
	waitIdle(t, r, 1)
	r.run(func() { ran <- goid() })
	if second := <-ran; second != first {
		t.Fatalf("the second execution ran on goroutine %d; want the first's, %d", second, first)
	}
	waitIdle(t, r, 1)

	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := 0; i < 3*maxIdleRunners; i++ {
		wg.Add(1)
		r.run(func() {
			defer wg.Done()
			<-gate
		})
	}
	close(gate)
	wg.Wait()
	waitIdle(t, r, maxIdleRunners)
	close(stop)
	waitIdle(t, r, 0)               // each runner counts itself out as it returns
	r.run(func() { ran <- goid() }) // after the stop: still run, on a goroutine that then ends
	<-ran
}
