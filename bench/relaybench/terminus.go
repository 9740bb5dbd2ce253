package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayd/relayd/client"
)

// terminusStep adds to the docker section one agent step as Terminus
// (Harbor's and Terminal-Bench's agent) takes it, against the same step
// through a relayd pty session (protocol 4.7): type a command, wait for
// it, read the screen. Terminus drives tmux in the container with one
// docker exec each: send-keys (the command, then `tmux wait -S`),
// `tmux wait`, capture-pane. Through relayd: one stdin message to the
// session's terminal, and reads until the command's output is on it, over
// the connection to the published port the section already has.
//
// The task image has no tmux: this host's (Debian, as the image) is
// copied into the container with the two libraries it needs beyond the
// image's (`docker cp`; the container is this run's and goes with it).
func (b *bench) terminusStep(sec *section, env *dockerEnv) {
	dk := &series{name: terminusDocker, block: b.pick(10, 3), warm: 2}
	rl := &series{name: terminusRelayd, block: b.pick(100, 30), warm: 5}
	if why := b.startTerminus(env, dk, rl); why != "" {
		dk.skip, rl.skip = why, why
	}
	began, budget := time.Now(), b.pickDur(40*time.Second, 15*time.Second)
	interleave([]*series{dk, rl}, b.pick(10, 3), func() bool { return b.cut(began, budget) })
	fd := sec.add(dk.figure("ms"))
	sec.add(rl.figure("ms")).against(fd).target("at least 20x faster (ratio 0.05x or below)", ratioAtMost(0.05))
	sec.note("Terminus step: `echo step-N` typed into bash on a terminal, until its output is on the screen; docker: three docker execs of tmux (send-keys with `; tmux wait -S done`, `tmux wait done`, `capture-pane -p`), as Terminus does; relayd: a stdin message to a pty session and reads of its screen on one connection")
}

// The Terminus step's rows.
const (
	terminusDocker = "Terminus step through docker exec and tmux (send-keys, wait, capture-pane)"
	terminusRelayd = "Terminus step through a relayd pty session (stdin, read)"
)

// startTerminus readies both sides and sets the series' ops, or says why
// it cannot.
func (b *bench) startTerminus(env *dockerEnv, dk, rl *series) string {
	tmuxBin, err := exec.LookPath("tmux")
	if err != nil {
		return "tmux is not installed on this host (its binary is copied into the container)"
	}
	for _, f := range []string{tmuxBin, "/lib/x86_64-linux-gnu/libutempter.so.0", "/lib/x86_64-linux-gnu/libevent_core-2.1.so.7"} {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return "tmux's files: " + err.Error()
		}
		to := "/usr/lib/x86_64-linux-gnu/" + filepath.Base(f)
		if f == tmuxBin {
			to = "/usr/local/bin/tmux"
		}
		if _, err := dockerCLI(30*time.Second, "cp", "-L", real, env.name+":"+to); err != nil {
			return "docker cp " + f + ": " + err.Error()
		}
	}
	const sock = "/tmp/terminus.sock"
	tmux := func(args ...string) (string, error) {
		return dockerCLI(30*time.Second, append([]string{"exec", "-e", "TERM=xterm", env.name, "tmux", "-S", sock}, args...)...)
	}
	if out, err := tmux("new-session", "-d", "-s", "tb", "-x", "160", "-y", "40", "bash", "--noprofile", "--norc"); err != nil {
		return fmt.Sprintf("tmux in the container: %v: %s", err, tail(out, 200))
	}
	n := 0
	dk.op = func() error {
		n++
		mark := fmt.Sprintf("step-%d", n)
		if _, err := tmux("send-keys", "-t", "tb", "echo "+mark+"''; tmux -S "+sock+" wait -S done", "Enter"); err != nil {
			return err
		}
		if _, err := tmux("wait", "done"); err != nil {
			return err
		}
		screen, err := tmux("capture-pane", "-p", "-t", "tb")
		if err == nil && !strings.Contains(screen, "\n"+mark+"\n") {
			err = fmt.Errorf("the screen does not show %q: %q", mark, tail(screen, 300))
		}
		return err
	}

	ctx := context.Background()
	pt, err := env.cl.OpenSession(ctx, client.SessionOptions{Pty: &client.Pty{Rows: 40, Cols: 160}})
	if err != nil {
		return "a pty session: " + err.Error()
	}
	var next int64
	m := 0
	rl.op = func() error {
		m++
		mark := fmt.Sprintf("step-%d", m)
		if err := pt.Write([]byte("echo " + mark + "''\r")); err != nil {
			return err
		}
		var seen strings.Builder
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(seen.String(), mark+"\r\n"); {
			if time.Now().After(deadline) {
				return fmt.Errorf("the screen does not show %q: %q", mark, tail(seen.String(), 300))
			}
			t, err := pt.Read(ctx, next, 5*time.Second, 0)
			if err != nil {
				return err
			}
			next = t.Next
			seen.WriteString(t.Data)
		}
		return nil
	}
	return ""
}
