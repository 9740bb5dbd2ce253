package e2e

import (
	"encoding/json"
	"os"
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
