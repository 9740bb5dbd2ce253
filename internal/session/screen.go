package session

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/relayd/relayd/internal/protocol"
)

// screen is what a pty session's terminal printed (protocol 4.7, read):
// a ring of --session-buffer bytes, addressed by offsets from the
// session's start, so that a reader can ask for what came since it last
// looked and learn what it lost.
type screen struct {
	mu      sync.Mutex
	buf     []byte
	total   int64         // bytes written since the session opened
	changed chan struct{} // closed at the next write, or the end
	ended   bool
}

func newScreen(size int) *screen {
	return &screen{buf: make([]byte, size), changed: make(chan struct{})}
}

func (r *screen) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	if len(p) > len(r.buf) {
		r.total += int64(len(p) - len(r.buf))
		p = p[len(p)-len(r.buf):]
	}
	for len(p) > 0 {
		at := int(r.total % int64(len(r.buf)))
		c := copy(r.buf[at:], p)
		p = p[c:]
		r.total += int64(c)
	}
	if !r.ended {
		// Once ended, changed stays closed: the terminal's last bytes can
		// reach the ring after the session's end (its drain runs on).
		close(r.changed)
		r.changed = make(chan struct{})
	}
	return n, nil
}

// end says nothing more will be written.
func (r *screen) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		close(r.changed)
	}
}

// since returns what was written from offset from on (from the oldest
// byte kept when from is older; lost counts what was dropped), ending at
// a character boundary, and the offset after it.
func (r *screen) since(from int64) (data []byte, next, lost int64, ended bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := max(0, r.total-int64(len(r.buf)))
	if from < oldest {
		lost, from = oldest-from, oldest
	}
	from = min(from, r.total)
	data = make([]byte, 0, r.total-from)
	for at := from; at < r.total; {
		i := int(at % int64(len(r.buf)))
		end := min(len(r.buf), i+int(r.total-at))
		data = append(data, r.buf[i:end]...)
		at += int64(end - i)
	}
	// A character cut by the end waits for its rest.
	for k := 1; k <= 3 && k <= len(data); k++ {
		if utf8.RuneStart(data[len(data)-k]) {
			if !utf8.FullRune(data[len(data)-k:]) && !r.ended {
				data = data[:len(data)-k]
			}
			break
		}
	}
	return data, from + int64(len(data)), lost, r.ended, r.changed
}

// read answers a read (protocol 4.7): what came from rq.From on, after
// waiting up to WaitMs for something new when nothing is there, and
// until nothing new came for IdleMs (at most MaxReadWaitMs in all).
func (r *screen) read(rq *protocol.Read) (data []byte, next, lost int64, ended bool) {
	data, next, lost, ended, changed := r.since(rq.From)
	began := time.Now()
	limit := began.Add(time.Duration(protocol.MaxReadWaitMs) * time.Millisecond)
	if len(data) == 0 && rq.WaitMs > 0 && !ended {
		t := time.NewTimer(time.Duration(rq.WaitMs) * time.Millisecond)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
	if rq.IdleMs > 0 {
		idle := time.Duration(rq.IdleMs) * time.Millisecond
		for {
			_, _, _, ended, changed = r.since(rq.From)
			if ended || !time.Now().Before(limit) {
				break
			}
			t := time.NewTimer(min(idle, time.Until(limit)))
			select {
			case <-changed:
				t.Stop()
				continue
			case <-t.C:
			}
			break
		}
	}
	data, next, lost, ended, _ = r.since(rq.From)
	return data, next, lost, ended
}

// terminalText is data as reply text: invalid UTF-8 replaced.
func terminalText(data []byte) string {
	return strings.ToValidUTF8(string(data), "\uFFFD")
}
