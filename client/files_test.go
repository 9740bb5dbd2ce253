package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

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
