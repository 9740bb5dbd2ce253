package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func category(t *testing.T, r msg) string {
	t.Helper()
	if r == nil || r["kind"] != "error" {
		t.Fatalf("got %v; want an error", r)
	}
	e, _ := r["error"].(map[string]any)
	if m, _ := e["message"].(string); m == "" {
		t.Fatalf("error without a message: %v", r)
	}
	if _, ok := r["token"]; ok {
		t.Fatalf("an error carries the token: %v", r)
	}
	return e["category"].(string)
}

// Every error category, with the connection left usable except after
// unauthenticated and line-too-long.
func TestErrorCategories(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-line-bytes", "4096"}})
	c := d.connect()
	marker := filepath.Join(d.dir, "ran")
	touch := []string{"-c", "touch " + q(marker)}
	cases := []struct {
		name string
		raw  string
		m    msg
		want string
	}{
		{name: "not json", raw: "this is not json\n", want: "bad-json"},
		{name: "not an object", raw: "[1,2]\n", want: "bad-json"},
		{name: "invalid utf-8", raw: "{\"kind\":\"ready\",\"x\":\"\xff\"}\n", want: "bad-json"},
		{name: "unknown kind", m: msg{"kind": "dance"}, want: "unknown-kind"},
		{name: "no kind", m: msg{}, want: "unknown-kind"},
		{name: "no command", m: msg{"kind": "execute"}, want: "bad-request"},
		{name: "command not a string", m: msg{"kind": "execute", "command": 42}, want: "bad-request"},
		{name: "args not strings", m: msg{"kind": "execute", "command": "/bin/sh", "args": []any{1}}, want: "bad-request"},
		{name: "overlap", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch,
			"environment": msg{"K": "1"}, "credentials": msg{"K": "2"}}, want: "bad-request"},
		{name: "reserved name", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch,
			"environment": msg{"MAKA_EVAL_RESULT_TOKEN": "x"}}, want: "bad-request"},
		{name: "bad name", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch,
			"environment": msg{"1BAD": "x"}}, want: "bad-request"},
		{name: "short result token", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch, "resultToken": "short"}, want: "bad-request"},
		{name: "negative timeout", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch, "timeoutMs": -5}, want: "bad-request"},
		{name: "fractional timeout", m: msg{"kind": "execute", "command": "/bin/sh", "args": touch, "timeoutMs": 1.5}, want: "bad-request"},
		{name: "nul byte", m: msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "touch " + q(marker) + "\x00"}}, want: "bad-request"},
		{name: "id not scalar", m: msg{"kind": "ready", "id": []int{1}}, want: "bad-request"},
	}
	for _, tc := range cases {
		if tc.raw != "" {
			c.sendRaw([]byte(tc.raw))
		} else {
			c.send(tc.m)
		}
		if got := category(t, c.read(5*time.Second)); got != tc.want {
			t.Errorf("%s: category %q; want %q", tc.name, got, tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused execute ran")
	}
	// The id is echoed on errors.
	r := c.request(msg{"kind": "dance", "id": "seven"})
	if r["id"] != "seven" {
		t.Fatalf("error id %v; want the request's id", r["id"])
	}
	// busy
	c.send(msg{"kind": "execute", "command": "/bin/sleep", "args": []string{"300"}})
	time.Sleep(100 * time.Millisecond)
	r = c.request(msg{"kind": "execute", "id": "second", "command": "/bin/true"})
	if category(t, r) != "busy" || r["id"] != "second" {
		t.Fatalf("got %v; want busy echoing the id", r)
	}
	if p := c.request(msg{"kind": "ready"}); p["kind"] != "ready" {
		t.Fatalf("ready while busy: got %v", p)
	}
	c.send(msg{"kind": "verify"})
	wantExit(t, c.read(10*time.Second), "framework_timeout", 124)
	if v := c.read(5 * time.Second); v["kind"] != "verified" {
		t.Fatalf("got %v; want verified", v)
	}

	// line-too-long closes; a line of exactly the limit is fine.
	exact := fmt.Sprintf(`{"token":%q,"kind":"ready","pad":"`, d.token)
	exact += strings.Repeat("x", 4096-len(exact)-2) + `"}`
	c.sendRaw([]byte(exact + "\n"))
	if r := c.read(5 * time.Second); r["kind"] != "ready" {
		t.Fatalf("a line of exactly --max-line-bytes: got %v; want ready", r)
	}
	c.sendRaw([]byte(strings.Replace(exact, `"pad":"`, `"pad":"y`, 1) + "\n"))
	if got := category(t, c.read(5*time.Second)); got != "line-too-long" {
		t.Fatalf("one byte over: %s; want line-too-long", got)
	}
	if !c.closedByPeer(3 * time.Second) {
		t.Fatal("connection still open after line-too-long")
	}

	// unauthenticated closes, runs nothing, and never echoes the token.
	u := d.dial()
	u.send(msg{"kind": "execute", "command": "/bin/sh", "args": touch, "token": "wrong"})
	if got := category(t, u.read(5*time.Second)); got != "unauthenticated" {
		t.Fatalf("wrong token: %s", got)
	}
	if !u.closedByPeer(3 * time.Second) {
		t.Fatal("connection still open after a wrong token")
	}
	u = d.dial()
	u.sendRaw([]byte(`{"kind":"ready"}` + "\n"))
	if got := category(t, u.read(5*time.Second)); got != "unauthenticated" {
		t.Fatalf("missing token: %s", got)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an unauthenticated execute ran")
	}
	d.stopClean()
	if strings.Contains(d.logs.String(), d.token) {
		t.Fatal("the token appeared in relayd's log")
	}
}

// Exit statuses, signals and spawn failures map as protocol 4.2's table says.
func TestExitCodes(t *testing.T) {
	d := startRelayd(t, opts{})
	c := d.connect()
	wantExit(t, c.sh("exit 7", msg{"id": 41}), "exited", 7)
	r := c.sh("kill -SEGV $$", nil)
	wantExit(t, r, "exited", 139)
	if r["signal"] != "SIGSEGV" {
		t.Fatalf("signal %v; want SIGSEGV", r["signal"])
	}
	noexec := filepath.Join(d.workspace, "noexec.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    msg
		code int64
	}{
		{"missing path", msg{"command": "/nonexistent/program"}, 127},
		{"missing name", msg{"command": "no-such-program-anywhere"}, 127},
		{"not executable", msg{"command": noexec}, 126},
		{"relative not executable", msg{"command": "./noexec.sh"}, 126},
		{"bad cwd", msg{"command": "/bin/true", "cwd": "/nonexistent/dir"}, 126},
		{"bad cwd, name from PATH", msg{"command": "true", "cwd": "/nonexistent/dir"}, 126},
		{"bad cwd, relative command", msg{"command": "./noexec.sh", "cwd": "/nonexistent/dir"}, 126},
		{"cwd is a file", msg{"command": "/bin/true", "cwd": noexec}, 126},
		{"directory", msg{"command": "/tmp"}, 126},
	} {
		m := msg{"kind": "execute"}
		for k, v := range tc.m {
			m[k] = v
		}
		r := c.request(m)
		wantExit(t, r, "exited", tc.code)
		det, _ := r["detail"].(string)
		if det == "" {
			t.Errorf("%s: no detail in %v", tc.name, r)
		}
		if strings.HasPrefix(tc.name, "bad cwd") || strings.HasPrefix(tc.name, "cwd is") {
			if !strings.Contains(det, "cwd") {
				t.Errorf("%s: detail %q does not name the cwd", tc.name, det)
			}
		}
		if r["settlement"] != "none" {
			t.Errorf("%s: settlement %v", tc.name, r["settlement"])
		}
	}
	// A name found in PATH, a relative cwd, and the session still going.
	if err := os.Mkdir(filepath.Join(d.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = c.request(msg{"kind": "execute", "command": "pwd", "cwd": "sub"})
	wantExit(t, r, "exited", 0)
	if r["stdout"] != filepath.Join(d.workspace, "sub")+"\n" {
		t.Fatalf("pwd in a relative cwd: %q", r["stdout"])
	}
	d.stopClean()
}

// The subject's environment: relayd's own minus RELAYD_*, plus environment,
// credentials and the result token; stdin is /dev/null.
func TestSubjectEnvironment(t *testing.T) {
	d := startRelayd(t, opts{env: []string{"RELAYD_SECRET_THING=nope", "KEEP_ME=yes"}})
	c := d.connect()
	r := c.sh(`env; test -t 0 && echo tty; cat; echo "stdin-done"`, msg{
		"environment": msg{"LANG": "C.UTF-8", "KEEP_ME": "overridden"}, "credentials": msg{"API_KEY": "k"}})
	out := r["stdout"].(string)
	for _, want := range []string{"LANG=C.UTF-8\n", "KEEP_ME=overridden\n", "API_KEY=k\n", "stdin-done\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("subject environment lacks %q", want)
		}
	}
	for _, not := range []string{"RELAYD_", "MAKA_EVAL_RESULT_TOKEN", "tty\n"} {
		if strings.Contains(out, not) {
			t.Errorf("subject environment has %q", not)
		}
	}
	r = c.sh(`printf %s "$MAKA_EVAL_RESULT_TOKEN"`, msg{"resultToken": strings.Repeat("ab", 16), "captureStdout": false})
	if r["stdout"] != "" {
		t.Fatalf("discard mode returned %q", r["stdout"])
	}
	d.stopClean()
}

func frame(token string, payload []byte) string {
	sum := sha256.Sum256(payload)
	return fmt.Sprintf("MAKA-EVAL-RESULT-V1 %s %d %s %s", token, len(payload), hex.EncodeToString(sum[:]),
		base64.RawURLEncoding.EncodeToString(payload))
}

// Stdout modes: raw truncation and UTF-8 repair, the carrier table, discard.
func TestStdoutModes(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--max-stdout-bytes", "10"}})
	c := d.connect()
	r := c.sh(`printf 0123456789abcdef`, nil)
	if r["stdout"] != "0123456789" || r["stdoutTruncated"] != true {
		t.Fatalf("raw truncation: %q %v", r["stdout"], r["stdoutTruncated"])
	}
	r = c.sh(`printf 'a\377b'`, nil)
	if r["stdout"] != "a\uFFFDb" || r["stdoutTruncated"] != false {
		t.Fatalf("invalid UTF-8: %q", r["stdout"])
	}
	tok := strings.Repeat("0f", 16)
	payload := []byte(`{"kind":"settled","status":"completed"}`)
	sum := func(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }
	for _, tc := range []struct {
		name, script, stdout string
		diag                 msg
	}{
		{"valid", `echo "` + frame(tok, payload) + `"`, string(payload), msg{"category": "none"}},
		{"crlf", `printf '%s\r\n' "` + frame(tok, payload) + `"`, string(payload), msg{"category": "none"}},
		{"missing", `echo hello`, "", msg{"category": "result-frame-missing", "bytes": json.Number("6"), "sha256": sum("hello\n")}},
		{"unstructured", `echo noise; echo "` + frame(tok, payload) + `"`, string(payload),
			msg{"category": "unstructured-output", "bytes": json.Number("6"), "sha256": sum("noise\n")}},
		{"oversize", `head -c 70000 /dev/zero | tr '\0' x; echo; echo "` + frame(tok, payload) + `"`, "",
			msg{"category": "result-frame-oversize"}},
		{"ambiguous", `echo "` + frame(tok, payload) + `"; echo "` + frame(tok, payload) + `"`, "", msg{"category": "result-frame-ambiguous"}},
		{"invalid", `echo "MAKA-EVAL-RESULT-V1 ` + tok + ` 3 00 AAAA"`, "", msg{"category": "result-frame-invalid"}},
	} {
		r := c.sh(tc.script, msg{"resultToken": tok})
		if r["stdout"] != tc.stdout {
			t.Errorf("%s: stdout %q; want %q", tc.name, r["stdout"], tc.stdout)
		}
		diag := r["diagnostic"].(map[string]any)
		for k, v := range tc.diag {
			if diag[k] != v {
				t.Errorf("%s: diagnostic %v; want %v", tc.name, diag, tc.diag)
			}
		}
		if tc.diag["category"] != "none" && len(diag) != 3 {
			t.Errorf("%s: diagnostic %v; want category, bytes and sha256", tc.name, diag)
		}
	}
	d.stopClean()
}

// --artifacts-dir keeps every byte of stdout and stderr, also what
// survivors write after the reply.
func TestArtifacts(t *testing.T) {
	art := t.TempDir()
	d := startRelayd(t, opts{args: []string{"--artifacts-dir", art}})
	c := d.connect()
	r := c.sh(`echo out; echo err >&2; (sleep 0.2; echo late) &`, nil)
	id := r["execution"].(string)
	waitFor(t, 5*time.Second, "the late write in the artifact", func() bool {
		b, _ := os.ReadFile(filepath.Join(art, id+".stdout.txt"))
		return string(b) == "out\nlate\n"
	})
	b, _ := os.ReadFile(filepath.Join(art, id+".stderr.txt"))
	if string(b) != "err\n" {
		t.Fatalf("stderr artifact %q", b)
	}
	if info, _ := os.Stat(filepath.Join(art, id+".stdout.txt")); info.Mode().Perm() != 0o600 {
		t.Fatalf("artifact mode %v; want 0600", info.Mode().Perm())
	}
	d.stopClean()
	// A new relayd in the same directory never overwrites them.
	d2 := startRelayd(t, opts{args: []string{"--artifacts-dir", art}})
	r = d2.connect().sh("true", nil)
	if r["execution"] == id {
		t.Fatalf("second relayd reused execution id %s", id)
	}
	d2.stopClean()
}

// Credentials reach the subject; neither they nor the token reach a debug
// log, a reply (other than the subject's own stdout) or the command line.
func TestSecretsStayOutOfLogs(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--log-level", "debug"}})
	secret := "s3cr3t-" + newToken()
	c := d.connect()
	r := c.sh(`printf %s "$API_KEY"`, msg{"credentials": msg{"API_KEY": secret}, "environment": msg{"PLAIN": secret + "-env"}})
	if r["stdout"] != secret {
		t.Fatalf("the credential did not reach the subject")
	}
	delete(r, "stdout")
	if b, _ := json.Marshal(r); strings.Contains(string(b), secret) {
		t.Fatal("the credential was echoed in the reply")
	}
	c.sh("exit 1", msg{"args": []string{"-c", "exit 1", secret}})
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.cmd.Process.Pid))
	if strings.Contains(string(cmd), d.token) {
		t.Fatal("the token is on relayd's command line")
	}
	d.stopClean()
	logs := d.logs.String()
	if !strings.Contains(logs, `"level":"debug"`) {
		t.Fatal("no debug line logged: the test would not see a leak")
	}
	for _, s := range []string{secret, d.token} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret appeared in the debug log")
		}
	}
}

// Startup refusals: one line, non-zero status.
func TestStartupRefusals(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	good := filepath.Join(dir, "token")
	_ = os.WriteFile(good, []byte("t\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no token", []string{"--listen", "127.0.0.1:0"}, "no token"},
		{"empty token", []string{"--token-file", empty}, "empty"},
		{"missing token file", []string{"--token-file", filepath.Join(dir, "nope")}, "--token-file"},
		{"missing workspace", []string{"--token-file", good, "--workspace", filepath.Join(dir, "nope")}, "--workspace"},
		{"bad flag", []string{"--token-file", good, "--no-such-flag"}, "unknown flag"},
		{"bad duration", []string{"--token-file", good, "--term-grace", "soon"}, "term-grace"},
		{"bad scope", []string{"--token-file", good, "--scope", "jail"}, "--scope"},
		{"grace past deadline", []string{"--token-file", good, "--term-grace", "5s", "--teardown-timeout", "1s"}, "term-grace"},
		{"bad listen", []string{"--token-file", good, "--listen", "256.0.0.1:1"}, "--listen"},
	} {
		cmd := exec.Command(relaydBin, tc.args...)
		// Its own state directory: one that gets as far as --listen has
		// made its store of marks there, not in the machine's /run/relayd.
		cmd.Env = append(cleanEnv(), "RELAYD_STATE_DIR="+filepath.Join(dir, "state"))
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 {
			t.Errorf("%s: exit %v; want a non-zero status", tc.name, err)
			continue
		}
		text := strings.TrimSpace(string(out))
		if strings.Count(text, "\n") > 0 {
			t.Errorf("%s: want one line, got %q", tc.name, text)
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("%s: message %q; want it to mention %q", tc.name, text, tc.want)
		}
	}
	// The environment twin of a flag, and the flag winning over it.
	cmd := exec.Command(relaydBin, "--version")
	cmd.Env = append(cleanEnv(), "RELAYD_SCOPE=jail")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("RELAYD_SCOPE=jail accepted: %s", out)
	}
	cmd = exec.Command(relaydBin, "--version", "--scope", "auto")
	cmd.Env = append(cleanEnv(), "RELAYD_SCOPE=jail")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "relayd ") {
		t.Errorf("flag did not win over its twin: %v %s", err, out)
	}
}

// TestProcs: relayd's Go runtime takes half the CPUs it may use, at least
// one (cmd/relayd setProcs), and GOMAXPROCS in its environment wins; the
// listening line says which.
func TestProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set for the tests, and relayd under test inherits it")
	}
	want := max(1, runtime.GOMAXPROCS(0)/2)
	for _, tc := range []struct {
		env  []string
		want string
	}{{nil, strconv.Itoa(want)}, {[]string{"GOMAXPROCS=3"}, "3"}} {
		d := startRelayd(t, opts{env: tc.env})
		line := grepLines(d.logs.String(), `"message":"listening"`)
		if len(line) != 1 || field(line[0], "procs") != tc.want {
			t.Fatalf("with %v: listening line %q; want procs %s", tc.env, line, tc.want)
		}
	}
}
