package protocol

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// WriteLine writes v as one line of JSON: exactly the bytes of
// json.Marshal(v) and a newline.
//
// An executed reply with a long stdout is written as it is encoded, in
// pieces, instead of being built whole first: escaping can make stdout six
// times longer (a NUL is \u0000), and building the line whole (json.Marshal,
// whose MarshalJSON output json.Marshal copies again, then the newline
// appended) held about twenty times the capture in memory at once. Written
// in pieces it holds the capture and one piece.
//
// A failure to encode (nothing is written then) wraps ErrEncoding; any
// other error is the writer's.
func WriteLine(w io.Writer, v any) error {
	if e, ok := v.(Executed); ok {
		return writeExecuted(w, &e)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ErrEncoding is a reply that could not be encoded.
var ErrEncoding = errors.New("protocol: a reply could not be encoded")

// streamAbove is the stdout length past which an executed reply is
// streamed; pieceBytes is the length of stdout escaped at a time. Tests
// make them small.
var (
	streamAbove = 64 << 10
	pieceBytes  = 32 << 10
)

// lineBufs keep the buffers executed replies are encoded in.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine is the largest buffer lineBufs keeps.
const maxPooledLine = 128 << 10

// writeExecuted writes an executed reply (encode.go): whole, or, with a
// long stdout, its head, its stdout escaped a piece at a time, and its
// tail, through one buffered writer.
func writeExecuted(w io.Writer, e *Executed) error {
	bp := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(bp)
	b, err := appendExecutedHead((*bp)[:0], e)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	if len(e.Stdout) <= streamAbove {
		b = append(b, `,"stdout":`...)
		b = appendString(b, e.Stdout)
		b = append(b, ',')
		if b, err = appendExecutedTail(b, e); err != nil {
			return fmt.Errorf("%w: %v", ErrEncoding, err)
		}
		b = append(b, '\n')
		if cap(b) <= maxPooledLine {
			*bp = b
		}
		_, err = w.Write(b)
		return err
	}
	tail, err := appendExecutedTail(nil, e)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b)
	bw.WriteString(`,"stdout":"`)
	piece := make([]byte, 0, 6*pieceBytes+16)
	for s := e.Stdout; len(s) > 0; {
		n := runeCut(s, pieceBytes)
		piece = appendStringBody(piece[:0], s[:n])
		bw.Write(piece)
		s = s[n:]
	}
	bw.WriteString(`",`)
	bw.Write(tail)
	bw.WriteByte('\n')
	return bw.Flush() // a failed write is kept and reported here
}

// runeCut returns a length of at most n (n when s is longer) that does not
// split a UTF-8 sequence of s, so that each piece escapes as it would
// inside the whole: a sequence is at most 4 bytes, so its first byte is at
// most 3 bytes back.
func runeCut(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	for i := 0; i < utf8.UTFMax && i < n; i++ {
		if utf8.RuneStart(s[n-i]) {
			return n - i
		}
	}
	return n
}
