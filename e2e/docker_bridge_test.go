//go:build docker

package e2e

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// relayd bridge through a real `docker exec -i` into a container whose PID 1
// is relayd (run.sh): the same command shape as `kubectl exec -i POD --
// relayd bridge`. No port is needed; the token still is. Killing the
// docker exec client (all a harness's timeout does) is a transport loss:
// the running execution is settled inside the container.
func TestDockerBridge(t *testing.T) {
	tr := startTrial(t, "run.sh")
	c, _ := tr.connect() // relayd is up
	c.c.Close()

	cmd := exec.Command("/bin/sh", "-ec", readDeploy(t, "bridge.sh"))
	cmd.Env = append(cleanEnv(), "TRIAL="+tr.name, "TOKEN_FILE="+tr.tokenFile)
	out, err := cmd.CombinedOutput()
	var ready msg
	if err != nil || json.Unmarshal(out, &ready) != nil || ready["kind"] != "ready" || ready["token"] != tr.token {
		t.Fatalf("deploy/docker/bridge.sh: %v, printed %q; want ready with the trial's token", err, out)
	}

	bridgeCmd := []string{"docker", "exec", "-i", tr.name, "relayd", "bridge"}
	b := startBridge(t, tr.token, bridgeCmd...)
	r := b.request(msg{"kind": "ready"})
	exts, _ := r["extensions"].([]any)
	if r["kind"] != "ready" || !slices.Contains(exts, any("bridge")) {
		t.Fatalf("ready through docker exec -i relayd bridge: %v", r)
	}
	x := b.request(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo through the bridge; exit 4"}})
	if x["kind"] != "executed" || x["stdout"] != "through the bridge\n" || num(t, x, "exitCode") != 4 {
		t.Fatalf("execute through the bridge: %v", x)
	}
	b.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo $$ > /tmp/subject.pid; exec sleep 60"}})
	waitFor(t, 15*time.Second, "the subject to start", func() bool {
		out, err := docker(10*time.Second, "exec", tr.name, "cat", "/tmp/subject.pid")
		return err == nil && strings.TrimSpace(out) != ""
	})
	_ = b.cmd.Process.Kill() // the docker exec client this test started: all a harness's timeout kills
	<-b.done
	waitFor(t, 20*time.Second, "relayd to settle the subject of the lost bridge", func() bool {
		for _, args := range tr.processes() {
			if args == "sleep 60" {
				return false
			}
		}
		return true
	})

	// A new bridge serves on, and the container is quiet.
	b2 := startBridge(t, tr.token, bridgeCmd...)
	b2.request(msg{"kind": "ready"})
	if v := b2.request(msg{"kind": "verify"}); v["kind"] != "verified" || v["quiescent"] != true {
		t.Fatalf("verify through a second bridge: %v", v)
	}
}
