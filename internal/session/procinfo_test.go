package session

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	relaydexec "github.com/relayd/relayd/internal/exec"
)

// parseListening keeps the LISTEN rows (st 0A) of /proc/net/tcp and tcp6,
// by inode, and skips the header, other states and malformed lines.
func TestParseListening(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 12346 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
   3: garbage
   4: 00000000:ZZZZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2328 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 06 00000000:00000000 00:00000000 00000000     0        0 98 1
`
	got := map[uint64]int{}
	parseListening(strings.NewReader(tcp), got)
	parseListening(strings.NewReader(tcp6), got)
	want := map[uint64]int{12345: 8080, 99: 9000}
	if len(got) != len(want) || got[12345] != 8080 || got[99] != 9000 {
		t.Fatalf("parseListening: got %v; want %v", got, want)
	}
}

// parseUID takes the real uid.
func TestParseUID(t *testing.T) {
	if uid, ok := parseUID([]byte("Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t1\n")); !ok || uid != 1000 {
		t.Errorf("parseUID: got %d, %v; want the real uid 1000", uid, ok)
	}
}

// A survivor carries its uid, session, start time and the ports it
// listens on: this test process, listening on a loopback port, described.
func TestDescribeJudgeable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	self := os.Getpid()
	list, _ := describe([]relaydexec.Member{{PID: self}}, 0)
	if len(list) != 1 {
		t.Fatalf("describe: got %d survivors; want 1", len(list))
	}
	s := list[0]
	sid, _ := unix.Getsid(0)
	if s.UID != os.Getuid() || s.Session != sid || !slices.Contains(s.Listens, port) || s.ArgvUnavailable || len(s.Argv) == 0 {
		t.Fatalf("survivor %+v; want uid %d, session %d, listens with %d, an argv", s, os.Getuid(), sid, port)
	}
	if start := time.UnixMilli(s.Start); time.Since(start) < 0 || time.Since(start) > 24*time.Hour {
		t.Fatalf("survivor start %s (%d ms); want this test process's start, before now", start, s.Start)
	}
}

// A process whose command line is gone (a zombie) is not listed with a
// silent []: argvUnavailable, and its name from the kernel. The zombie is
// a grandchild whose parent (python3) never waits for it: this package's
// tests run relayd's reaper, which would reap a child of the test.
func TestDescribeZombie(t *testing.T) {
	cmd := exec.Command("python3", "-c", "import os, sys, time\npid = os.fork()\nif pid == 0: os._exit(0)\nprint(pid, flush=True)\ntime.sleep(30)")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("reading the zombie's pid: %q, %v, %v", line, err, perr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info, ok := readProcInfo(pid); ok && info.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the grandchild never became a zombie")
		}
		time.Sleep(time.Millisecond)
	}
	list, _ := describe([]relaydexec.Member{{PID: pid}}, 0)
	if s := list[0]; !s.ArgvUnavailable || !slices.Equal(s.Argv, []string{"python3"}) || s.UID != os.Getuid() {
		t.Fatalf("zombie survivor %+v; want argvUnavailable, argv [python3] (its comm), uid %d", s, os.Getuid())
	}
}

// parseIDs takes the uid and gid only when real, effective and saved agree
// (what ptrace's fsuid check compares, portsDenied's thread takes).
func TestParseIDs(t *testing.T) {
	for _, c := range []struct {
		status   string
		uid, gid uint32
		ok       bool
	}{
		{"Name:\tx\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\n", 65534, 65534, true},
		{"Uid:\t1000\t1000\t1000\t0\nGid:\t100\t100\t100\t0\n", 1000, 100, true},
		{"Uid:\t1000\t0\t1000\t0\nGid:\t100\t100\t100\t100\n", 0, 0, false},
		{"Uid:\t1000\t1000\t1000\t1000\nGid:\t100\t5\t100\t100\n", 0, 0, false},
		{"Uid:\t1000\t1000\t1000\t1000\n", 0, 0, false},
		{"Uid:\tx\tx\tx\tx\nGid:\t1\t1\t1\t1\n", 0, 0, false},
	} {
		uid, gid, ok := parseIDs([]byte(c.status))
		if ok != c.ok || (ok && (uid != c.uid || gid != c.gid)) {
			t.Errorf("parseIDs(%q) = %d, %d, %v; want %d, %d, %v", c.status, uid, gid, ok, c.uid, c.gid, c.ok)
		}
	}
}
