package e2e

import (
	"archive/tar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Trees and symbolic links (protocol 4.6, "Trees"): every link a tree put
// writes is judged against what the tree holds on disk as the put
// proceeds, so a chain of the tree's own links cannot lead out, and
// nothing is ever written through a link, whoever made it.

// sharedDir is a directory every user reaches (t.TempDir's parents are
// 0700), with a file beside the trees that none of them may change.
func sharedDir(t *testing.T) string {
	t.Helper()
	shared, err := os.MkdirTemp("", "relayd-links-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "sentinel"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	return shared
}

// treeUsers are the users a test puts trees as: relayd's own (root here)
// and nobody, through the put's "user".
func treeUsers() []string {
	if os.Geteuid() != 0 {
		return []string{""}
	}
	return []string{"", "nobody"}
}

// linksInside checks that every symbolic link below root that resolves
// at all resolves to root or below it, and returns the links found.
func linksInside(t *testing.T, root string) map[string]string {
	t.Helper()
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{}
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		target, _ := os.Readlink(p)
		links[rel] = target
		if to, err := filepath.EvalSymlinks(p); err == nil && to != real && !strings.HasPrefix(to, real+"/") {
			t.Errorf("%s (-> %s) resolves to %s, outside the tree", rel, target, to)
		}
		return nil
	})
	return links
}

// refusedNames are the names a stored reply's refused list gives.
func refusedNames(st msg) map[string]bool {
	names := map[string]bool{}
	list, _ := st["refused"].([]any)
	for _, r := range list {
		name, _, _ := strings.Cut(fmt.Sprint(r), ": ")
		names[name] = true
	}
	return names
}

func link(name, target string) member {
	return member{tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, ""}
}

func dirm(name string) member {
	return member{tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}, ""}
}

func file(name, data string) member {
	return member{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, data}
}

// The chain of issue 40: d/l -> .., d/l2 -> l/.., ..., d/l6 -> l5/.. and
// shadow -> d/l6/etc/shadow. Each link looks inside when the earlier ones
// are taken for directories; on disk d/l is the tree itself and d/l2 its
// parent. The put refuses d/l2, the first link that leaves, by name, and
// no link of the tree resolves outside it, as root and as nobody, by body
// and by chunks.
func TestTreeLinkChain(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	shared := sharedDir(t)
	ms := []member{dirm("d/"), link("d/l", "..")}
	for i := 2; i <= 6; i++ {
		prev := "l"
		if i > 2 {
			prev = fmt.Sprintf("l%d", i-1)
		}
		ms = append(ms, link(fmt.Sprintf("d/l%d", i), prev+"/.."))
	}
	ms = append(ms, link("shadow", "d/l6/etc/shadow"), file("d/l6/planted", "x"), file("f", "fine"))
	archive := tarOf(t, ms)
	for _, user := range treeUsers() {
		for _, chunked := range []bool{false, true} {
			target := filepath.Join(shared, fmt.Sprintf("chain-%s-%v", user, chunked))
			extra := msg{}
			if user != "" {
				extra["user"] = user
			}
			st := putTree(t, cl, target, archive, extra, chunked)
			if st["kind"] != "stored" {
				t.Fatalf("put of the chain as %q: %v; want stored, naming what was refused", user, st)
			}
			refused := refusedNames(st)
			if !refused["d/l2"] {
				t.Errorf("as %q (chunked %v): refused %v; want d/l2, the first link that leaves, named", user, chunked, st["refused"])
			}
			links := linksInside(t, target)
			if _, ok := links["d/l2"]; ok {
				t.Errorf("as %q: d/l2 is on disk; want it refused", user)
			}
			if _, err := os.Stat(filepath.Join(target, "shadow")); err == nil {
				if b, _ := os.ReadFile(filepath.Join(target, "shadow")); len(b) > 0 {
					t.Errorf("as %q: shadow reads %d bytes through the tree's links", user, len(b))
				}
			}
			if _, err := os.Lstat("/planted"); err == nil {
				t.Fatalf("as %q: /planted was written through the chain", user)
			}
			if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "fine" {
				t.Errorf("as %q: f holds %q, %v; want the tree's other members written", user, b, err)
			}
		}
	}
}

// Each variant of leading a link out, or writing through one, that the
// order of a tar stream allows: each is refused by name, nothing is
// written outside or through a link, and no link of the tree resolves
// outside it.
func TestTreeLinkVariants(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	shared := sharedDir(t)
	cases := []struct {
		name    string
		pre     func(t *testing.T, target string) // what is on disk before the put
		members []member
		refused []string // named in the reply
		absent  []string // not on disk afterwards, relative to the target
		files   int64    // the reply's count of members written, when not 0
	}{
		{name: "dot-dot after a link",
			members: []member{dirm("sub/"), link("sub/up", ".."), link("esc", "sub/up/.."), link("ok", "sub/up/sub")},
			refused: []string{"esc"}, absent: []string{"esc"}},
		{name: "a link to a link",
			members: []member{link("top", "."), link("up", "top/.."), link("upup", "up")},
			refused: []string{"up"}, absent: []string{"up"}},
		{name: "absolute",
			members: []member{link("python3", "/usr/bin/python3"), link("rel", "../../../../../../etc")},
			refused: []string{"python3", "rel"}, absent: []string{"python3", "rel"}},
		{name: "a link, then a directory and a file under its name",
			members: []member{dirm("sub/"), link("p", "sub"), dirm("p/"), file("p/f", "x"), link("p/l", "x")},
			refused: []string{"p/", "p/f", "p/l"}, absent: []string{"sub/f", "sub/l"}},
		{name: "a link, then through it into outside",
			members: []member{dirm("sub/"), link("sub/up", ".."), file("sub/up/../../escaped", "x"), link("sub/up2", "up/.."), file("sub/up2/escaped", "x")},
			refused: []string{"sub/up/../../escaped", "sub/up2"}},
		{name: "a hard link to a link",
			members: []member{dirm("a/"), dirm("a/b/"), file("a/b/r", "x"), link("a/b/r", ".."), {tar.Header{Name: "hr", Typeflag: tar.TypeLink, Linkname: "a/b/r"}, ""}},
			refused: []string{"hr"}, absent: []string{"hr"}},
		{name: "an earlier link changed by a later member",
			members: []member{dirm("sub/"), link("m", "sub"), link("n", "m/.."), link("m", ".")},
			refused: []string{"n"}, absent: []string{"n"}, files: 3},
		{name: "a file made a link by a later member",
			members: []member{dirm("sub/"), file("m", "x"), link("n", "m/.."), link("m", "sub")},
			refused: []string{"n"}, absent: []string{"n"}},
		{name: "a link already on disk",
			pre: func(t *testing.T, target string) {
				if err := os.Symlink(filepath.Dir(target), filepath.Join(target, "pre")); err != nil {
					t.Fatal(err)
				}
			},
			members: []member{link("viapre", "pre/sentinel"), file("pre/planted", "x"), dirm("pre/"), link("pre", ".")},
			refused: []string{"viapre", "pre/planted", "pre/"}},
		{name: "a link on disk that stays inside",
			pre: func(t *testing.T, target string) {
				if err := os.Mkdir(filepath.Join(target, "real"), 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("real", filepath.Join(target, "in")); err != nil {
					t.Fatal(err)
				}
			},
			members: []member{file("in/planted", "x"), link("esc", "in/../..")},
			refused: []string{"in/planted", "esc"}, absent: []string{"real/planted"}},
		{name: "a dangling link that climbs out of a name not there",
			members: []member{link("dang", "nothere/.."), link("fine", "nothere/x")},
			refused: []string{"dang"}, absent: []string{"dang"}},
	}
	for _, user := range treeUsers() {
		for i, c := range cases {
			target := filepath.Join(shared, fmt.Sprintf("v%d-%s", i, user))
			if err := os.Mkdir(target, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(target, 0o777); err != nil { // past the umask, for nobody
				t.Fatal(err)
			}
			if c.pre != nil {
				c.pre(t, target)
			}
			extra := msg{}
			if user != "" {
				extra["user"] = user
			}
			st := putTree(t, cl, target, tarOf(t, c.members), extra, false)
			t.Logf("%s as %q: %v", c.name, user, st["refused"])
			if st["kind"] != "stored" {
				t.Errorf("%s as %q: %v; want stored", c.name, user, st)
				continue
			}
			if c.files != 0 && num(t, st, "files") != c.files {
				t.Errorf("%s as %q: files %v; want %d (a link removed at the end is not counted)", c.name, user, st["files"], c.files)
			}
			refused := refusedNames(st)
			for _, n := range c.refused {
				if !refused[n] {
					t.Errorf("%s as %q: %s is not refused by name (refused %v)", c.name, user, n, st["refused"])
				}
			}
			for _, n := range c.absent {
				if _, err := os.Lstat(filepath.Join(target, n)); err == nil {
					t.Errorf("%s as %q: %s is on disk; want it absent", c.name, user, n)
				}
			}
			linksInside(t, target)
			ents, _ := os.ReadDir(shared)
			for _, e := range ents {
				if e.Name() != "sentinel" && !strings.HasPrefix(e.Name(), "v") {
					t.Errorf("%s as %q: %s was written beside the trees", c.name, user, e.Name())
				}
			}
			if _, err := os.Lstat("/escaped"); err == nil {
				t.Fatalf("%s as %q: /escaped was written", c.name, user)
			}
			if b, _ := os.ReadFile(filepath.Join(shared, "sentinel")); string(b) != "s" {
				t.Fatalf("%s as %q: the sentinel beside the trees holds %q", c.name, user, b)
			}
		}
	}
}

// With "links":"keep" every link is kept as it is, whatever its target
// (a virtual environment's python3 -> /usr/bin/python3, a link out of the
// tree), and still nothing is written through one: a member under a kept
// link is refused by name. A value other than "keep" is a bad-request
// naming the field.
func TestTreeLinksKeep(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	shared := sharedDir(t)
	archive := tarOf(t, []member{
		dirm("venv/"), dirm("venv/bin/"), dirm("venv/lib/"),
		link("venv/bin/python3", "/usr/bin/python3"),
		link("venv/bin/python", "python3"),
		link("venv/lib64", "lib"),
		link("venv/out", "../../sentinel"),
		link("venv/etc", "/etc"),
		file("venv/etc/planted", "x"),
		file("venv/out/planted", "x"),
		file("venv/lib64/through", "x"),
		file("venv/pyvenv.cfg", "home = /usr/bin\n"),
	})
	want := map[string]string{"venv/bin/python3": "/usr/bin/python3", "venv/bin/python": "python3",
		"venv/lib64": "lib", "venv/out": "../../sentinel", "venv/etc": "/etc"}
	for _, user := range treeUsers() {
		target := filepath.Join(shared, "keep-"+user)
		extra := msg{"links": "keep"}
		if user != "" {
			extra["user"] = user
		}
		st := putTree(t, cl, target, archive, extra, false)
		if st["kind"] != "stored" || st["ignored"] != nil {
			t.Fatalf("put with links keep as %q: %v; want stored", user, st)
		}
		refused := refusedNames(st)
		for _, n := range []string{"venv/etc/planted", "venv/out/planted", "venv/lib64/through"} {
			if !refused[n] {
				t.Errorf("as %q: %s, written through a kept link, is not refused (refused %v)", user, n, st["refused"])
			}
		}
		if len(refused) != 3 {
			t.Errorf("as %q: refused %v; want only the three members under links", user, st["refused"])
		}
		for name, to := range want {
			if got, err := os.Readlink(filepath.Join(target, name)); err != nil || got != to {
				t.Errorf("as %q: %s -> %q, %v; want a link to %q kept", user, name, got, err, to)
			}
		}
		if _, err := os.Lstat(filepath.Join(target, "venv/lib/through")); err == nil {
			t.Errorf("as %q: venv/lib/through was written through venv/lib64", user)
		}
		if _, err := os.Lstat("/etc/planted"); err == nil {
			t.Fatalf("as %q: /etc/planted was written through a kept link", user)
		}
	}
	for _, bad := range []any{"follow", "", true, 1} {
		st := putTree(t, cl, filepath.Join(shared, "bad"), archive, msg{"links": bad}, false)
		e, _ := st["error"].(map[string]any)
		if st["kind"] != "error" || e["category"] != "bad-request" || !strings.Contains(fmt.Sprint(e["message"]), `"links"`) {
			t.Errorf(`"links":%v: %v; want a bad-request naming "links"`, bad, st)
		}
	}
	// On a file's put it means nothing: refused, naming it.
	r := cl.request(msg{"kind": "put", "id": 9, "path": filepath.Join(shared, "f"), "data": "eA==", "links": "keep"})
	if e, _ := r["error"].(map[string]any); r["kind"] != "error" || !strings.Contains(fmt.Sprint(e["message"]), `"links"`) {
		t.Errorf(`a file's put with "links":"keep": %v; want a bad-request naming "links"`, r)
	}
	if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("after the refused puts: %v", r)
	}
}

// A get of a tree never follows a link: links to outside, absolute ones
// and links to directories come back as links, and nothing behind them is
// packed.
func TestTreeGetKeepsLinks(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := filepath.Join(d.workspace, "g")
	for _, p := range []string{"g/sub", "beside"} {
		if err := os.MkdirAll(filepath.Join(d.workspace, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.workspace, "beside", "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"abs": "/usr/bin/python3", "out": "../beside", "dirl": "sub", "up": ".."} {
		if err := os.Symlink(to, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, back := getTree(t, cl, "g", nil, true)
	got := listing(t, back)
	for name, to := range map[string]string{"abs": "/usr/bin/python3", "out": "../beside", "dirl": "sub", "up": ".."} {
		if !strings.Contains(got[name], fmt.Sprintf("link %q", to)) {
			t.Errorf("%s packed as %q; want a link to %q", name, got[name], to)
		}
	}
	if len(got) != 5 {
		t.Errorf("packed %v; want sub and the four links, nothing behind them", got)
	}
}
