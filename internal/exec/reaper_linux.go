package exec

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Status is how a child ended.
type Status struct {
	Exited bool           // ended by exit(2); Code is its status
	Code   int            // exit status when Exited
	Signal syscall.Signal // the signal that killed it when !Exited
	At     time.Time      // when the reaper collected it
}

// ExitCode is the shell's convention: the status, or 128+signal.
func (s Status) ExitCode() int {
	if s.Exited {
		return s.Code
	}
	return 128 + int(s.Signal)
}

// Reaper owns every wait of the process. It reaps all children, subjects and
// adopted orphans, on SIGCHLD, and hands each registered child's status to
// its waiter. Nothing else in the process may call wait.
//
// ForkExec reports the thread that forked each child: a child made with
// clone(CLONE_PARENT) by a subject becomes a child of the thread that forked
// the subject, and the kernel lists a process's children per thread, so a
// look reads the children of the main thread (which adopts orphans) and of
// the threads that forked live subjects, not of every thread.
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan Status
	orphans uint64 // orphans reaped, for logs and tests
	sigs    chan os.Signal
}

// NewReaper starts reaping; it stops when ctx ends.
func NewReaper(ctx context.Context) *Reaper {
	r := &Reaper{waiters: make(map[int]chan Status), sigs: make(chan os.Signal, 1)}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.run(ctx)
	return r
}

func (r *Reaper) run(ctx context.Context) {
	defer signal.Stop(r.sigs)
	// A slow tick backs up SIGCHLD: a status is never left waiting long even
	// if a notification were lost.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sigs:
		case <-tick.C:
		}
		r.Sweep()
	}
}

// Sweep reaps every child that has ended, now. internal/session calls it before
// deciding whether a subject had exited (rule 6.3).
func (r *Reaper) Sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued: not an end
		}
		st := Status{Exited: ws.Exited(), Code: ws.ExitStatus(), Signal: ws.Signal(), At: time.Now()}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- st // buffered: never blocks
			close(ch)
		} else {
			r.orphans++
		}
	}
}

// Orphans returns how many children that relayd did not start it has reaped.
func (r *Reaper) Orphans() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// IsChild reports whether pid is a child that relayd started and has not reaped yet.
func (r *Reaper) IsChild(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[pid]
	return ok
}

// ForkExec starts a child and registers it before the reaper can see it end,
// so its status always reaches the returned channel, which receives exactly
// one Status and is then closed. tid is the thread that forked it.
//
// It also watches the child's pidfd, where the kernel gives one, and sweeps
// as soon as the child ends: that is quicker than the SIGCHLD path, which
// stays for orphans and for kernels without pidfds.
func (r *Reaper) ForkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (pid, tid int, exited <-chan Status, err error) {
	pidfd := -1
	sys := attr.Sys
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	withFD := *sys
	withFD.PidFD = &pidfd
	a := *attr
	a.Sys = &withFD
	ch := make(chan Status, 1)
	// The thread is held from the fork to the read of its id: the child's
	// parent is this thread.
	runtime.LockOSThread()
	r.mu.Lock()
	pid, err = syscall.ForkExec(argv0, argv, &a)
	tid = unix.Gettid()
	if err == nil {
		r.waiters[pid] = ch
	}
	r.mu.Unlock()
	runtime.UnlockOSThread()
	if err != nil {
		return 0, 0, nil, fmt.Errorf("exec.ForkExec %s: %w", argv0, err)
	}
	if pidfd >= 0 {
		go r.watch(pidfd)
	}
	return pid, tid, ch, nil
}

// watch waits, through Go's poller, for a pidfd to say its process ended,
// then sweeps. It owns and closes the pidfd.
func (r *Reaper) watch(pidfd int) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	if d := watchDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	// The poller's readiness is reset when the wait begins, and a pidfd is
	// edge-triggered there: a child that ended between the registration
	// above and that reset would never be reported. So each call asks the
	// pidfd itself whether its process ended.
	_ = rc.Read(func(fd uintptr) bool { return pidfdEnded(int(fd)) })
	r.Sweep()
}

// watchDelay, in nanoseconds, is a pause between a pidfd's registration
// with the poller and the wait on it: 0 but in a test that widens that
// window.
var watchDelay atomic.Int64

// pidfdParent is the parent of a pidfd's process as the kernel gives it
// through the pidfd (PIDFD_GET_INFO, Linux 6.13): one ioctl where /proc
// takes an open, a read of the whole stat line and a close. 0 when the
// process was reaped, or the kernel refuses the ioctl (an older one says
// ENOTTY, a seccomp filter may say EPERM: asked once; the caller then
// reads /proc).
func pidfdParent(fd int) int {
	if noPidfdInfo.Load() {
		return 0
	}
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	switch err := unix.IoctlPidfdInfo(fd, &info); {
	case err == nil && info.Mask&unix.PIDFD_INFO_PID != 0:
		return int(info.Ppid)
	case err != nil && err != unix.ESRCH:
		noPidfdInfo.Store(true)
	}
	return 0
}

// noPidfdInfo: the kernel refused PIDFD_GET_INFO for a reason other than
// a reaped process.
var noPidfdInfo atomic.Bool

// pidfdEnded reports whether the process of a pidfd has ended (the pidfd
// is readable), or whether asking failed, so that the watcher never waits
// on a pidfd it cannot read.
func pidfdEnded(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(p, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0
	}
}
