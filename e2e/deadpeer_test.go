package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A controller that vanishes without closing (its host crashed, the
// network was cut) is simulated with two network namespaces of the test's
// own, joined by a veth pair: relayd listens in one, the controller dials
// from the other, and an nftables ruleset inside the controller's namespace
// drops everything, as a dead host would. Nothing outside the two
// namespaces is touched: the veth pair is created inside them, the
// addresses are private to them, and deleting them removes all of it.

// peerTimeout is the --peer-timeout these tests give relayd.
const peerTimeout = 2 * time.Second

// peerLink is a pair of network namespaces joined by a veth pair.
type peerLink struct {
	relaydNS, controllerNS string
	relaydIP, controllerIP string
}

var peerLinks atomic.Int64

// newPeerLink creates the namespaces and the pair, or skips the test when
// the host cannot (not root, no iproute2, no network namespaces).
func newPeerLink(t *testing.T) *peerLink {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "nsenter", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install iproute2 util-linux nftables): it builds the namespaces, the link and the black hole", tool)
		}
	}
	n := peerLinks.Add(1)
	base := fmt.Sprintf("relayd-e2e-%d-%d", os.Getpid(), n)
	l := &peerLink{relaydNS: base + "-r", controllerNS: base + "-c",
		relaydIP: "10.231.0.1", controllerIP: "10.231.0.2"}
	if out, err := exec.Command("ip", "netns", "add", l.relaydNS).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { l.ip(t, "netns", "del", l.relaydNS) })
	l.ip(t, "netns", "add", l.controllerNS)
	t.Cleanup(func() { l.ip(t, "netns", "del", l.controllerNS) })
	// Created inside the namespaces: the host's own namespace never sees it.
	l.ip(t, "link", "add", "vr", "netns", l.relaydNS, "type", "veth", "peer", "name", "vc", "netns", l.controllerNS)
	l.ip(t, "-n", l.relaydNS, "addr", "add", l.relaydIP+"/30", "dev", "vr")
	l.ip(t, "-n", l.controllerNS, "addr", "add", l.controllerIP+"/30", "dev", "vc")
	l.ip(t, "-n", l.relaydNS, "link", "set", "vr", "up")
	l.ip(t, "-n", l.controllerNS, "link", "set", "vc", "up")
	return l
}

func (l *peerLink) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// startRelayd starts relayd inside the relayd namespace, listening on its
// end of the link. nsenter enters the network namespace only and execs
// relayd, so the test's process is relayd itself.
func (l *peerLink) startRelayd(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := prepare(t, opts{args: append([]string{"--listen", l.relaydIP + ":0"}, args...)})
	nsenter, _ := exec.LookPath("nsenter")
	d.cmd.Args = append([]string{"nsenter", "--net=/run/netns/" + l.relaydNS, "--", d.cmd.Path}, d.cmd.Args[1:]...)
	d.cmd.Path = nsenter
	d.start()
	return d
}

// dial connects to relayd from the controller namespace: a goroutine
// locked to its thread enters the namespace and creates the socket there;
// the socket stays in it. The thread is never unlocked, so it ends with the
// goroutine and no other goroutine runs in the namespace.
func (l *peerLink) dial(t *testing.T, d *daemon) *client {
	t.Helper()
	type dialed struct {
		c   net.Conn
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open("/run/netns/" + l.controllerNS)
		if err != nil {
			got <- dialed{nil, err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			got <- dialed{nil, fmt.Errorf("setns %s: %w", l.controllerNS, err)}
			return
		}
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		got <- dialed{c, err}
	}()
	r := <-got
	if r.err != nil {
		t.Fatalf("dialing relayd from the controller namespace: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return &client{t: t, c: r.c, r: bufio.NewReaderSize(r.c, 1<<20), token: d.token}
}

// blackHole makes the controller's namespace drop every packet in and out:
// relayd's segments and probes go unanswered, as if its host had died.
// ARP still works (the inet family does not filter it), so relayd sees a
// silent peer, not an unreachable one.
func (l *peerLink) blackHole(t *testing.T) {
	t.Helper()
	const rules = `table inet blackhole {
	chain in { type filter hook input priority 0; policy drop; }
	chain out { type filter hook output priority 0; policy drop; }
}`
	cmd := exec.Command("ip", "netns", "exec", l.controllerNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", l.controllerNS, err, out)
	}
}

// logRecord finds relayd's first log record with message msg whose field
// starts with prefix.
func logRecord(d *daemon, msg, field, prefix string) map[string]any {
	for _, line := range strings.Split(d.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if v, _ := rec[field].(string); rec["message"] == msg && strings.HasPrefix(v, prefix) {
			return rec
		}
	}
	return nil
}

// A controller that goes silent while its execution runs is noticed within
// --peer-timeout, and the execution is settled (rule 6.4): the subject is
// gone within --peer-timeout + --teardown-timeout + a margin of the moment
// the path went dark, not after the kernel's minutes.
func TestDeadPeerSettled(t *testing.T) {
	l := newPeerLink(t)
	d := l.startRelayd(t, "--peer-timeout", peerTimeout.String())
	cl := l.dial(t, d)
	if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("got %v; want ready", r)
	}
	pidFile := d.pidFile("subject.pid")
	cl.send(msg{"kind": "execute", "command": "/bin/sh",
		"args": []string{"-c", "echo $$ > " + q(pidFile) + "; exec sleep 300"}, "timeoutMs": 600000})
	pid := waitPid(t, pidFile)

	l.blackHole(t)
	dark := time.Now()
	// --teardown-timeout is 3s (prepare); the margin covers the race
	// detector and a loaded machine.
	bound := peerTimeout + 3*time.Second + 5*time.Second
	var detected time.Duration
	waitFor(t, bound, "relayd to settle the dead controller's execution", func() bool {
		if detected == 0 && logRecord(d, "settling scope", "reason", "peer unreachable") != nil {
			detected = time.Since(dark)
		}
		return detected != 0 && !alive(pid)
	})
	settled := time.Since(dark)
	waitFor(t, 5*time.Second, "the connection to be closed", func() bool {
		return logRecord(d, "connection closed", "reason", "peer unreachable") != nil
	})
	if rec := logRecord(d, "execution ended", "settlement", ""); rec["settlement"] != "settled" || rec["termination"] != "framework_timeout" {
		t.Fatalf("execution ended %v; want settlement settled, termination framework_timeout", rec)
	}
	t.Logf("--peer-timeout %s: settlement began %s after the path went dark; the subject was gone after %s",
		peerTimeout, detected.Round(10*time.Millisecond), settled.Round(10*time.Millisecond))
	d.stopClean()
}

// An idle controller that is alive is never dropped: its kernel answers
// relayd's keepalive probes. An execution that prints nothing runs for three
// times --peer-timeout and is answered, and the connection, idle as long
// again, still answers ready.
func TestIdleLivePeerKept(t *testing.T) {
	l := newPeerLink(t)
	d := l.startRelayd(t, "--peer-timeout", peerTimeout.String())
	cl := l.dial(t, d)
	if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("got %v; want ready", r)
	}
	quiet := 3 * peerTimeout
	r := cl.sh(fmt.Sprintf("sleep %d", int(quiet.Seconds())), msg{"timeoutMs": 600000})
	wantExit(t, r, "exited", 0)
	// Nothing crosses the connection but keepalive probes for this long:
	// the passing time is what is tested, not a wait for readiness.
	time.Sleep(quiet)
	if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("after %s idle: got %v; want ready", quiet, r)
	}
	if rec := logRecord(d, "connection closed", "reason", ""); rec != nil {
		t.Fatalf("relayd closed an idle live connection: %v", rec)
	}
	d.stopClean()
}

// A controller that goes dark while relayd writes to it is dropped
// --peer-timeout after the write: while data is unacknowledged the kernel
// sends no keepalive probes, so only TCP_USER_TIMEOUT bounds this state
// (without it, retransmissions go on for about 15 minutes, tcp_retries2).
func TestDeadPeerWhileWriting(t *testing.T) {
	l := newPeerLink(t)
	d := l.startRelayd(t, "--peer-timeout", peerTimeout.String())
	cl := l.dial(t, d)
	if r := cl.request(msg{"kind": "ready"}); r["kind"] != "ready" {
		t.Fatalf("got %v; want ready", r)
	}
	pidFile, goFile := d.pidFile("subject.pid"), d.pidFile("go")
	cl.send(msg{"kind": "execute", "command": "/bin/sh", "timeoutMs": 600000,
		"args": []string{"-c", "echo $$ > " + q(pidFile) + "; while [ ! -e " + q(goFile) + " ]; do sleep 0.02; done"}})
	pid := waitPid(t, pidFile)

	l.blackHole(t)
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The subject exits by itself and relayd writes its executed reply into
	// the dark.
	waitFor(t, 5*time.Second, "the subject to exit", func() bool { return !alive(pid) })
	wrote := time.Now()
	var closed time.Duration
	waitFor(t, peerTimeout+5*time.Second, "relayd to drop the dark connection", func() bool {
		if logRecord(d, "connection closed", "reason", "peer unreachable") == nil {
			return false
		}
		closed = time.Since(wrote)
		return true
	})
	if rec := logRecord(d, "execution ended", "termination", ""); rec["termination"] != "exited" {
		t.Fatalf("execution ended %v; want termination exited (rule 6.3: the subject ended by itself)", rec)
	}
	t.Logf("--peer-timeout %s: the connection was dropped %s after relayd wrote into it",
		peerTimeout, closed.Round(10*time.Millisecond))
	d.stopClean()
}
