package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// --artifacts-layout maka gives the subject's output to the carrier and
// the artifacts as Harbor's exec gives it to Maka's relay: stderr merged
// into stdout by the kernel (descriptors 1 and 2 one pipe), so a frame
// written to stderr is found, what both streams write keeps its order,
// sh's "not found" line counts in bytes, and the stderr file is empty. And
// bytes counts the text Maka's relay sees: each ill-formed UTF-8 sequence
// as U+FFFD, three bytes (Python's decode with errors="replace").
func TestMakaHarborMerge(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		dir := filepath.Join(t.TempDir(), "artifacts")
		d := startRelayd(t, opts{scope: mech, args: []string{"--artifacts-layout", "maka", "--artifacts-dir", dir}})
		defer d.stopClean()
		c := d.connect()
		tok := strings.Repeat("7c", 16)
		payload := `{"score":1}`
		fr := frame(tok, []byte(payload))
		diag := func(r msg) (string, int64) {
			t.Helper()
			m, _ := r["diagnostic"].(map[string]any)
			cat, _ := m["category"].(string)
			if cat == "none" {
				return cat, 0
			}
			return cat, num(t, m, "bytes")
		}

		// A frame on stderr, noise on stdout around it.
		r := c.sh(`printf 'noise\n'; printf '%s\n' '`+fr+`' >&2; printf 'tail\n'`, msg{"resultToken": tok})
		wantExit(t, r, "exited", 0)
		if cat, n := diag(r); r["stdout"] != payload || cat != "unstructured-output" || n != int64(len("noise\ntail\n")) {
			t.Fatalf("a frame on stderr: stdout %q, diagnostic %v; want the payload, unstructured-output of %d bytes", r["stdout"], r["diagnostic"], len("noise\ntail\n"))
		}
		wantArtifacts(t, dir, "frame on stderr", "noise\n"+fr+"\ntail\n", "")

		// Both streams in the order written, in the reply and the file.
		r = c.sh(`for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done`, nil)
		wantExit(t, r, "exited", 0)
		want := "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"
		if r["stdout"] != want {
			t.Fatalf("interleaved: stdout %q; want %q", r["stdout"], want)
		}
		wantArtifacts(t, dir, "interleaved", want, "")

		// sh's line for a command it cannot find counts in bytes.
		notFound, _ := exec.Command("/bin/sh", "-c", "no-such-command-relayd 2>&1").Output()
		if len(notFound) == 0 {
			t.Fatal("sh printed nothing for a missing command")
		}
		r = c.sh("no-such-command-relayd", msg{"resultToken": tok})
		wantExit(t, r, "exited", 127)
		if cat, n := diag(r); cat != "result-frame-missing" || n != int64(len(notFound)) {
			t.Fatalf("a missing command: diagnostic %v; want result-frame-missing of %d bytes (sh's %q)", r["diagnostic"], len(notFound), notFound)
		}
		wantArtifacts(t, dir, "not found", string(notFound), "")

		// Output that is not UTF-8: 13 bytes, 17 as Maka's relay counts.
		r = c.sh(`printf 'result: \377\376 ok'`, msg{"resultToken": tok})
		if cat, n := diag(r); cat != "result-frame-missing" || n != 17 {
			t.Fatalf("13 bytes with two invalid ones: diagnostic %v; want result-frame-missing of 17 bytes", r["diagnostic"])
		}

		// Without captureStdout: stdout dropped, stderr in the stdout file.
		r = c.sh(`printf out; printf err >&2`, msg{"captureStdout": false})
		wantExit(t, r, "exited", 0)
		wantArtifacts(t, dir, "captureStdout false", "err", "")
		if _, err := os.Stat(dir); err != nil {
			t.Fatal(err)
		}
	})
}
