package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayd/relayd/client"
)

// bridgeRounds is how many times each row of the bridge section runs, in
// turns (--bridge-rounds): single 1 GiB transfers through docker exec
// swing by a third between runs on a shared machine.
const bridgeRounds = 5

// bridgeNames are the bridge section's rows: body puts and gets through
// relayd bridge under docker exec -i, with and without a digest, and
// docker exec -i cat of the same bytes each way.
var bridgeNames = []string{"bridge put: relayd PutFile, sha256", "bridge put: relayd PutFile, digest none", "bridge put: docker exec -i cat",
	"bridge get: relayd GetFile, sha256", "bridge get: relayd GetFile, digest none", "bridge get: docker exec cat"}

// bridge is the transfer section's body rows through relayd bridge alone
// (--only bridge), each --bridge-rounds times in turns (medians), with the
// CPU seconds per GiB that each process on the path spent: relayd (PID 1
// in the container), the bridge, the docker CLI, dockerd, containerd,
// fuse-overlayfs, the container's shim with the exec'd processes it
// reaped (cat), and this process (the client). With --bridge-perf DIR, one more round, untimed,
// is recorded row by row with `perf record -a -g` into DIR.
func (b *bench) bridge() {
	sec := b.report.section("bridge", "Bridge: file bodies through relayd bridge vs docker exec -i cat, in turns")
	n := int64(1 << 30)
	rounds := b.cfg.bridgeRounds
	if b.cfg.quick {
		n, rounds = 64<<20, 1
	}
	skip := func(why string) {
		logf("bridge section skipped: %s", why)
		for _, name := range bridgeNames {
			sec.add(skipped(name, "MiB/s", why))
		}
	}
	env, why := b.dockerSetup()
	if why != "" {
		skip(why)
		return
	}
	defer env.remove()
	t, err := newTransferEnv(env, 0, n)
	if err != nil {
		skip(err.Error())
		return
	}
	defer t.close()
	pids, err := bridgePids(env.name)
	if err != nil {
		skip(err.Error())
		return
	}
	ctx := context.Background()
	// The gets read a file put once, untimed.
	const src = "/tmp/bridge-src.bin"
	f, err := os.Open(t.hostFile)
	if err == nil {
		err = t.dockerIn(f, src)
		f.Close()
	}
	if err != nil {
		skip(err.Error())
		return
	}
	fromHost := t.fromHost
	out := t.gotFile()
	toHost := t.toHost
	put := func(digest string) func() error {
		return fromHost(func(r io.Reader) error {
			_, err := t.conn.PutFile(ctx, "/tmp/bridge-put.bin", r, client.PutOptions{Digest: digest})
			return err
		})
	}
	get := func(digest string) func() error {
		return toHost(func(w io.Writer) error {
			_, err := t.conn.GetFileWith(ctx, src, w, client.GetOptions{Digest: digest})
			return err
		})
	}
	ops := []func() error{put(""), put(client.DigestNone),
		fromHost(func(r io.Reader) error { return t.dockerIn(r, "/tmp/bridge-put.bin") }),
		get(""), get(client.DigestNone),
		toHost(func(w io.Writer) error {
			cmd := exec.Command("docker", "exec", env.name, "cat", src)
			cmd.Stdout = w
			return cmd.Run()
		})}
	putCheck := func() error { return t.checkRemote("/tmp/bridge-put.bin", t.fileSum, true) }
	getCheck := func() error { return t.checkLocal(out) }
	checks := []func() error{putCheck, putCheck, putCheck, getCheck, getCheck, getCheck}
	sec.note("a %s file of pseudo-random bytes from the host's disk into the container's /tmp and back (the gets read one put beforehand, untimed), through client.DialCommand of `docker exec -i %s relayd bridge`, against `docker exec -i C sh -c 'cat > F'` and `docker exec C cat F` of the same bytes; %d rounds in turns, medians; sha256 checked after each", mib(n), env.name, rounds)
	sec.note("CPU s/GiB by process, user+system from /proc/PID/stat over each transfer: relayd (PID 1), the bridge (relayd bridge), the docker CLI (the connection's and, for cat, the one started: this process's reaped children), dockerd, containerd, fuse-overlayfs (when the storage driver is), the shim (with what it reaped: the exec'd cat), this process (the client); the machine's (all processes, /proc/stat) beside")
	gib := float64(n) / (1 << 30)
	rates := make([][]float64, len(ops))
	cpu := make([]map[string][]float64, len(ops))
	failed := make([]error, len(ops))
	for i := range cpu {
		cpu[i] = map[string][]float64{}
	}
	for range rounds {
		for i, op := range ops {
			if failed[i] != nil {
				continue
			}
			c0 := pids.sample()
			began := time.Now()
			err := op()
			took := time.Since(began)
			c1 := pids.sample()
			if err == nil {
				err = checks[i]()
			}
			if err != nil {
				logf("bridge: %s: %v", bridgeNames[i], err)
				failed[i] = err
				continue
			}
			r := float64(n) / (1 << 20) / took.Seconds()
			rates[i] = append(rates[i], r)
			var parts []string
			for _, k := range cpuLabels {
				v := (c1[k] - c0[k]) / gib
				cpu[i][k] = append(cpu[i][k], v)
				parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
			}
			logf("bridge: %s: %s in %s, %.0f MiB/s; CPU s/GiB: %s", bridgeNames[i], mib(n), took.Round(time.Millisecond), r, strings.Join(parts, ", "))
		}
	}
	if b.cfg.bridgePerf != "" {
		for i, op := range ops {
			if failed[i] == nil {
				recordPerf(filepath.Join(b.cfg.bridgePerf, fmt.Sprintf("row%d.data", i)), op)
			}
		}
	}
	figs := make([]*figure, len(ops))
	for i := range ops {
		if failed[i] != nil {
			figs[i] = sec.add(skipped(bridgeNames[i], "MiB/s", failed[i].Error()))
			continue
		}
		var parts []string
		for _, k := range cpuLabels {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, median(cpu[i][k])))
		}
		figs[i] = sec.add(measured(bridgeNames[i], "MiB/s", rates[i], true)).withNote("CPU s/GiB, medians: %s", strings.Join(parts, ", "))
	}
	for _, p := range [][2]int{{0, 2}, {1, 2}, {3, 5}, {4, 5}} {
		figs[p[0]].against(figs[p[1]]).target(">= 0.9x", ratioAtLeast(0.9))
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuLabels are the processes of bridgeProcs.sample, in order.
var cpuLabels = []string{"relayd", "bridge", "docker CLI", "dockerd", "containerd", "fuse-overlayfs", "shim+cat", "client", "all"}

// bridgeDaemons are the processes on the path found by name: docker's
// daemons and, where the storage driver is fuse-overlayfs, the process
// that writes the container's layer.
var bridgeDaemons = []string{"dockerd", "containerd", "fuse-overlayfs"}

// bridgeProcs are the host pids on the bridge's path.
type bridgeProcs struct {
	relayd, shim int
	daemons      map[string][]int // by name: bridgeDaemons
}

// bridgePids finds relayd's host pid (docker inspect), its parent (the
// container's shim) and bridgeDaemons by name.
func bridgePids(container string) (*bridgeProcs, error) {
	out, err := dockerCLI(10*time.Second, "inspect", "-f", "{{.State.Pid}}", container)
	if err != nil {
		return nil, err
	}
	p := &bridgeProcs{daemons: map[string][]int{}}
	if p.relayd, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
		return nil, fmt.Errorf("docker inspect: pid %q", out)
	}
	if st, err := procStat(p.relayd); err == nil {
		p.shim = st.ppid
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procStat(pid); err == nil && slices.Contains(bridgeDaemons, st.comm) {
			p.daemons[st.comm] = append(p.daemons[st.comm], pid)
		}
	}
	return p, nil
}

// sample is each label's CPU seconds so far: the bridge is found afresh
// (relayd bridge, a child of the shim), the docker CLI as this process's
// children, live and reaped.
func (p *bridgeProcs) sample() map[string]float64 {
	m := map[string]float64{}
	tick := func(pid int, children bool) float64 {
		st, err := procStat(pid)
		if err != nil {
			return 0
		}
		if children {
			return st.self + st.children
		}
		return st.self
	}
	m["relayd"] = tick(p.relayd, false)
	m["shim+cat"] = tick(p.shim, true)
	for _, k := range bridgeDaemons {
		for _, pid := range p.daemons[k] {
			m[k] += tick(pid, false)
		}
	}
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procStat(pid)
		if err != nil {
			continue
		}
		switch {
		case st.ppid == p.shim && st.comm == "relayd" && pid != p.relayd:
			m["bridge"] += st.self
		case st.ppid == self && st.comm == "docker":
			m["docker CLI"] += st.self
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		m["docker CLI"] += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	m["client"] = selfCPUTime().Seconds()
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			if i >= 7 { // steal, guest (counted in user)
				break
			}
			x, _ := strconv.ParseFloat(v, 64)
			m["all"] += x / 100
		}
	}
	return m
}

type procInfo struct {
	comm           string
	ppid           int
	self, children float64 // seconds
}

// procStat reads /proc/PID/stat (clock ticks of 1/100 s).
func procStat(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	s := string(b)
	l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if l < 0 || r < l {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[r+1:]) // f[0] is the state, field 3
	if len(f) < 15 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	num := func(i int) float64 { x, _ := strconv.ParseFloat(f[i], 64); return x / 100 }
	ppid, _ := strconv.Atoi(f[1])
	return procInfo{comm: s[l+1 : r], ppid: ppid, self: num(11) + num(12), children: num(13) + num(14)}, nil
}

// recordPerf runs op under `perf record -a -g -o path`, the recorder
// started before and stopped (SIGINT, its pid) after.
func recordPerf(path string, op func() error) {
	cmd := exec.Command("perf", "record", "-a", "-g", "-o", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		logf("bridge: perf: %v", err)
		_ = op()
		return
	}
	time.Sleep(500 * time.Millisecond)
	err := op()
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	logf("bridge: perf record %s: %v", path, err)
}
