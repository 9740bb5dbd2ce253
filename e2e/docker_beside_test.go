//go:build docker

package e2e

import (
	"strings"
	"testing"
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
