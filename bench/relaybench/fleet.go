package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// fleet is the opt-in section of many trials per controller (issue 20): N
// dial-out relayds started at once against one client.Listener in this
// process, each its own process and token, each with one execute of
// /bin/true and a verify. A trial is lost when its Accept, execute or
// verify fails, or its relayd exits other than 0. The controller's memory
// is this process's Go heap and stacks at their peak, above the level
// before the relayds started.
func (b *bench) fleet() {
	sec := b.report.section("fleet", "Fleet: N dial-out relayds started at once against one Listener (one execute and a verify each)")
	sizes := []int{500, 1000, 2000}
	if v := os.Getenv("RELAYBENCH_FLEET"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			if k, err := strconv.Atoi(f); err == nil && k > 0 {
				sizes = append(sizes, k)
			}
		}
	}
	if b.cfg.quick {
		sizes = []int{100, 250}
	}
	raiseNoFile(uint64(4*sizes[len(sizes)-1] + 1024)) // a connection and a log pipe per relayd
	for _, n := range sizes {
		r, err := runFleet(b.cfg.relayd, n)
		if err != nil {
			sec.add(skipped(fmt.Sprintf("fleet of %d", n), "lost", err.Error()))
			continue
		}
		sec.add(measured(fmt.Sprintf("fleet of %d: trials lost", n), "trials", []float64{float64(r.lost)}, false)).
			target("0 lost", func(f *figure) bool { return f.Median == 0 }).
			withNote("%s", r.why)
		sec.add(measured(fmt.Sprintf("fleet of %d: all done", n), "s", []float64{r.took.Seconds()}, false))
		sec.add(measured(fmt.Sprintf("fleet of %d: controller memory", n), "MiB", []float64{r.peakMiB}, false))
		logf("fleet of %d: %d lost, %s, controller %.1f MiB over its start", n, r.lost, r.took.Round(time.Millisecond), r.peakMiB)
	}
}

type fleetResult struct {
	lost    int
	took    time.Duration
	peakMiB float64
	why     string // the first failures, for the note
}

func runFleet(bin string, n int) (fleetResult, error) {
	var res fleetResult
	dir, err := os.MkdirTemp("", "relaybench-fleet-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	ln, err := client.Listen("127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer ln.Close()

	ds := make([]*testharness.Relayd, n)
	for i := range ds {
		sub := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return res, err
		}
		r, err := testharness.Prepare(testharness.Options{Bin: bin, Dir: sub, Connect: ln.Addr().String(), LogKeep: 4 << 10,
			Args: []string{"--state-dir", filepath.Join(sub, "state"), "--connect-timeout", "60s"}})
		if err != nil {
			return res, err
		}
		ds[i] = r
	}
	defer func() {
		for _, r := range ds {
			if r.Pid() != 0 {
				r.Kill() // only those still running; each waited by its own pid
			}
		}
	}()

	runtime.GC()
	base := goMemory()
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if m := goMemory(); m > peak.Load() {
				peak.Store(m)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	began := time.Now()
	var mu sync.Mutex
	var whys []string
	lose := func(i int, why string) {
		mu.Lock()
		defer mu.Unlock()
		res.lost++
		if len(whys) < 3 {
			whys = append(whys, fmt.Sprintf("relayd %d: %s", i, why))
		}
	}
	var wg sync.WaitGroup
	for i, r := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			c, err := ln.Accept(ctx, r.Token)
			if err != nil {
				lose(i, "accept: "+err.Error())
				return
			}
			defer c.Close()
			x, err := c.Execute(ctx, client.Request{Command: "/bin/true"})
			if err != nil || x.ExitCode != 0 {
				lose(i, fmt.Sprintf("execute: %v (exit %d, %s: %s)", err, x.ExitCode, x.Diagnostic.Category, x.Detail))
				return
			}
			if _, err := c.Verify(ctx); err != nil {
				lose(i, "verify: "+err.Error())
			}
		}()
	}
	// All at once: as fast as this process can fork them.
	var lwg sync.WaitGroup
	for w := 0; w < 8; w++ {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for i := w; i < n; i += 8 {
				if err := ds[i].Launch(); err != nil {
					lose(i, err.Error())
				}
			}
		}()
	}
	lwg.Wait()
	wg.Wait()
	res.took = time.Since(began)
	close(stopSampling)
	<-sampled
	for i, r := range ds {
		if r.Pid() == 0 {
			continue
		}
		code, err := r.Wait(30 * time.Second)
		if err != nil || code != 0 {
			lose(i, fmt.Sprintf("relayd exited %d (%v): %s", code, err, r.Logs.LastLine()))
		}
	}
	if p := peak.Load(); p > base {
		res.peakMiB = float64(p-base) / (1 << 20)
	}
	res.why = "none lost"
	if len(whys) > 0 {
		res.why = fmt.Sprint(whys)
	}
	return res, nil
}

// goMemory is the Go heap and goroutine stacks in use.
func goMemory() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
