package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/protocol"
	"golang.org/x/sys/unix"
)

// The file transfers of section 4.6 ("Files"), served by the connection's loop:
// a put's chunks are written as they come, a get's are read and sent one
// at a time, so that memory holds one chunk whatever the file's size.

// DefaultMaxFileBytes is the default of --max-file-bytes (protocol section 9).
const DefaultMaxFileBytes = 1 << 30

// maxContentChunk is the most raw bytes of one content message.
const maxContentChunk = 256 << 10

// transfer is a put in progress on one connection: a temporary file beside
// the target, renamed over it on the last chunk.
type transfer struct {
	id      json.RawMessage
	target  string   // absolute
	dir     *env.Dir // the target's directory, held open (rule 6.13)
	tmp     *os.File
	tmpName string              // tmp's name in dir
	cred    *syscall.Credential // the put's user; nil: relayd's
	mode    uint32
	n       int64
	sum     hash.Hash // nil with "digest":"none"
	ignored []string
	buf     []byte  // the decoded chunk, reused
	tree    *treeIn // a tar stream unpacked as it comes (tree.go); tmp is nil then
	// written is what went to tmp; flushed, how much of it relayd asked
	// the kernel to write back already.
	written, flushed int64
}

// write takes the next bytes of the transfer.
func (x *transfer) write(p []byte) error {
	if x.tree != nil {
		_, err := x.tree.pw.Write(p)
		return err
	}
	n, err := x.tmp.Write(p)
	x.written += int64(n)
	if x.written-x.flushed >= writebackBytes {
		// Start writing back what came so far, without waiting for it:
		// the fsync before the rename then waits for the last piece only,
		// not for the whole file (0.5 s per GiB here).
		startWriteback(int(x.tmp.Fd()), x.flushed, x.written-x.flushed)
		x.flushed = x.written
	}
	return err
}

// writebackBytes is how much of a put is written before relayd asks the
// kernel to start writing it back (transfer.write). With it, the fsync of
// a 1 GiB put took 4 ms where it took 458 ms, and the 127 requests 128 ms
// in all (strace -T), the put at about 1.08x the rate (docs/performance.md).
const writebackBytes = 8 << 20

// startWriteback asks the kernel to start writing back n bytes of fd from
// off, without waiting for them (a test counts what it asks).
var startWriteback = func(fd int, off, n int64) {
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// fileState is a connection's put: the transfer open, or the rest of a
// refused one being discarded, or the transfer a raw body is copied into.
type fileState struct {
	xfer       *transfer
	discarding bool // a chunk was refused: later chunks (puts without "path") are dropped, up to the last

	body   *bodySink // the transfer the reader copies a body into, until it says the body is whole
	bodyIn *bodyIn   // and that body
}

// bodyBufBytes is the buffer through which a raw body is copied, either
// way: memory holds this much of a body whatever its size.
const bodyBufBytes = 256 << 10

// bodyIn is a put's raw body (section 4.6, "Bulk bodies") that follows the
// line it came with. The reader, having handed the line to the loop, waits
// on to for where the body's bytes go: a transfer's file, io.Discard for a
// refused put, nil when the stream cannot be followed ("body" is not a
// count). It closes copied once it stopped writing.
type bodyIn struct {
	n       int64
	to      chan io.Writer // buffered 1; given once
	given   bool
	claimed bool // put saw it (and answered its message)
	copied  chan struct{}
}

func (b *bodyIn) give(w io.Writer) {
	if !b.given {
		b.given = true
		b.to <- w
	}
}

// bodySink is a transfer as the reader writes a body into it: a write
// that fails keeps its error and the rest of the body is dropped, so that
// the stream stays in step; the put is then refused.
type bodySink struct {
	x   *transfer
	err error
}

func (s *bodySink) Write(p []byte) (int, error) {
	if s.err == nil {
		if err := s.x.write(p); err != nil {
			s.err = err
		} else {
			s.x.hash(p)
			s.x.n += int64(len(p))
		}
	}
	return len(p), nil
}

// ReadBodyFrom takes up to n bytes of a body straight from the stream
// (protocol.BodyReaderFrom) when nothing is to be hashed or unpacked:
// splice(2) from the socket into the temporary file, without a copy
// through relayd's memory, in pieces of writebackBytes, each then asked
// to be written back as transfer.write does. A failure of the file is
// kept as the sink's error (the rest of the body is then dropped through
// Write); the stream's is returned.
func (s *bodySink) ReadBodyFrom(src io.Reader, n int64) (int64, error) {
	x := s.x
	if s.err == nil && x.sum != nil && x.tree == nil {
		return s.readHashed(src, n)
	}
	if _, ok := src.(syscall.Conn); !ok || s.err != nil || x.sum != nil || x.tree != nil {
		return 0, nil
	}
	var got int64
	for got < n {
		piece := min(writebackBytes, n-got)
		k, err := x.tmp.ReadFrom(io.LimitReader(src, piece))
		got += k
		x.n += k
		x.written += k
		if x.written-x.flushed >= writebackBytes {
			startWriteback(int(x.tmp.Fd()), x.flushed, x.written-x.flushed)
			x.flushed = x.written
		}
		if err != nil {
			if fileFailed(err) {
				s.err = err
				return got, nil
			}
			return got, err
		}
		if k < piece {
			return got, nil // the stream ended: the reader finds out
		}
	}
	return got, nil
}

// hashedPiece is how much of a hashed body one goroutine reads and
// hashes while the other writes the piece before (bodySink.readHashed).
const hashedPiece = 1 << 20

// readHashed is ReadBodyFrom with a sha256: this goroutine reads each
// piece from the stream and hashes it as it comes, while a second writes
// the piece before to the temporary file (protocol.Overlap), so that on
// two CPUs the hash and the file's copy overlap. The bytes hashed are
// those written. A failure of the file is kept as the sink's error (the
// rest of the body is then dropped through Write); the stream's is
// returned.
func (s *bodySink) readHashed(src io.Reader, n int64) (int64, error) {
	x := s.x
	var got int64
	var serr error
	stop := errors.New("the stream failed")
	_, derr := protocol.Overlap(hashedPiece, func(b []byte) (int, error) {
		if got == n {
			return 0, io.EOF
		}
		b = b[:min(int64(len(b)), n-got)]
		filled, empty := 0, 0
		for filled < len(b) {
			k, err := src.Read(b[filled:])
			if k > 0 {
				x.sum.Write(b[filled : filled+k]) // while the bytes are in the cache
				filled += k
				got += int64(k)
				empty = 0
			} else if err == nil {
				if empty++; empty >= 100 {
					err = io.ErrNoProgress
				}
			}
			if err != nil {
				serr = err
				return filled, stop
			}
		}
		if got == n {
			return filled, io.EOF
		}
		return filled, nil
	}, func(p []byte) error {
		if err := x.write(p); err != nil {
			return err
		}
		x.n += int64(len(p))
		return nil
	})
	if derr != nil {
		s.err = derr
		if serr == nil && got < n {
			return got, nil // the rest through Write, dropped
		}
	}
	return got, serr
}

// fileFailed reports whether err, of a splice into a file, is the file's.
func fileFailed(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.EIO, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// hash adds p to the transfer's sha256, if it has one.
func (x *transfer) hash(p []byte) {
	if x.sum != nil {
		x.sum.Write(p)
	}
}

// fileError is a refusal of a put or get: a protocol category and a
// sentence that says which problem it is.
type fileError struct {
	category, message string
}

func (e *fileError) Error() string { return e.message }

func badFile(format string, args ...any) *fileError {
	return &fileError{protocol.CatBadRequest, fmt.Sprintf(format, args...)}
}

func (s *Server) maxFileBytes() int64 {
	if s.cfg.MaxFileBytes > 0 {
		return s.cfg.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

// filePath resolves a put's or get's path against the workspace.
func (s *Server) filePath(p string) string { return env.Cwd(s.cfg.Workspace, p) }

// put handles one put message: the first of a transfer, or its next
// chunk, or a whole file in a raw body.
func (cn *conn) put(msg *protocol.Message, ignored []string) {
	if cn.body != nil {
		cn.putBody(msg, ignored)
		return
	}
	if cn.files.discarding {
		named, more := msg.PutHead()
		if !named {
			cn.files.discarding = more
			return // the rest of a refused transfer: its error was the reply
		}
		cn.files.discarding = false
	}
	x := cn.files.xfer
	var buf []byte
	if x != nil {
		buf = x.buf
	}
	p, perr := msg.Put(buf, x != nil)
	if perr != nil {
		cn.failTransfer(msg, ignored, perr.Category, perr.Message)
		return
	}
	if x == nil {
		var ferr *fileError
		if x, ferr = cn.srv.openTransfer(p); ferr != nil {
			cn.failTransfer(msg, p.Ignored, ferr.category, ferr.message)
			return
		}
		x.id, x.ignored = msg.ID, p.Ignored
		cn.files.xfer = x
	} else if p.Path != "" && cn.srv.filePath(p.Path) != x.target {
		cn.failTransfer(msg, p.Ignored, protocol.CatBadRequest,
			"put: a transfer to another path is open on this connection; send its remaining chunks (without \"path\", or with the same one) first")
		return
	}
	x.buf = p.Data[:0]
	if max := cn.srv.maxFileBytes(); x.n+int64(len(p.Data)) > max {
		cn.failTransfer(msg, p.Ignored, protocol.CatBadRequest,
			fmt.Sprintf("put: the file is larger than --max-file-bytes (%d bytes); nothing was stored", max))
		return
	}
	if err := x.write(p.Data); err != nil {
		if x.tree != nil {
			err = x.tree.failure(err)
		}
		cn.failTransfer(msg, p.Ignored, protocol.CatBadRequest, fmt.Sprintf("put: writing %s failed: %v", x.target, err))
		return
	}
	x.n += int64(len(p.Data))
	x.hash(p.Data)
	if p.More {
		return // no reply until the last chunk
	}
	cn.files.xfer = nil
	if ferr := x.commit(); ferr != nil {
		cn.refuse(orID(msg.ID, x.id), p.Ignored, ferr.category, ferr.message)
		return
	}
	cn.write(x.stored(cn.token()))
}

// stored is the reply to a transfer committed.
func (x *transfer) stored(token string) protocol.Stored {
	st := protocol.Stored{Token: token, Kind: "stored", ID: x.id, Path: x.target, Bytes: x.n, Ignored: x.ignored}
	if x.sum != nil {
		st.Sha256 = hex.EncodeToString(x.sum.Sum(nil))
	}
	if x.tree != nil {
		st.Files, st.Refused = &x.tree.count.files, x.tree.count.list()
	}
	return st
}

// putBody handles a put with "body" (section 4.6, "Bulk bodies"): it
// opens the transfer and tells the reader to copy the body into it; the
// reader reports the body whole (bodyCopied) or the stream lost. A refused
// put's body is read and dropped; one whose "body" is not a count ends
// the connection (bodyAfter), as nothing tells where the next line starts.
func (cn *conn) putBody(msg *protocol.Message, ignored []string) {
	b := cn.body
	b.claimed = true
	if b.n < 0 {
		cn.failTransfer(msg, ignored, protocol.CatBadRequest,
			`put: "body" must be a whole number of bytes; closing the connection: where the next message starts is unknown`)
		return // bodyAfter ends the connection
	}
	cn.files.discarding = false // a body names its path: a new transfer
	if x := cn.files.xfer; x != nil {
		cn.files.xfer = nil
		x.abandon()
		cn.refuse(orID(msg.ID, x.id), ignored, protocol.CatBadRequest,
			"put: a transfer of \"data\" chunks was open on this connection; it is abandoned, and this put's body dropped")
		b.give(io.Discard)
		return
	}
	p, perr := msg.Put(nil, false)
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message+"; its body was dropped")
		b.give(io.Discard)
		return
	}
	if max := cn.srv.maxFileBytes(); p.Body > max {
		cn.refuse(msg.ID, p.Ignored, protocol.CatBadRequest,
			fmt.Sprintf("put: the body is %d bytes, more than --max-file-bytes (%d bytes); it was dropped and nothing was stored", p.Body, max))
		b.give(io.Discard)
		return
	}
	x, ferr := cn.srv.openTransfer(p)
	if ferr != nil {
		cn.refuse(msg.ID, p.Ignored, ferr.category, ferr.message+"; its body was dropped")
		b.give(io.Discard)
		return
	}
	x.id, x.ignored = msg.ID, p.Ignored
	cn.files.body, cn.files.bodyIn = &bodySink{x: x}, b
	b.give(cn.files.body)
}

// bodyAfter is what happens to a body its message did not claim (the
// message was refused before put saw it): dropped, or, when its length is
// unknown, the connection ends.
func (cn *conn) bodyAfter(b *bodyIn) string {
	if b.n < 0 {
		if !b.claimed {
			cn.refuse(nil, nil, protocol.CatBadRequest,
				`put: "body" must be a whole number of bytes; closing the connection: where the next message starts is unknown`)
		}
		b.give(nil)
		return "a put's body of unknown length"
	}
	b.give(io.Discard)
	return ""
}

// bodyCopied ends a put whose body the reader copied whole: the file is
// committed and stored answered, or the put refused.
func (cn *conn) bodyCopied() {
	s := cn.files.body
	cn.files.body, cn.files.bodyIn = nil, nil
	if s == nil {
		return // a refused put's body, dropped
	}
	x := s.x
	if s.err != nil {
		err := s.err
		if x.tree != nil {
			err = x.tree.failure(err)
		}
		x.abandon()
		cn.refuse(x.id, x.ignored, protocol.CatBadRequest, fmt.Sprintf("put: writing %s failed: %v", x.target, err))
		return
	}
	if ferr := x.commit(); ferr != nil {
		cn.refuse(x.id, x.ignored, ferr.category, ferr.message)
		return
	}
	cn.write(x.stored(cn.token()))
}

// failTransfer refuses a put and abandons the open transfer, if any: a
// transfer with a bad chunk cannot be trusted to hold what was meant.
// When more chunks are to come, they are discarded without replies.
func (cn *conn) failTransfer(msg *protocol.Message, ignored []string, category, message string) {
	id := msg.ID
	if _, more := msg.PutHead(); more {
		cn.files.discarding = true
	}
	if x := cn.files.xfer; x != nil {
		cn.files.xfer = nil
		x.abandon()
		id = orID(id, x.id)
		message += " (the transfer is abandoned)"
	}
	cn.refuse(id, ignored, category, message)
}

// abandonTransfer removes the temporary file of a transfer left open when
// the connection ends.
func (cn *conn) abandonTransfer() {
	if s := cn.files.body; s != nil {
		<-cn.files.bodyIn.copied // the connection is closed: the reader stops at once
		cn.log.Info().Str("path", s.x.target).Int64("bytes", s.x.n).Msg("put abandoned: the connection ended inside its body")
		s.x.abandon()
		cn.files.body, cn.files.bodyIn = nil, nil
	}
	if cn.files.xfer != nil {
		cn.log.Info().Str("path", cn.files.xfer.target).Int64("bytes", cn.files.xfer.n).Msg("put abandoned: the connection ended before its last chunk")
		cn.files.xfer.abandon()
		cn.files.xfer = nil
	}
}

func orID(id, def json.RawMessage) json.RawMessage {
	if id != nil {
		return id
	}
	return def
}

// fileCred is the user a put or get works as: its "user", else
// --subject-user, as for an execute; nil is relayd's own.
func (s *Server) fileCred(kind, spec string) (*syscall.Credential, *fileError) {
	if spec == "" {
		if s.cfg.SubjectUser == nil {
			return nil, nil
		}
		return s.cfg.SubjectUser.Cred, nil
	}
	cred, err := fileUser(spec, s.cfg.AllowAnyGroup)
	if err != nil {
		return nil, badFile("%s: \"user\": %v", kind, err)
	}
	return cred, nil
}

// openDir opens the directory of target, relative to which a put or get
// works (rule 6.13), with cred's rights (the caller's asUser), and
// returns it with the target's name in it.
func openDir(kind, target string, mkdir bool) (*env.Dir, string, *fileError) {
	if target == "/" {
		return nil, "", badFile("%s: / is a directory", kind)
	}
	what := "opening the directory of " + target
	if mkdir {
		what = "making the parent directories of " + target
	}
	d, err := env.OpenDir(filepath.Dir(target), mkdir, 0o755)
	if err != nil {
		return nil, "", pathError(kind, what, err)
	}
	return d, filepath.Base(target), nil
}

// openTransfer checks the target of a first put and creates its temporary
// file in the target's directory, held open, with the put's user's rights.
func (s *Server) openTransfer(p *protocol.Put) (*transfer, *fileError) {
	x := &transfer{target: s.filePath(p.Path), mode: p.Mode}
	if !p.NoDigest {
		x.sum = newSum()
	}
	cred, ferr := s.fileCred("put", p.User)
	if ferr != nil {
		return nil, ferr
	}
	x.cred = cred
	if p.Tar {
		return s.openTree(x, p)
	}
	err := asUser(x.cred, func() error {
		var name string
		if x.dir, name, ferr = openDir("put", x.target, p.Parents); ferr != nil {
			return nil
		}
		switch st, err := x.dir.Lstat(name); {
		case err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
			ferr = badFile("put: %s is a directory", x.target)
		case err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG:
			ferr = badFile("put: %s is %s, not a regular file; relayd replaces only regular files", x.target, env.Kind(st.Mode))
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			ferr = pathError("put", x.target, err)
		}
		if ferr != nil {
			return nil
		}
		f, tmp, err := x.dir.CreateTemp(name)
		if err != nil {
			ferr = pathError("put", "creating a temporary file beside "+x.target, err)
			return nil
		}
		x.tmp, x.tmpName = f, tmp
		return nil
	})
	if err == nil && ferr == nil {
		return x, nil
	}
	if x.dir != nil {
		x.dir.Close()
	}
	if err != nil {
		return nil, badFile("put: cannot take the rights of uid %d: %v", x.cred.Uid, err)
	}
	return nil, ferr
}

// commit makes the transfer's file the target: fsync, chmod (of its
// descriptor) and rename (with the put's user's rights, the rename
// relative to the directory held), then fsync of that directory. A failure abandons the transfer.
func (x *transfer) commit() *fileError {
	if x.tree != nil {
		return x.tree.finish(x)
	}
	fail := func(what string, err error) *fileError {
		x.abandon()
		return pathError("put", what+" "+x.target, err)
	}
	if err := x.tmp.Sync(); err != nil {
		return fail("flushing", err)
	}
	// fchmod of the descriptor, with the user's rights: the user owns the
	// file it created, so no CAP_FOWNER is needed (Kubernetes' baseline
	// drops it), and the kernel keeps setgid only for a group of the user's.
	var chmodErr error
	if err := asUser(x.cred, func() error {
		chmodErr = x.tmp.Chmod(os.FileMode(x.mode&0o777) | modeBits(x.mode))
		return nil
	}); err != nil {
		chmodErr = err
	}
	if chmodErr != nil {
		return fail("setting the mode of", chmodErr)
	}
	if err := x.tmp.Close(); err != nil {
		return fail("closing", err)
	}
	var renameErr error
	if err := asUser(x.cred, func() error { renameErr = x.dir.Rename(x.tmpName, filepath.Base(x.target)); return nil }); err != nil {
		renameErr = err
	}
	if renameErr != nil {
		return fail("renaming the temporary file over", renameErr)
	}
	_ = x.dir.Sync() // the rename survives a crash
	x.dir.Close()
	x.tmp, x.dir = nil, nil
	return nil
}

// modeBits turns the setuid, setgid and sticky bits of a numeric mode into Go's.
func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// abandon closes and removes the temporary file, by its name in the
// directory held, with the put's user's rights (relayd's own only when
// those cannot be taken: the name is still relayd's random one there).
func (x *transfer) abandon() {
	if x.tree != nil {
		x.tree.abort(x)
		return
	}
	if x.dir == nil {
		return
	}
	x.tmp.Close() // a second Close after commit's is harmless
	if err := asUser(x.cred, func() error { _ = x.dir.Remove(x.tmpName); return nil }); err != nil {
		_ = x.dir.Remove(x.tmpName)
	}
	x.dir.Close()
	x.tmp, x.dir = nil, nil
}

// pathError turns a file-system error into a refusal: not-found when the
// file or a parent does not exist, else bad-request saying what failed.
func pathError(kind, what string, err error) *fileError {
	cause := err
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		pe = nil
	} else {
		cause = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		cause = le.Err
	}
	where := what
	if pe != nil {
		where = pe.Path
	}
	switch {
	case errors.Is(cause, env.ErrSymlink):
		return badFile("%s: %s: %s is a symbolic link that a user other than root could have made or replaced; relayd follows none (rule 6.13): name the real path", kind, what, where)
	case errors.Is(cause, env.ErrNotDirectory):
		return badFile("%s: %s: %s is %s, not a directory", kind, what, where, kindOf(cause))
	case errors.Is(cause, env.ErrNotRegular):
		return badFile("%s: %s is %s, not a regular file; relayd reads and replaces only regular files", kind, where, kindOf(cause))
	case errors.Is(cause, env.ErrBadName):
		return badFile("%s: %s: %s is not a file name", kind, what, where)
	case errors.Is(cause, syscall.ENOENT), errors.Is(cause, syscall.ENOTDIR):
		return &fileError{protocol.CatNotFound, fmt.Sprintf("%s: %s: no such file or directory (a parent is missing; put takes \"parents\": true)", kind, what)}
	case errors.Is(cause, syscall.EACCES), errors.Is(cause, syscall.EPERM):
		return badFile("%s: %s: permission denied", kind, what)
	case errors.Is(cause, syscall.EISDIR):
		return badFile("%s: %s: is a directory", kind, what)
	}
	return badFile("%s: %s: %v", kind, what, cause)
}

// kindOf is what an env.KindError says the file is.
func kindOf(err error) string {
	var ke *env.KindError
	if errors.As(err, &ke) {
		return ke.Kind
	}
	return "of another kind"
}

// get answers a get with the file's content in chunks, read one at a
// time; the last carries the whole file's size and sha256 (none with
// "digest":"none"). A file that
// grows past --max-file-bytes while it is read ends in an error instead.
func (cn *conn) get(msg *protocol.Message, ignored []string) {
	g, perr := msg.Get()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	if cn.files.xfer != nil {
		cn.refuse(msg.ID, g.Ignored, protocol.CatBusy, "get: a put is open on this connection; send its last chunk first")
		return
	}
	path := cn.srv.filePath(g.Path)
	if g.Tar {
		cn.getTree(msg.ID, g, path)
		return
	}
	f, ferr := cn.srv.openForGet(path, g.User)
	if ferr != nil {
		cn.refuse(msg.ID, g.Ignored, ferr.category, ferr.message)
		return
	}
	defer f.Close()
	if g.Body {
		cn.getBody(msg.ID, g, path, f)
		return
	}
	max := cn.srv.maxFileBytes()
	buf := make([]byte, cn.srv.contentChunk())
	var sum hash.Hash
	if !g.NoDigest {
		sum = newSum()
	}
	var n int64
	for {
		k, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			cn.refuse(msg.ID, g.Ignored, protocol.CatBadRequest, fmt.Sprintf("get: reading %s failed after %d bytes: %v", path, n, err))
			return
		}
		n += int64(k)
		if n > max {
			cn.refuse(msg.ID, g.Ignored, protocol.CatBadRequest,
				fmt.Sprintf("get: %s grew past --max-file-bytes (%d bytes) while it was read; discard the content sent", path, max))
			return
		}
		if sum != nil {
			sum.Write(buf[:k])
		}
		c := protocol.Content{Token: cn.token(), Kind: "content", ID: msg.ID, Data: buf[:k], More: err == nil}
		if !c.More {
			c.Bytes, c.Ignored = &n, g.Ignored
			if sum != nil {
				c.Sha256 = hex.EncodeToString(sum.Sum(nil))
			}
		}
		if !cn.write(c) || !c.More {
			return
		}
	}
}

// getBody answers a get with "body":true (section 4.6, "Bulk bodies"):
// one content line with the file's size, its raw bytes, then sent with
// the sha256 of the bytes as they were sent, computed in that same pass
// (nothing is read before the first byte leaves). Exactly the size the
// line announced follows, whatever happens to the file meanwhile: a file
// that ends early is made up with zero bytes. One that ended early, grew,
// or whose size, modification or change time moved while it was sent is
// answered by a failed error in place of sent: the stream stays in step
// and the connection serves on; the bytes sent are not a file. With
// "digest":"none" nothing is hashed and the bytes go by sendfile(2).
func (cn *conn) getBody(id json.RawMessage, g *protocol.Get, path string, f *os.File) {
	before, err := fileStamp(f)
	if err != nil {
		cn.refuse(id, g.Ignored, protocol.CatBadRequest, fmt.Sprintf("get: reading %s failed: %v", path, err))
		return
	}
	n := before.size
	if max := cn.srv.maxFileBytes(); n > max {
		cn.refuse(id, g.Ignored, protocol.CatBadRequest, fmt.Sprintf("get: %s is %d bytes, more than --max-file-bytes (%d)", path, n, max))
		return
	}
	head := protocol.ContentBody{Token: cn.token(), Kind: "content", ID: id, Bytes: n, Body: n, Ignored: g.Ignored}
	cn.wmu.Lock() // the line, its body and sent are one write: a streamed execution's output waits
	defer cn.wmu.Unlock()
	if cn.lost.Load() {
		return
	}
	_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if err := protocol.WriteLine(cn.c, head); err != nil {
		cn.lostWriting(err)
		return
	}
	var sum hash.Hash
	if !g.NoDigest {
		sum = newSum()
	}
	sent, rerr, werr := cn.sendBody(f, n, sum)
	if werr == nil && sent < n {
		werr = cn.sendZeros(n - sent)
	}
	if werr != nil {
		cn.lostWriting(werr)
		return
	}
	why := ""
	switch after, serr := fileStamp(f); {
	case rerr != nil:
		why = fmt.Sprintf("reading it failed after %d bytes: %v", sent, rerr)
	case sent < n:
		why = fmt.Sprintf("it changed while it was sent: it ended after %d of its %d bytes", sent, n)
	case serr != nil:
		why = fmt.Sprintf("it could not be looked at after it was sent: %v", serr)
	case after != before || grewPast(f, n):
		why = "it changed while it was sent (its size, modification or change time moved)"
	}
	var last any = protocol.Sent{Token: cn.token(), Kind: "sent", ID: id, Ignored: g.Ignored}
	if why != "" {
		cn.log.Warn().Str("path", path).Msg("get: the file changed while its body was sent")
		last = protocol.ErrorReply{Kind: "error", ID: id, Ignored: g.Ignored, Error: &protocol.Error{Category: protocol.CatFailed,
			Message: fmt.Sprintf("get: %s: %s; the %d bytes sent are not the file", path, why, n)}}
	} else if sum != nil {
		last = protocol.Sent{Token: cn.token(), Kind: "sent", ID: id, Sha256: hex.EncodeToString(sum.Sum(nil)), Ignored: g.Ignored}
	}
	_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if err := protocol.WriteLine(cn.c, last); err != nil {
		cn.lostWriting(err)
	}
}

// newSum makes the sha256 of a transfer (a test counts what it hashes).
var newSum = sha256.New

// stamp is what tells that a file changed: its size, modification and
// change times.
type stamp struct {
	size         int64
	mtime, ctime syscall.Timespec
}

func fileStamp(f *os.File) (stamp, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, err
	}
	return stamp{st.Size, st.Mtim, st.Ctim}, nil
}

// grewPast reports whether f holds a byte at offset n: it grew after its
// size was taken (a write within the clock's tick leaves the times).
func grewPast(f *os.File, n int64) bool {
	var b [1]byte
	k, _ := f.ReadAt(b[:], n)
	return k > 0
}

// sendBody writes the n bytes of f from its start to the connection and
// returns how many it sent, the file's error (rerr: fewer than n, or an
// end before n when both are nil) and the connection's (werr). With sum,
// each piece is read into one buffer, hashed and written, so that the
// sha256 is of the bytes sent, in the pass that sends them; without,
// sendfile(2) copies the file's pages to the socket, TCP or Unix (the
// bridge's), not through relayd's memory. Each piece has its own write
// deadline.
func (cn *conn) sendBody(f *os.File, n int64, sum hash.Hash) (sent int64, rerr, werr error) {
	if sum == nil {
		if rf, ok := cn.c.(io.ReaderFrom); ok {
			return cn.sendFile(rf, f, n)
		}
		if sc, ok := cn.c.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				return cn.sendFileRaw(rc, f, n)
			}
		}
	}
	buf := make([]byte, min(int64(bodyBufBytes), max(n, 1)))
	for sent < n {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), n-sent)], sent)
		if k > 0 {
			if sum != nil {
				sum.Write(buf[:k])
			}
			_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
			if _, werr := cn.c.Write(buf[:k]); werr != nil {
				return sent, nil, werr
			}
			sent += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return sent, nil, nil
		} else if err != nil {
			return sent, err, nil
		}
	}
	return sent, nil, nil
}

// sendFilePiece is how much of a body one sendfile(2) call may send
// before the write deadline is renewed.
const sendFilePiece = 8 << 20

// sendFile is sendBody without a digest: the connection's ReadFrom
// (sendfile(2) from f's offset) in pieces of sendFilePiece. A failed
// sendfile cannot tell the file's error from the socket's: both are
// the connection's, which closes it.
func (cn *conn) sendFile(rf io.ReaderFrom, f *os.File, n int64) (sent int64, rerr, werr error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err, nil
	}
	for sent < n {
		piece := min(sendFilePiece, n-sent)
		_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
		k, err := rf.ReadFrom(io.LimitReader(f, piece))
		sent += k
		if err != nil {
			return sent, nil, err
		}
		if k < piece {
			return sent, nil, nil // the file ended early
		}
	}
	return sent, nil, nil
}

// sendFileRaw is sendFile for a socket whose conn has no io.ReaderFrom
// (a Unix socket's: the bridge's): sendfile(2) from f's offsets straight
// to the socket's descriptor, waiting in the poller when the socket is
// full, each piece of sendFilePiece with its own write deadline. A
// failed sendfile cannot tell the file's error from the socket's: both
// are the connection's, which closes it.
func (cn *conn) sendFileRaw(rc syscall.RawConn, f *os.File, n int64) (sent int64, rerr, werr error) {
	in := int(f.Fd())
	for sent < n {
		piece := min(sendFilePiece, n-sent)
		_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
		var serr error
		var ended bool
		off, end := sent, sent+piece
		err := rc.Write(func(out uintptr) bool {
			for off < end {
				k, err := sendfile(int(out), in, &off, int(min(end-off, 1<<30)))
				switch {
				case err == unix.EAGAIN:
					return false // the socket is full: wait in the poller
				case err == unix.EINTR:
					continue
				case err != nil:
					serr = err
					return true
				case k == 0:
					ended = true // the file ended early
					return true
				}
			}
			return true
		})
		sent = off
		if err == nil {
			err = serr
		}
		if err != nil {
			return sent, nil, err
		}
		if ended {
			return sent, nil, nil
		}
	}
	return sent, nil, nil
}

// sendfile is sendfile(2) (a test counts what it sends).
var sendfile = unix.Sendfile

// sendZeros makes up a body whose file ended early with n zero bytes, so
// that the stream stays in step.
func (cn *conn) sendZeros(n int64) error {
	zeros := make([]byte, min(int64(bodyBufBytes), n))
	for n > 0 {
		_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
		k, err := cn.c.Write(zeros[:min(int64(len(zeros)), n)])
		if err != nil {
			return err
		}
		n -= int64(k)
	}
	return nil
}

// contentChunk is the raw size of a content chunk: its line (base64 and
// the other fields) stays within --max-line-bytes, relayd's own limit.
func (s *Server) contentChunk() int {
	n := (s.cfg.MaxLineBytes - 512) / 4 * 3
	if n > maxContentChunk || s.cfg.MaxLineBytes <= 0 {
		n = maxContentChunk
	}
	if n < 192 {
		n = 192
	}
	return n
}

// openForGet opens a regular file for reading with user's rights,
// relative to its directory (rule 6.13).
func (s *Server) openForGet(path, spec string) (*os.File, *fileError) {
	cred, ferr := s.fileCred("get", spec)
	if ferr != nil {
		return nil, ferr
	}
	var f *os.File
	err := asUser(cred, func() error {
		d, name, derr := openDir("get", path, false)
		if derr != nil {
			ferr = derr
			return nil
		}
		defer d.Close()
		var err error
		if f, err = d.OpenFile(name); err != nil {
			ferr = pathError("get", path, err)
		}
		return nil
	})
	if err != nil {
		return nil, badFile("get: cannot take the rights of uid %d: %v", cred.Uid, err)
	}
	if ferr != nil {
		return nil, ferr
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		ferr = pathError("get", path, err)
	case fi.Size() > s.maxFileBytes():
		ferr = badFile("get: %s is %d bytes, more than --max-file-bytes (%d)", path, fi.Size(), s.maxFileBytes())
	}
	if ferr != nil {
		f.Close()
		return nil, ferr
	}
	return f, nil
}
