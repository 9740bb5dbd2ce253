package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
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
