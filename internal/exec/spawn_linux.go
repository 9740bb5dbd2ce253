package exec

import (
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec is one subject to start. The program is not looked up: Path is what
// execve gets (internal/env resolves it), and no shell is involved.
type Spec struct {
	Path       string
	Argv       []string // argv[0] included
	Env        []string
	Dir        string
	Stdout     io.Writer      // captures stdout until the subject exits; nil drops it
	StdoutCopy io.WriteCloser // complete copy of stdout, closed at EOF; may be nil
	Stderr     io.Writer      // captures stderr until the subject exits, like Stdout; nil drops it
	StderrCopy io.WriteCloser // complete copy of stderr, closed at EOF; may be nil
	// MergeStderr makes the subject's stderr its stdout pipe, as a docker
	// exec without a terminal merges them: descriptors 1 and 2 are the
	// same pipe, so the kernel keeps the order of what both write, and
	// Stderr and StderrCopy are unused.
	MergeStderr bool
	// Credential, when set, runs the subject as another user: uid, gid and
	// supplementary groups are switched before exec.
	Credential *syscall.Credential
	// Stdin makes the subject's stdin a pipe whose write end is
	// Subject.Stdin; without it stdin is /dev/null. With Pty, Subject.Stdin
	// writes keystrokes to the terminal instead.
	Stdin bool
	// Pty, when not nil, runs the subject on a new terminal (pty_linux.go):
	// the replica is its stdin, stdout, stderr and controlling terminal,
	// relayd keeps the master, and what the terminal shows is drained
	// into Stdout and StdoutCopy. Stderr and StderrCopy are then unused.
	Pty *Pty
	// Rlimits are set on the subject before it starts (protocol 4.8).
	Rlimits []Rlimit
	// Status, when not nil, is the subject's descriptor 3: a shell
	// session's status channel (protocol 4.7), the one descriptor besides
	// 0, 1 and 2 that rule 6.13 lets a subject hold. The caller keeps and
	// closes it.
	Status *os.File
}

// Subject is a started subject.
type Subject struct {
	PID   int
	Scope Scope
	// Start is the subject's start time (clock ticks since boot): with
	// PID, its identity.
	Start   uint64
	Started time.Time
	// Stdin is the write end of the subject's stdin (Spec.Stdin), for the
	// poller (a write waits, and Close interrupts it); the caller closes it.
	Stdin  *os.File
	tty    *os.File // the terminal's master (Spec.Pty), which the stdout drain reads and closes
	run    *shimRun
	stdout *drain
	stderr *drain // nil when stderr is /dev/null
	// stderrCut says whether CutStdout cuts stderr's capture too.
	stderrCut bool
}

// Exited receives the subject's status once, when its shim reaps it.
func (s *Subject) Exited() <-chan Status { return s.run.exited }

// Usage is what the processes of the subject's scope that have ended used
// so far: those reaped when the subject's status came (or by the last
// look at the scope), all of them once the scope is empty, which complete
// says.
func (s *Subject) Usage() (u Usage, complete bool) { return s.run.used() }

// Lost is closed if the subject's shim dies or stops answering before the
// subject's end was collected: nothing more can be known of it.
func (s *Subject) Lost() <-chan struct{} { return s.run.lost }

// Broken says why the subject's shim broke the wire's rules (a forged or
// malformed frame, an exit relayd's own pidfd of the subject contradicts),
// or nil. Such a shim is killed and Lost closed: nothing it said counts,
// and the execution ends failed, never exited or settled (rule 6.13).
func (s *Subject) Broken() error { return s.run.brokenErr() }

// Sync has the subject's shim collect what has ended: if the subject has
// exited, Exited holds its status when Sync returns (rule 6.3).
func (s *Subject) Sync() { s.run.sync() }

// CutStdout ends the stdout capture (and stderr's, when Spec.Stderr was
// given): every byte delivered so far plus what is already waiting in the
// pipe. Call it once the subject has exited (or been stopped); it waits at
// most limit. Output that survivors write later is still drained (and
// copied), never captured.
func (s *Subject) CutStdout(limit time.Duration) {
	if s.tty != nil {
		limit = s.ttySettle(limit)
	}
	if !s.stderrCut {
		s.stdout.cut(limit)
		return
	}
	deadline := time.Now().Add(limit)
	s.stdout.startCut()
	s.stderr.startCut()
	s.stdout.waitCut(time.Until(deadline))
	s.stderr.waitCut(time.Until(deadline))
}

// Flush returns once every byte the subject wrote to its output pipes
// (or its terminal) before the call has been delivered to the captures,
// or after limit: a shell session's command ends when its status comes,
// and what it wrote before is then in the pipes (protocol 4.7). A
// terminal's bytes reach the master through the kernel's flip buffer a
// moment late, where TIOCINQ does not count them; the drain reads the
// master until it has nothing, which waits for them (readWaiting). The
// capture goes on.
func (s *Subject) Flush(limit time.Duration) {
	deadline := time.Now().Add(limit)
	s.stdout.flush(limit)
	if s.stderr != nil {
		s.stderr.flush(time.Until(deadline))
	}
}

// OutputClosed is closed once both output pipes reached EOF: no process
// holds them any more.
func (s *Subject) OutputClosed() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-s.stdout.eof
		if s.stderr != nil {
			<-s.stderr.eof
		}
		close(ch)
	}()
	return ch
}

// SpawnError is a failure to start the subject; nothing ran.
type SpawnError struct {
	Err   error // ErrScopeUnavailable, or the errno of fork/exec
	Stage string
}

func (e *SpawnError) Error() string { return fmt.Sprintf("exec: %s: %v", e.Stage, e.Err) }
func (e *SpawnError) Unwrap() error { return e.Err }

// Start starts spec in scope through a shim of shims: in a new session,
// with stdin /dev/null (a pipe with Spec.Stdin), stdout on a pipe that is drained at once, and
// stderr on a pipe that is drained into spec.Stderr and spec.StderrCopy,
// or, when neither is wanted, on /dev/null: the bytes are dropped either
// way, and a pipe, its drain and its poller registration cost the round
// trip of every execute.
func Start(shims *Shims, scope Scope, spec Spec) (*Subject, error) {
	if spec.Pty != nil {
		return startPty(shims, scope, spec)
	}
	devnull, err := devNull()
	if err != nil {
		return nil, &SpawnError{Err: err, Stage: "open /dev/null"}
	}
	// The write ends only go to the shim: raw descriptors, closed here once
	// sent (no *os.File: one fcntl, an allocation and a finalizer less
	// each, on every execute).
	outR, outW, err := pipe(stdoutPipeBytes)
	if err != nil {
		return nil, &SpawnError{Err: err, Stage: "stdout pipe"}
	}
	toClose := []*os.File{outR}
	rawClose := []int{outW}
	closeAll := func() {
		for _, f := range toClose {
			f.Close()
		}
		closeFDs(rawClose)
	}
	stderr := int(devnull.w)
	var errR *os.File
	switch {
	case spec.MergeStderr:
		stderr = outW
	case spec.StderrCopy != nil || spec.Stderr != nil:
		var errW int
		if errR, errW, err = pipe(0); err != nil {
			closeAll()
			return nil, &SpawnError{Err: err, Stage: "stderr pipe"}
		}
		toClose = append(toClose, errR)
		rawClose = append(rawClose, errW)
		stderr = errW
	}
	stdin := int(devnull.r)
	var inW *os.File
	if spec.Stdin {
		var inR int
		if inR, inW, err = stdinPipe(); err != nil {
			closeAll()
			return nil, &SpawnError{Err: err, Stage: "stdin pipe"}
		}
		toClose = append(toClose, inW)
		rawClose = append(rawClose, inR)
		stdin = inR
	}
	mode, cgFDs, err := scope.enter()
	if err != nil {
		closeAll()
		return nil, &SpawnError{Err: fmt.Errorf("%w: %v", ErrScopeUnavailable, err), Stage: "scope"}
	}
	run, pid, start, err := startShimmed(shims, spec, mode, append(subjectFDs(spec, stdin, outW, stderr), cgFDs...))
	closeFDs(cgFDs)
	closeFDs(rawClose) // the subject's ends: the shim has its own now
	if err != nil {
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		if inW != nil {
			inW.Close()
		}
		return nil, err
	}
	scope.started(run)
	subj := &Subject{
		PID:     pid,
		Scope:   scope,
		Start:   start,
		Started: time.Now(),
		Stdin:   inW,
		run:     run,
		stdout:  newDrain(outR, spec.Stdout, spec.StdoutCopy),
	}
	if errR != nil {
		subj.stderr = newDrain(errR, spec.Stderr, spec.StderrCopy)
		subj.stderrCut = spec.Stderr != nil
	}
	return subj, nil
}

// startPty is Start for a subject on a terminal: the replica is its
// descriptors 0, 1 and 2 (the same open file) and, through the shim's
// Setctty, its controlling terminal; the master stays here, drained like
// a stdout pipe (its reads fail with EIO once no process holds the
// replica, which ends the drain as EOF does), and, with Spec.Stdin, a
// duplicate of it takes the keystrokes.
func startPty(shims *Shims, scope Scope, spec Spec) (*Subject, error) {
	master, replica, err := openPty(*spec.Pty)
	if err != nil {
		return nil, &SpawnError{Err: err, Stage: "pty"}
	}
	if c := spec.Credential; c != nil {
		// The subject's own terminal, as login and sshd give it: a program
		// that opens it again by name (/proc/self/fd/0, ttyname) may.
		if err := replica.Chown(int(c.Uid), -1); err == nil {
			_ = replica.Chmod(0o620)
		}
	}
	var keys *os.File
	if spec.Stdin {
		fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			master.Close()
			replica.Close()
			return nil, &SpawnError{Err: err, Stage: "pty"}
		}
		keys = os.NewFile(uintptr(fd), "pty-keys")
	}
	fail := func(err error) (*Subject, error) {
		master.Close()
		if keys != nil {
			keys.Close()
		}
		return nil, err
	}
	mode, cgFDs, err := scope.enter()
	if err != nil {
		replica.Close()
		return fail(&SpawnError{Err: fmt.Errorf("%w: %v", ErrScopeUnavailable, err), Stage: "scope"})
	}
	r := int(replica.Fd())
	run, pid, start, err := startShimmed(shims, spec, mode, append(subjectFDs(spec, r, r, r), cgFDs...))
	closeFDs(cgFDs)
	replica.Close()
	if err != nil {
		return fail(err)
	}
	scope.started(run)
	return &Subject{
		PID:     pid,
		Scope:   scope,
		Start:   start,
		Started: time.Now(),
		Stdin:   keys,
		tty:     master,
		run:     run,
		stdout:  newTermDrain(master, spec.Stdout, spec.StdoutCopy),
	}, nil
}

// subjectFDs are the descriptors the subject gets, in order from 0: its
// stdin, stdout and stderr, and a session's status channel (Spec.Status).
func subjectFDs(spec Spec, stdin, stdout, stderr int) []int {
	if spec.Status == nil {
		return []int{stdin, stdout, stderr}
	}
	return []int{stdin, stdout, stderr, int(spec.Status.Fd())}
}

// startShimmed starts spec on a shim with the descriptors fds (stdin,
// stdout, stderr, then the cgroup's for mode). Its errors are
// *SpawnError.
func startShimmed(shims *Shims, spec Spec, mode int, fds []int) (*shimRun, int, uint64, error) {
	if mode == cgroupClone3 && faultNoClone3() {
		return nil, 0, 0, &SpawnError{Err: syscall.ENOSYS, Stage: "exec"}
	}
	req := shimStart{Path: spec.Path, Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, Cgroup: mode,
		Grace: int64(shims.grace), Timeout: int64(shims.timeout), DropCaps: shims.dropCaps, Umask: uint32(shims.umask), Tty: spec.Pty != nil,
		Rlimits: spec.Rlimits, Status: spec.Status != nil}
	if c := spec.Credential; c != nil {
		req.Cred = &shimCred{UID: c.Uid, GID: c.Gid, Groups: c.Groups}
	}
	var sh *shim
	var run *shimRun
	var rep shimReply
	key := rlimitsKey(spec.Rlimits)
	for try := 0; ; try++ {
		var err error
		if sh, err = shims.get(key); err != nil {
			return nil, 0, 0, &SpawnError{Err: fmt.Errorf("%w: %v", ErrScopeUnavailable, err), Stage: "scope"}
		}
		run, rep, err = sh.startOn(req, fds)
		if err == nil && rep.Stage == "shim-cpu" && try == 0 {
			// A shim that has worked long cannot carry cpuSeconds
			// through its fork (usage_linux.go): a fresh one can.
			sh.retire()
			continue
		}
		if err != nil {
			sh.kill()
			return nil, 0, 0, &SpawnError{Err: fmt.Errorf("%w: %v", ErrScopeUnavailable, err), Stage: "scope"}
		}
		break
	}
	switch {
	case rep.Err != "" && rep.Stage == "limits":
		shims.put(sh)
		return nil, 0, 0, &SpawnError{Err: fmt.Errorf("%w: cannot set the limits: %s", ErrScopeUnavailable, rep.Err), Stage: "limits"}
	case rep.Err != "" && rep.Stage == "exec" && rep.Errno != 0:
		shims.put(sh)
		return nil, 0, 0, &SpawnError{Err: syscall.Errno(rep.Errno), Stage: "exec"}
	case rep.Err != "":
		shims.put(sh)
		return nil, 0, 0, &SpawnError{Err: fmt.Errorf("%w: %s", ErrScopeUnavailable, rep.Err), Stage: "scope"}
	}
	return run, rep.PID, rep.Start, nil
}

// nullFDs are /dev/null for reading (every subject's stdin) and for writing
// (stderr when nothing keeps it), opened once for the life of the process
// (close-on-exec; the child gets dups).
type nullFDs struct{ r, w uintptr }

// devNullFDs holds nullFDs once both are open. Only success is kept: a
// failure (EMFILE when relayd is out of descriptors) fails this execute
// alone, and the next one tries again (rule 6.11). sync.OnceValues would
// keep the first error for the life of the process.
var devNullFDs struct {
	mu  sync.Mutex
	fds *nullFDs
}

func devNull() (nullFDs, error) {
	devNullFDs.mu.Lock()
	defer devNullFDs.mu.Unlock()
	if devNullFDs.fds != nil {
		return *devNullFDs.fds, nil
	}
	r, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nullFDs{}, err
	}
	w, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(r)
		return nullFDs{}, err
	}
	devNullFDs.fds = &nullFDs{uintptr(r), uintptr(w)}
	return *devNullFDs.fds, nil
}

// stdoutPipeBytes is the capacity asked for the stdout pipe: with 1 MiB
// instead of the default 64 KiB a fast writer blocks less often and each
// read takes more, which moved the 1 GiB output benchmark from 0.82 s to
// 0.72 s. The kernel may refuse (pipe-max-size, or an unprivileged user
// over pipe-user-pages-soft); the pipe then keeps its default size.
const stdoutPipeBytes = 1 << 20

// stdinPipe makes the pipe of a subject's stdin: its write end is
// non-blocking, so that Go's poller serves it and Close interrupts a write
// the subject does not take.
func stdinPipe() (r int, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	if err := setNonblock(p[1]); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, err
	}
	return p[0], os.NewFile(uintptr(p[1]), "subject-stdin-writer"), nil
}

// pipe makes a pipe whose read end is non-blocking, so that Go's poller
// serves it and a read deadline can interrupt it; size, when not 0, is the
// capacity to ask for. The write end is a raw descriptor, close-on-exec,
// blocking, for the subject.
func pipe(size int) (r *os.File, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	if err := setNonblock(p[0]); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	if size > 0 {
		_, _ = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, size)
	}
	return os.NewFile(uintptr(p[0]), "subject-output"), p[1], nil
}

// setNonblock makes a fresh pipe end non-blocking: it has no other status
// flag to keep (F_SETFL leaves the access mode alone), so one fcntl where
// unix.SetNonblock reads the flags first.
func setNonblock(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_NONBLOCK)
	return err
}
