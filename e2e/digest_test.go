package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A body get's digest after its bytes (protocol 4.6, "Bulk bodies"): the
// content line carries the size, the raw bytes follow, then sent with the
// sha256 of the bytes as they were sent, or an error (failed) when the
// file changed meanwhile; "digest":"none" on a put or a get computes no
// digest on either side. Through TCP and through relayd bridge alike.

// wire is one stream to relayd: a TCP connection or a bridge's pipes.
type wire struct {
	t     testing.TB
	w     io.Writer
	r     *bufio.Reader
	conn  net.Conn // nil through a bridge (its pipes take no deadline)
	token string
	id    int
}

// tcpWire and bridgeWire are authenticated at once (a ready), so that
// relayd's --auth-timeout does not end them while a test prepares.
func tcpWire(t testing.TB, d *daemon) *wire {
	cl := d.connect()
	s := &wire{t: t, w: cl.c, r: cl.r, conn: cl.c, token: d.token}
	s.pingPong("connecting")
	return s
}

func bridgeWire(t *testing.T, d *daemon) *wire {
	b := hostBridge(t, d)
	s := &wire{t: t, w: b.in, r: b.out, token: d.token}
	s.pingPong("connecting")
	return s
}

func (s *wire) deadline() {
	if s.conn != nil {
		_ = s.conn.SetDeadline(time.Now().Add(3 * time.Minute))
	}
}

// send writes m's line (token and a fresh id added) and returns the id.
func (s *wire) send(m msg) int {
	s.t.Helper()
	s.id++
	m["token"], m["id"] = s.token, s.id
	line, _ := json.Marshal(m)
	s.deadline()
	if _, err := s.w.Write(append(line, '\n')); err != nil {
		s.t.Fatalf("write: %v", err)
	}
	return s.id
}

func (s *wire) reply() msg {
	s.t.Helper()
	s.deadline()
	return readReply(s.t, s.r)
}

// pingPong asks ready and expects it answered next: the stream is in step.
func (s *wire) pingPong(after string) {
	s.t.Helper()
	s.send(msg{"kind": "ready"})
	if r := s.reply(); r["kind"] != "ready" {
		s.t.Fatalf("after %s: %v; want ready (the stream in step)", after, r)
	}
}

// source is n reproducible bytes and their sha256: a block of 1 MiB and
// 7 bytes of pseudo-random bytes (seed) over and over, so that no two
// buffers of a transfer look alike; made once, as math/rand under -race
// makes a GiB slowly.
func source(n int64, seed uint64) (io.Reader, string) {
	block := make([]byte, 1<<20+7)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), 46}).Read(block)
	key := [2]uint64{uint64(n), seed}
	if sum, ok := sourceSums.Load(key); ok {
		return &repeat{block: block, left: n}, sum.(string)
	}
	h := sha256.New()
	_, _ = io.Copy(h, &repeat{block: block, left: n})
	sum := hex.EncodeToString(h.Sum(nil))
	sourceSums.Store(key, sum)
	return &repeat{block: block, left: n}, sum
}

// sourceSums holds the sha256 of each source already made (its size and
// seed): a GiB's is computed once, not once per digest.
var sourceSums sync.Map

// repeat yields left bytes of block over and over.
type repeat struct {
	block []byte
	off   int
	left  int64
}

func (r *repeat) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	k := copy(p, r.block[r.off:])
	r.off = (r.off + k) % len(r.block)
	r.left -= int64(k)
	return k, nil
}

func fileSum(t testing.TB, path string) (int64, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return n, hex.EncodeToString(h.Sum(nil))
}

// put sends a put of the n bytes of src as a body (with digest unless
// ""), and checks stored: its size, and its sha256 (want), or none.
func (s *wire) put(name, digest string, n int64, src io.Reader, want string) {
	s.t.Helper()
	m := msg{"kind": "put", "path": name, "body": n}
	if digest != "" {
		m["digest"] = digest
	}
	s.send(m)
	if k, err := io.CopyN(s.w, src, n); err != nil {
		s.t.Fatalf("writing a body of %d bytes: %v after %d", n, err, k)
	}
	st := s.reply()
	if st["kind"] != "stored" || num(s.t, st, "bytes") != n {
		s.t.Fatalf("put of %d bytes (digest %q): %v; want stored", n, digest, st)
	}
	if sum, has := st["sha256"]; digest == "none" && has {
		s.t.Fatalf("put with digest none: stored carries sha256 %v; want none", sum)
	} else if digest != "none" && sum != want {
		s.t.Fatalf("put of %d bytes: stored sha256 %v; want %s", n, sum, want)
	}
}

// get asks for name as a body (with digest unless ""), copies the body
// into sink, and returns the content line and the line after the body.
func (s *wire) get(name, digest string, sink io.Writer, beforeBody func()) (head, last msg) {
	s.t.Helper()
	m := msg{"kind": "get", "path": name, "body": true}
	if digest != "" {
		m["digest"] = digest
	}
	id := s.send(m)
	head = s.reply()
	if head["kind"] != "content" {
		s.t.Fatalf("get %s: %v; want content", name, head)
	}
	if sum, has := head["sha256"]; has {
		s.t.Fatalf("get %s: the content line carries sha256 %v: a digest before the first byte; want it in sent, after the body", name, sum)
	}
	n := num(s.t, head, "body")
	if num(s.t, head, "bytes") != n {
		s.t.Fatalf("content %v: bytes and body differ", head)
	}
	if beforeBody != nil {
		beforeBody()
	}
	s.deadline()
	if k, err := io.CopyN(sink, s.r, n); err != nil {
		s.t.Fatalf("reading a body of %d bytes: %v after %d", n, err, k)
	}
	last = s.reply()
	if got, _ := last["id"].(json.Number); got.String() != fmt.Sprint(id) {
		s.t.Fatalf("the line after the body: %v; want the get's id %d", last, id)
	}
	return head, last
}

// checkSent checks that last is sent with the sha256 want (none for
// digest none).
func checkSent(t testing.TB, last msg, digest, want string) {
	t.Helper()
	if last["kind"] != "sent" {
		t.Fatalf("the line after the body: %v; want sent", last)
	}
	if sum, has := last["sha256"]; digest == "none" && has {
		t.Fatalf("get with digest none: sent carries sha256 %v; want none", sum)
	} else if digest != "none" && sum != want {
		t.Fatalf("sent sha256 %v; want %s, that of the bytes sent", sum, want)
	}
}

// roundTrips puts and gets each size as a body, with sha256 and with no
// digest, checking the bytes both ways (on disk, and back).
func roundTrips(t testing.TB, s *wire, workspace string, sizes []int64) {
	for _, digest := range []string{"", "sha256", "none"} {
		for _, n := range sizes {
			name := fmt.Sprintf("f-%s-%d", digest, n)
			src, want := source(n, uint64(n))
			s.put(name, digest, n, src, want)
			if k, sum := fileSum(t, filepath.Join(workspace, name)); k != n || sum != want {
				t.Fatalf("put %s: on disk %d bytes, sha256 %s; want %d, %s", name, k, sum, n, want)
			}
			h := &countHash{Hash: sha256.New()}
			_, last := s.get(name, digest, h, nil)
			if got := hex.EncodeToString(h.Sum(nil)); h.n != n || got != want {
				t.Fatalf("get %s: %d bytes back, sha256 %s; want %d, %s", name, h.n, got, n, want)
			}
			checkSent(t, last, digest, want)
			s.pingPong("a get's sent")
			_ = os.Remove(filepath.Join(workspace, name))
		}
	}
}

type countHash struct {
	hash.Hash
	n int64
}

func (c *countHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash.Write(p)
}

// The sizes of bodyBufBytes' edges: nothing, one byte, one buffer, one
// buffer and a byte, and many.
var digestSizes = []int64{0, 1, 256 << 10, 256<<10 + 1, 64 << 20}

func TestDigestAfterBody(t *testing.T) {
	d := startRelayd(t, opts{})
	roundTrips(t, tcpWire(t, d), d.workspace, digestSizes)
}

func TestDigestAfterBodyThroughBridge(t *testing.T) {
	d := startRelayd(t, opts{})
	roundTrips(t, bridgeWire(t, d), d.workspace, digestSizes)
}

// 1 GiB, relayd's default --max-file-bytes, both ways: slow, so not
// under -short.
func TestDigestAfterBodyGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB each way, with sha256 and without: not under -short")
	}
	d := startRelayd(t, opts{})
	roundTrips(t, tcpWire(t, d), d.workspace, []int64{1 << 30})
}

// A file appended to, or cut short, while its body is sent ends in a
// failed error in place of sent, after exactly the bytes the content line
// announced; the next request on the connection is answered. The file is
// changed after the content line is read and before the body is: relayd
// is then inside the body (64 MiB, far more than the sockets hold), and
// looks at the file again only once the last byte is taken.
func TestDigestFileChangedWhileSent(t *testing.T) {
	d := startRelayd(t, opts{})
	const n = 64 << 20
	for _, via := range []string{"tcp", "bridge"} {
		for _, digest := range []string{"", "none"} {
			for _, change := range []string{"appended", "cut short"} {
				t.Run(strings.Join([]string{via, "digest=" + digest, strings.ReplaceAll(change, " ", "-")}, "/"), func(t *testing.T) {
					var s *wire
					if via == "tcp" {
						s = tcpWire(t, d)
					} else {
						s = bridgeWire(t, d)
					}
					file := filepath.Join(d.workspace, "changing")
					src, _ := source(n, 5)
					data, _ := io.ReadAll(src)
					if err := os.WriteFile(file, data, 0o644); err != nil {
						t.Fatal(err)
					}
					changed := make(chan error, 1)
					h := &countHash{Hash: sha256.New()}
					_, last := s.get("changing", digest, h, func() {
						go func() {
							if change == "cut short" {
								changed <- os.Truncate(file, n/2)
								return
							}
							f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
							if err == nil {
								_, err = f.Write([]byte("more"))
								f.Close()
							}
							changed <- err
						}()
						if err := <-changed; err != nil {
							t.Fatal(err)
						}
					})
					if h.n != n {
						t.Fatalf("%d bytes of the body; want the %d announced", h.n, n)
					}
					e, _ := last["error"].(map[string]any)
					if last["kind"] != "error" || e["category"] != "failed" || !strings.Contains(fmt.Sprint(e["message"]), "changed") {
						t.Fatalf("a file %s while its body was sent: %v; want an error, failed, saying it changed", change, last)
					}
					s.pingPong("a body whose file changed")
				})
			}
		}
	}
}

// "digest" is "none" or "sha256"; anything else is a bad-request, and a
// put's body is then dropped with the stream kept in step.
func TestDigestFieldChecked(t *testing.T) {
	d := startRelayd(t, opts{})
	s := tcpWire(t, d)
	if err := os.WriteFile(filepath.Join(d.workspace, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []any{"md5", "", "NONE", true, 1} {
		s.send(msg{"kind": "get", "path": "f", "body": true, "digest": bad})
		if r := s.reply(); r["kind"] != "error" || !strings.Contains(fmt.Sprint(r["error"]), `"digest"`) {
			t.Fatalf("get with digest %#v: %v; want a bad-request naming \"digest\"", bad, r)
		}
		s.send(msg{"kind": "put", "path": "g", "body": 3, "digest": bad})
		if _, err := s.w.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
		if r := s.reply(); r["kind"] != "error" || !strings.Contains(fmt.Sprint(r["error"]), `"digest"`) {
			t.Fatalf("put with digest %#v: %v; want a bad-request naming \"digest\"", bad, r)
		}
		s.pingPong("a refused put's body")
	}
	if _, err := os.Stat(filepath.Join(d.workspace, "g")); err == nil {
		t.Fatal("a refused put stored its file")
	}
}
