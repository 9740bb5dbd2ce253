package env

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Where a symbolic link of a tree leads (protocol 4.6, "Trees"): resolved
// against what the tree holds on disk, through its own descriptors, as
// openat2(RESOLVE_BENEATH) resolves a path below a directory: every link
// on the way is followed as the kernel would follow it, ".." is the
// parent of the directory actually reached (not of a name), and going
// above the tree's own directory, or to an absolute target, leaves it.
// The walk is done a step at a time rather than by one openat2 call so
// that it can say which link led out, judge a target that does not exist
// yet, and run on kernels without openat2 (before 5.6, or Docker's
// seccomp profiles before 20.10, which answer ENOSYS).

// ErrLeaves is a symbolic link whose target resolves outside the tree.
var ErrLeaves = errors.New("env: the link leads outside the directory")

// LeaveError says how a link's target leaves the tree; it matches
// ErrLeaves.
type LeaveError struct{ Why string }

func (e *LeaveError) Error() string { return e.Why }
func (e *LeaveError) Unwrap() error { return ErrLeaves }

// Beneath judges a symbolic link to target placed in the directory dir
// (names below d, each a directory) of the tree d: nil when the target,
// resolved on disk from there, stays in d or below it, a *LeaveError
// when it leaves (an absolute target, a ".." above d, a link on the way
// that does either, more than maxLinks links), another error when a step
// cannot be looked at (EACCES). A target whose path meets a name that is
// missing or not a directory is judged by its names from there: any ".."
// after such a name is taken as leaving, since a later link in its place
// could make that ".." climb anywhere; plain names after it stay below.
func (d *Dir) Beneath(dir []string, target string) error {
	if target == "" {
		return &LeaveError{"an empty target"}
	}
	if path.IsAbs(target) {
		return &LeaveError{"an absolute target"}
	}
	stack := []int{d.fd} // stack[0] is d's own, never closed here
	names := []string{}  // the names of stack[1:], for messages
	defer func() {
		for _, fd := range stack[1:] {
			unix.Close(fd)
		}
	}()
	todo := append(append([]string{}, dir...), strings.Split(target, "/")...)
	via := "" // the last link followed, for messages
	links := 0
	missing, missingIs := "", ""
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if missing != "" {
			if c == ".." {
				return &LeaveError{fmt.Sprintf("it climbs (\"..\") out of %s, which is %s", missing, missingIs)}
			}
			continue
		}
		if c == ".." {
			if len(stack) == 1 {
				if via != "" {
					return &LeaveError{fmt.Sprintf("it climbs above the directory through %s", via)}
				}
				return &LeaveError{"it climbs above the directory"}
			}
			unix.Close(stack[len(stack)-1])
			stack, names = stack[:len(stack)-1], names[:len(names)-1]
			continue
		}
		here := path.Join(append(append([]string{}, names...), c)...)
		fd, err := unix.Openat(stack[len(stack)-1], c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			missing, missingIs = here, "not there"
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "openat", Path: path.Join(d.path, here), Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "fstat", Path: path.Join(d.path, here), Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			stack, names = append(stack, fd), append(names, c)
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, "", buf) // the link opened, not its name again
			unix.Close(fd)
			if err != nil {
				return &fs.PathError{Op: "readlinkat", Path: path.Join(d.path, here), Err: err}
			}
			if links++; links > maxLinks {
				return &LeaveError{fmt.Sprintf("more than %d links deep (a loop?)", maxLinks)}
			}
			to := string(buf[:n])
			via = fmt.Sprintf("%s (a link to %s)", here, to)
			if n == 0 || path.IsAbs(to) {
				return &LeaveError{"it leads through " + via}
			}
			todo = append(strings.Split(to, "/"), todo...)
		default:
			unix.Close(fd)
			missing, missingIs = here, Kind(st.Mode)+", not a directory"
		}
	}
	return nil
}
