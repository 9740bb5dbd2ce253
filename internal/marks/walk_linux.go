package marks

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
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
		return w.dir(fd, "/", 0)
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
	return w.entry(pfd, p, filepath.Base(p), pst.Dev, 0)
}

// entry visits name in dfd (whose device is dev) and descends into it.
func (w *walker) entry(dfd int, p, name string, dev uint64, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone meanwhile
		}
		return &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	enter := isDir && (st.Dev == dev || w.named[p])
	if err := w.visit(p, dfd, name, &st, enter); err != nil {
		return err
	}
	if !enter {
		return nil
	}
	if depth >= maxDepth {
		return fmt.Errorf("%s: more than %d directories deep", p, maxDepth)
	}
	cfd, err := openDirAt(dfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil // replaced meanwhile: what is there now is the next walk's
		}
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(cfd)
	var now unix.Stat_t
	if err := unix.Fstat(cfd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		return nil
	}
	return w.dir(cfd, p, depth+1)
}

// dir walks the names in the directory fd (at p), in byte order.
func (w *walker) dir(fd int, p string, depth int) error {
	select {
	case <-w.stop:
		return ErrStopped
	default:
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	names, err := readNames(fd)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: p, Err: err}
	}
	for _, name := range names {
		cp := join(p, name)
		if excluded(cp, w.skip) {
			continue
		}
		if err := w.entry(fd, cp, name, st.Dev, depth); err != nil {
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

// readNames lists the names in the directory fd, sorted in byte order.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// openFile opens the regular file name in dfd for reading, checked by
// fstat to be the regular file st describes; ok false when it is not (it
// was replaced or removed meanwhile). O_NONBLOCK: a FIFO put in its place
// is not waited on.
func openFile(dfd int, name string, st *unix.Stat_t) (*os.File, bool, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
			return nil, false, nil
		}
		return nil, false, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return nil, false, nil
	}
	return os.NewFile(uintptr(fd), name), true, nil
}

// hashAt reads the regular file name in dfd (st: its lstat) and returns
// the sha256 of its content; ok false when it is no longer that file.
func hashAt(dfd int, name string, st *unix.Stat_t, buf []byte) (sum [32]byte, ok bool, err error) {
	f, ok, err := openFile(dfd, name, st)
	if !ok {
		return sum, false, err
	}
	defer f.Close()
	h := sha256.New()
	for {
		n, rerr := f.Read(buf)
		h.Write(buf[:n])
		if rerr != nil {
			if errors.Is(rerr, os.ErrClosed) || !isEOF(rerr) {
				return sum, false, rerr
			}
			break
		}
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

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
