package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
)

// TestSessionGoClient: the Go client's sessions (protocol 4.7): state
// kept, the command's own status, stdout and stderr apart, input, a
// deadline, a second connection, close.
func TestSessionGoClient(t *testing.T) {
	d := startRelayd(t, opts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := d.goClient()
	sh, err := c.OpenSession(ctx, relayd.SessionOptions{Environment: map[string]string{"FROM_OPEN": "yes"}})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	if r, err := sh.Run(ctx, "cd /tmp && export X=1", relayd.RunOptions{}); err != nil || r.ExitCode != 0 || r.Cwd != "/tmp" {
		t.Fatalf("Run cd: %+v, %v", r, err)
	}
	r, err := sh.Run(ctx, "echo $X$FROM_OPEN; echo e >&2; cat; exit_with() { return $1; }; exit_with 9", relayd.RunOptions{Input: []byte("in\n")})
	if err != nil || r.ExitCode != 9 || r.Stdout != "1yes\nin\n" || r.Stderr != "e\n" || r.Session != sh.Name {
		t.Fatalf("Run: %+v, %v", r, err)
	}
	r, err = sh.Run(ctx, "sleep 100", relayd.RunOptions{Timeout: 200 * time.Millisecond})
	if err != nil || r.Termination != relayd.FrameworkTimeout || r.ExitCode != 124 || r.Settlement != relayd.Settled {
		t.Fatalf("Run past its deadline: %+v, %v", r, err)
	}
	other := d.goClient().Session(sh.Name)
	if r, err := other.Run(ctx, "pwd", relayd.RunOptions{}); err != nil || r.Stdout != "/tmp\n" {
		t.Fatalf("Run from a second connection: %+v, %v", r, err)
	}
	cl, err := sh.Close(ctx)
	if err != nil || cl.Settlement != relayd.Settled {
		t.Fatalf("Close: %+v, %v", cl, err)
	}
	if _, err := other.Run(ctx, "true", relayd.RunOptions{}); !errors.Is(err, relayd.ErrNotFound) {
		t.Fatalf("Run in a closed session: %v; want ErrNotFound", err)
	}
}

// TestSessionGoClientStreamStdin: RunOptions.Output gets a session
// command's live output, every chunk before Run returns, and
// RunOptions.Stdin feeds it, bytes of every value and NULs included.
func TestSessionGoClientStreamStdin(t *testing.T) {
	d := startRelayd(t, opts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := d.goClient()
	sh, err := c.OpenSession(ctx, relayd.SessionOptions{Shell: "sh"})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 13)
	}
	sum := sha256.Sum256(data)
	var streamed strings.Builder
	var started string
	var returned atomic.Bool
	r, err := sh.Run(ctx, "sha256sum; echo e >&2", relayd.RunOptions{
		Stdin:   bytes.NewReader(data),
		Started: func(x string) { started = x },
		Output: func(o relayd.Output) {
			if returned.Load() {
				t.Errorf("output after Run returned: %+v", o)
			}
			if o.Stream == "stdout" {
				streamed.WriteString(o.Data)
			}
		},
	})
	returned.Store(true)
	want := hex.EncodeToString(sum[:]) + "  -\n"
	if err != nil || r.ExitCode != 0 || r.Stdout != want || streamed.String() != want || r.Stderr != "e\n" || started != r.Execution {
		t.Fatalf("Run: %+v, %v; streamed %q, started %q", r, err, streamed.String(), started)
	}
}
