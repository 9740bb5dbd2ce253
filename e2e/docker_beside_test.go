//go:build docker

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// docs/deploy.md's "Beside the task": relayd started from the task's own
// entrypoint script, in the background, the line as the README prints it.
// The task's entrypoint here is sh running that line and then the task's
// own work (sleep infinity), which stays PID 1. The checks of every way of
// starting relayd in a container follow (trial.check).
func TestDockerBesideTheTask(t *testing.T) {
	section := docSection(t, deployDoc, "## Putting relayd into an eval container")
	i := strings.Index(section, "**Beside the task.**")
	if i < 0 {
		t.Fatal(`README's container section has no "Beside the task" paragraph`)
	}
	var line string
	for _, l := range strings.Split(section[i:], "\n") {
		if strings.HasPrefix(l, "    relayd ") {
			line = strings.TrimPrefix(l, "    ")
			break
		}
	}
	if !strings.HasSuffix(line, " &") {
		t.Fatalf("the Beside the task example %q is not a background relayd line", line)
	}
	// run.sh, with the task's entrypoint: the README's line, then the task.
	script := strings.Replace(readDeploy(t, "run.sh"), `  "$IMAGE"`,
		`  --entrypoint /bin/sh "$IMAGE" -c '`+line+`
exec sleep infinity'`, 1)
	if !strings.Contains(script, "--entrypoint /bin/sh") {
		t.Fatal("deploy/docker/run.sh no longer ends its docker run with the image")
	}
	tr := startTrialText(t, "run.sh (beside the task)", script)
	c, ready := tr.connect()
	if comm := tr.exec("cat", "/proc/1/comm"); comm != "sleep" {
		t.Fatalf("PID 1 of the container is %q; want the task's own (sleep)", comm)
	}
	tr.check(c, ready, 2)
}

// docs/deploy.md's "Hearing docker stop": the entrypoint script that
// forwards SIGTERM to relayd, as printed. docker stop while an execution
// runs: relayd settles it, the controller gets executed, and the
// container exits 0 (relayd's status) well within the stop timeout, not
// 137 from docker's SIGKILL.
func TestDockerBesideTheTaskStop(t *testing.T) {
	section := docSection(t, deployDoc, "## Putting relayd into an eval container")
	i := strings.Index(section, "**Hearing `docker stop`.**")
	if i < 0 {
		t.Fatal("docs/deploy.md's container section has no \"Hearing `docker stop`\" paragraph")
	}
	var block []string
	for _, l := range strings.Split(section[i:], "\n") {
		if strings.HasPrefix(l, "    ") {
			block = append(block, strings.TrimPrefix(l, "    "))
		} else if len(block) > 0 {
			break
		}
	}
	if len(block) == 0 || len(block) > 3 || !strings.HasPrefix(block[0], "relayd ") {
		t.Fatalf("the Hearing docker stop example %q is not at most three lines starting relayd", block)
	}
	script := strings.ReplaceAll(strings.Join(block, "\n"), `'`, `'\''`)
	text := strings.Replace(readDeploy(t, "run.sh"), `  "$IMAGE"`, `  --entrypoint /bin/sh "$IMAGE" -c '`+script+`'`, 1)
	if !strings.Contains(text, "--entrypoint /bin/sh") {
		t.Fatal("deploy/docker/run.sh no longer ends its docker run with the image")
	}
	tr := startTrialText(t, "run.sh (beside the task, forwarding SIGTERM)", text)
	c, _ := tr.connect()
	if comm := tr.exec("cat", "/proc/1/comm"); comm != "sh" {
		t.Fatalf("PID 1 of the container is %q; want the entrypoint script's sh", comm)
	}
	c.send(msg{"kind": "execute", "id": "busy", "command": "/bin/sh",
		"args": []string{"-c", `trap "" TERM; echo $$ > /workspace/busy.pid; while :; do sleep 0.1; done`}})
	waitFor(t, 10*time.Second, "the execution to start", func() bool {
		out, err := docker(10*time.Second, "exec", tr.name, "cat", "/workspace/busy.pid")
		return err == nil && strings.TrimSpace(out) != ""
	})
	stopTimeout, _ := strconv.Atoi(tr.inspect("{{.Config.StopTimeout}}"))
	stopSettles(t, tr, c, time.Duration(stopTimeout+5)*time.Second, stopTimeout)
}
