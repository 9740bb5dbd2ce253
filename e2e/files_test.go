package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
)

// The files extension (protocol section 4.6, "Files"): put and get.

// goClient dials d with the Go client.
func (d *daemon) goClient() *relayd.Conn {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := relayd.Dial(ctx, d.addr, d.token)
	if err != nil {
		d.t.Fatalf("client.Dial: %v", err)
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}

// binaryBytes is n bytes of every value, NULs, newlines and invalid UTF-8 included.
func binaryBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	copy(b, "\x00\n\r\"\\\xff\xfe{}")
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A put stores exactly the bytes sent, NULs and all, at a path relative to
// the workspace, with its parents and mode; a get returns them.
func TestFilesPutGetBinary(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.goClient()
		ctx := context.Background()
		data := binaryBytes(3<<20 + 17) // several chunks, the last one short
		st, err := c.PutFile(ctx, "deep/er/run.sh", bytes.NewReader(data), relayd.PutOptions{Mode: 0o750, Parents: true})
		if err != nil {
			t.Fatalf("PutFile: %v", err)
		}
		target := filepath.Join(d.workspace, "deep/er/run.sh")
		if st.Path != target || st.Bytes != int64(len(data)) || st.Sha256 != sha(data) {
			t.Fatalf("stored %+v; want path %s, %d bytes, sha256 %s", st, target, len(data), sha(data))
		}
		onDisk, err := os.ReadFile(target)
		if err != nil || !bytes.Equal(onDisk, data) {
			t.Fatalf("file on disk: %d bytes, err %v; want the %d bytes sent", len(onDisk), err, len(data))
		}
		if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o750 {
			t.Errorf("mode %v; want 0750", fi.Mode().Perm())
		}
		var got bytes.Buffer
		gt, err := c.GetFile(ctx, target, "", &got)
		if err != nil {
			t.Fatalf("GetFile: %v", err)
		}
		if !bytes.Equal(got.Bytes(), data) || gt.Sha256 != sha(data) || gt.Bytes != int64(len(data)) {
			t.Fatalf("got %d bytes (%+v); want the %d put", got.Len(), gt, len(data))
		}
		// An empty file, both ways; and a put over an existing file replaces it.
		if _, err := c.PutFile(ctx, target, bytes.NewReader(nil), relayd.PutOptions{}); err != nil {
			t.Fatalf("PutFile of nothing: %v", err)
		}
		if fi, _ := os.Stat(target); fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
			t.Errorf("after an empty put: %d bytes, mode %v; want 0 bytes, 0644", fi.Size(), fi.Mode().Perm())
		}
		got.Reset()
		if gt, err := c.GetFile(ctx, target, "", &got); err != nil || gt.Bytes != 0 || got.Len() != 0 {
			t.Fatalf("GetFile of an empty file: %+v, %d bytes, %v", gt, got.Len(), err)
		}
		noTemporaries(t, filepath.Dir(target))
		d.stopClean()
	})
}

// noTemporaries fails when dir holds a temporary file of a put.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	if tmp := temporaries(dir); len(tmp) > 0 {
		t.Fatalf("temporary files left in %s: %q", dir, tmp)
	}
}

func temporaries(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".relayd-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// patterned is a reader of n deterministic bytes that holds none of them.
type patterned struct {
	n, off int64
}

func (p *patterned) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	for i := range b {
		x := uint64(p.off + int64(i))
		b[i] = byte(x*2654435761>>13) ^ byte(x)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// vmHWM is the peak resident set of pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// A 100 MiB file goes there and back intact, and relayd's memory does not
// grow with it: it holds one chunk at a time.
func TestFilesLargeRoundTripBoundedMemory(t *testing.T) {
	const size = 100 << 20
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.goClient()
		ctx := context.Background()
		want := sha256.New()
		_, _ = io.Copy(want, &patterned{n: size})
		wantSum := hex.EncodeToString(want.Sum(nil))

		began := time.Now()
		st, err := c.PutFile(ctx, "big.bin", &patterned{n: size}, relayd.PutOptions{})
		if err != nil {
			t.Fatalf("PutFile: %v", err)
		}
		putTook := time.Since(began)
		if st.Bytes != size || st.Sha256 != wantSum {
			t.Fatalf("stored %+v; want %d bytes, sha256 %s", st, size, wantSum)
		}
		began = time.Now()
		got := sha256.New()
		gt, err := c.GetFile(ctx, "big.bin", "", got)
		if err != nil {
			t.Fatalf("GetFile: %v", err)
		}
		getTook := time.Since(began)
		if gt.Bytes != size || hex.EncodeToString(got.Sum(nil)) != wantSum {
			t.Fatalf("got %+v; want %d bytes, sha256 %s", gt, size, wantSum)
		}
		hwm := vmHWM(t, d.cmd.Process.Pid)
		t.Logf("100 MiB: put %s, get %s; relayd VmHWM %.1f MiB", putTook.Round(time.Millisecond), getTook.Round(time.Millisecond), float64(hwm)/(1<<20))
		if hwm >= 64<<20 {
			t.Fatalf("relayd's peak RSS %d bytes; want under 64 MiB whatever the file's size", hwm)
		}
		d.stopClean()
	})
}

// A reader polling the target sees the old file or the whole new one,
// never part of it.
func TestFilesPutIsAtomic(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.goClient()
		target := filepath.Join(d.workspace, "result.json")
		old := bytes.Repeat([]byte("old "), 1000)
		if err := os.WriteFile(target, old, 0o644); err != nil {
			t.Fatal(err)
		}
		data := binaryBytes(8 << 20)
		stop := make(chan struct{})
		seen := make(chan string, 1)
		go func() { // joined through seen
			reads, partial := 0, ""
			for {
				select {
				case <-stop:
					seen <- partial + " after " + strconv.Itoa(reads) + " reads"
					return
				default:
				}
				b, err := os.ReadFile(target)
				reads++
				if err != nil {
					partial = "a read failed: " + err.Error()
				} else if !bytes.Equal(b, old) && !bytes.Equal(b, data) && partial == "" {
					partial = "a partial file of " + strconv.Itoa(len(b)) + " bytes"
				}
			}
		}()
		_, err := c.PutFile(context.Background(), target, bytes.NewReader(data), relayd.PutOptions{ChunkBytes: 64 << 10})
		time.Sleep(20 * time.Millisecond) // let the poller read the new file too
		close(stop)
		verdict := <-seen
		if err != nil {
			t.Fatalf("PutFile: %v", err)
		}
		if !strings.HasPrefix(verdict, " after") {
			t.Fatalf("the poller saw %s; want only the old or the new file", verdict)
		}
		t.Logf("poller: nothing partial%s", verdict)
		d.stopClean()
	})
}

// errorOf returns the category of a client error, or "".
func errorOf(err error) string {
	var e *relayd.Error
	if errors.As(err, &e) {
		return e.Category
	}
	return ""
}

// What cannot be put or got is refused with the category and a message
// that says which problem it is; nothing is left behind.
func TestFilesRefusals(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--max-file-bytes", "1MiB"}})
		c := d.goClient()
		ctx := context.Background()
		ws := d.workspace
		if err := os.Mkdir(filepath.Join(ws, "adir"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, 1<<20+1), 0o644); err != nil {
			t.Fatal(err)
		}
		small := []byte("x")
		cases := []struct {
			name, category, says string
			do                   func() error
		}{
			{"put without parent", "not-found", "no such file", func() error {
				_, err := c.PutFile(ctx, "missing/dir/f", bytes.NewReader(small), relayd.PutOptions{})
				return err
			}},
			{"get of nothing", "not-found", "no such file", func() error {
				_, err := c.GetFile(ctx, "nothing-here", "", io.Discard)
				return err
			}},
			{"get of a directory", "bad-request", "is a directory", func() error {
				_, err := c.GetFile(ctx, "adir", "", io.Discard)
				return err
			}},
			{"put over a directory", "bad-request", "is a directory", func() error {
				_, err := c.PutFile(ctx, "adir", bytes.NewReader(small), relayd.PutOptions{})
				return err
			}},
			{"get of a device", "bad-request", "not a regular file", func() error {
				_, err := c.GetFile(ctx, "/dev/null", "", io.Discard)
				return err
			}},
			{"put over max-file-bytes", "bad-request", "--max-file-bytes", func() error {
				_, err := c.PutFile(ctx, "toobig", bytes.NewReader(make([]byte, 3<<20)), relayd.PutOptions{ChunkBytes: 100 << 10})
				return err
			}},
			{"get over max-file-bytes", "bad-request", "--max-file-bytes", func() error {
				_, err := c.GetFile(ctx, "big", "", io.Discard)
				return err
			}},
		}
		for _, tc := range cases {
			err := tc.do()
			if errorOf(err) != tc.category || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s: got %v; want %s saying %q", tc.name, err, tc.category, tc.says)
			}
		}
		// A refused put stops the client's sending: a 1 GiB file over the
		// limit, or without its parent, is not sent whole.
		for _, path := range []string{"toobig", "missing/dir/big"} {
			src := &patterned{n: 1 << 30}
			_, err := c.PutFile(ctx, path, src, relayd.PutOptions{})
			if errorOf(err) == "" || src.off > 256<<20 { // generous: the refusal races the sending
				t.Errorf("put of 1 GiB to %s: %v after reading %d bytes; want a refusal within 256 MiB", path, err, src.off)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "toobig")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a put over --max-file-bytes left the target: %v", err)
		}
		noTemporaries(t, ws)

		// Malformed puts, on the wire: a bad mode, bad base64.
		cl := d.connect()
		for _, tc := range []struct {
			m    msg
			says string
		}{
			{msg{"kind": "put", "id": 1, "path": "m", "data": "eA==", "mode": "0999"}, `"mode"`},
			{msg{"kind": "put", "id": 2, "path": "m", "data": "not base64!"}, "base64"},
			{msg{"kind": "put", "id": 3, "data": "eA=="}, `"path"`},
			{msg{"kind": "get", "id": 4}, `"path"`},
		} {
			r := cl.request(tc.m)
			e, _ := r["error"].(msg)
			if r["kind"] != "error" || e["category"] != "bad-request" || !strings.Contains(e["message"].(string), tc.says) {
				t.Errorf("%v: got %v; want bad-request naming %s", tc.m, r, tc.says)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "m")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused put created its target: %v", err)
		}
		noTemporaries(t, ws)
		// The connection still serves a put after its refusals.
		if _, err := c.PutFile(ctx, "fine", bytes.NewReader(small), relayd.PutOptions{}); err != nil {
			t.Fatalf("PutFile after the refusals: %v", err)
		}
		d.stopClean()
	})
}

// putChunk sends one chunk of a put on the wire.
func putChunk(cl *client, id int, path string, data []byte, more bool) {
	m := msg{"kind": "put", "id": id, "data": base64.StdEncoding.EncodeToString(data)}
	if path != "" {
		m["path"] = path
	}
	if more {
		m["more"] = true
	}
	cl.send(m)
}

// While a put is open, an execute on its connection is busy; once the
// last chunk is stored, it runs.
func TestFilesBusyDuringTransfer(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		putChunk(cl, 1, "f.txt", []byte("hello, "), true)
		r := cl.request(msg{"kind": "execute", "id": 2, "command": "/bin/true"})
		if e, _ := r["error"].(msg); r["kind"] != "error" || e["category"] != "busy" {
			t.Fatalf("execute during a put: got %v; want a busy error", r)
		}
		putChunk(cl, 1, "", []byte("world"), false)
		r = cl.read(10 * time.Second)
		if r["kind"] != "stored" || num(t, r, "bytes") != 12 || r["sha256"] != sha([]byte("hello, world")) {
			t.Fatalf("got %v; want stored, 12 bytes", r)
		}
		if b, _ := os.ReadFile(filepath.Join(d.workspace, "f.txt")); string(b) != "hello, world" {
			t.Fatalf("file holds %q; want %q", b, "hello, world")
		}
		wantExit(t, cl.sh("exit 0", nil), "exited", 0)
		d.stopClean()
	})
}

// A connection that ends in the middle of a put leaves neither the target
// nor its temporary file.
func TestFilesAbandonedTransferRemovesTemporary(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		putChunk(cl, 1, "half.bin", binaryBytes(1000), true)
		waitFor(t, 10*time.Second, "the temporary file", func() bool { return len(temporaries(d.workspace)) == 1 })
		tmp := temporaries(d.workspace)[0]
		if fi, err := os.Stat(filepath.Join(d.workspace, tmp)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("temporary file %s: %v, %v; want mode 0600 until done", tmp, fi, err)
		}
		cl.c.Close()
		waitFor(t, 10*time.Second, "the temporary file to go", func() bool { return len(temporaries(d.workspace)) == 0 })
		if _, err := os.Stat(filepath.Join(d.workspace, "half.bin")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the target exists after an abandoned put: %v", err)
		}
		d.stopClean()
	})
}

// With user, a file is written and read with that user's rights: a new
// file is its, and a root-only file is out of its reach.
func TestFilesUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: relayd takes another user's rights")
	}
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.goClient()
		ctx := context.Background()
		open, err := os.MkdirTemp("", "relayd-files-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(open) })
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(open, "sub", "agent.txt")
		if _, err := c.PutFile(ctx, target, strings.NewReader("mine"), relayd.PutOptions{User: "nobody", Parents: true}); err != nil {
			t.Fatalf("PutFile as nobody: %v", err)
		}
		for _, p := range []string{target, filepath.Dir(target)} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
				t.Errorf("%s is owned by %d:%d; want nobody's 65534:65534", p, st.Uid, st.Gid)
			}
		}
		var got bytes.Buffer
		if _, err := c.GetFile(ctx, target, "nobody", &got); err != nil || got.String() != "mine" {
			t.Fatalf("GetFile as nobody of its own file: %q, %v", got.String(), err)
		}

		secret := filepath.Join(open, "secret")
		if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetFile(ctx, secret, "nobody", io.Discard); errorOf(err) != "bad-request" || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("GetFile of a root-only file as nobody: %v; want bad-request, permission denied", err)
		}
		// Into a directory only root may write.
		if _, err := c.PutFile(ctx, filepath.Join(d.workspace, "x"), strings.NewReader("x"), relayd.PutOptions{User: "nobody"}); errorOf(err) != "bad-request" || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("PutFile as nobody into root's directory: %v; want bad-request, permission denied", err)
		}
		if _, err := c.PutFile(ctx, "y", strings.NewReader("y"), relayd.PutOptions{User: "no-such-user-here"}); errorOf(err) != "bad-request" || !strings.Contains(err.Error(), "no user") {
			t.Errorf("PutFile as an unknown user: %v; want bad-request naming the user", err)
		}
		// relayd's own rights are untouched by the detours.
		if _, err := c.PutFile(ctx, "root.txt", strings.NewReader("r"), relayd.PutOptions{}); err != nil {
			t.Fatalf("PutFile as relayd after them: %v", err)
		}
		if fi, _ := os.Stat(filepath.Join(d.workspace, "root.txt")); fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("a put without user is owned by uid %d; want relayd's, 0", fi.Sys().(*syscall.Stat_t).Uid)
		}
		d.stopClean()
	})
}
