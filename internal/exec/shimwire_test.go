package exec

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeShim is relayd's side of a shim (a *shim reading its socket, as
// Shims.spawn makes it) whose other end the test drives. A real process
// stands for the shim, so that killing it can be seen: /bin/sh, the parent
// of the subject (a sleep) that it waits for.
type fakeShim struct {
	t       *testing.T
	sh      *shim
	peer    *net.UnixConn // the shim's end, written by the test
	frames  *frameReader  // what relayd sends the shim
	exited  <-chan Status // the stand-in's end
	pid     int           // the stand-in
	subject int           // its child
	start   uint64        // the subject's start time
}

func newFakeShim(t *testing.T) *fakeShim {
	t.Helper()
	return newFakeShimOf(t, "sleep 60 & echo $!; wait; exit 0")
}

// newFakeShimOf is newFakeShim with the stand-in's script: it starts the
// subject and prints its pid.
func newFakeShimOf(t *testing.T, script string) *fakeShim {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pid, _, exited, err := testReaper.ForkExec("/bin/sh", []string{"sh", "-c", script},
		&syscall.ProcAttr{Env: shEnv, Files: []uintptr{0, w.Fd(), 2}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeShim{t: t, pid: pid, exited: exited}
	if f.subject, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		t.Fatal(err)
	}
	pins := newPins(t) // the cleanup kills the subject and the stand-in
	pins.pin(pid)
	pins.pin(f.subject)
	f.start = pins.starts[f.subject]

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range pair {
		file := os.NewFile(uintptr(fd), "fake-shim")
		c, err := net.FileConn(file)
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	t.Cleanup(func() { conns[1].Close() })
	pool := &Shims{all: make(map[*shim]struct{}), closed: true}
	f.sh = &shim{pool: pool, pid: pid, conn: conns[0], exited: exited,
		calls: make(map[uint32]chan shimReply), hello: make(chan struct{}), gone: make(chan struct{})}
	f.peer, f.frames = conns[1], newFrameReader(conns[1])
	go f.sh.read()
	f.send(frHello, &shimHello{PID: pid})
	select {
	case <-f.sh.hello:
	case <-time.After(5 * time.Second):
		t.Fatal("no hello taken")
	}
	return f
}

func (f *fakeShim) send(kind byte, v wireMsg) {
	f.t.Helper()
	if err := writeFrame(f.peer, kind, v, nil); err != nil {
		f.t.Fatal(err)
	}
}

// killSubject kills the subject (the stand-in's child, started by this
// test) through a pidfd and waits until it has ended.
func (f *fakeShim) killSubject() {
	f.t.Helper()
	pidfd, err := unix.PidfdOpen(f.subject, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil {
		f.t.Fatal(err)
	}
	for !pidfdEnded(pidfd) {
		time.Sleep(time.Millisecond)
	}
}

// started starts a subject on the fake shim, which answers with its child
// (pid and start time as given).
func (f *fakeShim) started(pid int, start uint64) (*shimRun, shimReply) {
	f.t.Helper()
	type result struct {
		run *shimRun
		rep shimReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		run, rep, err := f.sh.startOn(shimStart{Path: "/bin/true"}, nil)
		done <- result{run, rep, err}
	}()
	kind, body, err := f.frames.read()
	if err != nil || kind != frStart {
		f.t.Fatalf("the fake shim read %q, %v; want a start", kind, err)
	}
	var req shimStart
	if err := decodeBody(body, &req); err != nil {
		f.t.Fatal(err)
	}
	f.send(frReply, &shimReply{Seq: req.Seq, PID: pid, Start: start})
	res := <-done
	if res.err != nil {
		f.t.Fatalf("startOn: %v", res.err)
	}
	return res.run, res.rep
}

// wantBroken waits for run to be lost and the stand-in killed, and checks
// that no exit was taken.
func (f *fakeShim) wantBroken(run *shimRun) {
	f.t.Helper()
	select {
	case <-run.lost:
	case <-time.After(5 * time.Second):
		f.t.Fatal("the execution was not lost: the shim's frame was taken")
	}
	select {
	case st, ok := <-run.exited:
		if ok {
			f.t.Fatalf("an exit was taken: %+v", st)
		}
	default:
	}
	if err := run.brokenErr(); err == nil {
		f.t.Fatal("the run is not marked broken: it would not end failed")
	} else {
		f.t.Logf("broken: %v", err)
	}
	select {
	case st := <-f.exited:
		if st.Exited || st.Signal != syscall.SIGKILL {
			f.t.Fatalf("the shim ended with %+v; want SIGKILL", st)
		}
	case <-time.After(5 * time.Second):
		f.t.Fatal("the shim was not killed")
	}
	if f.sh.alive() {
		f.t.Fatal("the shim is still alive to the pool")
	}
}

// A shim that breaks the wire's rules is killed, and the execution it
// serves is lost and broken (the session answers it failed), its exit
// never taken: a forged exit for another pid, or for the subject while it
// runs (relayd's own pidfd of it says so), a kind only relayd sends, an
// unknown kind, a body that does not decode, a torn length, a reply to no
// request, a second hello, an empty before the exit; and a start's reply
// naming a process that is not the shim's child.
func TestShimBreaksTheWire(t *testing.T) {
	raw := func(b ...byte) func(f *fakeShim) {
		return func(f *fakeShim) {
			if _, err := f.peer.Write(b); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	frame := func(kind byte, v wireMsg) func(f *fakeShim) {
		return func(f *fakeShim) { f.send(kind, v) }
	}
	for _, tc := range []struct {
		name string
		send func(f *fakeShim)
	}{
		{"exit-of-another-pid", func(f *fakeShim) { f.send(frExited, &shimExit{PID: f.pid, Exited: true, Empty: true}) }},
		{"exit-while-it-runs", func(f *fakeShim) { f.send(frExited, &shimExit{PID: f.subject, Exited: true, Empty: true}) }},
		{"start", frame(frStart, &shimStart{})},
		{"members", frame(frMembers, &shimReq{})},
		{"signal", frame(frSignal, &shimReq{Sig: 9})},
		{"sync", frame(frSync, &shimReq{})},
		{"leave", frame(frLeave, shimNone{})},
		{"unknown-kind", raw(1, 0, 0, 0, 'z')},
		{"exit-that-does-not-decode", raw(3, 0, 0, 0, frExited, 0xff, 0xff)},
		{"empty-that-does-not-decode", raw(2, 0, 0, 0, frEmpty, 0)},
		{"length-zero", raw(0, 0, 0, 0, frEmpty)},
		{"length-too-long", raw(0xff, 0xff, 0xff, 0xff, frEmpty)},
		{"reply-to-no-request", frame(frReply, &shimReply{Seq: 99})},
		{"second-hello", func(f *fakeShim) { f.send(frHello, &shimHello{PID: f.pid}) }},
		{"empty-before-the-exit", frame(frEmpty, &Usage{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeShim(t)
			run, _ := f.started(f.subject, f.start)
			tc.send(f)
			f.wantBroken(run)
		})
	}
	for _, proc := range []bool{false, true} {
		name := "start-names-another-process"
		if proc {
			name += "-read-in-proc"
		}
		t.Run(name, func(t *testing.T) {
			if proc {
				withoutPidfdInfo(t)
			}
			f := newFakeShim(t)
			self, _ := statOf(os.Getpid()) // the test process: not the shim's child
			run, rep := f.started(os.Getpid(), self.start)
			if rep.PID != 0 {
				t.Errorf("the start's pid as taken: %d; want 0 (none)", rep.PID)
			}
			f.wantBroken(run)
		})
	}
}

// withoutPidfdInfo makes bindLocked read /proc, as on a kernel before
// PIDFD_GET_INFO (6.13), for the rest of the test.
func withoutPidfdInfo(t *testing.T) {
	was := noPidfdInfo.Load()
	noPidfdInfo.Store(true)
	t.Cleanup(func() { noPidfdInfo.Store(was) })
}

// pidfdParent of a process reaped since its pidfd was opened is 0, and
// that is no reason to stop asking the kernel (only a refusal is).
func TestPidfdParentOfAReapedProcess(t *testing.T) {
	pid, _, exited, err := testReaper.ForkExec("/bin/sh", []string{"sh", "-c", "exit 3"},
		&syscall.ProcAttr{Env: shEnv, Files: devNullFiles(t)})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		<-exited
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	<-exited // reaped by the test's reaper
	was := noPidfdInfo.Load()
	if got := pidfdParent(fd); got != 0 {
		t.Fatalf("pidfdParent of a reaped process: %d; want 0", got)
	}
	if noPidfdInfo.Load() != was {
		t.Fatal("a reaped process turned PIDFD_GET_INFO off")
	}
}

// Where the kernel has PIDFD_GET_INFO, a start's reply is checked through
// relayd's pidfd of the subject alone: its parent is the shim, and /proc
// is not read (an open, a read and a close fewer per execute).
func TestShimStartCheckedThroughPidfd(t *testing.T) {
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
		err = unix.IoctlPidfdInfo(fd, &info)
		unix.Close(fd)
		if err != nil {
			t.Skipf("this kernel has no PIDFD_GET_INFO: %v", err)
		}
	}
	f := newFakeShim(t)
	reads := 0
	was := subjectStat
	subjectStat = func(pid int, buf []byte) (procEntry, error) {
		reads++
		return was(pid, buf)
	}
	t.Cleanup(func() { subjectStat = was })
	run, rep := f.started(f.subject, f.start)
	if rep.PID != f.subject || rep.Start != f.start || run.brokenErr() != nil {
		t.Fatalf("start: pid %d start %d, broken %v; want pid %d start %d taken",
			rep.PID, rep.Start, run.brokenErr(), f.subject, f.start)
	}
	if reads != 0 {
		t.Errorf("/proc was read %d times for the start; want 0", reads)
	}
	f.sh.mu.Lock()
	got := pidfdParent(run.pidfd)
	f.sh.mu.Unlock()
	if got != f.pid {
		t.Errorf("pidfdParent of the subject: %d; want the shim, %d", got, f.pid)
	}
}

// /proc reads a process's state before its parent, so a subject reaped
// between the two reads shows a live state and parent 0 (seen under load
// as "a start's pid 17799 is not the shim's child started at 232678
// (parent 0, start 232678)", the execution answered failed). Such a start
// is taken when relayd's pidfd says the subject has ended, and its exit
// after it; the same entry for a subject that runs is still refused.
func TestShimStartReapedWhileRead(t *testing.T) {
	racy := func(f *fakeShim) {
		withoutPidfdInfo(t)
		was := subjectStat
		subjectStat = func(pid int, buf []byte) (procEntry, error) {
			if pid != f.subject {
				return was(pid, buf)
			}
			return procEntry{pid: pid, ppid: 0, start: f.start, state: 'R', threads: 1}, nil
		}
		t.Cleanup(func() { subjectStat = was })
	}
	t.Run("ended", func(t *testing.T) {
		// The stand-in does not wait: the subject it started stays a zombie.
		f := newFakeShimOf(t, "sleep 60 & echo $!; exec sleep 60")
		f.killSubject()
		racy(f)
		run, rep := f.started(f.subject, f.start)
		if rep.PID != f.subject || run.brokenErr() != nil {
			t.Fatalf("start: pid %d, broken %v; want pid %d taken", rep.PID, run.brokenErr(), f.subject)
		}
		f.send(frExited, &shimExit{PID: f.subject, Signal: int(syscall.SIGKILL)})
		select {
		case st := <-run.exited:
			if st.Signal != syscall.SIGKILL {
				t.Fatalf("exit %+v; want SIGKILL", st)
			}
		case <-run.lost:
			t.Fatalf("the run was lost: %v", run.brokenErr())
		case <-time.After(5 * time.Second):
			t.Fatal("no exit taken")
		}
	})
	t.Run("runs", func(t *testing.T) {
		f := newFakeShim(t)
		racy(f)
		run, _ := f.started(f.subject, f.start)
		f.wantBroken(run)
	})
}

// The same fake shim, honest: the subject's exit, sent once the subject
// has ended, is taken, and nothing is broken.
func TestShimHonestExitTaken(t *testing.T) {
	f := newFakeShim(t)
	run, rep := f.started(f.subject, f.start)
	if rep.PID != f.subject {
		t.Fatalf("start: pid %d; want %d", rep.PID, f.subject)
	}
	f.killSubject()
	f.send(frExited, &shimExit{PID: f.subject, Signal: int(syscall.SIGKILL)})
	select {
	case st := <-run.exited:
		if st.Signal != syscall.SIGKILL {
			t.Fatalf("exit %+v; want SIGKILL", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the exit was not taken (broken: %v)", run.brokenErr())
	}
	if err := run.brokenErr(); err != nil {
		t.Fatalf("broken: %v", err)
	}
	f.send(frEmpty, &Usage{})
	waitUntilTrue(t, func() bool { f.sh.mu.Lock(); defer f.sh.mu.Unlock(); return run.empty })
	if err := run.brokenErr(); err != nil {
		t.Fatalf("broken after the empty: %v", err)
	}
}

func waitUntilTrue(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// fuzzNoPid is the pid of the shim in FuzzShimWire: above any pid_max,
// so that no start's reply names a child of it, and nothing is signalled.
const fuzzNoPid = 1 << 30

// FuzzShimWire feeds relayd's side of a shim (frameReader and dispatch,
// as shim.read runs them) whatever a shim could write: a hello, a start
// pending as sequence 1, then the bytes. It must end (the bytes end),
// never panic, and take an exit only for the pid the start's reply named,
// and only when no process has that pid (the shim's pid is no process's,
// so a reply naming a live process is never taken). Once a frame broke
// the rules, nothing after it is taken.
func FuzzShimWire(f *testing.F) {
	frames := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	enc := func(kind byte, v wireMsg) []byte {
		b, err := encodeFrame(kind, v)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	const gone = fuzzNoPid + 1 // no process
	hello := enc(frHello, &shimHello{PID: fuzzNoPid})
	f.Add(hello)
	f.Add(frames(hello, enc(frReply, &shimReply{Seq: 1, PID: gone, Start: 5}), enc(frExited, &shimExit{PID: gone, Exited: true, Empty: true})))
	f.Add(frames(hello, enc(frReply, &shimReply{Seq: 1, PID: gone, Start: 5}), enc(frExited, &shimExit{PID: gone, Exited: true}), enc(frEmpty, &Usage{})))
	f.Add(frames(hello, enc(frReply, &shimReply{Seq: 1, PID: 1, Start: 1}), enc(frExited, &shimExit{PID: 1, Exited: true, Empty: true})))
	f.Add(frames(hello, enc(frExited, &shimExit{PID: gone, Exited: true})))
	f.Add(frames(hello, enc(frReply, &shimReply{Seq: 1, Err: "no", Stage: "exec", Errno: 2})))
	f.Add(frames(hello, enc(frReply, &shimReply{Seq: 1, PID: gone, Members: [][2]uint64{{2, 3}}}), enc(frReply, &shimReply{Seq: 2})))
	f.Add(frames(hello, enc(frSignal, &shimReq{Seq: 1, Sig: 9})))
	f.Add(frames(hello, []byte{0xff, 0xff, 0xff, 0x3f, frReply}))
	f.Add([]byte{})

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	unix.Close(pair[1])
	file := os.NewFile(uintptr(pair[0]), "fuzz")
	c, err := net.FileConn(file) // what kill, retire and lost close: closed for good after the first
	file.Close()
	if err != nil {
		f.Fatal(err)
	}
	conn := c.(*net.UnixConn)
	reaped := make(chan Status)
	close(reaped) // the shim counts as reaped: kill signals nothing

	f.Fuzz(func(t *testing.T, data []byte) {
		pool := &Shims{all: make(map[*shim]struct{}), closed: true}
		sh := &shim{pool: pool, pid: fuzzNoPid, conn: conn, exited: reaped,
			calls: make(map[uint32]chan shimReply), hello: make(chan struct{}), gone: make(chan struct{})}
		run := &shimRun{sh: sh, exited: make(chan Status, 1), lost: make(chan struct{}), pidfd: -1, startSeq: 1}
		started := make(chan shimReply, 1)
		sh.seq, sh.calls[1], sh.cur = 1, started, run
		sh.serve(&frameReader{br: bufio.NewReader(bytes.NewReader(data))})

		sh.mu.Lock()
		defer sh.mu.Unlock()
		if !sh.dead {
			t.Fatal("the shim is not lost once its bytes ended")
		}
		if run.pidfd >= 0 {
			t.Fatal("relayd's pidfd of the subject is left open")
		}
		if !run.ended {
			return
		}
		if run.pid <= 0 {
			t.Fatal("an exit taken with no subject")
		}
		if fd, err := unix.PidfdOpen(run.pid, 0); err == nil {
			unix.Close(fd)
			t.Fatalf("an exit taken for pid %d, a live process's", run.pid)
		}
	})
}

// A shim that listed another execution's subject among its members, then
// broke the wire, cannot make relayd's fallback for a lost shim signal
// that process: only what descends from the lost shim (its subject, now
// the test process's) is signalled.
func TestLostShimListsAnotherExecution(t *testing.T) {
	scope, err := testPG.NewScope("")
	if err != nil {
		t.Fatal(err)
	}
	other, err := Start(testShims, scope, Spec{Path: "/bin/sleep", Argv: []string{"sleep", "60"}, Env: shEnv, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	newPins(t).pinChild(other.PID, other.Start)
	defer scope.Close()
	f := newFakeShim(t)
	f.sh.pool.all[other.run.sh] = struct{}{} // the other execution's shim is relayd's too
	run, _ := f.started(f.subject, f.start)
	listed := make(chan error, 1)
	go func() { _, err := run.members(); listed <- err }()
	kind, body, err := f.frames.read()
	if err != nil || kind != frMembers {
		t.Fatalf("the fake shim read %q, %v; want a members request", kind, err)
	}
	var req shimReq
	if err := decodeBody(body, &req); err != nil {
		t.Fatal(err)
	}
	f.send(frReply, &shimReply{Seq: req.Seq, Members: [][2]uint64{{uint64(other.PID), other.Start}, {uint64(f.subject), f.start}}})
	if err := <-listed; err != nil {
		t.Fatal(err)
	}
	f.send('z', shimNone{})
	f.wantBroken(run)
	if err := run.signal(syscall.SIGKILL); !errors.Is(err, ErrShimLost) {
		t.Fatalf("signal: %v; want ErrShimLost (the fallback)", err)
	}
	pidfd, err := unix.PidfdOpen(f.subject, 0)
	if err == nil {
		defer unix.Close(pidfd)
		waitUntilTrue(t, func() bool { return pidfdEnded(pidfd) })
	}
	if e, ok := statOf(other.PID); !ok || e.start != other.Start || e.dead() {
		t.Fatalf("the other execution's subject %d was signalled by a lost shim's fallback", other.PID)
	}
}

// A frame's length from a shim allocates nothing before its bytes: a
// length of 1 GiB followed by a few bytes and the end costs kilobytes, not
// the gigabyte relayd's reader once allocated at once.
func TestFrameReaderTornLength(t *testing.T) {
	stream := append([]byte{0, 0, 0, 0x40, frReply}, make([]byte, 100)...) // 1 GiB (maxShimFrame)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := (&frameReader{br: bufio.NewReader(bytes.NewReader(stream))}).read()
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a torn frame was read whole")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("reading a torn frame allocated %d bytes; want under 1 MiB", grew)
	}
}
