package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/relayd/relayd/client"
)

// shellRead is how long one read of the session's screen waits for
// something new before it asks again.
const shellRead = 10 * time.Second

// detachKey reads --detach-key: "ctrl-X" for a letter or one of @[\]^_.
func detachKey(s string) (byte, error) {
	k := strings.ToLower(s)
	if len(k) == 6 && strings.HasPrefix(k, "ctrl-") {
		c := k[5]
		if c >= 'a' && c <= 'z' || strings.IndexByte(`@[\]^_`, c) >= 0 {
			return strings.ToUpper(k[5:])[0] & 0x1f, nil
		}
	}
	return 0, fmt.Errorf("--detach-key %q: want ctrl-X, X a letter or one of @[\\]^_", s)
}

// shell is relayctl shell: the local terminal attached to a pty session
// (protocol 4.7), as docker exec -it attaches one: raw mode, its size
// followed on SIGWINCH, every key typed but the detach key, which leaves
// the session running (relayctl shell --session NAME comes back to it).
// Without --session it opens one. It ends when the shell ends.
func shell(ctx context.Context, c *client.Conn, o options, out printer) (int, error) {
	key, err := detachKey(o.detachKey)
	if err != nil {
		return 0, err
	}
	local := openLocalTerminal()
	if local == nil {
		return 0, errors.New("stdin is not a terminal (relayctl exec runs a command without one)")
	}
	rows, cols := defaultRows, defaultCols
	if r, cl, ok := local.size(); ok {
		rows, cols = r, cl
	}
	var sh *client.Session
	if o.sessionName != "" {
		sh = c.Session(o.sessionName)
		if err := sh.Resize(rows, cols); err != nil {
			return 0, err
		}
	} else {
		sh, err = c.OpenSession(ctx, client.SessionOptions{Pty: &client.Pty{Rows: rows, Cols: cols, Term: o.term}, Cwd: o.cwd, User: o.user})
		if err != nil {
			return 0, err
		}
	}
	// Raw before the banner: a key typed once it shows goes to the
	// session as typed, not echoed and line-edited by the local terminal.
	if err := local.makeRaw(); err != nil {
		return 0, fmt.Errorf("cannot put the terminal in raw mode: %w", err)
	}
	defer local.restore()
	fmt.Fprintf(out.stderr, "relayctl: session %s; %s detaches\r\n", sh.Name, o.detachKey)
	winch := make(chan os.Signal, 1)
	stop := notifyResize(winch)
	defer stop()

	ended := make(chan error, 1)
	go func() { // the screen, as it comes
		var from int64
		// Reattached, the first read is the screen so far, replayed: its
		// terminal queries are dropped (replay.go). Opened here, every
		// byte is live.
		var filter replayFilter
		replaying := o.sessionName != ""
		for {
			wait := shellRead
			if replaying {
				wait = 0
			}
			t, err := sh.Read(ctx, from, wait, 0)
			if errors.Is(err, client.ErrNotFound) && from > 0 {
				ended <- nil // it ended between two reads
				return
			}
			if err != nil {
				ended <- err
				return
			}
			data := []byte(t.Data)
			if replaying {
				data, replaying = filter.replay(data), false
			} else {
				data = filter.live(data)
			}
			if len(data) > 0 {
				os.Stdout.Write(data)
			}
			from = t.Next
			if t.Ended {
				ended <- nil
				return
			}
		}
	}()
	detached := make(chan struct{})
	go func() { // the keys, as they are typed
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			if err != nil {
				return
			}
			keys := buf[:n]
			if i := bytes.IndexByte(keys, key); i >= 0 {
				if i > 0 {
					_ = sh.Write(keys[:i])
				}
				close(detached)
				return
			}
			if sh.Write(keys) != nil {
				return
			}
		}
	}()
	for {
		select {
		case err := <-ended:
			local.restore()
			if err != nil {
				return 0, err
			}
			fmt.Fprintf(out.stderr, "relayctl: session %s ended\n", sh.Name)
			return 0, nil
		case <-detached:
			local.restore()
			fmt.Fprintf(out.stderr, "\nrelayctl: detached; session %s runs on (relayctl shell --session %s)\n", sh.Name, sh.Name)
			return 0, nil
		case <-winch:
			if r, cl, ok := local.size(); ok && (r != rows || cl != cols) {
				rows, cols = r, cl
				_ = sh.Resize(rows, cols)
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
