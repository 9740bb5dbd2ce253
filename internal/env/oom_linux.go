package env

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// OOMKills is the count of OOM kills of relayd's own memory cgroup (a
// container's): oom_kill of memory.oom_control on a cgroup v1 memory
// hierarchy, else of memory.events in the nearest cgroup v2 ancestor that
// has one (memory.events counts the cgroups below it too). ok is false
// when there is no such counter.
func OOMKills() (n uint64, ok bool) {
	path, ok := oomCounterPath()
	if !ok {
		return 0, false
	}
	// The file stays open (close-on-exec; no subject is given it): one
	// pread per execution instead of an open, a read and a close (the
	// file is a few lines; os.File.ReadAt would read again to see EOF).
	oomFile.mu.Lock()
	defer oomFile.mu.Unlock()
	if !oomFile.open {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, false // tried again next time: nothing failed is kept
		}
		oomFile.fd, oomFile.open = fd, true
	}
	k, err := unix.Pread(oomFile.fd, oomFile.buf[:], 0)
	if k <= 0 || err != nil {
		return 0, false
	}
	return parseOOMKill(oomFile.buf[:k])
}

// oomFile is OOMKills' counter file, held open, and its read buffer.
var oomFile struct {
	mu   sync.Mutex
	fd   int
	open bool
	buf  [4096]byte
}

// ReadOOMKill reads the "oom_kill N" line of a memory.oom_control or
// memory.events file.
func ReadOOMKill(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseOOMKill(b)
}

func parseOOMKill(b []byte) (uint64, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, found := bytes.CutPrefix(line, []byte("oom_kill ")); found {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// oomPath is where OOMKills reads, found once: relayd's memory cgroup does
// not change (in cgroup mode it moves into its daemon leaf, below the
// ancestor that has the counter). A search that failed for another reason
// than the counter's absence is tried again next time.
var oomPath struct {
	mu    sync.Mutex
	done  bool
	path  string
	found bool
}

func oomCounterPath() (string, bool) {
	oomPath.mu.Lock()
	defer oomPath.mu.Unlock()
	if oomPath.done {
		return oomPath.path, oomPath.found
	}
	path, found, sure := findOOMCounter("/proc/self/mountinfo", "/proc/self/cgroup")
	if sure {
		oomPath.done, oomPath.path, oomPath.found = true, path, found
	}
	return path, found
}

// findOOMCounter finds the counter from mountinfo and cgroup files; sure
// is false when either could not be read.
func findOOMCounter(mountinfo, cgroup string) (path string, found, sure bool) {
	cg, err := os.ReadFile(cgroup)
	if err != nil {
		return "", false, false
	}
	mi, err := os.Open(mountinfo)
	if err != nil {
		return "", false, false
	}
	defer mi.Close()
	type mnt struct{ root, point string }
	var v1mem, v2 []mnt
	sc := bufio.NewScanner(mi)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 1 {
			continue
		}
		m := mnt{root: f[3], point: f[4]}
		switch {
		case p[0] == "cgroup2":
			v2 = append(v2, m)
		case p[0] == "cgroup" && len(p) >= 3 && hasOpt(p[2], "memory"):
			v1mem = append(v1mem, m)
		}
	}
	var v1Path, v2Path string
	for line := range strings.SplitSeq(string(cg), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path = parts[2]
		case hasOpt(parts[1], "memory"):
			v1Path = parts[2]
		}
	}
	under := func(m mnt, p string) (string, bool) {
		rel, ok := strings.CutPrefix(p, m.root)
		if !ok || (rel != "" && m.root != "/" && !strings.HasPrefix(rel, "/")) {
			return "", false
		}
		return filepath.Join(m.point, rel), true
	}
	if v1Path != "" {
		for _, m := range v1mem {
			if dir, ok := under(m, v1Path); ok {
				f := filepath.Join(dir, "memory.oom_control")
				if _, ok := ReadOOMKill(f); ok {
					return f, true, true
				}
			}
		}
	}
	if v2Path != "" {
		for _, m := range v2 {
			dir, ok := under(m, v2Path)
			if !ok {
				continue
			}
			for ; ; dir = filepath.Dir(dir) {
				f := filepath.Join(dir, "memory.events")
				if _, ok := ReadOOMKill(f); ok {
					return f, true, true
				}
				if dir == m.point || dir == "/" || dir == "." {
					break
				}
			}
		}
	}
	return "", false, true
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}
