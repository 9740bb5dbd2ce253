package exec

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// drain reads one output pipe of a subject until EOF, which may come long
// after the subject exits (a service holds the pipe). Until cut it feeds the
// capture; it always feeds the copy. It never blocks the writer: memory is
// bounded by the capture's own limit and one read buffer.
type drain struct {
	f       *os.File
	capture io.Writer      // nil once cut
	copy    io.WriteCloser // complete copy (artifacts), may be nil
	copyErr error
	cutReq  chan struct{} // closed by cut
	cutOnce sync.Once
	cutDone chan struct{} // closed when the capture is final
	endOnce sync.Once
	eof     chan struct{} // closed when the pipe is at EOF and closed
	reads   int           // reads made, for tests (read after eof)

	tty     bool          // f is a terminal's master
	flushMu sync.Mutex    // one flush at a time
	pendMu  sync.Mutex    // guards pend
	pend    chan struct{} // a flush waiting: closed by run once what was waiting is delivered
}

func newDrain(f *os.File, capture io.Writer, copy io.WriteCloser) *drain {
	return startDrain(f, false, capture, copy)
}

// newTermDrain is newDrain of a terminal's master.
func newTermDrain(master *os.File, capture io.Writer, copy io.WriteCloser) *drain {
	return startDrain(master, true, capture, copy)
}

func startDrain(f *os.File, tty bool, capture io.Writer, copy io.WriteCloser) *drain {
	d := &drain{
		f: f, tty: tty, capture: capture, copy: copy,
		cutReq: make(chan struct{}), cutDone: make(chan struct{}), eof: make(chan struct{}),
	}
	go d.run()
	return d
}

// A drain reads into drainBuf bytes, and into bulkBuf while each read
// fills its buffer: a subject that writes as fast as it can is then read
// in a quarter of the reads (each a system call and a trip through the
// poller), and one that writes a little holds 64 KiB. 256 KiB gave 1 GiB
// of stdout 1.17x (raw) and 1.14x (carrier) the rate at the same peak RSS;
// 1 MiB was no faster and took 1 MiB more.
const (
	drainBuf = 64 << 10
	bulkBuf  = 256 << 10
)

// drainBufs and bulkBufs keep read buffers between drains: a fresh 64 KiB
// buffer for each of two pipes per execution was a tenth of relayd's CPU
// time in the round-trip benchmark (allocation, zeroing and the collector).
var (
	drainBufs = sync.Pool{New: func() any { b := make([]byte, drainBuf); return &b }}
	bulkBufs  = sync.Pool{New: func() any { b := make([]byte, bulkBuf); return &b }}
)

func (d *drain) run() {
	defer close(d.eof)
	defer d.f.Close()
	small := drainBufs.Get().(*[]byte)
	defer drainBufs.Put(small)
	var bulk *[]byte
	defer func() {
		if bulk != nil {
			bulkBufs.Put(bulk)
		}
	}()
	buf := *small
	for {
		n, err := d.f.Read(buf)
		d.reads++
		if n > 0 {
			d.deliver(buf[:n])
		}
		switch {
		case n == len(buf) && bulk == nil:
			bulk = bulkBufs.Get().(*[]byte)
			buf = *bulk
		case n < len(buf) && bulk != nil:
			// The writer no longer keeps up: back to the small buffer.
			bulkBufs.Put(bulk)
			bulk, buf = nil, *small
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if d.finishFlush(buf) {
				break
			}
			d.finishCut(buf)
			_ = d.f.SetReadDeadline(time.Time{})
		default: // EOF, or the pipe failed: nothing more will come
			d.endCapture()
			if d.copy != nil {
				d.copy.Close()
			}
			return
		}
	}
}

func (d *drain) deliver(p []byte) {
	if d.capture != nil {
		d.capture.Write(p) // captures never fail
	}
	if d.copy != nil && d.copyErr == nil {
		if _, err := d.copy.Write(p); err != nil {
			d.copyErr = err // keep draining; the copy is incomplete
		}
	}
}

// finishCut takes what was already waiting in the pipe into the capture,
// without waiting for more, and ends the capture.
func (d *drain) finishCut(buf []byte) {
	select {
	case <-d.cutReq:
	default:
		return
	}
	if d.capture == nil {
		d.endCapture()
		return
	}
	d.readWaiting(buf)
	d.endCapture()
}

// finishFlush answers a flush (Subject.Flush): what is waiting in the
// pipe now is delivered, and the drain reads on. It reports false when no
// flush was asked for, or a cut was (which then goes first).
func (d *drain) finishFlush(buf []byte) bool {
	select {
	case <-d.cutReq:
		return false
	default:
	}
	d.pendMu.Lock()
	done := d.pend
	d.pend = nil
	d.pendMu.Unlock()
	if done == nil {
		return false
	}
	d.readWaiting(buf)
	_ = d.f.SetReadDeadline(time.Time{})
	select {
	case <-d.cutReq: // a cut asked meanwhile: its deadline was just undone
		_ = d.f.SetReadDeadline(time.Unix(1, 0))
	default:
	}
	close(done)
	return true
}

// readWaiting delivers what is waiting in the pipe, without waiting for more.
// A terminal's master is read until it has nothing: the line discipline's
// read, finding nothing, first waits for the kernel to move what the
// replica side wrote into it (n_tty_read's tty_buffer_flush_work), which
// TIOCINQ does not count; its descriptor is non-blocking (the poller's).
func (d *drain) readWaiting(buf []byte) {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return
	}
	if d.tty {
		_ = rc.Control(func(fd uintptr) {
			for {
				n, err := unix.Read(int(fd), buf)
				if n <= 0 || err != nil {
					return
				}
				d.deliver(buf[:n])
			}
		})
		return
	}
	_ = rc.Control(func(fd uintptr) {
		pending, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		if err != nil {
			return
		}
		for pending > 0 {
			n, err := unix.Read(int(fd), buf[:min(pending, len(buf))])
			if n <= 0 || err != nil {
				return
			}
			d.deliver(buf[:n])
			pending -= n
		}
	})
}

// flush waits at most limit for what is waiting in the pipe now to be
// delivered, reading on after it.
func (d *drain) flush(limit time.Duration) {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	select {
	case <-d.eof:
		return
	case <-d.cutDone:
		return
	default:
	}
	done := make(chan struct{})
	d.pendMu.Lock()
	d.pend = done
	d.pendMu.Unlock()
	_ = d.f.SetReadDeadline(time.Unix(1, 0))
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-d.eof:
	case <-d.cutDone:
	case <-t.C:
	}
}

func (d *drain) endCapture() {
	d.capture = nil
	d.endOnce.Do(func() { close(d.cutDone) })
}

// cut ends the capture: what the pipe delivered so far plus what is waiting
// in it now. It returns once the capture is final, or after limit.
func (d *drain) cut(limit time.Duration) {
	d.startCut()
	d.waitCut(limit)
}

// startCut asks for the end of the capture without waiting for it.
func (d *drain) startCut() {
	d.cutOnce.Do(func() {
		close(d.cutReq)
		select {
		case <-d.cutDone: // at EOF already: the capture is final
		default:
			_ = d.f.SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// waitCut waits at most limit for the capture to be final.
func (d *drain) waitCut(limit time.Duration) {
	select {
	case <-d.cutDone:
		return
	case <-d.eof:
		return
	default:
	}
	if limit <= 0 {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-d.cutDone:
	case <-d.eof:
	case <-t.C:
	}
}
