//go:build docker

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The example harness (examples/harness.py, on the Python client) runs its
// four trials in one task container made the README's way, recycled
// between them (protocol 4.9), and prints the outcome a harness records
// for each: a solver passes, a service its agent left running survives
// into the verifier, a wrong answer fails, and an agent past its deadline
// is settled and recorded as a timeout; each lists the files its agent
// changed, as added, since the recycling put the workspace back each
// time. Every container it started is gone afterwards.
func TestDockerExampleHarness(t *testing.T) {
	image := evalImage(t)
	const python = "/usr/bin/python3" // the system's interpreter, as make pytest uses
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s: %v (apt-get install python3; .ci/run installs it)", python, err)
	}
	script := filepath.Join("..", "examples", "harness.py")
	text, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n >= 150 {
		t.Fatalf("examples/harness.py has %d lines; the example must stay under 150", n)
	}
	prefix := "relayd-test-example-" + strings.TrimPrefix(newToken(), "tok-")[:8] + "-"
	leftovers := func() string {
		return mustDocker(t, "ps", "--all", "--quiet", "--filter", "name=^/"+prefix)
	}
	t.Cleanup(func() {
		if ids := strings.Fields(leftovers()); len(ids) > 0 {
			_, _ = docker(time.Minute, append([]string{"rm", "--force", "--volumes"}, ids...)...)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-X", "dev", "-W", "error", script,
		"--image", image, "--name-prefix", prefix, "--deadline", "5")
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("examples/harness.py: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("examples/harness.py wrote to stderr (a warning?):\n%s", stderr.String())
	}
	t.Logf("examples/harness.py printed:\n%s", stdout.String())

	// One line per trial: trial=NAME key=value ... result=TEXT (last, may hold spaces).
	got := map[string]map[string]string{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		rec := map[string]string{}
		head, result, _ := strings.Cut(line, " result=")
		rec["result"] = result
		for _, kv := range strings.Fields(head) {
			k, v, _ := strings.Cut(kv, "=")
			rec[k] = v
		}
		got[rec["trial"]] = rec
		order = append(order, rec["trial"])
	}
	if strings.Join(order, ",") != "solver,service,wrong,slowpoke" {
		t.Fatalf("trials printed %v; want solver, service, wrong, slowpoke, one line each", order)
	}
	want := map[string]map[string]string{
		"solver":   {"outcome": "passed", "agent": "exited/0", "settlement": "none", "survivors": "0", "verifier": "0", "diagnostic": "none", "changed": "A:answer.txt", "recycled": "yes", "result": `{"answer":42}`},
		"service":  {"outcome": "passed", "agent": "exited/0", "settlement": "none", "survivors": "1", "verifier": "0", "diagnostic": "none", "changed": "A:answer.txt,A:service.pid", "recycled": "yes", "result": `{"answer":42}`},
		"wrong":    {"outcome": "failed", "agent": "exited/1", "settlement": "none", "survivors": "0", "verifier": "1", "diagnostic": "result-frame-missing", "changed": "A:answer.txt", "recycled": "yes", "result": "-"},
		"slowpoke": {"outcome": "agent_timeout", "agent": "framework_timeout/124", "settlement": "settled", "survivors": "0", "verifier": "1", "diagnostic": "result-frame-missing", "changed": "-", "recycled": "yes", "result": "-"},
	}
	for trial, fields := range want {
		for k, v := range fields {
			if got[trial][k] != v {
				t.Errorf("trial %s: %s=%q; want %q", trial, k, got[trial][k], v)
			}
		}
	}
	// The README prints these lines too: the same but for the seconds.
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seconds := regexp.MustCompile(` seconds=[0-9.]+`)
	var printed []string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "    trial=") {
			printed = append(printed, seconds.ReplaceAllString(strings.TrimPrefix(line, "    "), ""))
		}
	}
	if ran := seconds.ReplaceAllString(strings.TrimSpace(stdout.String()), ""); strings.Join(printed, "\n") != ran {
		t.Errorf("README.md shows the example printing\n%s\nbut it printed (seconds aside)\n%s", strings.Join(printed, "\n"), ran)
	}
	if ids := leftovers(); ids != "" {
		t.Errorf("containers the example started are still there: %s", ids)
	}
}
