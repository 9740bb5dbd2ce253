package env

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// nobody and nogroup exist on every Debian system (65534); the tests make
// files owned by root or by nobody, so they need root.
const nobody, nogroup = 65534, 65534

func TestFileAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	// A directory every user may search, so that only what a case sets up
	// stands between nobody and its file.
	open := t.TempDir()
	for d := open; d != "/"; d = filepath.Dir(d) {
		if d == os.TempDir() || d == filepath.Dir(os.TempDir()) {
			break
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(t *testing.T, dir string, mode os.FileMode, uid, gid int) string {
		t.Helper()
		p := filepath.Join(dir, "token")
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	subdir := func(t *testing.T, mode os.FileMode, uid int) string {
		t.Helper()
		d, err := os.MkdirTemp(open, "d")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	nobodyInNogroup := &syscall.Credential{Uid: nobody, Gid: nogroup, Groups: []uint32{nogroup}}
	nobodyPrimaryOnly := &syscall.Credential{Uid: nobody, Gid: nogroup}
	nobodySupplementary := &syscall.Credential{Uid: nobody, Gid: 1, Groups: []uint32{2, nogroup}}
	nobodyOutside := &syscall.Credential{Uid: nobody, Gid: 1, Groups: []uint32{2}}

	tests := []struct {
		name        string
		path        func(t *testing.T) string
		cred        *syscall.Credential
		read, write bool
		cautious    bool // FileAccess may say yes where this path alone says no
	}{
		{"0600 root:root", func(t *testing.T) string { return mk(t, open, 0o600, 0, 0) }, nobodyInNogroup, false, false, false},
		{"0640 root:root", func(t *testing.T) string { return mk(t, open, 0o640, 0, 0) }, nobodyInNogroup, false, false, false},
		{"0644 root:root: every user", func(t *testing.T) string { return mk(t, open, 0o644, 0, 0) }, nobodyInNogroup, true, false, false},
		{"0444 root:root: every user", func(t *testing.T) string { return mk(t, open, 0o444, 0, 0) }, nobodyOutside, true, false, false},
		{"0640 root:nogroup, nobody's groups", func(t *testing.T) string { return mk(t, open, 0o640, 0, nogroup) }, nobodyInNogroup, true, false, false},
		{"0640 root:nogroup, nobody's primary gid", func(t *testing.T) string { return mk(t, open, 0o640, 0, nogroup) }, nobodyPrimaryOnly, true, false, false},
		{"0640 root:nogroup, a supplementary group", func(t *testing.T) string { return mk(t, open, 0o640, 0, nogroup) }, nobodySupplementary, true, false, false},
		{"0640 root:nogroup, not a group of the user", func(t *testing.T) string { return mk(t, open, 0o640, 0, nogroup) }, nobodyOutside, false, false, false},
		{"0620 root:nogroup: group may write", func(t *testing.T) string { return mk(t, open, 0o620, 0, nogroup) }, nobodyInNogroup, false, true, false},
		{"0604 root:nogroup: the group class wins over other", func(t *testing.T) string { return mk(t, open, 0o604, 0, nogroup) }, nobodyInNogroup, false, false, false},
		{"0600 nobody:root: the owner", func(t *testing.T) string { return mk(t, open, 0o600, nobody, 0) }, nobodyOutside, true, true, false},
		{"0044 nobody:root: the owner class wins", func(t *testing.T) string { return mk(t, open, 0o044, nobody, 0) }, nobodyOutside, false, false, false},
		{"0644 in a 0700 root directory", func(t *testing.T) string { return mk(t, subdir(t, 0o700, 0), 0o644, 0, 0) }, nobodyInNogroup, false, false, false},
		{"0644 in a 0700 directory nobody owns", func(t *testing.T) string { return mk(t, subdir(t, 0o700, nobody), 0o644, 0, 0) }, nobodyInNogroup, true, false, false},
		{"0644 in a 0711 directory", func(t *testing.T) string { return mk(t, subdir(t, 0o711, 0), 0o644, 0, 0) }, nobodyInNogroup, true, false, false},
		{"0644 behind a symbolic link into a 0700 directory", func(t *testing.T) string {
			p := mk(t, subdir(t, 0o700, 0), 0o644, 0, 0)
			l := filepath.Join(subdir(t, 0o755, 0), "link")
			if err := os.Symlink(p, l); err != nil {
				t.Fatal(err)
			}
			return l
		}, nobodyInNogroup, false, false, false},
		{"0644 in a 0700 directory with a second hard link", func(t *testing.T) string {
			p := mk(t, subdir(t, 0o700, 0), 0o644, 0, 0)
			if err := os.Link(p, filepath.Join(subdir(t, 0o700, 0), "other")); err != nil {
				t.Fatal(err)
			}
			return p
		}, nobodyInNogroup, true, false, true},
		{"0600 root:root, subject root", func(t *testing.T) string { return mk(t, open, 0o600, 0, 0) }, &syscall.Credential{}, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			a, err := FileAccess(p, tt.cred)
			if err != nil {
				t.Fatalf("FileAccess: %v", err)
			}
			if a.Read != tt.read || a.Write != tt.write {
				t.Fatalf("FileAccess = read %v, write %v (%s); want read %v, write %v", a.Read, a.Write, a.Why, tt.read, tt.write)
			}
			if (a.Read || a.Write) != (a.Why != "") {
				t.Fatalf("FileAccess = %+v; want a reason exactly when the user has access", a)
			}
			// The kernel agrees, except where FileAccess is cautious on
			// purpose (another hard link may be reachable).
			if k := kernelReads(t, p, tt.cred); k != a.Read && !tt.cautious {
				t.Fatalf("FileAccess says read %v; the kernel let the user read it: %v", a.Read, k)
			}
		})
	}
	if _, err := FileAccess(filepath.Join(open, "missing"), nobodyInNogroup); err == nil {
		t.Fatal("FileAccess of a missing file: got no error")
	}
}

// kernelReads reports whether a process running with cred can read path.
func kernelReads(t *testing.T, path string, cred *syscall.Credential) bool {
	t.Helper()
	cmd := exec.Command("/bin/cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	if err == nil && string(out) != "secret\n" {
		t.Fatalf("cat %s as uid %d printed %q", path, cred.Uid, out)
	}
	return err == nil
}
