package client_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// DialCommand speaks the protocol through a command's stdin and stdout:
// here relayd bridge itself, as docker exec -i C relayd bridge would run it
// in a container. Close ends the command, and relayd settles what ran.
func TestDialCommand(t *testing.T) {
	r := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := []string{relaydBin, "bridge", "--socket", r.Socket}
	c, err := client.DialCommand(ctx, argv, r.Token)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Handshake().Extensions, "bridge") {
		t.Fatalf("handshake through the bridge: %+v; want bridge listed", c.Handshake())
	}
	x, err := c.Execute(ctx, client.Request{Command: "/bin/sh", Args: []string{"-c", "echo over a command; exit 5"}})
	if err != nil || x.ExitCode != 5 || x.Stdout != "over a command\n" {
		t.Fatalf("Execute over the bridge: %+v, %v", x, err)
	}

	pidfile := filepath.Join(t.TempDir(), "pid")
	done := make(chan error, 1)
	go func() {
		_, err := c.Execute(ctx, client.Request{Command: "/bin/sh", Args: []string{"-c", "echo $$ > " + pidfile + "; exec sleep 60"}})
		done <- err
	}()
	var pid int
	waitFor(t, "the subject to start", func() bool {
		b, _ := os.ReadFile(pidfile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	began := time.Now()
	c.Close()
	if took := time.Since(began); took > 4*time.Second {
		t.Fatalf("Close took %s; want the bridge to end with its stdin", took)
	}
	<-done
	waitFor(t, "relayd to settle the subject after the command's stdin ended", func() bool { return !testharness.Alive(pid) })
	if testharness.Alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL) // our own subject
	}

	if _, err := client.DialCommand(ctx, []string{relaydBin, "bridge", "--socket", filepath.Join(t.TempDir(), "none")}, r.Token); err == nil {
		t.Fatal("DialCommand through a bridge that reaches no relayd succeeded")
	}
}
