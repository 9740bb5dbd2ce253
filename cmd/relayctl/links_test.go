package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// put -r and get -r with --links keep move a virtual environment's links
// as they are (protocol 4.6, "Trees"): a link to /usr/bin/python3 and one
// leaving the tree. Without it relayd refuses them; a value other than
// keep, or --links without -r, is a usage error.
func TestPutGetRecursiveLinksKeep(t *testing.T) {
	r := start(t)
	tok := []string{"RELAYD_TOKEN=" + r.Token}
	local := t.TempDir()
	if err := os.MkdirAll(filepath.Join(local, "venv", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"venv/bin/python3": "/usr/bin/python3", "venv/out": "../../outside"}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(local, name)); err != nil {
			t.Fatal(err)
		}
	}
	if got := relayctl(t, tok, "put", "--addr", r.Addr, "-r", local, "strict"); got.code == 0 || !strings.Contains(got.stderr, "venv/bin/python3") {
		t.Errorf("put -r without --links: %d, stderr %q; want the link refused", got.code, got.stderr)
	}
	if got := relayctl(t, tok, "put", "--addr", r.Addr, "-r", "--links", "keep", local, "venv"); got.code != 0 {
		t.Fatalf("put -r --links keep: %d, stderr %q; want 0", got.code, got.stderr)
	}
	back := filepath.Join(t.TempDir(), "back")
	if got := relayctl(t, tok, "get", "--addr", r.Addr, "-r", "--links", "keep", "venv", back); got.code != 0 {
		t.Fatalf("get -r --links keep: %d, stderr %q; want 0", got.code, got.stderr)
	}
	for name, to := range links {
		for _, where := range []string{filepath.Join(r.Workspace, "venv"), back} {
			if got, err := os.Readlink(filepath.Join(where, name)); err != nil || got != to {
				t.Errorf("%s/%s -> %q, %v; want a link to %q", where, name, got, err, to)
			}
		}
	}
	for _, args := range [][]string{{"put", "-r", "--links", "follow", local, "x"}, {"get", "--links", "keep", "venv", "y"}} {
		if got := relayctl(t, tok, append([]string{args[0], "--addr", r.Addr}, args[1:]...)...); got.code != exitFailed || !strings.Contains(got.stderr, "--links") {
			t.Errorf("relayctl %v: %d, stderr %q; want %d naming --links", args, got.code, got.stderr, exitFailed)
		}
	}
}
