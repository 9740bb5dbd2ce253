//go:build docker

package e2e

// The README's compose example, deploy/compose/compose.yaml, run as it is
// with a project name of the test's own: relayd as a non-root user dials a
// controller in another container of the project. Then a controller that
// vanishes without closing: cut off from the project's network while an
// execution runs.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// composeCommand is how compose is run here: Debian's docker-compose (1.29),
// else the docker compose plugin.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	if _, err := docker(10*time.Second, "compose", "version"); err == nil {
		return []string{"docker", "compose"}
	}
	t.Skip("neither docker-compose nor docker compose is installed (apt-get install docker-compose)")
	return nil
}

// composeProject is one compose project a test brought up.
type composeProject struct {
	t     *testing.T
	cmd   []string // compose, -p NAME and the -f files
	env   []string
	name  string
	token string
}

// upCompose brings deploy/compose/compose.yaml up (with extra override
// files after it) under a fresh project name, with relayd's image, and a
// token file owned by uid 1000, mode 0400, the services' user. Its cleanup
// takes the project down: containers, network, volumes.
func upCompose(t *testing.T, overrides ...string) *composeProject {
	t.Helper()
	image := evalImage(t)
	compose := composeCommand(t)
	token, tokenFile := writeToken(t, 1000, 1000, 0o400)
	p := &composeProject{t: t, name: "relaydtest" + strings.TrimPrefix(newToken(), "tok-")[:12], token: token,
		env: append(cleanEnv(), "IMAGE="+image, "TOKEN_FILE="+tokenFile)}
	p.cmd = append(compose, "-p", p.name, "-f", filepath.Join("..", "deploy", "compose", "compose.yaml"))
	for _, o := range overrides {
		p.cmd = append(p.cmd, "-f", o)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.run(30*time.Second, "logs", "--no-color")
			t.Logf("compose logs:\n%s", tail(logs, 8000))
		}
		if out, err := p.run(2*time.Minute, "down", "--volumes", "--remove-orphans", "--timeout", "1"); err != nil {
			t.Errorf("compose down: %v: %s", err, out)
		}
	})
	if out, err := p.run(2*time.Minute, "up", "--detach"); err != nil {
		t.Fatalf("compose up: %v: %s", err, out)
	}
	return p
}

func (p *composeProject) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.cmd[0], append(append([]string{}, p.cmd[1:]...), args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return string(out), err
}

// container is the id of the service's container, found by compose's
// labels, which docker-compose and docker compose both set (their names
// differ).
func (p *composeProject) container(service string) string {
	p.t.Helper()
	id := mustDocker(p.t, "ps", "--all", "--quiet", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+p.name,
		"--filter", "label=com.docker.compose.service="+service)
	if id == "" || strings.Contains(id, "\n") {
		p.t.Fatalf("compose project %s: want one container of %s, docker ps lists %q", p.name, service, id)
	}
	return id
}

// exitCode waits, bounded, for the service's container to stop.
func (p *composeProject) exitCode(service string, timeout time.Duration) string {
	p.t.Helper()
	out, err := docker(timeout, "wait", p.container(service))
	if err != nil {
		p.t.Fatalf("%s did not stop within %s: %v", service, timeout, err)
	}
	return strings.TrimSpace(out)
}

// The README's compose example as printed: relayd runs as uid 1000 and
// reads its token from a file secret owned by that uid, mode 0400; it
// dials the controller by its service name, runs id -u for it, answers
// verify and exits 0, and the task container with it; the controller exits
// 0 (verified, quiescent). The stop grace is the README's, above
// --teardown-timeout.
func TestDockerComposeDialOut(t *testing.T) {
	p := upCompose(t)
	if code := p.exitCode("task", time.Minute); code != "0" {
		t.Fatalf("the task container (relayd) exited %s; want 0 after verify", code)
	}
	if code := p.exitCode("controller", 30*time.Second); code != "0" {
		t.Fatalf("the controller exited %s; want 0 (verified, quiescent)", code)
	}
	logs := mustDocker(t, "logs", p.container("controller"))
	var replies []msg
	for _, line := range strings.Split(logs, "\n") {
		var m msg
		if json.Unmarshal([]byte(line), &m) == nil {
			replies = append(replies, m)
		}
	}
	if len(replies) != 3 || replies[0]["kind"] != "ready" || replies[1]["kind"] != "executed" || replies[2]["kind"] != "verified" {
		t.Fatalf("the controller printed %q; want ready, executed, verified", logs)
	}
	if replies[1]["stdout"] != "1000\n" || replies[1]["exitCode"] != float64(0) {
		t.Fatalf("id -u through relayd: got %v; want 1000, exit 0 (relayd runs as the compose file's user)", replies[1])
	}
	task := p.container("task")
	if grace := mustDocker(t, "inspect", "--format", "{{.Config.StopTimeout}}", task); grace != "15" {
		t.Fatalf("stop_grace_period gives a stop timeout of %s s; want the README's 15", grace)
	}
	taskLogs := mustDocker(t, "logs", task)
	if !strings.Contains(taskLogs, "exiting: session verified") {
		t.Fatalf("relayd's log does not say it exited after verify: %s", taskLogs)
	}
	if strings.Contains(taskLogs+logs, p.token) {
		t.Fatal("a log holds the token")
	}
}

// peerTimeoutInContainer is the --peer-timeout (RELAYD_PEER_TIMEOUT) the
// vanishing-controller test gives relayd.
const peerTimeoutInContainer = 3 * time.Second

// A controller that vanishes without closing: while its execution (sleep
// 300) runs, the controller's container is disconnected from the
// project's network, so no FIN or reset ever reaches relayd and its
// packets go unanswered. relayd must count the peer as gone within
// --peer-timeout (3 s here) and settle: the test measures, from relayd's
// docker logs, when the settlement began after the cut, and checks with
// docker top that the subject is gone within --peer-timeout + one probe
// interval + --teardown-timeout. relayd is not PID 1 here (a shell that
// keeps the container up after it), so the kernel's end of a PID
// namespace cannot be what removed the subject; relayd exits 3 (the
// session ended without verify, every settlement confirmed).
func TestDockerComposeVanishingController(t *testing.T) {
	override := filepath.Join(t.TempDir(), "vanish.yaml")
	if err := os.WriteFile(override, []byte(`services:
  controller:
    command: ["exec sleep 300"]
  task:
    environment:
      RELAYD_PEER_TIMEOUT: `+peerTimeoutInContainer.String()+`
    entrypoint: ["/bin/sh", "-c", "/usr/local/bin/relayd --connect controller:7700 --token-file /run/secrets/token --workspace /workspace; echo relayd exited $$?; exec sleep 600"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := upCompose(t, override)
	task, controller := p.container("task"), p.container("controller")
	hasSubject := func() bool {
		out, err := docker(10*time.Second, "top", task, "-eo", "pid,args")
		if err != nil {
			t.Fatalf("docker top: %v", err)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[1] == "sleep" && f[2] == "300" {
				return true
			}
		}
		return false
	}
	waitFor(t, 30*time.Second, "the execution (sleep 300) to run in the task container", hasSubject)

	network := p.name + "_default"
	if out, err := docker(10*time.Second, "network", "inspect", network); err != nil {
		network = p.name + "-default" // docker compose (v2) names it so
		if _, err2 := docker(10*time.Second, "network", "inspect", network); err2 != nil {
			t.Fatalf("the project's network: %v: %s", err, out)
		}
	}
	mustDocker(t, "network", "disconnect", network, controller)
	cut := time.Now()

	const teardown = 10 * time.Second // relayd's default --teardown-timeout
	probe := time.Second              // a third of --peer-timeout, rounded up to a second
	bound := peerTimeoutInContainer + probe + teardown
	var detected, gone time.Duration
	waitFor(t, bound+5*time.Second, "relayd to settle the vanished controller's execution", func() bool {
		if detected == 0 {
			logs, _ := docker(10*time.Second, "logs", task)
			if strings.Contains(logs, `"message":"settling scope"`) && strings.Contains(logs, "peer unreachable") {
				detected = time.Since(cut)
			}
		}
		if detected != 0 && !hasSubject() {
			gone = time.Since(cut)
			return true
		}
		return false
	})
	// The margin is the test's polling: docker logs, then docker top, each
	// a docker CLI call, slow on a loaded machine. Without --peer-timeout
	// this takes minutes.
	if detected > peerTimeoutInContainer+probe+3*time.Second {
		t.Fatalf("relayd noticed the vanished controller %s after the cut; want within --peer-timeout %s + one probe interval %s (+3 s for the test's polling)",
			detected, peerTimeoutInContainer, probe)
	}
	if gone > bound {
		t.Fatalf("the subject was gone %s after the cut; want within %s", gone, bound)
	}
	waitFor(t, 15*time.Second, "relayd to exit", func() bool {
		logs, _ := docker(10*time.Second, "logs", task)
		return strings.Contains(logs, "relayd exited")
	})
	logs := mustDocker(t, "logs", task)
	var ended msg
	for _, line := range strings.Split(logs, "\n") {
		var m msg
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "execution ended" {
			ended = m
		}
	}
	if ended["termination"] != "framework_timeout" || ended["settlement"] != "settled" {
		t.Fatalf("execution ended %v; want framework_timeout, settled", ended)
	}
	if !strings.Contains(logs, "relayd exited 3") {
		t.Fatalf("relayd's exit: want 3 (no verify, every settlement confirmed): %s", tail(logs, 2000))
	}
	if strings.Contains(logs, p.token) {
		t.Fatal("relayd's log holds the token")
	}
	t.Logf("--peer-timeout %s: relayd began settling %s after the controller was cut off; the subject was gone after %s",
		peerTimeoutInContainer, detected.Round(10*time.Millisecond), gone.Round(10*time.Millisecond))
}
