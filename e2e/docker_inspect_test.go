//go:build docker

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDockerInspectAdapter runs the inspect_ai adapter's tests
// (clients/python/tests/test_inspect.py, DockerSelfCheck: every behaviour
// of inspect's sandbox self-check) against relayd in a container, reached
// the way the adapter reaches it in a real evaluation: docker exec -i NAME
// relayd bridge. relayd gets the limits the README asks for inspect's 50
// MiB inputs and 10 MiB outputs. The container is removed by newTrial's
// cleanup.
func TestDockerInspectAdapter(t *testing.T) {
	python := systemPython(t)
	run := strings.Replace(readDeploy(t, "run.sh"), `"$IMAGE"`,
		`"$IMAGE" --max-line-bytes 160MiB --max-stdout-bytes 11MiB`, 1)
	tr := startTrialText(t, "run.sh", run)
	tr.connect() // relayd listens (and serves its bridge socket)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join("..", "clients", "python")
	cmd := exec.CommandContext(ctx, python, "-X", "dev", "-W", "error", "-m", "unittest", "-v", "test_inspect.DockerSelfCheck")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "PYTHONPATH=src:tests", "RELAYD_INSPECT_CONTAINER="+tr.name, "RELAYD_TOKEN_FILE="+tr.tokenFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test_inspect.DockerSelfCheck against %s: %v\n%s", tr.name, err, tail(string(out), 8000))
	}
	if strings.Contains(string(out), "skipped") || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("test_inspect.DockerSelfCheck did not run every test:\n%s", tail(string(out), 8000))
	}
	t.Logf("%s", tail(string(out), 600))
}
