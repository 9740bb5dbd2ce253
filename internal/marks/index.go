package marks

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Entry is what a mark records of one entry, or what a walk sees now.
type Entry struct {
	Path   string
	Mode   uint32 // st_mode: type and permission bits
	UID    uint32
	GID    uint32
	Size   int64
	Mtime  int64 // ns since the epoch
	Ctime  int64 // ns since the epoch: the kernel's change time
	Ino    uint64
	Dev    uint64
	Rdev   uint64
	Target string   // a symbolic link's
	SHA256 [32]byte // a regular file's content, when Hashed
	Hashed bool
	// Kept: the content is in the store (the entry is inside a keep
	// subtree), under SHA256.
	Kept bool
	// NoDescend: a directory the walk did not enter (another
	// filesystem not named in paths).
	NoDescend bool
}

// Type names the entry's type as the wire does: file, dir, symlink, other.
func (e *Entry) Type() string { return typeName(e.Mode) }

func typeName(mode uint32) string {
	switch mode & sIFMT {
	case sIFREG:
		return "file"
	case sIFDIR:
		return "dir"
	case sIFLNK:
		return "symlink"
	}
	return "other"
}

// File type bits of st_mode (as <sys/stat.h>).
const (
	sIFMT  = 0o170000
	sIFREG = 0o100000
	sIFDIR = 0o040000
	sIFLNK = 0o120000
)

// ComparePaths orders paths as every walk visits them: component by
// component, names in byte order, a directory before what it holds.
// It is byte order with '/' taken as the lowest byte (a name holds no
// NUL).
func ComparePaths(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			ca = 0
		}
		if cb == '/' {
			cb = 0
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// Under reports whether p is root or inside it.
func Under(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return len(p) >= len(root) && p[:len(root)] == root && (len(p) == len(root) || p[len(root)] == '/' && len(p) > len(root)+1)
}

const (
	flagHashed = 1 << iota
	flagKept
	flagNoDescend
)

// indexWriter writes entries, in walk order, to a mark's index.
type indexWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newIndexWriter(w io.Writer) *indexWriter {
	return &indexWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (x *indexWriter) put(e *Entry) error {
	b := x.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(e.Path)))
	b = append(b, e.Path...)
	var flags byte
	if e.Hashed {
		flags |= flagHashed
	}
	if e.Kept {
		flags |= flagKept
	}
	if e.NoDescend {
		flags |= flagNoDescend
	}
	b = append(b, flags)
	for _, v := range []uint64{uint64(e.Mode), uint64(e.UID), uint64(e.GID), uint64(e.Size), uint64(e.Mtime), uint64(e.Ctime), e.Ino, e.Dev, e.Rdev} {
		b = binary.AppendUvarint(b, v)
	}
	if e.Hashed {
		b = append(b, e.SHA256[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Target)))
	b = append(b, e.Target...)
	x.buf = b
	_, err := x.w.Write(b)
	return err
}

func (x *indexWriter) flush() error { return x.w.Flush() }

// maxRecordPath bounds a path read back from an index.
const maxRecordPath = 1 << 16

var errCorrupt = errors.New("marks: the index is corrupt")

// indexReader reads a mark's index back, one entry ahead.
type indexReader struct {
	r    *bufio.Reader
	next *Entry
	err  error
	// only, when not empty, keeps the entries under one of these roots
	// (sorted by ComparePaths) and skips the others.
	only    []string
	scratch []byte // a path or target read, before it is a string
}

func newIndexReader(r io.Reader, only []string) *indexReader {
	x := &indexReader{r: bufio.NewReaderSize(r, 64<<10), only: only}
	x.advance()
	return x
}

// peek is the next entry, nil at the end (or on an error, in err).
func (x *indexReader) peek() *Entry { return x.next }

// pop returns the next entry and reads the one after.
func (x *indexReader) pop() *Entry {
	e := x.next
	if e != nil {
		x.advance()
	}
	return e
}

func (x *indexReader) advance() {
	for {
		e, err := x.read()
		if err != nil {
			x.next = nil
			if err != io.EOF {
				x.err = err
			}
			return
		}
		if x.keeps(e.Path) {
			x.next = e
			return
		}
	}
}

func (x *indexReader) keeps(p string) bool {
	if len(x.only) == 0 {
		return true
	}
	for _, r := range x.only {
		if Under(p, r) {
			return true
		}
	}
	return false
}

func (x *indexReader) read() (*Entry, error) {
	n, err := binary.ReadUvarint(x.r)
	if err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, errCorrupt
	}
	if n == 0 || n > maxRecordPath {
		return nil, errCorrupt
	}
	e := &Entry{}
	if cap(x.scratch) < int(n) {
		x.scratch = make([]byte, n)
	}
	b := x.scratch[:n]
	if _, err := io.ReadFull(x.r, b); err != nil {
		return nil, errCorrupt
	}
	e.Path = string(b)
	flags, err := x.r.ReadByte()
	if err != nil {
		return nil, errCorrupt
	}
	var v [9]uint64
	for i := range v {
		if v[i], err = binary.ReadUvarint(x.r); err != nil {
			return nil, errCorrupt
		}
	}
	e.Mode, e.UID, e.GID, e.Size, e.Mtime, e.Ctime = uint32(v[0]), uint32(v[1]), uint32(v[2]), int64(v[3]), int64(v[4]), int64(v[5])
	e.Ino, e.Dev, e.Rdev = v[6], v[7], v[8]
	e.Hashed, e.Kept, e.NoDescend = flags&flagHashed != 0, flags&flagKept != 0, flags&flagNoDescend != 0
	if e.Hashed {
		if _, err := io.ReadFull(x.r, e.SHA256[:]); err != nil {
			return nil, errCorrupt
		}
	}
	n, err = binary.ReadUvarint(x.r)
	if err != nil || n > maxRecordPath {
		return nil, errCorrupt
	}
	if n > 0 {
		if cap(x.scratch) < int(n) {
			x.scratch = make([]byte, n)
		}
		t := x.scratch[:n]
		if _, err := io.ReadFull(x.r, t); err != nil {
			return nil, errCorrupt
		}
		e.Target = string(t)
	}
	return e, nil
}

// failed is the reader's error, if any, for a caller that reached the end.
func (x *indexReader) failed() error {
	if x.err != nil {
		return fmt.Errorf("reading the mark's index: %w", x.err)
	}
	return nil
}
