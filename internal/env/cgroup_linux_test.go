package env

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FindCgroup2 takes a given root as it is when it looks like a cgroup v2
// directory, and otherwise says which path is wrong and why, in words a
// person reads after the flag's name.
func TestFindCgroup2Root(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake")
	if err := os.Mkdir(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		root string
		want string // the error; "" for none
	}{
		{fake, ""},
		{dir, dir + " is not a cgroup v2 directory (it has no cgroup.procs)"},
		{filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + " is not a cgroup v2 directory (it has no cgroup.procs)"},
	}
	for _, tt := range tests {
		cg, err := FindCgroup2(tt.root)
		if tt.want == "" {
			if err != nil || cg.Base != tt.root || cg.Mount != tt.root {
				t.Errorf("FindCgroup2(%s) = %+v, %v; want %s as the base, as given", tt.root, cg, err, tt.root)
			}
			continue
		}
		if !errors.Is(err, ErrNoCgroup2) {
			t.Errorf("FindCgroup2(%s) = %v; want ErrNoCgroup2", tt.root, err)
			continue
		}
		if err.Error() != tt.want || strings.Contains(err.Error(), "env:") {
			t.Errorf("FindCgroup2(%s) = %q; want %q", tt.root, err, tt.want)
		}
	}
}
