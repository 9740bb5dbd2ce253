package exec

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Pty asks for a subject on a terminal of its own (protocol 4.7): the
// size it starts with. As runc's console socket and containerd's console
// do, the supervisor keeps the master and the subject gets the replica as
// stdin, stdout, stderr and controlling terminal, and nothing else.
type Pty struct {
	Rows, Cols uint16
}

// openPty makes a new pseudo-terminal of size p: the master, non-blocking
// so that Go's poller serves its reads and writes, and the replica, both
// close-on-exec and neither relayd's controlling terminal. The replica is
// opened from the master (TIOCGPTPEER), never by a path the subject could
// have a say in; a kernel before 4.13 falls back to /dev/pts/N.
func openPty(p Pty) (master, replica *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		unix.Close(m)
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlock the pty: %w", err))
	}
	if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: p.Rows, Col: p.Cols}); err != nil {
		return fail(fmt.Errorf("size the pty: %w", err))
	}
	rfd, err := ptyPeer(m)
	if err != nil {
		n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
		if err != nil {
			return fail(fmt.Errorf("the pty's number: %w", err))
		}
		if rfd, err = unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err != nil {
			return fail(fmt.Errorf("open the pty's replica: %w", err))
		}
	}
	return os.NewFile(uintptr(m), "pty-master"), os.NewFile(uintptr(rfd), "pty-replica"), nil
}

// ptyPeer opens the replica of the pty whose master is fd (TIOCGPTPEER),
// close-on-exec and no controlling terminal of relayd's.
func ptyPeer(fd int) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// Resize sets the size of the subject's terminal (TIOCSWINSZ on the
// master); the kernel sends SIGWINCH to the terminal's foreground process
// group. It fails when the subject has no terminal, or once nothing holds
// the replica any more.
func (s *Subject) Resize(rows, cols uint16) error {
	if s.tty == nil {
		return fmt.Errorf("exec: the subject has no terminal")
	}
	return TerminalOf(s.tty).SetSize(rows, cols)
}

// Terminal is relayd's end of a pseudo-terminal (its master, or a
// duplicate of it such as a pty subject's Stdin) and the few things
// relayd asks of it, as containerd's console package wraps a console:
// each an ioctl made through Go's poller (SyscallConn), so that a Close
// meanwhile cannot give the descriptor to another file.
type Terminal struct{ f *os.File }

// TerminalOf is the terminal whose master (or a duplicate of it) f is.
func TerminalOf(f *os.File) Terminal { return Terminal{f} }

func (t Terminal) control(fn func(fd int) error) error {
	rc, err := t.f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = fn(int(fd)) }); err != nil {
		return err
	}
	return ierr
}

// SetSize sets the terminal's size (TIOCSWINSZ).
func (t Terminal) SetSize(rows, cols uint16) error {
	return t.control(func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

// Foreground is the terminal's foreground process group (TIOCGPGRP).
func (t Terminal) Foreground() (int, error) {
	pg := -1
	err := t.control(func(fd int) (err error) {
		pg, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pg, err
}

// Canonical reports whether the terminal's reader takes its input a line
// at a time (ICANON, lines cut at the line discipline's 4 KiB), as
// opposed to a key at a time (readline's non-canonical mode).
func (t Terminal) Canonical() (bool, error) {
	canonical := true
	err := t.control(func(fd int) error {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err == nil {
			canonical = tio.Lflag&unix.ICANON != 0
		}
		return err
	})
	return canonical, err
}

// FlushInput drops what was typed into the terminal and not read yet
// (TCIFLUSH on its replica, opened from the master for it).
func (t Terminal) FlushInput() error {
	return t.control(func(fd int) error {
		peer, err := ptyPeer(fd)
		if err != nil {
			return err
		}
		defer unix.Close(peer)
		return unix.IoctlSetInt(peer, unix.TCFLSH, unix.TCIFLUSH)
	})
}

// ptySettle bounds the wait, before a terminal's capture is cut, for its
// EOF: unlike a pipe, what the subject wrote to its replica reaches the
// master a moment later (the kernel's flip buffer is pushed by a
// worker), so a cut at once could miss the subject's last line. The
// common end needs none of it: when the subject held the replica last,
// the master's read fails with EIO only once that worker has delivered
// everything, and the wait ends there. Only a process that still holds
// the terminal (a background job) makes the wait run its course.
const ptySettle = 100 * time.Millisecond

// ttySettle waits at most ptySettle (within limit) for the terminal's EOF
// and returns what is left of limit.
func (s *Subject) ttySettle(limit time.Duration) time.Duration {
	wait := min(limit, ptySettle)
	if wait <= 0 {
		return limit
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	began := time.Now()
	select {
	case <-s.stdout.eof:
	case <-t.C:
	}
	return limit - time.Since(began)
}
