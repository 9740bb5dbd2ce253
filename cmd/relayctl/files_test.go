package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// relayctl put and get through the real relayd (protocol 4.6, "Files").
func TestPutGet(t *testing.T) {
	r := start(t)
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	data := bytes.Repeat([]byte("\x00bin\xffary\n"), 100_000)
	sum := sha256.Sum256(data)
	local := filepath.Join(t.TempDir(), "in.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got := relayctl(t, tok, "put", "--addr", r.Addr, "--mode", "0700", "--parents", local, "a/b/out.bin")
	remote := filepath.Join(r.Workspace, "a/b/out.bin")
	if got.code != 0 || !strings.Contains(got.stdout, remote) || !strings.Contains(got.stdout, hex.EncodeToString(sum[:])) {
		t.Fatalf("put: got %d, stdout %q, stderr %q; want 0 and the stored path and sha256", got.code, got.stdout, got.stderr)
	}
	if b, _ := os.ReadFile(remote); !bytes.Equal(b, data) {
		t.Fatalf("the remote file holds %d bytes; want the %d put", len(b), len(data))
	}
	if fi, _ := os.Stat(remote); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v; want 0700", fi.Mode().Perm())
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	got = relayctl(t, tok, "get", "--addr", r.Addr, "a/b/out.bin", back)
	if b, _ := os.ReadFile(back); got.code != 0 || !bytes.Equal(b, data) {
		t.Fatalf("get: got %d (stderr %q) and %d bytes; want 0 and the %d put", got.code, got.stderr, len(b), len(data))
	}
	got = relayctl(t, tok, "get", "--addr", r.Addr, "a/b/out.bin", "-")
	if got.code != 0 || got.stdout != string(data) {
		t.Fatalf("get to stdout: got %d, %d bytes; want 0 and the file", got.code, len(got.stdout))
	}
	got = relayctl(t, tok, "get", "--addr", r.Addr, "no/such", filepath.Join(t.TempDir(), "x"))
	if got.code != exitFailed || !strings.Contains(got.stderr, "not-found") {
		t.Fatalf("get of nothing: got %d, stderr %q; want %d, not-found", got.code, got.stderr, exitFailed)
	}
	got = relayctl(t, tok, "put", "--addr", r.Addr, "--mode", "9", local, "x")
	if got.code != exitFailed || !strings.Contains(got.stderr, "--mode") {
		t.Fatalf("put --mode 9: got %d, stderr %q; want %d naming --mode", got.code, got.stderr, exitFailed)
	}
}

// put -r and get -r move a directory (client.UploadDir, DownloadDir).
func TestPutGetRecursive(t *testing.T) { putGetRecursive(t, start(t)) }

// A relayd that serves "tree" packs and unpacks the directory itself:
// put -r and get -r work with no tar (nor sh) on its PATH.
func TestPutGetRecursiveWithoutTar(t *testing.T) {
	r, err := testharness.Start(testharness.Options{Bin: relaydBin, Dir: t.TempDir(), Env: append(testharness.CleanEnv(), "PATH=/nonexistent"),
		Args: []string{"--scope", "process-group", "--state-dir", filepath.Join(t.TempDir(), "state")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(15 * time.Second) })
	putGetRecursive(t, r)
}

func putGetRecursive(t *testing.T, r *testharness.Relayd) {
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	local := t.TempDir()
	data := bytes.Repeat([]byte("\x00\xff"), 50_000)
	for name, body := range map[string][]byte{"a.bin": data, "sub/b.txt": []byte("b\n")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(local, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(local, name), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := relayctl(t, tok, "put", "--addr", r.Addr, "-r", local, "tree")
	if got.code != 0 {
		t.Fatalf("put -r: %d, stderr %q; want 0", got.code, got.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Workspace, "tree", "a.bin")); !bytes.Equal(b, data) {
		t.Fatalf("put -r: tree/a.bin holds %d bytes; want %d", len(b), len(data))
	}
	back := filepath.Join(t.TempDir(), "back")
	got = relayctl(t, tok, "get", "--addr", r.Addr, "--recursive", "tree", back)
	if got.code != 0 {
		t.Fatalf("get -r: %d, stderr %q; want 0", got.code, got.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "sub", "b.txt")); string(b) != "b\n" {
		t.Fatalf("get -r: sub/b.txt holds %q; want b", b)
	}
	if fi, err := os.Stat(filepath.Join(back, "a.bin")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("get -r: a.bin: %v; want mode 0755", err)
	}
	got = relayctl(t, tok, "get", "--addr", r.Addr, "-r", "tree", "-")
	if got.code != exitFailed || !strings.Contains(got.stderr, "-r") {
		t.Fatalf("get -r to stdout: %d, stderr %q; want %d naming -r", got.code, got.stderr, exitFailed)
	}
}

// relayctl put and get move a file as one raw body when relayd lists
// "body" (protocol 4.6, "Bulk bodies"): with --max-line-bytes at 4096 no
// base64 chunk of 256 KiB could pass.
func TestPutGetBodies(t *testing.T) {
	r := start(t, "--max-line-bytes", "4096")
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	data := bytes.Repeat([]byte("\x00body\xff\n"), 300_000)
	local := filepath.Join(t.TempDir(), "in.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := relayctl(t, tok, "put", "--addr", r.Addr, local, "big.bin"); got.code != 0 {
		t.Fatalf("put: got %d, stderr %q; want 0", got.code, got.stderr)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	got := relayctl(t, tok, "get", "--addr", r.Addr, "big.bin", back)
	if b, _ := os.ReadFile(back); got.code != 0 || !bytes.Equal(b, data) {
		t.Fatalf("get: got %d (stderr %q) and %d bytes; want 0 and the %d put", got.code, got.stderr, len(b), len(data))
	}
}

// relayctl put of a directory without -r says to use -r, before it
// connects (a usage error: 125, as --mode's), and nothing is stored.
func TestPutDirectoryNamesR(t *testing.T) {
	dir := t.TempDir()
	// No relayd at this address: a usage error is found before connecting.
	got := relayctl(t, []string{"RELAYD_TOKEN=" + strings.Repeat("x", 32)}, "put", "--addr", freeAddr(t), dir, "task")
	if got.code != exitFailed || !strings.Contains(got.stderr, "is a directory") || !strings.Contains(got.stderr, "put -r") {
		t.Fatalf("put DIR: got %d, stderr %q; want %d saying it is a directory and to use put -r", got.code, got.stderr, exitFailed)
	}
}

// --digest none moves a file with no digest on either side (protocol 4.6,
// "Bulk bodies"), and says so; another value is refused before dialing.
func TestPutGetDigestNone(t *testing.T) {
	r := start(t)
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	data := bytes.Repeat([]byte("\x00none\xff\n"), 100_000)
	local := filepath.Join(t.TempDir(), "in.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := relayctl(t, tok, "put", "--addr", r.Addr, "--digest", "none", local, "f.bin"); got.code != 0 || !strings.Contains(got.stdout, "digest none") {
		t.Fatalf("put --digest none: got %d, stdout %q, stderr %q; want 0 saying digest none", got.code, got.stdout, got.stderr)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	got := relayctl(t, tok, "get", "--addr", r.Addr, "--digest", "none", "f.bin", back)
	if b, _ := os.ReadFile(back); got.code != 0 || !bytes.Equal(b, data) || !strings.Contains(got.stdout, "digest none") {
		t.Fatalf("get --digest none: got %d (stdout %q, stderr %q) and %d bytes; want 0 and the %d put", got.code, got.stdout, got.stderr, len(b), len(data))
	}
	if got := relayctl(t, tok, "get", "--addr", r.Addr, "--digest", "md5", "f.bin", back); got.code == 0 || !strings.Contains(got.stderr, "--digest") {
		t.Fatalf("get --digest md5: got %d, stderr %q; want a failure naming --digest", got.code, got.stderr)
	}
}

// relayctl get fails, naming sha256, when relayd's sent line does not
// match the bytes it received, and leaves the local file as it was, with
// no temporary file beside it.
func TestGetSentDigestMismatch(t *testing.T) {
	body := []byte("the bytes relayd sent\n")
	wrong := sha256.Sum256(append([]byte("not "), body...))
	addr := serveFake(t, testharness.BodyRelayd{Body: body, Sent: hex.EncodeToString(wrong[:])})
	tok := []string{"RELAYD_TOKEN=0123456789abcdef0123456789abcdef"}
	dir := t.TempDir()
	local := filepath.Join(dir, "f")
	if err := os.WriteFile(local, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := relayctl(t, tok, "get", "--addr", addr, "f", local)
	if got.code == 0 || !strings.Contains(got.stderr, "sha256") {
		t.Fatalf("get with a wrong sent sha256: got %d, stdout %q, stderr %q; want a failure naming sha256", got.code, got.stdout, got.stderr)
	}
	if b, _ := os.ReadFile(local); string(b) != "old" {
		t.Fatalf("the local file holds %q after a failed get; want it as it was (old)", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the directory holds %v after a failed get; want only the file that was there", ents)
	}
	if got := relayctl(t, tok, "get", "--addr", addr, "f", "-"); got.code == 0 || !strings.Contains(got.stderr, "sha256") {
		t.Fatalf("get to stdout with a wrong sent sha256: got %d, stderr %q; want a failure naming sha256", got.code, got.stderr)
	}
}

// A relayd that closes inside a get's body: relayctl get fails and
// leaves the local file as it was, with nothing beside it.
func TestGetPeerClosesInsideBody(t *testing.T) {
	addr := serveFake(t, testharness.BodyRelayd{Body: bytes.Repeat([]byte("part of a body\n"), 1000), Cut: true})
	tok := []string{"RELAYD_TOKEN=0123456789abcdef0123456789abcdef"}
	dir := t.TempDir()
	local := filepath.Join(dir, "f")
	if err := os.WriteFile(local, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, digest := range []string{"sha256", "none"} {
		got := relayctl(t, tok, "get", "--addr", addr, "--digest", digest, "f", local)
		if got.code == 0 || !strings.Contains(got.stderr, "lost") {
			t.Fatalf("get --digest %s from a relayd that closed inside the body: got %d, stdout %q, stderr %q; want a failure saying the connection was lost", digest, got.code, got.stdout, got.stderr)
		}
		if b, _ := os.ReadFile(local); string(b) != "old" {
			t.Fatalf("the local file holds %d bytes after a cut get; want it as it was (old)", len(b))
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("the directory holds %v after a cut get; want only the file that was there", ents)
		}
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
