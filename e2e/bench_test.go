package e2e

import (
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"
)

// Round trip of execute /bin/true over one connection, next to the floor: a
// bare fork/exec/wait of /bin/true in a new session, measured in the same
// run. Run:
//
//	go test -run '^$' -bench RoundTrip -benchtime 2000x ./e2e/
//
// (TestMain builds relayd without the race detector when benchmarks run.)
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("bare-spawn", func(b *testing.B) {
		attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setsid: true}}
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			began := time.Now()
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, attr)
			if err != nil {
				b.Fatal(err)
			}
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(began))
		}
		report(b, samples)
	})
	b.Run("relayd-execute", func(b *testing.B) {
		d := startRelayd(b, opts{})
		c := d.connect()
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			began := time.Now()
			r := c.request(msg{"kind": "execute", "command": "/bin/true"})
			samples = append(samples, time.Since(began))
			if r["exitCode"] == nil {
				b.Fatalf("reply %v", r)
			}
		}
		b.StopTimer()
		d.stopClean()
		report(b, samples)
	})
}

// report adds the median and p99 of samples, in microseconds.
func report(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	p := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p(0.5), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
	if testing.Verbose() {
		fmt.Printf("%s: n=%d p50=%.0fµs p99=%.0fµs\n", b.Name(), len(samples), p(0.5), p(0.99))
	}
}
