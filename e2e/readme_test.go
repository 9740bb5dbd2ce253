package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// readmeExample is one command of the README's netcat session and the
// replies the README shows for it.
type readmeExample struct {
	command string
	replies []map[string]any
}

// readmeNetcatSession reads the commands of the README's "A netcat session"
// section: every indented block that pipes into nc, and the JSON lines of the
// block that follows it.
func readmeNetcatSession(t *testing.T) []readmeExample {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## A netcat session")
	if start < 0 {
		t.Fatal(`README.md has no "## A netcat session" section`)
	}
	text = text[start+3:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	// Blocks: runs of lines indented by four spaces.
	var blocks []string
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "    ") {
			cur = append(cur, strings.TrimPrefix(line, "    "))
			continue
		}
		if line == "" && len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = nil
	}
	var out []readmeExample
	for i, blk := range blocks {
		if !strings.Contains(blk, "| nc -q 1 127.0.0.1 7700") {
			continue
		}
		ex := readmeExample{command: blk}
		if i+1 < len(blocks) {
			for _, line := range strings.Split(blocks[i+1], "\n") {
				if !strings.HasPrefix(line, "{") {
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("README reply is not JSON: %s", line)
				}
				ex.replies = append(ex.replies, m)
			}
		}
		if len(ex.replies) == 0 {
			t.Fatalf("README command shows no reply: %s", blk)
		}
		out = append(out, ex)
	}
	return out
}

// comparable keeps what the README's replies promise: it drops what varies
// from run to run (the token, pids, durations, the version, the paths, the
// execution ids and the mechanism), and counts survivors.
func comparable(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch k {
		case "token", "durationMs", "version", "cwd", "execution", "scope":
			continue
		case "survivors":
			out[k] = len(v.([]any))
		default:
			out[k] = v
		}
	}
	return out
}

// The README's netcat session is run as printed, against a relayd with
// make run's settings, and each reply is compared with the README's.
func TestReadmeNetcatSession(t *testing.T) {
	if _, err := exec.LookPath("nc"); err != nil {
		t.Skip("nc not installed (apt-get install netcat-openbsd; .ci/run installs it)")
	}
	examples := readmeNetcatSession(t)
	if len(examples) < 6 {
		t.Fatalf("found %d netcat commands in README.md; want at least 6", len(examples))
	}
	d := startRelayd(t, opts{args: []string{"--term-grace", "2s", "--teardown-timeout", "10s"}})
	_, port, _ := net.SplitHostPort(d.addr)
	runNetcatSession(t, examples, port, d.token, func(pid int) {
		t.Cleanup(func() { killPid(pid) }) // the README's service, started by this test
	})
	d.stopClean()
}

// runNetcatSession runs the README's netcat commands as printed, with port
// for 7700 and T the token, and compares each reply with the README's.
// survivor gets the pid of every survivor a reply lists.
func runNetcatSession(t *testing.T, examples []readmeExample, port, token string, survivor func(pid int)) {
	t.Helper()
	for _, ex := range examples {
		script := strings.ReplaceAll(ex.command, "127.0.0.1 7700", "127.0.0.1 "+port)
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(cleanEnv(), "T="+token)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		cmd.Stderr = &stdout
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v: %s", ex.command, err, stdout.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: still running after 30s", ex.command)
		}
		var got []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: output line is not JSON: %q", ex.command, line)
			}
			if survivors, ok := m["survivors"].([]any); ok {
				for _, s := range survivors {
					pid := int(s.(map[string]any)["pid"].(float64))
					survivor(pid)
				}
			}
			got = append(got, comparable(m))
		}
		var want []map[string]any
		for _, m := range ex.replies {
			want = append(want, comparable(m))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s\ngot  %v\nwant %v (README.md)", ex.command, got, want)
		}
	}
}

// The README's container section prints the files of deploy/ that make
// container-test runs (deploy/docker/Dockerfile, run.sh, exec.sh,
// network.sh, dialout.sh and deploy/compose/compose.yaml) as they are.
func TestReadmeContainerExamplesAreTheTestedFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Putting relayd into an eval container")
	if start < 0 {
		t.Fatal(`README.md has no "## Putting relayd into an eval container" section`)
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	for _, name := range []string{"docker/Dockerfile", "docker/run.sh", "docker/exec.sh",
		"docker/network.sh", "docker/dialout.sh", "compose/compose.yaml",
		"docker/nc.sh", "docker/run-cgroup.sh", "docker/rm-cgroup.sh"} {
		file, err := os.ReadFile(filepath.Join("..", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		var block []string
		for _, line := range strings.Split(strings.TrimRight(string(file), "\n"), "\n") {
			if line != "" {
				line = "    " + line
			}
			block = append(block, line)
		}
		if !strings.Contains(section, "\n\n"+strings.Join(block, "\n")+"\n\n") {
			t.Errorf("the README's container section does not print deploy/%s as it is (an indented block of its whole text)", name)
		}
	}
}
