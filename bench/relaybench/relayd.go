package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// daemon is one relayd this run started (testharness starts it).
type daemon struct {
	*testharness.Relayd
	pid       int
	startedAt time.Time // just before fork/exec
	forget    func()    // unregisters the interrupted run's cleanup
}

// startOpts configure a relayd.
type startOpts struct {
	scope  string   // --scope; "" for the default (auto)
	listen string   // --listen; "" for 127.0.0.1:0, whose port is read from the log
	args   []string // more flags
}

// launch starts relayd without waiting for it to listen.
func launch(bin string, o startOpts) (*daemon, error) {
	var args []string
	if o.scope != "" {
		args = append(args, "--scope", o.scope)
	}
	// relayd logs every execution at info level, and this run makes
	// hundreds of thousands: keep only the log's last 64 KiB.
	r, err := testharness.Prepare(testharness.Options{Bin: bin, Listen: o.listen, Args: append(args, o.args...), LogKeep: 64 << 10})
	if err != nil {
		return nil, err
	}
	d := &daemon{Relayd: r, startedAt: time.Now()}
	if err := r.Launch(); err != nil {
		r.Kill() // removes its directory
		return nil, err
	}
	d.pid = r.Pid()
	d.forget = atCleanup(d.kill)
	return d, nil
}

// startRelayd starts relayd on a free loopback port and waits until it logs
// the address it listens on.
func startRelayd(bin string, o startOpts) (*daemon, error) {
	d, err := launch(bin, o)
	if err != nil {
		return nil, err
	}
	if err := d.WaitListening(20 * time.Second); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// stop sends SIGTERM to relayd and waits for it to exit; it returns an
// error when relayd exited with a status other than 0 (or had to be killed).
func (d *daemon) stop() error {
	defer d.forget()
	code, err := d.Stop(20 * time.Second)
	switch {
	case err != nil:
		return fmt.Errorf("%w; killed", err)
	case code != 0:
		return fmt.Errorf("relayd (pid %d) exited with status %d after SIGTERM: %s", d.pid, code, d.Logs.LastLine())
	}
	return nil
}

// kill is the interrupted run's cleanup: SIGTERM (relayd settles what runs),
// then SIGKILL after a while.
func (d *daemon) kill() { _, _ = d.Stop(5 * time.Second) }

// status reads a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func (d *daemon) status(field string) (kib float64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(d.pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", d.pid, field)
}

// cpuTime is the CPU time pid has used (all its threads, not its
// children): the sum of its threads' sum_exec_runtime in
// /proc/PID/task/*/schedstat, which the scheduler keeps to the
// nanosecond. /proc/PID/stat's utime and stime are samples taken at each
// tick (CONFIG_TICK_CPU_ACCOUNTING, HZ 250 here), so a figure of a few
// hundred milliseconds moved by 10% between runs of one binary; it is the
// fallback where schedstat cannot be read. A thread that ended between
// two reads takes its time with it; relayd's Go threads do not end.
func cpuTime(pid int) (time.Duration, error) {
	if d, err := schedCPU(pid); err == nil {
		return d, nil
	}
	s, err := testharness.ReadStat(pid)
	return s.CPU, err
}

// schedCPU is the sum of sum_exec_runtime (the first field of
// /proc/PID/task/TID/schedstat, in nanoseconds) over pid's threads.
func schedCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tids {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread ended since the listing
			}
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			return 0, fmt.Errorf("%s/%s/schedstat: %q", dir, t.Name(), b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// childCPU is the CPU time of each live child of pid (its own, not its
// children's), by pid: relayd's shims.
func childCPU(pid int) (map[int]testharness.Stat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]testharness.Stat{}
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := testharness.ReadStat(child); err == nil && st.PPID == pid && !st.Dead() {
			if d, err := schedCPU(child); err == nil {
				st.CPU = d // exact, as cpuTime
			}
			out[child] = st
		}
	}
	return out, nil
}

// childCPUSince is what the children in now spent since then: all of it
// for one started since. A child that ended between the two is missing.
func childCPUSince(then, now map[int]testharness.Stat) time.Duration {
	var d time.Duration
	for pid, st := range now {
		if was, ok := then[pid]; ok && was.Start == st.Start {
			d += st.CPU - was.CPU
		} else {
			d += st.CPU
		}
	}
	return d
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// probeCgroup says why relayd --scope cgroup cannot run here, or "".
func probeCgroup(bin string) string {
	d, err := startRelayd(bin, startOpts{scope: "cgroup"})
	if err != nil {
		return "relayd --scope cgroup refused to start: " + strings.TrimPrefix(err.Error(), "relayd ")
	}
	if err := d.stop(); err != nil {
		return err.Error()
	}
	return ""
}

// benchClient is one controller connection (package client) and the scope
// mechanism its handshake named.
type benchClient struct {
	*client.Conn
	mechanism string
}

// connect dials relayd and does the ready handshake.
func (d *daemon) connect() (*benchClient, error) {
	return dialBench(d.Addr, d.Token, 10*time.Second)
}

// benchWait bounds every reply the bench waits for (the longest, 1 GiB of
// output, takes seconds): a hung relayd ends the run's section instead of
// hanging it. A Dialer's bound costs nothing per call, unlike a context
// with a deadline, which the round trip would measure.
const benchWait = 5 * time.Minute

func dialBench(addr, token string, within time.Duration) (*benchClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := (&client.Dialer{MaxWait: benchWait}).Dial(ctx, addr, token)
	if err != nil {
		return nil, err
	}
	return &benchClient{Conn: c, mechanism: c.Handshake().Scope}, nil
}

func (cl *benchClient) close() { cl.Close() }

// trueReq is the round trip's execute: /bin/true.
var trueReq = client.Request{Command: "/bin/true"}

// execute runs req (within benchWait) and checks that the subject exited 0.
func (cl *benchClient) execute(req client.Request) (client.Executed, error) {
	e, err := cl.Execute(context.Background(), req)
	if err != nil {
		return e, err
	}
	if e.Termination != client.Exited || e.ExitCode != 0 {
		return e, fmt.Errorf("got %s, exit %d (%s); want exited with exit code 0", e.Termination, e.ExitCode, e.Detail)
	}
	return e, nil
}
