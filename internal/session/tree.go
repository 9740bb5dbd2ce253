package session

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/protocol"
)

// Trees (protocol 4.6, "Trees"): a put with "format":"tar" unpacks a tar
// stream into a directory, a get with it packs one, with relayd's own tar
// reader and writer (a container may have no tar program). Every member
// is reached from the directory held open, one name at a time, by
// env.Dir: no link is followed, nothing is opened that could block, and
// it all runs with the request's user's rights (asUser).
//
// The Go client unpacks a downloaded tree with a reader of its own
// (client/dirs.go): ARCHITECTURE.md, "Two tar readers, on purpose", says
// why the two share no code.

// maxTreeMembers bounds the members of one tree, either way: what relayd
// keeps per member (a directory's times, a file's name for hard links)
// stays a few tens of MiB.
const maxTreeMembers = 250_000

// maxTreeDepth bounds how deep a member lies, either way.
const maxTreeDepth = 256

// maxRefusedNamed bounds the refused members a reply names; the rest are
// counted in its last entry.
const maxRefusedNamed = 100

// treeCount is what an unpack or a pack did.
type treeCount struct {
	files   int64 // members written or packed (directories, links included)
	bytes   int64 // of regular files
	refused []string
	more    int // refused beyond maxRefusedNamed
}

func (c *treeCount) refuse(name, why string) {
	if len(c.refused) < maxRefusedNamed {
		c.refused = append(c.refused, name+": "+why)
		return
	}
	c.more++
}

// list is the refused list a reply carries.
func (c *treeCount) list() []string {
	if c.more == 0 {
		return c.refused
	}
	return append(slices.Clip(c.refused), fmt.Sprintf("... and %d more", c.more))
}

// memberPath cleans a member's name into its components below the
// tree; ok is false for an absolute name or one with "..".
func memberPath(name string) (parts []string, ok bool) {
	if strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return nil, false
	}
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
		case "..":
			return nil, false
		default:
			parts = append(parts, p)
		}
	}
	return parts, true
}

// dirMeta is a directory's mode and time, set once its members are in.
type dirMeta struct {
	parts    []string
	mode     uint32
	mtime    unix.Timespec
	uid, gid int
}

// unpacker writes one tar stream's members below root.
type unpacker struct {
	root    *env.Dir
	owners  bool  // set the archive's owners (root only)
	keep    bool  // "links":"keep": symbolic links are kept whatever their target
	max     int64 // of regular files' bytes in all
	count   treeCount
	regular map[string]bool // members written as regular files: hard links may point at them
	dirs    []dirMeta
	links   []linkMade // without keep: judged again once every member is in
}

// linkMade is a symbolic link the put wrote.
type linkMade struct {
	parts   []string
	target  string
	counted bool // in count.files (not refused for its times or owner)
}

// treeError is an unpack that cannot go on.
type treeError struct{ msg string }

func (e *treeError) Error() string { return e.msg }

// unpack reads the tar stream r into root member by member. A member that
// would land outside root, or that is a device, a FIFO or of a kind tar
// readers disagree on, is refused by name and skipped; a broken stream,
// or one over max bytes, ends it with an error.
func unpack(r io.Reader, root *env.Dir, owners, keep bool, max int64) (treeCount, error) {
	u := &unpacker{root: root, owners: owners, keep: keep, max: max, regular: map[string]bool{}}
	tr := tar.NewReader(r)
	seen := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.count, &treeError{fmt.Sprintf("the tar stream is broken after %d members: %v", u.count.files, err)}
		}
		if seen++; seen > maxTreeMembers {
			return u.count, &treeError{fmt.Sprintf("the tar stream has more than %d members", maxTreeMembers)}
		}
		if err := u.member(h, tr); err != nil {
			return u.count, err
		}
	}
	u.recheck()
	// Directories last, deepest first: their own times survive what was
	// written into them.
	slices.SortStableFunc(u.dirs, func(a, b dirMeta) int { return len(b.parts) - len(a.parts) })
	for _, m := range u.dirs {
		d, name, err := u.parent(m.parts, false)
		if err != nil {
			u.count.refuse(strings.Join(m.parts, "/"), describe2(err))
			continue
		}
		if name == "" {
			err = nil // the tree's own directory: its mode is the request's
		} else {
			err = d.SetDirMeta(name, m.mode, m.mtime, m.uid, m.gid)
		}
		d.Close()
		if err != nil {
			u.count.refuse(strings.Join(m.parts, "/"), describe2(err))
		}
	}
	_, _ = io.Copy(io.Discard, r) // the stream's padding: the body or chunks are read to their end
	return u.count, nil
}

// parent opens the directory that holds parts' last name, from root by
// Sub (mkdir: making what is missing, 0755), and returns it with that name;
// for no parts it returns root itself and "".
func (u *unpacker) parent(parts []string, mkdir bool) (*env.Dir, string, error) {
	cur := u.root
	var held *env.Dir
	for i := 0; i+1 < len(parts); i++ {
		next, err := cur.Sub(parts[i], mkdir, 0o755)
		if held != nil {
			held.Close()
		}
		if err != nil {
			return nil, "", err
		}
		cur, held = next, next
	}
	if held == nil {
		// root itself: a second handle, so that the caller may close it.
		h, err := u.root.Clone()
		if err != nil {
			return nil, "", err
		}
		held = h
	}
	if len(parts) == 0 {
		return held, "", nil
	}
	return held, parts[len(parts)-1], nil
}

func describe2(err error) string {
	switch {
	case errors.Is(err, env.ErrSymlink):
		return "a path through a symbolic link"
	case errors.Is(err, env.ErrNotDirectory):
		return "a path through something that is not a directory"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

func timespec(h *tar.Header) unix.Timespec { return unix.NsecToTimespec(h.ModTime.UnixNano()) }

func (u *unpacker) owner(h *tar.Header) (int, int) {
	if !u.owners {
		return -1, -1
	}
	return h.Uid, h.Gid
}

// member writes one member.
func (u *unpacker) member(h *tar.Header, body io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil // pax defaults for what follows (git archive writes one), not a member
	}
	parts, ok := memberPath(h.Name)
	name := h.Name
	if !ok {
		u.count.refuse(name, "outside the directory (an absolute name or \"..\")")
		return nil
	}
	if len(parts) > maxTreeDepth {
		u.count.refuse(name, fmt.Sprintf("more than %d directories deep", maxTreeDepth))
		return nil
	}
	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		u.count.refuse(name, "a device")
		return nil
	case tar.TypeFifo:
		u.count.refuse(name, "a FIFO")
		return nil
	case tar.TypeDir:
		if len(parts) == 0 {
			return nil // the tree's own directory
		}
		d, base, err := u.parent(parts, true)
		if err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		if st, err := d.Lstat(base); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			// Never replaced: the link may be what an earlier link leads
			// through; and never followed.
			d.Close()
			u.count.refuse(name, "a symbolic link is there")
			return nil
		}
		sub, err := d.Sub(base, true, 0o700)
		d.Close()
		if err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		sub.Close()
		uid, gid := u.owner(h)
		u.dirs = append(u.dirs, dirMeta{parts, uint32(h.Mode) & 0o7777, timespec(h), uid, gid})
		u.count.files++
		return nil
	case tar.TypeReg, tar.TypeRegA, tar.TypeSymlink, tar.TypeLink:
	default:
		u.count.refuse(name, fmt.Sprintf("a member of type %q relayd does not write", h.Typeflag))
		return nil
	}
	if len(parts) == 0 {
		u.count.refuse(name, "not a name below the directory")
		return nil
	}
	d, base, err := u.parent(parts, true)
	if err != nil {
		u.count.refuse(name, describe2(err))
		return nil
	}
	defer d.Close()
	member := strings.Join(parts, "/")
	if h.Typeflag == tar.TypeSymlink {
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			u.count.refuse(name, "a symbolic link to no name")
			return nil
		}
		if !u.keep {
			// Judged against the tree as it stands on disk now, through
			// its own descriptors: earlier links are followed as the
			// kernel will follow them. Before what the name holds is
			// replaced, so that a refused link leaves it as it was.
			if why := u.leaves(parts, h.Linkname); why != "" {
				u.count.refuse(name, why)
				return nil
			}
		}
	}
	delete(u.regular, member) // whatever it held is replaced
	if st, err := d.Lstat(base); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			u.count.refuse(name, "a directory is there")
			return nil
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
			if err := d.Remove(base); err != nil {
				u.count.refuse(name, describe2(err))
				return nil
			}
		}
	}
	uid, gid := u.owner(h)
	switch h.Typeflag {
	case tar.TypeSymlink:
		target := h.Linkname
		if err := d.Symlink(target, base); err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		if !u.keep {
			u.links = append(u.links, linkMade{parts: parts, target: target})
		}
		if err := d.SetLinkMeta(base, timespec(h), uid, gid); err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		if !u.keep {
			u.links[len(u.links)-1].counted = true
		}
	case tar.TypeLink:
		lparts, ok := memberPath(h.Linkname)
		if !ok || !u.regular[strings.Join(lparts, "/")] {
			u.count.refuse(name, "a hard link to what is not a file of this tree ("+h.Linkname+")")
			return nil
		}
		src, from, err := u.parent(lparts, false)
		if err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		// A file of this tree, as it is now: a hard link to a symbolic
		// link would be that link with another directory to start from.
		if st, err := src.Lstat(from); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			src.Close()
			u.count.refuse(name, "a hard link to what is not a file of this tree ("+h.Linkname+")")
			return nil
		}
		err = d.Link(src, from, base)
		src.Close()
		if err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		if st, err := d.Lstat(base); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			// Swapped for something else between the look and the link.
			_ = d.Remove(base)
			u.count.refuse(name, "a hard link to what is not a file of this tree ("+h.Linkname+")")
			return nil
		}
		u.regular[member] = true
	default:
		if u.count.bytes+h.Size > u.max {
			return &treeError{fmt.Sprintf("the tree's files are larger than --max-file-bytes (%d bytes) at %s", u.max, name)}
		}
		f, tmp, err := d.CreateTemp(base)
		if err != nil {
			u.count.refuse(name, describe2(err))
			return nil
		}
		_, err = io.CopyN(f, body, h.Size)
		if err == nil && uid >= 0 {
			err = f.Chown(uid, gid)
		}
		if err == nil {
			err = f.Chmod(fs.FileMode(h.Mode&0o777) | modeBits(uint32(h.Mode)))
		}
		if err == nil {
			tv := unix.NsecToTimeval(h.ModTime.UnixNano())
			err = unix.Futimes(int(f.Fd()), []unix.Timeval{tv, tv})
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = d.Rename(tmp, base)
		}
		if err != nil {
			_ = d.Remove(tmp)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return &treeError{fmt.Sprintf("the tar stream ends inside %s", name)}
			}
			u.count.refuse(name, describe2(err))
			return nil
		}
		u.count.bytes += h.Size
		u.regular[member] = true
	}
	u.count.files++
	return nil
}

// leaves says why a symbolic link at parts to target would lead outside
// the tree, judged on disk (env.Dir.Beneath), or "" when it stays in.
func (u *unpacker) leaves(parts []string, target string) string {
	err := u.root.Beneath(parts[:len(parts)-1], target)
	var le *env.LeaveError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &le):
		return fmt.Sprintf("a symbolic link to outside the directory (%s): %s", target, le.Why)
	}
	return fmt.Sprintf("a symbolic link whose target (%s) cannot be judged: %s", target, describe2(err))
}

// recheck judges every link the put wrote again, once every member is
// in: a later member may have changed what an earlier link leads through
// (a link replaced by another, a file by a link). One that leads outside
// now is removed and refused by name.
func (u *unpacker) recheck() {
	for _, l := range u.links {
		d, base, err := u.parent(l.parts, false)
		if err != nil {
			continue // gone with what held it
		}
		if to, err := d.Readlink(base); err == nil && to == l.target {
			if why := u.leaves(l.parts, l.target); why != "" {
				name := strings.Join(l.parts, "/")
				if err := d.Remove(base); err != nil {
					why += "; removing it failed: " + describe2(err)
				} else if l.counted {
					u.count.files--
				}
				u.count.refuse(name, why+", once later members were written")
			}
		}
		d.Close()
	}
}

// packer writes a directory's members as a tar stream.
type packer struct {
	tw      *tar.Writer
	exclude []string
	max     int64
	count   treeCount
	inodes  map[[2]uint64]string // hard links: the first name packed of each inode
	buf     []byte
	seen    int
}

// pack writes the tree below root to w as a tar stream: directories,
// regular files, symbolic links (never followed) and hard links between
// its files, names relative to root, leaving out what exclude matches
// (a member's path or its last name) and refusing by name what is
// neither (a FIFO, a device, a socket).
func pack(root *env.Dir, w io.Writer, exclude []string, max int64) (treeCount, error) {
	p := &packer{tw: tar.NewWriter(w), exclude: exclude, max: max, inodes: map[[2]uint64]string{}, buf: make([]byte, bodyBufBytes)}
	if err := p.dir(root, "", 0); err != nil {
		return p.count, err
	}
	return p.count, p.tw.Close()
}

func (p *packer) excluded(member string) bool {
	for _, x := range p.exclude {
		if ok, _ := path.Match(x, member); ok {
			return true
		}
		if ok, _ := path.Match(x, path.Base(member)); ok {
			return true
		}
	}
	return false
}

func (p *packer) dir(d *env.Dir, rel string, depth int) error {
	if depth >= maxTreeDepth {
		return &treeError{fmt.Sprintf("%s is more than %d directories deep", rel, maxTreeDepth)}
	}
	names, err := d.Names()
	if err != nil {
		return &treeError{fmt.Sprintf("listing %s: %v", d.Path(), err)}
	}
	slices.Sort(names)
	for _, name := range names {
		member := path.Join(rel, name)
		if p.excluded(member) {
			continue
		}
		if p.seen++; p.seen > maxTreeMembers {
			return &treeError{fmt.Sprintf("the tree has more than %d members", maxTreeMembers)}
		}
		st, err := d.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone meanwhile
		}
		if err != nil {
			p.count.refuse(member, describe2(err))
			continue
		}
		h := &tar.Header{Name: member, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: timeOf(st.Mtim), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, member+"/"
			if err := p.tw.WriteHeader(h); err != nil {
				return err
			}
			p.count.files++
			sub, err := d.Sub(name, false, 0)
			if err != nil {
				p.count.refuse(member, describe2(err))
				continue
			}
			err = p.dir(sub, member, depth+1)
			sub.Close()
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := d.Readlink(name)
			if err != nil {
				p.count.refuse(member, describe2(err))
				continue
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			if err := p.tw.WriteHeader(h); err != nil {
				return err
			}
			p.count.files++
		case unix.S_IFREG:
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := p.inodes[key]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				if err := p.tw.WriteHeader(h); err != nil {
					return err
				}
				p.count.files++
				continue
			}
			if err := p.file(d, name, member, h); err != nil {
				return err
			}
			if st.Nlink > 1 {
				p.inodes[key] = member
			}
		default:
			p.count.refuse(member, env.Kind(st.Mode))
		}
	}
	return nil
}

// file packs a regular file: the size its descriptor's fstat says, and
// exactly that many bytes (one that changes meanwhile ends the pack).
func (p *packer) file(d *env.Dir, name, member string, h *tar.Header) error {
	f, err := d.OpenFile(name)
	if err != nil {
		p.count.refuse(member, describe2(err))
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		p.count.refuse(member, describe2(err))
		return nil
	}
	if p.count.bytes+st.Size > p.max {
		return &treeError{fmt.Sprintf("the tree's files are larger than --max-file-bytes (%d bytes) at %s", p.max, member)}
	}
	h.Typeflag, h.Size, h.Mode, h.ModTime = tar.TypeReg, st.Size, int64(st.Mode&0o7777), timeOf(st.Mtim)
	if err := p.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyBuffer(p.tw, io.LimitReader(f, st.Size), p.buf)
	if err != nil {
		return err
	}
	if n != st.Size {
		return &treeError{fmt.Sprintf("%s shrank while it was packed", member)}
	}
	p.count.files++
	p.count.bytes += n
	return nil
}

func timeOf(t unix.Timespec) time.Time { return time.Unix(t.Sec, t.Nsec) }

// treeIn is a tree put in progress: the transfer's bytes go through a
// pipe to unpack, which runs with the put's user's rights into root (the
// target itself, or with replace a new directory beside it).
type treeIn struct {
	pw      *io.PipeWriter
	done    chan struct{}
	count   treeCount
	err     error // unpack's
	parent  *env.Dir
	name    string // the target's name in parent
	tmp     string // replace: the new directory's name in parent, renamed over name at the end
	existed bool   // replace: name was a directory
	mode    uint32 // replace: the new directory's mode, the old one's (else 0755)
}

// errAbandoned ends an unpack whose transfer was abandoned.
var errAbandoned = errors.New("the transfer was abandoned")

// openTree starts a tree put: the target directory (or, with replace, a
// new one beside it) opened with the user's rights, and unpack reading
// the transfer's bytes.
func (s *Server) openTree(x *transfer, p *protocol.Put) (*transfer, *fileError) {
	if p.Owners && !((x.cred == nil && os.Geteuid() == 0) || (x.cred != nil && x.cred.Uid == 0)) {
		return nil, badFile(`put: "owners" needs the put to run as root`)
	}
	t := &treeIn{done: make(chan struct{})}
	var root *env.Dir
	var ferr *fileError
	err := asUser(x.cred, func() error {
		if t.parent, t.name, ferr = openDir("put", x.target, p.Parents); ferr != nil {
			return nil
		}
		st, err := t.parent.Lstat(t.name)
		switch {
		case err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			ferr = badFile("put: %s is %s, not a directory; a tree goes into a directory", x.target, env.Kind(st.Mode))
			return nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			ferr = pathError("put", x.target, err)
			return nil
		}
		t.existed, t.mode = err == nil, 0o755
		if t.existed {
			t.mode = uint32(st.Mode) & 0o7777
		}
		if !p.Replace {
			if root, err = t.parent.Sub(t.name, true, 0o755); err != nil {
				ferr = pathError("put", x.target, err)
			}
			return nil
		}
		if t.tmp, err = t.parent.TempDir(t.name); err != nil {
			ferr = pathError("put", "making a new directory beside "+x.target, err)
			return nil
		}
		if root, err = t.parent.Sub(t.tmp, false, 0); err != nil {
			ferr = pathError("put", "opening the new directory beside "+x.target, err)
		}
		return nil
	})
	if err != nil {
		ferr = badFile("put: cannot take the rights of uid %d: %v", x.cred.Uid, err)
	}
	if ferr != nil {
		if t.tmp != "" && t.parent != nil {
			_ = asUser(x.cred, func() error { return t.parent.RemoveAll(t.tmp) })
		}
		if t.parent != nil {
			t.parent.Close()
		}
		return nil, ferr
	}
	pr, pw := io.Pipe()
	t.pw = pw
	max, owners, keep, cred := s.maxFileBytes(), p.Owners, p.KeepLinks, x.cred
	go func() {
		defer close(t.done)
		defer root.Close()
		err := asUser(cred, func() error {
			t.count, t.err = unpack(pr, root, owners, keep, max)
			return nil
		})
		if t.err == nil {
			t.err = err
		}
		pr.CloseWithError(t.err) // nil: the writer's next write sees the pipe closed
	}()
	x.tree = t
	return x, nil
}

// failure is why a write into the tree failed: unpack's own error when it
// ended first.
func (t *treeIn) failure(err error) error {
	_ = t.pw.CloseWithError(errAbandoned)
	<-t.done
	if t.err != nil {
		return t.err
	}
	return err
}

// finish ends a tree put: the stream's end to unpack, and with replace
// the new directory renamed over the old one (exchanged, then the old
// removed), all with the put's user's rights.
func (t *treeIn) finish(x *transfer) *fileError {
	_ = t.pw.Close()
	<-t.done
	defer t.parent.Close()
	if t.err != nil {
		t.cleanup(x)
		return badFile("put: %s: %v", x.target, t.err)
	}
	if t.tmp == "" {
		return nil
	}
	var err error
	if aerr := asUser(x.cred, func() error {
		root, err2 := t.parent.Sub(t.tmp, false, 0)
		if err2 == nil {
			err2 = root.Chmod(t.mode)
			root.Close()
		}
		if err = err2; err != nil {
			return nil
		}
		if t.existed {
			if err = t.parent.Exchange(t.tmp, t.name); err == nil {
				err = t.parent.RemoveAll(t.tmp) // the old tree, now under the temporary name
			}
		} else {
			err = t.parent.Rename(t.tmp, t.name)
		}
		return nil
	}); aerr != nil {
		err = aerr
	}
	if err != nil {
		t.cleanup(x)
		return pathError("put", "putting the new tree in place of "+x.target, err)
	}
	_ = t.parent.Sync()
	return nil
}

// abort ends a tree put that was abandoned.
func (t *treeIn) abort(x *transfer) {
	_ = t.pw.CloseWithError(errAbandoned)
	<-t.done
	t.cleanup(x)
	t.parent.Close()
}

// cleanup removes replace's new directory, if it is still there.
func (t *treeIn) cleanup(x *transfer) {
	if t.tmp != "" {
		_ = asUser(x.cred, func() error { return t.parent.RemoveAll(t.tmp) })
	}
}

// getTree answers a get with "format":"tar": the directory path packed
// with the user's rights, in content chunks or, with "body", one raw
// body. A body's size and sha256 come first, so the tree is packed
// twice; one that changes in between closes the connection inside the
// body.
func (cn *conn) getTree(id json.RawMessage, g *protocol.Get, path string) {
	cred, ferr := cn.srv.fileCred("get", g.User)
	if ferr != nil {
		cn.refuse(id, g.Ignored, ferr.category, ferr.message)
		return
	}
	max := cn.srv.maxFileBytes()
	var root *env.Dir
	if err := asUser(cred, func() error {
		var err error
		if root, err = env.OpenDir(path, false, 0); err != nil {
			ferr = pathError("get", path, err)
		}
		return nil
	}); err != nil {
		ferr = badFile("get: cannot take the rights of uid %d: %v", cred.Uid, err)
	}
	if ferr != nil {
		cn.refuse(id, g.Ignored, ferr.category, ferr.message)
		return
	}
	defer root.Close()
	packAs := func(w io.Writer) (count treeCount, err error) {
		if aerr := asUser(cred, func() error { count, err = pack(root, w, g.Exclude, max); return nil }); aerr != nil {
			err = aerr
		}
		return count, err
	}
	if !g.Body {
		cw := &chunkWriter{cn: cn, id: id, buf: make([]byte, 0, cn.srv.contentChunk())}
		if !g.NoDigest {
			cw.sum = sha256.New()
		}
		count, err := packAs(cw)
		if err == nil {
			err = cw.flush(false)
		}
		if err != nil {
			cn.refuse(id, g.Ignored, protocol.CatBadRequest, fmt.Sprintf("get: packing %s failed after %d bytes: %v; discard the content sent", path, cw.n, err))
			return
		}
		n := cw.n
		last := protocol.Content{Token: cn.token(), Kind: "content", ID: id, Data: []byte{}, Bytes: &n,
			Files: &count.files, Refused: count.list(), Ignored: g.Ignored}
		if cw.sum != nil {
			last.Sha256 = hex.EncodeToString(cw.sum.Sum(nil))
		}
		cn.write(last)
		return
	}
	// The size goes first, so the tree is packed twice: once to count
	// (and, unless "digest":"none", hash) it, once to send it, hashed as
	// it goes. A tree that differs between the two is answered by a
	// failed error in place of sent, its body cut or made up with zero
	// bytes to the size announced, so that the stream stays in step.
	cnt := &countingHash{}
	if !g.NoDigest {
		cnt.h = sha256.New()
	}
	count, err := packAs(cnt)
	if err != nil {
		cn.refuse(id, g.Ignored, protocol.CatBadRequest, fmt.Sprintf("get: packing %s failed: %v", path, err))
		return
	}
	head := protocol.ContentBody{Token: cn.token(), Kind: "content", ID: id, Bytes: cnt.n,
		Body: cnt.n, Files: &count.files, Refused: count.list(), Ignored: g.Ignored}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if cn.lost.Load() {
		return
	}
	_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if err := protocol.WriteLine(cn.c, head); err != nil {
		cn.lostWriting(err)
		return
	}
	bw := &bodyWriter{cn: cn, left: cnt.n}
	if cnt.h != nil {
		bw.h = sha256.New()
	}
	_, perr := packAs(bw)
	if bw.werr != nil {
		cn.lostWriting(bw.werr)
		return
	}
	short := bw.left
	if short > 0 {
		if err := cn.sendZeros(short); err != nil {
			cn.lostWriting(err)
			return
		}
	}
	var last any = protocol.Sent{Token: cn.token(), Kind: "sent", ID: id, Ignored: g.Ignored}
	switch {
	case perr != nil || short > 0 || bw.h != nil && !bytes.Equal(bw.h.Sum(nil), cnt.h.Sum(nil)):
		why := "it changed while it was sent"
		if perr != nil && !errors.Is(perr, errBodyGrew) {
			why = fmt.Sprintf("packing it again failed: %v", perr)
		}
		cn.log.Warn().Str("path", path).Msg("get: the tree changed while its body was sent")
		last = protocol.ErrorReply{Kind: "error", ID: id, Ignored: g.Ignored, Error: &protocol.Error{Category: protocol.CatFailed,
			Message: fmt.Sprintf("get: %s: %s; the %d bytes sent are not the tree", path, why, cnt.n)}}
	case bw.h != nil:
		last = protocol.Sent{Token: cn.token(), Kind: "sent", ID: id, Sha256: hex.EncodeToString(bw.h.Sum(nil)), Ignored: g.Ignored}
	}
	_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if err := protocol.WriteLine(cn.c, last); err != nil {
		cn.lostWriting(err)
	}
}

// countingHash counts and hashes (with h) what is written to it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	if c.h != nil {
		c.h.Write(p)
	}
	c.n += int64(len(p))
	return len(p), nil
}

// errBodyGrew is a tree packed longer the second time than the first.
var errBodyGrew = errors.New("the body grew")

// bodyWriter writes at most left bytes of a body to the connection, each
// write with its own deadline, hashing them (with h); beyond left it
// writes nothing more and fails.
type bodyWriter struct {
	cn   *conn
	left int64
	h    hash.Hash
	werr error // the connection's
}

func (w *bodyWriter) Write(p []byte) (int, error) {
	q := p[:min(int64(len(p)), w.left)]
	if w.h != nil {
		w.h.Write(q)
	}
	_ = w.cn.c.SetWriteDeadline(time.Now().Add(w.cn.srv.cfg.WriteTimeout))
	if _, err := w.cn.c.Write(q); err != nil {
		w.werr = err
		return 0, err
	}
	w.left -= int64(len(q))
	if len(q) < len(p) {
		return len(q), errBodyGrew
	}
	return len(p), nil
}

// chunkWriter sends what is written to it as content chunks.
type chunkWriter struct {
	cn  *conn
	id  json.RawMessage
	buf []byte
	sum hash.Hash
	n   int64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	k := len(p)
	for len(p) > 0 {
		m := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+m]
		p = p[m:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(true); err != nil {
				return 0, err
			}
		}
	}
	return k, nil
}

// flush sends the chunk held, if any (more: further chunks follow).
func (w *chunkWriter) flush(more bool) error {
	if len(w.buf) == 0 {
		return nil
	}
	if w.sum != nil {
		w.sum.Write(w.buf)
	}
	w.n += int64(len(w.buf))
	if !w.cn.write(protocol.Content{Token: w.cn.token(), Kind: "content", ID: w.id, Data: w.buf, More: true}) {
		return errors.New("the connection failed")
	}
	w.buf = w.buf[:0]
	return nil
}
