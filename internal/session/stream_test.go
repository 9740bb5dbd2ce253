package session

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// streamPair is a streamer of an execution owned by a connection whose
// peer end the test reads (net.Pipe: a write waits for the reader, so a
// peer that does not read stalls the streamer's goroutine).
func streamPair(t *testing.T) (*streamer, *bufio.Reader) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	cn := &conn{srv: &Server{cfg: Config{WriteTimeout: 30 * time.Second, Token: []byte("T")}}, c: a, authed: true}
	ex := &execution{id: "x-1", req: &protocol.Execute{Stream: true}, owner: cn, ownerID: json.RawMessage(`7`)}
	ex.stream = newStreamer(ex)
	return ex.stream, bufio.NewReader(b)
}

// readOutputs reads output messages until the pipe closes.
func readOutputs(r *bufio.Reader, got chan<- []protocol.Output) {
	var all []protocol.Output
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			got <- all
			return
		}
		var o protocol.Output
		if json.Unmarshal(line, &o) == nil {
			all = append(all, o)
		}
	}
}

// A writer never waits for the connection: 64 MiB go through while the
// peer reads nothing, and what is delivered plus what is counted as
// dropped is every byte, in order per stream.
func TestStreamerNeverBlocksAndCountsDrops(t *testing.T) {
	st, r := streamPair(t)
	st.start()
	w := st.writer(0)
	chunk := []byte(strings.Repeat("a", 8<<10))
	const total = 64 << 20
	began := time.Now()
	for n := 0; n < total; n += len(chunk) {
		w.Write(chunk)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("writing past a peer that does not read took %s", took)
	}
	got := make(chan []protocol.Output, 1)
	go readOutputs(r, got)
	st.close()
	st.ex.owner.c.Close()
	var data, dropped int64
	for _, o := range <-got {
		if o.Stream != "stdout" || o.Execution != "x-1" || o.Kind != "output" || len(o.Data) > streamPiece {
			t.Fatalf("bad output message %+v", o)
		}
		data += int64(len(o.Data))
		dropped += o.Dropped
	}
	if data+dropped != total || dropped == 0 {
		t.Fatalf("delivered %d + dropped %d = %d; want %d, some dropped", data, dropped, data+dropped, total)
	}
}

// A character split across two writes and two flushes arrives whole.
func TestStreamerKeepsCharactersWhole(t *testing.T) {
	st, r := streamPair(t)
	got := make(chan []protocol.Output, 1)
	go readOutputs(r, got)
	w := st.writer(1)
	w.Write([]byte("price \xe2\x82"))
	st.flush(false)
	w.Write([]byte("\xac, bad \xff"))
	st.flush(true)
	st.ex.owner.c.Close()
	var text strings.Builder
	for _, o := range <-got {
		text.WriteString(o.Data)
	}
	if text.String() != "price €, bad \uFFFD" {
		t.Fatalf("got %q; want the euro sign whole and the bad byte replaced", text.String())
	}
}

// While detached (no owner), output counts as dropped, and the first
// message after an attach carries it.
func TestStreamerDetachedDrops(t *testing.T) {
	st, r := streamPair(t)
	cn, id := st.ex.destination()
	st.ex.setOwner(nil, nil)
	w := st.writer(0)
	w.Write([]byte("lost while detached\n"))
	st.flush(false)
	st.ex.setOwner(cn, id)
	got := make(chan []protocol.Output, 1)
	go readOutputs(r, got)
	w.Write([]byte("after\n"))
	st.flush(true)
	cn.c.Close()
	outs := <-got
	if len(outs) != 1 || outs[0].Data != "after\n" || outs[0].Dropped != int64(len("lost while detached\n")) {
		t.Fatalf("got %+v; want one message, after, dropped 20", outs)
	}
}

// Bytes dropped after the last data held at the end are reported in a
// message of their own: the sum adds up even when nothing follows them.
func TestStreamerReportsDropsAtTheEnd(t *testing.T) {
	st, r := streamPair(t)
	got := make(chan []protocol.Output, 1)
	go readOutputs(r, got)
	w := st.writer(0)
	w.Write(make([]byte, streamPending)) // fills what is held
	w.Write([]byte("0123456789"))        // dropped after it
	st.flush(true)
	st.ex.owner.c.Close()
	var data, dropped int64
	outs := <-got
	for _, o := range outs {
		data += int64(len(o.Data))
		dropped += o.Dropped
	}
	last := outs[len(outs)-1]
	if data != streamPending || dropped != 10 || last.Data != "" || last.Dropped != 10 {
		t.Fatalf("delivered %d, dropped %d, last message of %d bytes with dropped %d; want %d, 10, an empty one carrying the 10",
			data, dropped, len(last.Data), last.Dropped, streamPending)
	}
}
