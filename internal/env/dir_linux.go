package env

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Files relative to a directory held open (protocol rule 6.13): what a
// file transfer, or a tree, opens on a subject's behalf. The directory is
// reached once, one component at a time, each opened with O_PATH and
// O_NOFOLLOW and looked at by fstat of what was opened, so that a
// component swapped for a FIFO, a device or a symbolic link is seen for
// what it is, never opened for reading or writing (nothing blocks) and
// never followed, except the symbolic links only root could have made
// (trustedLink). Everything after is relative to that descriptor: a
// single name, opened with O_NOFOLLOW, so that renaming or replacing the
// directory's path afterwards changes nothing of what relayd touches.
// Below it, Sub descends without following any link at all.
//
// Every single-name step refuses what openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) would: a name is never "..", never holds "/", and
// is never followed if it is a link (magic links included: O_NOFOLLOW
// with O_PATH opens the link itself). One code path on every kernel.
//
// These functions take no user: the caller runs them with the requesting
// user's file-system rights (internal/session's asUser), so that each lookup,
// creation and rename is checked, and owned, as that user's.

var (
	// ErrSymlink is a path through a symbolic link that relayd does not
	// follow: one a user other than root could have made or replaced.
	ErrSymlink = errors.New("env: a symbolic link relayd does not follow")
	// ErrNotDirectory is a component of a directory's path that is a file,
	// a FIFO, a device or a socket.
	ErrNotDirectory = errors.New("env: not a directory")
	// ErrNotRegular is a file that is not a regular file where one is
	// needed (a directory, a FIFO, a device, a socket, a symbolic link).
	ErrNotRegular = errors.New("env: not a regular file")
	// ErrBadName is a name that is not a single path component.
	ErrBadName = errors.New("env: not a file name")
)

// KindError is a file of the wrong kind: it matches Want (ErrNotDirectory
// or ErrNotRegular) and says what the file is.
type KindError struct {
	Kind string // "a FIFO", from Kind
	Want error
}

func (e *KindError) Error() string { return e.Want.Error() + ": it is " + e.Kind }
func (e *KindError) Unwrap() error { return e.Want }

// maxLinks bounds the trusted symbolic links one walk follows, as the
// kernel's own MAXSYMLINKS.
const maxLinks = 40

// Dir is a directory held open by an O_PATH descriptor. Its methods take
// names of one component, relative to it.
type Dir struct {
	fd   int
	path string // where it was reached, symbolic links resolved; for messages
}

// Path is the directory's path as the walk that opened it resolved it.
func (d *Dir) Path() string { return d.path }

// Close releases the descriptor.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// OpenDir opens the directory at path, absolute, walking from / one
// component at a time with the caller's rights. A component that is a
// symbolic link is followed only when trustedLink says root made it (so
// /bin -> usr/bin is, a link a subject made is ErrSymlink); one that is
// not a directory is ErrNotDirectory, naming its kind. With mkdir, a
// missing component is made (mode perm, less the umask), as mkdir -p.
func OpenDir(path string, mkdir bool, perm uint32) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("not an absolute path")}
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	d := &Dir{fd: fd, path: "/"}
	todo := strings.Split(path, "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// The parent of the directory held, not of a path: no link is
			// crossed. Only a trusted link's target brings one here.
			if err := d.step(".."); err != nil {
				d.Close()
				return nil, err
			}
			d.path = filepath.Dir(d.path)
			continue
		}
		target, err := d.walk(name, mkdir, perm)
		if err != nil {
			d.Close()
			return nil, err
		}
		if target == "" {
			continue // a directory: d holds it now
		}
		if links++; links > maxLinks {
			d.Close()
			return nil, &fs.PathError{Op: "open", Path: path, Err: unix.ELOOP}
		}
		if filepath.IsAbs(target) {
			if err := d.step("/"); err != nil {
				d.Close()
				return nil, err
			}
			d.path = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return d, nil
}

// step replaces d's descriptor with one of ".." (its parent) or "/".
func (d *Dir) step(to string) error {
	var fd int
	var err error
	if to == "/" {
		fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		fd, err = unix.Openat(d.fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "openat", Path: filepath.Join(d.path, to), Err: err}
	}
	unix.Close(d.fd)
	d.fd = fd
	return nil
}

// child opens name in d with O_PATH|O_NOFOLLOW, making it a directory
// first when it is missing and mkdir is set, and fstats what it opened:
// a FIFO, a device or a link is opened as itself, never for I/O.
func (d *Dir) child(name string, mkdir bool, perm uint32) (int, *unix.Stat_t, error) {
	p := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && mkdir {
		if err = unix.Mkdirat(d.fd, name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, nil, &fs.PathError{Op: "mkdirat", Path: p, Err: err}
		}
		fd, err = unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, nil, &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	return fd, &st, nil
}

// walk moves d into its child name when that is a directory (making it
// first with mkdir), and returns "" then; for a trusted symbolic link it
// returns the link's target and leaves d where it is.
func (d *Dir) walk(name string, mkdir bool, perm uint32) (string, error) {
	p := filepath.Join(d.path, name)
	fd, st, err := d.child(name, mkdir, perm)
	if err != nil {
		return "", err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		unix.Close(d.fd)
		d.fd, d.path = fd, p
		return "", nil
	case unix.S_IFLNK:
		defer unix.Close(fd)
		if !d.trustedLink(st) {
			return "", &fs.PathError{Op: "open", Path: p, Err: ErrSymlink}
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf) // the link opened, not its name again
		if err != nil {
			return "", &fs.PathError{Op: "readlinkat", Path: p, Err: err}
		}
		if n == 0 || n == len(buf) {
			return "", &fs.PathError{Op: "readlinkat", Path: p, Err: unix.ENAMETOOLONG}
		}
		return string(buf[:n]), nil
	default:
		unix.Close(fd)
		return "", &fs.PathError{Op: "open", Path: p, Err: &KindError{Kind(st.Mode), ErrNotDirectory}}
	}
}

// Sub opens the directory name in d, making it first when it is missing
// and mkdir is set (mode perm, less the umask). Unlike OpenDir's walk it
// follows no link at all, root's included (ErrSymlink): inside a tree a
// transfer writes or reads, every link is the tree's own.
func (d *Dir) Sub(name string, mkdir bool, perm uint32) (*Dir, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.path, name)
	fd, st, err := d.child(name, mkdir, perm)
	if err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return &Dir{fd: fd, path: p}, nil
	case unix.S_IFLNK:
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: p, Err: ErrSymlink}
	default:
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: p, Err: &KindError{Kind(st.Mode), ErrNotDirectory}}
	}
}

// trustedLink reports whether the symbolic link link, in d, could only
// have been made by root: the link is root's, and so is d, which no group
// and no one else may write. /bin -> usr/bin and /var/run -> /run are; a
// link in a directory a subject may write (its workspace, /tmp) is not,
// whoever owns it: root's own link there might be one a subject put in
// place of another name, by a rename.
func (d *Dir) trustedLink(link *unix.Stat_t) bool {
	var st unix.Stat_t
	if unix.Fstat(d.fd, &st) != nil {
		return false
	}
	return link.Uid == 0 && st.Uid == 0 && st.Mode&0o022 == 0
}

// Kind names the kind of file mode describes, for a person: "a FIFO".
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}

// checkName refuses what is not one path component.
func (d *Dir) checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return &fs.PathError{Op: "open", Path: filepath.Join(d.path, name), Err: ErrBadName}
	}
	return nil
}

// Lstat is fstatat of name without following it. A missing name is an
// error that matches fs.ErrNotExist.
func (d *Dir) Lstat(name string) (*unix.Stat_t, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "fstatat", Path: filepath.Join(d.path, name), Err: err}
	}
	return &st, nil
}

// OpenFile opens the regular file name for reading: a name that is
// anything else (a directory, a FIFO, a device, a socket, a symbolic
// link) is ErrNotRegular saying which. It is looked at before it is
// opened, so that a device is not opened at all, and opened with
// O_NOFOLLOW and O_NONBLOCK, so that one swapped in meanwhile is neither
// followed nor waited on (a FIFO), and refused by fstat.
func (d *Dir) OpenFile(name string) (*os.File, error) {
	p := filepath.Join(d.path, name)
	st, err := d.Lstat(name)
	if err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "open", Path: p, Err: &KindError{Kind(st.Mode), ErrNotRegular}}
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		err = &KindError{Kind(unix.S_IFLNK), ErrNotRegular}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: p, Err: &KindError{Kind(st.Mode), ErrNotRegular}}
	}
	return os.NewFile(uintptr(fd), p), nil // O_NONBLOCK means nothing to a regular file
}

// Create creates the new file name in d for writing, exclusively
// (O_EXCL, O_NOFOLLOW: never an existing file, FIFO or link), mode perm
// less the umask.
func (d *Dir) Create(name string, perm uint32) (*os.File, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// OpenWrite opens the regular file name in d for writing, creating it
// (mode perm, less the umask) when missing, emptied when trunc. It is
// opened O_NOFOLLOW|O_NONBLOCK and emptied only once fstat has shown a
// regular file with one link: a FIFO, a device, a symbolic link or a
// hard link to a file elsewhere put in its place is ErrNotRegular, and
// nothing of it is truncated, followed or waited on.
func (d *Dir) OpenWrite(name string, perm uint32, trunc bool) (*os.File, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	p := filepath.Join(d.path, name)
	// Looked at first, so that what is there is named and a device is not
	// opened at all; the checks after the open hold against a swap.
	if st, err := d.Lstat(name); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "open", Path: p, Err: &KindError{Kind(st.Mode), ErrNotRegular}}
	}
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, perm)
	if errors.Is(err, unix.ELOOP) {
		err = &KindError{Kind(unix.S_IFLNK), ErrNotRegular}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = &KindError{Kind(st.Mode), ErrNotRegular}
	case st.Nlink != 1:
		err = &KindError{fmt.Sprintf("a file with %d hard links", st.Nlink), ErrNotRegular}
	case trunc:
		if err = unix.Ftruncate(fd, 0); err != nil {
			err = &fs.PathError{Op: "ftruncate", Path: p, Err: err}
		}
	}
	if err != nil {
		unix.Close(fd)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Chmod sets the directory's permission bits, through its own ".".
func (d *Dir) Chmod(mode uint32) error {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "openat", Path: d.path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return &fs.PathError{Op: "fchmod", Path: d.path, Err: err}
	}
	return nil
}

// CreateTemp creates a new file beside name, ".NAME.relayd-<24 hex>.tmp"
// (NAME cut to keep it a valid name), exclusively (O_EXCL, O_NOFOLLOW:
// never an existing file or link), mode 0600 for writing. It returns the
// file and the temporary name, for Rename and Remove.
func (d *Dir) CreateTemp(name string) (*os.File, string, error) {
	if err := d.checkName(name); err != nil {
		return nil, "", err
	}
	if len(name) > 200 {
		name = name[:200]
	}
	var r [12]byte
	for range 3 {
		if _, err := rand.Read(r[:]); err != nil {
			return nil, "", err
		}
		tmp := "." + name + ".relayd-" + hex.EncodeToString(r[:]) + ".tmp"
		f, err := d.Create(tmp, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, tmp, nil
	}
	return nil, "", errors.New("env: three random temporary names were taken")
}

// Rename renames from over to, both in d (renameat: neither followed).
func (d *Dir) Rename(from, to string) error {
	if err := d.checkName(from); err != nil {
		return err
	}
	if err := d.checkName(to); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return &os.LinkError{Op: "renameat", Old: filepath.Join(d.path, from), New: filepath.Join(d.path, to), Err: err}
	}
	return nil
}

// Remove unlinks the file name in d (not a directory, never followed).
func (d *Dir) Remove(name string) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &fs.PathError{Op: "unlinkat", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// Sync flushes the directory's entries (a rename in it survives a
// crash). An O_PATH descriptor cannot be fsynced: its "." is opened for
// reading, the directory held itself, no path looked up again.
func (d *Dir) Sync() error {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "openat", Path: d.path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &fs.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// The operations a tree needs (protocol 4.6, "Trees"): each relative to
// d, one name, never following a link.

// Names lists the names in d, through its "." opened for reading.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	return f.Readdirnames(-1)
}

// Readlink reads the symbolic link name in d.
func (d *Dir) Readlink(name string) (string, error) {
	if err := d.checkName(name); err != nil {
		return "", err
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(d.fd, name, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlinkat", Path: filepath.Join(d.path, name), Err: err}
	}
	if n == len(buf) {
		return "", &fs.PathError{Op: "readlinkat", Path: filepath.Join(d.path, name), Err: unix.ENAMETOOLONG}
	}
	return string(buf[:n]), nil
}

// Symlink makes name in d a symbolic link to target.
func (d *Dir) Symlink(target, name string) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, d.fd, name); err != nil {
		return &fs.PathError{Op: "symlinkat", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// Link makes name in d a hard link to from in src (linkat without
// AT_SYMLINK_FOLLOW: a link is linked as itself).
func (d *Dir) Link(src *Dir, from, name string) error {
	if err := src.checkName(from); err != nil {
		return err
	}
	if err := d.checkName(name); err != nil {
		return err
	}
	if err := unix.Linkat(src.fd, from, d.fd, name, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: filepath.Join(src.path, from), New: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// RemoveDir removes the empty directory name in d.
func (d *Dir) RemoveDir(name string) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return &fs.PathError{Op: "unlinkat", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// maxTreeDepth bounds how deep RemoveAll descends.
const maxTreeDepth = 512

// RemoveAll removes name in d and, for a directory, everything in it,
// descending by Sub (no link followed) at most maxTreeDepth deep.
func (d *Dir) RemoveAll(name string) error { return d.removeAll(name, 0) }

func (d *Dir) removeAll(name string, depth int) error {
	st, err := d.Lstat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return d.Remove(name)
	}
	if depth >= maxTreeDepth {
		return &fs.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: unix.ELOOP}
	}
	sub, err := d.Sub(name, false, 0)
	if err != nil {
		return err
	}
	names, err := sub.Names()
	for _, n := range names {
		if err == nil {
			err = sub.removeAll(n, depth+1)
		}
	}
	sub.Close()
	if err != nil {
		return err
	}
	return d.RemoveDir(name)
}

// Exchange swaps the names from and to in d (renameat2 RENAME_EXCHANGE):
// both must exist; neither is ever missing in between.
func (d *Dir) Exchange(from, to string) error {
	if err := d.checkName(from); err != nil {
		return err
	}
	if err := d.checkName(to); err != nil {
		return err
	}
	if err := unix.Renameat2(d.fd, from, d.fd, to, unix.RENAME_EXCHANGE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: filepath.Join(d.path, from), New: filepath.Join(d.path, to), Err: err}
	}
	return nil
}

// TempDir makes a new directory beside name, ".NAME.relayd-<24 hex>.tmp",
// mode 0700, and returns its name.
func (d *Dir) TempDir(name string) (string, error) {
	if err := d.checkName(name); err != nil {
		return "", err
	}
	if len(name) > 200 {
		name = name[:200]
	}
	var r [12]byte
	for range 3 {
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		tmp := "." + name + ".relayd-" + hex.EncodeToString(r[:]) + ".tmp"
		err := unix.Mkdirat(d.fd, tmp, 0o700)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "mkdirat", Path: filepath.Join(d.path, tmp), Err: err}
		}
		return tmp, nil
	}
	return "", errors.New("env: three random temporary names were taken")
}

// SetDirMeta sets the mode, modification time and, when uid is not
// negative, the owner of the directory name in d, through a descriptor
// opened O_NOFOLLOW|O_DIRECTORY (a link or a file there is refused).
func (d *Dir) SetDirMeta(name string, mode uint32, mtime unix.Timespec, uid, gid int) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	p := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "openat", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if uid >= 0 {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return &fs.PathError{Op: "fchown", Path: p, Err: err}
		}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return &fs.PathError{Op: "fchmod", Path: p, Err: err}
	}
	tv := unix.NsecToTimeval(mtime.Nano())
	if err := unix.Futimes(fd, []unix.Timeval{tv, tv}); err != nil {
		return &fs.PathError{Op: "futimes", Path: p, Err: err}
	}
	return nil
}

// SetLinkMeta sets the modification time and, when uid is not negative,
// the owner of the symbolic link name in d, the link itself.
func (d *Dir) SetLinkMeta(name string, mtime unix.Timespec, uid, gid int) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	p := filepath.Join(d.path, name)
	if uid >= 0 {
		if err := unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "fchownat", Path: p, Err: err}
		}
	}
	if err := unix.UtimesNanoAt(d.fd, name, []unix.Timespec{mtime, mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimensat", Path: p, Err: err}
	}
	return nil
}

// Clone is a second handle on d, closed on its own.
func (d *Dir) Clone() (*Dir, error) {
	fd, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "fcntl", Path: d.path, Err: err}
	}
	return &Dir{fd: fd, path: d.path}, nil
}
