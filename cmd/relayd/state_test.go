package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A --state-dir (or RELAYD_STATE_DIR) that relayd cannot safely write is
// refused at startup with one line naming it, what is wrong, and what to
// do: the operator asked for a record that would not be kept. An empty one
// is refused as a flag value.
func TestRunRefusesUnusableStateDir(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "no", "state")
	tests := []struct {
		name, dir, want string
		twin            bool
	}{
		{"writable by others", shared, "can be written by other users", false},
		{"a file", file, "is not a directory", false},
		{"parent missing", missing, "does not exist", false},
		{"twin", shared, "can be written by other users", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"RELAYD_TOKEN": "tok"}
			args := []string{"--listen", "127.0.0.1:0", "--workspace", base}
			if tt.twin {
				vars["RELAYD_STATE_DIR"] = tt.dir
			} else {
				args = append(args, "--state-dir", tt.dir)
			}
			done := make(chan error, 1)
			go func() {
				var stdout, stderr bytes.Buffer
				done <- run(args, envOf(vars), &stdout, &stderr)
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("run(%q) with %v is still running after 10s; want it to refuse to start", args, vars)
			}
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage {
				t.Fatalf("run(%q) = %v; want a usage error (exit %d)", args, err, exitUsage)
			}
			msg := err.Error()
			for _, w := range []string{"--state-dir", tt.dir, tt.want, "mode 0700"} {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q; want it to say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("refusal %q; want one line", msg)
			}
		})
	}
	if _, _, err := parseFlags([]string{"--state-dir="}, noEnv); err == nil || !strings.Contains(err.Error(), "--state-dir must name a directory") {
		t.Errorf("parseFlags(--state-dir=) = %v; want it refused", err)
	}
}
