package session

import (
	"io"
	"sync"
)

// stdinFeed is the stdin of one execution (section 4.6): the bytes of
// input and of stdin messages, queued by the connection's loop (which
// never blocks on it) and written to the subject's stdin pipe by one
// goroutine, which the subject's reading paces. What is queued and not yet
// written is bounded by --max-stdin-buffer: past it the loop stops reading
// its connection (full, space) until the subject takes some. When the
// subject closes its stdin or the execution ends (stop), what is queued is
// dropped, and every later push is too.
type stdinFeed struct {
	limit int

	mu      sync.Mutex
	queue   [][]byte
	queued  int            // bytes in queue, and in the write under way
	eof     bool           // the last bytes were pushed: stdin closes once they are written
	done    bool           // stdin is closed, by eof, by the subject, or by stop: nothing more is written
	w       io.WriteCloser // the pipe's write end (a session's FIFO, or its terminal), once the subject runs
	wake    chan struct{}  // buffered 1: the writer has something to look at
	roomFor chan struct{}  // closed once queued is under limit or done; nil when nobody waits
}

func newStdinFeed(limit int) *stdinFeed {
	return &stdinFeed{limit: limit, wake: make(chan struct{}, 1)}
}

// push queues data, and closes stdin after it when eof. It reports false
// when stdin was already closed by eof (a controller's mistake); data
// pushed after the subject closed its stdin or the execution ended is
// dropped silently, as the contract says.
func (f *stdinFeed) push(data []byte, eof bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.eof {
		return false
	}
	f.eof = eof
	if f.done {
		return true
	}
	if len(data) > 0 {
		f.queue = append(f.queue, data)
		f.queued += len(data)
	}
	f.signal()
	return true
}

// full reports whether the queue holds --max-stdin-buffer or more; space
// is then closed once it does not any more (or stdin closed). It is nil
// when the queue has room, and for a nil feed.
func (f *stdinFeed) full() (space <-chan struct{}) {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.queued < f.limit {
		return nil
	}
	if f.roomFor == nil {
		f.roomFor = make(chan struct{})
	}
	return f.roomFor
}

// start hands the feed the subject's stdin and starts its writer, which
// ends when stdin is closed.
func (f *stdinFeed) start(w io.WriteCloser) {
	f.mu.Lock()
	f.w = w
	f.signal()
	f.mu.Unlock()
	go f.write()
}

// stop closes stdin whatever is queued: the subject has exited, or the
// execution never started. A nil feed (stdin is /dev/null) does nothing. A write under way returns at once.
func (f *stdinFeed) stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLocked()
}

func (f *stdinFeed) closeLocked() {
	if f.done {
		return
	}
	f.done = true
	f.queue, f.queued = nil, 0
	if f.w != nil {
		f.w.Close()
	}
	if f.roomFor != nil {
		close(f.roomFor)
		f.roomFor = nil
	}
	f.signal()
}

// signal wakes the writer; f.mu is held.
func (f *stdinFeed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// write is the feed's one writer: it takes the queue's chunks in order
// and writes each whole, the subject's reading pacing it.
func (f *stdinFeed) write() {
	for range f.wake {
		for {
			f.mu.Lock()
			if f.done {
				f.mu.Unlock()
				return
			}
			if len(f.queue) == 0 {
				if f.eof {
					f.closeLocked()
					f.mu.Unlock()
					return
				}
				f.mu.Unlock()
				break
			}
			chunk, w := f.queue[0], f.w
			f.queue[0] = nil
			f.queue = f.queue[1:]
			f.mu.Unlock()

			_, err := w.Write(chunk) // the subject closed its stdin (EPIPE), or stop closed w

			f.mu.Lock()
			f.queued -= len(chunk)
			if err != nil {
				f.closeLocked()
				f.mu.Unlock()
				return
			}
			if f.roomFor != nil && f.queued < f.limit {
				close(f.roomFor)
				f.roomFor = nil
			}
			f.mu.Unlock()
		}
	}
}
