package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// readmeExample is one command of the README's netcat session and the
// replies the README shows for it.
type readmeExample struct {
	command string
	replies []map[string]any
}

// readmeNetcatSession reads the commands of docs/netcat.md's "A netcat session"
// section: every indented block that pipes into nc, and the JSON lines of the
// block that follows it.
func readmeNetcatSession(t *testing.T) []readmeExample {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", netcatDoc))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## A netcat session")
	if start < 0 {
		t.Fatal(netcatDoc + ` has no "## A netcat session" section`)
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

// comparable is a reply as docs/netcat.md must show it: every field,
// exactly, but for what varies from run to run or from host to host, whose
// value is replaced by its name (its presence still compared): the token,
// the paths, the version, the mechanism, durations, pids and start times,
// uids, and the kernel's usage figures.
// A survivor's argv in an executed reply is left out too: the reply can
// catch the child between its fork and its exec (the parent's argv); the
// verify after it shows the argv exactly. A survivor's session (its Linux
// session id, a pid) varies; a shell session's name ("s-1") does not.
func comparable(m map[string]any) map[string]any {
	out := normalized(m).(map[string]any)
	if m["kind"] == "executed" {
		if survivors, ok := out["survivors"].([]any); ok {
			for _, s := range survivors {
				if s, ok := s.(map[string]any); ok {
					s["argv"] = "<argv>"
				}
			}
		}
	}
	return out
}

// volatile names the fields whose values vary from run to run.
var volatile = map[string]bool{
	"token": true, "cwd": true, "version": true, "mechanism": true, "durationMs": true,
	"pid": true, "start": true, "uid": true,
	"cpuUserMs": true, "cpuSystemMs": true, "maxRssBytes": true, "processes": true, "readBytes": true, "writeBytes": true,
}

func normalized(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			_, text := x.(string)
			_, number := x.(float64)
			switch {
			case volatile[k], k == "scope" && text, k == "session" && number: // ready's scope is the mechanism's name
				out[k] = "<" + k + ">"
			default:
				out[k] = normalized(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalized(x)
		}
		return out
	}
	return v
}

// The README's netcat session is run as printed, against a relayd with
// make run's settings, and each reply is compared with the README's.
func TestReadmeNetcatSession(t *testing.T) {
	if _, err := exec.LookPath("nc"); err != nil {
		t.Skip("nc not installed (apt-get install netcat-openbsd; .ci/run installs it)")
	}
	examples := readmeNetcatSession(t)
	if len(examples) < 6 {
		t.Fatalf("found %d netcat commands in %s; want at least 6", len(examples), netcatDoc)
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
		if err := testharness.RunWithin(cmd, 30*time.Second); err != nil {
			t.Fatalf("%s: %v: %s", ex.command, err, stdout.String())
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
			t.Errorf("%s\ngot  %v\nwant %v (%s)", ex.command, got, want, netcatDoc)
		}
	}
}

// docs/deploy.md's container section prints the files of deploy/ that
// make container-test runs (deploy/docker/Dockerfile, run.sh, exec.sh,
// network.sh, dialout.sh and deploy/compose/compose.yaml) as they are.
func TestReadmeContainerExamplesAreTheTestedFiles(t *testing.T) {
	section := docSection(t, deployDoc, "## Putting relayd into an eval container")
	for _, name := range []string{"docker/Dockerfile", "docker/run.sh", "docker/exec.sh",
		"docker/network.sh", "docker/dialout.sh", "compose/compose.yaml",
		"docker/nc.sh", "docker/bridge.sh", "docker/run-cgroup.sh", "docker/rm-cgroup.sh"} {
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
			t.Errorf("docs/deploy.md's container section does not print deploy/%s as it is (an indented block of its whole text)", name)
		}
	}
}

// readmeSection returns the README's text from the heading title to the
// next heading of the same or a higher level.
func readmeSection(t *testing.T, title string) string { return docSection(t, "README.md", title) }

// deployDoc holds the recipes the README points to, netcatDoc the netcat
// session.
const (
	deployDoc = "docs/deploy.md"
	netcatDoc = "docs/netcat.md"
)

// docSection is readmeSection for file, a path from the module root.
func docSection(t *testing.T, file, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n"+title+"\n")
	if start < 0 {
		t.Fatalf("%s has no %q section", file, title)
	}
	text = text[start+1:]
	level := title[:strings.IndexByte(title, ' ')+1]
	for i := len(level); i >= 3; i-- {
		if end := strings.Index(text[1:], "\n"+level[:i-1]+" "); end >= 0 {
			text = text[:end+1]
		}
	}
	return text
}

// The README's Go controller is client/example_test.go's Example, which
// go test runs against a real relayd and whose output it checks: the
// README prints the function's lines from its README mark to its end.
func TestReadmeGoExampleIsTested(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "client", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	const mark = "\t// README begin\n"
	i := strings.Index(src, mark)
	j := -1
	if i >= 0 {
		j = strings.Index(src[i:], "\n}") // the end of Example
	}
	if i < 0 || j < 0 {
		t.Fatal("client/example_test.go has no README mark in Example")
	}
	var block []string
	for _, line := range strings.Split(src[i+len(mark):i+j], "\n") {
		line = strings.TrimPrefix(line, "\t")
		if line != "" {
			line = "    " + strings.ReplaceAll(line, "\t", "    ")
		}
		block = append(block, line)
	}
	if !strings.Contains(readmeSection(t, "### Go"), "\n"+strings.Join(block, "\n")+"\n") {
		t.Error("the README's Go section does not print client/example_test.go's Example (from its README mark) as it is")
	}
}

var (
	relayctlOnce sync.Once
	relayctlBin  string
	relayctlErr  error
)

// relayctl builds cmd/relayctl once for the tests that run it.
func relayctl(t *testing.T) string {
	t.Helper()
	relayctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relayd-e2e-relayctl-")
		if err != nil {
			relayctlErr = err
			return
		}
		afterAll = append(afterAll, func() { os.RemoveAll(dir) })
		relayctlBin = filepath.Join(dir, "relayctl")
		relayctlErr = testharness.Build(relayctlBin, "relayctl")
	})
	if relayctlErr != nil {
		t.Fatal(relayctlErr)
	}
	return relayctlBin
}

// readmeVaries replaces what varies from run to run in relayctl's output:
// durations, execution ids, the mechanism, the version, paths, pids and a
// survivor's argv (the reply can catch it before its exec).
var readmeVaries = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?(ns|µs|ms|s)\b`), "<duration>"},
	{regexp.MustCompile(`\(x-[0-9]+, (cgroup|process-group)\)`), "(<execution>, <mechanism>)"},
	{regexp.MustCompile(`^relayd \S+, protocol 1, scope (cgroup|process-group), workspace \S+$`), "relayd <version>, protocol 1, scope <mechanism>, workspace <dir>"},
	{regexp.MustCompile(`^relayctl:   survivor [0-9]+ .*$`), "relayctl:   survivor <pid> <argv>"},
	{regexp.MustCompile(`^(relayctl: --keep-port [0-9]+: keeping) [0-9, ]+$`), "$1 <pids>"},
}

func readmeNormal(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, v := range readmeVaries {
			l = v.re.ReplaceAllString(l, v.with)
		}
		out = append(out, l)
	}
	return out
}

// The README's relayctl session is run as printed (relayctl on the PATH,
// the token in .run/token, RELAYCTL_ADDR naming the relayd under test),
// and its output, stdout and stderr together, is compared with the
// README's.
func TestReadmeRelayctlSession(t *testing.T) {
	bin := relayctl(t)
	section := readmeSection(t, "### relayctl")
	var script, want []string
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		l, indented := strings.CutPrefix(line, "    ")
		if indented && (strings.HasPrefix(l, "$ ") || inBlock) {
			inBlock = true
			if cmd, ok := strings.CutPrefix(l, "$ "); ok {
				script = append(script, cmd)
			} else {
				want = append(want, l)
			}
			continue
		}
		if inBlock {
			break // the session is the first such block
		}
	}
	if len(script) < 5 {
		t.Fatalf("found %d relayctl commands in the README; want at least 5", len(script))
	}
	d := startRelayd(t, opts{})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".run"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".run", "token"), []byte(d.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "exec 2>&1\n"+strings.Join(script, "\n"))
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "RELAYCTL_ADDR="+d.addr)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := testharness.RunWithin(cmd, 60*time.Second); err != nil {
		t.Fatalf("the README's relayctl session: %v; output:\n%s", err, out.String())
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	for _, l := range got {
		if m := regexp.MustCompile(`survivor ([0-9]+) `).FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[1])
			t.Cleanup(func() { killPid(pid) }) // the README's service, started by this test
		}
	}
	if g, w := readmeNormal(got), readmeNormal(want); !reflect.DeepEqual(g, w) {
		t.Errorf("the README's relayctl session printed\n%s\nwant (README.md)\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	d.stopClean()
}

// The README is a front door (issue 21): at most 32 KiB (30 until each
// framework got its checklist of what a user changes, issue 45); recipes
// live in docs/deploy.md, figures in docs/performance.md, history in git.
func TestReadmeIsAFrontDoor(t *testing.T) {
	fi, err := os.Stat(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 32*1024 {
		t.Fatalf("README.md is %d bytes; want at most %d: move recipes to docs/deploy.md, figures to docs/performance.md", fi.Size(), 32*1024)
	}
	for _, doc := range []string{deployDoc, netcatDoc, "docs/performance.md"} {
		if _, err := os.Stat(filepath.Join("..", doc)); err != nil {
			t.Errorf("the README points to %s: %v", doc, err)
		}
	}
}

// docs/protocol.md is the contract and relayd's choices, not a diary
// (issues 21 and 43): at most 130,000 bytes, one numbering (the
// contract's), each choice beside the rule it refines rather than in a
// numbered list of its own; and no document points into a numbering that
// no longer exists.
func TestDocProtocolIsARefinement(t *testing.T) {
	const doc, limit = "docs/protocol.md", 130000
	b, err := os.ReadFile(filepath.Join("..", doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > limit {
		t.Errorf("%s is %d bytes; want at most %d: state each choice tersely, beside its rule; history lives in git", doc, len(b), limit)
	}
	// The contract's section numbers: those of the relayd wire protocol,
	// version 1, so that a number means the same to every implementation.
	contract := map[string]bool{"1": true, "2": true, "3": true, "4": true, "5": true, "6": true, "7": true, "8": true, "9": true}
	for i := 1; i <= 9; i++ {
		contract["4."+strconv.Itoa(i)] = true
	}
	for i := 1; i <= 13; i++ {
		contract["6."+strconv.Itoa(i)] = true
	}
	// What the contract's subsections of section 4 are about: a number
	// here means what it means there.
	titled := map[string]string{"4.1": "ready", "4.2": "execute", "4.3": "verify", "4.4": "error", "4.5": "harness", "4.6": "trial", "4.7": "Terminals", "4.8": "limits"}
	m2 := func(m []string) string {
		if m == nil {
			return ""
		}
		return m[1]
	}
	numbered := regexp.MustCompile(`^#+\s+([0-9]+(?:\.[0-9]+)*)\.?\s`)
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		m := numbered.FindStringSubmatch(line)
		if m != nil && !contract[m[1]] {
			t.Errorf("%s:%d: %q is numbered %s, outside the contract's numbering (1-3, 4.1-4.9, 5, 6.1-6.13, 7-9)", doc, i+1, line, m[1])
		}
		if w, ok := titled[m2(m)]; ok && !strings.Contains(line, w) {
			t.Errorf("%s:%d: %q: the contract's section %s is about %s", doc, i+1, line, m[1], w)
		}
		if strings.Contains(strings.ToLower(line), "choices where the contract is silent") {
			t.Errorf("%s:%d: %q: a section of choices is a diary; put each beside the rule it refines", doc, i+1, line)
		}
	}
	stale := regexp.MustCompile(`(?i)\b(sections? 1[0-9](\.[0-9]+)?|choice [0-9]+|item [0-9]+)\b`)
	for _, f := range []string{doc, "README.md", "SECURITY.md", "ARCHITECTURE.md", deployDoc, netcatDoc, "docs/controllers.md", "docs/performance.md", "docs/scopes.md"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := stale.FindString(line); m != "" {
				t.Errorf("%s:%d: %q points into the old numbering of %s; use the contract's", f, i+1, m, doc)
			}
		}
	}
}

// The README's Harbor-style trial is run as printed, each command a
// relayctl of its own, with two substitutions: a free port for 8000, and
// TMUX_TMPDIR in the test's directory, so that "tmux -L agent" is the
// test's own tmux server. Before the boundary it waits for the agent's
// service and loop, as a person reading along would; then the loop has
// stopped and the service answers.
func TestReadmeHarborTrial(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install tmux; .ci/run installs it)")
	}
	bin := relayctl(t)
	section := readmeSection(t, "### A Harbor-style trial")
	port := strconv.Itoa(freeTCPPort(t))
	var script, want []string
	for _, line := range strings.Split(section, "\n") {
		l, ok := strings.CutPrefix(line, "    ")
		if !ok {
			continue
		}
		l = strings.ReplaceAll(l, "8000", port)
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			script = append(script, cmd)
		} else {
			want = append(want, l)
		}
	}
	if len(script) != 4 || !strings.Contains(script[3], "--keep-port "+port) {
		t.Fatalf("the README's Harbor-style trial: %q; want three execs and a verify --keep-port", script)
	}
	tmuxDir := t.TempDir()
	d := startRelayd(t, opts{env: []string{"TMUX=", "TMUX_TMPDIR=" + tmuxDir}})
	t.Cleanup(func() {
		out, _ := exec.Command("tmux", "-L", "agent", "display-message", "-p", "#{pid}").Output()
		if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			killPid(pid) // the agent's tmux server, if the test failed before the boundary
		}
	})
	t.Setenv("TMUX_TMPDIR", tmuxDir) // for the cleanup's tmux
	run := func(line string) string {
		t.Helper()
		cmd := exec.Command("bash", "-c", "exec 2>&1\n"+line)
		cmd.Dir = d.workspace
		cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "RELAYCTL_ADDR="+d.addr,
			"RELAYD_TOKEN="+d.token)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := testharness.RunWithin(cmd, 60*time.Second); err != nil {
			t.Fatalf("%s: %v; output:\n%s", line, err, out.String())
		}
		return out.String()
	}
	for _, line := range script[:3] {
		run(line)
	}
	beat := filepath.Join(d.workspace, "beat")
	portN, _ := strconv.Atoi(port)
	waitFor(t, 15*time.Second, "the agent's service and loop", func() bool {
		_, err := os.Stat(beat)
		return err == nil && dialsOK(portN)
	})
	got := strings.Split(strings.TrimRight(run(script[3]), "\n"), "\n")
	settled := regexp.MustCompile(`, [0-9]+ settled,`)
	norm := func(lines []string) []string {
		out := readmeNormal(lines)
		for i := range out {
			out[i] = settled.ReplaceAllString(out[i], ", <n> settled,")
		}
		return out
	}
	if g, w := norm(got), norm(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("the README's boundary printed\n%s\nwant (README.md)\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if beating(beat) {
		t.Fatal("the agent's loop still beats after the README's boundary")
	}
	if !dialsOK(portN) {
		t.Fatal("the kept service does not answer after the README's boundary")
	}
	run("relayctl verify --settle-survivors")
	d.stopClean()
}

// The README's Kubernetes settings work with the Pods as shipped: the
// path it gives relayd is where their init container installs it, the
// container and the Pod's name are theirs (TRIAL- is trial.sh's prefix).
func TestReadmeKubernetesSettingsFitThePods(t *testing.T) {
	section := readmeSection(t, "### On Kubernetes")
	for _, base := range []string{"baseline", "restricted"} {
		b, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", base, "pod.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		pod := string(b)
		for _, want := range []struct{ readme, pod string }{
			{"`/opt/relayd/relayd`", `"install", "/opt/relayd/relayd"]`},
			{"`/opt/relayd/relayd bridge`", `"install", "/opt/relayd/relayd"]`},
			{"`kube_container: task`", "\n    - name: task\n"},
			{"`pod: TRIAL-relayd-trial`", "\n  name: relayd-trial\n"},
		} {
			if !strings.Contains(section, want.readme) {
				t.Errorf("README.md's Kubernetes section does not say %s", want.readme)
			}
			if !strings.Contains(pod, want.pod) {
				t.Errorf("deploy/kubernetes/%s/pod.yaml has no %q, which the README's %s relies on", base, want.pod, want.readme)
			}
		}
	}
}

// Every make target the Makefile documents (a "## name:" line above its
// rule) is named in the README, task-image included: a newcomer looking
// for a task image finds how to make one.
func TestReadmeNamesEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^## ([a-z-]+):`).FindAllStringSubmatch(string(mk), -1) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).Match(mk) {
			continue // a continuation of the comment above, not a target
		}
		if !strings.Contains(string(readme), "make "+m[1]+"`") && !strings.Contains(string(readme), "make "+m[1]+" ") {
			t.Errorf("README.md does not name make %s", m[1])
		}
	}
}

// The README's example harness line is the one examples/harness.py's
// docstring gives (one image name), and the README says where that image
// comes from: docs/deploy.md, where deploy/docker/Dockerfile is shown.
func TestReadmeHarnessImage(t *testing.T) {
	line := regexp.MustCompile(`python3 examples/harness\.py --image \S+`)
	section := readmeSection(t, "### Python")
	inReadme := line.FindString(section)
	script, err := os.ReadFile(filepath.Join("..", "examples", "harness.py"))
	if err != nil {
		t.Fatal(err)
	}
	if inScript := line.FindString(string(script)); inReadme == "" || inReadme != inScript {
		t.Errorf("README.md runs %q; examples/harness.py's docstring %q: want one image name", inReadme, inScript)
	}
	rest := section[strings.Index(section, inReadme):]
	rest = rest[:strings.Index(rest, "It prints")]
	if !strings.Contains(rest, "(docs/deploy.md") {
		t.Errorf("README.md's harness paragraph does not point to docs/deploy.md for its image:\n%s", rest)
	}
}
