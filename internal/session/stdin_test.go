package session

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nonblockPipe is a pipe whose write end Go's poller serves, as the
// subject's stdin is (exec.stdinPipe).
func nonblockPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(p[1], true); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Bytes arrive in order, then EOF; past the limit full says wait, and the
// reader's draining ends the wait.
func TestStdinFeedOrderAndLimit(t *testing.T) {
	r, w := nonblockPipe(t)
	f := newStdinFeed(256 << 10)
	var want bytes.Buffer
	for i := 0; i < 8; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 100<<10)
		want.Write(chunk)
		f.push(chunk, i == 7)
	}
	space := f.full()
	if space == nil {
		t.Fatal("full() = nil with 800 KiB queued over a 256 KiB limit; want a channel to wait on")
	}
	f.start(w)
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (%v); want the %d pushed, in order, then EOF", len(got), err, want.Len())
	}
	waitClosed(t, space, "room under the limit")
	if f.push([]byte("x"), false) {
		t.Fatal("push after eof = true; want false")
	}
}

// stop drops what is queued and interrupts a write the reader does not
// take; later pushes are dropped.
func TestStdinFeedStop(t *testing.T) {
	r, w := nonblockPipe(t)
	f := newStdinFeed(1 << 20)
	f.push(make([]byte, 4<<20), false) // far more than the pipe holds
	f.start(w)
	space := f.full()
	if space == nil {
		t.Fatal("full() = nil with 4 MiB queued; want a channel")
	}
	f.stop()
	waitClosed(t, space, "stop to end the wait")
	if !f.push([]byte("dropped"), true) || f.full() != nil {
		t.Fatal("push after stop: want it taken and dropped, and no wait")
	}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatalf("reading after stop: %v; want what was written, then EOF", err)
	}
}
