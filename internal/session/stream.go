package session

import (
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/relayd/relayd/internal/protocol"
)

// Live output (protocol section 4.5). The drains of a streamed execution
// write into a streamer, which never blocks them: it keeps at most
// streamPending bytes per stream and counts the rest as dropped. Its own
// goroutine sends what it holds as output messages at most every
// streamEvery, or as soon as streamPiece bytes are waiting; a write that
// waits for a slow reader blocks only that goroutine, while the drains go
// on dropping.
const (
	streamEvery   = 50 * time.Millisecond
	streamPiece   = 64 << 10  // most data bytes in one output message
	streamPending = 256 << 10 // most bytes held per stream while the connection is behind
)

var streamNames = [2]string{"stdout", "stderr"}

// streamBuf is what one stream has waiting.
type streamBuf struct {
	data    []byte
	spare   []byte // the buffer the last send used, reused for the next
	dropped int64  // bytes left out before data (since the previous message)
	gap     int64  // bytes left out after data: the next message's dropped
}

// streamer is the live output of one execution. Write may be called from
// the drains at any time; start and close from the execution's goroutine.
type streamer struct {
	ex    *execution
	names [2]string // the stream of each buffer: streamNames, or "pty" for a terminal's (section 4.7)
	// eager sends output as soon as it comes, not on the tick: a
	// terminal's echo of a keystroke must not wait 50 ms. What comes
	// while a message is being sent still coalesces into the next one.
	eager bool

	mu     sync.Mutex
	bufs   [2]streamBuf
	closed bool

	wake    chan struct{} // a piece is ready (buffered, 1)
	quit    chan struct{} // closed by close: final flush
	done    chan struct{} // closed when the goroutine is gone
	running bool
}

func newStreamer(ex *execution) *streamer {
	names := streamNames
	if ex.req.Pty != nil {
		names[0] = "pty"
	}
	return &streamer{ex: ex, names: names, eager: ex.req.Pty != nil, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// writer returns the io.Writer of one stream (0 stdout, or the terminal;
// 1 stderr).
func (st *streamer) writer(i int) streamWriter { return streamWriter{st, i} }

type streamWriter struct {
	st *streamer
	i  int
}

// Write keeps what fits and counts the rest as dropped. It never fails
// and never waits for the connection.
func (w streamWriter) Write(p []byte) (int, error) {
	st := w.st
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return len(p), nil
	}
	b := &st.bufs[w.i]
	rest := p
	if b.gap == 0 { // once something is dropped, later bytes wait for the next message
		n := min(len(rest), streamPending-len(b.data))
		b.data = append(b.data, rest[:n]...)
		rest = rest[n:]
	}
	b.gap += int64(len(rest))
	ready := st.eager || len(b.data) >= streamPiece || b.gap > 0
	st.mu.Unlock()
	if ready {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// start runs the sending goroutine; until then output is only held.
func (st *streamer) start() {
	st.running = true
	go st.run()
}

func (st *streamer) run() {
	defer close(st.done)
	tick := time.NewTicker(streamEvery)
	defer tick.Stop()
	for {
		select {
		case <-st.wake:
		case <-tick.C:
		case <-st.quit:
			st.flush(true)
			return
		}
		st.flush(false)
	}
}

// close stops taking output, sends what is held (and what was dropped)
// and returns once the goroutine is gone: no output message follows the
// executed reply.
func (st *streamer) close() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	if !st.running {
		return
	}
	close(st.quit)
	<-st.done
}

// flush sends what each stream holds. Except at the end, an incomplete
// UTF-8 sequence at the end is kept for the next message, so that a
// character written in two pieces is not replaced. At the end, bytes
// dropped after the last data go out in a message of their own.
func (st *streamer) flush(final bool) {
	for i := range st.bufs {
		for st.flushStream(i, final) && final {
		}
	}
}

// flushStream sends what stream i holds, and reports whether it sent
// something (and more may be left: the drops that followed it).
func (st *streamer) flushStream(i int, final bool) bool {
	st.mu.Lock()
	b := &st.bufs[i]
	data, dropped := b.data, b.dropped
	keep := 0
	if !final && b.gap == 0 {
		keep = incompleteTail(data)
	}
	next := append(b.spare[:0], data[len(data)-keep:]...)
	data = data[:len(data)-keep]
	b.data, b.spare = next, nil
	b.dropped, b.gap = b.gap, 0 // the bytes dropped after data: the next message's
	st.mu.Unlock()
	if len(data) == 0 && dropped == 0 {
		st.giveBack(i, data)
		return false
	}
	lost := st.send(i, data, dropped)
	if lost > 0 {
		// Nobody took it (detached, or the connection is gone): it
		// counts as dropped in front of what comes next.
		st.mu.Lock()
		b.dropped += lost
		st.mu.Unlock()
	}
	st.giveBack(i, data)
	return lost == 0
}

// owed sends, once the stream is closed, the drops nobody was told of: the
// bytes of an execution that ended while detached, written after its last
// message, come to the connection that attached as output messages with
// "data":"" before the executed reply, so that data and dropped still add
// up to every byte. A connection that stayed attached is owed nothing.
func (st *streamer) owed(cn *conn, id json.RawMessage) {
	for i := range st.bufs {
		st.mu.Lock()
		dropped := st.bufs[i].dropped
		st.bufs[i].dropped = 0
		st.mu.Unlock()
		if dropped > 0 {
			cn.write(protocol.Output{Token: cn.token(), Kind: "output", ID: id, Execution: st.ex.id,
				Stream: st.names[i], Dropped: dropped})
		}
	}
}

func (st *streamer) giveBack(i int, buf []byte) {
	st.mu.Lock()
	if st.bufs[i].spare == nil {
		st.bufs[i].spare = buf[:0]
	}
	st.mu.Unlock()
}

// send writes data as output messages of at most streamPiece bytes, the
// first carrying dropped, and returns what was not delivered (dropped
// included): everything when there is no connection to write to. A failed
// write makes that connection gone, which its loop notices.
func (st *streamer) send(i int, data []byte, dropped int64) (lost int64) {
	cn, id := st.ex.destination()
	if cn == nil {
		return dropped + int64(len(data))
	}
	for first := true; first || len(data) > 0; first = false {
		n := pieceCut(data, streamPiece)
		msg := protocol.Output{Token: cn.token(), Kind: "output", ID: id, Execution: st.ex.id,
			Stream: st.names[i], Data: string(data[:n])}
		if first {
			msg.Dropped = dropped
		}
		if !cn.write(msg) {
			if first {
				return dropped + int64(len(data))
			}
			return int64(len(data))
		}
		data = data[n:]
	}
	return 0
}

// incompleteTail is the length of an incomplete UTF-8 sequence at the end
// of b (0 when b ends on a whole character or on invalid bytes).
func incompleteTail(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// pieceCut returns a length of at most n that does not split a UTF-8
// sequence of b (n when the sequence is invalid anyway).
func pieceCut(b []byte, n int) int {
	if len(b) <= n {
		return len(b)
	}
	for i := 0; i < utf8.UTFMax && i < n; i++ {
		if utf8.RuneStart(b[n-i]) {
			if i == 0 {
				return n
			}
			return n - i
		}
	}
	return n
}

// tee writes to a capture and to a stream; neither ever fails.
type tee struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (t tee) Write(p []byte) (int, error) {
	t.a.Write(p)
	t.b.Write(p)
	return len(p), nil
}
