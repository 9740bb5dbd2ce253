package session

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPeerProbeInterval(t *testing.T) {
	tests := []struct{ d, want time.Duration }{
		{time.Second, time.Second},
		{2 * time.Second, time.Second},
		{3 * time.Second, time.Second},
		{3500 * time.Millisecond, 2 * time.Second},
		{10 * time.Second, 4 * time.Second},
		{30 * time.Second, 10 * time.Second},
		{31 * time.Second, 11 * time.Second},
	}
	for _, tt := range tests {
		p := peerProbeInterval(tt.d)
		if p != tt.want {
			t.Errorf("peerProbeInterval(%s) = %s; want %s", tt.d, p, tt.want)
		}
		// The documented bound: a probe tick at or past d, at most 3p, under d + 3 s.
		if 3*p < tt.d || 3*p >= tt.d+3*time.Second {
			t.Errorf("peerProbeInterval(%s) = %s: 3p = %s is not in [d, d+3s)", tt.d, p, 3*p)
		}
	}
}

// sockopts reads back what setPeerTimeout set on c.
func sockopts(t *testing.T, c net.Conn) map[string]int {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var gerr error
	err = raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				gerr = fmt.Errorf("getsockopt %s: %w", name, err)
				return
			}
			got[name] = v
		}
	})
	if err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return got
}

// setPeerTimeout sets keepalive and TCP_USER_TIMEOUT on a real socket, and
// 0 leaves the user timeout at the kernel's default (none).
func TestSetPeerTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		d    time.Duration
		want map[string]int
	}{
		{30 * time.Second, map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 2, "TCP_USER_TIMEOUT": 30000}},
		{2 * time.Second, map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 1, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 2, "TCP_USER_TIMEOUT": 2000}},
		{0, map[string]int{"TCP_USER_TIMEOUT": 0}},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := setPeerTimeout(c, tt.d); err != nil {
			t.Fatalf("setPeerTimeout(%s) = %v", tt.d, err)
		}
		got := sockopts(t, c)
		for name, want := range tt.want {
			if got[name] != want {
				t.Errorf("setPeerTimeout(%s): %s = %d; want %d", tt.d, name, got[name], want)
			}
		}
		c.Close()
	}
}

func TestPeerUnreachable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "read", Net: "tcp", Err: fmt.Errorf("read: %w", syscall.ETIMEDOUT)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: fmt.Errorf("read: %w", syscall.EHOSTUNREACH)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: fmt.Errorf("read: %w", syscall.ECONNRESET)}, false},
	} {
		if got := peerUnreachable(tt.err); got != tt.want {
			t.Errorf("peerUnreachable(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}
