//go:build docker

package e2e

// Apache Maka's own scenario under a real Docker engine: an egress sidecar
// holds the network namespace the egress policy is applied to, the task
// container shares it (network_mode: service:egress) and keeps NET_RAW and
// NET_ADMIN, and relayd in it, started with the README's Maka command,
// dials the controller (this test) and runs a subject that tries to get
// under the policy.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readmeMakaCommand is the command the README's Deploying section prints
// for a Maka deployment, its continuation lines joined.
func readmeMakaCommand(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "**A Maka deployment**")
	if i < 0 {
		t.Fatal(`README.md has no "**A Maka deployment**" paragraph`)
	}
	var cmd []string
	for _, line := range strings.Split(text[i:], "\n")[1:] {
		if strings.HasPrefix(line, "    ") {
			cmd = append(cmd, strings.TrimSuffix(strings.TrimSpace(line), "\\"))
		} else if len(cmd) > 0 {
			break
		}
	}
	c := strings.Join(strings.Fields(strings.Join(cmd, " ")), " ")
	for _, want := range []string{"relayd --connect ", "--artifacts-layout maka", "--drop-capabilities NET_RAW,NET_ADMIN", `--require-netns "$EGRESS_NETNS"`, "--subject-umask 077"} {
		if !strings.Contains(c, want) {
			t.Fatalf("README's Maka command %q does not show %q", c, want)
		}
	}
	if !strings.Contains(text[i:i+600], "MAKA_EVAL_EGRESS_REQUIRED=1") {
		t.Fatal("README's Maka paragraph does not say MAKA_EVAL_EGRESS_REQUIRED=1")
	}
	return c
}

// makaSubject tries what a subject holding NET_RAW or NET_ADMIN could do to
// get under the egress policy: open an AF_PACKET socket, and flush the
// nftables ruleset. The image has no nft, so python sends what `nft flush
// ruleset` sends: a batch with NFT_MSG_DELTABLE for every family. It prints
// the errno of each attempt ("done" when it worked) to stdout and known
// bytes, a NUL and non-UTF-8 ones among them, to stderr.
const makaSubject = `python3 - <<'EOF'
import errno, socket, struct

def attempt(what, f):
    try:
        f()
        print(what + ": done")
    except socket.timeout:
        print(what + ": no answer")
    except OSError as e:
        print(what + ": " + errno.errorcode.get(e.errno, str(e.errno)))

def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)).close()

def flush():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
    s.settimeout(5)
    def msg(kind, flags, seq, res):  # nlmsghdr, nfgenmsg (family unspec, v0)
        return struct.pack("=IHHIIBBH", 20, kind, flags, seq, 0, 0, 0, socket.htons(res))
    # BATCH_BEGIN (nf_tables), DELTABLE (request, ack), BATCH_END
    s.send(msg(0x10, 1, 1, 10) + msg(10 << 8 | 2, 1 | 4, 2, 0) + msg(0x11, 1, 3, 10))
    while True:
        b = s.recv(65536)
        off = 0
        while off + 20 <= len(b):
            n, kind = struct.unpack_from("=IH", b, off)
            if kind == 2:  # NLMSG_ERROR: the error, then the request's header
                err, seq = struct.unpack_from("=i8xI", b, off + 16)
                if err:
                    raise OSError(-err, "nft flush ruleset")
                if seq == 2:
                    return
            off += max((n + 3) & ~3, 20)

attempt("AF_PACKET socket", packet)
attempt("nft flush ruleset", flush)
EOF
printf 'maka subject: stderr, raw bytes follow\n\377\376\000end\n' >&2`

const (
	makaSubjectStdout = "AF_PACKET socket: EPERM\nnft flush ruleset: EPERM\n"
	makaSubjectStderr = "maka subject: stderr, raw bytes follow\n\xff\xfe\x00end\n"
	// makaStderrText is makaSubjectStderr as Maka's relay counts it: each
	// ill-formed byte U+FFFD (docs/protocol.md, section 5).
	makaStderrText = "maka subject: stderr, raw bytes follow\n\uFFFD\uFFFD\x00end\n"
)

// makaOutcome names the stdout of makaSubject whose digest is sum, among
// those where each attempt is refused (EPERM) or works.
func makaOutcome(sum any) string {
	for _, packet := range []string{"EPERM", "done"} {
		for _, flush := range []string{"EPERM", "done"} {
			out := "AF_PACKET socket: " + packet + "\nnft flush ruleset: " + flush + "\n"
			if fmt.Sprintf("%x", sha256.Sum256([]byte(out+makaStderrText))) == sum {
				return fmt.Sprintf("%q", out)
			}
		}
	}
	return "another stdout"
}

// A Maka deployment as its controller sees it. A compose project: egress, a
// stand-in for Maka's egress sidecar, holds the network namespace; the test
// applies an egress policy to it with nft from the host (output dropped but
// to the controller), as the sidecar would. task shares that namespace
// (network_mode: service:egress), keeps Docker's NET_RAW and is given
// NET_ADMIN, a task that keeps what gets under the policy; relayd in it runs
// the README's Maka command with MAKA_EVAL_EGRESS_REQUIRED=1, EGRESS_NETNS
// the sidecar's net:[INODE] and CONTROLLER this test, listening on the
// gateway of the trial's network. The controller sends Maka's execute (a
// resultToken, so the reply carries only the stdout's length and digest):
// the subject's AF_PACKET socket and nftables flush are both refused with
// EPERM, the policy is still there after it, /logs/artifacts (mode 0700)
// holds exactly Maka's two files, byte for byte the subject's stdout and
// stderr merged, and an empty one; verify with a half-close, and the task container exits 0.
func TestDockerMakaEgress(t *testing.T) {
	image := evalImage(t)
	compose := composeCommand(t)
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("nft not installed on the host (apt-get install nftables): the test applies the egress policy with it")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter(1) not installed (util-linux)")
	}
	command := readmeMakaCommand(t)
	token, tokenFile := writeToken(t, 0, 0, 0o600) // relayd runs as root in this image
	name := "relaydtest" + strings.TrimPrefix(newToken(), "tok-")[:12]
	logs := t.TempDir() // the task's /logs, where relayd makes artifacts/
	// Removed last: the network outlives the project's containers.
	t.Cleanup(func() {
		if _, err := docker(time.Minute, "network", "rm", name); err != nil && !strings.Contains(err.Error(), "No such network") {
			t.Errorf("removing network %s: %v", name, err)
		}
	})
	gateway := runDeployScript(t, "docker/network.sh", "TRIAL="+name)
	ln, err := net.Listen("tcp", net.JoinHostPort(gateway, "0"))
	if err != nil {
		t.Fatalf("listening on the network's gateway: %v", err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	// compose interpolates $ in the file: the command's own are $$.
	file := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(file, []byte(`services:
  egress:
    image: ${IMAGE}
    entrypoint: ["sleep", "infinity"]
    networks: [trial]
  task:
    image: ${IMAGE}
    network_mode: service:egress
    depends_on: [egress]
    cap_add: [NET_ADMIN]
    environment:
      MAKA_EVAL_EGRESS_REQUIRED: "1"
      CONTROLLER: ${CONTROLLER}
      EGRESS_NETNS: ${EGRESS_NETNS}
      RELAYD_TOKEN_FILE: /run/secrets/token
    entrypoint: ["/bin/sh", "-ec", `+fmt.Sprintf("%q", strings.ReplaceAll(command, "$", "$$"))+`]
    volumes:
      - ${LOGS}:/logs
    secrets: [token]
    stop_grace_period: 15s
networks:
  trial:
    external: true
    name: ${TRIAL}
secrets:
  token:
    file: ${TOKEN_FILE}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	controller := net.JoinHostPort(gateway, port)
	p := &composeProject{t: t, name: name, token: token, cmd: append(compose, "-p", name, "-f", file),
		env: append(cleanEnv(), "IMAGE="+image, "TOKEN_FILE="+tokenFile, "TRIAL="+name, "LOGS="+logs,
			"CONTROLLER="+controller, "EGRESS_NETNS=")}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := p.run(30*time.Second, "logs", "--no-color")
			t.Logf("compose logs:\n%s", tail(out, 8000))
		}
		if out, err := p.run(2*time.Minute, "down", "--volumes", "--remove-orphans", "--timeout", "1"); err != nil {
			t.Errorf("compose down: %v: %s", err, out)
		}
	})

	// The sidecar first: its namespace, and the policy applied to it.
	if out, err := p.run(2*time.Minute, "up", "--detach", "egress"); err != nil {
		t.Fatalf("compose up egress: %v: %s", err, out)
	}
	pid := mustDocker(t, "inspect", "--format", "{{.State.Pid}}", p.container("egress"))
	netns, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil {
		t.Fatalf("the sidecar's network namespace: %v", err)
	}
	inNetns := func(args ...string) (string, error) {
		out, err := exec.Command(nsenter, append([]string{"--target", pid, "--net", nft}, args...)...).CombinedOutput()
		return string(out), err
	}
	policy := fmt.Sprintf(`table inet maka_egress {
	chain output {
		type filter hook output priority filter; policy drop;
		oif "lo" accept
		ip daddr %s tcp dport %s accept
	}
}
`, gateway, port)
	policyFile := filepath.Join(t.TempDir(), "egress.nft")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := inNetns("-f", policyFile); err != nil {
		t.Fatalf("applying the egress policy to the sidecar's namespace: %v: %s", err, out)
	}

	p.env = append(p.env, "EGRESS_NETNS="+netns) // the last of a name is the one used
	if out, err := p.run(2*time.Minute, "up", "--detach", "--no-deps", "task"); err != nil {
		t.Fatalf("compose up task: %v: %s", err, out)
	}
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(45 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("relayd did not dial the controller at %s within 45s: %v", controller, err)
	}
	defer c.Close()
	cl := &client{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20), token: token}
	if r := cl.read(10 * time.Second); r["kind"] != "ready" || r["token"] != token {
		t.Fatalf("first line: got %v; want ready with the token", r)
	}
	// relayd itself holds both: the subject lacks them by its doing.
	taskPid := mustDocker(t, "inspect", "--format", "{{.State.Pid}}", p.container("task"))
	status, err := os.ReadFile("/proc/" + taskPid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !hasCap(t, status, "CapEff", unix.CAP_NET_RAW) || !hasCap(t, status, "CapEff", unix.CAP_NET_ADMIN) {
		t.Fatalf("the task container's PID 1 lacks NET_RAW or NET_ADMIN: the test would not show that relayd drops them: %s", status)
	}
	cl.send(makaExecute(makaSubject))
	e := cl.read(60 * time.Second)
	wantExit(t, e, "exited", 0)
	// No result frame: Maka's relay sends none of the output, and says how
	// much there was and its digest, of stdout and stderr merged as
	// Harbor's exec merges them, counted as text; the artifact has it
	// (below).
	d, _ := e["diagnostic"].(msg)
	carrier := makaSubjectStdout + makaStderrText
	if d["category"] != "result-frame-missing" || fmt.Sprint(d["bytes"]) != fmt.Sprint(len(carrier)) ||
		d["sha256"] != fmt.Sprintf("%x", sha256.Sum256([]byte(carrier))) {
		t.Fatalf("executed %v; want result-frame-missing with the length and digest of %q (the digest is of %s)", e, carrier, makaOutcome(d["sha256"]))
	}
	cl.endWith(msg{"kind": "verify"})
	if v := cl.read(10 * time.Second); v == nil || v["kind"] != "verified" || v["quiescent"] != true {
		t.Fatalf("verify: got %v; want verified, quiescent", v)
	}
	if code := p.exitCode("task", 30*time.Second); code != "0" {
		t.Fatalf("the task container (relayd) exited %s after verify; want 0", code)
	}

	if out, err := inNetns("list", "ruleset"); err != nil || !strings.Contains(out, "ip daddr "+gateway+" tcp dport "+port+" accept") {
		t.Fatalf("the sidecar's egress policy after the subject: %v: %q; want it as applied", err, out)
	}

	// The artifacts, as Maka's controller inventories them.
	dir := filepath.Join(logs, "artifacts")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("/logs/artifacts: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("/logs/artifacts has mode %04o; want 0700", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	listing := fmt.Sprintf("/logs/artifacts %s\n", fi.Mode())
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := en.Info()
		names = append(names, en.Name())
		listing += fmt.Sprintf("  %s %4d sha256:%x %s\n", info.Mode(), len(b), sha256.Sum256(b), en.Name())
	}
	t.Logf("the task's artifacts:\n%s", listing)
	if !slices.Equal(names, []string{makaStderr, makaStdout}) {
		t.Fatalf("/logs/artifacts holds %q; want only %s and %s", names, makaStderr, makaStdout)
	}
	for _, f := range []struct{ name, want string }{{makaStdout, makaSubjectStdout + makaSubjectStderr}, {makaStderr, ""}} {
		if b, _ := os.ReadFile(filepath.Join(dir, f.name)); !bytes.Equal(b, []byte(f.want)) {
			t.Fatalf("%s: got %q; want %q", f.name, b, f.want)
		}
	}
	if out := mustDocker(t, "logs", p.container("task")); strings.Contains(out, token) {
		t.Fatal("relayd's log holds the token")
	}
}
