package env

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// AsUser runs fn with cred's file-system rights: on an OS thread of its
// own whose fsuid, fsgid and supplementary groups are cred's (setfsuid(2)
// to a non-zero uid also drops the thread's effective file capabilities,
// CAP_DAC_OVERRIDE among them), so that what fn looks up, opens, creates,
// makes or renames is checked and owned as that user's, and nothing else
// in relayd is affected. The thread is never handed back to the runtime:
// the goroutine exits locked, and Go ends the thread with it, so no
// restore can fail half-way. A nil cred, or relayd's own uid and gid, runs
// fn here.
func AsUser(cred *syscall.Credential, fn func() error) error {
	if !switches(cred) {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := setFSUser(int(cred.Uid), int(cred.Gid), cred.Groups); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// switches reports whether AsUser needs a thread of its own for cred.
func switches(cred *syscall.Credential) bool {
	return cred != nil && (int(cred.Uid) != os.Geteuid() || int(cred.Gid) != os.Getegid())
}

// setFSUser gives the calling thread, which must be locked to its
// goroutine, the file-system identity uid, gid and groups, and checks
// that it took.
func setFSUser(uid, gid int, groups []uint32) error {
	gs := make([]int, len(groups))
	for i, g := range groups {
		gs[i] = int(g)
	}
	if err := unix.Setgroups(gs); err != nil { // this thread only, unlike syscall.Setgroups
		return fmt.Errorf("setgroups for uid %d: %w", uid, err)
	}
	_ = unix.Setfsgid(gid)
	_ = unix.Setfsuid(uid)
	// setfsuid and setfsgid report no error; asking again returns the value in force.
	if g, _ := unix.SetfsgidRetGid(-1); g != gid {
		return fmt.Errorf("setfsgid %d did not take (fsgid %d)", gid, g)
	}
	if u, _ := unix.SetfsuidRetUid(-1); u != uid {
		return fmt.Errorf("setfsuid %d did not take (fsuid %d)", uid, u)
	}
	return nil
}

// lookAs runs fn, which only looks (stat, access) and must not block,
// with cred's file-system rights, as AsUser does, but on one thread kept
// for every look: the thread takes cred's identity, runs fn, and takes
// relayd's own back (setfsuid back to 0 raises the file capabilities
// again from the permitted set), so an execute does not pay for a new OS
// thread. A thread whose own identity cannot be restored is never used
// again: its goroutine exits locked, and a new one takes its place.
func lookAs(cred *syscall.Credential, fn func()) error {
	if !switches(cred) {
		fn()
		return nil
	}
	lookerOnce.Do(func() { go looker() })
	j := lookJob{cred: cred, fn: fn, done: make(chan error, 1)}
	lookJobs <- j
	return <-j.done
}

type lookJob struct {
	cred *syscall.Credential
	fn   func()
	done chan error
}

var (
	lookJobs   = make(chan lookJob)
	lookerOnce sync.Once
)

func looker() {
	runtime.LockOSThread() // unlocked never: a thread that fails a restore dies with its goroutine
	uid, gid := os.Geteuid(), os.Getegid()
	own, err := unix.Getgroups()
	groups := make([]uint32, len(own))
	for i, g := range own {
		groups[i] = uint32(g)
	}
	for j := range lookJobs {
		if err != nil {
			j.done <- fmt.Errorf("getgroups: %w", err)
			go looker()
			return
		}
		serr := setFSUser(int(j.cred.Uid), int(j.cred.Gid), j.cred.Groups)
		if serr == nil {
			j.fn()
		}
		rerr := setFSUser(uid, gid, groups)
		j.done <- serr
		if rerr != nil {
			go looker()
			return
		}
	}
}
