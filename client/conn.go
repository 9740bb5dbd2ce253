package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// Message kinds of protocol section 4.
const (
	kindReady    = "ready"
	kindExecute  = "execute"
	kindExecuted = "executed"
	kindVerify   = "verify"
	kindVerified = "verified"
	kindError    = "error"
	kindOutput   = "output"  // extension (4.5)
	kindStarted  = "started" // extension (4.5)
	kindStdin    = "stdin"   // extension (4.6)
	kindResize   = "resize"  // extension (4.7)
	kindAttach   = "attach"  // extension (4.5)
	kindContent  = "content" // extension (4.6, files.go)
	kindStatus   = "status"  // extension (4.6)
)

// Defaults of a zero Dialer.
const (
	// DefaultTeardownTimeout is relayd's default --teardown-timeout.
	DefaultTeardownTimeout = 10 * time.Second
	// DefaultReplyTimeout bounds a reply relayd writes at once (ready,
	// errors, verify with nothing running); relayd's --write-timeout is 10s.
	DefaultReplyTimeout = 10 * time.Second
	// DefaultMaxReplyBytes is the longest reply line read: 1 MiB of stdout
	// and 1 MiB of stderr, each escaped up to six times, fit.
	DefaultMaxReplyBytes = 16 << 20
)

// settleSlack is the "small constant" of protocol rule 6.7 past the
// teardown deadline, and room for the reply to travel. A variable only so
// that the package's tests can shorten it.
var settleSlack = 5 * time.Second

// A Dialer holds what a controller knows of the relayds it talks to. The
// zero value uses relayd's defaults.
type Dialer struct {
	// TeardownTimeout is relayd's --teardown-timeout: how long a settlement
	// may take. A reply is awaited that long past an execution's Timeout
	// (or past a Verify) before the client gives up. 0: DefaultTeardownTimeout.
	TeardownTimeout time.Duration
	// ReplyTimeout bounds a reply relayd sends at once, and a write.
	// 0: DefaultReplyTimeout.
	ReplyTimeout time.Duration
	// MaxReplyBytes is the longest reply line accepted; a longer one ends
	// the connection with ErrBadReply. 0: DefaultMaxReplyBytes.
	MaxReplyBytes int
	// MaxWait, when positive, bounds every wait for a reply, an execute's
	// without a Timeout included (which ctx alone bounds otherwise); past
	// it the call ends as ErrReplyOverdue. It costs nothing per call,
	// unlike a context with a deadline.
	MaxWait time.Duration
	// Log receives the client's warnings for people: a reply that says
	// relayd ignored fields of the request it answers (protocol 4.6,
	// "ignored"), one line per reply. nil: the log package's standard
	// logger, as net/http's Server.ErrorLog, since a warning that nobody
	// sees by default would not catch a misspelled field.
	Log *log.Logger
}

func (d *Dialer) withDefaults() Dialer {
	out := Dialer{}
	if d != nil {
		out = *d
	}
	if out.TeardownTimeout <= 0 {
		out.TeardownTimeout = DefaultTeardownTimeout
	}
	if out.ReplyTimeout <= 0 {
		out.ReplyTimeout = DefaultReplyTimeout
	}
	if out.MaxReplyBytes <= 0 {
		out.MaxReplyBytes = DefaultMaxReplyBytes
	}
	return out
}

// bound is wait, or MaxWait when that is shorter.
func (d Dialer) bound(wait time.Duration) time.Duration {
	if d.MaxWait > 0 && d.MaxWait < wait {
		return d.MaxWait
	}
	return wait
}

// Dial connects to a relayd that listens on addr (host:port), authenticates
// with token and does the ready handshake, all within ctx. It is
// (*Dialer)(nil).Dial: relayd's default timeouts.
func Dial(ctx context.Context, addr, token string) (*Conn, error) {
	var d *Dialer
	return d.Dial(ctx, addr, token)
}

// Dial connects to a relayd that listens on addr, like the package's Dial,
// with d's settings.
func (d *Dialer) Dial(ctx context.Context, addr, token string) (*Conn, error) {
	cfg := d.withDefaults()
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client.Dial %s: %w", addr, err)
	}
	c := newConn(nc, protocol.NewLineReader(nc, cfg.MaxReplyBytes), token, cfg)
	hello, err := c.Ready(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("client.Dial %s: handshake: %w", addr, err)
	}
	c.hello = hello
	return c, nil
}

// Conn is one authenticated connection to one relayd. Its methods may be
// called from several goroutines: Ready and Verify while an Execute waits,
// as the protocol allows; a second Execute while one runs returns ErrBusy.
//
// There is no reader goroutine: a call that waits for its reply reads the
// connection itself, one reader at a time, and hands what it reads for other
// calls to them. A reply thus reaches its caller without a hand-off.
type Conn struct {
	nc    net.Conn
	lr    *protocol.LineReader // used only by the holder of readTurn
	token string
	cfg   Dialer
	hello Ready

	wmu      sync.Mutex    // one write at a time
	wbuf     bytes.Buffer  // the line being written, reused (under wmu)
	wenc     *json.Encoder // into wbuf (under wmu)
	readTurn chan struct{} // capacity 1: holding a token is the right to read

	mu      sync.Mutex
	calls   map[int64]*call // by id, as relayd echoes it
	nextID  int64
	running bool          // an Execute is outstanding
	err     error         // set once: why the connection is over
	dead    chan struct{} // closed when err is set
}

// call is one request waiting for its reply.
type call struct {
	want    string     // the reply's kind
	into    any        // what the reply is decoded into
	reply   chan reply // a reply another call's reader read; buffered 1
	output  func(Output)
	started func(string)
	content func(line []byte) (more bool) // a get's chunk (files.go); false: the last, decoded as the reply
	// delivered: the reply has come, put on reply by another reader (even
	// if taken since) or decoded by the call's own; a put's watcher stops
	// reading, or never starts, then (files.go).
	delivered atomic.Bool
	// Set by the call's own reader, which decodes its reply in place
	// (before giving up the turn, while the line is still valid).
	decoded bool
	result  error
	ignored []string // the reply's "ignored": fields of the request relayd does not know
}

// take decodes the call's reply into cl.into and keeps its ignored list.
func (cl *call) take(rep reply) error {
	var err error
	cl.ignored, err = decodeReply(rep, cl.want, cl.into)
	return err
}

// reply is a reply line (a copy) and its kind.
type reply struct {
	kind string
	line []byte
}

func newConn(nc net.Conn, lr *protocol.LineReader, token string, cfg Dialer) *Conn {
	return &Conn{nc: nc, lr: lr, token: token, cfg: cfg, readTurn: make(chan struct{}, 1),
		calls: map[int64]*call{}, dead: make(chan struct{})}
}

// Handshake returns the ready message relayd sent when the connection was
// made: its workspace, version, scope mechanism and instruction.
func (c *Conn) Handshake() Ready { return c.hello }

// RemoteAddr is relayd's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection. A running execution is then settled by
// relayd (transport loss); a call still waiting returns ErrClosed.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// fail ends the connection for the reason err (the first reason wins) and
// wakes every waiting call.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.dead)
	}
	c.mu.Unlock()
	_ = c.nc.Close()
}

// failure is why the connection is over.
func (c *Conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// readOne reads one line, holding readTurn, until deadline (zero: none),
// and hands it to the call it answers. It returns an error when the
// connection is over.
func (c *Conn) readOne(deadline time.Time, self *call) error {
	_ = c.nc.SetReadDeadline(deadline)
	line, err := c.lr.ReadLine()
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, protocol.ErrLineTooLong):
			c.fail(fmt.Errorf("%w: a reply longer than %d bytes (Dialer.MaxReplyBytes)", ErrBadReply, c.cfg.MaxReplyBytes))
		case errors.As(err, &ne) && ne.Timeout() && c.failure() == nil:
			c.fail(ErrReplyOverdue)
		default:
			c.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
		}
		return c.failure()
	}
	kind, id, ok := quickHead(line)
	if !ok {
		var head struct {
			Kind string          `json:"kind"`
			ID   json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &head) != nil {
			c.fail(fmt.Errorf("%w: a line that is not a JSON object", ErrBadReply))
			return c.failure()
		}
		kind, id = head.Kind, idKey(head.ID)
	}
	c.dispatch(kind, id, line, self)
	return nil
}

// quickHead reads kind and id from the start of a reply as relayd writes
// it (compact, "token" if any, then "kind", then "id" if any, strings
// without escapes), without decoding the rest: a round trip's reply is
// then decoded once. ok is false for anything else, which the caller then
// decodes in full.
func quickHead(line []byte) (kind string, id []byte, ok bool) {
	rest, found := bytes.CutPrefix(line, []byte(`{"token":"`))
	if found {
		i := bytes.IndexByte(rest, '"')
		if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
			return "", nil, false
		}
		if rest, found = bytes.CutPrefix(rest[i+1:], []byte(`,"kind":"`)); !found {
			return "", nil, false
		}
	} else if rest, found = bytes.CutPrefix(line, []byte(`{"kind":"`)); !found {
		return "", nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return "", nil, false
	}
	kind, rest = kindName(rest[:i]), rest[i+1:]
	rest, found = bytes.CutPrefix(rest, []byte(`,"id":`))
	if !found {
		return kind, nil, true
	}
	// An id is a JSON integer or a string (protocol section 4); this
	// client sends integers.
	end := bytes.IndexAny(rest, ",}")
	if end <= 0 {
		return "", nil, false
	}
	for _, b := range rest[:end] {
		if (b < '0' || b > '9') && b != '-' {
			return "", nil, false
		}
	}
	return kind, rest[:end], true
}

// kinds are the kinds relayd sends, so that reading one allocates nothing.
var kinds = []string{kindExecuted, kindOutput, kindStarted, kindReady, kindVerified, kindError, kindStatus}

func kindName(b []byte) string {
	for _, k := range kinds {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

func idKey(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil {
		return nil
	}
	return b.Bytes()
}

// callID is the id of a call, read from a reply's id (a JSON integer, as
// this client sends them); ok is false for anything else.
func callID(id []byte) (n int64, ok bool) {
	digits := id
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	if len(digits) < len(id) {
		n = -n
	}
	return n, true
}

func (c *Conn) dispatch(kind string, id []byte, line []byte, self *call) {
	n, ok := callID(id)
	c.mu.Lock()
	var cl *call
	if ok {
		cl = c.calls[n]
	}
	if kind == kindError && ok && n == resizeID {
		c.mu.Unlock()
		c.resizeRefused(line) // a resize's refusal concerns no call (stdin.go)
		return
	}
	var all []*call
	if kind == kindError && cl == nil {
		// An error relayd could not tie to an id (bad-json,
		// line-too-long, a line cut short): it concerns every waiting call.
		for _, x := range c.calls {
			all = append(all, x)
		}
	}
	c.mu.Unlock()
	switch {
	case kind == kindOutput:
		if cl != nil && cl.output != nil {
			var o Output
			if json.Unmarshal(line, &o) == nil {
				cl.output(o)
			}
		}
	case kind == kindStarted:
		if cl != nil && cl.started != nil {
			var s struct {
				Execution string `json:"execution"`
			}
			if json.Unmarshal(line, &s) == nil {
				cl.started(s.Execution)
			}
		}
	case kind == kindContent && cl != nil && cl.content != nil && cl.content(line):
	case cl != nil && cl == self:
		self.result, self.decoded = self.take(reply{kind, line}), true
		self.delivered.Store(true) // before the turn is given back
	case cl != nil:
		deliver(cl, kind, line)
	default:
		for _, x := range all {
			deliver(x, kind, line)
		}
	}
}

func deliver(cl *call, kind string, line []byte) {
	defer cl.delivered.Store(true)
	select {
	case cl.reply <- reply{kind, append([]byte(nil), line...)}:
	default: // it has its reply already
	}
}

// Ready probes relayd and returns its ready reply.
func (c *Conn) Ready(ctx context.Context) (Ready, error) {
	var r Ready
	err := c.roundTrip(ctx, map[string]any{"kind": kindReady}, &call{want: kindReady, into: &r}, c.cfg.bound(c.cfg.ReplyTimeout))
	return r, err
}

// Verify tells relayd that the subject's time is over for this
// connection (protocol section 4.3). An execution still running on this
// connection is settled, and its Execute returns FrameworkTimeout, before
// Verify returns; executions of other connections are untouched. A relayd
// that dials out closes the connection and exits after answering. For the
// whole trial's end, see Boundary.
func (c *Conn) Verify(ctx context.Context) (Verified, error) {
	return c.VerifyWith(ctx, VerifyOptions{})
}

// Boundary draws the trial boundary (protocol 4.6): every execution of
// relayd is ended, on any connection or detached (each reply goes to its
// own connection), the survivors of every execution are listed, and with
// o.SettleSurvivors settled except o.Keep. The connection stays open in
// both of relayd's modes. It is VerifyWith with o.All set, under the
// word relayctl uses for it (relayctl verify); VerifyWith stays.
func (c *Conn) Boundary(ctx context.Context, o VerifyOptions) (Verified, error) {
	o.All = true
	return c.VerifyWith(ctx, o)
}

// Status asks relayd what runs, the survivors a Boundary would list, and
// how many boundaries were drawn (protocol 4.6, "Looking without
// touching"): nothing ends and nothing is signalled, so it may be asked
// while an Execute waits, from a dashboard or while debugging. relayd
// answers at once; a relayd without "status" in Ready.Extensions answers
// ErrUnknownKind.
func (c *Conn) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.roundTrip(ctx, map[string]any{"kind": kindStatus}, &call{want: kindStatus, into: &st}, c.cfg.bound(c.cfg.ReplyTimeout))
	return st, err
}

// VerifyWith is Verify with the trial boundary's options (protocol 4.6):
// with o.All, it is Boundary; without, Verify.
func (c *Conn) VerifyWith(ctx context.Context, o VerifyOptions) (Verified, error) {
	msg := map[string]any{"kind": kindVerify}
	if o.All {
		msg["all"] = true
	}
	if o.SettleSurvivors {
		msg["survivors"] = "settle"
	}
	if len(o.Keep) > 0 {
		msg["keep"] = o.Keep
	}
	wait := c.cfg.ReplyTimeout + c.cfg.TeardownTimeout + settleSlack
	if o.All {
		wait += c.cfg.TeardownTimeout // the executions, then the survivors
	}
	if o.Files != nil {
		msg["files"] = o.Files
		wait = time.Duration(math.MaxInt64) // a restore's time is the tree's: ctx bounds it
	}
	var v Verified
	err := c.roundTrip(ctx, msg, &call{want: kindVerified, into: &v}, c.cfg.bound(wait))
	return v, err
}

// executeWire is an execute line; field order as in the protocol.
type executeWire struct {
	Token         string            `json:"token"`
	Kind          string            `json:"kind"`
	ID            int64             `json:"id"`
	Command       string            `json:"command"`
	Args          []string          `json:"args,omitempty"`
	Environment   map[string]string `json:"environment,omitempty"`
	Credentials   map[string]string `json:"credentials,omitempty"`
	ResultToken   string            `json:"resultToken,omitempty"`
	CaptureStdout *bool             `json:"captureStdout,omitempty"`
	Cwd           string            `json:"cwd,omitempty"`
	TimeoutMs     int64             `json:"timeoutMs,omitempty"`
	CaptureStderr bool              `json:"captureStderr,omitempty"`
	Stream        bool              `json:"stream,omitempty"`
	OnExit        OnExit            `json:"onExit,omitempty"`
	DetachMs      int64             `json:"detachMs,omitempty"`
	Input         *string           `json:"input,omitempty"`
	InputEncoding string            `json:"inputEncoding,omitempty"`
	Stdin         bool              `json:"stdin,omitempty"`
	User          string            `json:"user,omitempty"`
	MaxOutput     int64             `json:"maxOutputBytes,omitempty"`
	OutputKeep    string            `json:"outputKeep,omitempty"`
	Pty           *ptyWire          `json:"pty,omitempty"`
	Limits        map[string]uint64 `json:"limits,omitempty"`
}

// ptyWire is an execute's "pty" (protocol 4.7).
type ptyWire struct {
	Rows int    `json:"rows"`
	Cols int    `json:"cols"`
	Term string `json:"term,omitempty"`
}

// millis rounds d up to whole milliseconds, so that a Timeout of 1ns is
// still a deadline.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Execute runs req on relayd and returns its reply. The subject's exit code
// is in Executed.ExitCode; err is for what kept the reply from coming (an
// *Error from relayd, ErrBusy, a lost connection, ctx). See the package
// documentation for cancellation and how long Execute waits.
func (c *Conn) Execute(ctx context.Context, req Request) (Executed, error) {
	var e Executed
	if req.Timeout < 0 || req.Detach < 0 {
		return e, &Error{Category: ErrBadRequest.Category, Message: "client: Request.Timeout and Request.Detach must not be negative"}
	}
	if err := c.beginExecution(); err != nil {
		return e, err
	}
	defer c.endExecution()
	w := executeWire{Kind: kindExecute, Command: req.Command, Args: req.Args,
		Environment: req.Environment, Credentials: req.Credentials, ResultToken: req.ResultToken,
		Cwd: req.Cwd, TimeoutMs: millis(req.Timeout), CaptureStderr: req.CaptureStderr,
		Stream: req.Output != nil, OnExit: req.OnExit, DetachMs: millis(req.Detach), User: req.User}
	if req.DiscardStdout {
		f := false
		w.CaptureStdout = &f
	}
	if req.MaxOutputBytes < 0 {
		return e, &Error{Category: ErrBadRequest.Category, Message: "client: Request.MaxOutputBytes must not be negative"}
	}
	w.MaxOutput = req.MaxOutputBytes
	w.Limits = req.Limits
	if req.KeepTail {
		w.OutputKeep = "tail"
	}
	if req.Input != nil {
		in, enc := inputField(req.Input)
		w.Input, w.InputEncoding = &in, enc
	}
	if p := req.Pty; p != nil {
		w.Pty = &ptyWire{Rows: p.Rows, Cols: p.Cols, Term: p.Term}
	}
	started := req.Started
	var pump *stdinPump
	if req.Stdin != nil {
		w.Stdin = true
		pump = &stdinPump{c: c, r: req.Stdin, keys: req.Pty != nil}
		started = func(x string) {
			pump.begin(x)
			if req.Started != nil {
				req.Started(x)
			}
		}
	}
	wait := time.Duration(math.MaxInt64) // ctx (and MaxWait) alone bound it
	if req.Timeout > 0 && req.Timeout < wait-c.cfg.TeardownTimeout-settleSlack {
		wait = req.Timeout + c.cfg.TeardownTimeout + settleSlack
	}
	wait = c.cfg.bound(wait)
	err := c.roundTrip(ctx, &w, &call{want: kindExecuted, into: &e, output: req.Output, started: started}, wait)
	pump.end()
	return e, err
}

// beginExecution claims the connection's one execution (section 4.2), or
// says busy without asking relayd.
func (c *Conn) beginExecution() error {
	c.mu.Lock()
	busy := c.running
	c.running = true
	c.mu.Unlock()
	if busy {
		return &Error{Category: ErrBusy.Category, Message: "client: an execution already runs on this connection (one at a time; use another Conn or a Pool)"}
	}
	return nil
}

func (c *Conn) endExecution() {
	c.mu.Lock()
	c.running = false
	c.mu.Unlock()
}

// Attach takes over execution, an execution that asked for Request.Detach
// and whose connection was lost (extension, protocol section 4.5), and
// returns its executed reply: the real one, as the lost connection would
// have had it, also when the execution ended while detached. output, when
// not nil, gets the live output of a streamed execution from now on; what
// was written while nobody was attached arrives as the first chunk's
// Dropped count. From here on the execution is this connection's: its
// Verify ends it, and losing this connection detaches it again.
//
// An execution relayd does not hold (never was, not detached yet, or its
// detach time ran out) is an *Error matching ErrNotFound; relayd sees a
// connection's loss a moment after the controller does, so a caller that
// has just lost the connection may retry for a moment. Attach counts as
// the connection's one execution (ErrBusy while another runs). It waits as
// long as ctx allows (or Dialer.MaxWait): the client does not know how
// long the execution has left.
func (c *Conn) Attach(ctx context.Context, execution string, output func(Output)) (Executed, error) {
	var e Executed
	if err := c.beginExecution(); err != nil {
		return e, err
	}
	defer c.endExecution()
	err := c.roundTrip(ctx, map[string]any{"kind": kindAttach, "execution": execution},
		&call{want: kindExecuted, into: &e, output: output}, c.cfg.bound(time.Duration(math.MaxInt64)))
	return e, err
}

// roundTrip sends one request and waits for its reply, decoded into
// cl.into (an error reply becomes an *Error). msg is a map or an
// *executeWire; its token and id are set here.
func (c *Conn) roundTrip(ctx context.Context, msg any, cl *call, wait time.Duration) error {
	cl.reply = make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = cl
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}()

	switch m := msg.(type) {
	case map[string]any:
		m["token"], m["id"] = c.token, id
	case *executeWire:
		m.Token, m.ID = c.token, id
	}
	// A cancelled ctx closes the connection, which also ends a read in
	// progress.
	if ctx.Done() != nil { // context.Background() cannot end: no hook to pay for
		stop := context.AfterFunc(ctx, func() { c.fail(errCancelled) })
		defer stop()
	}
	send := c.write
	if s, ok := msg.(sender); ok {
		send = func(any) error { return s(id) } // a put writes its chunks itself (files.go)
	}
	if err := send(msg); err != nil {
		return callErr(ctx, err)
	}
	var deadline time.Time
	if wait < time.Duration(math.MaxInt64) {
		deadline = time.Now().Add(wait)
	}
	transport, err := c.await(cl, deadline)
	if len(cl.ignored) > 0 {
		c.warnIgnored(msg, cl.ignored)
	}
	if transport {
		if errors.Is(err, ErrReplyOverdue) {
			err = fmt.Errorf("%w (waited %s)", ErrReplyOverdue, wait)
		}
		return callErr(ctx, err)
	}
	return err
}

// errCancelled is why a connection ended when a caller's context did.
var errCancelled = fmt.Errorf("%w: a caller's context ended", ErrClosed)

// callErr is the error a call returns: its context's error when a
// cancellation ended the connection and this call's context is done.
func callErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, errCancelled) {
		return ctx.Err()
	}
	return err
}

// await waits for cl's reply until deadline (zero: none), reading the
// connection itself whenever no other call is reading it, and returns the
// reply's decoding error, or (transport true) the connection's failure.
func (c *Conn) await(cl *call, deadline time.Time) (transport bool, err error) {
	select {
	case c.readTurn <- struct{}{}: // the usual case: nobody else reads
		return c.readFor(cl, deadline)
	default:
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case rep := <-cl.reply:
		return false, cl.take(rep)
	case c.readTurn <- struct{}{}:
		return c.readFor(cl, deadline)
	case <-c.dead:
		return c.lastReply(cl)
	case <-timeout:
		c.fail(ErrReplyOverdue)
		return true, ErrReplyOverdue
	}
}

// readFor reads, holding readTurn, until cl's reply has come, then gives
// the turn back.
func (c *Conn) readFor(cl *call, deadline time.Time) (transport bool, err error) {
	defer func() { <-c.readTurn }()
	for {
		select {
		case rep := <-cl.reply: // read by the call that read before
			return false, cl.take(rep)
		default:
		}
		if err := c.readOne(deadline, cl); err != nil {
			return c.lastReply(cl)
		}
		if cl.decoded {
			return false, cl.result
		}
	}
}

// lastReply is cl's reply if it came with the end of the stream, else why
// the connection is over.
func (c *Conn) lastReply(cl *call) (transport bool, err error) {
	select {
	case rep := <-cl.reply:
		return false, cl.take(rep)
	default:
		return true, c.failure()
	}
}

// write encodes msg as one line, in a buffer the connection keeps, and
// sends it.
func (c *Conn) write(msg any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf.Reset()
	if c.wenc == nil {
		c.wenc = json.NewEncoder(&c.wbuf) // the same encoding as json.Marshal, and the newline
	}
	if err := c.wenc.Encode(msg); err != nil {
		return fmt.Errorf("client: encoding a request: %w", err)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.ReplyTimeout))
	if _, err := c.nc.Write(c.wbuf.Bytes()); err != nil {
		c.fail(fmt.Errorf("%w: writing a request: %v", ErrConnLost, err))
		return c.failure()
	}
	return nil
}

// decodeReply decodes rep, which should be of kind want, into v; an error
// reply becomes an *Error. It returns the reply's "ignored" list too.
func decodeReply(rep reply, want string, v any) (ignored []string, err error) {
	switch rep.kind {
	case want:
		if e, ok := v.(*Executed); ok && decodeExecutedFast(rep.line, e) {
			return nil, nil // the fast path takes no reply with ignored
		}
		if err := json.Unmarshal(rep.line, v); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadReply, want, err)
		}
		switch r := v.(type) {
		case *Executed:
			return r.Ignored, nil
		case *Verified:
			return r.Ignored, nil
		case *Ready:
			return r.Ignored, nil
		case *Status:
			return r.Ignored, nil
		case *Marked:
			return r.Ignored, nil
		case *Changes:
			return r.Ignored, nil
		case *Restored:
			return r.Ignored, nil
		}
		return nil, nil
	case kindError:
		var e struct {
			Error   *Error   `json:"error"`
			Ignored []string `json:"ignored"`
		}
		if err := json.Unmarshal(rep.line, &e); err != nil || e.Error == nil {
			return nil, fmt.Errorf("%w: an error without its error object", ErrBadReply)
		}
		return e.Ignored, e.Error
	default:
		return nil, fmt.Errorf("%w: got %q; want %q", ErrBadReply, rep.kind, want)
	}
}

// warnIgnored logs, for people, that relayd did not know fields of the
// request msg: misspelled, or newer than that relayd.
func (c *Conn) warnIgnored(msg any, ignored []string) {
	kind := kindExecute
	if m, ok := msg.(map[string]any); ok {
		kind, _ = m["kind"].(string)
	}
	quoted := make([]string, len(ignored))
	for i, n := range ignored {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	logf := log.Printf
	if c.cfg.Log != nil {
		logf = c.cfg.Log.Printf
	}
	logf("relayd at %s ignored fields of a %s request that it does not know: %s (misspelled, or newer than that relayd; protocol 4.6)",
		c.nc.RemoteAddr(), kind, strings.Join(quoted, ", "))
}
