package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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

// The extension hooks (protocol 4.5) are wired before any relayd supports
// them: a peer that sends started and output before executed reaches the
// request's callbacks, in order, and the request asks for them.
func TestExtensionHooks(t *testing.T) {
	sent := make(chan string, 1)
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		line, _ := r.ReadBytes('\n')
		sent <- string(line)
		c.Write([]byte(`{"kind":"started","id":2,"execution":"x-9"}` + "\n" +
			`{"kind":"output","id":2,"execution":"x-9","stream":"stdout","data":"step 1\n"}` + "\n" +
			`{"kind":"output","id":2,"execution":"x-9","stream":"stderr","data":"warn\n","dropped":3}` + "\n" +
			`{"kind":"executed","id":2,"termination":"exited","exitCode":0,"stdout":"step 1\n","stderr":"warn\n","stderrTruncated":false,` +
			`"diagnostic":{"category":"none"},"execution":"x-9","settlement":"settled","survivors":[],"scope":{"mechanism":"cgroup"},"durationMs":5}` + "\n"))
	})
	c, err := client.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	e, err := c.Execute(context.Background(), client.Request{Command: "agent", CaptureStderr: true,
		OnExit: client.OnExitSettle, Detach: 1500 * time.Millisecond,
		Started: func(x string) { got = append(got, "started "+x) },
		Output: func(o client.Output) {
			got = append(got, fmt.Sprintf("%s %q dropped %d", o.Stream, o.Data, o.Dropped))
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"started x-9", `stdout "step 1\n" dropped 0`, `stderr "warn\n" dropped 3`}
	if fmt.Sprint(got) != fmt.Sprint(want) || e.Stderr != "warn\n" || e.Settlement != client.Settled {
		t.Fatalf("callbacks %q, stderr %q, settlement %s; want %q, warn, settled", got, e.Stderr, e.Settlement, want)
	}
	req := <-sent
	for _, field := range []string{`"captureStderr":true`, `"stream":true`, `"onExit":"settle"`, `"detachMs":1500`} {
		if !strings.Contains(req, field) {
			t.Errorf("the execute %s lacks %s", req, field)
		}
	}
}

// Dialer.MaxWait bounds an execute that has no Timeout of its own.
func TestMaxWait(t *testing.T) {
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		_, _ = r.ReadBytes('\n') // the execute, never answered
		_, _ = r.ReadBytes('\n')
	})
	d := &client.Dialer{MaxWait: 300 * time.Millisecond}
	c, err := d.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	if _, err := c.Execute(context.Background(), client.Request{Command: "sleep"}); !errors.Is(err, client.ErrReplyOverdue) {
		t.Fatalf("Execute: %v; want ErrReplyOverdue", err)
	}
	if waited := time.Since(begin); waited < 300*time.Millisecond || waited > 10*time.Second {
		t.Fatalf("gave up after %s; want MaxWait, 300ms", waited)
	}
}

// Unmark waits as long as its context (and MaxWait) allow, as Mark does,
// not ReplyTimeout: freeing a large mark's kept copies, or waiting for a
// restore of it to end, takes longer than a reply relayd writes at once.
func TestUnmarkOutlivesReplyTimeout(t *testing.T) {
	addr := fakeRelayd(t, func(c net.Conn, r *bufio.Reader) {
		line, err := r.ReadBytes('\n')
		if err != nil || !strings.Contains(string(line), `"unmark"`) {
			return
		}
		time.Sleep(600 * time.Millisecond)
		fmt.Fprintf(c, `{"kind":"unmarked","id":2}`+"\n")
		_, _ = r.ReadBytes('\n')
	})
	d := &client.Dialer{ReplyTimeout: 200 * time.Millisecond}
	c, err := d.Dial(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Unmark(context.Background(), "base"); err != nil {
		t.Fatalf("Unmark answered after 600ms with a 200ms ReplyTimeout: %v; want nil", err)
	}
}
