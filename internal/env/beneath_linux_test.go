package env

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Beneath follows a tree's links as the kernel does below a directory
// (openat2 with RESOLVE_BENEATH): where both can tell, it agrees with the
// kernel; a target whose path meets a missing name or a file is judged
// by its names from there, any ".." after such a name taken as leaving.
func TestBeneath(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(root, "f"), nil, 0o644))
	for name, to := range map[string]string{
		"d/l": "..", "d/l2": "l/..", "d/down": "e", "top": ".", "abs": "/etc", "d/e/up2": "../..",
		"loop1": "loop2", "loop2": "loop1", "viaabs": "abs/x",
	} {
		must(os.Symlink(to, filepath.Join(root, name)))
	}
	d, err := OpenDir(root, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		dir, target string
		leaves      bool
	}{
		{"d", "..", false},
		{"d", "l/..", true},              // d/l is the tree itself: its parent is outside
		{"d", "l2", true},                // through d/l2, which leads out
		{"d", "l/d/l/d/e", false},        // round and round, inside
		{"d", "down/../..", false},       // d/e/../.. is the tree
		{"d", "down/../../..", true},     // and one more is out
		{"", "top/..", true},             // a link to a link's parent
		{"", "d/e/up2/..", true},         // .. after a link to the tree
		{"", "d/e/up2/d", false},         // back in
		{"", "abs", true},                // a link to an absolute target on the way
		{"", "viaabs", true},             // a link to such a link
		{"", "/etc", true},               // absolute
		{"", "loop1", true},              // a loop
		{"", "missing/x/y", false},       // dangling below the tree
		{"", "missing/..", true},         // .. out of a name not there
		{"", "f/..", true},               // .. out of a file
		{"d", "e/missing/../../l", true}, // .. out of a name not there, whatever follows
		{"", "", true},
	} {
		err := d.Beneath(strings.Split(tc.dir, "/"), tc.target)
		if got := errors.Is(err, ErrLeaves); got != tc.leaves || (err != nil && !got) {
			t.Errorf("Beneath(%q, %q) = %v; want leaving %v", tc.dir, tc.target, err, tc.leaves)
		}
		// The kernel's own answer, where it has one: the path resolved
		// from the tree's descriptor with RESOLVE_BENEATH.
		if tc.target == "" {
			continue
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
		p := tc.target // not path.Join: that would clean "l/.." away
		if tc.dir != "" {
			p = tc.dir + "/" + p
		}
		fd, kerr := unix.Openat2(d.fd, p, how)
		if fd >= 0 {
			unix.Close(fd)
		}
		switch {
		case errors.Is(kerr, unix.ENOSYS):
			continue
		case kerr == nil && tc.leaves, errors.Is(kerr, unix.EXDEV) && !tc.leaves:
			t.Errorf("openat2 RESOLVE_BENEATH of %s: %v; Beneath says leaving %v", p, kerr, tc.leaves)
		}
	}
}
