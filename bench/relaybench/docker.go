package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// The task image the container tests use (make task-image builds it);
// RELAYBENCH_TASK_IMAGE names another.
const defaultTaskImage = "relayd-test-task:bookworm"

// dockerSection is the section measuring what harnesses use today, docker
// exec, against relayd in the same container: one container from the task
// image with relayd added as the container tests add it
// (deploy/docker/Dockerfile, deploy/docker/run.sh), and the round trip of
// /bin/true through `docker exec CONTAINER true` and through relayd's
// published port, in turns.
func (b *bench) dockerSection() {
	sec := b.report.section("docker", "docker exec vs relayd: /bin/true in the same container")
	const dx, rx = "docker exec CONTAINER true", "relayd execute /bin/true, same container"
	skip := func(why string) {
		logf("docker section skipped: %s", why)
		sec.add(skipped(dx, "ms", why))
		sec.add(skipped(rx, "ms", why))
		sec.add(skipped(terminusDocker, "ms", why))
		sec.add(skipped(terminusRelayd, "ms", why))
		for _, s := range []*burst{dockerBurst(nil), relaydBurst(nil)} {
			rate, lat := s.figures()
			sec.add(skipped(rate.Name, rate.Unit, why))
			sec.add(skipped(lat.Name, lat.Unit, why))
		}
	}
	env, why := b.dockerSetup()
	if why != "" {
		skip(why)
		return
	}
	defer env.remove()

	n := b.pick(200, 40) // docker exec; relayd does 5 times as many
	rounds := b.pick(20, 4)
	de := &series{name: dx, block: n / rounds, warm: 3, op: env.dockerExec}
	rl := &series{name: rx, block: 5 * n / rounds, warm: 20, op: env.relaydExec}
	logf("docker: %d rounds of %d docker exec and %d relayd executes in %s", rounds, de.block, rl.block, env.name)
	sec.note("one container from %s with relayd added by deploy/docker/Dockerfile, started by deploy/docker/run.sh (relayd as PID 1, scope mechanism %s, port published on 127.0.0.1, token file mounted read-only, mode 0600)", env.taskImage, env.mechanism)
	sec.note("docker exec: `docker exec CONTAINER true` through the docker CLI (%s), spawned and waited for by this program; relayd: execute of /bin/true over one connection to the published port", env.version)
	sec.note("the series take turns, %d docker exec and %d relayd executes at a time, for up to %d rounds; the ratio is relayd's median over docker exec's (below 1x is faster)", de.block, rl.block, rounds)
	// The section's budget, shared: the round trip may spend two thirds of
	// it, the concurrency part the rest.
	began, budget := time.Now(), b.pickDur(60*time.Second, 20*time.Second)
	if done := interleave([]*series{de, rl}, rounds, func() bool { return b.cut(began, budget*2/3) }); done < rounds {
		b.report.note("docker: %d of %d rounds within the time budget", done, rounds)
	}
	fd := sec.add(de.figure("ms"))
	fr := sec.add(rl.figure("ms")).against(fd)
	if fr.Baseline != nil && fr.Ratio > 0 {
		sec.note("docker exec's median is %.0fx relayd's, its p99 %.0fx relayd's", 1/fr.Ratio, fd.P99/fr.P99)
	}
	b.terminusStep(sec, env)
	b.dockerConcurrency(sec, env, began, budget)
}

// dockerEnv is the container the docker section measures, and what to
// remove after it.
type dockerEnv struct {
	name, taskImage, version, mechanism string
	addr                                string   // relayd's published port, 127.0.0.1:PORT
	token                               string   // relayd's, for a second connection (the bridge)
	tags                                []string // images built for this run only
	dir                                 string   // the token file, the build context
	cl                                  *benchClient
	execs                               running // docker exec processes not yet waited for
	forget                              func()
	once                                sync.Once
}

// dockerCLI runs the docker CLI, bounded by timeout, and returns its output.
func dockerCLI(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("docker %s: no answer within %s", args[0], timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", args[0], err, tail(strings.TrimSpace(string(out)), 300))
	}
	return string(out), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// repoRoot finds the repository (the directory holding deploy/docker) from
// the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "docker", "run.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("deploy/docker/run.sh not found above the working directory: run relaybench from the repository")
		}
		dir = parent
	}
}

// dockerSetup builds the images and starts the container; it returns why
// not when it cannot.
func (b *bench) dockerSetup() (*dockerEnv, string) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, "docker CLI not installed"
	}
	if _, err := dockerCLI(15*time.Second, "info"); err != nil {
		return nil, "docker not answering (docker info: " + err.Error() + ")"
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err.Error()
	}
	env := &dockerEnv{taskImage: defaultTaskImage, name: "relaybench-" + randomHex(6)}
	if v := os.Getenv("RELAYBENCH_TASK_IMAGE"); v != "" {
		env.taskImage = v
	}
	if v, err := dockerCLI(15*time.Second, "version", "--format", "{{.Client.Version}}"); err == nil {
		env.version = "docker " + strings.TrimSpace(v)
	}
	if why := ensureTaskImage(root, env.taskImage); why != "" {
		return nil, why
	}
	if env.dir, err = os.MkdirTemp("", "relaybench-docker-"); err != nil {
		return nil, err.Error()
	}
	env.forget = atCleanup(env.remove)
	fail := func(why string) (*dockerEnv, string) {
		env.remove()
		return nil, why
	}
	// relayd's image, made from the binary under test as make image makes
	// relayd:dev (the repository's Dockerfile, FROM scratch), under a tag of
	// this run; then the task image with relayd added.
	ctxDir := filepath.Join(env.dir, "context")
	if err := os.MkdirAll(filepath.Join(ctxDir, "bin"), 0o755); err != nil {
		return fail(err.Error())
	}
	for _, c := range [][2]string{
		{b.cfg.relayd, filepath.Join(ctxDir, "bin", "relayd")},
		{filepath.Join(root, "Dockerfile"), filepath.Join(ctxDir, "Dockerfile.relayd")},
		{filepath.Join(root, "deploy", "docker", "Dockerfile"), filepath.Join(ctxDir, "Dockerfile.task")},
	} {
		if err := copyFile(c[0], c[1]); err != nil {
			return fail(err.Error())
		}
	}
	relaydTag := "relaybench-relayd:run-" + env.name[len("relaybench-"):]
	evalTag := "relaybench-eval:run-" + env.name[len("relaybench-"):]
	if _, err := dockerCLI(3*time.Minute, "build", "--quiet", "-f", filepath.Join(ctxDir, "Dockerfile.relayd"), "-t", relaydTag, ctxDir); err != nil {
		return fail("building relayd's image: " + err.Error())
	}
	env.tags = append(env.tags, relaydTag)
	if _, err := dockerCLI(3*time.Minute, "build", "--quiet", "-f", filepath.Join(ctxDir, "Dockerfile.task"),
		"--build-arg", "RELAYD_IMAGE="+relaydTag, "--build-arg", "TASK_IMAGE="+env.taskImage, "-t", evalTag, ctxDir); err != nil {
		return fail("adding relayd to " + env.taskImage + ": " + err.Error())
	}
	env.tags = append(env.tags, evalTag)

	// The container, started by the script the README prints; the token
	// only in a file, mode 0600, mounted read-only.
	token := randomHex(16)
	env.token = token
	tokenFile := filepath.Join(env.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return fail(err.Error())
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "docker", "run.sh"))
	if err != nil {
		return fail(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", string(script))
	cmd.Env = append(testharness.CleanEnv(), "TRIAL="+env.name, "TOKEN_FILE="+tokenFile, "IMAGE="+evalTag)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fail(fmt.Sprintf("deploy/docker/run.sh: %v: %s", err, tail(strings.TrimSpace(string(out)), 300)))
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return fail("deploy/docker/run.sh printed no address")
	}
	addr := fields[len(fields)-1]
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		return fail(fmt.Sprintf("docker port printed %q; want 127.0.0.1:PORT", addr))
	}
	env.addr = addr
	if env.cl, err = connectRetry(addr, token, 30*time.Second); err != nil {
		logs, _ := dockerCLI(10*time.Second, "logs", env.name)
		return fail(fmt.Sprintf("relayd in %s: %v (log: %s)", env.name, err, tail(strings.TrimSpace(logs), 300)))
	}
	env.mechanism = env.cl.mechanism
	return env, ""
}

// ensureTaskImage checks that the task image exists and builds the default
// one with deploy/test/build-task-image.sh (root and debootstrap) when not.
func ensureTaskImage(root, tag string) string {
	if _, err := dockerCLI(15*time.Second, "image", "inspect", tag); err == nil {
		return ""
	}
	if tag != defaultTaskImage {
		return "image " + tag + " (RELAYBENCH_TASK_IMAGE) not found"
	}
	if os.Geteuid() != 0 {
		return "image " + tag + " not found; make task-image builds it (as root)"
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "image " + tag + " not found, and building it needs debootstrap (apt-get install debootstrap; then make task-image)"
	}
	logf("docker: building %s with deploy/test/build-task-image.sh (once; reused afterwards)", tag)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy", "test", "build-task-image.sh"), tag).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("building %s: %v: %s", tag, err, tail(strings.TrimSpace(string(out)), 300))
	}
	return ""
}

// connectRetry dials addr until relayd answers ready (docker's proxy
// accepts connections before relayd listens).
func connectRetry(addr, token string, within time.Duration) (*benchClient, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		cl, err := dialBench(addr, token, 2*time.Second)
		if err == nil {
			return cl, nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no ready reply on %s within %s: %v", addr, within, last)
}

func (e *dockerEnv) dockerExec() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "exec", e.name, "true")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("docker exec %s true: %v", e.name, err)
	}
	e.execs.add(cmd.Process)
	err := cmd.Wait()
	e.execs.done(cmd.Process)
	if err != nil {
		return fmt.Errorf("docker exec %s true: %v: %s", e.name, err, tail(strings.TrimSpace(stderr.String()), 300))
	}
	return nil
}

func (e *dockerEnv) relaydExec() error {
	_, err := e.cl.execute(trueReq)
	return err
}

// remove removes the container, the images built for this run (not the
// task image, which is reused) and the temporary directory. It runs once.
func (e *dockerEnv) remove() { e.once.Do(e.removeOnce) }

func (e *dockerEnv) removeOnce() {
	if e.forget != nil {
		e.forget()
	}
	// An interrupted run may have docker execs running (32 at once in the
	// concurrency part): they are killed by pid before the container goes,
	// so none outlives the run.
	e.execs.kill()
	if e.cl != nil {
		e.cl.close()
	}
	if _, err := dockerCLI(time.Minute, "rm", "--force", "--volumes", e.name); err != nil && !strings.Contains(err.Error(), "No such container") {
		logf("docker: removing %s: %v", e.name, err)
	}
	for i := len(e.tags) - 1; i >= 0; i-- {
		if _, err := dockerCLI(time.Minute, "rmi", e.tags[i]); err != nil {
			logf("docker: removing image %s: %v", e.tags[i], err)
		}
	}
	os.RemoveAll(e.dir)
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	info, err := os.Stat(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, info.Mode().Perm())
}
