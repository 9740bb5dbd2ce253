package client_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayd/relayd/client"
)

// venv makes a tree like a virtual environment's: an absolute link to
// /usr/bin/python3, a link to it, a link to a directory of the tree and
// a relative link that leaves the tree.
func venv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "venv", "bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "venv", "lib", "site"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "venv", "lib", "site", "m.py"), []byte("x = 1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "venv", "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644))
	for name, to := range venvLinks {
		must(t, os.Symlink(to, filepath.Join(dir, name)))
	}
	return dir
}

var venvLinks = map[string]string{
	"venv/bin/python3": "/usr/bin/python3",
	"venv/bin/python":  "python3",
	"venv/lib64":       "lib",
	"venv/out":         "../../outside",
}

func sameLinks(t *testing.T, what, dir string) {
	t.Helper()
	for name, to := range venvLinks {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != to {
			t.Errorf("%s: %s -> %q, %v; want a link to %q", what, name, got, err, to)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "venv", "lib64", "site", "m.py")); err != nil || string(b) != "x = 1\n" {
		t.Errorf("%s: venv/lib64/site/m.py: %q, %v", what, b, err)
	}
}

// With Links LinksKeep a virtual environment goes there and back with
// every link as it was, the absolute one and the one leaving the tree
// included (issue 41); without it, relayd refuses those links on the way
// up and the local side on the way down.
func TestDirLinksKeep(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	ctx := context.Background()
	local := venv(t)
	keep := client.DirOptions{Links: client.LinksKeep}
	if err := c.UploadDir(ctx, local, "up", keep); err != nil {
		t.Fatalf("UploadDir with links kept: %v", err)
	}
	sameLinks(t, "uploaded", filepath.Join(r.Workspace, "up"))
	back := filepath.Join(t.TempDir(), "back")
	if err := c.DownloadDir(ctx, "up", back, keep); err != nil {
		t.Fatalf("DownloadDir with links kept: %v", err)
	}
	sameLinks(t, "downloaded", back)

	err := c.UploadDir(ctx, local, "strict", client.DirOptions{})
	if err == nil || !strings.Contains(err.Error(), "venv/bin/python3") || !strings.Contains(err.Error(), "venv/out") {
		t.Errorf("UploadDir without Links: %v; want venv/bin/python3 and venv/out refused by relayd", err)
	}
	if err := c.DownloadDir(ctx, "up", filepath.Join(t.TempDir(), "strict"), client.DirOptions{}); !errors.Is(err, client.ErrUnsafeArchive) {
		t.Errorf("DownloadDir without Links: %v; want ErrUnsafeArchive", err)
	}
	if err := c.DownloadDir(ctx, "up", t.TempDir(), client.DirOptions{Links: "follow"}); !errors.Is(err, client.ErrBadOption) {
		t.Errorf("Links \"follow\": %v; want ErrBadOption", err)
	}
}

// The local side never writes through a link, with or without Links: not
// through one already in the directory (to outside, or to a directory
// of its own), not through one the archive made before. Nothing lands
// outside.
func TestDownloadDirNeverThroughALink(t *testing.T) {
	r := start(t)
	c := dial(t, r)
	ctx := context.Background()
	local, _ := tree(t)
	if err := c.UploadDir(ctx, local, "up", client.DirOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []client.DirOptions{{Links: client.LinksKeep}, {}} {
		parent := t.TempDir()
		outside := filepath.Join(parent, "outside")
		must(t, os.Mkdir(outside, 0o755))
		back := filepath.Join(parent, "back")
		must(t, os.Mkdir(back, 0o755))
		must(t, os.Symlink(outside, filepath.Join(back, "sub")))
		err := c.DownloadDir(ctx, "up", back, keep)
		if !errors.Is(err, client.ErrUnsafeArchive) {
			t.Errorf("Links %q, sub a link to outside: %v; want ErrUnsafeArchive", keep.Links, err)
		}
		if es, _ := os.ReadDir(outside); len(es) > 0 {
			t.Errorf("Links %q: %d entries were written outside, through the link", keep.Links, len(es))
		}
		must(t, os.Remove(filepath.Join(back, "sub")))
		must(t, os.Mkdir(filepath.Join(back, "real"), 0o755))
		must(t, os.Symlink("real", filepath.Join(back, "sub")))
		if err := c.DownloadDir(ctx, "up", back, keep); !errors.Is(err, client.ErrUnsafeArchive) {
			t.Errorf("Links %q, sub a link inside: %v; want ErrUnsafeArchive", keep.Links, err)
		}
		if es, _ := os.ReadDir(filepath.Join(back, "real")); len(es) > 0 {
			t.Errorf("Links %q: %d entries were written through sub -> real", keep.Links, len(es))
		}
	}
	// An archive of its own making: a link, then members through it.
	for _, through := range []struct{ link, member string }{
		{"l", "l/f"}, {"d/l", "d/l/sub/f"},
	} {
		for _, keep := range []bool{true, false} {
			parent := t.TempDir()
			dir := filepath.Join(parent, "x")
			must(t, os.MkdirAll(filepath.Join(dir, "real"), 0o755))
			target := "../real"
			if !strings.Contains(through.link, "/") {
				target = "real"
			}
			if keep {
				target = parent // outside: kept with keep
			}
			f := archive(t, []tar.Header{
				{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
				{Name: through.link, Typeflag: tar.TypeSymlink, Linkname: target},
				{Name: through.member, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
			})
			err := client.ExtractTar(f, dir, keep)
			if !errors.Is(err, client.ErrUnsafeArchive) || !strings.Contains(err.Error(), through.member) {
				t.Errorf("%s through %s -> %s (keep %v): %v; want ErrUnsafeArchive naming it", through.member, through.link, target, keep, err)
			}
			if es, _ := os.ReadDir(filepath.Join(dir, "real")); len(es) > 0 {
				t.Errorf("%s was written through %s", through.member, through.link)
			}
			if es, _ := os.ReadDir(parent); len(es) != 1 {
				t.Errorf("%s: %d entries beside the directory; want only it", through.member, len(es))
			}
		}
	}
}

// archive writes a tar of hs (regular files hold Size bytes of "x") to a
// temporary file.
func archive(t *testing.T, hs []tar.Header) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "a-*.tar")
	must(t, err)
	t.Cleanup(func() { f.Close() })
	tw := tar.NewWriter(f)
	for _, h := range hs {
		must(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(strings.Repeat("x", int(h.Size))))
			must(t, err)
		}
	}
	must(t, tw.Close())
	return f
}
