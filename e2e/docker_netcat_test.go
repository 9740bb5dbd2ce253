//go:build docker

package e2e

import (
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
)

// The README's netcat examples through a port published on 127.0.0.1 from a
// container started with run.sh: deploy/docker/nc.sh (the handshake, with
// the port docker port prints), then every command of the README's netcat
// session with that port for 7700, each reply compared with the README's.
// The session's service runs in the container and goes with it.
func TestDockerNetcatSession(t *testing.T) {
	if _, err := exec.LookPath("nc"); err != nil {
		t.Skip("nc not installed (apt-get install netcat-openbsd; .ci/run installs it)")
	}
	examples := readmeNetcatSession(t)
	tr := startTrial(t, "run.sh")
	c, _ := tr.connect() // relayd answers: nc.sh's one try will reach it
	c.c.Close()

	cmd := exec.Command("/bin/sh", "-ec", readDeploy(t, "nc.sh"))
	cmd.Env = append(cleanEnv(), "TRIAL="+tr.name, "TOKEN_FILE="+tr.tokenFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/docker/nc.sh: %v: %s", err, out)
	}
	var ready msg
	if err := json.Unmarshal(out, &ready); err != nil || ready["kind"] != "ready" || ready["token"] != tr.token || ready["scope"] != "process-group" {
		t.Fatalf("deploy/docker/nc.sh printed %q; want ready with the trial's token and scope process-group", out)
	}

	_, port, _ := net.SplitHostPort(tr.addr)
	runNetcatSession(t, examples, port, tr.token, func(int) {})
	// Left in the container: relayd and, unless it is done, the session's
	// service; nothing of the executions it settled.
	for pid, args := range tr.processes() {
		if !strings.Contains(args, "relayd") && args != "sleep 20" {
			t.Errorf("docker top lists %d %q after the session; want relayd and sleep 20 only", pid, args)
		}
	}
}
