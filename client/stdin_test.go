package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/relayd/relayd/client"
)

// Input and Stdin (protocol 4.6): bytes that are not UTF-8 arrive intact,
// Input first, then Stdin streamed until its EOF.
func TestStdinInputAndStream(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	head := []byte{0xff, 0, 0xfe}
	body := make([]byte, 8<<20)
	_, _ = rand.Read(body)
	sum := sha256.Sum256(append(append([]byte(nil), head...), body...))
	e, err := c.Execute(context.Background(), client.Request{Command: "sha256sum", Input: head, Stdin: bytes.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]) + "  -\n"; e.Stdout != want {
		t.Fatalf("sha256sum printed %q; want %q", e.Stdout, want)
	}
	e, err = c.Execute(context.Background(), client.Request{Command: "cat", Input: []byte("text")})
	if err != nil || e.Stdout != "text" {
		t.Fatalf("Input text: %q, %v; want text", e.Stdout, err)
	}
}

// User runs the subject as another user (relayd is root here, or the test
// is skipped).
func TestUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs relayd to run as root")
	}
	r := start(t)
	c := dial(t, r)
	e, err := c.Execute(context.Background(), client.Request{Command: "sh", Args: []string{"-c", "echo $(id -u) $HOME"}, User: "nobody", Cwd: "/"})
	if err != nil || e.Stdout != "65534 /nonexistent\n" {
		t.Fatalf("User nobody: %q, %v; want 65534 /nonexistent", e.Stdout, err)
	}
}
