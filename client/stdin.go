package client

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"
	"unicode/utf8"
)

// stdinChunk is the most of Request.Stdin one stdin message carries: its
// base64 (256 KiB) fits relayd's default --max-line-bytes (1 MiB) with room.
const stdinChunk = 192 << 10

// stdinWire is a stdin message (protocol 4.6).
type stdinWire struct {
	Token     string `json:"token"`
	Kind      string `json:"kind"`
	Execution string `json:"execution"`
	Data      string `json:"data,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	EOF       bool   `json:"eof,omitempty"`
}

// inputField is how Request.Input goes on the wire: as text when it is
// UTF-8, else as base64.
func inputField(b []byte) (input, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// stdinPump copies Request.Stdin to relayd as stdin messages once relayd
// has named the execution (started), and ends with eof. Relayd paces it:
// it stops reading the connection while the subject's unread input is
// over --max-stdin-buffer, so a write may wait that long (the execution's
// own Timeout bounds it).
type stdinPump struct {
	c    *Conn
	r    io.Reader
	keys bool // keystrokes for a terminal: each Read is sent as it comes
	once sync.Once
	mu   sync.Mutex
	stop bool          // the execution ended: send nothing more
	read bool          // the pump is in r.Read
	done chan struct{} // closed when the pump has ended; nil until begin
}

// begin starts the pump for execution x; it is called once, from the
// connection's reader, when started comes.
func (p *stdinPump) begin(x string) {
	p.once.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stop {
			return
		}
		p.done = make(chan struct{})
		go p.run(x)
	})
}

func (p *stdinPump) run(x string) {
	defer close(p.done)
	buf := make([]byte, stdinChunk)
	for {
		p.mu.Lock()
		if p.stop {
			p.mu.Unlock()
			return
		}
		p.read = true
		p.mu.Unlock()
		var n int
		var err error
		if p.keys {
			n, err = p.r.Read(buf)
		} else {
			n, err = io.ReadFull(p.r, buf)
		}
		p.mu.Lock()
		p.read = false
		stop := p.stop
		p.mu.Unlock()
		if stop {
			return
		}
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			// A reader that fails ends the input where it failed.
			eof = true
		}
		if n == 0 && !eof {
			continue // a Read of nothing, which io.Reader allows
		}
		m := stdinWire{Kind: kindStdin, Execution: x, EOF: eof}
		if n > 0 {
			m.Data, m.Encoding = base64.StdEncoding.EncodeToString(buf[:n]), "base64"
		}
		if p.c.writeStdin(&m) != nil || eof {
			return
		}
	}
}

// end stops the pump once the execution's reply came: it waits for a
// message being written, not for a Read of Request.Stdin, which may block
// for as long as its source likes (the pump then ends when it returns).
func (p *stdinPump) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stop = true
	done, reading := p.done, p.read
	p.mu.Unlock()
	if done != nil && !reading {
		<-done
	}
}

// writeStdin sends one stdin message without a write deadline: relayd
// stops reading while the subject's input is held (protocol 4.6).
func (c *Conn) writeStdin(m *stdinWire) error {
	m.Token = c.token
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf.Reset()
	if c.wenc == nil {
		c.wenc = json.NewEncoder(&c.wbuf)
	}
	if err := c.wenc.Encode(m); err != nil {
		return fmt.Errorf("client: encoding a stdin message: %w", err)
	}
	_ = c.nc.SetWriteDeadline(time.Time{})
	if _, err := c.nc.Write(c.wbuf.Bytes()); err != nil {
		c.fail(fmt.Errorf("%w: writing stdin: %v", ErrConnLost, err))
		return c.failure()
	}
	return nil
}

// resizeWire is a resize message (protocol 4.7).
type resizeWire struct {
	Token     string `json:"token"`
	Kind      string `json:"kind"`
	ID        int64  `json:"id"`
	Execution string `json:"execution"`
	Rows      int    `json:"rows"`
	Cols      int    `json:"cols"`
}

// Resize sets the size of the terminal of execution, which runs on this
// connection with Request.Pty (protocol 4.7; name it from
// Request.Started): relayd sets it and the subject's foreground job gets
// SIGWINCH. relayd does not answer a resize that works; one it refuses
// (no such execution, no terminal) is logged (Dialer.Log) and fails no
// call. A size outside 1 to 1000 is refused here. Resize may be called
// from any goroutine while Execute waits.
func (c *Conn) Resize(execution string, rows, cols int) error {
	if rows < 1 || rows > 1000 || cols < 1 || cols > 1000 {
		return &Error{Category: ErrBadRequest.Category, Message: "client: Resize: rows and cols must be from 1 to 1000"}
	}
	m := resizeWire{Token: c.token, Kind: kindResize, ID: resizeID, Execution: execution, Rows: rows, Cols: cols}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf.Reset()
	if c.wenc == nil {
		c.wenc = json.NewEncoder(&c.wbuf)
	}
	if err := c.wenc.Encode(&m); err != nil {
		return fmt.Errorf("client: encoding a resize message: %w", err)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
	if _, err := c.nc.Write(c.wbuf.Bytes()); err != nil {
		c.fail(fmt.Errorf("%w: writing resize: %v", ErrConnLost, err))
		return c.failure()
	}
	return nil
}

// writeLoose writes a message relayd answers only when it refuses it
// (resize, a session's keystrokes): with resizeID, so that a refusal is
// logged and fails no call.
func (c *Conn) writeLoose(m any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf.Reset()
	if c.wenc == nil {
		c.wenc = json.NewEncoder(&c.wbuf)
	}
	if err := c.wenc.Encode(m); err != nil {
		return fmt.Errorf("client: encoding a message: %w", err)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
	if _, err := c.nc.Write(c.wbuf.Bytes()); err != nil {
		c.fail(fmt.Errorf("%w: writing: %v", ErrConnLost, err))
		return c.failure()
	}
	return nil
}

// resizeID is the id of every resize message: no call has it (calls count
// up from 1), so that relayd's refusal of one is told from the errors of
// the calls that wait.
const resizeID = -1

// resizeRefused logs relayd's refusal of a resize.
func (c *Conn) resizeRefused(line []byte) {
	var e struct {
		Error Error `json:"error"`
	}
	_ = json.Unmarshal(line, &e)
	logf := log.Printf
	if c.cfg.Log != nil {
		logf = c.cfg.Log.Printf
	}
	logf("relayd at %s refused a resize: %s: %s", c.nc.RemoteAddr(), e.Error.Category, e.Error.Message)
}
