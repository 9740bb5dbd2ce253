package protocol

import (
	"sync"
	"unicode/utf8"
	"unsafe"
)

// RawCapture keeps the first max bytes of a subject's stdout in raw mode
// (section 5) and notes whether more came. Like Carrier it never returns an
// error from Write, so the subject is drained to the end, and it is safe for
// concurrent use.
type RawCapture struct {
	mu        sync.Mutex
	max       int
	buf       []byte // never longer (or with more capacity) than max
	truncated bool
	tail      bool // keep the last max bytes instead of the first
	start     int  // tail, once buf is full: where the oldest byte is (a ring)
	// sealed: Result was called; buf is the result's own bytes from then
	// on, so nothing more is written to it.
	sealed bool
	result string
}

// NewRawCaptureTail is NewRawCapture keeping the last max bytes (outputKeep
// "tail"): what a harness that shows the end of a long log wants.
func NewRawCaptureTail(max int) *RawCapture {
	r := NewRawCapture(max)
	r.tail = true
	return r
}

// NewRawCapture returns a RawCapture that keeps at most max bytes; with max
// of 0 or less it keeps nothing and only notes whether anything came.
func NewRawCapture(max int) *RawCapture {
	if max < 0 {
		max = 0
	}
	return &RawCapture{max: max}
}

// Write keeps what fits under the limit and drops the rest. It always
// returns len(p), nil.
func (r *RawCapture) Write(p []byte) (int, error) {
	n := len(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sealed {
		return n, nil
	}
	if len(r.buf)+len(p) > r.max {
		r.truncated = true
	}
	if r.tail && len(r.buf)+len(p) > r.max && r.max > 0 {
		r.writeRing(p)
		return n, nil
	}
	r.buf = appendCapped(r.buf, p, r.max)
	return n, nil
}

// writeRing keeps the last max bytes of what came and p: buf is filled to
// max, then overwritten in a ring from start.
func (r *RawCapture) writeRing(p []byte) {
	if len(p) >= r.max {
		if cap(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		r.buf = r.buf[:r.max]
		copy(r.buf, p[len(p)-r.max:])
		r.start = 0
		return
	}
	if fill := r.max - len(r.buf); fill > 0 { // not yet full: fill first
		r.buf = appendCapped(r.buf, p[:fill], r.max)
		p = p[fill:]
	}
	for len(p) > 0 {
		k := copy(r.buf[r.start:], p)
		p = p[k:]
		r.start = (r.start + k) % r.max
	}
}

// Result returns what was kept, as text: every byte that is not part of
// valid UTF-8 is replaced with U+FFFD, as encoding/json would do (so a
// multi-byte character cut in two by the limit shows as replacement
// characters). truncated is true when more than max bytes were written.
// Result seals the capture: what is written afterwards (a background
// process that holds the subject's stdout) is dropped, and the text is the
// kept bytes themselves, not a copy of up to --max-stdout-bytes.
func (r *RawCapture) Result() (stdout string, truncated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sealed {
		r.sealed = true
		b := r.buf
		if r.start != 0 {
			b = append(append(make([]byte, 0, len(b)), b[r.start:]...), b[:r.start]...)
		}
		r.result = validUTF8(b)
		r.buf = nil // the result owns the bytes
	}
	return r.result, r.truncated
}

// validUTF8 returns b as a string with each invalid byte replaced by U+FFFD.
// The string may be b's own bytes: b must not change afterwards.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return bytesString(b)
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return bytesString(out)
}

// bytesString is b as a string without a copy; nothing may write b after.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendCapped appends to buf as much of p as fits under limit bytes, and
// never lets buf's capacity exceed limit.
func appendCapped(buf, p []byte, limit int) []byte {
	room := limit - len(buf)
	if room <= 0 {
		return buf
	}
	if len(p) > room {
		p = p[:room]
	}
	if need := len(buf) + len(p); need > cap(buf) {
		size := 2 * cap(buf)
		if size < need {
			size = need
		}
		if size < 512 {
			size = 512
		}
		if size > limit {
			size = limit
		}
		grown := make([]byte, len(buf), size)
		copy(grown, buf)
		buf = grown
	}
	return append(buf, p...)
}
