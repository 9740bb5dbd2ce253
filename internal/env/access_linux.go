package env

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Access is what a user could do with a file: read it, write it, and why.
type Access struct {
	Read, Write bool
	Why         string // the permission that grants it, for a person; "" when neither
}

// FileAccess reports whether a process running with cred (uid, primary gid
// and supplementary groups, no capabilities: what --subject-user gives a
// subject) could read or write the file at path. It decides as the kernel
// does from mode bits:
//
//   - the file's own bits, of one class only: the owner's when cred's uid
//     owns it, else the group's when its group is cred's gid or one of
//     cred's groups, else everyone else's (a 0044 file is unreadable to its
//     owner);
//   - every directory from / down to the file (symbolic links resolved) must
//     let the user search it (x, by the same classes), except a directory
//     the user owns, which it could chmod;
//   - a file with more than one hard link may be reachable through another
//     directory, so then its directories do not count;
//   - a file or directory with a POSIX access ACL may grant a named user or
//     group up to its group bits (the ACL mask), so then the group bits
//     count for everyone;
//   - uid 0 reads and writes everything.
//
// It cannot see bind mounts or other mount namespaces, nor a descriptor
// already open: a path the user reaches another way is not checked.
func FileAccess(path string, cred *syscall.Credential) (Access, error) {
	if cred.Uid == 0 {
		return Access{true, true, "the user is root"}, nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Access{}, err
	}
	if real, err = filepath.Abs(real); err != nil {
		return Access{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return Access{}, &os.PathError{Op: "stat", Path: real, Err: err}
	}
	r, rWhy := permits(real, &st, cred, 4)
	w, wWhy := permits(real, &st, cred, 2)
	if !r && !w {
		return Access{}, nil
	}
	a := Access{Read: r, Write: w, Why: rWhy}
	if !r {
		a.Why = wWhy
	}
	if st.Nlink > 1 {
		a.Why += fmt.Sprintf(", and it has %d hard links, so its directories may not guard it", st.Nlink)
		return a, nil
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		var ds unix.Stat_t
		if err := unix.Stat(dir, &ds); err != nil {
			return Access{}, &os.PathError{Op: "stat", Path: dir, Err: err}
		}
		if ds.Uid != cred.Uid {
			if ok, _ := permits(dir, &ds, cred, 1); !ok {
				return Access{}, nil // the user cannot get to it
			}
		}
		if dir == "/" {
			break
		}
	}
	return a, nil
}

// permits reports whether cred has the permission bit (4 read, 2 write,
// 1 search) on the file described by st, and why.
func permits(path string, st *unix.Stat_t, cred *syscall.Credential, bit uint32) (bool, string) {
	mode := st.Mode & 0o7777
	what := map[uint32]string{4: "read", 2: "write", 1: "search"}[bit]
	inGroup := cred.Gid == st.Gid || slices.Contains(cred.Groups, st.Gid)
	switch {
	case cred.Uid == st.Uid:
		return mode&(bit<<6) != 0, fmt.Sprintf("mode %04o lets its owner, uid %d, %s it", mode, st.Uid, what)
	case inGroup && mode&(bit<<3) != 0:
		return true, fmt.Sprintf("mode %04o lets its group, gid %d (one of the user's groups), %s it", mode, st.Gid, what)
	case inGroup && !hasACL(path):
		return false, ""
	case mode&bit != 0:
		return true, fmt.Sprintf("mode %04o lets every user %s it", mode, what)
	case mode&(bit<<3) != 0 && hasACL(path):
		return true, fmt.Sprintf("it has a POSIX ACL whose mask (mode %04o) may let a named user or group %s it", mode, what)
	}
	return false, ""
}

// hasACL reports whether path has a POSIX access ACL; when that cannot be
// told, it assumes one.
func hasACL(path string) bool {
	_, err := unix.Getxattr(path, "system.posix_acl_access", nil)
	return err == nil || !(errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP))
}
