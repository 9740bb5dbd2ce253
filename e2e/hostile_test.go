package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A connection that never authenticates, silent or stalled mid-line, is
// closed after --auth-timeout without touching anyone else; an
// authenticated connection may stay idle past it.
func TestAuthTimeout(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--auth-timeout", "500ms"}})
	authed := d.connect()
	silent := d.dial()
	half := d.dial()
	half.sendRaw([]byte(`{"token":"` + d.token[:4]))
	garbage := d.dial()
	garbage.sendRaw([]byte("not json\n"))
	if category(t, garbage.read(5*time.Second)) != "bad-json" {
		t.Fatal("garbage before authentication should still get bad-json")
	}
	began := time.Now()
	for name, c := range map[string]*client{"silent": silent, "half a line": half, "garbage": garbage} {
		if !c.closedByPeer(5 * time.Second) {
			t.Fatalf("%s connection still open after --auth-timeout", name)
		}
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("unauthenticated connections closed after %s; want about the 500ms --auth-timeout", took)
	}
	time.Sleep(700 * time.Millisecond)
	if r := authed.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("an authenticated idle connection was affected: %v", r)
	}
	d.stopClean()
}

// Connections over --max-connections get a clear busy error and are closed;
// the ones already open are served, and a slot frees when one closes.
func TestMaxConnections(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-connections", "2"}})
	a := d.connect()
	b := d.connect()
	extra := d.dial()
	r := extra.read(5 * time.Second)
	if category(t, r) != "busy" || !strings.Contains(r["error"].(map[string]any)["message"].(string), "--max-connections") {
		t.Fatalf("third connection: %v; want busy naming --max-connections", r)
	}
	if !extra.closedByPeer(3 * time.Second) {
		t.Fatal("the refused connection stayed open")
	}
	if r := b.sh("echo ok", nil); r["stdout"] != "ok\n" {
		t.Fatalf("an admitted connection: %v", r)
	}
	a.c.Close()
	waitFor(t, 5*time.Second, "a free slot", func() bool {
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprintf(c, `{"token":%q,"kind":"ready"}`+"\n", d.token)
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := c.Read(buf)
		return strings.Contains(string(buf[:n]), `"kind":"ready"`)
	})
	d.stopClean()
}

// A token file that every user can read is refused at startup.
func TestTokenFileReadableByOthersRefused(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(relaydBin, "--token-file", tok, "--listen", "127.0.0.1:0")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v; want 2", err)
	}
	if !strings.Contains(string(out), "chmod 600") || strings.Contains(string(out), "secret-token") {
		t.Fatalf("message %q; want the fix, and never the token", out)
	}
}
