package marks

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxNotRestored bounds the paths a restore that could not finish names.
const MaxNotRestored = 10000

// Restored is what a restore did; NotRestored names what it could not
// put back, and Reason says why (the first failure).
type Restored struct {
	Mark                    string
	Removed, Written, Reset int64
	NotRestored             []string
	NotRestoredOmitted      int64
	Reason                  string
}

// Restore puts the paths (default: every kept subtree of the mark) back
// as the mark name recorded them, by descriptor (protocol 4.9). With
// wait it waits for a changes or another restore of the mark to end
// instead of answering ErrBusy.
func (s *Store) Restore(name string, paths []string, wait bool) (*Restored, error) {
	meta, ps, unlock, err := s.use(name, paths, false, wait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if len(ps) == 0 {
		ps = meta.Keep
	}
	for _, p := range ps {
		if !excluded(p, meta.Keep) {
			return nil, bad(`restore: %s is not inside a kept subtree of mark %q ("keep" of the mark)`, p, name)
		}
		if excluded(p, meta.Exclude) || excluded(p, meta.Internal) {
			return nil, bad(`restore: %s is excluded from mark %q`, p, name)
		}
	}
	objfd, err := unix.Open(s.path("objects"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(objfd)
	f, err := os.Open(s.path("m", name, "index"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &restorer{s: s, meta: meta, objfd: objfd, out: &Restored{Mark: name},
		skip: append(append([]string(nil), meta.Exclude...), meta.Internal...), buf: make([]byte, 128<<10),
		dbuf: make([]byte, direntsBuf), l: newLister(listers()), idx: newIndexReader(f, nil), recs: map[string]*Entry{}}
	defer r.l.close()
	roots := topRoots(ps)
	r.want = map[string]bool{}
	for _, p := range roots {
		for _, q := range r.chain(p) {
			r.want[q] = true
		}
	}
	for _, p := range roots {
		if err := r.path(p); err != nil {
			return nil, err
		}
	}
	if err := r.idx.failed(); err != nil {
		return nil, err
	}
	return r.out, nil
}

// use checks a request's mark name and paths (a changes' or a
// restore's), takes the mark's lock (shared: a changes') and reads its
// record; unlock releases the lock.
func (s *Store) use(name string, paths []string, shared, wait bool) (meta *Meta, ps []string, unlock func(), err error) {
	if err := CheckName(name); err != nil {
		return nil, nil, nil, err
	}
	if ps, err = checkPaths("paths", paths, false); err != nil {
		return nil, nil, nil, err
	}
	if unlock, err = s.lock(name, shared, wait); err != nil {
		return nil, nil, nil, err
	}
	if meta, err = s.meta(name); err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return meta, ps, unlock, nil
}

type restorer struct {
	s     *Store
	meta  *Meta
	objfd int
	out   *Restored
	skip  []string
	buf   []byte
	dbuf  []byte  // getdents'
	l     *lister // makes the listings ahead of the restore
	// idx is the mark's index, read once through the paths restored (in
	// walk order); recs holds the entries it passed of want, the
	// directories from each path's kept subtree down to it.
	idx  *indexReader
	want map[string]bool
	recs map[string]*Entry
}

// index opens the mark's index, keeping only what is under root.
func (r *restorer) index(root string) (*indexReader, *os.File, error) {
	f, err := os.Open(r.s.path("m", r.meta.Name, "index"))
	if err != nil {
		return nil, nil, err
	}
	return newIndexReader(f, []string{root}), f, nil
}

// seek reads the index up to p (the next entry is p or the first after
// it), keeping the entries of r.want it passes.
func (r *restorer) seek(p string) {
	for e := r.idx.peek(); e != nil && ComparePaths(e.Path, p) < 0; e = r.idx.peek() {
		r.idx.pop()
		if r.want[e.Path] {
			r.recs[e.Path] = e
		}
	}
}

// chain is p and its ancestors down from its kept subtree's root, the
// root first.
func (r *restorer) chain(p string) []string {
	var keepRoot string
	for _, k := range r.meta.Keep {
		if Under(p, k) && len(k) > len(keepRoot) {
			keepRoot = k
		}
	}
	var chain []string
	for q := p; ; q = filepath.Dir(q) {
		chain = append(chain, q)
		if q == keepRoot || q == "/" {
			break
		}
	}
	slices.Reverse(chain)
	return chain
}

// acted counts what the restore did so far, or tried to.
func (r *restorer) acted() int64 {
	return r.out.Removed + r.out.Written + r.out.Reset + int64(len(r.out.NotRestored)) + r.out.NotRestoredOmitted
}

func (r *restorer) failed(p string, err error) {
	if r.out.Reason == "" && err != nil {
		r.out.Reason = fmt.Sprintf("%s: %v", p, unwrapErrno(err))
	}
	if len(r.out.NotRestored) < MaxNotRestored {
		r.out.NotRestored = append(r.out.NotRestored, p)
	} else {
		r.out.NotRestoredOmitted++
	}
}

func unwrapErrno(err error) error {
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return err
}

// failedUnder names p and every entry the mark holds under it as not
// restored, consuming them from it.
func (r *restorer) failedUnder(p string, err error, it *indexReader) {
	r.failed(p, err)
	r.drain(p, it)
}

// drain names every entry the mark holds under p as not restored,
// consuming them from it.
func (r *restorer) drain(p string, it *indexReader) {
	for e := it.peek(); e != nil && Under(e.Path, p); e = it.peek() {
		it.pop()
		r.failed(e.Path, nil)
	}
}

// path restores the entry at p, inside a kept subtree, and what it holds.
func (r *restorer) path(p string) error {
	// The ancestors from the kept subtree's root down are directories of
	// the mark (made again if they are not); the first that the mark did
	// not record as a directory is what is restored.
	chain := r.chain(p)
	r.seek(p)
	if e := r.idx.peek(); e != nil && e.Path == p && r.want[p] {
		r.recs[p] = e
	}
	if err := r.idx.failed(); err != nil {
		return err
	}
	recs := r.recs
	for i, q := range chain[:len(chain)-1] {
		if e := recs[q]; e == nil || e.Mode&unix.S_IFMT != unix.S_IFDIR || e.NoDescend {
			chain, p = chain[:i+1], q
			break
		}
	}
	it := r.idx
	if p != chain[len(chain)-1] {
		// Cut short at an ancestor (passed already): read its entries anew.
		f, err := os.Open(r.s.path("m", r.meta.Name, "index"))
		if err != nil {
			return err
		}
		defer f.Close()
		it = newIndexReader(f, []string{p})
	}
	if p == "/" {
		fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		e := it.pop()
		if e == nil {
			return nil
		}
		r.dir(fd, "/", it, nil)
		r.setMeta(fd, "/", e, true)
		return nil
	}
	dfd, err := openPath(filepath.Dir(chain[0]))
	if err != nil {
		r.failedUnder(p, err, it)
		return nil
	}
	type held struct {
		fd int
		e  *Entry
	}
	var anc []held
	defer func() {
		// The ancestors' own times moved with the names changed in them.
		for i := len(anc) - 1; i >= 0; i-- {
			r.setMeta(anc[i].fd, "", anc[i].e, false)
			unix.Close(anc[i].fd)
		}
		unix.Close(dfd)
	}()
	cur := dfd
	for _, q := range chain[:len(chain)-1] {
		fd, ok := r.ensureDir(cur, q, recs[q], it, p)
		if !ok {
			return nil
		}
		anc = append(anc, held{fd, recs[q]})
		cur = fd
	}
	if e := it.peek(); e == nil || e.Path != p {
		// Not in the mark: it is removed.
		r.remove(cur, p, filepath.Base(p))
		return nil
	}
	r.entry(cur, filepath.Base(p), it.pop(), it, nil)
	return nil
}

// ensureDir opens the directory q (recorded as e) in dfd, making it
// again when something else is there; ok false when it cannot (named
// as not restored, with what is under p, the path restored).
func (r *restorer) ensureDir(dfd int, q string, e *Entry, it *indexReader, p string) (int, bool) {
	name := filepath.Base(q)
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fd, err := r.openDir(dfd, name, e.Dev)
		if err != nil {
			r.failed(q, err)
			r.drain(p, it)
			return -1, false
		}
		return fd, true
	}
	if err == nil {
		r.remove(dfd, q, name)
	}
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		r.failed(q, err)
		r.drain(p, it)
		return -1, false
	}
	r.out.Written++
	fd, err := r.openDir(dfd, name, e.Dev)
	if err != nil {
		r.failed(q, err)
		r.drain(p, it)
		return -1, false
	}
	return fd, true
}

// openDir opens the directory name in dfd with openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV (openat with
// O_NOFOLLOW where the kernel lacks it) and checks that it is on dev,
// the mark's device for it: a mount placed since is not written into.
func (r *restorer) openDir(dfd int, name string, dev uint64) (int, error) {
	var pst unix.Stat_t
	if err := unix.Fstat(dfd, &pst); err != nil {
		return -1, err
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	if pst.Dev == dev {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	fd, err := unix.Openat2(dfd, name, &how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = openDirAt(dfd, name)
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != dev {
		unix.Close(fd)
		if err == nil {
			err = errors.New("another filesystem is mounted there")
		}
		return -1, err
	}
	return fd, nil
}

// entry restores the entry name in dfd as e recorded it; have is what
// the listing of dfd saw there (nil: lstat it now).
func (r *restorer) entry(dfd int, name string, e *Entry, it *indexReader, have *dirent) {
	p := e.Path
	var st unix.Stat_t
	var exists bool
	if have == nil {
		exists = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	} else if exists = have.err == nil; exists {
		st = have.st
	}
	curType := st.Mode & unix.S_IFMT
	switch e.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if e.NoDescend {
			return // a mount the mark did not enter: left alone
		}
		made := false
		if exists && curType != unix.S_IFDIR {
			if !r.remove(dfd, p, name) {
				r.failedUnder(p, nil, it)
				return
			}
			exists = false
		}
		if !exists {
			if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
				r.failedUnder(p, err, it)
				return
			}
			made = true
			r.out.Written++
		}
		fd, ents := -1, []dirent(nil)
		if exists && have != nil && have.job != nil {
			// Its listing made ahead, when opened as openDir would.
			j := r.l.take(dfd, have, openBeneath, r.dbuf)
			if j.err == nil && j.fd >= 0 && have.st.Dev == e.Dev {
				fd, ents = j.fd, j.ents
			} else if j.fd >= 0 {
				unix.Close(j.fd)
			}
		}
		if fd < 0 {
			var err error
			if fd, err = r.openDir(dfd, name, e.Dev); err != nil {
				r.failedUnder(p, err, it)
				return
			}
		}
		defer unix.Close(fd)
		before := r.acted()
		r.dir(fd, p, it, ents)
		if !made && have != nil && r.acted() == before && st.Uid == e.UID && st.Gid == e.GID &&
			st.Mode&0o7777 == e.Mode&0o7777 && unix.TimespecToNsec(st.Mtim) == e.Mtime {
			return // as the mark has it, and nothing in it changed since it was listed
		}
		r.setMeta(fd, p, e, !made)
	case unix.S_IFREG:
		if exists && curType == unix.S_IFREG && e.Hashed && st.Ino == e.Ino && st.Dev == e.Dev &&
			unix.TimespecToNsec(st.Ctim) == e.Ctime && st.Size == e.Size && e.Ctime < r.meta.Start {
			return // untouched since the mark: a write, chmod, chown or utimes would have moved its change time
		}
		if exists && curType == unix.S_IFREG && e.Hashed {
			f, ok, err := openFile(dfd, name, &st)
			if err == nil && ok {
				same := st.Ino == e.Ino && st.Dev == e.Dev && unix.TimespecToNsec(st.Ctim) == e.Ctime && st.Size == e.Size && e.Ctime < r.meta.Start
				if !same {
					sum, ok, _ := hashAt(dfd, name, &st, r.buf)
					same = ok && sum == e.SHA256
				}
				if same {
					r.setMeta(int(f.Fd()), p, e, true)
					f.Close()
					return
				}
				f.Close()
			}
		}
		r.replace(dfd, name, e, exists && curType == unix.S_IFDIR)
	case unix.S_IFLNK:
		if exists && curType == unix.S_IFLNK {
			if t, err := readLink(dfd, name); err == nil && t == e.Target {
				changed := false
				if st.Uid != e.UID || st.Gid != e.GID {
					changed = true
					if err := unix.Fchownat(dfd, name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
						r.failed(p, err)
						return
					}
				}
				if unix.TimespecToNsec(st.Mtim) != e.Mtime {
					changed = true
					ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(e.Mtime)}
					_ = unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
				}
				if changed {
					r.out.Reset++
				}
				return
			}
		}
		r.replace(dfd, name, e, exists && curType == unix.S_IFDIR)
	default:
		if exists && curType == e.Mode&unix.S_IFMT && st.Rdev == e.Rdev {
			fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				r.setMetaPath(fd, p, e, &st)
				unix.Close(fd)
				return
			}
		}
		r.replace(dfd, name, e, exists && curType == unix.S_IFDIR)
	}
}

// dir restores what the directory fd (at p) holds, merging its entries
// (ents; nil: listed now) with the mark's entries of its children (both
// in byte order). The listings of its subdirectories are made ahead.
func (r *restorer) dir(fd int, p string, it *indexReader, ents []dirent) {
	if ents == nil {
		var err error
		if ents, err = list(fd, r.dbuf); err != nil {
			r.failedUnder(p, err, it)
			return
		}
	}
	mayskip := skipsUnder(p, r.skip)
	r.l.queue(fd, ents, openBeneath, func(i int) bool { return !mayskip || !excluded(join(p, ents[i].name), r.skip) })
	defer r.l.cancel(ents)
	i := 0
	for e := it.peek(); e != nil && Under(e.Path, p) && e.Path != p; e = it.peek() {
		it.pop()
		if filepath.Dir(e.Path) != p {
			continue // cannot happen in walk order
		}
		name := filepath.Base(e.Path)
		for ; i < len(ents) && ents[i].name < name; i++ {
			r.removeIfOurs(fd, join(p, ents[i].name), &ents[i])
		}
		have := &dirent{err: unix.ENOENT}
		if i < len(ents) && ents[i].name == name {
			have = &ents[i]
			i++
		}
		r.entry(fd, name, e, it, have)
	}
	for ; i < len(ents); i++ {
		r.removeIfOurs(fd, join(p, ents[i].name), &ents[i])
	}
}

func (r *restorer) removeIfOurs(fd int, p string, d *dirent) {
	if excluded(p, r.skip) {
		return
	}
	r.l.cancel(unsafe.Slice(d, 1))
	r.remove(fd, p, d.name)
}

// openBeneath opens the directory name in pfd as openDir does, on
// pfd's filesystem, checked by fstat to be the one lstat saw (st); -1
// when it was replaced meanwhile. A restore takes such a descriptor made
// ahead only where openDir would have made the same.
func openBeneath(pfd int, name string, st *unix.Stat_t) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	fd, err := unix.Openat2(pfd, name, &how)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = openDirAt(pfd, name)
	}
	if err != nil {
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// remove removes name in dfd (at p) and everything under it, without
// following a link or entering another filesystem; false when it could
// not (named as not restored).
func (r *restorer) remove(dfd int, p, name string) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return errors.Is(err, unix.ENOENT)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fd, err := r.openDir(dfd, name, st.Dev)
		if err == nil {
			var pst unix.Stat_t
			if unix.Fstat(dfd, &pst) == nil && pst.Dev != st.Dev {
				err = errors.New("another filesystem is mounted there")
			}
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			r.failed(p, err)
			return false
		}
		names, err := readNames(fd, r.dbuf)
		ok := err == nil
		for _, n := range names {
			ok = r.remove(fd, join(p, n), n) && ok
		}
		unix.Close(fd)
		if !ok {
			return false
		}
		if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			r.failed(p, err)
			return false
		}
	} else if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		r.failed(p, err)
		return false
	}
	r.out.Removed++
	return true
}

// tempName is a new name beside name for what replaces it.
func tempName(name string) string {
	if len(name) > 200 {
		name = name[:200]
	}
	return "." + name + randomName(".relayd-") + ".tmp"
}

// replace writes e anew beside name in dfd and renames it over name:
// a reader sees what was there or the mark's, never a mix.
func (r *restorer) replace(dfd int, name string, e *Entry, overDir bool) {
	p := e.Path
	tmp := tempName(name)
	var err error
	switch e.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		err = r.writeFile(dfd, tmp, e)
	case unix.S_IFLNK:
		if err = unix.Symlinkat(e.Target, dfd, tmp); err == nil {
			if err = unix.Fchownat(dfd, tmp, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err == nil {
				ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(e.Mtime)}
				err = unix.UtimesNanoAt(dfd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
	default:
		if err = unix.Mknodat(dfd, tmp, e.Mode&^0o7777|0o600, int(e.Rdev)); err == nil {
			var fd int
			if fd, err = unix.Openat(dfd, tmp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				var st unix.Stat_t
				if err = unix.Fstat(fd, &st); err == nil {
					err = r.setMetaPath(fd, p, e, &st)
				}
				unix.Close(fd)
			}
		}
	}
	if err == nil && overDir {
		if !r.remove(dfd, p, name) {
			err = errors.New("what is there could not be removed")
		}
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		r.failed(p, err)
		return
	}
	r.out.Written++
}

// writeFile makes tmp in dfd with e's kept content, owner, mode and time.
func (r *restorer) writeFile(dfd int, tmp string, e *Entry) error {
	if !e.Kept {
		return errors.New("its content was not kept (it changed or vanished while the mark was taken)")
	}
	src, err := unix.Openat(r.objfd, hex.EncodeToString(e.SHA256[:]), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("its kept content is missing from the store: %w", err)
	}
	defer unix.Close(src)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	if unix.IoctlFileClone(fd, src) != nil {
		if err := copyFd(f, src, r.buf); err != nil {
			return err
		}
	}
	if err := unix.Fchown(fd, int(e.UID), int(e.GID)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, e.Mode&0o7777); err != nil {
		return err
	}
	return futimens(fd, e.Mtime)
}

// copyFd copies what the descriptor src holds to dst.
func copyFd(dst *os.File, src int, buf []byte) error {
	for {
		k, err := unix.Read(src, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return nil
		}
		if _, err := dst.Write(buf[:k]); err != nil {
			return err
		}
	}
}

// setMeta sets the owner, mode and modification time of the open fd
// (a directory or a regular file at p) to e's; count: a difference
// counts as reset.
func (r *restorer) setMeta(fd int, p string, e *Entry, count bool) {
	fail := func(err error) {
		if p != "" {
			r.failed(p, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		fail(err)
		return
	}
	changed := false
	if st.Uid != e.UID || st.Gid != e.GID {
		changed = true
		if err := unix.Fchown(fd, int(e.UID), int(e.GID)); err != nil {
			fail(err)
			return
		}
		_ = unix.Fstat(fd, &st)
	}
	if st.Mode&0o7777 != e.Mode&0o7777 {
		changed = true
		if err := unix.Fchmod(fd, e.Mode&0o7777); err != nil {
			fail(err)
			return
		}
	}
	if unix.TimespecToNsec(st.Mtim) != e.Mtime {
		changed = changed || e.Mode&unix.S_IFMT != unix.S_IFDIR // a directory's time moves with its names
		if err := futimens(fd, e.Mtime); err != nil {
			fail(err)
			return
		}
	}
	if changed && count && p != "" {
		r.out.Reset++
	}
}

// setMetaPath sets the owner, mode and time of what the O_PATH fd holds
// (a FIFO, a socket, a device), through /proc/self/fd (chmod on an
// O_PATH descriptor).
func (r *restorer) setMetaPath(fd int, p string, e *Entry, st *unix.Stat_t) error {
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	changed := false
	if st.Uid != e.UID || st.Gid != e.GID {
		changed = true
		if err := unix.Fchownat(fd, "", int(e.UID), int(e.GID), unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	if st.Mode&0o7777 != e.Mode&0o7777 || changed {
		changed = true
		if err := unix.Chmod(proc, e.Mode&0o7777); err != nil {
			return err
		}
	}
	if changed {
		r.out.Reset++
	}
	return nil
}

// futimens sets the modification time of fd (utimensat(fd, NULL, ...)),
// leaving its access time.
func futimens(fd int, mtime int64) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
