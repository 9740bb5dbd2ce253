package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Overlap drains what fill filled, in order, whole; a drain that fails
// stops the filling after the piece it is in; fill's error is returned.
func TestOverlap(t *testing.T) {
	src := make([]byte, 1000003)
	for i := range src {
		src[i] = byte(i * 7)
	}
	r := bytes.NewReader(src)
	var out bytes.Buffer
	ferr, derr := Overlap(4096, func(b []byte) (int, error) { return io.ReadFull(r, b) },
		func(p []byte) error { out.Write(p); return nil })
	if ferr == nil || !errors.Is(ferr, io.ErrUnexpectedEOF) || derr != nil || !bytes.Equal(out.Bytes(), src) {
		t.Fatalf("Overlap: %d bytes out, errors %v, %v; want the %d in, ErrUnexpectedEOF from fill", out.Len(), ferr, derr, len(src))
	}
	r.Reset(src)
	out.Reset()
	ferr, derr = Overlap(4096, func(b []byte) (int, error) {
		k, err := io.ReadFull(r, b)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return k, err
	}, func(p []byte) error { out.Write(p); return nil })
	if ferr != nil || derr != nil || !bytes.Equal(out.Bytes(), src) {
		t.Fatalf("Overlap to io.EOF: %d bytes out, errors %v, %v; want all, none", out.Len(), ferr, derr)
	}
	boom := errors.New("boom")
	fills := 0
	_, derr = Overlap(16, func(b []byte) (int, error) { fills++; return len(b), nil }, func(p []byte) error { return boom })
	if derr != boom || fills > 3 {
		t.Fatalf("a failing drain: %v after %d fills; want boom, the filling stopped within three", derr, fills)
	}
}
