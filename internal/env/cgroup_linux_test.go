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

// FindCgroup2 without a root: relayd's cgroup in the mount that holds it,
// /sys/fs/cgroup first; the top of a mount when relayd's cgroup is in none
// (a container given a subtree with a bind mount, with the host's cgroup
// namespace or a private one, as Docker shows them).
func TestFindCgroup2Mounts(t *testing.T) {
	const (
		unified = "35 24 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n"
		v1      = "36 24 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
		whole   = "25 20 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
		given   = "91 76 0:38 /relayd-test-1 /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		givenNS = "91 76 0:38 /../../relayd-test-1 /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		spaced  = "91 76 0:38 /a\\040b /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
		prefix  = "91 76 0:38 /docker /mnt/cg rw - cgroup2 cgroup2 rw\n"
	)
	tests := []struct {
		name, mountinfo, self string
		want                  Cgroup2
	}{
		{"hybrid host", v1 + unified, "/user.slice/a", Cgroup2{Mount: "/sys/fs/cgroup/unified", Base: "/sys/fs/cgroup/unified/user.slice/a"}},
		{"unified host", whole + unified, "/a", Cgroup2{Mount: "/sys/fs/cgroup", Base: "/sys/fs/cgroup/a"}},
		{"root cgroup", whole, "/", Cgroup2{Mount: "/sys/fs/cgroup", Base: "/sys/fs/cgroup"}},
		{"mount of relayd's own cgroup", given, "/relayd-test-1", Cgroup2{Mount: "/sys/fs/cgroup/unified", Base: "/sys/fs/cgroup/unified"}},
		{"subtree given, host namespace", v1 + given, "/docker/0123abc", Cgroup2{Mount: "/sys/fs/cgroup/unified", Base: "/sys/fs/cgroup/unified", Outside: true}},
		{"subtree given, private namespace", v1 + givenNS, "/", Cgroup2{Mount: "/sys/fs/cgroup/unified", Base: "/sys/fs/cgroup/unified", Outside: true}},
		{"namespace view of an outside cgroup", whole, "/../x", Cgroup2{Mount: "/sys/fs/cgroup", Base: "/sys/fs/cgroup", Outside: true}},
		{"a name that only begins like the mount's root", prefix, "/dockerd/x", Cgroup2{Mount: "/mnt/cg", Base: "/mnt/cg", Outside: true}},
		{"escapes", spaced, "/a b/c", Cgroup2{Mount: "/mnt/cg two", Base: "/mnt/cg two/c"}},
		{"holder preferred over the standard place", given + whole, "/relayd-test-1/x", Cgroup2{Mount: "/sys/fs/cgroup", Base: "/sys/fs/cgroup/relayd-test-1/x"}},
		{"outside every mount, standard place preferred", given + prefix + "25 20 0:26 /other /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/elsewhere/1", Cgroup2{Mount: "/sys/fs/cgroup", Base: "/sys/fs/cgroup", Outside: true}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		mi, cg := filepath.Join(dir, "mountinfo"), filepath.Join(dir, "cgroup")
		if err := os.WriteFile(mi, []byte(tt.mountinfo), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cg, []byte("4:memory:/x\n0::"+tt.self+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := findCgroup2(mi, cg)
		if err != nil || got != tt.want {
			t.Errorf("%s: findCgroup2 = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findCgroup2(mi, filepath.Join(dir, "cgroup")); !errors.Is(err, ErrNoCgroup2) {
		t.Errorf("no cgroup2 mount: findCgroup2 = %v; want ErrNoCgroup2", err)
	}
}
