package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Bulk bodies (protocol section 4.6, "Bulk bodies"): a put with "body":N
// is followed by N raw bytes, a get with "body":true is answered by one
// content line and the file's raw bytes.

// randomBytes is n reproducible bytes of every value.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

// writeAll writes b to c within a generous bound.
func writeAll(t testing.TB, c net.Conn, b []byte) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// putBody sends a put of data as a raw body followed at once, in the
// same write, by a ready: the next message starts right after the body.
func putBody(t testing.TB, c net.Conn, token, path string, data []byte) {
	t.Helper()
	line, _ := json.Marshal(msg{"token": token, "kind": "put", "id": 1, "path": path, "body": len(data)})
	ready, _ := json.Marshal(msg{"token": token, "kind": "ready", "id": 2})
	var head bytes.Buffer
	head.Write(line)
	head.WriteByte('\n')
	writeAll(t, c, head.Bytes())
	writeAll(t, c, data)
	writeAll(t, c, append(ready, '\n'))
}

// getBody asks for path with "body":true and returns its content line,
// the body and the line after it (sent).
func getBody(t testing.TB, c net.Conn, r *bufio.Reader, token, path string) (msg, []byte, msg) {
	t.Helper()
	line, _ := json.Marshal(msg{"token": token, "kind": "get", "id": 3, "path": path, "body": true})
	writeAll(t, c, append(line, '\n'))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	head := readReply(t, r)
	if head["kind"] != "content" {
		t.Fatalf("get: %v; want content", head)
	}
	n := num(t, head, "body")
	if num(t, head, "bytes") != n {
		t.Fatalf("content %v: bytes and body differ", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("reading a body of %d bytes: %v", n, err)
	}
	return head, body, readReply(t, r)
}

func readReply(t testing.TB, r *bufio.Reader) msg {
	t.Helper()
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	var m msg
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("reply %q is not JSON", line)
	}
	return m
}

// roundTrip puts data with a body over c and gets it back with one.
func bodyRoundTrip(t testing.TB, c net.Conn, r *bufio.Reader, token, workspace, name string, data []byte) {
	t.Helper()
	putBody(t, c, token, name, data)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	st := readReply(t, r)
	if st["kind"] != "stored" || num(t, st, "bytes") != int64(len(data)) || st["sha256"] != sha(data) {
		t.Fatalf("put of %d bytes: %v; want stored with sha256 %s", len(data), st, sha(data))
	}
	if rd := readReply(t, r); rd["kind"] != "ready" {
		t.Fatalf("after the body: %v; want ready (the next message starts right after the body)", rd)
	}
	if workspace != "" {
		onDisk, err := os.ReadFile(filepath.Join(workspace, name))
		if err != nil || !bytes.Equal(onDisk, data) {
			t.Fatalf("on disk: %d bytes, %v; want the %d sent", len(onDisk), err, len(data))
		}
	}
	head, body, sent := getBody(t, c, r, token, name)
	if !bytes.Equal(body, data) || sent["kind"] != "sent" || sent["sha256"] != sha(data) {
		t.Fatalf("get of %d bytes: %d bytes back, head %v, then %v", len(data), len(body), head, sent)
	}
}

func TestBodyPutGetSizes(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	if r := cl.request(msg{"kind": "ready"}); !strings.Contains(fmt.Sprint(r["extensions"]), "body") {
		t.Fatalf("ready lists %v; want \"body\" among the extensions", r["extensions"])
	}
	for _, n := range []int{0, 1, 32 << 10, 256 << 10, 256<<10 + 1, 256 << 20} {
		data := randomBytes(n, uint64(n))
		copy(data, "\n{\"kind\":\"ready\"}\n\r\n")
		bodyRoundTrip(t, cl.c, cl.r, d.token, d.workspace, "f"+strconv.Itoa(n), data)
	}
}

// relaydHWM is relayd's peak resident memory, from /proc.
func relaydHWM(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A large transfer either way streams through bounded buffers: relayd's
// peak memory stays far below the file's size.
func TestBodyMemoryBound(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	data := randomBytes(256<<20, 7)
	bodyRoundTrip(t, cl.c, cl.r, d.token, "", "big", data)
	if hwm := relaydHWM(t, d.cmd.Process.Pid); hwm > 64<<20 {
		t.Fatalf("relayd's peak RSS is %d MiB after a 256 MiB put and get; want under 64 MiB", hwm>>20)
	}
}

// A peer that closes inside a body is a transport loss: nothing is
// stored, no temporary file is left, and relayd serves on. With
// "digest":"none" too, whose bytes relayd splices into the file.
func TestBodyPeerClosesInside(t *testing.T) {
	for _, digest := range []string{"sha256", "none"} {
		t.Run(digest, func(t *testing.T) { peerClosesInside(t, digest) })
	}
}

func peerClosesInside(t *testing.T, digest string) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	line, _ := json.Marshal(msg{"token": d.token, "kind": "put", "id": 1, "path": "half", "body": 64 << 20, "digest": digest})
	writeAll(t, cl.c, append(line, '\n'))
	writeAll(t, cl.c, randomBytes(20<<20, 1))
	cl.c.Close()
	leavesNothing(t, d)
}

// The same through relayd bridge: its stdin ends inside the body.
func TestBodyPeerClosesInsideThroughBridge(t *testing.T) {
	for _, digest := range []string{"sha256", "none"} {
		t.Run(digest, func(t *testing.T) {
			d := startRelayd(t, opts{})
			b := hostBridge(t, d)
			if r := b.request(msg{"kind": "ready"}); r["kind"] != "ready" {
				t.Fatalf("ready through the bridge: %v", r)
			}
			line, _ := json.Marshal(msg{"token": d.token, "kind": "put", "id": 1, "path": "half", "body": 64 << 20, "digest": digest})
			if _, err := b.in.Write(append(append(line, '\n'), randomBytes(20<<20, 1)...)); err != nil {
				t.Fatalf("write to the bridge: %v", err)
			}
			b.in.Close()
			if code, ok := b.exited(30 * time.Second); !ok || code != 0 {
				t.Fatalf("bridge after its stdin ended inside a body: exited %v, code %d; want 0", ok, code)
			}
			leavesNothing(t, d)
		})
	}
}

// leavesNothing waits for relayd's workspace to be empty after a peer
// left inside a put's body, then checks that relayd serves on.
func leavesNothing(t *testing.T, d *daemon) {
	t.Helper()
	// relayd says so once it saw the end: before, an empty workspace
	// could be one whose put was not yet begun.
	waitFor(t, 30*time.Second, "relayd to abandon the put", func() bool {
		return strings.Contains(d.logs.String(), "put abandoned")
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, err := os.ReadDir(d.workspace)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workspace still holds %v after the peer closed inside a body; want nothing", ents)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c2 := d.connect()
	bodyRoundTrip(t, c2.c, c2.r, d.token, d.workspace, "after", randomBytes(1000, 3))
}

// A refused put's body is dropped and the stream stays in step; a "body"
// that is not a count ends the connection, as the next line cannot be found.
func TestBodyRefusedIsDropped(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-file-bytes", "1000"}})
	cl := d.connect()
	putBody(t, cl.c, d.token, "big", randomBytes(2000, 1))
	if r := readReply(t, cl.r); r["kind"] != "error" || !strings.Contains(fmt.Sprint(r), "max-file-bytes") {
		t.Fatalf("a body over --max-file-bytes: %v; want an error naming it", r)
	}
	if r := readReply(t, cl.r); r["kind"] != "ready" {
		t.Fatalf("after a refused body: %v; want ready", r)
	}
	putBody(t, cl.c, d.token, "no/such/dir/f", randomBytes(500, 1))
	if r := readReply(t, cl.r); r["kind"] != "error" {
		t.Fatalf("a body to a missing directory: %v; want an error", r)
	}
	if r := readReply(t, cl.r); r["kind"] != "ready" {
		t.Fatalf("after a refused body: %v; want ready", r)
	}
	cl.sendRaw([]byte(`{"token":"` + d.token + `","kind":"put","path":"x","body":"12"}` + "\n"))
	if r := cl.read(10 * time.Second); r == nil || r["kind"] != "error" {
		t.Fatalf("a body that is not a count: %v; want an error", r)
	}
	if !cl.closedByPeer(10 * time.Second) {
		t.Fatal("the connection stays open after a body of unknown length")
	}
	if ents, _ := os.ReadDir(d.workspace); len(ents) != 0 {
		t.Fatalf("the workspace holds %v; want nothing", ents)
	}
}

// relayd bridge carries bodies both ways.
func TestBodyThroughBridge(t *testing.T) {
	d := startRelayd(t, opts{})
	b := hostBridge(t, d)
	if r := b.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("ready through the bridge: %v", r)
	}
	data := randomBytes(3<<20+5, 9)
	copy(data, "\n\n")
	line, _ := json.Marshal(msg{"token": d.token, "kind": "put", "id": 1, "path": "viabridge", "body": len(data)})
	ready, _ := json.Marshal(msg{"token": d.token, "kind": "ready", "id": 2})
	get, _ := json.Marshal(msg{"token": d.token, "kind": "get", "id": 3, "path": "viabridge", "body": true})
	go func() {
		stream := append(append(append(append(line, '\n'), data...), append(ready, '\n')...), append(get, '\n')...)
		_, _ = b.in.Write(stream)
	}()
	if r := b.read(time.Minute); r["kind"] != "stored" || r["sha256"] != sha(data) {
		t.Fatalf("put through the bridge: %v; want stored with sha256 %s", r, sha(data))
	}
	if r := b.read(time.Minute); r["kind"] != "ready" {
		t.Fatalf("after the body: %v; want ready", r)
	}
	head := b.read(time.Minute)
	if head["kind"] != "content" || num(t, head, "body") != int64(len(data)) {
		t.Fatalf("get through the bridge: %v", head)
	}
	back := make([]byte, len(data))
	if _, err := io.ReadFull(b.out, back); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("the body through the bridge differs (%v)", err)
	}
	if r := b.read(time.Minute); r["kind"] != "sent" || r["sha256"] != sha(data) {
		t.Fatalf("after the body through the bridge: %v; want sent with sha256 %s", r, sha(data))
	}
}

// A peer that asks for a body and stops reading it is dropped after
// --write-timeout, not later by the kernel's own timeout; relayd serves
// others meanwhile and after.
func TestBodyGetPeerStopsReading(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--write-timeout", "500ms"}})
	data := randomBytes(32<<20, 9)
	if err := os.WriteFile(filepath.Join(d.workspace, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(4096)
	line, _ := json.Marshal(msg{"token": d.token, "kind": "get", "id": 1, "path": "big", "body": true})
	writeAll(t, raw, append(line, '\n'))
	// Never read.
	waitFor(t, 60*time.Second, "relayd to drop the peer that does not read its body", func() bool {
		return strings.Contains(d.logs.String(), "write to peer failed")
	})
	if logs := d.logs.String(); !strings.Contains(logs, "i/o timeout") {
		t.Errorf("relayd dropped the peer, but not for its --write-timeout (i/o timeout): %s", logs)
	}
	other := d.connect()
	bodyRoundTrip(t, other.c, other.r, d.token, d.workspace, "small", randomBytes(1000, 4))
	d.stopClean()
}
