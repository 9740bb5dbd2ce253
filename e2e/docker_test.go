//go:build docker

package e2e

// Tests under a real Docker engine (make container-test): relayd's image
// (make image), added to a Debian task image (deploy/test/build-task-image.sh)
// with deploy/docker/Dockerfile, started with deploy/docker/run.sh, both of
// which the README prints. Each container is checked from outside: through
// its published port, docker top, docker inspect and the host's /proc.
// Every container a test starts is removed by its cleanup; the image built
// for this run is removed once all tests ran.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The images make container-test provides; RELAYD_IMAGE and
// RELAYD_TASK_IMAGE name others.
func relaydImage() string { return envOr("RELAYD_IMAGE", "relayd:dev") }
func taskImage() string   { return envOr("RELAYD_TASK_IMAGE", "relayd-test-task:bookworm") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// docker runs the docker CLI, bounded by timeout, and returns its output
// (stdout and stderr).
func docker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("docker %s: no answer within %s", args[0], timeout)
	} else if err != nil {
		err = fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), err
}

// mustDocker is docker for a step the test cannot go on without.
func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := docker(time.Minute, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

var (
	evalOnce sync.Once
	evalTag  string
	evalErr  error
)

// evalImage builds, once per run, the task image with relayd added the way
// the README says: deploy/docker/Dockerfile. TestMain removes it at the end.
func evalImage(t *testing.T) string {
	t.Helper()
	if _, err := docker(10*time.Second, "info"); err != nil {
		t.Skipf("docker not answering: %v", err)
	}
	evalOnce.Do(func() {
		for _, img := range []string{relaydImage(), taskImage()} {
			if _, err := docker(10*time.Second, "image", "inspect", img); err != nil {
				evalErr = fmt.Errorf("image %s missing: make container-test builds it (make image, deploy/test/build-task-image.sh)", img)
				return
			}
		}
		tag := fmt.Sprintf("relayd-test-eval:run-%d", os.Getpid())
		_, evalErr = docker(3*time.Minute, "build", "--quiet", "-f", filepath.Join("..", "deploy", "docker", "Dockerfile"),
			"--build-arg", "RELAYD_IMAGE="+relaydImage(), "--build-arg", "TASK_IMAGE="+taskImage(), "-t", tag, "..")
		if evalErr == nil {
			evalTag = tag
			afterAll = append(afterAll, func() { _, _ = docker(time.Minute, "rmi", tag) })
		}
	})
	if evalErr != nil {
		t.Fatal(evalErr)
	}
	return evalTag
}

// trial is one container started with the README's docker run.
type trial struct {
	t         *testing.T
	name      string
	token     string
	tokenFile string
	image     string
	addr      string // the published port on 127.0.0.1
}

// startTrial runs a script of deploy/docker that the README prints (run.sh:
// relayd as PID 1; exec.sh: relayd started into a running container), with
// env (NAME=value) added to the variables it gets.
func startTrial(t *testing.T, script string, env ...string) *trial {
	t.Helper()
	return startTrialText(t, script, readDeploy(t, script), env...)
}

// readDeploy returns the text of a script of deploy/docker.
func readDeploy(t *testing.T, script string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "deploy", "docker", script))
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// startTrialText is startTrial with the script's text given: a variant of
// one the README prints.
func startTrialText(t *testing.T, script, text string, env ...string) *trial {
	t.Helper()
	tr := newTrial(t)
	if err := tr.run(script, text, env...); err != nil {
		t.Fatal(err)
	}
	return tr
}

// newTrial names a trial, makes its token and token file and registers the
// removal of its container; tr.run starts it.
func newTrial(t *testing.T) *trial {
	t.Helper()
	tr := &trial{t: t, name: "relayd-test-" + strings.TrimPrefix(newToken(), "tok-")[:12], token: newToken(), image: evalImage(t)}
	// The token file: owned by the container's user (root here), mode 0600,
	// mounted read-only; never on a command line.
	tr.tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tr.tokenFile, []byte(tr.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker(30*time.Second, "logs", tr.name)
			t.Logf("docker logs %s:\n%s", tr.name, tail(logs, 6000))
		}
		if _, err := docker(time.Minute, "rm", "--force", "--volumes", tr.name); err != nil && !strings.Contains(err.Error(), "No such container") {
			t.Errorf("removing %s: %v", tr.name, err)
		}
	})
	return tr
}

// run runs the script that starts the trial's container and reads the
// published address it prints last. It does not touch tr.t: it may run on
// any goroutine.
func (tr *trial) run(script, text string, env ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", text)
	cmd.Env = append(append(cleanEnv(), "TRIAL="+tr.name, "TOKEN_FILE="+tr.tokenFile, "IMAGE="+tr.image), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("deploy/docker/%s: %v: %s", script, err, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) > 0 {
		tr.addr = lines[len(lines)-1]
	}
	if host, _, err := net.SplitHostPort(tr.addr); err != nil || host != "127.0.0.1" {
		return fmt.Errorf("deploy/docker/%s: docker port printed %q; want 127.0.0.1:PORT", script, out)
	}
	return nil
}

// connect retries until relayd answers ready through the published port
// (docker's proxy accepts connections before relayd listens) and returns
// the client and the ready reply.
func (tr *trial) connect() (*client, msg) {
	t := tr.t
	t.Helper()
	c, r, m, err := tr.handshake(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: r, token: tr.token}, m
}

// handshake is connect without tr.t, for any goroutine: the connection,
// its reader and the ready reply.
func (tr *trial) handshake(timeout time.Duration) (net.Conn, *bufio.Reader, msg, error) {
	deadline := time.Now().Add(timeout)
	hello, _ := json.Marshal(msg{"token": tr.token, "kind": "ready"})
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", tr.addr, 2*time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			r := bufio.NewReaderSize(c, 1<<20)
			var line []byte
			if _, err = c.Write(append(hello, '\n')); err == nil {
				line, err = r.ReadBytes('\n')
			}
			if err == nil {
				var m msg
				d := json.NewDecoder(bytes.NewReader(line))
				d.UseNumber()
				if err := d.Decode(&m); err != nil || m["kind"] != "ready" {
					c.Close()
					return nil, nil, nil, fmt.Errorf("handshake with %s: got %q; want ready", tr.name, line)
				}
				_ = c.SetDeadline(time.Time{})
				return c, r, m, nil
			}
			c.Close()
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, nil, nil, fmt.Errorf("relayd in %s did not answer ready on %s within %s: %v", tr.name, tr.addr, timeout, last)
}

// exec runs a command inside the container and returns its output.
func (tr *trial) exec(args ...string) string {
	tr.t.Helper()
	return mustDocker(tr.t, append([]string{"exec", tr.name}, args...)...)
}

// processes lists the container's processes as docker top sees them from
// the host: host pid and command line.
func (tr *trial) processes() map[int]string {
	tr.t.Helper()
	out := mustDocker(tr.t, "top", tr.name, "-eo", "pid,args")
	procs := map[int]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || (len(f) == 2 && f[1] == "relayd-shim") {
			continue // relayd's own: an idle shim, ready for the next execution
		}
		if pid, err := strconv.Atoi(f[0]); err == nil {
			procs[pid] = strings.Join(f[1:], " ")
		}
	}
	return procs
}

func (tr *trial) inspect(format string) string {
	tr.t.Helper()
	return mustDocker(tr.t, "inspect", "--format", format, tr.name)
}

// waitExit waits, bounded, for the container to stop and returns its exit code.
func (tr *trial) waitExit(timeout time.Duration) int {
	tr.t.Helper()
	out, err := docker(timeout, "wait", tr.name)
	if err != nil {
		tr.t.Fatalf("container %s did not stop within %s: %v", tr.name, timeout, err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		tr.t.Fatalf("docker wait printed %q", out)
	}
	return code
}

// wantMechanism is the scope mechanism relayd should pick in a container
// with Docker's defaults, read from the container's own mount table: cgroup
// only where a cgroup2 hierarchy is mounted writable. On this project's
// machines (a cgroup v1 host, runc 1.1) no cgroup2 is mounted in a
// container at all: the host's hybrid /sys/fs/cgroup/unified stays outside.
func (tr *trial) wantMechanism() (mech, why string) {
	tr.t.Helper()
	var mounts []string
	for _, line := range strings.Split(tr.exec("cat", "/proc/1/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 8 && f[len(f)-3] == "cgroup2" {
			mounts = append(mounts, f[5])
		}
	}
	if len(mounts) == 0 {
		return "process-group", "lists no cgroup2 mount"
	}
	for _, opts := range mounts {
		if !strings.HasPrefix(opts, "ro") {
			return "cgroup", ""
		}
	}
	return "process-group", "cgroup v2 unusable"
}

// relayd as the entrypoint (PID 1) of an unprivileged container with
// Docker's defaults: the checks of checkTrial, then a clean docker stop.
func TestDockerEntrypoint(t *testing.T) {
	tr := startTrial(t, "run.sh")
	c, ready := tr.connect()
	if comm := tr.exec("cat", "/proc/1/comm"); comm != "relayd" {
		t.Fatalf("PID 1 of the container is %q; want relayd", comm)
	}
	tr.check(c, ready, 1)
	// docker stop: SIGTERM to relayd, which leaves the service alone and
	// exits 0.
	if _, err := docker(30*time.Second, "stop", tr.name); err != nil {
		t.Fatal(err)
	}
	if code := tr.waitExit(10 * time.Second); code != 0 {
		t.Fatalf("container exited %d after docker stop; want 0", code)
	}
}

// relayd started with docker exec --detach into a running task container:
// not PID 1, a child subreaper; the same checks, then relayd's own SIGTERM
// (docker stop would reach only the container's PID 1).
func TestDockerExecDetached(t *testing.T) {
	tr := startTrial(t, "exec.sh")
	c, ready := tr.connect()
	if comm := tr.exec("cat", "/proc/1/comm"); comm != "sleep" {
		t.Fatalf("PID 1 of the container is %q; want the task's own (sleep)", comm)
	}
	tr.check(c, ready, 2)
	tr.exec("pkill", "-TERM", "-x", "relayd")
	waitFor(t, 15*time.Second, "relayd to exit after SIGTERM", func() bool {
		for _, args := range tr.processes() {
			if strings.Contains(args, "relayd") {
				return false
			}
		}
		return true
	})
}

// check runs what every way of starting relayd in a container must pass:
// ready reports the mechanism the container's mounts allow; a framework
// timeout settles a setsid + double-fork + TERM-ignoring tree (docker top
// then lists only the base processes: relayd, and the task's own PID 1
// when relayd is not it); a subject that exits by itself leaves its
// service running, and executed and verify list it.
func (tr *trial) check(c *client, ready msg, base int) {
	t := tr.t
	t.Helper()
	mech, why := tr.wantMechanism()
	if ready["scope"] != mech {
		t.Fatalf("ready.scope = %v; want %s", ready["scope"], mech)
	}
	// relayd's log reaches docker logs only as the entrypoint; docker exec
	// --detach discards it.
	if logs := mustDocker(t, "logs", tr.name); why != "" && base == 1 && !strings.Contains(logs, why) {
		t.Fatalf("relayd's log does not say why it chose %s (want %q): %s", mech, why, logs)
	}
	if procs := tr.processes(); len(procs) != base {
		t.Fatalf("a fresh container runs %v; want %d base processes", procs, base)
	}

	// A framework timeout settles a tree that left the session, double-forked
	// and ignores SIGTERM.
	tree := `
setsid sh -c 'trap "" TERM; echo $$ >> /workspace/tree.pid; sleep 300 & echo $! >> /workspace/tree.pid; wait' &
( setsid sh -c 'trap "" TERM; echo $$ >> /workspace/tree.pid; exec sleep 301' & )
sh -c 'trap "" TERM; echo $$ >> /workspace/tree.pid; while :; do sleep 1; done' &
echo $$ >> /workspace/tree.pid
exec sleep 302`
	c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", tree}, "timeoutMs": 1500})
	r := c.read(20 * time.Second)
	wantExit(t, r, "framework_timeout", 124)
	if scope, _ := r["scope"].(map[string]any); r["settlement"] != "settled" || scope["mechanism"] != mech {
		t.Fatalf("settlement %v scope %v; want settled under %s", r["settlement"], r["scope"], mech)
	}
	if n := len(strings.Fields(tr.exec("cat", "/workspace/tree.pid"))); n < 5 {
		t.Fatalf("only %d of 5 processes of the tree recorded their pid: the tree did not start", n)
	}
	if procs := tr.processes(); len(procs) != base {
		t.Fatalf("after the settlement docker top lists %v; want the %d base processes only", procs, base)
	}

	// A subject that exits by itself leaves its service running; executed
	// and verify list it.
	r = c.sh(`sleep 303 </dev/null >/dev/null 2>&1 & echo $! > /workspace/svc.pid; exit 0`, nil)
	wantExit(t, r, "exited", 0)
	svc, err := strconv.Atoi(tr.exec("cat", "/workspace/svc.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if !contains(survivorPids(t, r), svc) {
		t.Fatalf("survivors %v do not list the service %d", r["survivors"], svc)
	}
	found := false
	for _, args := range tr.processes() {
		found = found || args == "sleep 303"
	}
	if !found {
		t.Fatal("docker top does not list the service: it did not keep running")
	}
	v := c.request(msg{"kind": "verify"})
	if v["kind"] != "verified" || v["quiescent"] != true || !contains(survivorPids(t, v), svc) {
		t.Fatalf("verify: got %v; want quiescent with the service %d among survivors", v, svc)
	}
}

// docker stop while an execution runs: relayd settles it (SIGTERM, grace,
// SIGKILL), the controller gets executed, and the container exits 0 well
// within the stop timeout the README's docker run gives (15 s).
func TestDockerStopSettles(t *testing.T) {
	tr := startTrial(t, "run.sh")
	c, _ := tr.connect()
	c.send(msg{"kind": "execute", "id": "busy", "command": "/bin/sh",
		"args": []string{"-c", `trap "" TERM; echo $$ > /workspace/busy.pid; while :; do sleep 0.1; done`}})
	waitFor(t, 10*time.Second, "the execution to start", func() bool {
		out, err := docker(10*time.Second, "exec", tr.name, "cat", "/workspace/busy.pid")
		return err == nil && strings.TrimSpace(out) != ""
	})
	stopTimeout, _ := strconv.Atoi(tr.inspect("{{.Config.StopTimeout}}"))
	if stopTimeout != 15 {
		t.Fatalf("stop timeout %d; want the README's 15", stopTimeout)
	}
	stopSettles(t, tr, c, 20*time.Second, stopTimeout)
}

// stopSettles runs docker stop while c's execution "busy" runs, and wants
// its executed reply (framework_timeout, settled) within wait, then the
// container's exit 0 well within its stop timeout (stopTimeout, seconds):
// relayd heard docker stop and settled, docker did not SIGKILL it.
func stopSettles(t *testing.T, tr *trial, c *client, wait time.Duration, stopTimeout int) {
	t.Helper()
	began := time.Now()
	stopped := make(chan error, 1)
	go func() { _, err := docker(time.Minute, "stop", tr.name); stopped <- err }()
	r := c.read(wait)
	if r == nil || r["id"] != "busy" {
		t.Fatalf("got %v; want the executed reply of the running execution (relayd heard docker stop)", r)
	}
	wantExit(t, r, "framework_timeout", 124)
	if r["settlement"] != "settled" {
		t.Fatalf("settlement %v; want settled", r["settlement"])
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("docker stop did not return within a minute")
	}
	took := time.Since(began)
	if code := tr.waitExit(10 * time.Second); code != 0 {
		t.Fatalf("container exited %d after docker stop; want 0, relayd's (137 is docker's SIGKILL at the stop timeout)", code)
	}
	if took >= time.Duration(stopTimeout)*time.Second {
		t.Fatalf("docker stop took %s; want within the %d s stop timeout", took, stopTimeout)
	}
}

// docker kill of a container whose PID 1 is relayd: the kernel ends every
// process of its PID namespace, a running execution and a service alike,
// and nothing of the container is left on the host once it is removed.
func TestDockerKillLeavesNothing(t *testing.T) {
	tr := startTrial(t, "run.sh")
	c, _ := tr.connect()
	r := c.sh(`sleep 304 </dev/null >/dev/null 2>&1 & exit 0`, nil)
	wantExit(t, r, "exited", 0)
	c.send(msg{"kind": "execute", "command": "/bin/sh",
		"args": []string{"-c", `trap "" TERM; (setsid sleep 305 &); echo $$ > /workspace/busy.pid; while :; do sleep 0.1; done`}})
	waitFor(t, 10*time.Second, "the execution to start", func() bool {
		out, err := docker(10*time.Second, "exec", tr.name, "cat", "/workspace/busy.pid")
		return err == nil && strings.TrimSpace(out) != ""
	})
	id := tr.inspect("{{.Id}}")
	init, _ := strconv.Atoi(tr.inspect("{{.State.Pid}}"))
	pidns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		t.Fatal(err)
	}
	procs := tr.processes()
	if len(procs) < 4 {
		t.Fatalf("docker top lists %v; want relayd, the service and the execution's tree", procs)
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/docker/" + id)
	if len(cgroups) == 0 {
		cgroups, _ = filepath.Glob("/sys/fs/cgroup/system.slice/docker-" + id + ".scope")
	}

	mustDocker(t, "kill", tr.name)
	if code := tr.waitExit(20 * time.Second); code != 137 {
		t.Fatalf("container exited %d after docker kill; want 137", code)
	}
	if c.read(10*time.Second) != nil {
		t.Fatal("the controller's connection stayed open after docker kill")
	}
	waitFor(t, 10*time.Second, "every process of the container to be gone from the host", func() bool {
		for pid := range procs {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == pidns {
				return false
			}
		}
		return len(inPidNamespace(pidns)) == 0
	})
	mustDocker(t, "rm", tr.name)
	if out := mustDocker(t, "ps", "--all", "--quiet", "--no-trunc", "--filter", "id="+id); out != "" {
		t.Fatalf("docker ps -a still lists %s after docker rm", out)
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the container's cgroup %s is still on the host", cg)
		}
	}
}

// inPidNamespace lists the host's processes in the PID namespace ns (a
// /proc/PID/ns/pid link).
func inPidNamespace(ns string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}
