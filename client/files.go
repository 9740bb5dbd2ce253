package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// File transfers (extension, protocol section 4.6, "Files").

const (
	kindPut    = "put"
	kindStored = "stored"
	kindGet    = "get"
	kindSent   = "sent" // the line after a get's raw body (4.6, "Bulk bodies")

	// DigestNone is PutOptions.Digest and GetOptions.Digest for no digest
	// on either side (protocol 4.6, "Bulk bodies"): for a caller whose
	// transport already checks its bytes. "" or DigestSHA256 is the
	// default, a sha256 of the whole file checked against the client's own.
	DigestNone   = "none"
	DigestSHA256 = "sha256"

	// putChunk is the raw size of one put chunk: its line (base64, 4/3)
	// stays well within relayd's default --max-line-bytes (1 MiB).
	putChunk = 256 << 10
)

// PutOptions are the optional fields of a put.
type PutOptions struct {
	Mode    uint32 // permission bits, e.g. 0o755; 0: relayd's default (0644)
	User    string // write with this user's rights, and the new file is its (relayd must be root); "": relayd's --subject-user
	Parents bool   // make missing parent directories
	// ChunkBytes is the raw size of each chunk; 0: 256 KiB. Lower it for a
	// relayd whose --max-line-bytes is below about 400 KiB.
	ChunkBytes int
	// Chunks sends base64 chunks even when relayd takes raw bodies. By
	// default PutFile sends the file as one raw body (protocol 4.6, "Bulk
	// bodies") when relayd lists "body" and r's size is known: r has a
	// Len method (bytes.Reader, strings.Reader, bytes.Buffer) or is a
	// regular *os.File (its size from its offset when PutFile starts: what
	// is appended later is not sent).
	Chunks bool

	links string // a tree's "links" (protocol 4.6, "Trees"; UploadDir)
	// Digest is DigestNone for no sha256 on either side, "" (or
	// DigestSHA256) for relayd's sha256 of the file checked against the
	// client's own.
	Digest string
}

// GetOptions are the optional fields of a get.
type GetOptions struct {
	User   string // read with this user's rights; "": relayd's --subject-user
	Digest string // as PutOptions.Digest
}

// noDigest reports whether digest asks for none; an unknown value is an
// error before anything is sent.
func noDigest(digest string) (bool, error) {
	switch digest {
	case "", DigestSHA256:
		return false, nil
	case DigestNone:
		return true, nil
	}
	return false, fmt.Errorf("client: Digest %q: want %q, %q or \"\"", digest, DigestNone, DigestSHA256)
}

// Transferred is what relayd reports of a stored or fetched file.
type Transferred struct {
	Path   string `json:"path"` // absolute, as relayd resolved it (PutFile only)
	Bytes  int64  `json:"bytes"`
	Sha256 string `json:"sha256"` // lower-case hex of the whole file; "" with DigestNone
	// A tree's (UploadDir, DownloadDir through relayd's own tar): its
	// members written or packed, and those relayd refused, "name: why".
	Files   int64    `json:"files,omitempty"`
	Refused []string `json:"refused,omitempty"`
}

// sender is a request that writes its own lines, given its id (a put's chunks).
type sender func(id int64) error

// PutFile stores what r yields at path on relayd's side (relative paths
// are taken from relayd's workspace), atomically: a reader there sees the
// old file or the whole new one. It streams r in chunks, holding one at a
// time, and checks relayd's sha256 of the file against its own. An error
// from relayd is an *Error (ErrNotFound for a missing parent without
// Parents, ErrBadRequest for a directory, a symbolic link relayd does
// not follow, a bad mode, a file over --max-file-bytes).
//
// PutFile counts as the connection's one execution while it runs (relayd
// answers an execute with busy during a transfer).
func (c *Conn) PutFile(ctx context.Context, path string, r io.Reader, opts PutOptions) (Transferred, error) {
	var t Transferred
	none, err := noDigest(opts.Digest)
	if err != nil {
		return t, err
	}
	if err := c.beginExecution(); err != nil {
		return t, err
	}
	defer c.endExecution()
	if n, ok := bodySize(r); ok && !opts.Chunks && c.serves(extBody) {
		return c.putBody(ctx, path, r, n, opts, "")
	}
	size := opts.ChunkBytes
	if size <= 0 {
		size = putChunk
	}
	buf := make([]byte, size)
	sum := sha256.New()
	var n int64
	cl := &call{want: kindStored, into: &t}
	sent := make(chan struct{}) // closed when the sender is done
	watched := make(chan struct{})
	send := sender(func(id int64) error {
		defer close(sent)
		go c.watchPut(cl, sent, watched)
		first := true
		for {
			if cl.delivered.Load() {
				return nil // relayd refused the transfer already: it drops what would follow
			}
			k, rerr := io.ReadFull(r, buf)
			if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
				// Nothing more can be sent; dropping the connection abandons the transfer.
				c.fail(fmt.Errorf("%w: reading the file to put: %v", ErrClosed, rerr))
				return fmt.Errorf("client: PutFile %s: reading: %w", path, rerr)
			}
			more := rerr == nil
			sum.Write(buf[:k])
			n += int64(k)
			m := putWire{Token: c.token, Kind: kindPut, ID: id, Data: buf[:k], More: more}
			if first {
				m.Path, m.User, m.Parents = path, opts.User, opts.Parents
				if none {
					m.Digest = DigestNone
				}
				if opts.Mode != 0 {
					m.Mode = "0" + strconv.FormatUint(uint64(opts.Mode), 8)
				}
				first = false
			}
			if err := c.write(&m); err != nil {
				return err
			}
			if !more {
				return nil
			}
		}
	})
	err = c.roundTrip(ctx, send, cl, c.cfg.bound(time.Duration(math.MaxInt64)))
	select {
	case <-sent:
		<-watched
	default: // the sender never ran: nothing was started
	}
	if err != nil {
		return t, err
	}
	if none && t.Bytes != n {
		return t, fmt.Errorf("%w: put %s: relayd stored %d bytes; sent %d", ErrBadReply, path, t.Bytes, n)
	}
	if want := hex.EncodeToString(sum.Sum(nil)); !none && (t.Sha256 != want || t.Bytes != n) {
		return t, fmt.Errorf("%w: put %s: relayd stored %d bytes with sha256 %s; sent %d with %s", ErrBadReply, path, t.Bytes, t.Sha256, n, want)
	}
	return t, nil
}

// extBody is the extension of raw bodies (protocol 4.6, "Bulk bodies").
const extBody = "body"

// bodyBytes is the buffer a raw body goes through, either way.
const bodyBytes = 256 << 10

// serves reports whether relayd listed ext in its ready.
func (c *Conn) serves(ext string) bool { return slices.Contains(c.hello.Extensions, ext) }

// bodySize is how many bytes r yields, when it can be known beforehand.
func bodySize(r io.Reader) (int64, bool) {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len()), true
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return 0, false
		}
		return fi.Size() - off, true
	}
	return 0, false
}

// putBody sends a put with "body":n and the n bytes of r right after its
// line. relayd reads the whole body even when it refuses the put, so it
// is sent whole; r ending early ends the connection (relayd then leaves
// nothing).
func (c *Conn) putBody(ctx context.Context, path string, r io.Reader, n int64, opts PutOptions, format string) (Transferred, error) {
	var t Transferred
	none, err := noDigest(opts.Digest)
	if err != nil {
		return t, err
	}
	sum := sha256.New()
	send := sender(func(id int64) error {
		m := putBodyWire{Token: c.token, Kind: kindPut, ID: id, Path: path, Body: n, User: opts.User, Parents: opts.Parents, Format: format}
		m.Links = opts.links
		if opts.Mode != 0 {
			m.Mode = "0" + strconv.FormatUint(uint64(opts.Mode), 8)
		}
		if none {
			m.Digest = DigestNone
			if f, ok := r.(*os.File); ok {
				return c.writeBodyFile(&m, f, n, path)
			}
			return c.writeBody(&m, r, n, path)
		}
		return c.writeBodyHashed(&m, r, sum, n, path)
	})
	if err := c.roundTrip(ctx, send, &call{want: kindStored, into: &t}, c.cfg.bound(time.Duration(math.MaxInt64))); err != nil {
		return t, err
	}
	if none {
		if t.Bytes != n {
			return t, fmt.Errorf("%w: put %s: relayd stored %d bytes; sent %d", ErrBadReply, path, t.Bytes, n)
		}
		return t, nil
	}
	if want := hex.EncodeToString(sum.Sum(nil)); t.Sha256 != want || t.Bytes != n {
		return t, fmt.Errorf("%w: put %s: relayd stored %d bytes with sha256 %s; sent %d with %s", ErrBadReply, path, t.Bytes, t.Sha256, n, want)
	}
	return t, nil
}

// writeBody writes msg's line and then n bytes of r, as one write: no
// other request's line comes between them.
func (c *Conn) writeBody(msg any, r io.Reader, n int64, path string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	line, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("client: encoding a request: %w", err)
	}
	buf := make([]byte, min(int64(bodyBytes), n+int64(len(line))+1))
	buf = append(append(buf[:0], line...), '\n')
	for left := n; ; {
		k, rerr := io.ReadFull(r, buf[len(buf):min(int64(cap(buf)), int64(len(buf))+left)])
		buf = buf[:len(buf)+k]
		left -= int64(k)
		if len(buf) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
			if _, err := c.nc.Write(buf); err != nil {
				c.fail(fmt.Errorf("%w: writing a request: %v", ErrConnLost, err))
				return c.failure()
			}
		}
		if left == 0 {
			return nil
		}
		if rerr != nil {
			// The body cannot be finished: dropping the connection is the
			// only way to end it, and relayd then stores nothing.
			c.fail(fmt.Errorf("%w: the file to put ended early", ErrClosed))
			return fmt.Errorf("client: PutFile %s: reading: %d bytes short of the %d announced: %w", path, left, n, rerr)
		}
		buf = buf[:0]
	}
}

// hashedPiece is how much of a hashed body one goroutine reads and
// hashes while the other writes or takes the piece before.
const hashedPiece = 1 << 20

// writeBodyHashed is writeBody with sum of the bytes: this goroutine
// reads each piece of r and hashes it, while a second writes the piece
// before to the connection (protocol.Overlap), so that on two CPUs the
// hash and the socket's copy overlap.
func (c *Conn) writeBodyHashed(msg any, r io.Reader, sum hash.Hash, n int64, path string) error {
	line, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("client: encoding a request: %w", err)
	}
	if n == 0 || len(line) >= hashedPiece/2 {
		return c.writeBody(msg, io.TeeReader(r, sum), n, path)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	line = append(line, '\n')
	left := n
	var rerr error
	stop := errors.New("the file to put ended early")
	_, werr := protocol.Overlap(hashedPiece, func(b []byte) (int, error) {
		filled := 0
		if line != nil {
			filled = copy(b, line) // the line goes with the first piece
			line = nil
		}
		b = b[:filled+int(min(int64(len(b)-filled), left))]
		for filled < len(b) {
			k, err := io.ReadFull(r, b[filled:min(len(b), filled+bodyBytes)])
			sum.Write(b[filled : filled+k])
			filled += k
			left -= int64(k)
			if err != nil {
				rerr = err
				return filled, stop
			}
		}
		if left == 0 {
			return filled, io.EOF
		}
		return filled, nil
	}, func(p []byte) error {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
		_, err := c.nc.Write(p)
		return err
	})
	if werr != nil {
		c.fail(fmt.Errorf("%w: writing a request: %v", ErrConnLost, werr))
		return c.failure()
	}
	if rerr != nil {
		// The body cannot be finished: dropping the connection is the
		// only way to end it, and relayd then stores nothing.
		c.fail(fmt.Errorf("%w: the file to put ended early", ErrClosed))
		return fmt.Errorf("client: PutFile %s: reading: %d bytes short of the %d announced: %w", path, left, n, rerr)
	}
	return nil
}

// writeBodyFile is writeBody from a file without a digest: the line, then
// the n bytes by sendfile(2) (the connection's ReadFrom), no copy through
// this process, each piece with its own write deadline.
func (c *Conn) writeBodyFile(msg any, f *os.File, n int64, path string) error {
	rf, ok := c.nc.(io.ReaderFrom)
	if !ok {
		return c.writeBody(msg, f, n, path)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	line, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("client: encoding a request: %w", err)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
	if _, err := c.nc.Write(append(line, '\n')); err != nil {
		c.fail(fmt.Errorf("%w: writing a request: %v", ErrConnLost, err))
		return c.failure()
	}
	const piece = 8 << 20
	for left := n; left > 0; {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
		k, err := rf.ReadFrom(io.LimitReader(f, min(piece, left)))
		left -= k
		if err != nil {
			c.fail(fmt.Errorf("%w: writing a body: %v", ErrConnLost, err))
			return c.failure()
		}
		if k == 0 && left > 0 {
			c.fail(fmt.Errorf("%w: the file to put ended early", ErrClosed))
			return fmt.Errorf("client: PutFile %s: reading: %d bytes short of the %d announced: %w", path, left, n, io.ErrUnexpectedEOF)
		}
	}
	return nil
}

// putBodyWire is a put with a raw body.
type putBodyWire struct {
	Token   string `json:"token"`
	Kind    string `json:"kind"`
	ID      int64  `json:"id"`
	Path    string `json:"path"`
	Body    int64  `json:"body"`
	Format  string `json:"format,omitempty"` // "tar": a tree (UploadDir)
	Mode    string `json:"mode,omitempty"`
	User    string `json:"user,omitempty"`
	Parents bool   `json:"parents,omitempty"`
	Links   string `json:"links,omitempty"` // "keep": a tree's links as they are (UploadDir)
	Digest  string `json:"digest,omitempty"`
}

// watchPut reads the connection while a put's chunks go out, so that a
// refusal (the transfer's only reply before its last chunk) stops the
// sending at once rather than after the whole file. It takes the reading
// turn as await would, and gives it back once cl's reply has come (await
// then takes it from cl.reply), the connection failed, or, still waiting
// for the turn, the sender is done.
func (c *Conn) watchPut(cl *call, sent <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	select {
	case c.readTurn <- struct{}{}:
	case <-sent:
		return
	case <-c.dead:
		return
	}
	defer func() { <-c.readTurn }()
	for !cl.delivered.Load() {
		if c.readOne(time.Time{}, nil) != nil {
			return
		}
	}
}

// putWire is a put line; field order as in the protocol.
type putWire struct {
	Token   string `json:"token"`
	Kind    string `json:"kind"`
	ID      int64  `json:"id"`
	Path    string `json:"path,omitempty"`
	Data    []byte `json:"data"`
	More    bool   `json:"more,omitempty"`
	Mode    string `json:"mode,omitempty"`
	User    string `json:"user,omitempty"`
	Parents bool   `json:"parents,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// contentWire is a content chunk, or the line before a raw body.
type contentWire struct {
	Body    *int64   `json:"body"`
	Data    []byte   `json:"data"`
	More    bool     `json:"more"`
	Bytes   int64    `json:"bytes"`
	Sha256  string   `json:"sha256"`
	Files   int64    `json:"files"`
	Refused []string `json:"refused"`
}

// GetFile copies the file at path on relayd's side (relative paths are
// taken from its workspace) to w as its bytes arrive, and checks the
// sha256 relayd reports against the bytes received. user reads it with
// that user's rights ("": relayd's --subject-user). On an error part of
// the file may have been written to w: write to a temporary file and
// rename it once GetFile returned nil (relayctl get does). A file that
// changed while relayd sent it is an *Error of ErrFailed.
func (c *Conn) GetFile(ctx context.Context, path, user string, w io.Writer) (Transferred, error) {
	return c.GetFileWith(ctx, path, w, GetOptions{User: user})
}

// GetFileWith is GetFile with the get's options: with o.Digest
// DigestNone, neither relayd nor the client computes a digest.
func (c *Conn) GetFileWith(ctx context.Context, path string, w io.Writer, o GetOptions) (Transferred, error) {
	none, err := noDigest(o.Digest)
	if err != nil {
		return Transferred{}, err
	}
	return c.getFile(ctx, path, o.User, w, false, none)
}

// getFile is GetFile, or with tree a get of the directory path packed
// by relayd's own tar; none: no digest either side. A raw body's
// content line announces the size; its digest (or relayd's error, when
// the file changed while it was sent) is the line after the bytes. A
// relayd from before that rule carries the sha256 in the content line
// and sends nothing after the bytes.
func (c *Conn) getFile(ctx context.Context, path, user string, w io.Writer, tree, none bool) (Transferred, error) {
	var t Transferred
	var sum hash.Hash = nopHash{}
	if !none {
		sum = sha256.New()
	}
	var n int64
	var werr error
	var last contentWire
	var berr error
	cl := &call{want: kindContent, into: &last}
	cl.content = func(line []byte) bool {
		var ch contentWire
		if err := json.Unmarshal(line, &ch); err != nil {
			return false // decoded again as the reply, which then fails
		}
		if ch.Body != nil {
			// The raw body follows the line: this reader holds the turn.
			sink := &bodySink{w: w, sum: sum, err: &werr}
			if berr = c.lr.CopyBody(sink, *ch.Body, make([]byte, bodyBytes)); berr != nil {
				c.fail(fmt.Errorf("%w: inside a body: %v", ErrConnLost, berr))
			}
			n = sink.n
			if berr != nil || ch.Sha256 != "" {
				return false // an older relayd's: the content line is the reply
			}
			last = ch
			cl.want = kindSent // and sent (or an error) the line after the bytes
			return true
		}
		if werr == nil {
			if _, err := w.Write(ch.Data); err != nil {
				werr = err
			}
		}
		sum.Write(ch.Data)
		n += int64(len(ch.Data))
		return ch.More
	}
	msg := map[string]any{"kind": kindGet, "path": path}
	if user != "" {
		msg["user"] = user
	}
	if none {
		msg["digest"] = DigestNone
	}
	if tree {
		// In chunks: packed once, so that a tree that changes meanwhile
		// ends in relayd's error reply before its last chunk, where a
		// body is packed twice (its size first).
		msg["format"] = "tar"
	} else if c.serves(extBody) {
		msg["body"] = true
	}
	err := c.roundTrip(ctx, msg, cl, c.cfg.bound(time.Duration(math.MaxInt64)))
	if err == nil && berr != nil {
		err = c.failure()
	}
	if err != nil {
		return t, err
	}
	t = Transferred{Bytes: last.Bytes, Sha256: last.Sha256, Files: last.Files, Refused: last.Refused}
	if werr != nil {
		return t, fmt.Errorf("client: GetFile %s: writing: %w", path, werr)
	}
	if t.Bytes != n {
		return t, fmt.Errorf("%w: get %s: relayd reported %d bytes; received %d", ErrBadReply, path, t.Bytes, n)
	}
	if none {
		t.Sha256 = ""
		return t, nil
	}
	if want := hex.EncodeToString(sum.Sum(nil)); t.Sha256 != want {
		return t, fmt.Errorf("%w: get %s: relayd reported %d bytes with sha256 %s; received %d with %s", ErrBadReply, path, t.Bytes, t.Sha256, n, want)
	}
	return t, nil
}

// nopHash is the digest of a transfer without one.
type nopHash struct{}

func (nopHash) Write(p []byte) (int, error) { return len(p), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

// bodySink is where a get's raw body goes: w until it fails (its error
// kept in err), and the sha256 of every byte.
type bodySink struct {
	w   io.Writer
	sum hash.Hash
	err *error
	n   int64
}

// ReadBodyFrom takes the rest of a body straight from the connection into
// a file (splice(2), protocol.BodyReaderFrom) when nothing is hashed and
// w is an *os.File; else it declines and the bytes come through Write. A
// failure of the file is kept as the sink's error.
func (s *bodySink) ReadBodyFrom(src io.Reader, n int64) (int64, error) {
	f, isFile := s.w.(*os.File)
	_, noSum := s.sum.(nopHash)
	if _, conn := src.(syscall.Conn); !isFile || !noSum || !conn || *s.err != nil {
		return 0, nil
	}
	k, err := f.ReadFrom(io.LimitReader(src, n))
	s.n += k
	if err != nil {
		for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.EIO, syscall.EROFS, syscall.EBADF} {
			if errors.Is(err, e) {
				*s.err = err
				return k, nil
			}
		}
	}
	return k, err
}

func (s *bodySink) Write(p []byte) (int, error) {
	if *s.err == nil {
		if _, err := s.w.Write(p); err != nil {
			*s.err = err
		}
	}
	s.sum.Write(p)
	s.n += int64(len(p))
	return len(p), nil
}
