package exec

import (
	"errors"
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
	// Credential, when set, runs the subject as another user: uid, gid and
	// supplementary groups are switched before exec.
	Credential *syscall.Credential
}

// Subject is a started subject.
type Subject struct {
	PID     int
	Scope   Scope
	Started time.Time
	exited  <-chan Status
	stdout  *drain
	stderr  *drain // nil when stderr is /dev/null
	// stderrCut says whether CutStdout cuts stderr's capture too.
	stderrCut bool
}

// Exited receives the subject's status once, when the reaper collects it.
func (s *Subject) Exited() <-chan Status { return s.exited }

// CutStdout ends the stdout capture (and stderr's, when Spec.Stderr was
// given): every byte delivered so far plus what is already waiting in the
// pipe. Call it once the subject has exited (or been stopped); it waits at
// most limit. Output that survivors write later is still drained (and
// copied), never captured.
func (s *Subject) CutStdout(limit time.Duration) {
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

// Start starts spec in scope: in a new session, with stdin /dev/null,
// stdout on a pipe that is drained at once, and stderr on a pipe that is
// drained into spec.Stderr and spec.StderrCopy, or, when neither is
// wanted, on /dev/null: the bytes are dropped either way, and a pipe, its drain and
// its poller registration cost the round trip of every execute.
func Start(r *Reaper, scope Scope, spec Spec) (*Subject, error) {
	devnull, err := devNull()
	if err != nil {
		return nil, &SpawnError{Err: err, Stage: "open /dev/null"}
	}
	outR, outW, err := pipe(stdoutPipeBytes)
	if err != nil {
		return nil, &SpawnError{Err: err, Stage: "stdout pipe"}
	}
	toClose := []*os.File{outR, outW}
	closeAll := func() {
		for _, f := range toClose {
			f.Close()
		}
	}
	stderr := devnull.w
	var errR, errW *os.File
	if spec.StderrCopy != nil || spec.Stderr != nil {
		if errR, errW, err = pipe(0); err != nil {
			closeAll()
			return nil, &SpawnError{Err: err, Stage: "stderr pipe"}
		}
		toClose = append(toClose, errR, errW)
		stderr = errW.Fd()
	}
	sys := &syscall.SysProcAttr{Credential: spec.Credential}
	if err := scope.prepare(sys); err != nil {
		closeAll()
		return nil, &SpawnError{Err: fmt.Errorf("%w: %v", ErrScopeUnavailable, err), Stage: "scope"}
	}
	attr := &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: []uintptr{devnull.r, outW.Fd(), stderr},
		Sys:   sys,
	}
	pid, tid, exited, err := launch(r, scope, spec.Path, spec.Argv, attr)
	outW.Close()
	if errW != nil {
		errW.Close()
	}
	if err != nil {
		if a, ok := scope.(interface{ aborted() }); ok {
			a.aborted()
		}
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		var se *SpawnError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, &SpawnError{Err: errors.Unwrap(err), Stage: "exec"}
	}
	if m, ok := scope.(forkMarker); ok {
		var st unix.Stat_t
		if unix.Fstat(int(outR.Fd()), &st) != nil {
			st.Ino = 0
		}
		m.forked(tid, st.Ino)
	}
	scope.started(pid)
	subj := &Subject{
		PID:     pid,
		Scope:   scope,
		Started: time.Now(),
		exited:  exited,
		stdout:  newDrain(outR, spec.Stdout, spec.StdoutCopy),
	}
	if errR != nil {
		subj.stderr = newDrain(errR, spec.Stderr, spec.StderrCopy)
		subj.stderrCut = spec.Stderr != nil
	}
	return subj, nil
}

// forkMarker is a scope that wants to know which relayd thread forked its
// subject (its clone(CLONE_PARENT) children become that thread's) and the
// subject's stdout pipe, by which it can tell processes that keep it (the
// process-group mechanism).
type forkMarker interface {
	forked(tid int, pipeIno uint64)
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

// pipe makes a pipe whose read end is non-blocking, so that Go's poller
// serves it and a read deadline can interrupt it; size, when not 0, is the
// capacity to ask for.
func pipe(size int) (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, err
	}
	if size > 0 {
		_, _ = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, size)
	}
	return os.NewFile(uintptr(p[0]), "subject-output"), os.NewFile(uintptr(p[1]), "subject-input"), nil
}
