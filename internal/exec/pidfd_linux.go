package exec

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// pidfd is a process pinned by a pidfd: while it is open, its pid names
// that process and no other, so that a check of its identity (its start
// time, its parent) made after it was opened still holds when a signal is
// sent through it. It is how relayd signals every process it did not
// start a moment ago (rule 6.13: a pid is acted on only with its start
// time).
type pidfd int

// openPidfd pins pid; unix.ESRCH when no process has it.
func openPidfd(pid int) (pidfd, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	return pidfd(fd), err
}

// signal sends sig through the pidfd; a process that ended since is no
// error.
func (p pidfd) signal(sig syscall.Signal) error {
	if err := unix.PidfdSendSignal(int(p), sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// running reports whether the pinned process still runs: its pidfd is not
// yet readable (a pidfd becomes readable when its process exits). A poll
// that fails is no evidence: the process counts as running.
func (p pidfd) running() bool {
	fds := []unix.PollFd{{Fd: int32(p), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return true
	}
	return n <= 0
}

func (p pidfd) close() { unix.Close(int(p)) }

// SignalPinned sends sig to pid through a pidfd, if still, asked once the
// pid is pinned, says it is still the process meant (nil: any). A process
// that is gone, or ends meanwhile, is no error.
func SignalPinned(pid int, sig syscall.Signal, still func() bool) error {
	fd, err := openPidfd(pid)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("exec: pidfd_open %d: %w", pid, err)
	}
	defer fd.close()
	if still != nil && !still() {
		return nil
	}
	if err := fd.signal(sig); err != nil {
		return fmt.Errorf("exec: signal %d: %w", pid, err)
	}
	return nil
}
