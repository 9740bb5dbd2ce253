package env

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// SubjectUser resolves --subject-user (a name or a numeric uid) to the
// credential subjects run with: its uid, primary gid and supplementary
// groups. Switching needs root; a relayd that is not root refuses.
func SubjectUser(spec string) (*syscall.Credential, error) {
	u, err := user.Lookup(spec)
	if err != nil {
		if _, numErr := strconv.Atoi(spec); numErr == nil {
			u, err = user.LookupId(spec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("no user %q on this system: %v", spec, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q has a uid or gid that is not a number (%s, %s)", spec, u.Uid, u.Gid)
	}
	if os.Geteuid() != 0 && uint64(os.Geteuid()) != uid {
		return nil, fmt.Errorf("running subjects as %q needs relayd to run as root (it runs as uid %d)", spec, os.Geteuid())
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of user %q: %v", spec, err)
	}
	groups := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			groups = append(groups, uint32(g))
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}
