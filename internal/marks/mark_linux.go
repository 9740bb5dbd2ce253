package marks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MaxPaths bounds each list of paths a request names.
const MaxPaths = 256

// racyMargin is how long before a mark's start an entry's change time
// counts as during the mark: the kernel stamps change times with a
// coarse clock, which lags the one relayd reads.
const racyMargin = time.Second

// Request is a mark request (protocol 4.9).
type Request struct {
	Name    string
	Paths   []string
	Exclude []string
	Keep    []string
}

// Marked is what a mark recorded.
type Marked struct {
	Name      string
	Entries   int64
	Bytes     int64 // regular files' sizes, summed
	KeptBytes int64 // the content this mark keeps, each content once
	Duration  time.Duration
}

// BudgetError is a mark refused by --mark-bytes before anything was
// written: what its kept content needs and what the budget leaves.
type BudgetError struct{ Need, Left, Budget int64 }

func (e *BudgetError) Error() string {
	return fmt.Sprintf("mark: its kept content needs %d bytes; --mark-bytes (%d) leaves %d for new marks", e.Need, e.Budget, e.Left)
}

// checkPaths validates a list of absolute paths, field names it.
func checkPaths(field string, ps []string, required bool) ([]string, error) {
	if len(ps) == 0 && required {
		return nil, bad(`%q must name at least one absolute path`, field)
	}
	if len(ps) > MaxPaths {
		return nil, bad(`%q names more than %d paths`, field, MaxPaths)
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return nil, bad(`%q: %q is not an absolute path`, field, p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == ".." {
				return nil, bad(`%q: %q holds ".."`, field, p)
			}
		}
		out = append(out, filepath.Clean(p))
	}
	return out, nil
}

// Mark records the entries under req.Paths and keeps the content under
// req.Keep (protocol 4.9). stop, closed, interrupts it.
func (s *Store) Mark(req Request, stop <-chan struct{}) (*Marked, error) {
	began := time.Now()
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	paths, err := checkPaths("paths", req.Paths, true)
	if err != nil {
		return nil, err
	}
	exclude, err := checkPaths("exclude", req.Exclude, false)
	if err != nil {
		return nil, err
	}
	keep, err := checkPaths("keep", req.Keep, false)
	if err != nil {
		return nil, err
	}
	for _, k := range keep {
		if !excluded(k, paths) {
			return nil, bad(`"keep": %s is not under any of "paths"`, k)
		}
		if excluded(k, exclude) || excluded(k, s.internal) {
			return nil, bad(`"keep": %s is excluded from the mark`, k)
		}
	}
	unlock, err := s.lock(req.Name, false, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !s.markMu.TryLock() {
		return nil, ErrBusy
	}
	defer s.markMu.Unlock()
	if _, err := s.meta(req.Name); err == nil {
		return nil, bad(`mark %q exists: unmark it first`, req.Name)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	named := map[string]bool{}
	for _, p := range append(append([]string(nil), paths...), keep...) {
		named[p] = true
	}
	skip := append(append([]string(nil), exclude...), s.internal...)

	// The budget, before anything is written: the kept files' sizes.
	var need int64
	pre := &walker{named: named, skip: skip, stop: stop, visit: func(_ string, _ int, _ string, st *unix.Stat_t, _ bool) error {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			need += st.Size
		}
		return nil
	}}
	for _, k := range topRoots(keep) {
		if err := pre.root(k); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	left := s.budget - s.used
	s.mu.Unlock()
	if need > left {
		return nil, &BudgetError{Need: need, Left: max(left, 0), Budget: s.budget}
	}

	tmp := s.path("m", "."+randomName("new-"))
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
			s.collect()
		}
	}()
	if err := os.Mkdir(filepath.Join(tmp, "refs"), 0o700); err != nil {
		return nil, err
	}
	idx, err := os.OpenFile(filepath.Join(tmp, "index"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	m := &marker{s: s, w: newIndexWriter(idx), keep: keep, buf: make([]byte, 128<<10)}
	if m.objfd, err = unix.Open(s.path("objects"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	defer unix.Close(m.objfd)
	if m.reffd, err = unix.Open(filepath.Join(tmp, "refs"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	defer unix.Close(m.reffd)
	start := time.Now().Add(-racyMargin).UnixNano()
	w := &walker{named: named, skip: skip, stop: stop, visit: m.visit}
	for _, r := range topRoots(paths) {
		if err := w.root(r); err != nil {
			return nil, err
		}
	}
	if err := m.w.flush(); err != nil {
		return nil, err
	}
	if err := idx.Sync(); err != nil {
		return nil, err
	}
	meta := Meta{Name: req.Name, Paths: paths, Exclude: exclude, Keep: keep, Internal: s.internal, Start: start,
		Entries: m.entries, Bytes: m.bytes, KeptBytes: m.kept}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), b, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, s.path("m", req.Name)); err != nil {
		return nil, err
	}
	ok = true
	return &Marked{Name: req.Name, Entries: m.entries, Bytes: m.bytes, KeptBytes: m.kept, Duration: time.Since(began)}, nil
}

// marker is the visit of a mark's walk: each entry recorded, kept
// content stored.
type marker struct {
	s                    *Store
	w                    *indexWriter
	keep                 []string
	objfd, reffd         int
	buf                  []byte
	entries, bytes, kept int64
	tmpfile              int // objects made by O_TMPFILE: 0 not tried yet, 1 yes, -1 no
}

func (m *marker) visit(p string, dfd int, name string, st *unix.Stat_t, enter bool) error {
	e := entryOf(p, st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		m.bytes += st.Size
		var err error
		if excluded(p, m.keep) {
			e.SHA256, e.Hashed, err = m.keepFile(dfd, name, st)
			e.Kept = e.Hashed
		} else {
			e.SHA256, e.Hashed, err = hashAt(dfd, name, st, m.buf)
		}
		if err != nil {
			return &os.PathError{Op: "read", Path: p, Err: err}
		}
	case unix.S_IFLNK:
		t, err := readLink(dfd, name)
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return &os.PathError{Op: "readlink", Path: p, Err: err}
		}
		e.Target = t
	case unix.S_IFDIR:
		e.NoDescend = !enter
	}
	m.entries++
	return m.w.put(&e)
}

// keepFile stores the content of the regular file name in dfd (a
// reflink when the filesystem makes one, else a copy) and returns its
// sha256. A file that changed while it was read is read again, up to
// three times.
func (m *marker) keepFile(dfd int, name string, st *unix.Stat_t) (sum [32]byte, ok bool, err error) {
	for range 3 {
		var retry bool
		sum, ok, retry, err = m.keepOnce(dfd, name, st)
		if !retry {
			return sum, ok, err
		}
		if err := unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return sum, false, nil
		}
	}
	return sum, ok, err
}

func (m *marker) keepOnce(dfd int, name string, st *unix.Stat_t) (sum [32]byte, ok, retry bool, err error) {
	src, ok, err := openFileFd(dfd, name, st)
	if !ok {
		return sum, false, false, err
	}
	defer unix.Close(src)
	tfd, link, done, err := m.newObject()
	if err != nil {
		return sum, false, false, err
	}
	defer done()
	h := sha256.New()
	if unix.IoctlFileClone(tfd, src) == nil {
		// The clone cannot change under relayd: hash it.
		if err := readAll(tfd, m.buf, h.Write); err != nil {
			return sum, false, false, err
		}
	} else if err := readAll(src, m.buf, func(b []byte) (int, error) {
		h.Write(b)
		return writeAll(tfd, b)
	}); err != nil {
		return sum, false, false, err
	}
	var after unix.Stat_t
	if err := unix.Fstat(src, &after); err != nil {
		return sum, false, false, err
	}
	if after.Ctim != st.Ctim || after.Size != st.Size {
		return sum, false, true, nil
	}
	copy(sum[:], h.Sum(nil))
	hexSum := hex.EncodeToString(sum[:])
	switch err := link(hexSum); {
	case err == nil:
		m.s.mu.Lock()
		m.s.used += st.Size
		m.s.mu.Unlock()
	case errors.Is(err, unix.EEXIST):
	default:
		return sum, false, false, err
	}
	switch err := unix.Linkat(m.objfd, hexSum, m.reffd, hexSum, 0); {
	case err == nil:
		m.kept += st.Size
	case errors.Is(err, unix.EEXIST):
	default:
		return sum, false, false, err
	}
	return sum, true, false, nil
}

// newObject makes an object's file: unnamed (O_TMPFILE) where the
// filesystem and /proc let it be named later, else under a temporary
// name. link names it in the objects directory (EEXIST: an object of
// that content is there); done closes it and removes a temporary name.
func (m *marker) newObject() (fd int, link func(name string) error, done func(), err error) {
	if m.tmpfile >= 0 {
		fd, err := unix.Openat(m.objfd, ".", unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
		if err == nil {
			proc := "/proc/self/fd/" + strconv.Itoa(fd)
			if m.tmpfile == 0 {
				var st unix.Stat_t
				if unix.Stat(proc, &st) == nil {
					m.tmpfile = 1
				} else {
					m.tmpfile = -1
				}
			}
			if m.tmpfile > 0 {
				return fd, func(name string) error {
					return unix.Linkat(unix.AT_FDCWD, proc, m.objfd, name, unix.AT_SYMLINK_FOLLOW)
				}, func() { unix.Close(fd) }, nil
			}
			unix.Close(fd)
		} else if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			m.tmpfile = -1
		} else {
			return -1, nil, nil, err
		}
	}
	tmpName := randomName(".tmp-")
	fd, err = unix.Openat(m.objfd, tmpName, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, nil, nil, err
	}
	return fd, func(name string) error {
			return unix.Linkat(m.objfd, tmpName, m.objfd, name, 0)
		}, func() {
			unix.Close(fd)
			_ = unix.Unlinkat(m.objfd, tmpName, 0)
		}, nil
}

// readAll reads fd to its end through buf, handing each read to use.
func readAll(fd int, buf []byte, use func([]byte) (int, error)) error {
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if _, err := use(buf[:n]); err != nil {
			return err
		}
	}
}

// writeAll writes b to fd.
func writeAll(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(fd, b[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}
