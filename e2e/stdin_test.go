package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stdin (contract 4.6): input is written to the subject's stdin, which is
// then closed; inputEncoding base64 carries bytes; without input or stdin,
// stdin is /dev/null as before.
func TestStdinInput(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		exts := fmt.Sprint(cl.request(msg{"kind": "ready"})["extensions"])
		if !strings.Contains(exts, "stdin") || !strings.Contains(exts, "user") {
			t.Fatalf("ready extensions = %s; want stdin and user listed", exts)
		}

		r := cl.sh(`cat; echo " end"`, msg{"input": "hello\nworld"})
		wantExit(t, r, "exited", 0)
		if r["stdout"] != "hello\nworld end\n" {
			t.Fatalf("input: stdout %q; want the input then \" end\"", r["stdout"])
		}

		bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
		sum := sha256.Sum256(bin)
		r = cl.sh(`sha256sum`, msg{"input": base64.StdEncoding.EncodeToString(bin), "inputEncoding": "base64"})
		if want := hex.EncodeToString(sum[:]) + "  -\n"; r["stdout"] != want {
			t.Fatalf("base64 input: stdout %q; want %q", r["stdout"], want)
		}

		r = cl.sh(`readlink /proc/self/fd/0`, nil)
		if r["stdout"] != "/dev/null\n" {
			t.Fatalf("without input: stdin is %q; want /dev/null", r["stdout"])
		}
	})
}

// sendStdin streams data to execution x as stdin messages of chunk bytes,
// with eof on the last; it reports how many bytes it sent before an error.
func sendStdin(cl *client, x string, data []byte, chunk int, eof bool) (int, error) {
	sent := 0
	for sent < len(data) || sent == 0 {
		n := min(chunk, len(data)-sent)
		m := msg{"kind": "stdin", "execution": x, "data": base64.StdEncoding.EncodeToString(data[sent : sent+n]), "encoding": "base64"}
		if sent+n == len(data) && eof {
			m["eof"] = true
		}
		if err := cl.wire().Send(m); err != nil {
			return sent, err
		}
		sent += n
		if n == 0 {
			break
		}
	}
	return sent, nil
}

// startedName reads the started message of a streamed or stdin execution.
func startedName(t testing.TB, cl *client) string {
	t.Helper()
	r := cl.read(10 * time.Second)
	if r == nil || r["kind"] != "started" {
		t.Fatalf("got %v; want started", r)
	}
	return r["execution"].(string)
}

// 64 MiB streamed on stdin arrive intact, and the execution's input is
// bounded by --max-stdin-buffer, not by the message line.
func TestStdinStream64MiB(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		data := make([]byte, 64<<20)
		_, _ = rand.Read(data)
		sum := sha256.Sum256(data)
		// The first bytes go as input, the rest as stdin messages after it.
		cl.send(msg{"kind": "execute", "id": 1, "command": "sha256sum", "input": base64.StdEncoding.EncodeToString(data[:5]),
			"inputEncoding": "base64", "stdin": true, "stream": true, "timeoutMs": 120000})
		x := startedName(t, cl)
		errc := make(chan error, 1)
		go func() { _, err := sendStdin(cl, x, data[5:], 512<<10, true); errc <- err }()
		var r msg
		for r = cl.read(120 * time.Second); r != nil && r["kind"] == "output"; r = cl.read(120 * time.Second) {
		}
		if err := <-errc; err != nil {
			t.Fatalf("streaming stdin: %v", err)
		}
		if r == nil || r["kind"] != "executed" {
			t.Fatalf("got %v; want executed", r)
		}
		wantExit(t, r, "exited", 0)
		if want := hex.EncodeToString(sum[:]) + "  -\n"; r["stdout"] != want {
			t.Fatalf("sha256sum of 64 MiB on stdin printed %q; want %q", r["stdout"], want)
		}
		// Bounded memory whatever the input's size (issue 19: under 64 MiB).
		rss := peakRSS(t, d.cmd.Process.Pid)
		t.Logf("64 MiB on stdin in %d ms; relayd's peak RSS %d MiB", num(t, r, "durationMs"), rss>>20)
		if rss > rssLimit(64<<20) {
			t.Fatalf("relayd's peak RSS %d MiB after 64 MiB on stdin; want under %d MiB", rss>>20, rssLimit(64<<20)>>20)
		}
	})
}

// A subject that never reads its stdin blocks neither relayd nor another
// connection, and its deadline still fires; relayd stops reading that one
// connection once --max-stdin-buffer is held, and resumes when the
// execution ends, dropping what is left.
func TestStdinNonReader(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--max-stdin-buffer", "1MiB"}})
		defer d.stopClean()
		a, b := d.connect(), d.connect()
		a.send(msg{"kind": "execute", "id": 1, "command": "sleep", "args": []string{"5"}, "stdin": true, "stream": true, "timeoutMs": 1500})
		x := startedName(t, a)
		data := make([]byte, 32<<20) // more than every buffer on the way: relayd's, the pipe's, the sockets'
		done := make(chan error, 1)
		go func() { _, err := sendStdin(a, x, data, 256<<10, true); done <- err }()

		began := time.Now()
		r := b.sh(`echo other`, nil)
		if r["stdout"] != "other\n" || time.Since(began) > 3*time.Second {
			t.Fatalf("second connection: %v after %s; want other at once", r["stdout"], time.Since(began))
		}
		select {
		case err := <-done:
			t.Fatalf("all 32 MiB were taken (%v) while the subject read nothing; want relayd to stop reading at --max-stdin-buffer", err)
		default:
		}
		r = a.read(15 * time.Second)
		if r == nil || r["kind"] != "executed" {
			t.Fatalf("got %v; want executed (no reply to the stdin messages)", r)
		}
		wantExit(t, r, "framework_timeout", 124)
		if el := time.Since(began); el > 6*time.Second {
			t.Fatalf("executed after %s; want the 1.5 s deadline to fire", el)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("streaming stdin after the end: %v; want relayd to read on and drop it", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("relayd did not resume reading the connection after the execution ended")
		}
		if r := a.request(msg{"kind": "ready"}); r["kind"] != "ready" {
			t.Fatalf("after the dropped input: got %v; want ready", r)
		}
	})
}

// Input left when the subject closes its stdin is dropped, and the
// connection reads on.
func TestStdinSubjectCloses(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		cl.send(msg{"kind": "execute", "id": 1, "command": "/bin/sh", "args": []string{"-c", "head -c 3; exec 0<&-; sleep 0.5"},
			"input": "abc", "stdin": true, "stream": true})
		x := startedName(t, cl)
		if _, err := sendStdin(cl, x, make([]byte, 8<<20), 256<<10, true); err != nil {
			t.Fatalf("streaming stdin: %v", err)
		}
		var r msg
		for r = cl.read(30 * time.Second); r != nil && r["kind"] == "output"; r = cl.read(30 * time.Second) {
		}
		if r == nil || r["kind"] != "executed" {
			t.Fatalf("got %v; want executed", r)
		}
		wantExit(t, r, "exited", 0)
		if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
			t.Fatalf("got %v; want ready", r)
		}
	})
}

// Bad stdin messages get an error that says what was wrong.
func TestStdinBadMessages(t *testing.T) {
	d := startRelayd(t, opts{})
	defer d.stopClean()
	cl := d.connect()
	wantErr := func(m msg, category, says string) {
		t.Helper()
		r := cl.request(m)
		e, _ := r["error"].(map[string]any)
		if r["kind"] != "error" || e["category"] != category || !strings.Contains(e["message"].(string), says) {
			t.Fatalf("%v: got %v; want error %s saying %q", m, r, category, says)
		}
	}
	wantErr(msg{"kind": "stdin", "id": 1, "execution": "x-999", "data": "hi"}, "not-found", "x-999")
	wantErr(msg{"kind": "execute", "id": 2, "command": "cat", "input": 5}, "bad-request", `"input"`)
	wantErr(msg{"kind": "execute", "id": 3, "command": "cat", "input": "%%", "inputEncoding": "base64"}, "bad-request", `"input"`)
	wantErr(msg{"kind": "execute", "id": 4, "command": "cat", "input": "x", "inputEncoding": "hex"}, "bad-request", `"inputEncoding"`)
	wantErr(msg{"kind": "execute", "id": 5, "command": "cat", "stdin": "yes"}, "bad-request", `"stdin"`)

	cl.send(msg{"kind": "execute", "id": 6, "command": "sleep", "args": []string{"10"}, "stream": true, "timeoutMs": 20000})
	x := startedName(t, cl)
	wantErr(msg{"kind": "stdin", "id": 7, "execution": x, "data": "hi"}, "bad-request", `"stdin":true`)
	r := cl.request(msg{"kind": "verify"})
	for r["kind"] != "verified" {
		r = cl.read(20 * time.Second)
	}

	cl.send(msg{"kind": "execute", "id": 8, "command": "cat", "stdin": true, "stream": true, "timeoutMs": 20000})
	x = startedName(t, cl)
	wantErr(msg{"kind": "stdin", "id": 9, "execution": x, "data": "%%", "encoding": "base64"}, "bad-request", `"data"`)
	wantErr(msg{"kind": "stdin", "id": 10, "execution": x, "data": "hi", "encoding": "rot13"}, "bad-request", `"encoding"`)
	wantErr(msg{"kind": "stdin", "id": 11, "execution": x, "eof": "yes"}, "bad-request", `"eof"`)
	cl.send(msg{"kind": "stdin", "execution": x, "data": "bye", "eof": true})
	for r = cl.read(20 * time.Second); r != nil && r["kind"] == "output"; r = cl.read(20 * time.Second) {
	}
	if r == nil || r["kind"] != "executed" || r["stdout"] != "bye" {
		t.Fatalf("got %v; want executed with stdout bye", r)
	}
}

// Closing the connection is still a transport loss for an execution with
// stdin: what was sent reached the subject, and then its scope is settled.
func TestStdinTransportLoss(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		pidFile, got := d.pidFile("cat.pid"), filepath.Join(d.dir, "got")
		cl.send(msg{"kind": "execute", "id": 1, "command": "/bin/sh", "args": []string{"-c", "echo $$ > " + q(pidFile) + "; exec cat > " + q(got)},
			"input": "first ", "stdin": true})
		x := startedName(t, cl)
		if _, err := sendStdin(cl, x, []byte("second"), 1024, false); err != nil {
			t.Fatal(err)
		}
		pid := waitPid(t, pidFile)
		waitFor(t, 10*time.Second, "the subject to write what it read", func() bool {
			b, _ := os.ReadFile(got)
			return string(b) == "first second"
		})
		cl.c.Close()
		waitFor(t, 10*time.Second, "the subject to be settled after the connection closed", func() bool { return !alive(pid) })
	})
}
