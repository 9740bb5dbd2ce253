package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// footprint is section 5: the binary's size, the time from starting relayd
// to its first accepted connection, its RSS idle and with 1,000 idle
// authenticated connections, per mechanism.
func (b *bench) footprint() {
	sec := b.report.section("footprint", "Footprint: binary, start, memory")
	if info, err := os.Stat(b.cfg.relayd); err == nil {
		mib := float64(info.Size()) / (1 << 20)
		sec.add(&figure{Name: "binary size", Unit: "MiB", N: 1, Median: mib, P99: mib,
			Detail: fmt.Sprintf("%d bytes, %s", info.Size(), b.cfg.relayd)})
	}
	starts := b.pick(20, 5)
	connReps := b.pick(3, 1)
	sec.note("start: from fork/exec of relayd to the first connect that succeeds, dialling in a tight loop; %d starts", starts)
	sec.note("the kernel completes a connect once relayd listens, which it does before it sets up its scope mechanism (for cgroup, a probe that spawns into a leaf); the first ready reply is when it serves")
	sec.note("idle RSS: VmRSS 300 ms after one ready over one connection, closed since")
	sec.note("1,000 idle connections: VmRSS 500 ms after the last of them had its ready reply; %d runs, a fresh relayd each", connReps)
	const conns = 1000
	for _, mech := range []string{"process-group", "cgroup"} {
		names := []string{"start to first connection, " + mech, "start to first ready reply, " + mech,
			"idle RSS, " + mech, "RSS with 1,000 idle connections, " + mech}
		if mech == "cgroup" && b.cgSkip != "" {
			for i, n := range names {
				sec.add(skipped(n, []string{"ms", "ms", "MiB", "MiB"}[i], b.cgSkip))
			}
			continue
		}
		logf("footprint: %s: %d starts", mech, starts)
		var first, ready, idle []float64
		var startErr error
		for i := 0; i < starts && startErr == nil; i++ {
			if i >= 5 && b.overtime() {
				b.report.note("footprint, %s: %d of %d starts within the time budget", mech, i, starts)
				break
			}
			var s startSample
			if s, startErr = b.startOnce(mech); startErr == nil {
				first = append(first, ms(s.connected))
				ready = append(ready, ms(s.ready))
				idle = append(idle, s.idleRSS)
			}
		}
		logf("footprint: %s: %d idle connections, %d times", mech, conns, connReps)
		var busy []float64
		var connErr error
		for i := 0; i < connReps && connErr == nil; i++ {
			if i >= 1 && b.overtime() {
				break
			}
			var rss float64
			if rss, connErr = b.connsOnce(mech, conns); connErr == nil {
				busy = append(busy, rss)
			}
		}
		add := func(name, unit string, xs []float64, err error) *figure {
			if err != nil {
				return sec.add(skipped(name, unit, "failed: "+err.Error()))
			}
			return sec.add(measured(name, unit, xs, false))
		}
		add(names[0], "ms", first, startErr).target("< 20 ms", medianBelow(20))
		add(names[1], "ms", ready, startErr)
		add(names[2], "MiB", idle, startErr).target("< 15 MiB", medianBelow(15))
		add(names[3], "MiB", busy, connErr).target("< 64 MiB", medianBelow(64))
	}
}

type startSample struct {
	connected, ready time.Duration
	idleRSS          float64 // MiB
}

// startOnce starts relayd on a free port, dials it in a tight loop until a
// connection is accepted, does a ready handshake, and reads relayd's RSS a
// little after.
func (b *bench) startOnce(mech string) (startSample, error) {
	var s startSample
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			return s, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		d, err := launch(b.cfg.relayd, startOpts{scope: mech, listen: addr})
		if err != nil {
			return s, err
		}
		var c net.Conn
		deadline := d.startedAt.Add(20 * time.Second)
		for {
			c, err = net.Dial("tcp", addr)
			if err == nil {
				break
			}
			select {
			case <-d.Exited:
				err = fmt.Errorf("relayd exited with status %d at start: %s", d.ExitCode(), d.Logs.LastLine())
			default:
				if time.Now().Before(deadline) {
					continue
				}
				err = fmt.Errorf("relayd did not accept a connection within 20s: %s", d.Logs.LastLine())
			}
			break
		}
		if err != nil {
			d.stop()
			if try < 3 && strings.Contains(err.Error(), "address already in use") {
				continue // the port was taken between freePort and relayd's listen
			}
			return s, err
		}
		s.connected = time.Since(d.startedAt)
		c.Close()
		d.Addr = addr
		var cl *benchClient
		cl, err = d.connect()
		s.ready = time.Since(d.startedAt)
		if err == nil {
			cl.close()
		}
		if err == nil {
			time.Sleep(300 * time.Millisecond)
			var kib float64
			kib, err = d.status("VmRSS")
			s.idleRSS = kib / 1024
		}
		if serr := d.stop(); err == nil {
			err = serr
		}
		return s, err
	}
}

// connsOnce opens n connections to a fresh relayd, each sending one ready
// and reading the reply, and reads relayd's RSS while they stay open.
func (b *bench) connsOnce(mech string, n int) (float64, error) {
	d, err := startRelayd(b.cfg.relayd, startOpts{scope: mech})
	if err != nil {
		return 0, err
	}
	defer b.stopDaemon(d, "footprint, "+mech)
	var open []*benchClient
	defer func() {
		for _, cl := range open {
			cl.close()
		}
	}()
	for i := 0; i < n; i++ {
		cl, err := d.connect()
		if err != nil {
			return 0, fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		open = append(open, cl)
	}
	time.Sleep(500 * time.Millisecond)
	kib, err := d.status("VmRSS")
	if err != nil {
		return 0, err
	}
	if kib == 0 {
		return 0, errors.New("VmRSS is 0")
	}
	return kib / 1024, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
