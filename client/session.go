package client

import (
	"context"
	"io"
	"math"
	"time"
)

// Shell sessions (protocol 4.7): a shell whose state (directory,
// variables, functions, background jobs) lasts from one command to the
// next, with each command's own exit status and output.

const (
	kindOpen   = "open"
	kindOpened = "opened"
	kindClose  = "close"
	kindClosed = "closed"
)

// SessionOptions configure OpenSession. Every field may be left zero.
type SessionOptions struct {
	Pty         *Pty              // a terminal: the shell is bash -i on it, read as a screen (Session.Read)
	Shell       string            // "bash" (relayd's default) or "sh"
	User        string            // whom the shell runs as
	Cwd         string            // its first directory; relative to the workspace
	Environment map[string]string // variables added to its environment
	Credentials map[string]string // secret variables, as Request.Credentials
	Limits      map[string]uint64 // protocol 4.8's limits of the shell and all it starts
}

// Session is an open shell session. Its commands run one at a time;
// any connection may use it (Conn.Session names one that another opened).
type Session struct {
	c     *Conn
	Name  string // "s-N"
	Shell string
	Cwd   string // the shell's directory when it opened
	pty   bool   // opened here with a terminal: Stdin is keystrokes
}

// RunOptions configure Session.Run.
type RunOptions struct {
	Timeout time.Duration // the command's deadline: Ctrl-C, then its processes are settled
	// Input is the command's stdin, which then closes (unless Stdin is
	// set); nil: /dev/null. With a pty, it needs bash and no NUL.
	Input          []byte
	MaxOutputBytes int64 // at most this much of stdout and of stderr each
	// Output, when set, asks for live output (stream), as Request.Output:
	// called from the connection's reader for each chunk, in order, every
	// one before Run returns; with a pty its Stream is "pty".
	Output func(Output)
	// Started, when set, is called with relayd's execution id once the
	// command runs (with Output or Stdin only).
	Started func(execution string)
	// Stdin, when set, is copied to the command's stdin after Input, as
	// Request.Stdin, until it returns EOF; the command then reads its end
	// of file. In a session opened here with a pty it is keystrokes into
	// the terminal, sent as they come, and its EOF types nothing.
	Stdin io.Reader
}

// Closed is relayd's answer to Session.Close.
type Closed struct {
	Session    string     `json:"session"`
	Settlement Settlement `json:"settlement"`
	Detail     string     `json:"detail,omitempty"`
	Usage      *Usage     `json:"usage,omitempty"` // what the whole session used, the shell included (protocol 4.8)
}

// OpenSession opens a shell session. A relayd with as many sessions open
// as --max-sessions allows answers ErrBusy; one without "session" in
// Ready.Extensions answers ErrUnknownKind.
func (c *Conn) OpenSession(ctx context.Context, o SessionOptions) (*Session, error) {
	msg := map[string]any{"kind": kindOpen}
	if o.Shell != "" {
		msg["shell"] = o.Shell
	}
	if o.User != "" {
		msg["user"] = o.User
	}
	if o.Cwd != "" {
		msg["cwd"] = o.Cwd
	}
	if len(o.Environment) > 0 {
		msg["environment"] = o.Environment
	}
	if len(o.Credentials) > 0 {
		msg["credentials"] = o.Credentials
	}
	if len(o.Limits) > 0 {
		msg["limits"] = o.Limits
	}
	if p := o.Pty; p != nil {
		msg["pty"] = &ptyWire{Rows: p.Rows, Cols: p.Cols, Term: p.Term}
	}
	var r struct {
		Session string `json:"session"`
		Shell   string `json:"shell"`
		Cwd     string `json:"cwd"`
	}
	if err := c.roundTrip(ctx, msg, &call{want: kindOpened, into: &r}, c.cfg.bound(c.cfg.ReplyTimeout)); err != nil {
		return nil, err
	}
	return &Session{c: c, Name: r.Session, Shell: r.Shell, Cwd: r.Cwd, pty: o.Pty != nil}, nil
}

// Session is the open session name, to be used through this connection.
func (c *Conn) Session(name string) *Session { return &Session{c: c, Name: name} }

// Run runs script in the session's shell as if typed at its prompt and
// returns its executed reply: ExitCode is the command's own status
// (2 for a syntax error), Stdout and Stderr apart, Cwd the shell's
// directory afterwards, SessionEnded when the shell is gone (exit). It
// counts as the connection's one execution.
func (s *Session) Run(ctx context.Context, script string, o RunOptions) (Executed, error) {
	var e Executed
	if o.Timeout < 0 || o.MaxOutputBytes < 0 {
		return e, &Error{Category: ErrBadRequest.Category, Message: "client: RunOptions.Timeout and MaxOutputBytes must not be negative"}
	}
	if err := s.c.beginExecution(); err != nil {
		return e, err
	}
	defer s.c.endExecution()
	msg := map[string]any{"kind": kindExecute, "session": s.Name, "script": script}
	if o.Timeout > 0 {
		msg["timeoutMs"] = millis(o.Timeout)
	}
	if o.Input != nil {
		in, enc := inputField(o.Input)
		msg["input"] = in
		if enc != "" {
			msg["inputEncoding"] = enc
		}
	}
	if o.MaxOutputBytes > 0 {
		msg["maxOutputBytes"] = o.MaxOutputBytes
	}
	if o.Output != nil {
		msg["stream"] = true
	}
	started := o.Started
	var pump *stdinPump
	if o.Stdin != nil {
		msg["stdin"] = true
		pump = &stdinPump{c: s.c, r: o.Stdin, keys: s.pty}
		started = func(x string) {
			pump.begin(x)
			if o.Started != nil {
				o.Started(x)
			}
		}
	}
	wait := time.Duration(math.MaxInt64)
	if o.Timeout > 0 && o.Timeout < wait-2*s.c.cfg.TeardownTimeout-settleSlack {
		wait = o.Timeout + 2*s.c.cfg.TeardownTimeout + settleSlack
	}
	err := s.c.roundTrip(ctx, msg, &call{want: kindExecuted, into: &e, output: o.Output, started: started}, s.c.cfg.bound(wait))
	pump.end()
	return e, err
}

// Close settles the whole session (every process in it, with evidence)
// and returns how that went.
func (s *Session) Close(ctx context.Context) (Closed, error) {
	var r Closed
	err := s.c.roundTrip(ctx, map[string]any{"kind": kindClose, "session": s.Name},
		&call{want: kindClosed, into: &r}, s.c.cfg.bound(s.c.cfg.ReplyTimeout+s.c.cfg.TeardownTimeout+settleSlack))
	return r, err
}

// Terminal is what a pty session's terminal printed (Session.Read).
type Terminal struct {
	Data  string `json:"data"`
	Next  int64  `json:"next"`           // the offset to read from next
	Lost  int64  `json:"lost,omitempty"` // bytes before Data that the ring no longer held
	Ended bool   `json:"ended,omitempty"`
}

// Read returns what the session's terminal printed from offset from on
// (protocol 4.7), waiting up to wait for something new when nothing is
// there, and returning once nothing new came for idle (0: at once). Only
// a session opened with a pty has a terminal. Read may be called from
// any goroutine, while Run waits too.
func (s *Session) Read(ctx context.Context, from int64, wait, idle time.Duration) (Terminal, error) {
	var t Terminal
	msg := map[string]any{"kind": "read", "session": s.Name, "from": from}
	if wait > 0 {
		msg["waitMs"] = millis(wait)
	}
	if idle > 0 {
		msg["idleMs"] = millis(idle)
	}
	err := s.c.roundTrip(ctx, msg, &call{want: "terminal", into: &t}, s.c.cfg.bound(s.c.cfg.ReplyTimeout+2*time.Minute))
	return t, err
}

// Write types keys into the session's terminal. relayd answers only a
// refusal, which is logged as a refused resize is (Dialer.Log).
func (s *Session) Write(keys []byte) error {
	in, enc := inputField(keys)
	m := map[string]any{"token": s.c.token, "kind": "stdin", "id": resizeID, "session": s.Name, "data": in}
	if enc != "" {
		m["encoding"] = enc
	}
	return s.c.writeLoose(m)
}

// Resize sets the size of the session's terminal.
func (s *Session) Resize(rows, cols int) error {
	if rows < 1 || rows > 1000 || cols < 1 || cols > 1000 {
		return &Error{Category: ErrBadRequest.Category, Message: "client: Resize: rows and cols must be from 1 to 1000"}
	}
	return s.c.writeLoose(map[string]any{"token": s.c.token, "kind": kindResize, "id": resizeID, "session": s.Name, "rows": rows, "cols": cols})
}
