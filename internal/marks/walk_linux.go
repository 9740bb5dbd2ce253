package marks

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// maxDepth bounds how deep a walk descends (each level holds a descriptor).
const maxDepth = 1024

// ErrStopped ends a walk that relayd's shutdown interrupted.
var ErrStopped = errors.New("relayd is shutting down")

// visitFunc sees one entry: its path, the directory it is in (a
// descriptor) and its name there ("." for /), and its lstat. enter says
// whether the walk will descend into it (a directory on the same
// filesystem as its parent, or one named).
type visitFunc func(p string, dfd int, name string, st *unix.Stat_t, enter bool) error

// walker walks trees by descriptor (protocol 4.9): a directory is opened
// O_NOFOLLOW|O_DIRECTORY relative to its parent and checked by fstat to
// be what lstat saw; no symbolic link is followed; nothing that is not a
// directory is opened by the walk (a visit opens a regular file itself,
// O_NONBLOCK, and checks it with fstat).
type walker struct {
	named map[string]bool // paths the walk crosses into another filesystem at
	skip  []string        // excluded paths and relayd's own
	visit visitFunc
	stop  <-chan struct{}
	// gone: a path whose ancestor is no longer a directory (a link or a
	// file now) holds nothing, rather than being an error (changes: its
	// entries are deleted; the ancestor's change is listed by a wider
	// look).
	gone bool
	l    *lister // makes the listings ahead of the walk (root starts one)
	buf  []byte  // getdents'
}

// topRoots returns the paths, cleaned and sorted in walk order, without
// the ones inside another.
func topRoots(paths []string) []string {
	ps := make([]string, 0, len(paths))
	for _, p := range paths {
		ps = append(ps, filepath.Clean(p))
	}
	slices.SortFunc(ps, ComparePaths)
	ps = slices.Compact(ps)
	var out []string
	for _, p := range ps {
		if len(out) > 0 && Under(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// openPath opens the directory at the absolute path p for reading,
// component by component from /, following no symbolic link.
func openPath(p string) (int, error) {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			unix.Close(fd)
			return -1, fmt.Errorf("%s: holds \"..\"", p)
		}
		nfd, err := openDirAt(fd, name)
		unix.Close(fd)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: p, Err: err}
		}
		fd = nfd
	}
	return fd, nil
}

// openDirAt opens the directory name in dfd: never a link (ELOOP or
// ENOTDIR), never anything that can block.
func openDirAt(dfd int, name string) (int, error) {
	return unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// root walks the entry at the absolute path p and, for a directory,
// everything under it.
func (w *walker) root(p string) error {
	if excluded(p, w.skip) {
		return nil
	}
	if w.buf == nil {
		w.buf = make([]byte, direntsBuf)
	}
	if w.l == nil {
		w.l = newLister(listers())
		defer func() { w.l.close(); w.l = nil }()
	}
	if p == "/" {
		fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if err := w.visit("/", fd, ".", &st, true); err != nil {
			return err
		}
		ents, err := list(fd, w.buf)
		if err != nil {
			return &os.PathError{Op: "readdir", Path: p, Err: err}
		}
		return w.dir(fd, "/", st.Dev, 0, ents)
	}
	pfd, err := openPath(filepath.Dir(p))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || w.gone && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
			return nil // nothing there: every entry under it is absent
		}
		return err
	}
	defer unix.Close(pfd)
	var pst unix.Stat_t
	if err := unix.Fstat(pfd, &pst); err != nil {
		return err
	}
	ents := []dirent{{name: filepath.Base(p)}}
	d := &ents[0]
	if d.err = unix.Fstatat(pfd, d.name, &d.st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(d.err, unix.ENOENT) {
		return nil
	}
	return w.dir(pfd, filepath.Dir(p), pst.Dev, 0, ents)
}

// openChild opens the directory name in pfd, checked by fstat to be the
// one lstat saw (st); -1 when it was replaced meanwhile.
func openChild(pfd int, name string, st *unix.Stat_t) (int, error) {
	fd, err := openDirAt(pfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, nil // replaced meanwhile: what is there now is the next walk's
		}
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// dir visits the entries ents of the directory fd (at p, on dev, depth
// directories deep) and descends into each directory among them on the
// same filesystem, or named. The listings of those are made ahead (w.l).
func (w *walker) dir(fd int, p string, dev uint64, depth int, ents []dirent) error {
	select {
	case <-w.stop:
		return ErrStopped
	default:
	}
	mayskip := skipsUnder(p, w.skip)
	paths := make([]string, len(ents))
	enter := make([]bool, len(ents))
	for i := range ents {
		d := &ents[i]
		paths[i] = join(p, d.name)
		enter[i] = d.err == nil && d.st.Mode&unix.S_IFMT == unix.S_IFDIR && (d.st.Dev == dev || w.named[paths[i]]) &&
			!(mayskip && excluded(paths[i], w.skip)) && depth < maxDepth
	}
	w.l.queue(fd, ents, openChild, func(i int) bool { return enter[i] })
	defer w.l.cancel(ents)
	for i := range ents {
		d := &ents[i]
		cp := paths[i]
		if mayskip && excluded(cp, w.skip) {
			continue
		}
		if d.err != nil {
			return &os.PathError{Op: "lstat", Path: cp, Err: d.err}
		}
		isDir := d.st.Mode&unix.S_IFMT == unix.S_IFDIR
		if err := w.visit(cp, fd, d.name, &d.st, enter[i] || isDir && (d.st.Dev == dev || w.named[cp])); err != nil {
			return err
		}
		if !enter[i] {
			if isDir && (d.st.Dev == dev || w.named[cp]) {
				return fmt.Errorf("%s: more than %d directories deep", cp, maxDepth)
			}
			continue
		}
		j := w.l.take(fd, d, openChild, w.buf)
		if j.err != nil {
			if j.opening {
				return &os.PathError{Op: "open", Path: cp, Err: j.err}
			}
			unix.Close(j.fd)
			return &os.PathError{Op: "readdir", Path: cp, Err: j.err}
		}
		if j.fd < 0 {
			continue
		}
		err := w.dir(j.fd, cp, d.st.Dev, depth+1, j.ents)
		unix.Close(j.fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// openFileFd opens the regular file name in dfd for reading, checked by
// fstat to be the regular file st describes; ok false when it is not (it
// was replaced or removed meanwhile). O_NONBLOCK: a FIFO put in its place
// is not waited on.
func openFileFd(dfd int, name string, st *unix.Stat_t) (int, bool, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
			return -1, false, nil
		}
		return -1, false, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return -1, false, nil
	}
	return fd, true, nil
}

// openFile is openFileFd as an *os.File.
func openFile(dfd int, name string, st *unix.Stat_t) (*os.File, bool, error) {
	fd, ok, err := openFileFd(dfd, name, st)
	if !ok {
		return nil, false, err
	}
	return os.NewFile(uintptr(fd), name), true, nil
}

// hashAt reads the regular file name in dfd (st: its lstat) and returns
// the sha256 of its content; ok false when it is no longer that file.
func hashAt(dfd int, name string, st *unix.Stat_t, buf []byte) (sum [32]byte, ok bool, err error) {
	fd, ok, err := openFileFd(dfd, name, st)
	if !ok {
		return sum, false, err
	}
	defer unix.Close(fd)
	h := sha256.New()
	if err := readAll(fd, buf, h.Write); err != nil {
		return sum, false, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, true, nil
}

// entryOf is what st (and, for a link, its target) says of p.
func entryOf(p string, st *unix.Stat_t) Entry {
	return Entry{Path: p, Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size,
		Mtime: unix.TimespecToNsec(st.Mtim), Ctime: unix.TimespecToNsec(st.Ctim),
		Ino: st.Ino, Dev: st.Dev, Rdev: st.Rdev}
}

// readLink reads the target of the link name in dfd.
func readLink(dfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
