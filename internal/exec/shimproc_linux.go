package exec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/teardown"
)

// The shim: one supervisor per execution, relayd's own binary re-executed
// (argv[0] ShimArg0), in the manner of containerd's shim per container.
//
// A shim is a child subreaper. It forks and execs the subject, so every
// orphan of the subject's subtree comes to the shim and to nothing else,
// whatever the subtree does to hide (setsid, double forks,
// clone(CLONE_PARENT), which makes a child of the shim, a subject that makes
// itself a subreaper, which only keeps its orphans inside the subtree, new
// PID namespaces). Membership is the kernel's own parentage: the members
// are the shim's descendants, and when the subject has been reaped and wait
// says there is no child left (ECHILD, with __WALL, so that a child whose
// exit signal is not SIGCHLD counts too), the subtree is empty. That is the
// evidence; no look at another execution's processes enters it, and no
// lock is shared with another execution.
//
// It runs as relayd's user, is not dumpable (so a process of the same uid
// cannot ptrace it, read its memory or take its descriptors without
// CAP_SYS_PTRACE), catches the signals a subject could send it (SIGKILL and
// SIGSTOP excepted), holds only its socket to relayd between executions,
// and closes the descriptors of an execution as soon as the subject has
// them. When its socket to relayd ends (relayd died, or retired it) while
// a subject runs, it settles its own subtree (teardown.Settle, with the
// budget relayd gave it) and exits; a subtree left alone (rule 6.1) it
// leaves alone.
//
// A shim whose subtree is empty takes the next execution: shims are
// started off the critical path and reused (Shims).

// ShimArg0 is argv[0] of relayd re-executed as a shim.
const ShimArg0 = "relayd-shim"

// shimSockFD is the shim's descriptor of its socket to relayd.
const shimSockFD = 3

func isShim() bool { return len(os.Args) > 0 && os.Args[0] == ShimArg0 }

// ShimMain runs the shim, and exits, when this process was started as one;
// otherwise it returns at once. relayd's main calls it before anything
// else. catchRest, when set, catches the signals Go's runtime cannot
// deliver to a channel (relayd's own handler, cmd/relayd/sigcount_linux.go),
// once the shim has caught the others.
func ShimMain(catchRest func()) {
	if !isShim() {
		return
	}
	endShim(runShim(catchRest))
}

type shimProc struct {
	self int
	sock int // the socket to relayd, blocking: the shim's own loop polls it
	poll *shimPoll
	wmu  sync.Mutex
	// subjectFD is a pidfd of the running subject, polled beside the
	// socket so that its end is collected without waking another
	// goroutine; -1 when there is none.
	subjectFD int

	// mu is held while forking and while reaping, so that the subject is
	// known before its end can be collected.
	mu      sync.Mutex
	busy    bool // an execution holds the shim: from its start until its subtree is empty
	subject int  // the subject's pid while it runs; 0 once reaped
	left    bool // the subject exited and relayd left what remains alone
	grace   time.Duration
	timeout time.Duration
	// termAt is when relayd first had the running execution's subtree
	// signalled SIGTERM (its settlement began); zero before. A settlement
	// the shim makes when relayd dies then sends no second SIGTERM (rule
	// 6.13): SIGKILL once the rest of the grace has passed.
	termAt time.Time
	// tick is how long the loop waits for the next end of a survivor
	// (they send no pidfd event): from reapFloor, doubling to reapCeil
	// while nothing ends.
	tick    time.Duration
	dropped bool // the forking thread dropped DropCaps and set no-new-privileges
	// use is what the running execution's reaped processes used
	// (usage_linux.go), from its start; cpuLimit its cpuSeconds (0: none).
	use      Usage
	cpuLimit uint64
}

// shimSignals are the signals a subject of relayd's user could send its
// shim to end or stop it (every signal from 1 to 64 but SIGKILL and
// SIGSTOP, which cannot be caught, SIGCHLD, which the shim reaps on, and
// those Go's runtime keeps: SIGURG, SIGPROF, 32 to 34): caught and
// dropped. Caught, not ignored: an ignored disposition would be inherited
// by the subject.
func shimSignals() []os.Signal {
	var out []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch {
		case s == syscall.SIGKILL, s == syscall.SIGSTOP, s == syscall.SIGCHLD, s == syscall.SIGURG,
			s == syscall.SIGPROF, s >= 32 && s <= 34:
			continue
		}
		out = append(out, s)
	}
	return out
}

func runShim(catchRest func()) int {
	// One goroutine does the shim's work; one P keeps its runtime to a few
	// threads.
	runtime.GOMAXPROCS(1)
	// Its socket to relayd (descriptor 3), and anything else it was
	// given, reaches no subject (rule 6.13).
	if err := CloseOnExec(); err != nil {
		return 3 // relayd sees no hello and does not use this shim
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 3 // relayd sees no hello and does not use this shim
	}
	sink := make(chan os.Signal, 16)
	signal.Notify(sink, shimSignals()...)
	if catchRest != nil {
		catchRest()
	}
	go func() {
		for range sink {
		}
	}()
	p := &shimProc{self: os.Getpid(), sock: shimSockFD, subjectFD: -1, tick: reapFloor}
	if err := unix.SetNonblock(p.sock, false); err != nil {
		return 3
	}
	w, err := newShimPoll(p.sock)
	if err != nil {
		return 3
	}
	p.poll = w
	// No SIGCHLD channel and no other goroutine: the subject's end comes
	// through its pidfd, in the loop below, and a look reaps first; the
	// loop's tick only collects the later ends of survivors, so that the
	// shim goes back to the pool.
	p.send(frHello, &shimHello{p.self})
	r := &rawFrameReader{fd: p.sock, oob: make([]byte, unix.CmsgSpace(maxShimFDs*4))}
	// The loop waits parked in Go's poller (shimPoll), so that the thread
	// that takes the event runs the loop, and between waits it makes its
	// system calls raw (shimraw_linux.go). It is not locked to a thread:
	// the subjects are the process's children whichever thread forks them
	// (wait4 and the walks cover every thread's), and a locked goroutine's
	// every wake-up is a hand-off from the poller's thread to its own. Only
	// capabilities are a thread's: start locks the loop to the thread that
	// drops them.
	for {
		ready, err := p.wait()
		if err != nil {
			return p.relaydGone()
		}
		if ready&(waitSubject|waitTick) != 0 {
			p.mu.Lock()
			if p.sweepLocked() {
				p.tick = reapFloor
			} else if ready&waitTick != 0 {
				p.tick = min(2*p.tick, reapCeil)
			}
			p.mu.Unlock()
		}
		if ready&waitSocket == 0 {
			continue
		}
		kind, body, fds, err := r.read()
		if err != nil {
			return p.relaydGone()
		}
		switch kind {
		case frStart:
			if d := faultShimStartDelay(); d > 0 {
				time.Sleep(d) // a starved shim, as on a machine starting thousands of processes
			}
			faultShimHop()
			p.start(body, fds)
		case frMembers:
			closeFDs(fds)
			p.members(body)
		case frSignal:
			closeFDs(fds)
			p.signal(body)
		case frSync:
			closeFDs(fds)
			var req shimReq
			_ = decodeBody(body, &req)
			p.mu.Lock()
			p.sweepLocked()
			p.reply(shimReply{Seq: req.Seq})
			p.mu.Unlock()
		case frLeave:
			closeFDs(fds)
			p.mu.Lock()
			if p.busy {
				p.left = true
			}
			p.mu.Unlock()
		default:
			closeFDs(fds)
		}
	}
}

// What wait found ready.
const (
	waitSocket  = 1
	waitSubject = 2
	waitTick    = 4
)

// wait blocks until relayd's socket has something (a request, or its
// end), the subject's pidfd says it ended, or, while an execution holds
// the shim, its tick passed.
func (p *shimProc) wait() (int, error) {
	p.mu.Lock()
	var tick time.Duration
	if p.busy {
		tick = p.tick
	}
	p.mu.Unlock()
	return p.poll.wait(tick)
}

// rawFrameReader reads frames from a blocking socket, taking the
// descriptors sent with a header.
type rawFrameReader struct {
	fd  int
	oob []byte
}

func (r *rawFrameReader) read() (kind byte, body []byte, fds []int, err error) {
	var hdr [5]byte
	n, oobn, err := rawRecvmsg(r.fd, hdr[:], r.oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 0, nil, nil, err
	}
	if n == 0 {
		return 0, nil, nil, io.EOF
	}
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(r.oob[:oobn])
		if perr != nil {
			return 0, nil, nil, perr
		}
		for _, m := range msgs {
			if got, perr := unix.ParseUnixRights(&m); perr == nil {
				fds = append(fds, got...)
			}
		}
	}
	if err := readFull(r.fd, hdr[n:]); err != nil {
		closeFDs(fds)
		return 0, nil, nil, err
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	if size < 1 || size > maxShimFrame {
		closeFDs(fds)
		return 0, nil, nil, fmt.Errorf("%w: length %d", errShimFrame, size)
	}
	body = make([]byte, size-1)
	if err := readFull(r.fd, body); err != nil {
		closeFDs(fds)
		return 0, nil, nil, err
	}
	return hdr[4], body, fds, nil
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := rawRead(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := rawWrite(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// The loop's tick while an execution holds the shim (see shimProc.tick).
const (
	reapFloor = 100 * time.Millisecond
	reapCeil  = 30 * time.Second
)

func (p *shimProc) send(kind byte, v wireMsg) {
	b, err := encodeFrame(kind, v)
	if err != nil {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = writeFull(p.sock, b)
}

func (p *shimProc) reply(r shimReply) { p.send(frReply, &r) }

// sweepLocked reaps every ended child; the subject's end is reported, and
// once the subject is gone and no child is left, the subtree is empty and
// the shim is free. A subject that leaves nothing is reported in one frame,
// its end with the word that the subtree is empty, so that relayd knows
// both when the status comes and asks for no look.
func (p *shimProc) sweepLocked() (reaped bool) {
	var exit *shimExit
	defer func() {
		if exit != nil {
			p.send(frExited, exit)
		}
	}()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := rawWait4Usage(-1, &ws, unix.WNOHANG|unix.WALL, &ru)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECHILD {
			if p.busy && p.subject == 0 {
				p.busy, p.left = false, false
				if exit != nil {
					exit.Empty, exit.Usage = true, p.use
				} else {
					u := p.use
					p.send(frEmpty, &u)
				}
			}
			return reaped
		}
		if err != nil || pid <= 0 {
			return reaped
		}
		if !ws.Exited() && !ws.Signaled() {
			continue
		}
		reaped = true
		if p.busy {
			p.use.add(ws, &ru, p.cpuLimit)
			if exit != nil {
				exit.Usage = p.use
			}
		}
		if p.busy && pid == p.subject {
			p.subject = 0
			if p.subjectFD >= 0 {
				rawClose(p.subjectFD)
				p.subjectFD = -1
			}
			exit = &shimExit{PID: pid, Exited: ws.Exited(), Code: ws.ExitStatus(), Signal: int(ws.Signal()), Usage: p.use}
		}
	}
}

// start forks and execs the subject: in a new session, with the requested
// credentials, inside its cgroup leaf when there is one. It replies with
// the subject's pid and start time, or with why nothing ran.
func (p *shimProc) start(body []byte, fds []int) {
	defer closeFDs(fds)
	var req shimStart
	if err := decodeBody(body, &req); err != nil || len(fds) != req.FDs || len(fds) < 3 {
		p.reply(shimReply{Seq: req.Seq, Err: "malformed start request", Stage: "scope"})
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy {
		p.reply(shimReply{Seq: req.Seq, Err: "the shim is busy", Stage: "scope"})
		return
	}
	if len(req.DropCaps) > 0 && !p.dropped {
		// This thread forks every subject from now on: capabilities are
		// per thread, and the child takes the forking thread's. The lock
		// is never undone.
		runtime.LockOSThread()
		if err := dropCapabilities(req.DropCaps); err != nil {
			p.reply(shimReply{Seq: req.Seq, Err: "cannot drop capabilities: " + err.Error(), Errno: errnoOf(err), Stage: "scope"})
			return
		}
		p.dropped = true
	}
	// The subject's own descriptors: 0, 1, 2 and, for a shell session, its
	// status channel as 3 (protocol 4.7); the cgroup's come after them.
	subject, cg := fds[:3], fds[3:]
	if req.Status {
		if len(fds) < 4 {
			p.reply(shimReply{Seq: req.Seq, Err: "malformed start request", Stage: "scope"})
			return
		}
		subject, cg = fds[:4], fds[4:]
	}
	pidfd := -1
	sys := &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd}
	if req.Tty {
		// After setsid, TIOCSCTTY on the child's descriptor 0 (the
		// replica): the terminal is the new session's.
		sys.Setctty, sys.Ctty = true, 0
	}
	if req.Cred != nil {
		sys.Credential = &syscall.Credential{Uid: req.Cred.UID, Gid: req.Cred.GID, Groups: req.Cred.Groups}
	}
	back := -1
	switch req.Cgroup {
	case cgroupClone3:
		if len(cg) < 1 {
			p.reply(shimReply{Seq: req.Seq, Err: "no cgroup leaf", Stage: "scope"})
			return
		}
		sys.UseCgroupFD, sys.CgroupFD = true, cg[0]
	case cgroupMigrate:
		if len(cg) < 2 {
			p.reply(shimReply{Seq: req.Seq, Err: "no cgroup leaf", Stage: "scope"})
			return
		}
		// The shim moves into the leaf, so that its child is born there,
		// and back right after the fork.
		if _, err := unix.Write(cg[0], []byte("0")); err != nil {
			p.reply(shimReply{Seq: req.Seq, Err: "cannot enter the cgroup leaf: " + err.Error(), Errno: errnoOf(err), Stage: "scope"})
			return
		}
		back = cg[1]
	}
	// The subject's umask is the shim's at the fork: syscall.SysProcAttr
	// has none to set in the child. The shim creates no file (it opens
	// nothing but /proc and what relayd sends it), so its own umask is the
	// subject's to set, once per start.
	syscall.Umask(int(req.Umask & 0o777))
	var pid int
	var err error
	files := make([]uintptr, len(subject))
	for i, fd := range subject {
		files[i] = uintptr(fd)
	}
	restored, lerr := withRlimits(req.Rlimits, func() {
		pid, err = syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{Dir: req.Dir, Env: req.Env,
			Files: files, Sys: sys})
	})
	if lerr != nil {
		err = lerr
	}
	if back >= 0 {
		if _, berr := unix.Write(back, []byte("0")); berr != nil {
			// Still in the leaf, the shim would be settled with it: the
			// subject never runs, and the shim stops taking executions.
			if err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			}
			p.reply(shimReply{Seq: req.Seq, Err: "cannot leave the cgroup leaf: " + berr.Error(), Errno: errnoOf(berr), Stage: "scope"})
			go func() { time.Sleep(10 * time.Millisecond); os.Exit(4) }()
			return
		}
	}
	if err != nil {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		stage := "exec"
		switch {
		case errors.Is(lerr, errShimCPU):
			stage = "shim-cpu" // relayd takes another shim
		case lerr != nil:
			stage = "limits"
		}
		p.reply(shimReply{Seq: req.Seq, Err: err.Error(), Errno: errnoOf(err), Stage: stage, Tainted: !restored})
		return
	}
	// The subject is this shim's unreaped child: its pid names it until
	// the shim reaps it, so its start time is read without a race.
	e, serr := readStat("/proc", pid, make([]byte, 1024))
	if serr != nil {
		e.start = 0
	}
	if pidfd >= 0 {
		if perr := p.poll.add(pidfd); perr != nil {
			// Unwatched, its end would come only with the tick.
			rawClose(pidfd)
		} else {
			p.subjectFD = pidfd
		}
	}
	p.busy, p.subject, p.left = true, pid, false
	p.use, p.cpuLimit = Usage{}, 0
	for _, l := range req.Rlimits {
		if l.Resource == unix.RLIMIT_CPU {
			p.cpuLimit = l.Value
		}
	}
	p.grace, p.timeout, p.termAt = time.Duration(req.Grace), time.Duration(req.Timeout), time.Time{}
	p.tick = reapFloor
	p.reply(shimReply{Seq: req.Seq, PID: pid, Start: e.start, Tainted: !restored})
	switch faultShimForge(req.Env) {
	case "exit":
		p.send(frExited, &shimExit{PID: pid, Exited: true, Empty: true})
	case "garbage":
		p.send('z', shimNone{})
	case "relayd-kind":
		p.send(frSignal, &shimReq{Seq: 1, Sig: int(syscall.SIGKILL)})
	}
}

func errnoOf(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	return int(syscall.EINVAL)
}

// subtree lists the live processes below the shim, by the children of each
// of its threads and theirs. The list is what the walk saw; the evidence
// that nothing is left is noChild's.
func (p *shimProc) subtree() ([]Member, error) {
	root := "/proc"
	if r := faultProcRoot(); r != "" {
		root = r // a test's fault: no look succeeds
	}
	kids, err := taskChildren(root, p.self, -1)
	if err != nil {
		return nil, err
	}
	table := make(map[int]procEntry, len(kids))
	walkInto(root, p.self, table, kids, make([]byte, 1024))
	out := make([]Member, 0, len(table))
	for pid, e := range table {
		if !e.dead() {
			out = append(out, Member{PID: pid, Start: e.start})
		}
	}
	return out, nil
}

// errUnseenChild: the walk found nothing, but the kernel says the shim
// still has a child (one forked or reparented during the walk).
var errUnseenChild = errors.New("exec: the shim has a child its walk did not see")

// look is one complete look, for relayd or for the shim's own settlement:
// an empty list only with the kernel's word that no child is left.
func (p *shimProc) look() ([]Member, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked()
	if noChild() {
		return nil, nil // the kernel's word, and no walk of the shim's threads to get it
	}
	members, err := p.subtree()
	if err != nil || len(members) > 0 {
		return members, err
	}
	if !noChild() {
		return nil, errUnseenChild
	}
	return nil, nil
}

// noChild reports the kernel's word that the calling process has no child
// at all, ended or not, whatever its exit signal.
func noChild() bool {
	var info unix.Siginfo
	for {
		err := rawWaitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL)
		if err == unix.EINTR {
			continue
		}
		return err == unix.ECHILD
	}
}

func (p *shimProc) members(body []byte) {
	var req shimReq
	_ = decodeBody(body, &req)
	members, err := p.look()
	r := shimReply{Seq: req.Seq}
	p.mu.Lock()
	if p.busy {
		r.Usage = p.use // an empty subtree's whole went with the empty event
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		r.Err = err.Error()
	case len(members) == 0:
		r.Empty = true
	default:
		r.Members = make([][2]uint64, len(members))
		for i, m := range members {
			r.Members[i] = [2]uint64{uint64(m.PID), m.Start}
		}
	}
	p.reply(r)
}

// signalAll signals every process of the subtree a walk finds, each
// through a pidfd after checking its start time.
func (p *shimProc) signalAll(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	members, err := p.subtree()
	if err != nil {
		return err
	}
	var first error
	for _, m := range members {
		if err := signalMember("/proc", m, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *shimProc) signal(body []byte) {
	var req shimReq
	_ = decodeBody(body, &req)
	r := shimReply{Seq: req.Seq}
	if syscall.Signal(req.Sig) == syscall.SIGTERM {
		// Even with no member to signal: relayd signalled the others itself.
		p.mu.Lock()
		if p.busy && p.termAt.IsZero() {
			p.termAt = time.Now()
		}
		p.mu.Unlock()
	}
	var err error
	if req.Members != nil {
		// What relayd's last look at this subtree found: each is signalled
		// only if it is still that process (its start time), and so still
		// of this subtree, which no process leaves.
		for _, m := range req.Members {
			if e := signalMember("/proc", Member{PID: int(m[0]), Start: m[1]}, syscall.Signal(req.Sig)); e != nil && err == nil {
				err = e
			}
		}
	} else {
		err = p.signalAll(syscall.Signal(req.Sig))
	}
	if err != nil {
		r.Err = err.Error()
	}
	p.reply(r)
}

// shimScope is the shim's own subtree as teardown sees it, for the
// settlement it makes when relayd is gone.
type shimScope struct{ p *shimProc }

func (s shimScope) Members() ([]Member, error)      { return s.p.look() }
func (s shimScope) Signal(sig syscall.Signal) error { return s.p.signalAll(sig) }

// relaydGone is the end of the socket to relayd: relayd died, or retired
// the shim. A subject that runs (or whose end relayd never answered) is
// settled with the budget relayd gave; survivors left alone stay alone.
func (p *shimProc) relaydGone() int {
	p.mu.Lock()
	busy, left, grace, timeout, termAt := p.busy, p.left, p.grace, p.timeout, p.termAt
	p.mu.Unlock()
	if !busy || left {
		return 0
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	opts := teardown.Options{Grace: grace, Deadline: time.Now().Add(timeout)}
	if !termAt.IsZero() {
		// relayd died settling: its SIGTERM went out, the rest of its
		// grace is left, then SIGKILL.
		opts.NoTerm, opts.Grace = true, max(0, grace-time.Since(termAt))
	}
	out := teardown.Settle(context.Background(), shimScope{p}, opts)
	if !out.Confirmed {
		return 1
	}
	return 0
}

// dropCapabilities removes caps from the bounding, effective, permitted,
// inheritable and ambient sets of the calling thread, which forks every
// subject (capabilities are per thread; the child takes the forking
// thread's), and sets no-new-privileges, so that neither a setuid binary
// nor file capabilities give them back. Without CAP_SETPCAP the bounding
// set cannot shrink; then each cap must be absent from the permitted set
// already, which no-new-privileges keeps so.
func dropCapabilities(caps []int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for _, c := range caps {
		if c < 0 || c >= 64 {
			return fmt.Errorf("capability %d out of range", c)
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if data[c/32].Permitted&(1<<(c%32)) != 0 {
				return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
			}
		}
		data[c/32].Effective &^= 1 << (c % 32)
		data[c/32].Permitted &^= 1 << (c % 32)
		data[c/32].Inheritable &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	for _, c := range caps {
		_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, uintptr(c), 0, 0)
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}
