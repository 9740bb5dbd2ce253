package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// commandWait bounds how long Close waits for the command of DialCommand
// to end once its stdin is closed, before it is killed.
var commandWait = 5 * time.Second

// DialCommand reaches relayd through a command that carries the protocol
// on its stdin and stdout: `relayd bridge` through any exec channel
// (protocol 4.6), e.g. []string{"docker", "exec", "-i", C, "relayd",
// "bridge"} or kubectl exec -i POD -c task -- /opt/relayd/relayd bridge
// (where deploy/kubernetes puts relayd, off the Pod's PATH). Its stderr is this
// process's. The command gets one end of a socket pair as both stdin and
// stdout, so deadlines work as on TCP. Close ends its stdin (the end of
// the controller's stream, a transport loss for what runs) and waits for
// it to exit, killing it after 5 s.
func DialCommand(ctx context.Context, argv []string, token string) (*Conn, error) {
	var d *Dialer
	return d.DialCommand(ctx, argv, token)
}

// DialCommand is the package's DialCommand with d's settings.
func (d *Dialer) DialCommand(ctx context.Context, argv []string, token string) (*Conn, error) {
	if len(argv) == 0 {
		return nil, errors.New("client.DialCommand: no command")
	}
	cfg := d.withDefaults()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("client.DialCommand: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "relayd-command"), os.NewFile(uintptr(fds[1]), "relayd-command")
	nc, err := net.FileConn(ours)
	ours.Close() // FileConn made its own descriptor
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("client.DialCommand: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs, theirs, os.Stderr
	err = cmd.Start()
	theirs.Close() // the command holds its own copies: its end is then our EOF
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("client.DialCommand %s: %w", argv[0], err)
	}
	cc := &commandConn{Conn: nc, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // this command only
		close(cc.exited)
	}()
	c := newConn(cc, protocol.NewLineReader(cc, cfg.MaxReplyBytes), token, cfg)
	hello, err := c.Ready(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("client.DialCommand %s: handshake: %w", argv[0], err)
	}
	c.hello = hello
	return c, nil
}

// commandConn is the socket to a command's stdin and stdout; closing it
// ends the command too.
type commandConn struct {
	net.Conn
	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

func (cc *commandConn) Close() error {
	err := cc.Conn.Close()
	cc.once.Do(func() {
		select {
		case <-cc.exited:
		case <-time.After(commandWait):
			_ = cc.cmd.Process.Kill() // our own child, not yet reaped
			<-cc.exited
		}
	})
	return err
}
