//go:build docker

package e2e

// Dial-out from a container to a controller on the host, with the README's
// deploy/docker/network.sh and dialout.sh, and what relayd does with the
// token file's owner and mode when it runs as a non-root user in a
// container.

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runDeployScript runs a script of deploy/ that the README prints, with
// /bin/sh -e and the given variables, and returns its output.
func runDeployScript(t *testing.T, script string, vars ...string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "deploy", script))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", string(text))
	cmd.Env = append(cleanEnv(), vars...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/%s: %v: %s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// removeContainer removes a container a test started, showing its log
// first when the test failed.
func removeContainer(t *testing.T, name string) {
	if t.Failed() {
		logs, _ := docker(30*time.Second, "logs", name)
		t.Logf("docker logs %s:\n%s", name, tail(logs, 6000))
	}
	if _, err := docker(time.Minute, "rm", "--force", "--volumes", name); err != nil && !strings.Contains(err.Error(), "No such container") {
		t.Errorf("removing %s: %v", name, err)
	}
}

// writeToken writes a fresh token to a file of the test's own with the
// given owner and mode, and returns the token and the file.
func writeToken(t *testing.T, uid, gid int, mode os.FileMode) (token, file string) {
	t.Helper()
	token = newToken()
	file = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, uid, gid); err != nil {
		t.Skipf("cannot give the token file to %d:%d (needs root): %v", uid, gid, err)
	}
	if err := os.Chmod(file, mode); err != nil {
		t.Fatal(err)
	}
	return token, file
}

// relayd in a container dials a controller on the host. The controller
// listens on the gateway of a network the test created (network.sh), not
// on 0.0.0.0, and host.docker.internal is made to name that gateway
// (dialout.sh): Docker's host-gateway names docker0's address instead,
// which the test checks too. relayd sends ready unprompted, answers
// verify, closes, and exits 0, and the container with it.
func TestDockerDialOutToHost(t *testing.T) {
	image := evalImage(t)
	trial := "relayd-test-" + strings.TrimPrefix(newToken(), "tok-")[:12]
	token, tokenFile := writeToken(t, 0, 0, 0o600) // relayd runs as root in this image
	t.Cleanup(func() {
		removeContainer(t, trial)
		if _, err := docker(time.Minute, "network", "rm", trial); err != nil && !strings.Contains(err.Error(), "No such network") {
			t.Errorf("removing network %s: %v", trial, err)
		}
	})
	gateway := runDeployScript(t, "docker/network.sh", "TRIAL="+trial)
	if net.ParseIP(gateway).To4() == nil {
		t.Fatalf("network.sh printed %q; want the network's IPv4 gateway", gateway)
	}

	// What host-gateway names: docker0's address (the daemon's
	// host-gateway-ip), not the gateway of the container's own network.
	resolved := mustDocker(t, "run", "--rm", "--network", trial, "--add-host=host.docker.internal:host-gateway",
		"--entrypoint", "getent", image, "hosts", "host.docker.internal")
	if f := strings.Fields(resolved); len(f) == 0 || f[0] == gateway {
		t.Fatalf("host-gateway resolves to %q on network %s; the README says it names docker0's address, not the network's gateway %s", resolved, trial, gateway)
	} else if docker0 := interfaceIPv4("docker0"); docker0 != "" && f[0] != docker0 {
		t.Fatalf("host-gateway resolves to %s; want docker0's address %s, as the README says", f[0], docker0)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(gateway, "0"))
	if err != nil {
		t.Fatalf("listening on the network's gateway: %v", err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	runDeployScript(t, "docker/dialout.sh", "TRIAL="+trial, "GATEWAY="+gateway, "PORT="+port,
		"TOKEN_FILE="+tokenFile, "IMAGE="+image)

	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("relayd did not dial the controller at %s within 30s: %v", ln.Addr(), err)
	}
	defer c.Close()
	cl := &client{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20), token: token}
	if r := cl.read(10 * time.Second); r["kind"] != "ready" || r["token"] != token {
		t.Fatalf("first line: got %v; want ready with the token", r)
	}
	if r := cl.request(msg{"kind": "verify"}); r["kind"] != "verified" || r["quiescent"] != true {
		t.Fatalf("verify: got %v; want verified, quiescent", r)
	}
	if !cl.closedByPeer(10 * time.Second) {
		t.Fatal("relayd kept the connection open after verify")
	}
	out, err := docker(30*time.Second, "wait", trial)
	if err != nil {
		t.Fatalf("container %s did not stop after verify: %v", trial, err)
	}
	if code := strings.TrimSpace(out); code != "0" {
		t.Fatalf("container exited %s after verify; want 0", code)
	}
	if logs := mustDocker(t, "logs", trial); strings.Contains(logs, token) {
		t.Fatal("relayd's log holds the token")
	}
}

// interfaceIPv4 is the first IPv4 address of a host interface, or "".
func interfaceIPv4(name string) string {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// A non-root relayd in a container reads a token file bind-mounted with
// the host file's owner and mode: its own uid's file at 0400 is read
// without a word; a file only root can read stops it with exit 2 and a
// line that says what to do; one other users may read earns a warning
// (subjects run as relayd's user and can read it anyway); one every user
// may write is refused. relayd dials a port where nothing listens, with a
// short --connect-timeout, so a relayd that accepted its token exits 2 too,
// saying it reached no controller.
func TestDockerTokenFileModes(t *testing.T) {
	image := evalImage(t)
	const user = "1000:1000"
	for _, tc := range []struct {
		name     string
		uid      int
		mode     os.FileMode
		want     string // in relayd's log
		accepted bool
	}{
		{"own-0400", 1000, 0o400, "", true},
		{"root-0400", 0, 0o400, "--token-file: open /run/relayd/token: permission denied: relayd runs as uid 1000: make the file that user's, mode 0400", false},
		{"own-0444", 1000, 0o444, "the token file is readable by other users", true},
		{"own-0666", 1000, 0o666, "can be written by every user", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, file := writeToken(t, tc.uid, tc.uid, tc.mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--user", user,
				"--mount", "type=bind,source="+file+",target=/run/relayd/token,readonly",
				image, "--connect", "127.0.0.1:9", "--connect-timeout", "1s").CombinedOutput()
			logs := string(out)
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != 2 {
				t.Fatalf("relayd exited %d (%v); want 2: %s", code, err, logs)
			}
			if tc.want != "" && !strings.Contains(logs, tc.want) {
				t.Fatalf("relayd's log does not say %q: %s", tc.want, logs)
			}
			if reached := strings.Contains(logs, "no controller answered"); reached != tc.accepted {
				t.Fatalf("token file %d:%d mode %04o: relayd got past it: %v; want %v: %s", tc.uid, tc.uid, tc.mode, reached, tc.accepted, logs)
			}
			if tc.accepted && tc.want == "" && strings.Contains(logs, `"level":"warn"`) {
				t.Fatalf("relayd warned about its own 0400 token file: %s", logs)
			}
			if strings.Contains(logs, token) {
				t.Fatal("relayd's log holds the token")
			}
		})
	}
}
