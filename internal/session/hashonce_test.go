package session

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	relayclient "github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/env"
)

// countedSum is a sha256 that adds what it hashes to a shared count.
type countedSum struct {
	hash.Hash
	n *atomic.Int64
}

func (c countedSum) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.Hash.Write(p)
}

// The contract's sha256 of a raw body costs relayd one pass over the
// bytes each way (issue 30): a put hashes what it writes, a get hashes
// the file once before its line and sends it without hashing it again.
func TestBodyHashedOnce(t *testing.T) {
	var hashed atomic.Int64
	was := newSum
	newSum = func() hash.Hash { return countedSum{sha256.New(), &hashed} }
	defer func() { newSum = was }()

	const n = 3<<20 + 12345 // more than one buffer, and a piece of one
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{30}).Read(data)
	ws := t.TempDir()
	c := filesClient(t, ws, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := c.PutFile(ctx, "f.bin", bytes.NewReader(data), relayclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := hashed.Swap(0); got != n {
		t.Errorf("a put of %d bytes as a body: relayd hashed %d bytes; want each once", n, got)
	}
	var out bytes.Buffer
	if _, err := c.GetFile(ctx, "f.bin", "", &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("got %d bytes, not those put", out.Len())
	}
	if got := hashed.Swap(0); got != n {
		t.Errorf("a get of %d bytes as a body: relayd hashed %d bytes; want each once", n, got)
	}
	if _, err := os.Stat(filepath.Join(ws, "f.bin")); err != nil {
		t.Fatal(err)
	}
}

// A put's file is written back as it comes, 8 MiB at a time, so that the
// fsync before the rename waits for the last piece only: each piece is
// asked for once, in order, from the start.
func TestPutStartsWriteback(t *testing.T) {
	type piece struct{ off, n int64 }
	var mu sync.Mutex
	var asked []piece
	was := startWriteback
	startWriteback = func(fd int, off, n int64) {
		mu.Lock()
		asked = append(asked, piece{off, n})
		mu.Unlock()
		was(fd, off, n)
	}
	defer func() { startWriteback = was }()

	const n = 3*writebackBytes + 12345
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{31}).Read(data)
	c := filesClient(t, t.TempDir(), n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.PutFile(ctx, "f.bin", bytes.NewReader(data), relayclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var next int64
	for _, p := range asked {
		if p.off != next || p.n < writebackBytes {
			t.Fatalf("writeback asked for %+v; want pieces of at least %d bytes from %d on (all: %+v)", p, writebackBytes, next, asked)
		}
		next += p.n
	}
	if next < n-writebackBytes {
		t.Errorf("writeback asked for the first %d bytes of %d; want all but the last piece (%+v)", next, n, asked)
	}
}

// filesClient is a client connected to a loopbackServer; both end with the
// test.
func filesClient(tb testing.TB, ws string, maxFile int64) *relayclient.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := relayclient.Dial(ctx, loopbackServer(tb, ws, maxFile), testToken)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// loopbackServer serves a Server with workspace ws (files up to maxFile
// bytes) on loopback until the test ends, and returns its address.
func loopbackServer(tb testing.TB, ws string, maxFile int64) string {
	tb.Helper()
	srv := New(Config{
		Token: []byte(testToken), Workspace: ws, Version: "test",
		TermGrace: time.Second, TeardownTimeout: 3 * time.Second, WriteTimeout: 5 * time.Second,
		MaxLineBytes: 1 << 20, MaxStdoutBytes: 1 << 20, MaxFileBytes: maxFile, BaseEnv: env.Base(os.Environ()),
		Shims: testShims, Log: zerolog.Nop(),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(srv.Shutdown)
	return ln.Addr().String()
}

// With "digest":"none" relayd hashes nothing, either way, and the client
// gets the bytes with no sha256 (protocol 4.6, "Bulk bodies").
func TestBodyDigestNoneHashesNothing(t *testing.T) {
	var hashed atomic.Int64
	was := newSum
	newSum = func() hash.Hash { return countedSum{sha256.New(), &hashed} }
	defer func() { newSum = was }()

	const n = 3<<20 + 12345
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{46}).Read(data)
	ws := t.TempDir()
	c := filesClient(t, ws, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.PutFile(ctx, "f.bin", bytes.NewReader(data), relayclient.PutOptions{Digest: relayclient.DigestNone})
	if err != nil {
		t.Fatal(err)
	}
	if got := hashed.Swap(0); got != 0 || st.Sha256 != "" || st.Bytes != n {
		t.Errorf("a put with digest none: relayd hashed %d bytes and stored %+v; want none hashed, no sha256", got, st)
	}
	if onDisk, err := os.ReadFile(filepath.Join(ws, "f.bin")); err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("on disk: %d bytes (%v); want the %d put", len(onDisk), err, n)
	}
	var out bytes.Buffer
	got, err := c.GetFileWith(ctx, "f.bin", &out, relayclient.GetOptions{Digest: relayclient.DigestNone})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) || got.Sha256 != "" || got.Bytes != n {
		t.Fatalf("get with digest none: %d bytes, %+v; want the %d put, no sha256", out.Len(), got, n)
	}
	if h := hashed.Swap(0); h != 0 {
		t.Errorf("a get with digest none: relayd hashed %d bytes; want none", h)
	}
	if _, err := c.GetFileWith(ctx, "f.bin", &out, relayclient.GetOptions{Digest: "md5"}); err == nil {
		t.Error("GetFileWith took digest md5")
	}
}

// appender appends to a file at its first write: a GetFile into it
// changes the file while relayd is inside its body (larger than the
// sockets hold).
type appender struct {
	path string
	n    int64
}

func (a *appender) Write(p []byte) (int, error) {
	if a.n == 0 {
		f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return 0, err
		}
		_, err = f.Write([]byte("more"))
		f.Close()
		if err != nil {
			return 0, err
		}
	}
	a.n += int64(len(p))
	return len(p), nil
}

// The Go client reads the line after a body: a file that changed while it
// was sent is ErrFailed, after the whole body, and the connection serves
// on; with sha256 and with none.
func TestGetFileChangedWhileSent(t *testing.T) {
	const n = 64 << 20
	ws := t.TempDir()
	c := filesClient(t, ws, 2*n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := filepath.Join(ws, "f.bin")
	for _, digest := range []string{"", relayclient.DigestNone} {
		if err := os.WriteFile(file, bytes.Repeat([]byte("a"), n), 0o644); err != nil {
			t.Fatal(err)
		}
		a := &appender{path: file}
		_, err := c.GetFileWith(ctx, "f.bin", a, relayclient.GetOptions{Digest: digest})
		if !errors.Is(err, relayclient.ErrFailed) || a.n != n {
			t.Fatalf("digest %q: a file appended to while it was sent: %v after %d bytes; want ErrFailed after %d", digest, err, a.n, n)
		}
		if _, err := c.Ready(ctx); err != nil {
			t.Fatalf("digest %q: the next request after ErrFailed: %v", digest, err)
		}
	}
}

// Through a Unix socket (the bridge's), a get with "digest":"none" goes
// by sendfile(2) as on TCP, not through relayd's buffer: every byte of
// the body is one sendfile sent, the sizes at the buffer's edges too.
func TestBodyDigestNoneUnixSendfile(t *testing.T) {
	var sentBytes atomic.Int64
	was := sendfile
	sendfile = func(out, in int, off *int64, count int) (int, error) {
		k, err := was(out, in, off, count)
		if k > 0 {
			sentBytes.Add(int64(k))
		}
		return k, err
	}
	defer func() { sendfile = was }()

	ws := t.TempDir()
	srv := New(Config{
		Token: []byte(testToken), Workspace: ws, Version: "test",
		TermGrace: time.Second, TeardownTimeout: 3 * time.Second, WriteTimeout: 5 * time.Second,
		MaxLineBytes: 1 << 20, MaxStdoutBytes: 1 << 20, MaxFileBytes: 64 << 20, BaseEnv: env.Base(os.Environ()),
		Shims: testShims, Log: zerolog.Nop(),
	})
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "relayd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Shutdown)
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(c)
	for i, n := range []int{0, 1, bodyBufBytes, bodyBufBytes + 1, 3<<20 + 12345} {
		data := make([]byte, n)
		rand.NewChaCha8([32]byte{byte(i), 46}).Read(data)
		name := fmt.Sprintf("f%d", n)
		if err := os.WriteFile(filepath.Join(ws, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, `{"token":%q,"kind":"get","id":%d,"path":%q,"body":true,"digest":"none"}`+"\n", testToken, i+1, name)
		var head struct {
			Kind string
			Body *int64
		}
		line, err := r.ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &head) != nil || head.Kind != "content" || head.Body == nil || *head.Body != int64(n) {
			t.Fatalf("get of %d bytes through a Unix socket: %q, %v; want content with body %d", n, line, err, n)
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the body of %d bytes through a Unix socket differs (%v)", n, err)
		}
		if line, err := r.ReadBytes('\n'); err != nil || !bytes.Contains(line, []byte(`"kind":"sent"`)) || bytes.Contains(line, []byte("sha256")) {
			t.Fatalf("after a body of %d bytes: %q, %v; want sent without a sha256", n, line, err)
		}
		if k := sentBytes.Swap(0); k != int64(n) {
			t.Errorf("a get of %d bytes without a digest through a Unix socket: sendfile sent %d; want all of them", n, k)
		}
	}
}
