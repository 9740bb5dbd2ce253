package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/relayd/relayd/client"
)

// outputBytes is what the subject of the output section writes: 1 GiB.
const outputBytes = 1 << 30

// output is section 4: a subject writing 1 GiB to stdout, in raw mode and in
// carrier mode, against the same bytes through a shell pipe into cat, timed
// the same way (from start to the end); and relayd's peak RSS, from a fresh
// relayd for each run so that the peak is that run's.
func (b *bench) output() {
	sec := b.report.section("output", "Output: a subject writing 1 GiB to stdout (head -c 1073741824 /dev/zero)")
	reps := b.pick(5, 1)
	budget := b.pickDur(90*time.Second, 40*time.Second)
	var pipe, raw, carrier, rawRSS, carrierRSS []float64
	var pipeErr, rawErr, carrierErr error
	mech := ""
	defer func() {
		if mech != "" {
			mech = ": " + mech
		}
		sec.note("each run: a fresh relayd (--scope auto%s), timed from the execute to its reply; the pipe from the start of sh to its end", mech)
		sec.note("raw mode returns the first --max-stdout-bytes (1 MiB); carrier mode finds no frame and reports result-frame-oversize with the SHA-256 of all 1 GiB")
	}()
	began := time.Now()
	for rep := 0; rep < reps; rep++ {
		if rep > 0 && b.cut(began, budget) {
			b.report.note("output: %d of %d repetitions within the time budget", rep, reps)
			break
		}
		logf("output: repetition %d of %d", rep+1, reps)
		if pipeErr == nil {
			t := time.Now()
			pipeErr = exec.Command("sh", "-c", "head -c "+strconv.Itoa(outputBytes)+" /dev/zero | cat > /dev/null").Run()
			pipe = append(pipe, gbps(time.Since(t)))
		}
		if rawErr == nil {
			var rate, rss float64
			rate, rss, mech, rawErr = b.outputOnce(b.cfg.relayd, false)
			if rawErr == nil {
				raw, rawRSS = append(raw, rate), append(rawRSS, rss)
			}
		}
		if carrierErr == nil {
			var rate, rss float64
			rate, rss, mech, carrierErr = b.outputOnce(b.cfg.relayd, true)
			if carrierErr == nil {
				carrier, carrierRSS = append(carrier, rate), append(carrierRSS, rss)
			}
		}
	}
	fig := func(name, unit string, xs []float64, err error, higher bool) *figure {
		if err != nil {
			return sec.add(skipped(name, unit, "failed: "+err.Error()))
		}
		return sec.add(measured(name, unit, xs, higher))
	}
	fp := fig("sh: head | cat > /dev/null", "GB/s", pipe, pipeErr, true)
	fig("relayd raw mode", "GB/s", raw, rawErr, true).against(fp).target("≥ 1 GB/s", medianAtLeast(1))
	fig("relayd carrier mode", "GB/s", carrier, carrierErr, true).against(fp).target("≥ 1 GB/s", medianAtLeast(1))
	fig("relayd peak RSS (VmHWM), raw mode", "MiB", rawRSS, rawErr, false).target("< 32 MiB", medianBelow(32))
	fig("relayd peak RSS (VmHWM), carrier mode", "MiB", carrierRSS, carrierErr, false).target("< 32 MiB", medianBelow(32))
}

// outputOnce runs the 1 GiB subject through a fresh relayd (the default
// --scope auto) and returns the rate, relayd's peak RSS in MiB and the
// mechanism.
func (b *bench) outputOnce(bin string, carrier bool) (rate, rssMiB float64, mech string, err error) {
	d, err := startRelayd(bin, startOpts{})
	if err != nil {
		return 0, 0, "", err
	}
	defer b.stopDaemon(d, "output")
	cl, err := d.connect()
	if err != nil {
		return 0, 0, "", err
	}
	defer cl.close()
	mech = cl.mechanism
	req := client.Request{Command: "head", Args: []string{"-c", strconv.Itoa(outputBytes), "/dev/zero"}}
	if carrier {
		req.ResultToken = randomHex(16)
	}
	t := time.Now()
	r, err := cl.execute(req)
	took := time.Since(t)
	if err != nil {
		return 0, 0, mech, err
	}
	var counted int64 = -1
	if r.Diagnostic.Counted() {
		counted = *r.Diagnostic.Bytes
	}
	switch {
	case !carrier && !r.StdoutTruncated:
		return 0, 0, mech, fmt.Errorf("raw mode: stdoutTruncated is false for 1 GiB of output")
	case carrier && (r.Diagnostic.Category != client.DiagOversize || counted != outputBytes):
		return 0, 0, mech, fmt.Errorf("carrier mode: diagnostic %s with %d bytes; want result-frame-oversize with %d",
			r.Diagnostic.Category, counted, outputBytes)
	}
	hwm, err := d.status("VmHWM")
	if err != nil {
		return 0, 0, mech, err
	}
	return gbps(took), hwm / 1024, mech, nil
}

// gbps is the rate of outputBytes in d, in GB/s (10^9 bytes a second).
func gbps(d time.Duration) float64 { return outputBytes / d.Seconds() / 1e9 }

// medianAtLeast is met when the median is at least v.
func medianAtLeast(v float64) func(f *figure) bool {
	return func(f *figure) bool { return f.Median >= v }
}

// medianBelow is met when the median is below v.
func medianBelow(v float64) func(f *figure) bool {
	return func(f *figure) bool { return f.Median < v }
}
