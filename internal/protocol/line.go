package protocol

import (
	"bytes"
	"errors"
	"io"
)

// ErrLineTooLong is returned by LineReader.ReadLine for a line longer than
// the reader's limit. internal/session answers it with an error of category
// line-too-long and closes the connection.
var ErrLineTooLong = errors.New("protocol: line too long")

// lineBufSize is the size of a LineReader's read buffer: the most it reads
// from its source in one call.
const lineBufSize = 32 << 10

// maxEmptyReads is how many reads in a row may return no bytes and no error
// before ReadLine gives up with io.ErrNoProgress (bufio does the same).
const maxEmptyReads = 100

// LineReader reads newline-terminated lines and never holds more than max
// bytes of one line. Unlike bufio.Scanner it stops reading as soon as a line
// is known to be too long, so a peer cannot make it buffer or read without
// bound. It is not safe for concurrent use.
type LineReader struct {
	src  io.Reader
	max  int
	buf  []byte // read buffer; unread bytes are buf[rpos:wpos]
	rpos int
	wpos int
	rerr error  // error of the last Read, returned once buf is drained
	line []byte // a line that spans reads, never longer than max+1
	err  error  // once set, every ReadLine returns it
}

// NewLineReader returns a LineReader that reads from r and accepts lines of
// at most max bytes, not counting the "\n" or "\r\n" that ends them. It
// panics if max is less than 1, a programming error.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max < 1 {
		panic("protocol: NewLineReader: max must be at least 1")
	}
	size := lineBufSize
	if max < size-2 {
		size = max + 2 // room for a whole line and its "\r\n"
	}
	return &LineReader{src: r, max: max, buf: make([]byte, size)}
}

// ReadLine returns the next non-blank line without its "\n" (and without a
// "\r" right before it). Blank lines (empty, or only "\r") are skipped; a
// line of spaces is not blank and is returned. The returned slice is valid
// until the next call.
//
// A line longer than max bytes (not counting the "\n" or "\r\n") returns
// ErrLineTooLong, having read no more than max+1 bytes of it plus one read
// buffer (32 KiB at most).
//
// At the end of input it returns io.EOF. An unterminated partial line at the
// end of input is dropped and io.EOF returned: a message counts only once its
// "\n" arrives. Read errors are returned as they are.
//
// Every error is final: once ReadLine has returned an error (ErrLineTooLong,
// io.EOF or a read error), the reader is unusable and returns that same error
// from then on. Do not use it with read deadlines that are meant to be retried.
func (lr *LineReader) ReadLine() ([]byte, error) {
	if lr.err != nil {
		return nil, lr.err
	}
	lr.line = lr.line[:0]
	empty := 0
	for {
		if lr.rpos < lr.wpos {
			chunk := lr.buf[lr.rpos:lr.wpos]
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				// No end in sight yet: keep the bytes, unless they already
				// make the line too long. max+1 leaves room for a "\r" that
				// a following "\n" would turn into a line ending.
				if len(lr.line)+len(chunk) > lr.max+1 {
					return lr.fail(ErrLineTooLong)
				}
				lr.line = appendCapped(lr.line, chunk, lr.max+1)
				lr.rpos = lr.wpos
				continue
			}
			lr.rpos += i + 1
			line := chunk[:i]
			if len(lr.line) > 0 {
				if len(lr.line)+len(line) > lr.max+1 {
					return lr.fail(ErrLineTooLong)
				}
				lr.line = appendCapped(lr.line, line, lr.max+1)
				line = lr.line
			}
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > lr.max {
				return lr.fail(ErrLineTooLong)
			}
			if len(line) == 0 {
				lr.line = lr.line[:0]
				continue // blank line
			}
			return line, nil
		}
		if lr.rerr != nil {
			// Whatever partial line is held is dropped.
			return lr.fail(lr.rerr)
		}
		n, err := lr.src.Read(lr.buf)
		if n < 0 || n > len(lr.buf) {
			return lr.fail(errors.New("protocol: reader returned an impossible count"))
		}
		lr.rpos, lr.wpos, lr.rerr = 0, n, err
		if n > 0 || err != nil {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			lr.rerr = io.ErrNoProgress
		}
	}
}

func (lr *LineReader) fail(err error) ([]byte, error) {
	lr.err = err
	lr.line = nil
	lr.rpos, lr.wpos = 0, 0
	return nil, err
}

// BodyReaderFrom is a body's sink that can take the bytes straight from
// the stream's source (splice(2) into a file) once those the reader holds
// are used. ReadBodyFrom takes at most n bytes of src and returns how many
// and src's error; a failure of its own it keeps, taking the rest through
// Write. Taking nothing without an error declines: the rest goes through
// Write.
type BodyReaderFrom interface {
	ReadBodyFrom(src io.Reader, n int64) (int64, error)
}

// CopyBody copies the next n raw bytes of the stream, those that follow
// the line ReadLine returned last (section 4.6, "Bulk bodies"), to w
// through buf, first the bytes already read, then straight from the
// source; ReadLine then goes on right after them. Memory stays the
// reader's buffer and buf, whatever n. w must take every byte (a sink
// that fails keeps its error and takes the rest): only the stream's
// errors are returned. A stream that ends inside the body returns
// io.ErrUnexpectedEOF; every error is final, as ReadLine's.
func (lr *LineReader) CopyBody(w io.Writer, n int64, buf []byte) error {
	if lr.err != nil {
		return lr.err
	}
	if len(buf) == 0 {
		panic("protocol: CopyBody: empty buffer")
	}
	rf, _ := w.(BodyReaderFrom)
	empty := 0
	for n > 0 {
		if lr.rpos < lr.wpos {
			k := min(int64(lr.wpos-lr.rpos), n)
			_, _ = w.Write(lr.buf[lr.rpos : lr.rpos+int(k)])
			lr.rpos += int(k)
			n -= k
			continue
		}
		if rf != nil && lr.rerr == nil {
			k, err := rf.ReadBodyFrom(lr.src, n)
			n -= k
			if err != nil {
				lr.rerr = err
			} else if k == 0 {
				rf = nil // it took nothing: the rest goes through buf
			}
			continue
		}
		if lr.rerr != nil {
			err := lr.rerr
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			_, err = lr.fail(err)
			return err
		}
		k, err := lr.src.Read(buf[:min(int64(len(buf)), n)])
		if k < 0 || k > len(buf) {
			_, err = lr.fail(errors.New("protocol: reader returned an impossible count"))
			return err
		}
		if k > 0 {
			_, _ = w.Write(buf[:k])
			n -= int64(k)
			empty = 0
		} else if err == nil {
			if empty++; empty >= maxEmptyReads {
				err = io.ErrNoProgress
			}
		}
		if err != nil {
			lr.rerr = err // returned once the body's bytes are used, or with the next line
		}
	}
	return nil
}
