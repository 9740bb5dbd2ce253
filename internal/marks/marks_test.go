package marks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func listed(ls []Listed) []string {
	var out []string
	for _, l := range ls {
		s := l.Path
		if len(l.What) > 0 {
			s += " " + fmtWhat(l.What)
		}
		out = append(out, s)
	}
	return out
}

func fmtWhat(w []string) string {
	s := ""
	for i, x := range w {
		if i > 0 {
			s += ","
		}
		s += x
	}
	return s
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A mark, each kind of change, a restore, changes empty after it.
func TestMarkChangesRestore(t *testing.T) {
	root := t.TempDir()
	state := t.TempDir()
	tree := filepath.Join(root, "app")
	write(t, filepath.Join(tree, "a.txt"), "a")
	write(t, filepath.Join(tree, "sub", "b.txt"), "b")
	write(t, filepath.Join(tree, "gone.txt"), "gone")
	write(t, filepath.Join(tree, "mode.txt"), "m")
	if err := os.Symlink("a.txt", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Mark(Request{Name: "start", Paths: []string{root}, Keep: []string{tree}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Entries != 8 {
		t.Errorf("entries = %d; want 8", m.Entries)
	}
	c, err := s.Changes("start", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Count() != 0 {
		t.Fatalf("changes right after the mark: %+v", c)
	}
	write(t, filepath.Join(tree, "a.txt"), "A")
	write(t, filepath.Join(tree, "new.txt"), "new")
	os.Remove(filepath.Join(tree, "gone.txt"))
	os.Chmod(filepath.Join(tree, "mode.txt"), 0o600)
	os.Remove(filepath.Join(tree, "link"))
	os.Symlink("/etc/passwd", filepath.Join(tree, "link"))
	os.RemoveAll(filepath.Join(tree, "sub"))
	os.Symlink("/", filepath.Join(tree, "sub"))
	c, err = s.Changes("start", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{tree + "/new.txt"}
	if got := listed(c.Added); !slices.Equal(got, want) {
		t.Errorf("added %q; want %q", got, want)
	}
	want = []string{tree + "/a.txt content", tree + "/link target", tree + "/mode.txt mode", tree + "/sub type"}
	if got := listed(c.Modified); !slices.Equal(got, want) {
		t.Errorf("modified %q; want %q", got, want)
	}
	want = []string{tree + "/gone.txt", tree + "/sub/b.txt"}
	if got := listed(c.Deleted); !slices.Equal(got, want) {
		t.Errorf("deleted %q; want %q", got, want)
	}
	r, err := s.Restore("start", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored %+v", r)
	c, err = s.Changes("start", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Count() != 0 {
		t.Fatalf("changes after restore: added %q modified %q deleted %q", listed(c.Added), listed(c.Modified), listed(c.Deleted))
	}
	if b, _ := os.ReadFile(filepath.Join(tree, "sub", "b.txt")); string(b) != "b" {
		t.Errorf("sub/b.txt = %q", b)
	}
	// Survives reopening; unmark frees the objects.
	s2, err := Open(Config{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.Names(); !slices.Equal(got, []string{"start"}) {
		t.Errorf("names after reopening %q", got)
	}
	if err := s2.Unmark("start"); err != nil {
		t.Fatal(err)
	}
	objs, _ := os.ReadDir(filepath.Join(state, "marks", "objects"))
	if len(objs) != 0 {
		t.Errorf("%d objects left after unmark", len(objs))
	}
}

// changes narrowed to a path whose parent was swapped for a symbolic link
// lists what the mark had there as deleted, rather than failing (an
// agent must not make the boundary's files unreadable that way).
func TestChangesUnderSwappedParent(t *testing.T) {
	root := t.TempDir()
	victim := t.TempDir()
	write(t, filepath.Join(root, "tests", "sub", "t.py"), "t")
	write(t, filepath.Join(victim, "sub", "t.py"), "t")
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mark(Request{Name: "m", Paths: []string{root}}, nil); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(root, "tests"))
	os.Symlink(victim, filepath.Join(root, "tests"))
	c, err := s.Changes("m", []string{filepath.Join(root, "tests", "sub")}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{root + "/tests/sub", root + "/tests/sub/t.py"}
	if got := listed(c.Deleted); !slices.Equal(got, want) || len(c.Added) != 0 {
		t.Fatalf("deleted %q added %q; want %q", got, listed(c.Added), want)
	}
}

// A restore naming several paths (in walk order or not, some under a
// directory the agent swapped for a file, one the mark does not have)
// puts each back, reading the index once through them, and touches no
// other path.
func TestRestoreSeveralPaths(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "app")
	for _, p := range []string{"a/1.txt", "a/2.txt", "b/x/1.txt", "b/x/2.txt", "c/1.txt", "d/1.txt"} {
		write(t, filepath.Join(tree, p), p)
	}
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mark(Request{Name: "m", Paths: []string{tree}, Keep: []string{tree}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/1.txt", "a/2.txt", "c/1.txt", "d/1.txt"} {
		write(t, filepath.Join(tree, p), "changed")
	}
	os.RemoveAll(filepath.Join(tree, "b"))
	write(t, filepath.Join(tree, "b"), "a file where a directory was")
	write(t, filepath.Join(tree, "c", "new.txt"), "new")
	r, err := s.Restore("m", []string{
		filepath.Join(tree, "d", "1.txt"), filepath.Join(tree, "b", "x", "2.txt"), filepath.Join(tree, "a", "1.txt"),
		filepath.Join(tree, "c", "new.txt"), filepath.Join(tree, "b", "x", "1.txt"),
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.NotRestored) != 0 {
		t.Fatalf("not restored %q: %s", r.NotRestored, r.Reason)
	}
	for p, want := range map[string]string{"a/1.txt": "a/1.txt", "a/2.txt": "changed", "b/x/1.txt": "b/x/1.txt",
		"b/x/2.txt": "b/x/2.txt", "c/1.txt": "changed", "d/1.txt": "d/1.txt"} {
		if b, err := os.ReadFile(filepath.Join(tree, p)); string(b) != want {
			t.Errorf("%s = %q (%v); want %q", p, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(tree, "c", "new.txt")); !os.IsNotExist(err) {
		t.Errorf("c/new.txt is there after its restore (%v)", err)
	}
	c, err := s.Changes("m", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{tree + "/a/2.txt content", tree + "/c/1.txt content"}
	if got := listed(c.Modified); !slices.Equal(got, want) || len(c.Added)+len(c.Deleted) != 0 {
		t.Errorf("changes after the restore: modified %q added %q deleted %q; want modified %q", got, listed(c.Added), listed(c.Deleted), want)
	}
}

// A walk that ends early (relayd's shutdown, or an error) drops the
// listings made ahead of it: it returns, and leaves no descriptor open.
func TestWalkStoppedClosesListings(t *testing.T) {
	tree := t.TempDir()
	for d := range 60 {
		for f := range 3 {
			write(t, filepath.Join(tree, fmt.Sprintf("d%02d", d), fmt.Sprintf("s%d", f), "f"), "x")
		}
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	for n := range 20 {
		stop := make(chan struct{})
		seen := 0
		w := &walker{stop: stop, visit: func(string, int, string, *unix.Stat_t, bool) error {
			if seen++; seen == 5+n*7 {
				close(stop)
			}
			return nil
		}}
		if err := w.root(tree); !errors.Is(err, ErrStopped) {
			t.Fatalf("walk stopped after %d entries: %v; want ErrStopped", 5+n*7, err)
		}
		bad := errors.New("visit failed")
		seen = 0
		w = &walker{visit: func(string, int, string, *unix.Stat_t, bool) error {
			if seen++; seen == 3+n*9 {
				return bad
			}
			return nil
		}}
		if err := w.root(tree); !errors.Is(err, bad) {
			t.Fatalf("walk failing at entry %d: %v; want its error", 3+n*9, err)
		}
	}
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after the walks; %d before", after, before)
	}
}
