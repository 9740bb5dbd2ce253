package client_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// The client checks relayd's sha256: a get whose chunks do not add up to
// what the last one reports, or a put whose stored reply reports other
// bytes, is ErrBadReply, not a success.
func TestFilesChecksumMismatch(t *testing.T) {
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		_, _ = r.ReadBytes('\n') // the get
		c.Write([]byte(`{"kind":"content","id":2,"data":"aGVs","more":true}` + "\n"))
		c.Write([]byte(`{"kind":"content","id":2,"data":"bG8=","bytes":5,"sha256":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}` + "\n"))
		_, _ = r.ReadBytes('\n') // a second get: same bytes, a wrong digest
		c.Write([]byte(`{"kind":"content","id":3,"data":"aGVsbG8=","bytes":5,"sha256":"00"}` + "\n"))
		for { // a put, to the last chunk
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if !bytes.Contains(line, []byte(`"more":true`)) {
				break
			}
		}
		c.Write([]byte(`{"kind":"stored","id":4,"path":"/x","bytes":5,"sha256":"00"}` + "\n"))
		_, _ = r.ReadBytes('\n')
	})
	c, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got bytes.Buffer
	tr, err := c.GetFile(context.Background(), "x", "", &got)
	if err != nil || got.String() != "hello" || tr.Bytes != 5 {
		t.Fatalf("GetFile: %q, %+v, %v; want hello in two chunks", got.String(), tr, err)
	}
	if _, err := c.GetFile(context.Background(), "x", "", &got); !errors.Is(err, client.ErrBadReply) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("GetFile with a wrong sha256: %v; want ErrBadReply naming sha256", err)
	}
	if _, err := c.PutFile(context.Background(), "x", strings.NewReader("hello"), client.PutOptions{ChunkBytes: 2}); !errors.Is(err, client.ErrBadReply) {
		t.Fatalf("PutFile with a wrong stored sha256: %v; want ErrBadReply", err)
	}
}

// A put whose reply its own wait reads (the watcher not yet running) ends:
// the watcher, starting late, must not take the turn and read a connection
// on which nothing more will come. Each put of one chunk is answered at
// once, so the late start happens now and then; 2,000 puts find it.
func TestPutReplyBeforeWatcher(t *testing.T) {
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		for id := 2; ; id++ {
			if _, err := r.ReadBytes('\n'); err != nil {
				return
			}
			fmt.Fprintf(c, `{"kind":"stored","id":%d,"path":"/x","bytes":1,"sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}`+"\n", id)
		}
	})
	c, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 2000; i++ {
		done := make(chan error, 1)
		go func() {
			_, err := c.PutFile(context.Background(), "x", strings.NewReader("x"), client.PutOptions{})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("put %d: no return 5 s after relayd's reply", i)
		}
	}
}

// Against a relayd that lists "body", PutFile and GetFile move files as raw
// bodies (protocol 4.6, "Bulk bodies"): with --max-line-bytes at 4096,
// base64 chunks of 256 KiB could not pass, bodies of any size do. A reader
// of unknown size, or Chunks, still goes in chunks.
func TestFilesBodies(t *testing.T) {
	r := start(t, "--max-line-bytes", "4096")
	c := dial(t, r)
	ctx := context.Background()
	if !slices.Contains(c.Handshake().Extensions, "body") {
		t.Fatalf("Handshake().Extensions = %q; want \"body\"", c.Handshake().Extensions)
	}
	for _, n := range []int{0, 1, 256 << 10, 256<<10 + 1, 5 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + i>>9)
		}
		name := fmt.Sprintf("f%d", n)
		if _, err := c.PutFile(ctx, name, bytes.NewReader(data), client.PutOptions{}); err != nil {
			t.Fatalf("PutFile of %d bytes: %v", n, err)
		}
		var got bytes.Buffer
		if tr, err := c.GetFile(ctx, name, "", &got); err != nil || !bytes.Equal(got.Bytes(), data) || tr.Bytes != int64(n) {
			t.Fatalf("GetFile of %d bytes: %d bytes back, %+v, %v", n, got.Len(), tr, err)
		}
	}
	src := filepath.Join(t.TempDir(), "src")
	data := bytes.Repeat([]byte("file\n"), 100000)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.PutFile(ctx, "fromfile", f, client.PutOptions{Mode: 0o700}); err != nil {
		t.Fatalf("PutFile of an *os.File: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(r.Workspace, "fromfile")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file put: %d bytes, %v", len(got), err)
	}
	// Chunks of 1 KiB fit the small lines.
	if _, err := c.PutFile(ctx, "chunked", io.MultiReader(bytes.NewReader(data[:5000])), client.PutOptions{ChunkBytes: 1024}); err != nil {
		t.Fatalf("PutFile in chunks: %v", err)
	}
	if _, err := c.PutFile(ctx, "chunked2", bytes.NewReader(data[:5000]), client.PutOptions{ChunkBytes: 1024, Chunks: true}); err != nil {
		t.Fatalf("PutFile with Chunks: %v", err)
	}
}

// A body get whose sent line's sha256 is not that of the bytes received
// is ErrBadReply naming sha256, whatever the writer (a buffer, or a file,
// which a get without a digest would splice into); the body was read
// whole, so the second get on the connection is answered.
func TestFilesSentDigestMismatch(t *testing.T) {
	body := []byte("hello, body")
	other := sha256.Sum256([]byte("hellO, body"))
	addr := serveFake(t, testharness.BodyRelayd{Body: body, Sent: hex.EncodeToString(other[:])})
	c, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got bytes.Buffer
	tr, err := c.GetFile(context.Background(), "x", "", &got)
	if !errors.Is(err, client.ErrBadReply) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("GetFile whose sent sha256 differs from the bytes: %+v, %v; want ErrBadReply naming sha256", tr, err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "got"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.GetFileWith(context.Background(), "x", f, client.GetOptions{Digest: client.DigestSHA256}); !errors.Is(err, client.ErrBadReply) {
		t.Fatalf("GetFileWith into a file, sent sha256 wrong: %v; want ErrBadReply", err)
	}
	// The same bytes with their own sha256 check out.
	right := sha256.Sum256(body)
	addr = serveFake(t, testharness.BodyRelayd{Body: body, Sent: hex.EncodeToString(right[:])})
	c2, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got.Reset()
	if tr, err := c2.GetFile(context.Background(), "x", "", &got); err != nil || got.String() != string(body) || tr.Sha256 != hex.EncodeToString(right[:]) {
		t.Fatalf("GetFile with the right sent sha256: %q, %+v, %v; want the body", got.String(), tr, err)
	}
}

// serveFake serves f until the test ends.
func serveFake(t *testing.T, f testharness.BodyRelayd) string {
	t.Helper()
	addr, stop, err := f.Serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}
