package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The docker section runs by default and alone with --only docker.
func TestOnlyDocker(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--relayd", bin, "--only", "docker"})
	if err != nil {
		t.Fatal(err)
	}
	if got := selected(cfg); len(got) != 1 || got[0] != "docker" {
		t.Fatalf("--only docker selected %v; want [docker]", got)
	}
	if cfg, err = parseFlags([]string{"--relayd", bin}); err != nil || !cfg.only["docker"] {
		t.Fatalf("default run: docker selected %v, err %v; want true", cfg.only["docker"], err)
	}
}

// Without the docker CLI the section is skipped with a plain reason, and
// nothing is started.
func TestDockerSkippedWithoutDocker(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b := &bench{report: &report{}}
	b.dockerSection()
	sec := b.report.Sections[0]
	if len(sec.Figures) != 8 {
		t.Fatalf("got %d figures; want 8 skipped (round trip, the Terminus step, and rate and latency at %d at once)", len(sec.Figures), concurrentN)
	}
	for _, f := range sec.Figures {
		if f.Skipped != "docker CLI not installed" {
			t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, "docker CLI not installed")
		}
	}
}

// A round's rate is the ops of all workers over the round's wall time, and
// the latency figure is over every op of every round.
func TestBurstAggregates(t *testing.T) {
	s := &burst{name: "x"}
	s.add([][]float64{{10, 20}, {30}, {}}, 500*time.Millisecond) // 3 ops in 0.5 s
	s.add([][]float64{{40}, {50}, {60}}, time.Second)            // 3 ops in 1 s
	rate, lat := s.figures()
	if rate.N != 2 || rate.Median != 3 || rate.P99 != 3 {
		t.Errorf("rate: n %d, median %v, p99 %v; want 2 rounds, median 3/s (nearest rank), slowest round 3/s", rate.N, rate.Median, rate.P99)
	}
	if s.total != 6 || s.spent != 1500*time.Millisecond || !strings.Contains(rate.Detail, "4/s overall") {
		t.Errorf("total %d, spent %s, detail %q; want 6 in 1.5s, 4/s overall", s.total, s.spent, rate.Detail)
	}
	if lat.N != 6 || lat.Median != 30 || lat.P99 != 60 || lat.Unit != "ms" {
		t.Errorf("latency: n %d, median %v, p99 %v %s; want 6, 30, 60 ms", lat.N, lat.Median, lat.P99, lat.Unit)
	}
	if !strings.HasSuffix(lat.Name, ": latency") || rate.Unit != "exec/s" || !rate.HigherIsBetter {
		t.Errorf("figures %q (%s), %q; want a rate in exec/s, higher better, and a latency", rate.Name, rate.Unit, lat.Name)
	}
}

// An op that outlasts the round still counts, and the round lasts until it
// ends: docker exec at 32 at once can take longer than a round.
func TestBurstCountsOpsInFlight(t *testing.T) {
	const workers, op = 4, 30 * time.Millisecond
	s := &burst{name: "slow", op: func(int) error { time.Sleep(op); return nil }}
	s.run(workers, time.Millisecond)
	if s.skip != "" || s.total != workers || len(s.lat) != workers {
		t.Fatalf("skip %q, total %d, %d latencies; want one op per worker, %d", s.skip, s.total, len(s.lat), workers)
	}
	if s.spent < op || s.rates[0] > workers/op.Seconds() {
		t.Errorf("round of %s at %.0f/s; want at least %s, at most %.0f/s", s.spent, s.rates[0], op, workers/op.Seconds())
	}
	for _, l := range s.lat {
		if l < float64(op.Milliseconds()) {
			t.Errorf("latency %.1f ms; want at least %s", l, op)
		}
	}
}

// A failing op skips the series with the reason, and it runs no more.
func TestBurstFailureSkips(t *testing.T) {
	calls := 0
	s := &burst{name: "bad", op: func(w int) error {
		if w == 1 {
			return errors.New("no such container")
		}
		return nil
	}}
	s.run(2, time.Millisecond)
	if s.skip != "failed: no such container" {
		t.Fatalf("skip %q; want the op's error", s.skip)
	}
	s.op = func(int) error { calls++; return nil }
	s.run(2, time.Millisecond)
	rate, lat := s.figures()
	if calls != 0 || rate.Skipped != s.skip || lat.Skipped != s.skip {
		t.Errorf("after a failure: %d calls, skipped %q and %q; want none, and both figures skipped", calls, rate.Skipped, lat.Skipped)
	}
}

// kill kills the processes registered and not yet waited for, and one
// started after it, by pid.
func TestRunningKill(t *testing.T) {
	var r running
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	waited := start()
	r.add(waited.Process)
	waited.Process.Kill()
	waited.Wait()
	r.done(waited.Process)
	a := start()
	r.add(a.Process)
	r.kill()
	b := start()
	r.add(b.Process)
	for _, cmd := range []*exec.Cmd{a, b} {
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("pid %d: %v; want killed by SIGKILL", cmd.Process.Pid, err)
		}
	}
}
