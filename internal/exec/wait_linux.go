package exec

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// WaitGone waits, until deadline, for process pid to have ended: exited
// (a zombie its parent has yet to reap) or gone. It reports whether it saw
// that. It waits on a pidfd, which becomes readable when the process
// exits, so it returns as soon as it does, with no polling; where pidfd
// is missing it looks at /proc/PID/stat every millisecond.
//
// pid is not the caller's child: nothing is reaped, and a pid reused
// since it was learnt is the caller's risk (it waits for the new one).
func WaitGone(pid int, deadline time.Time) bool {
	if pid <= 0 {
		return true
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return true // reaped already
	case err != nil:
		return pollGone(pid, deadline)
	}
	defer unix.Close(fd)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		ms := int((left + time.Millisecond - 1) / time.Millisecond)
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return pollGone(pid, deadline)
		case n > 0:
			return true
		}
	}
}

// pollGone is WaitGone without a pidfd.
func pollGone(pid int, deadline time.Time) bool {
	buf := make([]byte, 1024)
	for {
		e, err := readStat("/proc", pid, buf)
		if err != nil || e.state == 'Z' || e.state == 'X' || e.state == 'x' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
