package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Round trip of execute /bin/true over one connection, per scope mechanism,
// next to the floor measured in the same run: a bare fork/exec/wait of
// /bin/true in a new session, and one born into a fresh cgroup leaf. Run:
//
//	go test -run '^$' -bench RoundTrip -benchtime 2000x ./e2e/
//
// (TestMain builds relayd without the race detector when benchmarks run.)
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("bare-spawn", func(b *testing.B) {
		sys := &syscall.SysProcAttr{Setsid: true}
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			began := time.Now()
			bareSpawn(b, sys)
			samples = append(samples, time.Since(began))
		}
		report(b, samples)
	})
	b.Run("bare-cgroup-spawn", func(b *testing.B) {
		if cgroupSkip != "" {
			b.Skip(cgroupSkip)
		}
		base := benchCgroupBase(b)
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			began := time.Now()
			leaf := filepath.Join(base, "leaf-"+strconv.Itoa(i))
			if err := os.Mkdir(leaf, 0o755); err != nil {
				b.Fatal(err)
			}
			fd, err := unix.Open(leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			bareSpawn(b, &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd})
			unix.Close(fd)
			for os.Remove(leaf) != nil { // populated 0 comes a little after wait
			}
			samples = append(samples, time.Since(began))
		}
		report(b, samples)
	})
	// RELAYD_BENCH_BEFORE names an older relayd binary to measure in the
	// same run, for before/after comparisons of a change.
	bins := map[string]string{"relayd": relaydBin}
	if before := os.Getenv("RELAYD_BENCH_BEFORE"); before != "" {
		bins["before"] = before
	}
	for _, name := range []string{"relayd", "before"} {
		for _, mech := range []string{"process-group", "cgroup"} {
			if bins[name] == "" {
				continue
			}
			roundTrip(b, name, bins[name], mech)
		}
	}
}

func roundTrip(b *testing.B, name, bin, mech string) {
	b.Run(name+"-"+mech, func(b *testing.B) {
		if mech == "cgroup" && cgroupSkip != "" {
			b.Skip(cgroupSkip)
		}
		d := startRelayd(b, opts{scope: mech, bin: bin})
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

func bareSpawn(b *testing.B, sys *syscall.SysProcAttr) {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: sys})
	if err != nil {
		b.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		b.Fatal(err)
	}
}

// benchCgroupBase makes a cgroup v2 directory for bare spawns, beside
// relayd's own subtrees, and removes it afterwards.
func benchCgroupBase(b *testing.B) string {
	d := startRelayd(b, opts{scope: "cgroup"})
	root := filepath.Dir(subtreeOf(b, d))
	d.stopClean()
	base := filepath.Join(root, fmt.Sprintf("relayd-bench-%d", os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.Remove(base) })
	return base
}

// Settling a tree of 200 processes, a tenth of them setsid escapees and a
// tenth ignoring SIGTERM, per mechanism: the time from verify to the
// executed reply, and that time less the grace period (the TERM-ignoring
// members make relayd wait the whole grace). Run:
//
//	go test -run '^$' -bench Settle200 -benchtime 5x -v ./e2e/
func BenchmarkSettle200(b *testing.B) {
	const grace = 500 * time.Millisecond
	for _, mech := range []string{"process-group", "cgroup"} {
		b.Run(mech, func(b *testing.B) {
			if mech == "cgroup" && cgroupSkip != "" {
				b.Skip(cgroupSkip)
			}
			d := startRelayd(b, opts{scope: mech, args: []string{"--term-grace", grace.String(), "--teardown-timeout", "10s"}})
			c := d.connect()
			var samples []time.Duration
			for i := 0; i < b.N; i++ {
				pids := d.pidFile(fmt.Sprintf("tree%d.pids", i))
				script := fmt.Sprintf(`i=0; while [ $i -lt 200 ]; do i=$((i+1))
  case $((i %% 10)) in
    0) sh -c 'trap "" TERM; exec sleep 300' & echo $! >> %[1]s ;;
    1) setsid sleep 300 & echo $! >> %[1]s ;;
    *) sleep 300 & echo $! >> %[1]s ;;
  esac
done; wait`, q(pids))
				c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", script}})
				waitFor(b, 30*time.Second, "200 processes", func() bool { return len(readPids(pids)) >= 200 })
				began := time.Now()
				c.send(msg{"kind": "verify"})
				r := c.read(30 * time.Second)
				took := time.Since(began)
				if r["settlement"] != "settled" {
					b.Fatalf("settlement %v", r["settlement"])
				}
				c.read(5 * time.Second) // verified
				survivors := 0
				for _, pid := range readPids(pids) {
					if alive(pid) {
						survivors++
					}
				}
				if survivors > 0 {
					b.Fatalf("%d of 200 survived settlement", survivors)
				}
				samples = append(samples, took-grace)
			}
			d.stopClean()
			report(b, samples)
		})
	}
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
