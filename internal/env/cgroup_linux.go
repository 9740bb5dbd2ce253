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
}

// ErrNoCgroup2 means no cgroup v2 hierarchy was found.
var ErrNoCgroup2 = errors.New("env: no cgroup v2 hierarchy")

// FindCgroup2 locates relayd's cgroup in a cgroup v2 hierarchy: the one at
// /sys/fs/cgroup when that is cgroup2, else another cgroup2 mount such as the
// hybrid layout's /sys/fs/cgroup/unified. With root set (--cgroup-root) that
// directory is used as the base as it is. It does not check that the
// hierarchy is writable; internal/exec proves that by using it.
func FindCgroup2(root string) (Cgroup2, error) {
	if root != "" {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			return Cgroup2{}, &rootError{root: root, cause: err}
		}
		return Cgroup2{Mount: root, Base: root}, nil
	}
	mounts, err := cgroup2Mounts("/proc/self/mountinfo")
	if err != nil {
		return Cgroup2{}, err
	}
	if len(mounts) == 0 {
		return Cgroup2{}, fmt.Errorf("%w: /proc/self/mountinfo lists no cgroup2 mount", ErrNoCgroup2)
	}
	self, err := selfCgroup2("/proc/self/cgroup")
	if err != nil {
		return Cgroup2{}, err
	}
	// Prefer the unified layout's standard place.
	best := mounts[0]
	for _, m := range mounts {
		if m.point == "/sys/fs/cgroup" {
			best = m
		}
	}
	rel, ok := strings.CutPrefix(self, best.root)
	if !ok {
		return Cgroup2{}, fmt.Errorf("%w: relayd's cgroup %s is outside the mounted part %s of %s", ErrNoCgroup2, self, best.root, best.point)
	}
	return Cgroup2{Mount: best.point, Base: filepath.Join(best.point, rel)}, nil
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
