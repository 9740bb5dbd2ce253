package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// listenSocket listens on the Unix socket that relayd bridge reaches
// (protocol 4.6), mode 0600 from its bind on, its directory made when
// missing. A socket file nobody answers on (a killed relayd's) is
// replaced; one another relayd answers on is an error, as is a path that
// is not a socket.
func listenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another relayd serves this socket", path)
		}
		if !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// The umask makes the socket 0600 at bind, before anyone can connect.
	// It is the process's: this runs at startup, before any execution.
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	return ln, nil
}
