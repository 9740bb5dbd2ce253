package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayd/relayd/client"
	"golang.org/x/sys/unix"
)

// transfer is the opt-in section of bulk bytes into and out of a task
// container (issue 19): 64 MiB over an execution's stdin and a 1 GiB file
// put and get, through relayd bridge over `docker exec -i` (the Go client's
// DialCommand), against docker cp (in and out) and docker exec -i with cat
// of the same bytes, in the same run and the same container (relayd as
// PID 1, deploy/docker/run.sh). relayd's memory is its peak RSS (VmHWM of
// PID 1), reset before each of its transfers when the kernel lets
// /proc/1/clear_refs do so.
func (b *bench) transfer() {
	sec := b.report.section("transfer", "Transfer: stdin and files through relayd bridge vs docker cp and docker exec -i cat")
	stdinBytes, fileBytes := int64(64<<20), int64(1<<30)
	if b.cfg.quick {
		stdinBytes, fileBytes = 8<<20, 64<<20
	}
	b.transferLoopback(sec, fileBytes)
	names := []string{"stdin: relayd execute with Stdin", "stdin: docker exec -i cat", "put: relayd PutFile", "put: docker cp in",
		"put: docker exec -i cat", "get: relayd GetFile", "get: docker cp out", "get: docker exec cat", "relayd peak RSS",
		"tree put: relayd UploadDir", "tree put: docker cp in", "tree get: relayd DownloadDir", "tree get: docker cp out",
		"put: relayd PutFile, digest none", "get: relayd GetFile, digest none"}
	skip := func(why string) {
		logf("transfer section skipped: %s", why)
		for _, n := range names {
			sec.add(skipped(n, "MiB/s", why))
		}
	}
	env, why := b.dockerSetup()
	if why != "" {
		skip(why)
		return
	}
	defer env.remove()
	t, err := newTransferEnv(env, stdinBytes, fileBytes)
	if err != nil {
		skip(err.Error())
		return
	}
	defer t.close()
	sec.note("one container from %s with relayd added by deploy/docker/Dockerfile, started by deploy/docker/run.sh (relayd as PID 1); relayd reached by client.DialCommand of `docker exec -i CONTAINER relayd bridge` (%s)", env.taskImage, env.version)
	sec.note("the same pseudo-random bytes each way: %s over stdin, a %s file from and to the host's disk, into the container's /tmp (its writable layer); each transfer once; the rate is bytes over wall time, sha256 checked after each", mib(stdinBytes), mib(fileBytes))
	sec.note("relayd's peak RSS is VmHWM of /proc/1/status in the container, reset before each relayd transfer (clear_refs 5): %s", t.resetWhy)

	rss := map[string]float64{}
	ctx := context.Background()
	// step times op alone, then checks what arrived against sum; for a
	// relayd step it resets and reads relayd's peak RSS around op.
	step := func(name string, n int64, op, check func() error) *figure {
		relayd := strings.Contains(name, "relayd")
		if relayd {
			t.reset()
		}
		began := time.Now()
		err := op()
		took := time.Since(began)
		if err == nil {
			err = check()
		}
		if err != nil {
			logf("transfer: %s: %v", name, err)
			return sec.add(skipped(name, "MiB/s", err.Error()))
		}
		r := float64(n) / (1 << 20) / took.Seconds()
		logf("transfer: %s: %s in %s, %.0f MiB/s", name, mib(n), took.Round(time.Millisecond), r)
		if relayd {
			if hwm, err := t.peakRSS(); err == nil {
				rss[name] = hwm
			} else {
				logf("transfer: relayd's VmHWM: %v", err)
			}
		}
		return sec.add(measured(name, "MiB/s", []float64{r}, true))
	}

	// stdin: the first bytes of the file into cat, which writes them to a file.
	fr := step(names[0], stdinBytes, func() error {
		x, err := t.conn.Execute(ctx, client.Request{Command: "/bin/sh", Args: []string{"-c", "cat > /tmp/stdin-relayd.bin"},
			Timeout: 10 * time.Minute, Stdin: io.LimitReader(t.source(), stdinBytes)})
		if err == nil && x.ExitCode != 0 {
			err = fmt.Errorf("cat exited %d (%s)", x.ExitCode, x.Termination)
		}
		return err
	}, func() error { return t.checkRemote("/tmp/stdin-relayd.bin", t.stdinSum, true) })
	fd := step(names[1], stdinBytes, func() error {
		return t.dockerIn(io.LimitReader(t.source(), stdinBytes), "/tmp/stdin-docker.bin")
	}, func() error { return t.checkRemote("/tmp/stdin-docker.bin", t.stdinSum, true) })
	fr.against(fd)

	// put: the host file into the container, three ways.
	fromHost := t.fromHost
	pr := step(names[2], fileBytes, fromHost(func(r io.Reader) error {
		_, err := t.conn.PutFile(ctx, "/tmp/put-relayd.bin", r, client.PutOptions{})
		return err
	}), func() error { return t.checkRemote("/tmp/put-relayd.bin", t.fileSum, false) })
	pc := step(names[3], fileBytes, func() error {
		_, err := dockerCLI(10*time.Minute, "cp", t.hostFile, env.name+":/tmp/put-cp.bin")
		return err
	}, func() error { return t.checkRemote("/tmp/put-cp.bin", t.fileSum, pr.Skipped == "") })
	pe := step(names[4], fileBytes, fromHost(func(r io.Reader) error { return t.dockerIn(r, "/tmp/put-cat.bin") }),
		func() error { return t.checkRemote("/tmp/put-cat.bin", t.fileSum, true) })
	pn := step(names[13], fileBytes, fromHost(func(r io.Reader) error {
		_, err := t.conn.PutFile(ctx, "/tmp/put-relayd-none.bin", r, client.PutOptions{Digest: client.DigestNone})
		return err
	}), func() error { return t.checkRemote("/tmp/put-relayd-none.bin", t.fileSum, false) })
	pr.against(pe).target(">= 0.9x", ratioAtLeast(0.9))
	pn.against(pe).target(">= 0.9x", ratioAtLeast(0.9))
	pc.against(pe)

	// get: the file relayd stored (docker cp's if that failed) back to the host.
	src := "/tmp/put-relayd.bin"
	if pr.Skipped != "" {
		src = "/tmp/put-cp.bin"
	}
	out := t.gotFile()
	toHost := t.toHost
	check := func() error { return t.checkLocal(out) }
	gr := step(names[5], fileBytes, toHost(func(w io.Writer) error {
		_, err := t.conn.GetFile(ctx, src, "", w)
		return err
	}), check)
	gc := step(names[6], fileBytes, func() error {
		_, err := dockerCLI(10*time.Minute, "cp", env.name+":"+src, out)
		return err
	}, check)
	ge := step(names[7], fileBytes, toHost(func(w io.Writer) error {
		cmd := exec.Command("docker", "exec", env.name, "cat", src)
		cmd.Stdout = w
		return cmd.Run()
	}), check)
	gn := step(names[14], fileBytes, toHost(func(w io.Writer) error {
		_, err := t.conn.GetFileWith(ctx, src, w, client.GetOptions{Digest: client.DigestNone})
		return err
	}), check)
	gr.against(ge).target(">= 0.9x", ratioAtLeast(0.9))
	gn.against(ge).target(">= 0.9x", ratioAtLeast(0.9))
	gc.against(ge)
	t.trees(sec, names[9:13])

	peak := 0.0
	var parts []string
	for _, n := range []string{names[0], names[2], names[5]} {
		if v, ok := rss[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB", strings.SplitN(n, ":", 2)[0], v))
			peak = max(peak, v)
		}
	}
	if len(parts) == 0 {
		sec.add(skipped(names[8], "MiB", "no VmHWM read from the container"))
		return
	}
	sec.add(measured(names[8], "MiB", []float64{peak}, false)).
		target("< 64 MiB", medianBelow(64)).withNote("%s", strings.Join(parts, ", "))
}

// loopback is the transfer section's loopback rows alone (--only
// loopback): no container.
func (b *bench) loopback() {
	sec := b.report.section("loopback", "Transfer on loopback: put and get against a plain socket copy")
	n := int64(1 << 30)
	if b.cfg.quick {
		n = 64 << 20
	}
	b.transferLoopback(sec, n)
}

// loopbackNames are the transfer section's loopback rows: the rates
// (loopbackRates of them, the socket copy's first), the first byte, the
// peak RSS, then CPU per GiB.
var loopbackNames = []string{"loopback: plain socket copy", "loopback put: relayd PutFile", "loopback get: relayd GetFile",
	"loopback put: relayd PutFile, digest none", "loopback get: relayd GetFile, digest none", "loopback: plain socket copy, synced",
	"loopback get: first byte of a body", "loopback: relayd peak RSS",
	"loopback put: relayd CPU", "loopback put: client CPU", "loopback get: relayd CPU", "loopback get: client CPU",
	"loopback put, digest none: relayd CPU", "loopback put, digest none: client CPU",
	"loopback get, digest none: relayd CPU", "loopback get, digest none: client CPU",
	"loopback: plain socket copy CPU", "loopback: sha256 CPU"}

// The rows of loopbackNames by what they hold.
const (
	loopbackRates     = 6 // socket copy, put, get, put and get without a digest, the socket copy synced
	loopbackFirstByte = 6
	loopbackRSS       = 7
	loopbackCPU       = 8 // relayd's and the client's of each of put, get and the two without a digest, then the socket copy's
)

// loopbackRounds is how many times each loopback transfer runs, in turns:
// the figures are the medians (a busy machine moves single runs by 2x).
const loopbackRounds = 3

// transferLoopback measures a put and a get of n pseudo-random bytes over
// loopback TCP to a relayd on this machine (raw bodies, protocol 4.6),
// each as a ratio of a plain socket copy of the same bytes, file to
// socket to file, in the same run, and relayd's peak RSS after both. It
// also says where the time goes: the CPU seconds per GiB that relayd and
// this process (the client, or both ends of the socket copy) spent.
func (b *bench) transferLoopback(sec *section, n int64) {
	unitOf := func(i int) string {
		switch {
		case i < loopbackRates:
			return "MiB/s"
		case i == loopbackFirstByte:
			return "s"
		case i == loopbackRSS:
			return "MiB"
		}
		return "s/GiB"
	}
	skip := func(why string) {
		logf("transfer: loopback rows skipped: %s", why)
		for i, name := range loopbackNames {
			sec.add(skipped(name, unitOf(i), why))
		}
	}
	if b.cfg.relayd == "" {
		skip("no relayd binary")
		return
	}
	dir, err := os.MkdirTemp("", "relaybench-loopback-")
	if err != nil {
		skip(err.Error())
		return
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "source.bin")
	sum, err := writeRandom(src, n)
	if err != nil {
		skip(err.Error())
		return
	}
	d, err := startRelayd(b.cfg.relayd, startOpts{scope: "process-group", args: []string{"--max-file-bytes", strconv.FormatInt(n, 10)}})
	if err != nil {
		skip("starting relayd: " + err.Error())
		return
	}
	defer d.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.Addr, d.Token)
	if err != nil {
		skip("dialing relayd: " + err.Error())
		return
	}
	defer c.Close()
	rounds := loopbackRounds
	if b.cfg.quick {
		rounds = 1
	}
	sec.note("loopback rows: a %s file of pseudo-random bytes on this machine's disk, put to and got from a relayd on 127.0.0.1 (its workspace on the same disk) by the Go client (raw bodies when relayd lists \"body\"), with sha256 and with \"digest\":\"none\", against a plain copy of the same file through a loopback TCP socket into a file (sendfile in, splice out; the puts against the same copy with the file fsynced before it is closed, as relayd makes a put durable), in the same run, %d rounds in turns (medians), each transfer begun with the file system synced (syncfs, untimed); the first byte is the time from a body get's request to the client's first write of its bytes (page cache warm); relayd's peak RSS is its VmHWM after all; CPU is user+system seconds per GiB, relayd's from /proc, the client's (and the socket copy's, both ends) this process's getrusage", mib(n), rounds)
	gib := float64(n) / (1 << 30)
	// timed times op alone, then checks what arrived (check may be nil);
	// it returns the rate and the CPU seconds per GiB of relayd and of
	// this process.
	timed := func(name string, op, check func() error) (rate, relaydCPU, selfCPU float64, err error) {
		r0, rerr := cpuTime(d.pid)
		s0 := selfCPUTime()
		began := time.Now()
		err = op()
		took := time.Since(began)
		r1, rerr1 := cpuTime(d.pid)
		s1 := selfCPUTime()
		if err == nil && check != nil {
			err = check()
		}
		if err != nil {
			logf("transfer: %s: %v", name, err)
			return 0, 0, 0, err
		}
		rate = float64(n) / (1 << 20) / took.Seconds()
		relaydCPU, selfCPU = -1, (s1-s0).Seconds()/gib
		if rerr == nil && rerr1 == nil {
			relaydCPU = (r1 - r0).Seconds() / gib
		}
		logf("transfer: %s: %s in %s, %.0f MiB/s; CPU per GiB: relayd %.2fs, this process %.2fs", name, mib(n), took.Round(time.Millisecond), rate, relaydCPU, selfCPU)
		return rate, relaydCPU, selfCPU, nil
	}
	got := filepath.Join(dir, "got.bin")
	var firstBytes []float64
	put := func(digest string) func() error {
		return func() error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			// The last round's file goes first, as the socket copy's
			// os.Create truncates its own: each writes into memory just
			// freed (a VM's never-touched pages cost several times more).
			if err := os.Remove(filepath.Join(d.Workspace, "put.bin")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			t, err := c.PutFile(ctx, "put.bin", f, client.PutOptions{Digest: digest})
			if err == nil && digest == "" && t.Sha256 != sum {
				err = fmt.Errorf("stored sha256 %s; want %s", t.Sha256, sum)
			}
			return err
		}
	}
	get := func(digest string) func() error {
		return func() error {
			o, err := os.Create(got)
			if err != nil {
				return err
			}
			var w io.Writer = o
			var fb *firstByte
			if digest == "" {
				fb = &firstByte{w: o, began: time.Now()}
				w = fb
			}
			t, err := c.GetFileWith(ctx, "put.bin", w, client.GetOptions{Digest: digest})
			if cerr := o.Close(); err == nil {
				err = cerr
			}
			if err == nil && digest == "" && t.Sha256 != sum {
				err = fmt.Errorf("got sha256 %s; want %s", t.Sha256, sum)
			}
			if err == nil && fb != nil {
				firstBytes = append(firstBytes, fb.after.Seconds())
			}
			return err
		}
	}
	gotSum := func() error { return checkSum(got, sum) }
	putSum := func() error { return checkSum(filepath.Join(d.Workspace, "put.bin"), sum) }
	ops := []func() error{func() error { return socketCopy(src, got, false) }, put(""), get(""), put(client.DigestNone), get(client.DigestNone),
		func() error { return socketCopy(src, got, true) }}
	checks := []func() error{gotSum, nil, gotSum, putSum, gotSum, gotSum}
	rates := make([][]float64, loopbackRates)
	cpu := map[int][]float64{} // by row of loopbackNames
	failed := make([]error, loopbackRates)
	for range rounds {
		for i, op := range ops {
			if failed[i] != nil {
				continue
			}
			// Each starts with none of the last one's bytes still to
			// reach the disk: a synced copy before a row would else
			// speed that row up, and a put's writeback slow the next.
			settleDisk(dir)
			r, rc, sc, err := timed(loopbackNames[i], op, checks[i])
			if err != nil {
				failed[i] = err
				continue
			}
			rates[i] = append(rates[i], r)
			if i == 0 {
				cpu[loopbackCPU+8] = append(cpu[loopbackCPU+8], sc)
				continue
			}
			if i == 5 {
				continue // the synced copy: its CPU is the copy's and a wait
			}
			row := loopbackCPU + 2*(i-1)
			cpu[row], cpu[row+1] = append(cpu[row], rc), append(cpu[row+1], sc)
		}
	}
	figs := make([]*figure, loopbackRates)
	for i := range figs {
		if failed[i] != nil {
			figs[i] = sec.add(skipped(loopbackNames[i], "MiB/s", failed[i].Error()))
			continue
		}
		figs[i] = sec.add(measured(loopbackNames[i], "MiB/s", rates[i], true))
	}
	// A put is durable before relayd answers (fsync, rename, fsync of the
	// directory: docs/protocol.md, "Files"); a get's client writes its
	// file and does not sync it. Each is held to the copy that does what
	// it does (issue 46: "a plain socket copy onto disk (synced)").
	figs[1].against(figs[5]).target(">= 0.7x", ratioAtLeast(0.7))
	figs[2].against(figs[0]).target(">= 0.7x", ratioAtLeast(0.7))
	figs[3].against(figs[5]).target(">= 0.85x", ratioAtLeast(0.85))
	figs[4].against(figs[0]).target(">= 0.85x", ratioAtLeast(0.85))
	figs[5].against(figs[0])
	if len(firstBytes) == 0 {
		sec.add(skipped(loopbackNames[loopbackFirstByte], "s", "no body get"))
	} else {
		sec.add(measured(loopbackNames[loopbackFirstByte], "s", firstBytes, false)).target("< 0.1 s", medianBelow(0.1)).
			withNote("of a %s get with sha256: from the request to the client's first write", mib(n))
	}
	hwm, err := d.status("VmHWM")
	if err != nil {
		sec.add(skipped(loopbackNames[loopbackRSS], "MiB", err.Error()))
	} else {
		sec.add(measured(loopbackNames[loopbackRSS], "MiB", []float64{hwm / 1024}, false)).target("< 64 MiB", medianBelow(64))
	}
	for i := loopbackCPU; i < len(loopbackNames)-1; i++ {
		xs := cpu[i]
		if len(xs) == 0 || slices.Contains(xs, -1) {
			sec.add(skipped(loopbackNames[i], "s/GiB", "not measured"))
			continue
		}
		sec.add(measured(loopbackNames[i], "s/GiB", xs, false))
	}
	// What the contract's sha256 of every byte costs here: a put and a
	// get hash each byte twice, once on each side, in the pass that
	// moves it; "digest":"none" hashes none.
	sec.add(measured(loopbackNames[len(loopbackNames)-1], "s/GiB", []float64{sha256Cost()}, false)).
		withNote("one pass over 256 MiB in memory, one core; a put or a get with sha256 pays it once on each side")
}

// settleDisk waits until what was written to dir's file system is on
// its disk (syncfs(2)), untimed.
func settleDisk(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = unix.Syncfs(int(f.Fd()))
		f.Close()
	}
}

// firstByte passes writes to w and keeps when the first came, after began.
type firstByte struct {
	w     io.Writer
	began time.Time
	after time.Duration
}

func (f *firstByte) Write(p []byte) (int, error) {
	if f.after == 0 {
		f.after = time.Since(f.began)
	}
	return f.w.Write(p)
}

// sha256Cost is the CPU seconds per GiB of crypto/sha256 on this machine.
func sha256Cost() float64 {
	buf := make([]byte, 1<<20)
	h := sha256.New()
	began := time.Now()
	for range 256 {
		h.Write(buf)
	}
	return time.Since(began).Seconds() * 4
}

// selfCPUTime is the user and system CPU time of this process so far.
func selfCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeRandom writes n pseudo-random bytes to path and returns their sha256.
func writeRandom(path string, n int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(rand.NewChaCha8([32]byte{30}), n))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// checkSum checks the sha256 of the file path.
func checkSum(path, sum string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("%s: sha256 %s; want %s", path, got, sum)
	}
	return nil
}

// socketCopy copies the file src through a loopback TCP connection into
// the file dst: the baseline of the loopback rows; with synced, dst is
// then fsynced before it is closed, as relayd makes a put durable.
func socketCopy(src, dst string, synced bool) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	recv := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recv <- err
			return
		}
		defer c.Close()
		o, err := os.Create(dst)
		if err != nil {
			recv <- err
			return
		}
		_, err = io.Copy(o, c)
		if synced && err == nil {
			err = o.Sync()
		}
		if cerr := o.Close(); err == nil {
			err = cerr
		}
		recv <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	f, err := os.Open(src)
	if err != nil {
		c.Close()
		return err
	}
	_, err = io.Copy(c, f)
	f.Close()
	c.Close()
	if rerr := <-recv; err == nil {
		err = rerr
	}
	return err
}

// transferEnv is the transfer section's connection, host file and sums.
type transferEnv struct {
	env      *dockerEnv
	conn     *client.Conn
	dir      string // host side: the source file and what comes back
	hostFile string
	fileSum  string
	stdinSum string
	canReset bool   // /proc/1/clear_refs resets relayd's VmHWM
	resetWhy string // for the note
}

func newTransferEnv(env *dockerEnv, stdinBytes, fileBytes int64) (*transferEnv, error) {
	t := &transferEnv{env: env}
	var err error
	if t.dir, err = os.MkdirTemp("", "relaybench-transfer-"); err != nil {
		return nil, err
	}
	t.hostFile = filepath.Join(t.dir, "source.bin")
	f, err := os.Create(t.hostFile)
	if err != nil {
		t.close()
		return nil, err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(t.source(), fileBytes))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("writing the %s source file: %w", mib(fileBytes), err)
	}
	t.fileSum = hex.EncodeToString(h.Sum(nil))
	h.Reset()
	_, _ = io.Copy(h, io.LimitReader(t.source(), stdinBytes))
	t.stdinSum = hex.EncodeToString(h.Sum(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.conn, err = client.DialCommand(ctx, []string{"docker", "exec", "-i", env.name, "relayd", "bridge"}, env.token)
	if err != nil {
		t.close()
		return nil, fmt.Errorf("relayd bridge through docker exec -i %s: %w", env.name, err)
	}
	if _, err := dockerCLI(10*time.Second, "exec", env.name, "sh", "-c", "echo 5 > /proc/1/clear_refs"); err != nil {
		t.resetWhy = "not possible here (" + err.Error() + "): each figure is relayd's peak since it started"
	} else {
		t.canReset = true
		t.resetWhy = "the kernel allowed it"
	}
	return t, nil
}

// source yields the same pseudo-random bytes each time it is made.
// fromHost is a step that gives do the host's source file (its size
// known: PutFile sends it as one raw body).
func (t *transferEnv) fromHost(do func(r io.Reader) error) func() error {
	return func() error {
		f, err := os.Open(t.hostFile)
		if err != nil {
			return err
		}
		defer f.Close()
		return do(f)
	}
}

// gotFile is where a step's download lands on the host.
func (t *transferEnv) gotFile() string { return filepath.Join(t.dir, "got.bin") }

// toHost is a step that gives do a buffered writer onto gotFile, flushed
// and closed after it.
func (t *transferEnv) toHost(do func(w io.Writer) error) func() error {
	return func() error {
		o, err := os.Create(t.gotFile())
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(o, 1<<20)
		err = do(bw)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		if cerr := o.Close(); err == nil {
			err = cerr
		}
		return err
	}
}

func (t *transferEnv) source() io.Reader { return rand.NewChaCha8([32]byte{19}) }

func (t *transferEnv) reset() {
	if t.canReset {
		_, _ = dockerCLI(10*time.Second, "exec", t.env.name, "sh", "-c", "echo 5 > /proc/1/clear_refs")
	}
}

// peakRSS is relayd's VmHWM in MiB.
func (t *transferEnv) peakRSS() (float64, error) {
	out, err := dockerCLI(10*time.Second, "exec", t.env.name, "cat", "/proc/1/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/1/status")
}

// dockerIn copies r into path in the container through docker exec -i cat.
func (t *transferEnv) dockerIn(r io.Reader, path string) error {
	cmd := exec.Command("docker", "exec", "-i", t.env.name, "sh", "-c", "cat > "+path)
	cmd.Stdin = r
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker exec -i cat: %v: %s", err, tail(strings.TrimSpace(string(out)), 300))
	}
	return nil
}

// checkRemote checks path's sha256 in the container and removes it, or
// keeps it for a get.
func (t *transferEnv) checkRemote(path, sum string, remove bool) error {
	out, err := dockerCLI(5*time.Minute, "exec", t.env.name, "sha256sum", path)
	if err != nil {
		return err
	}
	if remove {
		defer dockerCLI(time.Minute, "exec", t.env.name, "rm", "-f", path)
	}
	if got := strings.Fields(out); len(got) == 0 || got[0] != sum {
		return fmt.Errorf("%s in the container: sha256 %q; want %s", path, out, sum)
	}
	return nil
}

// checkLocal checks the host file out's sha256 against the source's and
// removes it.
func (t *transferEnv) checkLocal(out string) error {
	defer os.Remove(out)
	f, err := os.Open(out)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != t.fileSum {
		return fmt.Errorf("%s: sha256 %s; want %s", out, got, t.fileSum)
	}
	return nil
}

func (t *transferEnv) close() {
	if t.conn != nil {
		t.conn.Close()
	}
	os.RemoveAll(t.dir)
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// treeFiles is how many small files the tree rows move: a virtualenv's
// or a repository checkout's worth (issue 30).
const treeFiles = 20000

// trees times a tree of treeFiles small files into the container and back,
// relayd's UploadDir and DownloadDir (its own tar, protocol 4.6 "Trees")
// against docker cp of the same tree, in seconds (lower is better); each
// once, the files counted after each.
func (t *transferEnv) trees(sec *section, names []string) {
	local := filepath.Join(t.dir, "tree")
	bytes, err := writeTree(local, treeFiles)
	if err != nil {
		for _, n := range names {
			sec.add(skipped(n, "s", err.Error()))
		}
		return
	}
	sec.note("tree rows: %d files of 1 to 4 KiB (%s in all) in 200 directories, the same tree each way, into the container's /tmp and back to the host; seconds, each once, the files counted after each", treeFiles, mib(bytes))
	ctx := context.Background()
	step := func(name string, op func() error, count func() (int, error)) *figure {
		began := time.Now()
		err := op()
		took := time.Since(began)
		if err == nil {
			var k int
			if k, err = count(); err == nil && k != treeFiles {
				err = fmt.Errorf("%d files arrived; want %d", k, treeFiles)
			}
		}
		if err != nil {
			logf("transfer: %s: %v", name, err)
			return sec.add(skipped(name, "s", err.Error()))
		}
		logf("transfer: %s: %d files in %s", name, treeFiles, took.Round(time.Millisecond))
		return sec.add(measured(name, "s", []float64{took.Seconds()}, false))
	}
	remote := func(dir string) func() (int, error) {
		return func() (int, error) {
			out, err := dockerCLI(time.Minute, "exec", t.env.name, "sh", "-c", "find "+dir+" -type f | wc -l")
			if err != nil {
				return 0, err
			}
			return strconv.Atoi(strings.TrimSpace(out))
		}
	}
	localCount := func(dir string) func() (int, error) {
		return func() (int, error) {
			k := 0
			err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
				if err == nil && e.Type().IsRegular() {
					k++
				}
				return err
			})
			return k, err
		}
	}
	pr := step(names[0], func() error { return t.conn.UploadDir(ctx, local, "/tmp/tree-relayd", client.DirOptions{}) }, remote("/tmp/tree-relayd"))
	pc := step(names[1], func() error {
		_, err := dockerCLI(10*time.Minute, "cp", local, t.env.name+":/tmp/tree-cp")
		return err
	}, remote("/tmp/tree-cp"))
	pr.against(pc).target("<= 1x", ratioAtMost(1))
	src := "/tmp/tree-relayd"
	if pr.Skipped != "" {
		src = "/tmp/tree-cp"
	}
	outR, outC := filepath.Join(t.dir, "tree-relayd"), filepath.Join(t.dir, "tree-cp")
	gr := step(names[2], func() error { return t.conn.DownloadDir(ctx, src, outR, client.DirOptions{}) }, localCount(outR))
	gc := step(names[3], func() error {
		_, err := dockerCLI(10*time.Minute, "cp", t.env.name+":"+src, outC)
		return err
	}, localCount(outC))
	gr.against(gc).target("<= 1x", ratioAtMost(1))
	_, _ = dockerCLI(time.Minute, "exec", t.env.name, "rm", "-rf", "/tmp/tree-relayd", "/tmp/tree-cp")
	os.RemoveAll(outR)
	os.RemoveAll(outC)
	os.RemoveAll(local)
}

// writeTree writes n files of 1 to 4 KiB of pseudo-random bytes under
// dir, in 200 directories, and returns their bytes.
func writeTree(dir string, n int) (int64, error) {
	rng := rand.NewChaCha8([32]byte{20})
	buf := make([]byte, 4<<10)
	var total int64
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", i%200))
		if i < 200 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return 0, err
			}
		}
		k := 1<<10 + int(rng.Uint64()%(3<<10))
		_, _ = rng.Read(buf[:k])
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("mod%05d.py", i)), buf[:k], 0o644); err != nil {
			return 0, err
		}
		total += int64(k)
	}
	return total, nil
}
