package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
)

// fakeRelayd answers the ready handshake on a loopback socket and then does
// what then says with the connection: what a relayd that hangs or vanishes
// looks like from the controller's side.
func fakeRelayd(t *testing.T, then func(c net.Conn, r *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if _, err := r.ReadBytes('\n'); err != nil {
			return
		}
		c.Write([]byte(`{"kind":"ready","id":1,"protocol":1,"cwd":"/","scope":"process-group"}` + "\n"))
		then(c, r)
	}()
	return ln.Addr().String()
}

// Execute with a Timeout gives up Timeout plus the teardown budget later,
// and closes the connection.
func TestReplyOverdue(t *testing.T) {
	defer client.SetSettleSlack(100 * time.Millisecond)()
	closed := make(chan struct{})
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		_, _ = r.ReadBytes('\n') // the execute, never answered
		if _, err := r.ReadBytes('\n'); err != nil {
			close(closed) // the client closed the connection
		}
	})
	d := &client.Dialer{TeardownTimeout: 200 * time.Millisecond}
	c, err := d.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	_, err = c.Execute(context.Background(), client.Request{Command: "sleep", Timeout: 100 * time.Millisecond})
	if !errors.Is(err, client.ErrReplyOverdue) {
		t.Fatalf("Execute: %v; want ErrReplyOverdue", err)
	}
	if waited := time.Since(begin); waited < 400*time.Millisecond {
		t.Fatalf("gave up after %s; want at least Timeout+TeardownTimeout+slack (400ms)", waited)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed after the overdue reply")
	}
}

// A relayd that vanishes in the middle of a reply: ErrConnLost, not a
// half-read reply.
func TestConnLostMidReply(t *testing.T) {
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		_, _ = r.ReadBytes('\n')
		c.Write([]byte(`{"kind":"executed","id":2,"termination":"exi`))
	})
	c, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Execute(context.Background(), client.Request{Command: "true"})
	if !errors.Is(err, client.ErrConnLost) {
		t.Fatalf("Execute: %v; want ErrConnLost", err)
	}
}
