package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
)

// A session's command reads its stdin (input and stdin messages) from a
// FIFO (docs/scopes.md, "Shell sessions"): the shell cannot be handed a
// new descriptor per command, so its command line redirects the script's
// stdin from a path. Each command has a directory of its own, made by
// relayd in the temporary directory (mode 0711, relayd's: nobody else
// can add, rename or list anything in it), and in it one FIFO with a
// random name, mode 0600, owned by the session's user. relayd holds it
// open for reading and writing, so that the shell's open never waits for
// a writer; closing relayd's descriptor is the reader's end of file. Both
// are removed when the command ends; what a relayd that was killed left
// is removed by the next one that makes such a directory (sweepFifos).

// fifoPrefix begins the name of every FIFO directory, followed by the
// pid of the relayd that made it.
const fifoPrefix = "relayd-stdin-"

// stdinFifo is one command's FIFO.
type stdinFifo struct {
	dir  string   // its directory
	name string   // its name in dir
	f    *os.File // relayd's descriptor, O_RDWR|O_NONBLOCK
}

// path is what the command line redirects stdin from.
func (p *stdinFifo) path() string { return filepath.Join(p.dir, p.name) }

// newStdinFifo makes a command's FIFO for a shell that runs as u (nil:
// as relayd).
func newStdinFifo(u *env.User) (p *stdinFifo, err error) {
	parent := os.TempDir()
	if err := checkFifoParent(parent); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, fifoPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	p = &stdinFifo{dir: dir, name: "stdin-" + newNonce()[:16]}
	defer func() {
		if err != nil {
			p.remove()
			p = nil
		}
	}()
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, err
	}
	defer unix.Close(dfd)
	// Others may pass through, to the one name they are told, and never
	// list it; the FIFO's own mode keeps it from them.
	if err := unix.Fchmod(dfd, 0o711); err != nil {
		return p, err
	}
	if err := unix.Mknodat(dfd, p.name, unix.S_IFIFO|0o600, 0); err != nil {
		return p, err
	}
	if u != nil && u.Cred != nil {
		if err := unix.Fchownat(dfd, p.name, int(u.Cred.Uid), int(u.Cred.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return p, err
		}
	}
	fd, err := unix.Openat(dfd, p.name, unix.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return p, fmt.Errorf("%s is not the FIFO relayd made", p.path())
	}
	p.f = os.NewFile(uintptr(fd), p.path()) // non-blocking: a write waits in the poller, and Close ends it
	return p, nil
}

// checkFifoParent refuses a temporary directory where another user could
// replace what relayd makes: it must be owned by root or relayd's user, and
// writable by others only with the sticky bit.
func checkFifoParent(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || (sys.Uid != 0 && int(sys.Uid) != os.Geteuid()):
		return fmt.Errorf("%s is owned by another user", dir)
	case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
		return fmt.Errorf("%s can be written by other users and has no sticky bit", dir)
	}
	return nil
}

// close closes relayd's descriptor: the reader, once it took what waits,
// reads the end of file.
func (p *stdinFifo) close() {
	if p.f != nil {
		p.f.Close()
	}
}

// unlink removes the FIFO's name: a shell that did not open it yet
// cannot any more.
func (p *stdinFifo) unlink() { os.Remove(p.path()) }

// remove closes relayd's descriptor and removes the FIFO and its directory.
func (p *stdinFifo) remove() {
	p.close()
	p.unlink()
	os.Remove(p.dir)
}

// sweepFifos removes the FIFO directories that relayds which no longer
// run left in the temporary directory (a relayd that was killed): those
// owned by relayd's user whose pid names no process. A directory of a
// pid that runs is left, whoever runs it; it holds nothing but an empty
// FIFO.
func sweepFifos() {
	parent := os.TempDir()
	if checkFifoParent(parent) != nil {
		return
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), fifoPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}
