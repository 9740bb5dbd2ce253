package session

import (
	"fmt"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
)

// fileUser resolves the "user" of a put or get (section 4.6): a name or
// uid, optionally ":group" (a name or gid; else the user's primary
// group), with the user's supplementary groups. relayd must be root,
// unless the user is relayd's own.
func fileUser(spec string) (*syscall.Credential, error) {
	name, group, withGroup := strings.Cut(spec, ":")
	cred, err := env.SubjectUser(name)
	if err != nil {
		return nil, err
	}
	if withGroup {
		g, err := user.LookupGroup(group)
		if err != nil {
			if _, numErr := strconv.Atoi(group); numErr == nil {
				g, err = user.LookupGroupId(group)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("no group %q on this system: %v", group, err)
		}
		gid, err := strconv.ParseUint(g.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("group %q has a gid that is not a number (%s)", group, g.Gid)
		}
		cred.Gid = uint32(gid)
	}
	return cred, nil
}

// asUser runs fn with cred's file-system rights: on an OS thread of its
// own whose fsuid, fsgid and supplementary groups are cred's (setfsuid(2)
// to a non-zero uid also drops the thread's effective file capabilities,
// CAP_DAC_OVERRIDE among them), so that what fn opens, creates, makes or
// renames is checked and owned as that user's, and nothing else in relayd
// is affected. The thread is never handed back to the runtime: the
// goroutine exits locked, and Go ends the thread with it, so no restore
// can fail half-way. A nil cred, or relayd's own uid, runs fn here.
func asUser(cred *syscall.Credential, fn func() error) error {
	if cred == nil || (int(cred.Uid) == os.Geteuid() && int(cred.Gid) == os.Getegid()) {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		groups := make([]int, len(cred.Groups))
		for i, g := range cred.Groups {
			groups[i] = int(g)
		}
		if err := unix.Setgroups(groups); err != nil { // this thread only, unlike syscall.Setgroups
			done <- fmt.Errorf("setgroups for uid %d: %w", cred.Uid, err)
			return
		}
		_ = unix.Setfsgid(int(cred.Gid))
		_ = unix.Setfsuid(int(cred.Uid))
		// setfsuid and setfsgid report no error; asking again returns the value in force.
		if g, _ := unix.SetfsgidRetGid(-1); g != int(cred.Gid) {
			done <- fmt.Errorf("setfsgid %d did not take (fsgid %d)", cred.Gid, g)
			return
		}
		if u, _ := unix.SetfsuidRetUid(-1); u != int(cred.Uid) {
			done <- fmt.Errorf("setfsuid %d did not take (fsuid %d)", cred.Uid, u)
			return
		}
		done <- fn()
	}()
	return <-done
}
