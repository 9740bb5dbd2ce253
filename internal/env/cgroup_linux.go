package env

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cgroup2 is a cgroup v2 hierarchy relayd may use.
type Cgroup2 struct {
	Mount string // where the hierarchy is mounted, e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified
	Base  string // relayd's own cgroup in it, as a directory path
	// Outside says that relayd's own cgroup is in no cgroup2 mount, and Base
	// is the top of Mount: a subtree given to relayd, where it stays when it
	// gives its subtree up.
	Outside bool
}

// ErrNoCgroup2 means no cgroup v2 hierarchy was found.
var ErrNoCgroup2 = errors.New("env: no cgroup v2 hierarchy")

// FindCgroup2 locates relayd's cgroup in a cgroup v2 hierarchy: the one at
// /sys/fs/cgroup when that is cgroup2, else another cgroup2 mount such as the
// hybrid layout's /sys/fs/cgroup/unified. When relayd's cgroup is in no
// cgroup2 mount, the base is the top of a mount (the same preference): a
// container given a cgroup2 subtree of its own with a bind mount runs in the
// container's cgroup, elsewhere in the hierarchy. With root set
// (--cgroup-root) that directory is used as the base as it is. It does not
// check that the hierarchy is writable; internal/exec proves that by using it.
func FindCgroup2(root string) (Cgroup2, error) {
	if root != "" {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			return Cgroup2{}, &rootError{root: root, cause: err}
		}
		return Cgroup2{Mount: root, Base: root}, nil
	}
	return findCgroup2("/proc/self/mountinfo", "/proc/self/cgroup")
}

// findCgroup2 is FindCgroup2 without a root, reading the given mountinfo
// and cgroup files.
func findCgroup2(mountinfo, cgroup string) (Cgroup2, error) {
	mounts, err := cgroup2Mounts(mountinfo)
	if err != nil {
		return Cgroup2{}, err
	}
	if len(mounts) == 0 {
		return Cgroup2{}, fmt.Errorf("%w: /proc/self/mountinfo lists no cgroup2 mount", ErrNoCgroup2)
	}
	self, err := selfCgroup2(cgroup)
	if err != nil {
		return Cgroup2{}, err
	}
	// Prefer a mount that holds relayd's cgroup, the unified layout's
	// standard place first; else the top of one, in the same order.
	var found *Cgroup2
	for _, m := range mounts {
		rel, ok := below(self, m.root)
		if ok && (found == nil || m.point == "/sys/fs/cgroup") {
			found = &Cgroup2{Mount: m.point, Base: filepath.Join(m.point, rel)}
		}
	}
	if found != nil {
		return *found, nil
	}
	top := mounts[0]
	for _, m := range mounts {
		if m.point == "/sys/fs/cgroup" {
			top = m
		}
	}
	return Cgroup2{Mount: top.point, Base: top.point, Outside: true}, nil
}

// below returns path relative to root when path is root or below it.
// Paths in another cgroup namespace's view begin with "/..": they are
// below no mount that does not begin the same way.
func below(path, root string) (string, bool) {
	if path == "/.." || strings.HasPrefix(path, "/../") {
		return "", false // the mount's view is this namespace's: path is outside it
	}
	if root == "/" {
		return path, strings.HasPrefix(path, "/")
	}
	if path == root {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, root+"/")
	return rel, ok
}

// rootError is FindCgroup2's error for a root that is no cgroup v2
// directory. It names the path and why, without ErrNoCgroup2's "env:"
// prefix, for a caller to put after a flag's name.
type rootError struct {
	root  string
	cause error
}

func (e *rootError) Error() string {
	return e.root + " is not a cgroup v2 directory (it has no cgroup.procs)"
}
func (e *rootError) Unwrap() []error { return []error{ErrNoCgroup2, e.cause} }

type mount struct{ point, root string }

// cgroup2Mounts lists cgroup2 mounts from a mountinfo file.
func cgroup2Mounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("env.cgroup2Mounts: %w", err)
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		out = append(out, mount{point: unescape(fields[4]), root: unescape(fields[3])})
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// selfCgroup2 reads relayd's cgroup v2 path ("0::/path") from /proc/self/cgroup.
func selfCgroup2(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("env.selfCgroup2: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s has no cgroup v2 line", ErrNoCgroup2, path)
}
