package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Survivors a harness can judge (issue 18, contract 4.6): each survivor
// of executed and verified carries uid, listens (the local TCP ports it
// listens on), start (ms since the Unix epoch) and session, so that a
// harness can keep a service the task asked for by its port.
func TestSurvivorListens(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		defer d.stopClean()
		cl := d.connect()
		pidFile, portFile := d.pidFile("server.pid"), filepath.Join(d.dir, "server.port")
		server := `import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[2], "w").write(str(s.getsockname()[1]))
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(60)`
		before := time.Now()
		r := cl.sh(`python3 -c `+q(server)+` `+q(pidFile)+` `+q(portFile)+` >/dev/null 2>&1 &
while [ ! -s `+q(pidFile)+` ]; do sleep 0.02; done`, nil)
		wantExit(t, r, "exited", 0)
		pid := waitPid(t, pidFile)
		b, _ := os.ReadFile(portFile)
		port, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("port file %q: %v", b, err)
		}
		sid, err := unix.Getsid(pid)
		if err != nil {
			t.Fatal(err)
		}
		check := func(r msg) {
			t.Helper()
			s := survivorOf(t, r, pid)
			if s == nil {
				t.Fatalf("%v: no survivor %d in %v", r["kind"], pid, r["survivors"])
			}
			listens, _ := s["listens"].([]any)
			if len(listens) != 1 || listens[0].(json.Number).String() != strconv.Itoa(port) {
				t.Fatalf("survivor %v: listens = %v; want [%d]", s, s["listens"], port)
			}
			if num(t, s, "uid") != int64(os.Getuid()) || num(t, s, "session") != int64(sid) {
				t.Fatalf("survivor %v: want uid %d, session %d", s, os.Getuid(), sid)
			}
			// start: the second of boot is rounded, a tick is 10 ms.
			start := time.UnixMilli(num(t, s, "start"))
			if start.Before(before.Add(-2*time.Second)) || start.After(time.Now().Add(2*time.Second)) {
				t.Fatalf("survivor %v: start %s; want between %s and now", s, start, before)
			}
			if argv, _ := s["argv"].([]any); len(argv) == 0 || !strings.Contains(argv[0].(string), "python3") || s["argvUnavailable"] != nil {
				t.Fatalf("survivor %v: want argv python3 ..., no argvUnavailable", s)
			}
		}
		check(r)
		// A survivor that listens on nothing has an empty listens, not none.
		for _, s := range r["survivors"].([]any) {
			if _, ok := s.(map[string]any)["listens"].([]any); !ok {
				t.Fatalf("survivor %v: listens missing; want an array", s)
			}
		}
		v := cl.request(msg{"kind": "verify"})
		if v["kind"] != "verified" {
			t.Fatalf("got %v; want verified", v)
		}
		check(v)
		killPid(pid)
	})
}

// survivorOf returns the survivor with pid in r's survivors, or nil.
func survivorOf(t testing.TB, r msg, pid int) msg {
	t.Helper()
	list, ok := r["survivors"].([]any)
	if !ok {
		t.Fatalf("survivors = %v; want an array", r["survivors"])
	}
	for _, s := range list {
		m, _ := s.(map[string]any)
		if n, ok := m["pid"].(json.Number); ok && n.String() == strconv.Itoa(pid) {
			return m
		}
	}
	return nil
}

// Issue 41: listens for a survivor of any user, with relayd as root but
// without CAP_SYS_PTRACE (Docker's default capabilities), where
// /proc/PID/fd of another uid's process is closed to relayd's own rights.
// relayd runs under setpriv with the capability out of its bounding set
// (so out of its permitted and effective sets once it execs); a server
// run as nobody, and one as root, are each listed with their port, in the
// executed reply, in status and at the trial boundary.
func TestSurvivorListensEveryUserWithoutPtrace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: subjects run as nobody, relayd as root without CAP_SYS_PTRACE")
	}
	setpriv, err := osexec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to drop CAP_SYS_PTRACE")
	}
	// Forks: the parent prints the port and the child's pid, then exits;
	// the child keeps the listening socket, with stdout and stderr closed.
	const server = `import os, socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
pid = os.fork()
if pid:
    print(s.getsockname()[1], pid, flush=True)
    os._exit(0)
fd = os.open("/dev/null", os.O_RDWR)
os.dup2(fd, 1)
os.dup2(fd, 2)
time.sleep(60)`
	eachScope(t, func(t *testing.T, mech string) {
		d := prepare(t, opts{scope: mech})
		d.cmd.Args = append([]string{setpriv, "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", d.cmd.Path},
			d.cmd.Args[1:]...)
		d.cmd.Path = setpriv
		d.start()
		defer d.stopClean()
		if capEff(t, d.cmd.Process.Pid)>>19&1 != 0 {
			t.Fatal("relayd holds CAP_SYS_PTRACE under setpriv")
		}
		for _, user := range []string{"nobody", "root"} {
			cl := d.connect()
			r := cl.sh("exec python3 -c "+q(server), msg{"user": user, "cwd": "/"})
			wantExit(t, r, "exited", 0)
			var port, pid int
			if _, err := fmt.Sscan(r["stdout"].(string), &port, &pid); err != nil {
				t.Fatalf("%s: stdout %q: %v", user, r["stdout"], err)
			}
			if err := os.WriteFile(d.pidFile(user+".pid"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
				t.Fatal(err)
			}
			check := func(what string, r msg) msg {
				t.Helper()
				s := survivorOf(t, r, pid)
				if s == nil {
					t.Fatalf("%s, %s: no survivor %d in %v", user, what, pid, r["survivors"])
				}
				listens, _ := s["listens"].([]any)
				if len(listens) != 1 || listens[0].(json.Number).String() != strconv.Itoa(port) {
					t.Fatalf("%s, %s: survivor %v: listens = %v; want [%d]", user, what, s, s["listens"], port)
				}
				return s
			}
			check("executed", r)
			s := check("status", d.connect().request(msg{"kind": "status"}))
			// The trial boundary keeps it (as a harness keeping a port does) and lists it.
			v := cl.request(msg{"kind": "verify", "all": true, "survivors": "settle",
				"keep": []msg{{"pid": s["pid"], "start": s["start"]}}})
			if v["kind"] != "verified" {
				t.Fatalf("got %v; want verified", v)
			}
			check("verified", v)
			killPid(pid)
		}
	})
}

// capEff is the effective capability set of pid.
func capEff(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no CapEff in /proc/%d/status", pid)
	return 0
}
