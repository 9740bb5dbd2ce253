package env

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ownNetns is the network namespace relayd runs in, and so the one its
// subjects get: they inherit it, and nothing on the spawn path unshares it.
const ownNetns = "/proc/self/ns/net"

// Netns is a network namespace relayd's subjects must share
// (--require-netns): an nsfs path (a bind-mounted /proc/PID/ns/net, a file
// of /run/netns) or the kernel's own name of one, net:[INODE].
type Netns struct {
	spec  string // as given
	path  string // "" for the net:[INODE] form
	inode uint64 // the net:[INODE] form's inode
}

// ParseNetns reads the form of --require-netns; it opens nothing.
func ParseNetns(spec string) (Netns, error) {
	if rest, ok := strings.CutPrefix(spec, "net:"); ok {
		digits, ok := strings.CutPrefix(rest, "[")
		digits, ok2 := strings.CutSuffix(digits, "]")
		n, err := strconv.ParseUint(digits, 10, 64)
		if !ok || !ok2 || err != nil || n == 0 {
			return Netns{}, fmt.Errorf("%q is not a network namespace: want net:[INODE] (as readlink /proc/PID/ns/net prints it) or the path of an nsfs file", spec)
		}
		return Netns{spec: spec, inode: n}, nil
	}
	if !strings.HasPrefix(spec, "/") {
		return Netns{}, fmt.Errorf("%q is not a network namespace: want an absolute path such as /proc/PID/ns/net or /run/netns/NAME, or net:[INODE]", spec)
	}
	return Netns{spec: spec, path: spec}, nil
}

func (n Netns) String() string { return n.spec }

// nsID is a namespace's identity: nsfs inodes are unique on one nsfs
// device, which every namespace shares.
type nsID struct{ dev, ino uint64 }

func (id nsID) String() string { return "net:[" + strconv.FormatUint(id.ino, 10) + "]" }

// identify stats path; thorough also checks that it is a network
// namespace (on nsfs, and of type CLONE_NEWNET).
func identify(path string, thorough bool) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, fmt.Errorf("%s: %w", path, err)
	}
	if !thorough {
		return nsID{dev: st.Dev, ino: st.Ino}, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nsID{}, fmt.Errorf("%s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return nsID{}, fmt.Errorf("%s is not a namespace file (not on nsfs): bind-mount /proc/PID/ns/net there, or name the namespace as net:[INODE]", path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nsID{}, fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		return nsID{}, fmt.Errorf("%s is a namespace file but not of a network namespace", path)
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

// CheckNetns reports whether relayd's subjects run in n, at start: nil if
// they do, else an error that names both namespaces (or what could not be
// read, or is not a network namespace).
func CheckNetns(n Netns) error { return checkNetns(n, true) }

// RecheckNetns is CheckNetns for each execution, after CheckNetns passed at
// start: a stat of relayd's own namespace and, with the path form, one of
// n's path (a bind mount can be replaced, a PID reused), compared.
func RecheckNetns(n Netns) error { return checkNetns(n, false) }

func checkNetns(n Netns, thorough bool) error {
	own, err := identify(ownNetns, thorough)
	if err != nil {
		return fmt.Errorf("relayd's own network namespace cannot be read: %w", err)
	}
	if n.path == "" {
		if own.ino != n.inode {
			return fmt.Errorf("subjects would run in relayd's own %s (%s), not in the required %s", own, ownNetns, n.spec)
		}
		return nil
	}
	want, err := identify(n.path, thorough)
	if err != nil {
		return fmt.Errorf("the required network namespace cannot be read (relayd's own is %s): %w", own, err)
	}
	if own != want {
		return fmt.Errorf("subjects would run in relayd's own %s (%s), not in the required %s (%s)", own, ownNetns, want, n.spec)
	}
	return nil
}
