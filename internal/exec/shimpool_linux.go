package exec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shims is relayd's side of the shims (shimproc_linux.go): a pool of idle
// ones, started off the critical path and reused once their subtree is
// empty, so that an execute costs no shim start.
type Shims struct {
	reaper *Reaper
	path   string // the binary a shim runs: relayd's own
	// Budget of the settlement a shim makes by itself if relayd dies.
	grace, timeout time.Duration
	dropCaps       []int // capabilities no subject may hold (--drop-capabilities)
	umask          int   // every subject's umask (--subject-umask)

	mu       sync.Mutex
	idle     []*shim
	all      map[*shim]struct{} // every live shim, idle or not
	starting int
	closed   bool
	want     int       // idle shims to keep: raised by demand, up to maxIdleShims
	demand   time.Time // when an execute last found no idle shim
	peak     int       // the most shims busy at once since the last trim

	spawned atomic.Int64 // shims started, for tests
}

// The pool's bounds: at least minIdleShims are kept ready once the pool
// is warmed, and demand (executions that found no idle shim) raises what
// it keeps (want) up to maxIdleShims. It keeps minIdleShims more than
// that, the spares its refill starts when the last idle one is taken, so
// that a steady concurrency neither starts nor retires shims; a shim freed
// beyond that exits. After shimTrimAfter without demand, the pool keeps
// what was busy at once in that time.
const (
	minIdleShims = 2
	maxIdleShims = 64
)

// shimRPCTimeout bounds one request to a shim. A shim that does not
// answer in time (stopped, or starved) counts as lost for that request:
// no evidence.
const shimRPCTimeout = 2 * time.Second

// shimStartTimeout bounds a start request to a shim that is runnable but
// slow: on a machine starting thousands of processes at once a fresh shim
// is starved for seconds, and its execution would fail for nothing. A
// stopped or traced shim (state T or t) is lost at shimRPCTimeout as any
// other. Only starts wait so long: nothing runs yet, so no settlement
// budget is spent.
const shimStartTimeout = 10 * time.Second

// shimHelloTimeout bounds the start of a shim.
const shimHelloTimeout = 10 * time.Second

// ErrShimLost means the shim of an execution died or stopped answering:
// nothing about its subtree can be known any more.
var ErrShimLost = errors.New("exec: the execution's shim is gone")

// NewShims makes the pool. path is the binary to run as a shim ("" for
// relayd's own, /proc/self/exe); grace and timeout are relayd's teardown
// budget, which a shim uses if relayd dies. No shim starts before Warm.
func NewShims(ctx context.Context, r *Reaper, path string, grace, timeout time.Duration) *Shims {
	if path == "" {
		path = "/proc/self/exe"
	}
	p := &Shims{reaper: r, path: path, grace: grace, timeout: timeout, umask: DefaultUmask, all: make(map[*shim]struct{})}
	go func() {
		<-ctx.Done()
		p.Close()
	}()
	go p.trim(ctx)
	return p
}

// DropCapabilities makes every subject start without caps in any of its
// capability sets, and with no-new-privileges (--drop-capabilities). Call
// it before Warm.
func (p *Shims) DropCapabilities(caps []int) { p.dropCaps = append([]int(nil), caps...) }

// DefaultUmask is every subject's umask unless SubjectUmask says
// otherwise (--subject-umask's default, protocol section 9), whatever
// relayd's own is.
const DefaultUmask = 0o022

// SubjectUmask makes every subject start with umask mask (--subject-umask;
// the bits past 0777 are dropped). Call it before Warm.
func (p *Shims) SubjectUmask(mask int) { p.umask = mask & 0o777 }

// Warm starts the idle shims the pool keeps ready, in the background.
func (p *Shims) Warm() {
	p.mu.Lock()
	if p.want < minIdleShims {
		p.want = minIdleShims
	}
	p.mu.Unlock()
	p.refill()
}

// Close ends the shims relayd no longer needs, and waits a moment for them
// to exit: the idle ones, and those that only hold survivors left alone
// (they exit without signalling them, which then belong to relayd's own
// parent). A shim whose subject runs is settled by the session first.
func (p *Shims) Close() {
	p.mu.Lock()
	p.closed = true
	p.idle = nil
	var ending []*shim
	for sh := range p.all {
		sh.mu.Lock()
		if sh.cur == nil || sh.cur.left {
			ending = append(ending, sh)
		}
		sh.mu.Unlock()
	}
	p.mu.Unlock()
	for _, sh := range ending {
		sh.retire()
	}
	deadline := time.After(2 * time.Second)
	for _, sh := range ending {
		select {
		case <-sh.exited:
		case <-deadline:
			return
		}
	}
}

// refill starts shims, in the background, until the pool holds at least
// one idle shim beyond those starting.
func (p *Shims) refill() {
	p.mu.Lock()
	n := min(p.want, minIdleShims) - len(p.idle) - p.starting
	if p.closed || n <= 0 {
		p.mu.Unlock()
		return
	}
	p.starting += n
	p.mu.Unlock()
	for range n {
		go func() {
			sh, err := p.spawn()
			p.mu.Lock()
			p.starting--
			p.mu.Unlock()
			if err == nil {
				p.put(sh)
			}
		}()
	}
}

// get takes an idle shim, or starts one when there is none. Shims come
// back to the pool when their subtree is empty, so at rest the pool holds
// as many as executions ran at once (up to maxIdleShims) and the spares,
// and an execute starts no shim; spares are started in the background
// only when the last idle one is taken.
//
// limits is the key (rlimitsKey) of the execution's resource limits: a
// shim that could not take back the limits of an earlier execution
// (usage_linux.go) holds them as its own, and serves only executions with
// the same limits; an untainted shim serves any.
func (p *Shims) get(limits string) (*shim, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		i := len(p.idle) - 1
		for ; i >= 0 && p.idle[i].limits != limits && (limits == "" || p.idle[i].limits != ""); i-- {
		}
		if i < 0 {
			break
		}
		sh := p.idle[i]
		p.idle = append(p.idle[:i], p.idle[i+1:]...)
		if sh.alive() {
			low := len(p.idle)+p.starting == 0 // the busy ones come back
			p.peak = max(p.peak, len(p.all)-len(p.idle))
			p.mu.Unlock()
			if low {
				p.refill()
			}
			return sh, nil
		}
	}
	if p.want < maxIdleShims {
		p.want++ // demand: keep one more when it comes back
	}
	p.demand = time.Now()
	p.mu.Unlock()
	sh, err := p.spawn()
	p.refill()
	return sh, err
}

// put takes back a shim whose subtree is empty.
func (p *Shims) put(sh *shim) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.keep() || !sh.alive() {
		p.mu.Unlock()
		sh.retire()
		return
	}
	p.idle = append(p.idle, sh)
	p.mu.Unlock()
}

// keep is how many idle shims the pool holds at most: want, and the spares.
func (p *Shims) keep() int { return max(p.want, minIdleShims) + minIdleShims }

// shimTrimAfter: when no execute has found the pool empty for this long,
// the pool keeps what was busy at once in that time (at least
// minIdleShims).
const shimTrimAfter = time.Minute

// trim retires idle shims the pool no longer needs, every shimTrimAfter.
func (p *Shims) trim(ctx context.Context) {
	t := time.NewTicker(shimTrimAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		var extra []*shim
		if time.Since(p.demand) >= shimTrimAfter {
			p.want = max(minIdleShims, min(p.want, p.peak))
			for len(p.idle) > p.keep() {
				extra = append(extra, p.idle[0])
				p.idle = p.idle[1:]
			}
		}
		p.peak = len(p.all) - len(p.idle)
		p.mu.Unlock()
		for _, sh := range extra {
			sh.retire()
		}
	}
}

// spawn starts one shim and waits for its hello.
func (p *Shims) spawn() (*shim, error) {
	p.spawned.Add(1)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec: shim socket: %w", err)
	}
	devnull, err := devNull()
	if err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("exec: shim: %w", err)
	}
	attr := &syscall.ProcAttr{
		Env: faultEnv(),
		// Not relayd's stderr: a shim outlives relayd while it settles,
		// and would hold relayd's log pipe open after relayd's death.
		Files: []uintptr{devnull.r, devnull.w, devnull.w, uintptr(pair[1])},
		// A session of its own: a terminal's signals to relayd's group
		// do not reach it.
		Sys: &syscall.SysProcAttr{Setsid: true},
	}
	pid, _, exited, err := p.reaper.ForkExec(p.path, []string{ShimArg0}, attr)
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	f := os.NewFile(uintptr(pair[0]), "shim")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, fmt.Errorf("exec: shim socket: %w", err)
	}
	sh := &shim{pool: p, pid: pid, conn: c.(*net.UnixConn), exited: exited,
		calls: make(map[uint32]chan shimReply), hello: make(chan struct{}), gone: make(chan struct{})}
	p.mu.Lock()
	p.all[sh] = struct{}{}
	p.mu.Unlock()
	go sh.read()
	go func() {
		<-exited
		sh.lost()
		p.mu.Lock()
		delete(p.all, sh)
		p.mu.Unlock()
	}()
	select {
	case <-sh.hello:
		return sh, nil
	case <-sh.gone:
		return nil, fmt.Errorf("%w before its hello", ErrShimLost)
	case <-time.After(shimHelloTimeout):
		sh.kill()
		return nil, fmt.Errorf("exec: a shim did not start within %v", shimHelloTimeout)
	}
}

// shim is relayd's handle on one shim process.
type shim struct {
	pool   *Shims
	pid    int
	conn   *net.UnixConn
	exited <-chan Status
	hello  chan struct{}
	gone   chan struct{} // closed once the shim is lost: dead, or its socket ended

	wmu sync.Mutex

	mu       sync.Mutex
	seq      uint32
	calls    map[uint32]chan shimReply
	cur      *shimRun // the execution it serves; nil while idle
	dead     bool
	retiring bool
	helloed  bool // its hello came
	// statBuf is bindLocked's and confirmExitLocked's read of a subject's
	// /proc stat, under mu: one per shim, not one per execution.
	statBuf [1024]byte
	// limits is the key of the resource limits the shim holds as its own
	// since it could not take them back; "" for none.
	limits string
}

// shimRun is one execution on a shim: where its subject's end goes, and
// whether its subtree is known empty.
type shimRun struct {
	sh     *shim
	exited chan Status   // the subject's status, once
	lost   chan struct{} // closed if the shim is lost while the subject runs
	pid    int           // the subject, once started
	start  uint64        // its start time
	known  []Member      // what the shim's last look listed, for a lost shim's fallback
	ended  bool          // the subject was reaped
	empty  bool          // the subtree is empty: the shim went back to the pool
	left   bool          // relayd left the subtree alone
	// startSeq is the sequence number of its start request; pidfd is
	// relayd's own pidfd of the subject, from the start's reply until its
	// exit is confirmed (-1: none; gone: the subject was reaped before
	// relayd could open one). relayd takes no exit on the shim's word alone.
	startSeq uint32
	pidfd    int
	gone     bool
	broken   error // the shim broke the wire's rules while it served this run
	usage    Usage // what the reaped processes used: from the exit frame, then the empty event
}

// subtreeEmpty reports whether the subject's exit was taken and the shim
// has said its subtree is empty.
func (run *shimRun) subtreeEmpty() bool {
	run.sh.mu.Lock()
	defer run.sh.mu.Unlock()
	return run.ended && run.empty
}

func (sh *shim) alive() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return !sh.dead && !sh.retiring
}

// read takes the shim's frames until its socket ends. A frame that breaks
// the wire's rules (errShimFrame) retires the shim at once: it is killed,
// and the execution it served ends failed (Subject.Broken).
func (sh *shim) read() { sh.serve(newFrameReader(sh.conn)) }

// serve is read's loop over r (a fuzz target feeds it bytes).
func (sh *shim) serve(r *frameReader) {
	for {
		kind, body, err := r.read()
		if err == nil {
			err = sh.dispatch(kind, body)
		}
		if errors.Is(err, errShimFrame) {
			sh.broke(err)
			return
		}
		if err != nil {
			sh.lost()
			return
		}
	}
}

// dispatch takes one frame from the shim. It returns errShimFrame for a
// frame that breaks the wire's rules: a kind only relayd sends or none at
// all, a body that does not decode, a second hello, a reply to no
// request, a start's pid that is not the shim's child, an exit of another
// pid or that relayd's pidfd of the subject contradicts, an exit or empty
// with no execution.
func (sh *shim) dispatch(kind byte, body []byte) error {
	switch kind {
	case frHello:
		var h shimHello
		if err := decodeBody(body, &h); err != nil {
			return err
		}
		sh.mu.Lock()
		again := sh.helloed
		sh.helloed = true
		sh.mu.Unlock()
		if again || h.PID != sh.pid {
			return fmt.Errorf("%w: a hello from pid %d (again: %v)", errShimFrame, h.PID, again)
		}
		close(sh.hello)
		return nil
	case frReply:
		var rep shimReply
		if err := decodeBody(body, &rep); err != nil {
			return err
		}
		return sh.replied(rep)
	case frExited:
		var x shimExit
		if err := decodeBody(body, &x); err != nil {
			return err
		}
		return sh.subjectExited(x)
	case frEmpty:
		var u Usage
		if err := decodeBody(body, &u); err != nil {
			return err
		}
		return sh.freed(u)
	case frStart, frMembers, frSignal, frSync, frLeave:
		return fmt.Errorf("%w: kind %q, which only relayd sends", errShimFrame, kind)
	}
	return fmt.Errorf("%w: unknown kind %#x", errShimFrame, kind)
}

// replied hands a reply to its request. The reply to a start binds the
// run to its subject: relayd opens its own pidfd of it.
func (sh *shim) replied(rep shimReply) error {
	sh.mu.Lock()
	ch, ok := sh.calls[rep.Seq]
	if !ok {
		retiring := sh.retiring
		sh.mu.Unlock()
		if retiring {
			return nil // a late answer to a request relayd gave up on, the shim ended
		}
		return fmt.Errorf("%w: a reply to no request (%d)", errShimFrame, rep.Seq)
	}
	delete(sh.calls, rep.Seq)
	var err error
	if run := sh.cur; run != nil && run.startSeq == rep.Seq && rep.Err == "" {
		err = run.bindLocked(rep.PID, rep.Start)
	}
	sh.mu.Unlock()
	ch <- rep // buffered
	return err
}

// bindLocked checks a start's reply against the kernel, and opens relayd's
// pidfd of the subject: the pidfd first, then its identity, so that a pid
// reused since is not taken for the subject. The subject is the shim's
// unreaped child until the shim reaps it, so its parent is the shim (a
// process being reaped reads none) and its start time the one the shim
// read. Where the kernel gives a pidfd's parent (PIDFD_GET_INFO), that is
// the check: the pidfd names a live child of the shim, which a reused pid
// cannot be before the subject is reaped, and the start time stays the
// shim's (what finds the subject again if the shim is lost; its exit is
// still taken only once the pidfd says it has ended). Else /proc is read.
// A pid that names no process any more was the subject's, reaped
// already: its exit is then taken without a pidfd.
func (run *shimRun) bindLocked(pid int, start uint64) error {
	if pid <= 0 {
		return fmt.Errorf("%w: a start's pid %d", errShimFrame, pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		run.pid, run.start, run.gone = pid, start, true
		return nil
	}
	if err == nil && start != 0 && pidfdParent(fd) == run.sh.pid {
		// The kernel's word through the pidfd itself: a live child of
		// the shim, which no pid reused since can be.
		run.pid, run.start, run.pidfd = pid, start, fd
		return nil
	}
	e, serr := subjectStat(pid, run.sh.statBuf[:])
	ended := func() bool { return err == nil && pidfdEnded(fd) }
	if serr == nil && !startNamesChild(e, start, run.sh.pid, ended) {
		if err == nil {
			unix.Close(fd)
		}
		return fmt.Errorf("%w: a start's pid %d is not the shim's child started at %d (parent %d, start %d)",
			errShimFrame, pid, start, e.ppid, e.start)
	}
	if start == 0 && serr == nil {
		start = e.start
	}
	run.pid, run.start = pid, start
	if err == nil {
		// Without one (no descriptor left, an old kernel), the exit is
		// checked against /proc.
		run.pidfd = fd
	}
	return nil
}

// subjectStat is bindLocked's read of /proc (a test gives it what /proc
// gives a process reaped while it is read).
var subjectStat = func(pid int, buf []byte) (procEntry, error) { return readStat("/proc", pid, buf) }

// startNamesChild reports whether e, /proc's entry of the pid a start's
// reply named, is the shim's child started at start (0: the shim could
// not read it). A process being reaped reads parent 0, so only a live one
// must be the shim's. /proc reads a process's state before its parent: a
// subject that exits and is reaped between the two reads shows a live
// state and parent 0 (seen under load, 32 executions of /bin/true at
// once: "not the shim's child started at 232678 (parent 0, start
// 232678)", and the execution answered failed). Parent 0 with a live
// state is therefore taken only when ended, relayd's pidfd opened before
// the read, says the process has ended; a process that runs with parent
// 0 (the namespace's init, one docker exec started) is no shim's child.
func startNamesChild(e procEntry, start uint64, shim int, ended func() bool) bool {
	switch {
	case start != 0 && e.start != start:
		return false
	case e.ppid == shim, e.dead():
		return true
	case e.ppid == 0:
		return ended()
	}
	return false
}

// subjectExited takes the subject's exit, once relayd's own pidfd of it
// agrees: the process has ended.
func (sh *shim) subjectExited(x shimExit) error {
	sh.mu.Lock()
	run := sh.cur
	if err := run.confirmExitLocked(x.PID); err != nil {
		sh.mu.Unlock()
		return err
	}
	run.usage = x.Usage
	st := Status{Exited: x.Exited, Code: x.Code, Signal: syscall.Signal(x.Signal), At: time.Now()}
	if x.Empty {
		// Known empty before the status is out: the look after
		// the exit asks the shim nothing.
		sh.freedLocked()
	}
	run.ended = true
	run.exited <- st // buffered
	close(run.exited)
	retiring := sh.retiring
	sh.mu.Unlock()
	if x.Empty && !retiring {
		sh.pool.put(sh)
	}
	return nil
}

// confirmExitLocked checks an exit frame against what relayd knows of the
// run (nil: the shim serves none) and the kernel's word: relayd's pidfd
// of the subject is readable once it has ended; without a pidfd, /proc
// shows it gone, or dead.
func (run *shimRun) confirmExitLocked(pid int) error {
	switch {
	case run == nil:
		return fmt.Errorf("%w: an exit of pid %d with no execution", errShimFrame, pid)
	case run.pid == 0:
		return fmt.Errorf("%w: an exit of pid %d before its start's reply", errShimFrame, pid)
	case run.ended:
		return fmt.Errorf("%w: a second exit of pid %d", errShimFrame, pid)
	case pid != run.pid:
		return fmt.Errorf("%w: an exit of pid %d; the subject is %d", errShimFrame, pid, run.pid)
	case run.pidfd >= 0:
		if !pidfdEnded(run.pidfd) {
			return fmt.Errorf("%w: an exit of pid %d, which runs (its pidfd)", errShimFrame, pid)
		}
		unix.Close(run.pidfd)
		run.pidfd = -1
	case !run.gone:
		if e, err := readStat("/proc", pid, run.sh.statBuf[:]); err == nil && e.start == run.start && !e.dead() {
			return fmt.Errorf("%w: an exit of pid %d, which runs (/proc)", errShimFrame, pid)
		}
	}
	return nil
}

// freed is the shim's word that its subtree is empty: it goes back to the
// pool. It comes only after the subject's exit, with what the subtree's
// processes used.
func (sh *shim) freed(u Usage) error {
	sh.mu.Lock()
	run := sh.cur
	if run == nil || !run.ended {
		sh.mu.Unlock()
		return fmt.Errorf("%w: an empty with no execution, or before its subject's exit", errShimFrame)
	}
	run.usage = u
	sh.freedLocked()
	retiring := sh.retiring
	sh.mu.Unlock()
	if !retiring {
		sh.pool.put(sh)
	}
	return nil
}

// broke retires a shim that broke the wire's rules: it is killed, as one
// that stopped answering, and the execution it served is lost, and
// failed, whatever else comes of it.
func (sh *shim) broke(err error) {
	sh.mu.Lock()
	if run := sh.cur; run != nil && run.broken == nil {
		run.broken = err
	}
	sh.mu.Unlock()
	sh.kill()
	sh.lost()
}

// freedLocked records that the subtree is empty: the run the shim served
// knows it, and the shim serves none.
func (sh *shim) freedLocked() {
	if sh.cur != nil {
		sh.cur.empty = true
	}
	sh.cur = nil
}

// lost marks the shim gone: every call waiting for it fails, and the
// execution it served learns that nothing more can be known.
func (sh *shim) lost() {
	sh.mu.Lock()
	if sh.dead {
		sh.mu.Unlock()
		return
	}
	sh.dead = true
	calls := sh.calls
	sh.calls = nil
	run := sh.cur
	if run != nil && run.pidfd >= 0 {
		unix.Close(run.pidfd)
		run.pidfd = -1
	}
	sh.mu.Unlock()
	close(sh.gone)
	for _, ch := range calls {
		close(ch)
	}
	if run != nil && !run.empty {
		close(run.lost)
	}
	sh.conn.Close()
}

// retire closes the socket: an idle shim exits, a busy one settles what it
// still holds (unless it was left alone) and exits.
func (sh *shim) retire() {
	sh.mu.Lock()
	sh.retiring = true
	sh.mu.Unlock()
	sh.conn.Close()
}

// kill ends a shim that cannot be trusted any more.
func (sh *shim) kill() {
	sh.mu.Lock()
	dead := sh.dead
	sh.retiring = true
	sh.mu.Unlock()
	if !dead {
		_ = SignalPinned(sh.pid, unix.SIGKILL, func() bool {
			select {
			case <-sh.exited: // reaped already: the pid may be another's now
				return false
			default:
				return true
			}
		})
	}
	sh.conn.Close()
}

func (sh *shim) write(kind byte, v wireMsg, fds []int) error {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	_ = sh.conn.SetWriteDeadline(time.Now().Add(shimRPCTimeout))
	return writeFrame(sh.conn, kind, v, fds)
}

// call sends a request and waits for its reply. run, when set, must still
// be the shim's execution: a request of an execution whose subtree is
// empty is never sent, so it cannot reach the next execution's.
func (sh *shim) call(run *shimRun, kind byte, req func(seq uint32) wireMsg, fds []int) (shimReply, error) {
	sh.mu.Lock()
	if run != nil && run.empty {
		// The subtree was reported empty: the shim may serve another
		// execution, or have exited.
		sh.mu.Unlock()
		return shimReply{Empty: true}, nil
	}
	if sh.dead || (run != nil && sh.cur != run) {
		sh.mu.Unlock()
		return shimReply{}, ErrShimLost
	}
	sh.seq++
	seq := sh.seq
	ch := make(chan shimReply, 1)
	sh.calls[seq] = ch
	// Written under mu so that no empty event is taken between the check
	// and the write: the shim answers this before any later start.
	err := sh.write(kind, req(seq), fds)
	sh.mu.Unlock()
	if err != nil {
		sh.forget(seq)
		return shimReply{}, fmt.Errorf("%w: %v", ErrShimLost, err)
	}
	t := time.NewTimer(shimRPCTimeout)
	defer t.Stop()
	for waited := shimRPCTimeout; ; waited += shimRPCTimeout {
		select {
		case rep, ok := <-ch:
			if !ok {
				return shimReply{}, ErrShimLost
			}
			return rep, nil
		case <-t.C:
		}
		if kind == frStart && waited < shimStartTimeout && runnable(sh.pid) {
			t.Reset(shimRPCTimeout) // starved, not stopped
			continue
		}
		// Stopped (a subject of relayd's uid can SIGSTOP it) or wedged:
		// it is no evidence any more, and it is ended, so that what it
		// holds comes to relayd and its execution's fallback reaches it.
		sh.forget(seq)
		sh.kill()
		return shimReply{}, fmt.Errorf("%w: no answer within %v", ErrShimLost, waited)
	}
}

// runnable is true while pid (a shim: relayd's unreaped child, so the pid
// is its) is neither stopped, traced nor dead.
func runnable(pid int) bool {
	var buf [512]byte
	e, err := readStat("/proc", pid, buf[:])
	return err == nil && !e.dead() && e.state != 'T' && e.state != 't'
}

func (sh *shim) forget(seq uint32) {
	sh.mu.Lock()
	if sh.calls != nil {
		delete(sh.calls, seq)
	}
	sh.mu.Unlock()
}

// startOn starts a subject on sh: it becomes sh's execution.
func (sh *shim) startOn(req shimStart, fds []int) (*shimRun, shimReply, error) {
	run := &shimRun{sh: sh, exited: make(chan Status, 1), lost: make(chan struct{}), pidfd: -1}
	sh.mu.Lock()
	if sh.cur != nil {
		sh.mu.Unlock()
		return nil, shimReply{}, errors.New("exec: shim already busy")
	}
	sh.cur = run
	sh.mu.Unlock()
	req.FDs = len(fds)
	// The reply binds run to its subject (replied), under sh.mu.
	rep, err := sh.call(nil, frStart, func(seq uint32) wireMsg { req.Seq, run.startSeq = seq, seq; return &req }, fds)
	if rep.Tainted {
		// Its own limits are the subject's now: it serves only executions
		// with the same (the restore is then no raise), and none at all
		// after cpuSeconds or addressSpaceBytes, which would end or
		// starve the shim itself in time.
		sh.mu.Lock()
		sh.limits = rlimitsKey(req.Rlimits)
		for _, l := range req.Rlimits {
			if l.Resource == unix.RLIMIT_CPU || l.Resource == unix.RLIMIT_AS {
				sh.retiring = true
			}
		}
		sh.mu.Unlock()
	}
	if err != nil || rep.Err != "" {
		sh.mu.Lock()
		if sh.cur == run {
			sh.cur = nil
		}
		sh.mu.Unlock()
		return run, rep, err
	}
	sh.mu.Lock()
	rep.PID, rep.Start = run.pid, run.start // as checked; 0 when the shim named another's
	sh.mu.Unlock()
	return run, rep, nil
}

// brokenErr is why the shim broke the wire's rules while it served run,
// or nil.
func (run *shimRun) brokenErr() error {
	run.sh.mu.Lock()
	defer run.sh.mu.Unlock()
	return run.broken
}

// used is what the run's reaped processes used so far, and whether that
// is all of them (the subtree is empty).
func (run *shimRun) used() (Usage, bool) {
	run.sh.mu.Lock()
	defer run.sh.mu.Unlock()
	return run.usage, run.empty
}

// members asks for the subtree: empty only on the kernel's word.
func (run *shimRun) members() ([]Member, error) {
	rep, err := run.sh.call(run, frMembers, func(seq uint32) wireMsg { return &shimReq{Seq: seq} }, nil)
	if err != nil {
		return nil, err
	}
	if rep.Err != "" {
		return nil, fmt.Errorf("exec: shim %d: %s", run.sh.pid, rep.Err)
	}
	if rep.Empty {
		return nil, nil
	}
	run.sh.mu.Lock()
	if run.sh.cur == run && rep.Usage.Processes >= run.usage.Processes {
		run.usage = rep.Usage
	}
	run.sh.mu.Unlock()
	out := make([]Member, len(rep.Members))
	for i, m := range rep.Members {
		out[i] = Member{PID: int(m[0]), Start: m[1]}
	}
	run.sh.mu.Lock()
	run.known = append(run.known[:0], out[:min(len(out), maxKnownMembers)]...)
	run.sh.mu.Unlock()
	return out, nil
}

// maxKnownMembers bounds what relayd remembers of a subtree for a lost
// shim's fallback.
const maxKnownMembers = 4096

// signalLost is the fallback when the shim is lost (killed, stopped and
// then killed by relayd): its subtree went to relayd, where no execution
// claims it. What relayd knows was this execution's is signalled: the
// subject and what the shim last listed, each by pid and start time, and
// every process that now descends from one of them. Nothing of it is
// evidence. Only what still descends from the shim, or from relayd through
// no other shim of relayd's, is taken: a shim that lied in its lists
// cannot make relayd signal another execution's processes (rule 6.13).
func (run *shimRun) signalLost(sig syscall.Signal) {
	run.sh.mu.Lock()
	roots := append([]Member{{PID: run.pid, Start: run.start}}, run.known...)
	run.sh.mu.Unlock()
	table := make(map[int]procEntry)
	buf := make([]byte, 1024)
	others := run.sh.pool.otherShims(run.sh)
	var queue []int
	for _, m := range roots {
		if m.PID <= 0 || m.Start == 0 {
			continue
		}
		if e, err := readStat("/proc", m.PID, buf); err == nil && e.start == m.Start && run.lostMember(m.PID, others, buf) {
			queue = append(queue, m.PID)
		}
	}
	walkInto("/proc", os.Getpid(), table, queue, buf)
	for pid, e := range table {
		if !e.dead() {
			_ = signalMember("/proc", Member{PID: pid, Start: e.start}, sig)
		}
	}
}

// maxLostDepth bounds the walk up from a lost shim's member.
const maxLostDepth = 64

// lostMember reports whether pid, listed by run's lost shim, descends from
// that shim, or, its shim gone, from relayd (the subreaper its orphans
// went to) through no other shim of relayd's (others).
func (run *shimRun) lostMember(pid int, others map[int]bool, buf []byte) bool {
	self := os.Getpid()
	for range maxLostDepth {
		e, err := readStat("/proc", pid, buf)
		switch {
		case err != nil:
			return false
		case e.ppid == run.sh.pid:
			return true
		case e.ppid == self:
			return !others[pid]
		case e.ppid <= 1:
			return false
		}
		pid = e.ppid
	}
	return false
}

// otherShims is the pids of the live shims of p but sh.
func (p *Shims) otherShims(sh *shim) map[int]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]bool, len(p.all))
	for o := range p.all {
		if o != sh {
			out[o.pid] = true
		}
	}
	return out
}

func (run *shimRun) signal(sig syscall.Signal) error { return run.signalSome(sig, nil) }

// signalSome signals members (from a look of this run), or the whole
// subtree when members is nil.
func (run *shimRun) signalSome(sig syscall.Signal, members []Member) error {
	var list [][2]uint64
	if members != nil {
		list = make([][2]uint64, len(members))
		for i, m := range members {
			list[i] = [2]uint64{uint64(m.PID), m.Start}
		}
	}
	rep, err := run.sh.call(run, frSignal, func(seq uint32) wireMsg { return &shimReq{Seq: seq, Sig: int(sig), Members: list} }, nil)
	if errors.Is(err, ErrShimLost) {
		run.signalLost(sig)
	}
	if err != nil {
		return err
	}
	if rep.Err != "" {
		return fmt.Errorf("exec: shim %d: %s", run.sh.pid, rep.Err)
	}
	return nil
}

// sync has the shim reap what has ended: a subject's end it collects
// reaches run.exited before sync returns.
func (run *shimRun) sync() {
	_, _ = run.sh.call(run, frSync, func(seq uint32) wireMsg { return &shimReq{Seq: seq} }, nil)
}

// leaveAlone tells the shim that what remains is left alone (rule 6.1):
// if relayd dies, the shim exits without signalling it.
func (run *shimRun) leaveAlone() {
	sh := run.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	run.left = true
	if sh.cur == run && !sh.dead {
		_ = sh.write(frLeave, shimNone{}, nil)
	}
}

// close says relayd no longer needs the subtree. A subtree that is not
// empty and not left alone (a settlement that could not be confirmed)
// makes the shim retire: it settles what it can by itself, and takes no
// other execution.
func (run *shimRun) close() {
	sh := run.sh
	sh.mu.Lock()
	pending := sh.cur == run && !run.left
	sh.mu.Unlock()
	if !pending {
		return
	}
	run.sync() // an empty subtree the shim has not reported yet: the shim goes back to the pool
	sh.mu.Lock()
	retire := sh.cur == run
	sh.mu.Unlock()
	if retire {
		sh.retire()
	}
}
