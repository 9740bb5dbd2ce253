package exec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Entering a cgroup leaf without clone3. Where clone3 is refused (Docker's
// default seccomp profile answers ENOSYS), a subject cannot be born inside
// its leaf. relayd then starts it through its own binary, re-executed as a
// helper: the helper writes its pid into the leaf's cgroup.procs, through a
// descriptor relayd opened (the kernel checks the opener's credentials, so
// this works for a --subject-user too), and only then execs the subject.
// Until it execs, the helper runs nothing of the subject's and forks
// nothing, so nothing of the subject is ever outside the leaf. It costs one
// exec of relayd's binary per execution.

// enterArg0 is argv[0] of the helper; the subject's path and argv follow.
// The subject's environment is the helper's with every entry behind
// enterEnvPrefix, so that no variable meant for the subject (GOMEMLIMIT=bad
// stops a Go program before main) is seen by the helper's Go runtime. It is
// not put in the arguments: any user can read a process's command line, and
// the environment holds credentials.
const (
	enterArg0      = "relayd-enter-cgroup"
	enterEnvPrefix = "RELAYD_ENTER_ENV:"
)

// The helper's descriptors: the leaf's cgroup.procs, and the write end of
// a close-on-exec pipe on which it reports a failure (a stage byte and an
// errno); relayd reads end of file when the subject's exec succeeded.
const (
	enterProcsFD  = 3
	enterStatusFD = 4
)

// Stages the helper reports a failure at.
const (
	enterStageCgroup = 'c'
	enterStageExec   = 'e'
)

// enterTimeout bounds the wait for the helper's exec.
const enterTimeout = 10 * time.Second

// EnterCgroupHelper does the helper's work, and does not return, when this
// process was started as the helper (argv[0] says so); otherwise it returns
// at once. relayd's main calls it before anything else.
func EnterCgroupHelper() {
	if len(os.Args) < 3 || os.Args[0] != enterArg0 {
		return
	}
	path, argv := os.Args[1], os.Args[2:]
	fail := func(stage byte, err error) {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		var b [5]byte
		b[0] = stage
		binary.NativeEndian.PutUint32(b[1:], uint32(errno))
		_, _ = unix.Write(enterStatusFD, b[:])
		os.Exit(127)
	}
	var environ []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, enterEnvPrefix); ok {
			environ = append(environ, v)
		}
	}
	if _, err := unix.Write(enterProcsFD, []byte(strconv.Itoa(os.Getpid()))); err != nil {
		fail(enterStageCgroup, err)
	}
	unix.Close(enterProcsFD)
	unix.CloseOnExec(enterStatusFD)
	fail(enterStageExec, unix.Exec(path, argv, environ))
}

// enterer is a scope whose subject enters it by itself, through the helper:
// procsFile is the scope's cgroup.procs, opened by prepare, or nil when the
// subject is born inside the scope.
type enterer interface {
	procsFile() *os.File
}

// launch starts path in scope, which prepare set up in attr: born inside it
// where it can be, else through the helper. Its errors are ForkExec's, and
// a *SpawnError when the helper could not enter the scope.
func launch(r *Reaper, scope Scope, path string, argv []string, attr *syscall.ProcAttr) (pid, tid int, exited <-chan Status, err error) {
	var procs *os.File
	if e, ok := scope.(enterer); ok {
		procs = e.procsFile()
	}
	if procs == nil {
		if attr.Sys != nil && attr.Sys.UseCgroupFD && faultNoClone3() {
			return 0, 0, nil, fmt.Errorf("exec.ForkExec %s: %w", path, syscall.ENOSYS)
		}
		return r.ForkExec(path, argv, attr)
	}
	if len(attr.Files) != enterProcsFD {
		return 0, 0, nil, fmt.Errorf("exec.launch: %d descriptors for the subject; the helper needs exactly 3", len(attr.Files))
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return 0, 0, nil, fmt.Errorf("exec.launch: status pipe: %w", err)
	}
	defer statusR.Close()
	a := *attr
	a.Files = append(append([]uintptr(nil), attr.Files...), procs.Fd(), statusW.Fd())
	a.Env = make([]string, len(attr.Env))
	for i, kv := range attr.Env {
		a.Env[i] = enterEnvPrefix + kv
	}
	// /proc/self/exe is relayd's binary in the child until it execs, even
	// if the file was replaced or removed since relayd started.
	pid, tid, exited, err = r.ForkExec("/proc/self/exe", append([]string{enterArg0, path}, argv...), &a)
	statusW.Close()
	if err != nil {
		return 0, 0, nil, err
	}
	var b [5]byte
	_ = statusR.SetReadDeadline(time.Now().Add(enterTimeout))
	n, rerr := io.ReadFull(statusR, b[:])
	if n == 0 && errors.Is(rerr, io.EOF) {
		return pid, tid, exited, nil // the subject's exec closed the pipe
	}
	if n != len(b) {
		// No word within enterTimeout, or a torn report: the helper is
		// ended, through a pidfd opened while it was still unreaped.
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			select {
			case <-exited: // reaped before the pidfd was open: the pid may be another's now
			default:
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			unix.Close(fd)
		}
		waitBounded(exited)
		return 0, 0, nil, &SpawnError{Err: fmt.Errorf("%w: the helper entering %s did not report: %v", ErrScopeUnavailable, path, rerr), Stage: "scope"}
	}
	waitBounded(exited) // it exits at once after its report
	errno := syscall.Errno(binary.NativeEndian.Uint32(b[1:]))
	if b[0] == enterStageCgroup {
		return 0, 0, nil, &SpawnError{Err: fmt.Errorf("%w: cannot move the subject into its cgroup leaf: %v", ErrScopeUnavailable, errno), Stage: "scope"}
	}
	return 0, 0, nil, fmt.Errorf("exec.ForkExec %s: %w", path, errno)
}

// refusedClone3 says whether a spawn failed because clone3 is refused: a
// seccomp filter's ENOSYS (Docker's default profile) or EPERM (older
// profiles, which did not know the call).
func refusedClone3(err error) bool {
	return errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM)
}

// waitBounded waits for a helper that ended or is ending to be reaped, at
// most enterTimeout: the reaper delivers its status in any case.
func waitBounded(exited <-chan Status) {
	select {
	case <-exited:
	case <-time.After(enterTimeout):
	}
}
