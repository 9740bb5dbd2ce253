package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func pidsIn(path string) []int {
	b, _ := os.ReadFile(path)
	var out []int
	for _, w := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(w); err == nil && pid > 1 {
			out = append(out, pid)
		}
	}
	return out
}

// syscallKill SIGKILLs a process the test's own subject started.
func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
