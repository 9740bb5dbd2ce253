package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// inbound is one message from the peer (decoded by the reader), the end
// of a put's raw body, or the end of its stream.
type inbound struct {
	msg      *protocol.Message
	perr     *protocol.Error
	body     *bodyIn // msg is a put with "body": the reader waits to be told where its bytes go (files.go)
	bodyDone bool    // the body of the last message was copied
	err      error
}

// conn is one controller's connection. Its loop is the only writer to the
// connection and the only owner of the connection's state.
type conn struct {
	srv     *Server
	c       net.Conn
	log     zerolog.Logger
	dialOut bool
	authed  bool
	lost    atomic.Bool // the peer is gone: nothing more is written
	wmu     sync.Mutex  // one writer at a time: the loop, and a streamed execution's output

	cur         *execution      // the running execution, if any (started here, or attached)
	curID       json.RawMessage // the id its executed reply echoes (the execute's or the attach's)
	curIgnored  []string        // and the unknown fields it names (section 4.6), of the same request
	verifies    []request       // verify requests waiting for cur to end
	kept        []exec.Scope    // scopes of exited subjects that left survivors
	unconfirmed bool            // a settlement of this connection lacked evidence
	verified    bool
	heard       bool // the peer sent a line
	// paused, while not nil, is closed once the running execution's stdin
	// queue holds less than --max-stdin-buffer: until then the loop does not
	// read this connection (section 4.6).
	paused    <-chan struct{}
	lastStdin string       // the last execution with stdin or a pty that ended here: late stdin and resize messages for it are dropped
	files     fileState    // the put in progress (files.go): execute is busy meanwhile
	reads     atomic.Int32 // reads of a pty session's screen waiting (shell.go)
	// unread counts what the reader has read and the loop has not yet
	// taken (a line, or the stream's end).
	unread atomic.Int32
	// endedByShutdown: the execution running here when the shutdown began
	// was ended by it; the connection then waits for the verify after its
	// executed reply (rule 6.8).
	endedByShutdown    bool
	answered           int     // verify requests answered so far
	answeredAtShutdown int     // ... when the shutdown began
	body               *bodyIn // the raw body of the message being handled, if any (files.go)
}

// serveConn serves one connection to its end and reports whether it ended after
// verify, and whether the peer sent anything at all.
func (s *Server) serveConn(c net.Conn, dialOut bool) (verified, heard bool) {
	cn := &conn{srv: s, c: c, dialOut: dialOut,
		log: s.log.With().Str("component", "session").Str("peer", c.RemoteAddr().String()).Logger()}
	if err := setPeerTimeout(c, s.cfg.PeerTimeout); err != nil {
		cn.log.Warn().Err(err).Dur("peerTimeout", s.cfg.PeerTimeout).
			Msg("cannot bound dead-peer detection on this connection (--peer-timeout): a controller that vanishes without closing is noticed only after the kernel's defaults, minutes")
	}
	cn.log.Info().Bool("dialOut", dialOut).Msg("connection opened")
	began := time.Now()
	reason := cn.loop()
	c.Close()
	cn.abandonTransfer()
	for _, sc := range cn.kept {
		// Survivors are left alone, and stay the daemon's for a trial
		// boundary (trial.go); an empty scope is let go.
		s.letGoIfEmpty(sc)
	}
	cn.log.Info().Str("reason", reason).Bool("verified", cn.verified).
		Dur("duration", time.Since(began)).Msg("connection closed")
	return cn.verified, cn.heard
}

func (cn *conn) loop() string {
	in := make(chan inbound)
	done := make(chan struct{})
	defer close(done)
	if !cn.dialOut && cn.srv.cfg.AuthTimeout > 0 {
		// Until a message carries the token, the peer has this long.
		_ = cn.c.SetReadDeadline(time.Now().Add(cn.srv.cfg.AuthTimeout))
	}
	go cn.read(in, done)

	if cn.dialOut {
		cn.write(cn.ready(nil))
	}
	stopping := cn.srv.stopping
	// linger, once set, ends the wait of a connection whose execution the
	// shutdown ended for the controller's verify (or close) after its
	// executed reply (rule 6.8): --teardown-timeout after shutdownAt.
	var linger <-chan time.Time
	var shutdownAt time.Time
	for {
		// While an execution runs, its reply comes first; the connection ends at
		// shutdown only once every execution of relayd has been answered, and
		// until then answers an execute with shutting-down. A line the reader
		// has read is handled before the connection ends: a verify read is
		// always answered.
		var curDone <-chan protocol.Executed
		drained := cn.srv.drained
		if cn.cur != nil {
			curDone = cn.cur.done
			drained = nil
		}
		if linger != nil || cn.unread.Load() > 0 {
			drained = nil
		}
		inbound := in
		if cn.paused != nil {
			inbound = nil
		}
		var destroyed <-chan struct{}
		if linger != nil {
			destroyed = cn.srv.destroyCtx.Done()
		}
		select {
		case <-cn.paused:
			cn.paused = nil
		case m := <-inbound:
			cn.unread.Add(-1)
			if m.err != nil {
				return cn.peerEnded(m.err)
			}
			if m.bodyDone {
				cn.bodyCopied()
				break
			}
			cn.heard = true
			cn.body = m.body
			end := cn.handle(m.msg, m.perr)
			if end == "" && m.body != nil {
				end = cn.bodyAfter(m.body)
			}
			cn.body = nil
			if end != "" {
				return cn.finish(end)
			}
		case res := <-curDone:
			cn.finished(res)
			if end := cn.answerVerifies(); end != "" {
				return end
			}
		case <-stopping:
			stopping = nil // seen once
			if cn.cur != nil {
				cn.cur.stop("shutdown")
				cn.endedByShutdown, cn.answeredAtShutdown = true, cn.answered
			}
			shutdownAt = time.Now()
		case <-drained:
			if cn.unread.Load() > 0 {
				break // the line read first: drained is looked at again after it
			}
			left := cn.srv.cfg.TeardownTimeout - time.Since(shutdownAt)
			if !cn.endedByShutdown || cn.answered > cn.answeredAtShutdown || left <= 0 {
				return "shutdown"
			}
			// The controller's verify follows the executed reply the shutdown
			// made (Maka's controller sends it, and takes a closed connection
			// for an infrastructure failure): it is waited for, and answered,
			// until --teardown-timeout after the shutdown began, the bound the
			// settlement already kept (rule 6.7), so the shutdown takes no
			// longer than before.
			t := time.NewTimer(left)
			defer t.Stop()
			linger = t.C
		case <-linger:
			return "shutdown"
		case <-destroyed:
			return "shutdown" // a second signal: no more waiting
		}
		if linger != nil && cn.answered > cn.answeredAtShutdown {
			return "shutdown"
		}
		if cn.lost.Load() {
			return cn.finish("peer gone")
		}
	}
}

// finish ends the connection: a running execution is settled first (its
// controller is gone or being dropped), and its reply, if the peer can still
// take it, is sent. One that asked for detachMs is detached instead (section
// 4.5): it runs on, and another connection may attach to it.
func (cn *conn) finish(reason string) string {
	if cn.cur != nil && cn.cur.detachable() && !cn.srv.detachFull() {
		ex := cn.cur
		// started is owed to this connection (a controller that sent
		// execute and half-closed at once still gets the name it needs to
		// attach): it goes out, best effort, before the execution leaves.
		select {
		case <-ex.announced:
		case <-time.After(announceLimit):
		}
		cn.cur, cn.curID, cn.curIgnored = nil, nil, nil
		ex.setOwner(nil, nil)
		cn.srv.detach(ex, reason)
		return reason
	}
	if cn.cur != nil {
		cn.cur.stop(reason)
		res := <-cn.cur.done
		cn.finished(res)
	}
	return reason
}

// peerEnded handles the end of the peer's stream: EOF, a read error, or a line too long.
func (cn *conn) peerEnded(err error) string {
	if errors.Is(err, protocol.ErrLineTooLong) {
		cn.writeError(nil, protocol.CatLineTooLong,
			fmt.Sprintf("message line longer than %d bytes (--max-line-bytes); closing the connection", cn.srv.cfg.MaxLineBytes))
		cn.lost.Store(true)
		return cn.finish("line too long")
	}
	if errors.Is(err, io.EOF) {
		return cn.streamEnded()
	}
	cn.lost.Store(true)
	if errors.Is(err, os.ErrDeadlineExceeded) && !cn.authed {
		return cn.finish("no authenticated message within --auth-timeout")
	}
	if peerUnreachable(err) {
		cn.log.Warn().Err(err).Dur("peerTimeout", cn.srv.cfg.PeerTimeout).Msg("controller unreachable: TCP gave up on the connection")
		if cn.srv.cfg.PeerTimeout > 0 {
			return cn.finish("peer unreachable: no TCP acknowledgement within --peer-timeout")
		}
		return cn.finish("peer unreachable: no TCP acknowledgement within the kernel's limits (--peer-timeout 0)")
	}
	cn.log.Debug().Err(err).Msg("reading from the controller failed")
	return cn.finish("read failed")
}

// streamEnded handles the end of the peer's stream (it closed, or
// half-closed with shutdown(SHUT_WR)) once every message read before it has
// been handled: what still runs is settled as on transport loss (rule 6.4),
// and the replies owed so far (executed, then verified for a verify that
// came before the end) are still written, best effort within
// --write-timeout. Maka's controller sends verify with socket.end(line).
func (cn *conn) streamEnded() string {
	reason := cn.finish("peer closed")
	if end := cn.answerVerifies(); end != "" {
		return end
	}
	return reason
}

// read feeds messages to the loop until the stream ends or the loop is
// done. After a put with "body" it waits for the loop to say where the
// body's bytes go, copies them, and tells the loop (section 4.6, "Bulk
// bodies"): the next message starts right after them.
func (cn *conn) read(in chan<- inbound, done <-chan struct{}) {
	lr := protocol.NewLineReader(cn.c, cn.srv.cfg.MaxLineBytes)
	var buf []byte // a body's, made for the first
	for {
		line, err := lr.ReadLine()
		cn.unread.Add(1) // until the loop has it (loop: drained)
		var m inbound
		if err != nil {
			m.err = err
		} else {
			m.msg, m.perr = protocol.Decode(append([]byte(nil), line...))
			if m.msg != nil {
				if n, ok := m.msg.PutBody(); ok {
					m.body = &bodyIn{n: n, to: make(chan io.Writer, 1), copied: make(chan struct{})}
				}
			}
		}
		select {
		case in <- m:
		case <-done:
			return
		}
		if err != nil {
			return
		}
		if m.body == nil {
			continue
		}
		var w io.Writer
		select {
		case w = <-m.body.to:
		case <-done:
			return
		}
		if w == nil {
			return // the stream cannot be followed: the loop ends the connection
		}
		if buf == nil {
			buf = make([]byte, bodyBufBytes)
		}
		err = lr.CopyBody(w, m.body.n, buf)
		close(m.body.copied)
		cn.unread.Add(1)
		select {
		case in <- inbound{bodyDone: err == nil, err: err}:
		case <-done:
			return
		}
		if err != nil {
			return
		}
	}
}

// handle answers one message; a non-empty result ends the connection.
func (cn *conn) handle(msg *protocol.Message, perr *protocol.Error) string {
	if msg == nil {
		cn.writeError(nil, perr.Category, perr.Message)
		return ""
	}
	if !msg.HasToken || !cn.srv.tokenOK(msg.Token) {
		what := "wrong token"
		if !msg.HasToken {
			what = "missing token"
		}
		cn.log.Warn().Str("kind", safeKind(msg.Kind)).Msg("unauthenticated message: " + what)
		cn.writeError(msg.ID, protocol.CatUnauthenticated,
			what+": every message must carry relayd's token; closing the connection")
		cn.lost.Store(true)
		return "unauthenticated"
	}
	if !cn.authed {
		cn.authed = true
		_ = cn.c.SetReadDeadline(time.Time{}) // an authenticated peer may stay idle for hours
		cn.log.Debug().Msg("authenticated")
	}
	// Every reply to this request names the fields relayd ignored in it
	// (section 4.6); only an authenticated request costs the second walk.
	ignored := msg.Ignored()
	if perr == nil {
		// A field that differs from a known one only by case is refused,
		// never ignored: a misspelled timeoutMs would run with no deadline.
		perr = msg.CaseVariant()
	}
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return ""
	}
	switch msg.Kind {
	case "ready":
		r := cn.ready(msg.ID)
		r.Ignored = ignored
		cn.write(r)
	case "execute":
		cn.execute(msg, ignored)
	case "verify":
		v, perr := msg.Verify()
		if perr != nil {
			cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
			return ""
		}
		if v.All {
			return cn.boundary(request{msg.ID, ignored}, v)
		}
		cn.verifies = append(cn.verifies, request{msg.ID, ignored})
		if cn.dialOut {
			cn.settleDetached()
		}
		if cn.cur != nil {
			cn.cur.stop("verify")
			return ""
		}
		return cn.answerVerifies()
	case "attach":
		cn.attach(msg, ignored)
	case "stdin":
		cn.stdin(msg, ignored)
	case "resize":
		cn.resize(msg, ignored)
	case "put":
		cn.put(msg, ignored)
	case "get":
		cn.get(msg, ignored)
	case "status":
		cn.status(request{msg.ID, ignored}) // looking without touching: nothing ends (status.go)
	case "open":
		cn.open(msg, ignored) // shell sessions (shell.go)
	case "close":
		cn.closeSession(msg, ignored)
	case "read":
		cn.readScreen(msg, ignored)
	case "mark", "unmark", "changes", "restore":
		cn.marks(msg, ignored) // protocol 4.9 (marks.go)
	case "":
		cn.refuse(msg.ID, ignored, protocol.CatUnknownKind, `message has no "kind": expected `+knownKinds)
	default:
		cn.refuse(msg.ID, ignored, protocol.CatUnknownKind,
			fmt.Sprintf(`unknown kind %q: expected %s`, safeKind(msg.Kind), knownKinds))
	}
	return ""
}

// knownKinds are the kinds a controller may send, for an unknown-kind error.
const knownKinds = `"ready", "execute", "verify", "attach", "stdin", "resize", "put", "get", "status", "open", "close", "read", "mark", "unmark", "changes" or "restore"`

// safeKind bounds a peer-chosen kind before it is echoed or logged.
func safeKind(k string) string {
	if len(k) > 40 {
		return k[:40] + "..."
	}
	return k
}

func (cn *conn) execute(msg *protocol.Message, ignored []string) {
	req, perr := msg.Execute()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	if cn.cur != nil {
		cn.refuse(msg.ID, ignored, protocol.CatBusy,
			fmt.Sprintf("execution %s is still running on this connection; wait for its executed reply (or send verify to end it)", cn.cur.id))
		return
	}
	if cn.files.xfer != nil {
		cn.refuse(msg.ID, ignored, protocol.CatBusy, "a put is open on this connection; send its last chunk (no \"more\") first")
		return
	}
	if req.Session != "" {
		cn.sessionCommand(msg, req, ignored)
		return
	}
	user, detail := cn.srv.account(req)
	if detail == "" {
		detail = cn.srv.limits(req)
	}
	if detail != "" {
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, detail)
		return
	}
	if !cn.srv.admit() {
		cn.refuse(msg.ID, ignored, protocol.CatShuttingDown, "relayd is shutting down and starts no new execution")
		return
	}
	cn.cur, cn.curID, cn.curIgnored = cn.srv.startExecution(cn, req, msg.ID, user, cn.log), msg.ID, req.Ignored
	cn.paused = cn.cur.in.full()
}

// account is whom an execute's subject runs as (section 4.6): its user,
// else --subject-user; detail says why it cannot be, for a bad-request.
func (s *Server) account(req *protocol.Execute) (*env.User, string) {
	if req.User == "" {
		return s.cfg.SubjectUser, ""
	}
	u, err := env.LookupUser(req.User, s.cfg.AllowAnyGroup)
	if err == nil {
		err = env.CanBecome(u, req.User)
	}
	if err != nil {
		return nil, `execute: "user": ` + err.Error()
	}
	return u, ""
}

// stdin takes a stdin message (section 4.6) for the execution running on
// this connection. It has no reply but an error; once the queue holds
// --max-stdin-buffer the loop stops reading the connection.
func (cn *conn) stdin(msg *protocol.Message, ignored []string) {
	c, perr := msg.Stdin()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	if c.Session != "" {
		cn.typeInto(msg, ignored, c) // a pty session's keystrokes (shell.go)
		return
	}
	ex := cn.cur
	switch {
	case ex != nil && ex.id == c.Execution && ex.in != nil && ex.req.Stdin:
	case c.Execution == cn.lastStdin:
		return // it raced the execution's end: its input is dropped
	case ex != nil && ex.id == c.Execution:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest,
			fmt.Sprintf(`stdin: execution %s did not ask for "stdin":true in its execute: its stdin is /dev/null or its input only`, ex.id))
		return
	default:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound,
			fmt.Sprintf(`stdin: no execution %q runs on this connection ("execution" must name the one running here, from its started message)`, c.Execution))
		return
	}
	if !ex.in.push(c.Data, c.EOF) {
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest,
			fmt.Sprintf(`stdin: the stdin of %s already ended with "eof":true`, ex.id))
		return
	}
	cn.paused = ex.in.full()
}

// resize takes a resize message (section 4.7) for the execution running
// on this connection, which must have a pty. It has no reply but an error.
func (cn *conn) resize(msg *protocol.Message, ignored []string) {
	r, perr := msg.Resize()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	if r.Session != "" {
		cn.resizeSession(msg, ignored, r)
		return
	}
	ex := cn.cur
	switch {
	case ex != nil && ex.id == r.Execution && ex.req.Pty != nil:
	case r.Execution == cn.lastStdin:
		return // it raced the execution's end: nothing to resize
	case ex != nil && ex.id == r.Execution:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest,
			fmt.Sprintf(`resize: execution %s has no terminal: its execute did not ask for "pty"`, ex.id))
		return
	default:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound,
			fmt.Sprintf(`resize: no execution %q runs on this connection ("execution" must name the one running here, from its started message)`, r.Execution))
		return
	}
	ex.resize(r.Rows, r.Cols)
}

// attach takes over a detached execution (section 4.5): its output from
// now on and its executed reply, which echoes the attach's id, come here.
func (cn *conn) attach(msg *protocol.Message, ignored []string) {
	name, perr := msg.Attach()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	if cn.cur != nil {
		cn.refuse(msg.ID, ignored, protocol.CatBusy,
			fmt.Sprintf("execution %s is still running on this connection; attach once its executed reply came", cn.cur.id))
		return
	}
	ex, stopping := cn.srv.attach(name)
	switch {
	case stopping:
		cn.refuse(msg.ID, ignored, protocol.CatShuttingDown, "relayd is shutting down and settles every execution; nothing can be attached")
		return
	case ex == nil:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound,
			`attach: no detached execution has that name ("execution"): it does not exist, runs on a connection, or nobody attached within its detachMs`)
		return
	}
	ex.setOwner(cn, msg.ID)
	cn.cur, cn.curID, cn.curIgnored = ex, msg.ID, ignored
	cn.log.Info().Str("execution", ex.id).Msg("execution attached")
}

// settleDetached is verify in dial-out mode, where relayd serves one
// controller: every detached execution is ended as the running one is
// (rule 6.2), and counts for this connection's quiescence and survivors.
func (cn *conn) settleDetached() {
	all := cn.srv.takeAllDetached()
	for _, ex := range all {
		ex.stop("verify") // all at once: settling them one by one would add up their deadlines
	}
	for _, ex := range all {
		res := <-ex.done
		if ex.kept != nil {
			cn.kept = append(cn.kept, ex.kept)
		}
		if res.Settlement == protocol.SettleDestroyed || res.Settlement == protocol.SettleFailed {
			cn.unconfirmed = true
		}
	}
}

// finished records the end of the running execution and sends its reply.
func (cn *conn) finished(res protocol.Executed) {
	ex := cn.cur
	cn.cur, cn.paused = nil, nil
	if ex.req.Stdin || ex.req.Pty != nil {
		cn.lastStdin = ex.id
	}
	if ex.kept != nil {
		cn.kept = append(cn.kept, ex.kept)
	}
	if res.Settlement == protocol.SettleDestroyed || res.Settlement == protocol.SettleFailed {
		cn.unconfirmed = true
	}
	if ex.stream != nil {
		ex.stream.owed(cn, cn.curID)
	}
	if res.Untrusted != "" {
		cn.writeError(cn.curID, protocol.CatFailed, res.Untrusted)
		cn.curID, cn.curIgnored = nil, nil
		return
	}
	res.Token = cn.token()
	res.ID, res.Ignored = cn.curID, cn.curIgnored
	cn.curID, cn.curIgnored = nil, nil
	cn.write(res)
}

// answerVerifies answers the verify requests that waited for the running
// execution. In dial-out mode a verify ends the connection.
func (cn *conn) answerVerifies() string {
	if len(cn.verifies) == 0 || cn.cur != nil {
		return ""
	}
	for _, rq := range cn.verifies {
		v := protocol.Verified{Token: cn.token(), Kind: "verified", ID: rq.id, Quiescent: !cn.unconfirmed, Ignored: rq.ignored}
		v.Survivors, v.SurvivorsOmitted = cn.survivors()
		cn.write(v)
	}
	cn.answered += len(cn.verifies)
	cn.verifies = nil
	cn.verified = true
	if cn.dialOut {
		return "verified"
	}
	return ""
}

// survivors lists the live processes that exited subjects of this connection
// left behind, each once and at most protocol.MaxSurvivors of them, counts
// the rest, and stops tracking scopes that are empty.
func (cn *conn) survivors() ([]protocol.Survivor, int) {
	var all []exec.Member
	owner := map[int]string{}
	kept := cn.kept[:0]
	for _, sc := range cn.kept {
		members, err := sc.Members() // each scope's own look: its shim's, or its leaf's
		if err != nil {
			kept = append(kept, sc)
			continue
		}
		if len(members) == 0 {
			cn.srv.letGo(sc)
			continue
		}
		kept = append(kept, sc)
		id := cn.srv.executionOf(sc)
		for _, m := range members {
			owner[m.PID] = id
		}
		all = append(all, members...)
	}
	cn.kept = kept
	list, omitted := describe(all, 0)
	for i := range list {
		list[i].Execution = owner[list[i].PID]
	}
	return list, omitted
}

func (cn *conn) token() string {
	if cn.authed || cn.dialOut {
		return string(cn.srv.cfg.Token)
	}
	return ""
}

// extensions are what ready lists (protocol 4.6): the bridge only while
// its socket is served.
func (s *Server) extensions() []string {
	ext := s.marksExtension(protocol.Extensions) // marks.go
	if !s.cfg.Bridge {
		return ext
	}
	return append(slices.Clip(ext), "bridge")
}

func (cn *conn) ready(id json.RawMessage) protocol.Ready {
	cfg := cn.srv.cfg
	r := protocol.Ready{Token: cn.token(), Kind: "ready", ID: id, Instruction: cfg.Instruction,
		Cwd: cfg.Workspace, Protocol: protocol.Version, Version: cfg.Version, Scope: cfg.Mechanism,
		Extensions: cn.srv.extensions(), Debug: debugInfo()}
	if cn.dialOut {
		r.Detached = cn.srv.detachedNames()
	}
	return r
}

// request is what every reply to one request echoes: its id, and the
// fields relayd ignored in it (section 4.6).
type request struct {
	id      json.RawMessage
	ignored []string
}

// refuse answers a request that authenticated with an error that echoes
// its id and names its ignored fields.
func (cn *conn) refuse(id json.RawMessage, ignored []string, category, message string) {
	cn.write(protocol.ErrorReply{Kind: "error", ID: id, Ignored: ignored,
		Error: &protocol.Error{Category: category, Message: message}})
}

func (cn *conn) writeError(id json.RawMessage, category, message string) {
	cn.write(protocol.ErrorReply{Kind: "error", ID: id,
		Error: &protocol.Error{Category: category, Message: message}})
}

// write sends one message with a deadline; a peer that does not take it in
// time counts as gone. It reports whether the message was written.
func (cn *conn) write(v any) bool {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if cn.lost.Load() {
		return false
	}
	_ = cn.c.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if err := protocol.WriteLine(cn.c, v); err != nil {
		if errors.Is(err, protocol.ErrEncoding) {
			cn.log.Error().Err(err).Msg("encoding a reply failed")
			return false
		}
		cn.lostWriting(err)
		return false
	}
	return true
}

// lostWriting treats the peer as gone after a write failed (err), or
// after relayd could not finish a raw body (nil: the connection is closed
// so that the peer sees the body cut short).
func (cn *conn) lostWriting(err error) {
	switch {
	case errors.Is(err, net.ErrClosed):
		// relayd had closed the connection, its peer gone (a detach: a
		// read's reply that comes after the controller left); nothing wrong.
		cn.log.Debug().Err(err).Msg("write to peer failed; treating it as gone")
	case err != nil:
		cn.log.Warn().Err(err).Msg("write to peer failed; treating it as gone")
	default:
		_ = cn.c.Close()
	}
	cn.lost.Store(true)
	// Unblock the reader too: the connection is over.
	_ = cn.c.SetReadDeadline(time.Now())
}
