package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// relayctl mark, changes (a git status --short table, and --json),
// restore and unmark (protocol 4.9).
func TestMarkChangesRestore(t *testing.T) {
	r := start(t)
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	root := t.TempDir()
	keep := filepath.Join(root, "keep")
	os.MkdirAll(keep, 0o755)
	os.WriteFile(filepath.Join(keep, "test.py"), []byte("assert check()\n"), 0o644)
	os.WriteFile(filepath.Join(keep, "gone"), []byte("gone\n"), 0o644)
	got := relayctl(t, tok, "mark", "--addr", r.Addr, "--keep", keep, "start", root)
	if got.code != 0 || !strings.HasPrefix(got.stdout, "marked start: 4 entries") {
		t.Fatalf("mark: %d %q %q", got.code, got.stdout, got.stderr)
	}
	os.WriteFile(filepath.Join(keep, "test.py"), []byte("pass\n"), 0o644)
	os.Chmod(filepath.Join(keep, "test.py"), 0o755)
	os.Remove(filepath.Join(keep, "gone"))
	os.WriteFile(filepath.Join(keep, "new\nline"), nil, 0o644)
	got = relayctl(t, tok, "changes", "--addr", r.Addr, "start")
	want := "A \"" + keep + "/new\\nline\"\n" +
		"M " + keep + "/test.py  (content, mode)\n" +
		"D " + keep + "/gone\n"
	if got.code != 0 || got.stdout != want {
		t.Fatalf("changes: %d\n%s\nwant\n%s(stderr %q)", got.code, got.stdout, want, got.stderr)
	}
	got = relayctl(t, tok, "changes", "--addr", r.Addr, "--json", "start", filepath.Join(keep, "test.py"))
	var ch map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &ch); err != nil || ch["kind"] != "changes" || len(ch["modified"].([]any)) != 1 || len(ch["added"].([]any)) != 0 {
		t.Fatalf("changes --json of test.py: %d %q", got.code, got.stdout)
	}
	got = relayctl(t, tok, "restore", "--addr", r.Addr, "start")
	if got.code != 0 || got.stdout != "restored start: 1 removed, 2 written back, 0 reset\n" {
		t.Fatalf("restore: %d %q %q", got.code, got.stdout, got.stderr)
	}
	if got = relayctl(t, tok, "changes", "--addr", r.Addr, "start"); got.code != 0 || got.stdout != "" {
		t.Fatalf("changes after restore: %d %q", got.code, got.stdout)
	}
	if got = relayctl(t, tok, "unmark", "--addr", r.Addr, "start"); got.code != 0 || got.stdout != "unmarked start\n" {
		t.Fatalf("unmark: %d %q %q", got.code, got.stdout, got.stderr)
	}
	if got = relayctl(t, tok, "changes", "--addr", r.Addr, "start"); got.code != 125 || !strings.Contains(got.stderr, "not-found") {
		t.Fatalf("changes of an unmarked mark: %d %q", got.code, got.stderr)
	}
}
