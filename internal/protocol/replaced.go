package protocol

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"hash"
)

// Counting a carrier as Maka's relay does under Harbor (docs/protocol.md,
// section 5, "The maka layout's counts"): the relay sees the subject's
// output as text its framework decoded, each invalid UTF-8 sequence
// replaced by U+FFFD, and its bytes and sha256 are those of that text
// encoded again: in Python, b.decode("utf-8", "replace").encode().
//
// Python replaces each maximal subpart of an ill-formed sequence (the
// Unicode Standard's practice, chapter 3, "U+FFFD Substitution of Maximal
// Subparts"): a byte that cannot start a character is one U+FFFD, and so
// is a start byte with the continuation bytes that may follow it, up to
// the first that may not, or the end of the input. Go's decoder instead
// replaces one byte at a time, so "\xe2\x82" is one U+FFFD here, two in
// Go.

// replacement is U+FFFD in UTF-8.
var replacement = []byte("\uFFFD")

// utf8Seq reports how many bytes the character that starts b needs (1 to
// 4; 0 when b[0] starts none) and how many of b's bytes belong to it as a
// maximal subpart: need when it is whole and valid, fewer when b ends or a
// byte that may not follow comes first (then at least 1, the start byte).
func utf8Seq(b []byte) (need, have int) {
	c := b[0]
	lo, hi := byte(0x80), byte(0xBF) // the range of the second byte
	switch {
	case c < 0x80:
		return 1, 1
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c == 0xED:
		need, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 3
	case c == 0xF0:
		need, lo = 4, 0x90
	case c == 0xF4:
		need, hi = 4, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	default: // a continuation byte, C0, C1, F5 to FF: never a start
		return 0, 1
	}
	have = 1
	for have < need && have < len(b) {
		x := b[have]
		if have > 1 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		have++
	}
	return need, have
}

// replaced calls emit with the text of b, each maximal subpart of an
// ill-formed sequence replaced by U+FFFD. With more set, b is not the end:
// an incomplete sequence at its end is not replaced but returned, to be
// put before what follows.
func replaced(b []byte, more bool, emit func([]byte)) (rest []byte) {
	start := 0 // of the valid run not yet emitted
	for i := 0; i < len(b); {
		if b[i] < 0x80 {
			i++
			continue
		}
		need, have := utf8Seq(b[i:])
		switch {
		case have == need:
			i += need
			continue
		case more && need > 0 && i+have == len(b):
			emit(b[start:i])
			return b[i:]
		}
		emit(b[start:i])
		emit(replacement)
		i += have
		start = i
	}
	emit(b[start:])
	return nil
}

// replacedCounts is the length and the SHA-256 of the text of the parts
// of a carrier, each decoded and encoded again on its own.
func replacedCounts(parts ...[]byte) (int64, hash.Hash) {
	var n int64
	h := sha256.New()
	for _, p := range parts {
		replaced(p, false, func(b []byte) {
			n += int64(len(b))
			h.Write(b)
		})
	}
	return n, h
}

// textDiagnostic is countedDiagnostic over the text of the parts.
func textDiagnostic(category string, parts ...[]byte) Diagnostic {
	n, h := replacedCounts(parts...)
	return Diagnostic{Category: category, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil)), Counted: true}
}

// textCount follows a whole carrier as it is written: the length and the
// SHA-256 of its text, for a carrier too long to keep.
type textCount struct {
	n       int64
	sum     hash.Hash
	pending []byte // an incomplete sequence at the end of what was written
}

func newTextCount() *textCount { return &textCount{sum: sha256.New()} }

func (t *textCount) write(p []byte) {
	// An incomplete sequence left by the last write takes p's first bytes
	// while they may follow it.
	for len(t.pending) > 0 && len(p) > 0 {
		next := append(t.pending, p[0])
		need, have := utf8Seq(next)
		if have < len(next) { // p[0] may not follow: the sequence was ill-formed
			t.emit(replacement)
			t.pending = t.pending[:0]
			break
		}
		t.pending, p = next, p[1:]
		if have == need {
			t.emit(t.pending)
			t.pending = t.pending[:0]
		}
	}
	if len(t.pending) > 0 {
		return // p is used up
	}
	t.pending = append(t.pending[:0], replaced(p, true, t.emit)...)
}

func (t *textCount) emit(b []byte) {
	t.n += int64(len(b))
	t.sum.Write(b)
}

// result is the length and the digest of the text written so far, as if
// it ended here.
func (t *textCount) result() (int64, string) {
	n := t.n
	sum := t.sum
	if len(t.pending) > 0 {
		n += int64(len(replacement))
		state, err := t.sum.(encoding.BinaryMarshaler).MarshalBinary()
		if err == nil {
			c := sha256.New()
			if c.(encoding.BinaryUnmarshaler).UnmarshalBinary(state) == nil {
				c.Write(replacement)
				sum = c
			}
		}
	}
	return n, hex.EncodeToString(sum.Sum(nil))
}
