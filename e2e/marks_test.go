package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// Marks, changes and restore (protocol 4.9): the filesystem half of the
// trial boundary, against the real binary, with the agent as nobody and
// as root.

// markTree makes a directory that every user may enter, outside relayd's
// own directories, removed at the end of the test.
func markTree(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "relayd-marks-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// pathOf is an entry's path, from path or pathBase64.
func pathOf(t *testing.T, e map[string]any) string {
	t.Helper()
	if p, ok := e["path"].(string); ok {
		return p
	}
	b, err := base64.StdEncoding.DecodeString(fmt.Sprint(e["pathBase64"]))
	if err != nil {
		t.Fatalf("entry %v has neither path nor pathBase64", e)
	}
	return string(b)
}

// summary lists a changes reply (or a boundary's tampered list) as
// "A path", "M path what,what", "D path", sorted; paths relative to root.
func summary(t *testing.T, r msg, root string) []string {
	t.Helper()
	var out []string
	for _, l := range []struct{ field, letter string }{{"added", "A"}, {"modified", "M"}, {"deleted", "D"}} {
		list, _ := r[l.field].([]any)
		for _, it := range list {
			e := it.(map[string]any)
			s := l.letter + " " + strings.TrimPrefix(pathOf(t, e), root)
			if w, ok := e["what"].([]any); ok {
				var ws []string
				for _, x := range w {
					ws = append(ws, fmt.Sprint(x))
				}
				s += " " + strings.Join(ws, ",")
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func (cl *client) mark(name string, paths, keep []string, extra msg) msg {
	cl.t.Helper()
	m := msg{"kind": "mark", "id": 1, "name": name, "paths": paths, "keep": keep}
	for k, v := range extra {
		m[k] = v
	}
	r := cl.request(m)
	if r["kind"] != "marked" {
		cl.t.Fatalf("mark: %v; want marked", r)
	}
	return r
}

func (cl *client) changes(name string, paths ...string) msg {
	cl.t.Helper()
	m := msg{"kind": "changes", "id": 3, "mark": name}
	if len(paths) > 0 {
		m["paths"] = paths
	}
	r := cl.request(m)
	if r["kind"] != "changes" {
		cl.t.Fatalf("changes: %v; want changes", r)
	}
	return r
}

func (cl *client) restore(name string, paths ...string) msg {
	cl.t.Helper()
	m := msg{"kind": "restore", "id": 4, "mark": name}
	if len(paths) > 0 {
		m["paths"] = paths
	}
	r := cl.request(m)
	if r["kind"] != "restored" {
		cl.t.Fatalf("restore: %v; want restored", r)
	}
	return r
}

func agents() []string { return []string{"nobody", "root"} }

// Each kind of change is listed under the right name with the right
// "what": content, mode, owner, type, target; added and deleted; mtime
// set back; the same bytes rewritten (no change); a change through a hard
// link from outside the tree; names with a newline and not UTF-8. Then a
// restore of everything leaves no change.
func TestMarkEachKindOfChange(t *testing.T) {
	for _, agent := range agents() {
		t.Run(agent, func(t *testing.T) {
			d := startRelayd(t, opts{})
			cl := d.connect()
			if r := cl.request(msg{"kind": "ready"}); !strings.Contains(fmt.Sprint(r["extensions"]), "marks") {
				t.Fatalf("ready lists %v; want \"marks\"", r["extensions"])
			}
			root := markTree(t)
			app := filepath.Join(root, "app")
			for _, f := range []string{"content", "mode", "gone", "same", "backdated", "viahardlink", "totype"} {
				writeFile(t, filepath.Join(app, f), "was "+f+"\n", 0o666)
			}
			if err := os.Symlink("content", filepath.Join(app, "link")); err != nil {
				t.Fatal(err)
			}
			// backdated's time is one the agent can set again after writing
			// (same size, same inode): only the change time tells.
			old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.Local)
			if err := os.Chtimes(filepath.Join(app, "backdated"), old, old); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(app, "dir"), 0o777); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(app, "dir", "inner"), "inner\n", 0o666)
			os.Chmod(filepath.Join(app, "dir"), 0o777)
			os.Chmod(app, 0o777)
			// A hard link outside the marked paths, which the agent can write.
			outside := markTree(t)
			os.Chmod(outside, 0o777)
			hard := filepath.Join(outside, "hard")
			if err := os.Link(filepath.Join(app, "viahardlink"), hard); err != nil {
				t.Fatal(err)
			}
			if agent == "nobody" {
				// The agent's own files, as a task's working tree would be.
				filepath.Walk(app, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
			}
			mk := cl.mark("start", []string{root}, []string{app}, nil)
			if num(t, mk, "entries") != 12 || mk["mark"] != "start" {
				t.Fatalf("marked %v; want 12 entries of mark start", mk)
			}
			if got := summary(t, cl.changes("start"), root); len(got) != 0 {
				t.Fatalf("changes right after the mark: %q", got)
			}
			script := `set -e; cd ` + q(app) + `
printf 'now content\n' > content
chmod 600 mode
rm gone
printf 'was same\n' > same
printf 'new backdated\n' > backdated; touch -d '2001-01-01 00:00:00' backdated; test "$(stat -c %Y backdated)" = ` + strconv.FormatInt(old.Unix(), 10) + `
printf 'through the link\n' >> ` + q(hard) + `
rm totype; mkdir totype
ln -sfn gone link
printf x > "$(printf 'new\nline')"
printf x > "$(printf 'bad\377name')"
printf x > dir/added
`
			r := cl.sh(script, msg{"user": agent, "cwd": "/"})
			if r["exitCode"] != json.Number("0") {
				t.Fatalf("the agent's script: %v", r)
			}
			ch := cl.changes("start")
			want := []string{
				"A /app/bad\xffname", "A /app/dir/added", "A /app/new\nline",
				"D /app/gone",
				"M /app/backdated content", "M /app/content content", "M /app/link target",
				"M /app/mode mode", "M /app/totype type,mode", "M /app/viahardlink content",
			}
			slices.Sort(want)
			if got := summary(t, ch, root); !slices.Equal(got, want) {
				t.Fatalf("changes:\n%q\nwant\n%q", got, want)
			}
			// The entries' fields: a modified file's sha256 now and was, an
			// octal mode, a non-UTF-8 name as pathBase64.
			for _, it := range ch["modified"].([]any) {
				e := it.(map[string]any)
				if e["path"] != filepath.Join(app, "content") {
					continue
				}
				was, _ := e["was"].(map[string]any)
				if e["sha256"] != sha([]byte("now content\n")) || was == nil || was["sha256"] != sha([]byte("was content\n")) || e["type"] != "file" || e["mode"] != "0666" {
					t.Errorf("modified content: %v; want sha256 now and was, type file, mode 0666", e)
				}
			}
			found := false
			for _, it := range ch["added"].([]any) {
				e := it.(map[string]any)
				if e["pathBase64"] == base64.StdEncoding.EncodeToString([]byte(app+"/bad\xffname")) && e["path"] == nil {
					found = true
				}
			}
			if !found {
				t.Errorf("added %v: want the non-UTF-8 name as pathBase64 only", ch["added"])
			}
			// Narrowed by paths.
			if got := summary(t, cl.changes("start", filepath.Join(app, "dir")), root); !slices.Equal(got, []string{"A /app/dir/added"}) {
				t.Errorf("changes of app/dir: %q", got)
			}
			rs := cl.restore("start")
			if num(t, rs, "removed") != 4 || rs["mark"] != "start" {
				t.Errorf("restored %v; want 4 removed", rs)
			}
			if got := summary(t, cl.changes("start"), root); len(got) != 0 {
				t.Fatalf("changes after the restore: %q", got)
			}
			if b, _ := os.ReadFile(filepath.Join(app, "backdated")); string(b) != "was backdated\n" {
				t.Errorf("backdated holds %q after the restore", b)
			}
			d.stopClean()
		})
	}
}

// A restore of one path restores that path only.
func TestMarkRestoreOnePath(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := markTree(t)
	writeFile(t, filepath.Join(root, "tests", "a.py"), "a\n", 0o644)
	writeFile(t, filepath.Join(root, "tests", "b.py"), "b\n", 0o644)
	cl.mark("m", []string{root}, []string{filepath.Join(root, "tests")}, nil)
	writeFile(t, filepath.Join(root, "tests", "a.py"), "A\n", 0o644)
	writeFile(t, filepath.Join(root, "tests", "b.py"), "B\n", 0o644)
	cl.restore("m", filepath.Join(root, "tests", "a.py"))
	if got := summary(t, cl.changes("m"), root); !slices.Equal(got, []string{"M /tests/b.py content"}) {
		t.Fatalf("changes after restoring a.py: %q; want b.py only", got)
	}
	if got := summary(t, cl.changes("m", filepath.Join(root, "tests", "a.py")), root); len(got) != 0 {
		t.Fatalf("changes of a.py after restoring it: %q", got)
	}
	// A path outside the mark's keep is a bad-request naming it.
	r := cl.request(msg{"kind": "restore", "id": 5, "mark": "m", "paths": []string{"/etc"}})
	if e, _ := r["error"].(map[string]any); e == nil || e["category"] != "bad-request" || !strings.Contains(fmt.Sprint(e["message"]), "/etc") {
		t.Fatalf("restore of /etc: %v; want a bad-request naming it", r)
	}
	if r := cl.request(msg{"kind": "changes", "id": 6, "mark": "nosuch"}); fmt.Sprint(r["error"]) == "" || !strings.Contains(fmt.Sprint(r["error"]), "not-found") {
		t.Fatalf("changes of a mark that does not exist: %v; want not-found", r)
	}
	d.stopClean()
}

// A kept directory swapped for a symbolic link to outside: restore
// removes the link and makes the directory again; nothing outside is
// touched.
func TestMarkKeptDirSwappedForSymlink(t *testing.T) {
	for _, agent := range agents() {
		t.Run(agent, func(t *testing.T) {
			d := startRelayd(t, opts{})
			cl := d.connect()
			root := markTree(t)
			os.Chmod(root, 0o777)
			kept := filepath.Join(root, "tests")
			writeFile(t, filepath.Join(kept, "test.py"), "assert True\n", 0o644)
			writeFile(t, filepath.Join(kept, "sub", "x"), "x\n", 0o644)
			os.Chmod(kept, 0o777)
			victim := markTree(t)
			writeFile(t, filepath.Join(victim, "test.py"), "victim\n", 0o644)
			writeFile(t, filepath.Join(victim, "extra"), "victim extra\n", 0o600)
			cl.mark("m", []string{root}, []string{kept}, nil)
			r := cl.sh("set -e; mv "+q(kept)+" "+q(kept+".old")+" && ln -s "+q(victim)+" "+q(kept), msg{"user": agent, "cwd": "/"})
			if r["exitCode"] != json.Number("0") {
				t.Fatalf("the swap: %v", r)
			}
			before := listTree(t, victim)
			cl.restore("m", kept)
			if fi, err := os.Lstat(kept); err != nil || !fi.IsDir() {
				t.Fatalf("%s after restore: %v, %v; want a directory", kept, fi, err)
			}
			if b, _ := os.ReadFile(filepath.Join(kept, "sub", "x")); string(b) != "x\n" {
				t.Errorf("sub/x = %q after restore", b)
			}
			if after := listTree(t, victim); !slices.Equal(before, after) {
				t.Fatalf("outside changed: %q -> %q", before, after)
			}
			if got := summary(t, cl.changes("m", kept), root); len(got) != 0 {
				t.Fatalf("changes of the kept directory after restore: %q", got)
			}
			d.stopClean()
		})
	}
}

// listTree lists every entry under dir with its mode, size and content.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b, _ := os.ReadFile(p)
		out = append(out, fmt.Sprintf("%s %v %d %q", p, fi.Mode(), fi.Size(), b))
		return nil
	})
	return out
}

// A restore racing a writer and readers: the writer keeps putting the
// agent's content in place (by rename, whole); each read sees the
// agent's content or the mark's, whole, never a mix; a restore once the
// writer stopped leaves the mark's.
func TestMarkRestoreRacingReader(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := markTree(t)
	f := filepath.Join(root, "keep", "big")
	const size = 4 << 20
	markContent := bytes.Repeat([]byte("m"), size)
	agentContent := bytes.Repeat([]byte("a"), size)
	writeFile(t, f, string(markContent), 0o644)
	cl.mark("m", []string{root}, []string{filepath.Join(root, "keep")}, nil)
	writeFile(t, f, string(agentContent), 0o644)
	var (
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		mu    sync.Mutex
		bad   []string
		reads int
	)
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		tmp := f + ".agent"
		for i := 0; ; i++ {
			if err := os.WriteFile(tmp, agentContent, 0o644); err == nil {
				os.Rename(tmp, f)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := os.ReadFile(f)
				mu.Lock()
				reads++
				switch {
				case err != nil && !os.IsNotExist(err):
					bad = append(bad, err.Error())
				case err != nil:
					bad = append(bad, "the file was missing")
				case !bytes.Equal(b, markContent) && !bytes.Equal(b, agentContent):
					bad = append(bad, fmt.Sprintf("a read of %d bytes that is neither", len(b)))
				}
				mu.Unlock()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for range 3 {
		cl.restore("m")
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d of %d reads saw a mix: %q", len(bad), reads, bad[:min(len(bad), 5)])
	}
	cl.restore("m")
	if b, _ := os.ReadFile(f); !bytes.Equal(b, markContent) {
		t.Fatal("the file does not hold the mark's content after the restore")
	}
	d.stopClean()
}

// At the trial boundary, "files" lists the changes under protect as
// tampered and restores them before the reply; changes elsewhere are not
// listed there. In both mechanisms, the agent as nobody and as root.
func TestMarkAtTheBoundary(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		for _, agent := range agents() {
			t.Run(agent, func(t *testing.T) {
				d := startRelayd(t, opts{scope: mech})
				cl := d.connect()
				root := markTree(t)
				os.Chmod(root, 0o777)
				tests, logs := filepath.Join(root, "tests"), filepath.Join(root, "logs")
				writeFile(t, filepath.Join(tests, "test_x.py"), "def test(): assert check()\n", 0o666)
				os.MkdirAll(logs, 0o777)
				os.Chmod(tests, 0o777)
				os.Chmod(logs, 0o777)
				cl.mark("start", []string{root}, []string{tests, logs}, nil)
				// The agent cheats and leaves a process behind that would keep cheating.
				pidf := filepath.Join(root, "cheat.pid")
				d.pidFiles = append(d.pidFiles, pidf)
				r := cl.sh("set -e; cd "+q(root)+"; printf 'def test(): pass\\n' > tests/test_x.py; printf 'import os\\n' > tests/conftest.py; printf 1.0 > logs/reward.txt; printf x > elsewhere; (sleep 1000 & echo $! > "+q(pidf)+")", msg{"user": agent, "cwd": "/"})
				if r["exitCode"] != json.Number("0") {
					t.Fatalf("the agent: %v", r)
				}
				waitPid(t, pidf)
				v := cl.request(msg{"kind": "verify", "id": 9, "all": true, "survivors": "settle",
					"files": msg{"mark": "start", "protect": []string{tests, logs}, "restore": true}})
				if v["kind"] != "verified" || v["quiescent"] != true {
					t.Fatalf("verify: %v", v)
				}
				files, _ := v["files"].(map[string]any)
				if files == nil || files["mark"] != "start" {
					t.Fatalf("verify's files: %v", v["files"])
				}
				var got []string
				for _, it := range files["tampered"].([]any) {
					e := it.(map[string]any)
					got = append(got, fmt.Sprint(e["change"])+" "+strings.TrimPrefix(pathOf(t, e), root))
				}
				slices.Sort(got)
				want := []string{"added /logs/reward.txt", "added /tests/conftest.py", "modified /tests/test_x.py"}
				if !slices.Equal(got, want) {
					t.Fatalf("tampered %q; want %q", got, want)
				}
				if rs, _ := files["restored"].(map[string]any); rs == nil || num(t, rs, "removed") != 2 || num(t, rs, "written") != 1 {
					t.Errorf("files restored: %v; want 2 removed, 1 written", files["restored"])
				}
				if b, _ := os.ReadFile(filepath.Join(tests, "test_x.py")); string(b) != "def test(): assert check()\n" {
					t.Errorf("test_x.py after the boundary: %q", b)
				}
				if _, err := os.Lstat(filepath.Join(tests, "conftest.py")); err == nil {
					t.Error("conftest.py is still there after the boundary")
				}
				if got := summary(t, cl.changes("start"), root); !slices.Equal(got, []string{"A /cheat.pid", "A /elsewhere"}) {
					t.Errorf("changes after the boundary: %q; want only /elsewhere", got)
				}
				d.stopClean()
			})
		}
	})
}

// Nobody can neither read nor change the store.
func TestMarkStoreOutOfReach(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := markTree(t)
	writeFile(t, filepath.Join(root, "keep", "secret"), "the verifier's answer\n", 0o644)
	cl.mark("m", []string{root}, []string{filepath.Join(root, "keep")}, nil)
	store := filepath.Join(d.dir, "state", "marks")
	obj := filepath.Join(store, "objects", strings.TrimPrefix(sha([]byte("the verifier's answer\n")), "sha256:"))
	if _, err := os.Stat(obj); err != nil {
		entries, _ := os.ReadDir(filepath.Join(store, "objects"))
		t.Fatalf("kept content not at %s: %v (objects: %v)", obj, err, entries)
	}
	// d.dir is the test's, 0700: open it on the way, as a container's /run would be.
	os.Chmod(d.dir, 0o755)
	os.Chmod(filepath.Join(d.dir, "state"), 0o755)
	r := cl.sh("ls "+q(store)+" ; cat "+q(obj)+" ; echo x > "+q(obj)+" ; echo x > "+q(store+"/planted")+"; echo x >> "+q(filepath.Join(store, "m", "m", "index"))+"; exit 0", msg{"user": "nobody", "cwd": "/", "captureStderr": true})
	errs := fmt.Sprint(r["stderr"])
	if strings.Count(errs, "Permission denied") < 4 || strings.Contains(fmt.Sprint(r["stdout"]), "answer") {
		t.Fatalf("nobody reached the store: stdout %q stderr %q", r["stdout"], errs)
	}
	fi, err := os.Stat(store)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the store: %v, %v; want mode 0700", fi, err)
	}
	d.stopClean()
}

// A FIFO in the tree (and in a kept subtree) hangs nothing: it is
// recorded, compared and restored, never opened.
func TestMarkFIFOHangsNothing(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := markTree(t)
	keep := filepath.Join(root, "keep")
	os.MkdirAll(keep, 0o777)
	for _, p := range []string{filepath.Join(root, "fifo"), filepath.Join(keep, "fifo")} {
		if err := syscall.Mkfifo(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(keep, "f"), "f\n", 0o644)
	cl.mark("m", []string{root}, []string{keep}, nil)
	// The agent turns the kept file into a FIFO and the FIFO into a file.
	os.Remove(filepath.Join(keep, "f"))
	syscall.Mkfifo(filepath.Join(keep, "f"), 0o666)
	os.Remove(filepath.Join(keep, "fifo"))
	writeFile(t, filepath.Join(keep, "fifo"), "now a file\n", 0o644)
	if got := summary(t, cl.changes("m"), root); !slices.Equal(got, []string{"M /keep/f type", "M /keep/fifo type"}) {
		t.Fatalf("changes: %q", got)
	}
	cl.restore("m")
	if got := summary(t, cl.changes("m"), root); len(got) != 0 {
		t.Fatalf("changes after restore: %q", got)
	}
	d.stopClean()
}

// --mark-bytes refuses a mark whose kept content would pass it before
// anything is written, naming the size needed and the budget left.
func TestMarkBytesRefusesBeforeWriting(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--mark-bytes", "1000"}})
	cl := d.connect()
	root := markTree(t)
	writeFile(t, filepath.Join(root, "keep", "big"), strings.Repeat("x", 2000), 0o644)
	r := cl.request(msg{"kind": "mark", "id": 1, "name": "m", "paths": []string{root}, "keep": []string{filepath.Join(root, "keep")}})
	e, _ := r["error"].(map[string]any)
	if e == nil || e["category"] != "bad-request" || !strings.Contains(fmt.Sprint(e["message"]), "2000") || !strings.Contains(fmt.Sprint(e["message"]), "1000") {
		t.Fatalf("mark over --mark-bytes: %v; want a bad-request naming 2000 needed and 1000 left", r)
	}
	for _, sub := range []string{"objects", "m"} {
		if ents, err := os.ReadDir(filepath.Join(d.dir, "state", "marks", sub)); err != nil || len(ents) != 0 {
			t.Errorf("the store's %s after the refusal: %v, %v; want it empty", sub, ents, err)
		}
	}
	if r := cl.request(msg{"kind": "changes", "id": 2, "mark": "m"}); !strings.Contains(fmt.Sprint(r["error"]), "not-found") {
		t.Errorf("changes of the refused mark: %v; want not-found", r)
	}
	// Without keep it is within the budget.
	cl.mark("m", []string{root}, nil, nil)
	d.stopClean()
}

// Marks survive a restart of relayd; unmark frees one.
func TestMarkSurvivesRestart(t *testing.T) {
	d := startRelayd(t, opts{})
	cl := d.connect()
	root := markTree(t)
	writeFile(t, filepath.Join(root, "keep", "f"), "f\n", 0o644)
	cl.mark("m", []string{root}, []string{filepath.Join(root, "keep")}, nil)
	d.stopClean()
	writeFile(t, filepath.Join(root, "keep", "f"), "F\n", 0o644)
	d2 := startRelayd(t, opts{env: []string{"RELAYD_STATE_DIR=" + filepath.Join(d.dir, "state")}})
	cl2 := d2.connect()
	if got := summary(t, cl2.changes("m"), root); !slices.Equal(got, []string{"M /keep/f content"}) {
		t.Fatalf("changes after a restart: %q", got)
	}
	cl2.restore("m")
	if b, _ := os.ReadFile(filepath.Join(root, "keep", "f")); string(b) != "f\n" {
		t.Fatalf("f after the restore: %q", b)
	}
	if r := cl2.request(msg{"kind": "unmark", "id": 7, "name": "m"}); r["kind"] != "unmarked" || r["mark"] != "m" {
		t.Fatalf("unmark: %v", r)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.dir, "state", "marks", "objects")); len(ents) != 0 {
		t.Errorf("%d objects left after the last unmark", len(ents))
	}
	d2.stopClean()
}

// A disk that fills during a restore: the reply names exactly the paths
// not restored; once there is room, a restore finishes.
func TestMarkRestoreFullDisk(t *testing.T) {
	root := markTree(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", root).Run() })
	d := startRelayd(t, opts{})
	cl := d.connect()
	keep := filepath.Join(root, "keep")
	for _, f := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(keep, f), strings.Repeat(f, 200<<10), 0o644)
	}
	cl.mark("m", []string{root}, []string{keep}, nil)
	for _, f := range []string{"a", "b", "c"} {
		os.Remove(filepath.Join(keep, f))
	}
	// The agent fills the disk outside the kept subtree.
	fill, _ := os.Create(filepath.Join(root, "filler"))
	for {
		if _, err := fill.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	fill.Close()
	r := cl.request(msg{"kind": "restore", "id": 4, "mark": "m"})
	var not []string
	for _, p := range r["notRestored"].([]any) {
		not = append(not, strings.TrimPrefix(fmt.Sprint(p), root))
	}
	if want := []string{"/keep/a", "/keep/b", "/keep/c"}; !slices.Equal(not, want) || !strings.Contains(fmt.Sprint(r["reason"]), "no space") {
		t.Fatalf("restore on a full disk: %v; want notRestored %q and the reason", r, want)
	}
	if got := summary(t, cl.changes("m", keep), root); len(got) != 3 {
		t.Errorf("changes of keep after the failed restore: %q; want the three deleted", got)
	}
	os.Remove(filepath.Join(root, "filler"))
	if rs := cl.restore("m"); rs["notRestored"] != nil || num(t, rs, "written") != 3 {
		t.Fatalf("restore with room: %v", rs)
	}
	if got := summary(t, cl.changes("m"), root); !slices.Equal(got, []string{}) && len(got) != 0 {
		t.Fatalf("changes after: %q", got)
	}
	d.stopClean()
}

// A 100,000-entry mark within 64 MiB of relayd's peak resident memory
// (relayd built without the race detector, which multiplies memory).
func TestMarkMemoryBound(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := testharness.Build(bin, "relayd"); err != nil {
		t.Fatal(err)
	}
	root := markTree(t)
	for i := range 100 {
		dir := filepath.Join(root, strconv.Itoa(i))
		os.Mkdir(dir, 0o755)
		for j := range 1000 {
			f, err := os.Create(filepath.Join(dir, "file-with-a-longish-name-"+strconv.Itoa(j)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	d := startRelayd(t, opts{bin: bin})
	cl := d.connect()
	mk := cl.mark("big", []string{root}, []string{filepath.Join(root, "0")}, nil)
	if num(t, mk, "entries") != 100_101 {
		t.Fatalf("marked %v; want 100101 entries", mk)
	}
	if got := summary(t, cl.changes("big"), root); len(got) != 0 {
		t.Fatalf("changes: %d", len(got))
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var hwm int64
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			hwm, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	t.Logf("relayd's peak RSS: %d KiB", hwm)
	if hwm == 0 || hwm > 64<<10 {
		t.Fatalf("relayd's peak RSS %d KiB; want at most 64 MiB", hwm)
	}
	_ = time.Second
	d.stopClean()
}

// The Go client's Recycle: one call settles every survivor and restores
// every kept subtree; Changes is then empty and nothing of the agent
// runs. Mark, Changes, Restore, Unmark through the client too.
func TestMarkRecycleGoClient(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.goClient()
		ctx := context.Background()
		root := markTree(t)
		os.Chmod(root, 0o777)
		app := filepath.Join(root, "app")
		writeFile(t, filepath.Join(app, "main.py"), "print(1)\n", 0o666)
		os.Chmod(app, 0o777)
		m, err := c.Mark(ctx, "clean", relayd.MarkOptions{Paths: []string{root}, Keep: []string{app}})
		if err != nil || m.Entries != 3 {
			t.Fatalf("Mark: %+v, %v; want 3 entries", m, err)
		}
		pidf := filepath.Join(root, "left.pid")
		d.pidFiles = append(d.pidFiles, pidf)
		for i := range 3 {
			ex, err := c.Execute(ctx, relayd.Request{Command: "/bin/sh", User: "nobody", Cwd: "/",
				Args: []string{"-c", fmt.Sprintf("printf 'print(%d)\\n' > %s; touch %s/junk%d; (sleep 1000 & echo $! >> %s)", i, q(app+"/main.py"), q(app), i, q(pidf))}})
			if err != nil || ex.ExitCode != 0 {
				t.Fatalf("Execute: %+v, %v", ex, err)
			}
		}
		ch, err := c.Changes(ctx, "clean", app)
		if err != nil || len(ch.Added) != 3 || len(ch.Modified) != 1 || ch.Modified[0].What[0] != "content" {
			t.Fatalf("Changes: %+v, %v", ch, err)
		}
		r, err := c.Recycle(ctx, "clean", relayd.VerifyOptions{})
		if err != nil || !r.Verified.Quiescent || len(r.Verified.Settled) != 3 || r.Restored.Removed != 3 || r.Restored.Written != 1 {
			t.Fatalf("Recycle: %+v, %v; want quiescent, 3 settled, 3 removed, 1 written", r, err)
		}
		for _, pid := range readPids(pidf) {
			if alive(pid) {
				t.Errorf("pid %d lives after Recycle", pid)
			}
		}
		if ch, err := c.Changes(ctx, "clean", app); err != nil || !ch.Empty() {
			t.Fatalf("Changes after Recycle: %+v, %v", ch, err)
		}
		if _, err := c.Restore(ctx, "clean", "/etc"); !errors.Is(err, relayd.ErrBadRequest) {
			t.Errorf("Restore of /etc: %v; want ErrBadRequest", err)
		}
		if err := c.Unmark(ctx, "clean"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Changes(ctx, "clean"); !errors.Is(err, relayd.ErrNotFound) {
			t.Errorf("Changes after Unmark: %v; want ErrNotFound", err)
		}
		d.stopClean()
	})
}
