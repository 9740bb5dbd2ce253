package marks

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MaxListed bounds the entries a changes reply lists (protocol 4.9).
const MaxListed = 10000

// Listed is one entry of a change list: as it is now (as the mark saw it
// for a deleted one); a modified one also has Was and What.
type Listed struct {
	Entry
	Was  *Entry
	What []string // of "content", "type", "mode", "owner", "target"
}

// Changes is what differs from a mark.
type Changes struct {
	Mark                     string
	Added, Modified, Deleted []Listed
	Omitted                  int64
	Entries                  int64 // entries walked now
	Duration                 time.Duration
}

// Count is how many changes were found, listed or not.
func (c *Changes) Count() int64 {
	return int64(len(c.Added)+len(c.Modified)+len(c.Deleted)) + c.Omitted
}

// Changes compares the tree with the mark name, under paths (default:
// the mark's), listing at most max entries (0: MaxListed). It reads a
// file's content only when its change time, size, inode or device
// differ from the mark's, or it changed while the mark was taken.
func (s *Store) Changes(name string, paths []string, max int, stop <-chan struct{}) (*Changes, error) {
	return s.changes(name, paths, max, stop, false)
}

// ChangesWait is Changes that waits for a restore of the mark to end
// instead of answering ErrBusy (the trial boundary's).
func (s *Store) ChangesWait(name string, paths []string, max int) (*Changes, error) {
	return s.changes(name, paths, max, nil, true)
}

// CheckUse refuses what a trial boundary's files cannot do with the mark
// name: paths outside it, or, with restore, outside its keep.
func (s *Store) CheckUse(name string, paths []string, restore bool) error {
	if err := CheckName(name); err != nil {
		return err
	}
	ps, err := checkPaths("protect", paths, false)
	if err != nil {
		return err
	}
	meta, err := s.meta(name)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if !excluded(p, meta.Paths) {
			return bad(`%s is not under any path of mark %q`, p, name)
		}
		if restore && !excluded(p, meta.Keep) {
			return bad(`%s is not inside a kept subtree of mark %q, so it cannot be restored`, p, name)
		}
	}
	return nil
}

func (s *Store) changes(name string, paths []string, max int, stop <-chan struct{}, wait bool) (*Changes, error) {
	began := time.Now()
	if max <= 0 {
		max = MaxListed
	}
	meta, narrow, unlock, err := s.use(name, paths, true, wait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, p := range narrow {
		if !excluded(p, meta.Paths) {
			return nil, bad(`"paths": %s is not under any path of mark %q`, p, name)
		}
	}
	roots := topRoots(meta.Paths)
	var only []string
	if len(narrow) > 0 {
		roots, only = topRoots(narrow), topRoots(narrow)
	}
	f, err := os.Open(s.path("m", name, "index"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &differ{c: &Changes{Mark: name}, idx: newIndexReader(f, only), start: meta.Start, max: max, buf: make([]byte, 128<<10)}
	named := map[string]bool{}
	for _, p := range append(append([]string(nil), meta.Paths...), meta.Keep...) {
		named[p] = true
	}
	w := &walker{named: named, skip: append(append([]string(nil), meta.Exclude...), meta.Internal...), stop: stop, visit: d.visit, gone: true}
	for _, r := range roots {
		if err := w.root(r); err != nil {
			return nil, err
		}
	}
	for e := d.idx.pop(); e != nil; e = d.idx.pop() {
		d.deleted(e)
	}
	if err := d.idx.failed(); err != nil {
		return nil, err
	}
	d.c.Duration = time.Since(began)
	return d.c, nil
}

type differ struct {
	c     *Changes
	idx   *indexReader
	start int64
	max   int
	buf   []byte
}

func (d *differ) room() bool {
	if len(d.c.Added)+len(d.c.Modified)+len(d.c.Deleted) < d.max {
		return true
	}
	d.c.Omitted++
	return false
}

func (d *differ) deleted(e *Entry) {
	if d.room() {
		d.c.Deleted = append(d.c.Deleted, Listed{Entry: *e})
	}
}

func (d *differ) visit(p string, dfd int, name string, st *unix.Stat_t, enter bool) error {
	d.c.Entries++
	for e := d.idx.peek(); e != nil && ComparePaths(e.Path, p) < 0; e = d.idx.peek() {
		d.deleted(d.idx.pop())
	}
	if err := d.idx.failed(); err != nil {
		return err
	}
	cur := entryOf(p, st)
	var rec *Entry
	if e := d.idx.peek(); e != nil && e.Path == p {
		rec = d.idx.pop()
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFLNK {
		t, err := readLink(dfd, name)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "readlink", Path: p, Err: err}
		}
		cur.Target = t
	}
	if rec == nil {
		if !d.room() {
			return nil
		}
		if typ == unix.S_IFREG {
			if err := d.hash(dfd, name, st, &cur); err != nil {
				return err
			}
		}
		d.c.Added = append(d.c.Added, Listed{Entry: cur})
		return nil
	}
	var what []string
	sameType := rec.Mode&unix.S_IFMT == typ && (typeName(rec.Mode) != "other" || rec.Rdev == cur.Rdev)
	if !sameType {
		what = append(what, "type")
	}
	if sameType && typ == unix.S_IFREG {
		if rec.Hashed && rec.Ctime == cur.Ctime && rec.Size == cur.Size && rec.Ino == cur.Ino && rec.Dev == cur.Dev && rec.Ctime < d.start {
			cur.SHA256, cur.Hashed = rec.SHA256, true
		} else if err := d.hash(dfd, name, st, &cur); err != nil {
			return err
		}
		if !cur.Hashed || !rec.Hashed || cur.SHA256 != rec.SHA256 {
			what = append(what, "content")
		}
	}
	if typ != unix.S_IFLNK && rec.Mode&0o7777 != cur.Mode&0o7777 {
		what = append(what, "mode")
	}
	if rec.UID != cur.UID || rec.GID != cur.GID {
		what = append(what, "owner")
	}
	if sameType && typ == unix.S_IFLNK && rec.Target != cur.Target {
		what = append(what, "target")
	}
	if len(what) == 0 || !d.room() {
		return nil
	}
	if !sameType && typ == unix.S_IFREG {
		if err := d.hash(dfd, name, st, &cur); err != nil {
			return err
		}
	}
	d.c.Modified = append(d.c.Modified, Listed{Entry: cur, Was: rec, What: what})
	return nil
}

func (d *differ) hash(dfd int, name string, st *unix.Stat_t, e *Entry) error {
	sum, ok, err := hashAt(dfd, name, st, d.buf)
	if err != nil {
		return &os.PathError{Op: "read", Path: e.Path, Err: err}
	}
	e.SHA256, e.Hashed = sum, ok
	return nil
}
