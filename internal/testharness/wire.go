package testharness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// writeTimeout bounds one write of a Wire.
const writeTimeout = 10 * time.Second

// Wire is a raw line connection to relayd, for tests that send what a real
// controller never would (malformed lines, wrong tokens, half a message) or
// compare replies byte for byte. Controllers use package client.
//
// Its fields are the connection, a reader on it, and the token Send adds;
// a test may use the connection directly (CloseWrite, SetLinger).
type Wire struct {
	Conn  net.Conn
	R     *bufio.Reader
	Token string
}

// DialWire connects to addr within timeout; no handshake.
func DialWire(addr, token string, timeout time.Duration) (Wire, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return Wire{}, err
	}
	return NewWire(c, token), nil
}

// NewWire wraps c, with a reader for replies up to 1 MiB in one buffer.
func NewWire(c net.Conn, token string) Wire {
	return Wire{Conn: c, R: bufio.NewReaderSize(c, 1<<20), Token: token}
}

// Send writes m as one JSON line, with the Wire's token unless m has a
// "token" already.
func (w Wire) Send(m map[string]any) error {
	if _, ok := m["token"]; !ok {
		m["token"] = w.Token
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return w.SendRaw(append(b, '\n'))
}

// SendRaw writes b as it is, within 10 s.
func (w Wire) SendRaw(b []byte) error {
	_ = w.Conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := w.Conn.Write(b)
	return err
}

// ErrNoReply is ReadLine's error when no line came within its timeout.
var ErrNoReply = errors.New("testharness: no reply in time")

// ReadLine returns the next line, "\n" included. At the end of the stream it
// returns the error of the read (io.EOF, a reset); when timeout passes
// first, an error that matches ErrNoReply.
func (w Wire) ReadLine(timeout time.Duration) ([]byte, error) {
	_ = w.Conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := w.R.ReadBytes('\n')
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%w (%s)", ErrNoReply, timeout)
		}
		return nil, err
	}
	return line, nil
}
