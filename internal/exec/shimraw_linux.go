package exec

import (
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The shim's system calls between its waits, made without telling Go's
// scheduler (syscall.RawSyscall). Each is short and, on the descriptors the
// shim uses them on, does not wait for long: the shim waits only in
// shimPoll.wait, parked in Go's poller. Through syscall.Syscall, a call
// wakes the runtime's monitor thread (sysmon) if it sleeps, and sysmon then
// polls every 20 µs until the shim's P is idle again. A shim that waited in
// a blocking poll kept its P in a system call, which sysmon watches too: at
// 32 sessions, 17 to 20 of sysmon's sleeps and as many wake-ups per
// execute, a fifth of the shim's CPU. Go's own fork and exec still wake it
// once per execute.

func rawRead(fd int, b []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, b) }
func rawWrite(fd int, b []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, b) }

// rawIO is read or write (trap) of b on fd.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawClose(fd int) {
	_, _, _ = syscall.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

func rawWait4(pid int, ws *unix.WaitStatus, options int) (int, error) {
	r, _, e := syscall.RawSyscall6(unix.SYS_WAIT4, uintptr(pid), uintptr(unsafe.Pointer(ws)), uintptr(options), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawWaitid(idtype, id int, info *unix.Siginfo, options int) error {
	_, _, e := syscall.RawSyscall6(unix.SYS_WAITID, uintptr(idtype), uintptr(id), uintptr(unsafe.Pointer(info)), uintptr(options), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// rawRecvmsg reads into p, and descriptors into oob, from a socket.
func rawRecvmsg(fd int, p, oob []byte, flags int) (n, oobn int, err error) {
	var msg unix.Msghdr
	iov := unix.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	msg.Iov, msg.Iovlen = &iov, 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := syscall.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}

func rawEpollCtl(ep, op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	_, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// rawEpollReady is what of ep's set is ready now, without waiting.
func rawEpollReady(ep int, evs []unix.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// shimPoll is what the shim waits on: its own epoll set of relayd's
// socket and the subject's pidfd, itself registered with Go's poller, so
// that a waiting shim is a parked goroutine (its P idle, sysmon asleep),
// not a thread in a system call that sysmon keeps watching, and the thread
// that the poller wakes runs the loop.
type shimPoll struct {
	ep   int
	sock int
	f    *os.File
	rc   syscall.RawConn
	evs  [4]unix.EpollEvent
}

func newShimPoll(sock int) (*shimPoll, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := rawEpollCtl(ep, unix.EPOLL_CTL_ADD, sock, unix.EPOLLIN); err != nil {
		unix.Close(ep)
		return nil, err
	}
	// A non-blocking descriptor is one os.NewFile gives to the poller.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, err
	}
	f := os.NewFile(uintptr(ep), "shim-poll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &shimPoll{ep: ep, sock: sock, f: f, rc: rc}, nil
}

// add puts the subject's pidfd in the set; closing it takes it out.
func (w *shimPoll) add(pidfd int) error {
	return rawEpollCtl(w.ep, unix.EPOLL_CTL_ADD, pidfd, unix.EPOLLIN)
}

// wait blocks until the socket or the pidfd is ready, or, when tick is
// above 0, tick has passed; it returns what it found (waitSocket,
// waitSubject, waitTick).
func (w *shimPoll) wait(tick time.Duration) (int, error) {
	var deadline time.Time
	if tick > 0 {
		deadline = time.Now().Add(tick)
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	ready := 0
	var werr error
	err := w.rc.Read(func(uintptr) bool {
		n, err := rawEpollReady(w.ep, w.evs[:])
		if err == unix.EINTR {
			return false
		}
		if err != nil {
			werr = err
			return true
		}
		for _, ev := range w.evs[:n] {
			if int(ev.Fd) == w.sock {
				ready |= waitSocket
			} else {
				ready |= waitSubject
			}
		}
		return n > 0
	})
	switch {
	case werr != nil:
		return 0, werr
	case errors.Is(err, os.ErrDeadlineExceeded):
		return waitTick, nil
	case err != nil:
		return 0, err
	}
	return ready, nil
}
