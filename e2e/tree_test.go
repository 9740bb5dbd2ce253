package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Trees (protocol 4.6, "Trees"): a put with "format":"tar" unpacks a tar
// stream into a directory, a get with it packs one, with relayd's own tar.

type member struct {
	h    tar.Header
	data string
}

func tarOf(t testing.TB, ms []member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := m.h
		h.Size = int64(len(m.data))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1_600_000_000, 0)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, m.data); err != nil && h.Typeflag == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// putTree sends a put of archive with "format":"tar" as a raw body (or,
// chunked, as base64 data chunks) and returns the reply.
func putTree(t testing.TB, cl *client, path string, archive []byte, extra msg, chunked bool) msg {
	t.Helper()
	m := msg{"token": cl.token, "kind": "put", "id": 7, "path": path, "format": "tar"}
	for k, v := range extra {
		m[k] = v
	}
	if !chunked {
		m["body"] = len(archive)
		line, _ := json.Marshal(m)
		writeAll(t, cl.c, append(line, '\n'))
		writeAll(t, cl.c, archive)
	} else {
		for i := 0; i < len(archive); i += 1000 {
			end := min(i+1000, len(archive))
			m["data"] = base64.StdEncoding.EncodeToString(archive[i:end])
			if end < len(archive) {
				m["more"] = true
			} else {
				delete(m, "more")
			}
			line, _ := json.Marshal(m)
			writeAll(t, cl.c, append(line, '\n'))
			m = msg{"token": cl.token, "kind": "put"}
		}
	}
	_ = cl.c.SetReadDeadline(time.Now().Add(time.Minute))
	return readReply(t, cl.r)
}

// getTree packs path; with body the raw body, else base64 chunks.
func getTree(t testing.TB, cl *client, path string, extra msg, body bool) (msg, []byte) {
	t.Helper()
	m := msg{"token": cl.token, "kind": "get", "id": 8, "path": path, "format": "tar"}
	for k, v := range extra {
		m[k] = v
	}
	if body {
		m["body"] = true
	}
	line, _ := json.Marshal(m)
	writeAll(t, cl.c, append(line, '\n'))
	_ = cl.c.SetReadDeadline(time.Now().Add(time.Minute))
	var out []byte
	for {
		r := readReply(t, cl.r)
		if r["kind"] != "content" {
			t.Fatalf("get of a tree: %v", r)
		}
		if body {
			out = make([]byte, num(t, r, "body"))
			if _, err := io.ReadFull(cl.r, out); err != nil {
				t.Fatal(err)
			}
			// The sha256 is the line after the bytes (protocol 4.6, "Bulk bodies").
			if sent := readReply(t, cl.r); sent["kind"] != "sent" {
				t.Fatalf("after a tree's body: %v; want sent", sent)
			} else {
				r["sha256"] = sent["sha256"]
			}
			return r, out
		}
		b, _ := base64.StdEncoding.DecodeString(r["data"].(string))
		out = append(out, b...)
		if r["more"] != true {
			return r, out
		}
	}
}

// listing is an archive's members by name: type, mode, mtime, link, data.
func listing(t testing.TB, archive []byte) map[string]string {
	t.Helper()
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[strings.TrimSuffix(h.Name, "/")] = fmt.Sprintf("type %c mode %o mtime %d link %q data %q", h.Typeflag, h.Mode&0o7777, h.ModTime.Unix(), h.Linkname, data)
	}
}

func sample() []member {
	at := func(s int64) time.Time { return time.Unix(1_700_000_000+s, 0) }
	return []member{
		{tar.Header{Name: "dir with space/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: at(1)}, ""},
		{tar.Header{Name: "dir with space/ünïcödé 文件.txt", Typeflag: tar.TypeReg, Mode: 0o640, ModTime: at(2)}, "utf-8\n"},
		{tar.Header{Name: "dir with space/exec.sh", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: at(3)}, "#!/bin/sh\necho hi\n"},
		{tar.Header{Name: "dir with space/up", Typeflag: tar.TypeSymlink, Linkname: "../a.txt", Mode: 0o777, ModTime: at(4)}, ""},
		{tar.Header{Name: "empty/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: at(5)}, ""},
		{tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o600, ModTime: at(6)}, "\x00binary\xff\n"},
		{tar.Header{Name: "sym", Typeflag: tar.TypeSymlink, Linkname: "dir with space/exec.sh", Mode: 0o777, ModTime: at(7)}, ""},
		{tar.Header{Name: "z-hard", Typeflag: tar.TypeLink, Linkname: "a.txt", Mode: 0o600, ModTime: at(6)}, ""},
	}
}

// A tree with modes, times, symbolic and hard links, an empty directory
// and names with spaces and UTF-8 goes in and comes back identical, member
// by member, by raw body and by chunks, through relayd's own tar: its PATH
// has no tar program.
func TestTreeRoundTrip(t *testing.T) {
	d := startRelayd(t, opts{env: []string{"PATH=/nonexistent"}})
	cl := d.connect()
	if r := cl.request(msg{"kind": "ready"}); !strings.Contains(fmt.Sprint(r["extensions"]), "tree") {
		t.Fatalf("ready lists %v; want \"tree\"", r["extensions"])
	}
	archive := tarOf(t, sample())
	want := listing(t, archive)
	for _, chunked := range []bool{false, true} {
		target := fmt.Sprintf("tree-%v", chunked)
		st := putTree(t, cl, target, archive, nil, chunked)
		if st["kind"] != "stored" || num(t, st, "files") != int64(len(want)) || st["refused"] != nil {
			t.Fatalf("put of the tree (chunked %v): %v; want stored with %d files, none refused", chunked, st, len(want))
		}
		if fi, err := os.Lstat(filepath.Join(d.workspace, target, "sym")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("sym on disk: %v, %v; want a symbolic link", fi, err)
		}
		a, _ := os.Stat(filepath.Join(d.workspace, target, "a.txt"))
		z, _ := os.Stat(filepath.Join(d.workspace, target, "z-hard"))
		if !os.SameFile(a, z) {
			t.Fatal("z-hard is not a hard link of a.txt on disk")
		}
		head, back := getTree(t, cl, target, nil, !chunked)
		if head["sha256"] != sha(back) {
			t.Fatalf("the tree's sha256 %v does not match its bytes", head["sha256"])
		}
		got := listing(t, back)
		var diffs []string
		for name, w := range want {
			if got[name] != w {
				diffs = append(diffs, fmt.Sprintf("%s: got %s; want %s", name, got[name], w))
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				diffs = append(diffs, "extra member "+name)
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			t.Fatalf("the tree came back different (chunked %v):\n%s", chunked, strings.Join(diffs, "\n"))
		}
	}
	// exclude leaves out what matches a member's path or last name.
	_, back := getTree(t, cl, "tree-false", msg{"exclude": []string{"*.txt", "empty"}}, true)
	for name := range listing(t, back) {
		if strings.HasSuffix(name, ".txt") || name == "empty" {
			t.Errorf("exclude kept %s", name)
		}
	}
}

// Each kind of hostile member is refused by its name, and nothing is
// written outside the directory.
func TestTreeHostileMembers(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	hostile := []member{
		{tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}, "x"},
		{tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644}, "x"},
		{tar.Header{Name: "a/../../evil2", Typeflag: tar.TypeReg, Mode: 0o644}, "x"},
		{tar.Header{Name: "toetc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, ""},
		{tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../.."}, ""},
		{tar.Header{Name: "ok/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		{tar.Header{Name: "okl", Typeflag: tar.TypeSymlink, Linkname: "ok"}, ""},
		{tar.Header{Name: "okl/through", Typeflag: tar.TypeReg, Mode: 0o644}, "x"},
		{tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, ""},
		{tar.Header{Name: "hard2", Typeflag: tar.TypeLink, Linkname: "../outside"}, ""},
		{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644}, ""},
		{tar.Header{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644, Devmajor: 1, Devminor: 3}, ""},
		{tar.Header{Name: "good", Typeflag: tar.TypeReg, Mode: 0o644}, "fine"},
	}
	if err := os.WriteFile(filepath.Join(d.workspace, "outside"), []byte("o"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := putTree(t, cl, "in/t", tarOf(t, hostile), msg{"parents": true}, false)
	if st["kind"] != "stored" {
		t.Fatalf("put of hostile members: %v; want stored naming the refused", st)
	}
	refused := fmt.Sprint(st["refused"])
	for _, name := range []string{"../evil", "/abs", "a/../../evil2", "toetc", "up", "okl/through", "hard", "hard2", "fifo", "dev"} {
		if !strings.Contains(refused, name+":") {
			t.Errorf("%s is not refused by name (refused: %s)", name, refused)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(d.workspace))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "in,outside" {
		t.Errorf("the workspace holds %v; want only in and outside", names)
	}
	ents, _ = os.ReadDir(filepath.Join(d.workspace, "in"))
	if len(ents) != 1 {
		t.Errorf("in/ holds %d entries; want only t", len(ents))
	}
	ents, _ = os.ReadDir(filepath.Join(d.workspace, "in", "t"))
	names = names[:0]
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "good,ok,okl" {
		t.Errorf("the tree holds %v; want good, ok, okl", names)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.workspace, "in", "t", "ok")); len(ents) != 0 {
		t.Errorf("ok/ holds %v; want nothing (okl/through goes through a link)", ents)
	}
}

// "replace" puts the new tree in place of the old one as a whole: the old
// tree's files are gone, no temporary directory is left, and a broken
// stream leaves the old tree as it was.
func TestTreeReplace(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	old := tarOf(t, []member{{tar.Header{Name: "old.txt", Typeflag: tar.TypeReg, Mode: 0o644}, "old"}})
	if st := putTree(t, cl, "t", old, nil, false); st["kind"] != "stored" {
		t.Fatal(st)
	}
	broken := tarOf(t, []member{{tar.Header{Name: "new.txt", Typeflag: tar.TypeReg, Mode: 0o644}, strings.Repeat("n", 5000)}})
	if st := putTree(t, cl, "t", broken[:700], msg{"replace": true}, false); st["kind"] != "error" {
		t.Fatalf("a broken stream with replace: %v; want an error", st)
	}
	if b, err := os.ReadFile(filepath.Join(d.workspace, "t", "old.txt")); err != nil || string(b) != "old" {
		t.Fatalf("after a broken replace, old.txt: %q, %v; want the old tree as it was", b, err)
	}
	if st := putTree(t, cl, "t", tarOf(t, sample()), msg{"replace": true}, false); st["kind"] != "stored" {
		t.Fatal(st)
	}
	if _, err := os.Stat(filepath.Join(d.workspace, "t", "old.txt")); !os.IsNotExist(err) {
		t.Errorf("old.txt after replace: %v; want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(d.workspace, "t", "a.txt")); err != nil {
		t.Errorf("a.txt after replace: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(d.workspace, "t")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("t after replace: %v, %v; want the old directory's mode, 0755", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(d.workspace)
	if len(ents) != 1 {
		t.Errorf("the workspace holds %d entries after replace; want only t (no temporary left)", len(ents))
	}
}

// Files a tree put makes are its user's; for root with "owners" they are
// the archive's.
func TestTreeOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners and users need relayd to run as root")
	}
	d := startRelayd(t, opts{})
	cl := d.connect()
	shared, err := os.MkdirTemp("", "relayd-tree-") // nobody reaches it: t.TempDir's parents are 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	archive := tarOf(t, []member{
		{tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1234, Gid: 4321}, ""},
		{tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 1234, Gid: 4321}, "x"},
		{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f", Uid: 1234, Gid: 4321}, ""},
	})
	owner := func(p string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	if st := putTree(t, cl, filepath.Join(shared, "as-nobody"), archive, msg{"user": "nobody"}, false); st["kind"] != "stored" || st["refused"] != nil {
		t.Fatalf("put as nobody: %v", st)
	}
	for _, p := range []string{"as-nobody", "as-nobody/d", "as-nobody/d/f", "as-nobody/l"} {
		if uid, _ := owner(filepath.Join(shared, p)); uid != 65534 {
			t.Errorf("%s is uid %d; want nobody's 65534", p, uid)
		}
	}
	if st := putTree(t, cl, "owned", archive, msg{"owners": true}, false); st["kind"] != "stored" || st["refused"] != nil {
		t.Fatalf("put with owners: %v", st)
	}
	for _, p := range []string{"owned/d", "owned/d/f", "owned/l"} {
		if uid, gid := owner(filepath.Join(d.workspace, p)); uid != 1234 || gid != 4321 {
			t.Errorf("%s is %d:%d; want the archive's 1234:4321", p, uid, gid)
		}
	}
	if st := putTree(t, cl, filepath.Join(shared, "x"), archive, msg{"owners": true, "user": "nobody"}, false); st["kind"] != "error" {
		t.Fatalf("owners as nobody: %v; want an error", st)
	}
}

// A get of a tree packs links as links (never what they point at) and
// refuses by name what is neither a file, a directory nor a link; a member
// deeper than relayd goes is refused on a put.
func TestTreeGetSpecials(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := filepath.Join(d.workspace, "t")
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "sub", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	head, back := getTree(t, cl, "t", nil, true)
	if !strings.Contains(fmt.Sprint(head["refused"]), "sub/pipe: a FIFO") {
		t.Errorf("refused %v; want sub/pipe named as a FIFO", head["refused"])
	}
	got := listing(t, back)
	if !strings.Contains(got["etc"], `link "/etc"`) || len(got) != 3 {
		t.Errorf("the tree packed %v; want f, sub and etc as a link to /etc", got)
	}
	deep := strings.Repeat("d/", 300) + "f"
	st := putTree(t, cl, "deep", tarOf(t, []member{{tar.Header{Name: deep, Typeflag: tar.TypeReg, Mode: 0o644}, "x"}}), nil, false)
	if !strings.Contains(fmt.Sprint(st["refused"]), "directories deep") {
		t.Errorf("a member 300 directories deep: %v; want it refused", st)
	}
}

// A tree `git archive` made: its first member is a pax global header
// (pax_global_header, holding the commit id), which is no member: it is
// skipped, as tar and the clients' downloads skip it, neither written
// nor refused.
func TestTreeGitArchive(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) []byte {
		t.Helper()
		c := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return out
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(repo, "main.py"), []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "main.py")
	git("commit", "-q", "-m", "one")
	archive := git("archive", "--format=tar", "HEAD")
	if !bytes.Contains(archive, []byte("pax_global_header")) {
		t.Fatalf("git archive wrote no pax global header; the test needs one")
	}
	d := startRelayd(t, opts{})
	cl := d.connect()
	st := putTree(t, cl, "src", archive, msg{"parents": true}, false)
	if st["kind"] != "stored" || st["refused"] != nil || fmt.Sprint(st["files"]) != "1" {
		t.Fatalf("put of git archive's tar: %v; want stored, one file, nothing refused", st)
	}
	ents, _ := os.ReadDir(filepath.Join(d.workspace, "src"))
	if len(ents) != 1 || ents[0].Name() != "main.py" {
		t.Fatalf("the tree holds %v; want main.py alone", ents)
	}
}
