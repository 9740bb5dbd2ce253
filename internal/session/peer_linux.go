package session

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A controller that vanishes without closing (its host crashed, the network
// between them was cut) sends no FIN and no reset: relayd learns of it only
// when TCP gives up on the connection. --peer-timeout bounds that, in both
// states a connection can be in (docs/protocol.md section 2, "Dead peers"):
//
//   - Idle (relayd has nothing unacknowledged, which is the case while an
//     execution runs and the controller waits): keepalive. The first probe
//     goes out one probe interval p after the last segment relayd received,
//     then one every p. With TCP_USER_TIMEOUT set, Linux drops the
//     connection at the first probe tick at or past the user timeout with
//     a probe unanswered, so the bound is --peer-timeout rounded up to a
//     whole number of intervals, at least two: exactly --peer-timeout when
//     it is a multiple of 3 s (the default 30 s) or 2 s, and never more than
//     3p, under --peer-timeout + 3 s, after relayd last heard from the peer.
//     A live peer's kernel answers every probe, whether or not the
//     controller reads: an idle controller that is alive is never dropped.
//   - Writing (relayd sent data that is not acknowledged): TCP_USER_TIMEOUT.
//     The kernel stops retransmitting and drops the connection --peer-timeout
//     after the oldest unacknowledged byte was sent. No keepalive probe goes
//     out meanwhile, so a write into a connection already dark restarts the
//     clock: from going dark, the worst case is the idle bound plus
//     --peer-timeout. A live peer that keeps a zero window that long (it
//     stopped reading) may count as gone too (recent kernels apply the user
//     timeout to zero-window probes), as it does after --write-timeout.
//
// Either way the next read fails with ETIMEDOUT (or EHOSTUNREACH when an
// ICMP error arrived meanwhile), which the connection's loop treats as transport loss
// (rule 6.4): a running execution is settled.

// peerProbeInterval is the keepalive idle time and probe interval for a
// peer timeout d: a third of it, rounded up to a whole second (the kernel
// counts keepalive in seconds), at least 1 s.
func peerProbeInterval(d time.Duration) time.Duration {
	p := (d/3 + time.Second - 1).Truncate(time.Second)
	return max(p, time.Second)
}

// setPeerTimeout bounds how long a dead peer of c goes unnoticed. d <= 0
// leaves the defaults (Go's keepalive: a probe after 15 s idle, then 9 every
// 15 s; the kernel's retransmission limit, tcp_retries2, about 15 minutes).
func setPeerTimeout(c net.Conn, d time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok || d <= 0 {
		return nil
	}
	p := peerProbeInterval(d)
	// Count matters only where TCP_USER_TIMEOUT does not take over the
	// keepalive decision: idle p + 2 unanswered probes p apart ends at 3p,
	// the same bound.
	if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: p, Interval: p, Count: 2}); err != nil {
		return fmt.Errorf("keepalive: %w", err)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("TCP_USER_TIMEOUT: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return fmt.Errorf("TCP_USER_TIMEOUT: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("TCP_USER_TIMEOUT: %w", serr)
	}
	return nil
}

// peerUnreachable reports whether a read error is TCP giving up on a peer
// that stopped acknowledging: the keepalive or the user timeout expired.
func peerUnreachable(err error) bool {
	return errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}
