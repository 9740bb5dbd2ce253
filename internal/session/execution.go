package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
	"github.com/relayd/relayd/internal/teardown"
)

// cutLimit bounds the wait for a subject's stdout capture to become final.
const cutLimit = 2 * time.Second

// execution is one execute request from start to reply. Its goroutine sends
// exactly one Executed on done; stop may be called any number of times, from
// the connection's loop or a trial boundary (trial.go).
type execution struct {
	id       string
	reqID    json.RawMessage
	req      *protocol.Execute
	stopCh   chan string // the framework's end: "verify", "peer closed", "shutdown", ...
	stopOnce sync.Once
	stopped  atomic.Bool // stop was called
	done     chan protocol.Executed
	finished chan struct{} // closed once the reply is in done (trial boundary: trial.go)
	kept     exec.Scope    // set before done is sent: the scope of an exited subject with survivors
	log      zerolog.Logger
	stream   *streamer  // nil unless req.Stream
	in       *stdinFeed // the subject's stdin; nil when it is /dev/null (no input, no stdin)
	user     *env.User  // whom the subject runs as (user, else --subject-user); nil: as relayd

	// Where started and output messages go (section 4.5): the connection
	// that runs the execution, nil while it is detached, and the id they
	// echo (the execute's, or the attach's).
	mu      sync.Mutex
	owner   *conn
	ownerID json.RawMessage

	attached chan struct{} // while detached: closed when a connection takes it over (Server.attach)

	// For status (status.go): when the execute was accepted, and when its
	// timeoutMs passes (unix ns; 0 until awaitEnd arms it).
	began    time.Time
	deadline atomic.Int64

	announced    chan struct{} // with detachMs: closed once started was sent, or will never be (the subject did not start)
	announceOnce sync.Once

	// With a pty (section 4.7): the subject once it runs, and a size a
	// resize asked for before it did.
	ttyMu   sync.Mutex
	tty     *exec.Subject
	ttySize [2]uint16

	// shell, for a shell session's shell (shell.go): its scope outlives
	// its commands, which awaitEnd serves.
	shell *shell
}

// resize sets the size of the execution's terminal, now or, before the
// subject runs, as it starts.
func (ex *execution) resize(rows, cols int) {
	ex.ttyMu.Lock()
	defer ex.ttyMu.Unlock()
	ex.ttySize = [2]uint16{uint16(rows), uint16(cols)}
	if ex.tty == nil {
		return
	}
	if err := ex.tty.Resize(ex.ttySize[0], ex.ttySize[1]); err != nil {
		ex.log.Debug().Err(err).Msg("resize: the terminal is gone")
	}
}

// setTerminal records the subject of an execution on a pty, for resize.
func (ex *execution) setTerminal(subj *exec.Subject) {
	ex.ttyMu.Lock()
	defer ex.ttyMu.Unlock()
	ex.tty = subj
	if ex.ttySize != [2]uint16{} {
		_ = subj.Resize(ex.ttySize[0], ex.ttySize[1])
	}
}

func (ex *execution) stop(reason string) {
	ex.stopOnce.Do(func() {
		ex.stopped.Store(true)
		ex.stopCh <- reason
	})
}

// detachable reports whether a transport loss detaches the execution
// instead of settling it: it asked for detachMs, and the framework has not
// already ended it (verify, shutdown).
func (ex *execution) detachable() bool { return ex.req.DetachMs > 0 && !ex.stopped.Load() }

// setOwner makes cn (nil: nobody) the destination of the execution's messages.
func (ex *execution) setOwner(cn *conn, id json.RawMessage) {
	ex.mu.Lock()
	ex.owner, ex.ownerID = cn, id
	ex.mu.Unlock()
}

func (ex *execution) destination() (*conn, json.RawMessage) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.owner, ex.ownerID
}

func (s *Server) startExecution(cn *conn, req *protocol.Execute, reqID json.RawMessage, user *env.User, log zerolog.Logger) *execution {
	return s.startWith(cn, req, reqID, user, log, nil)
}

// startWith is startExecution, of a session's shell when sh is not nil:
// a trial boundary does not end it as it ends an execution (shell.go).
func (s *Server) startWith(cn *conn, req *protocol.Execute, reqID json.RawMessage, user *env.User, log zerolog.Logger, sh *shell) *execution {
	ex := s.newExecution(cn, req, reqID, req.HasInput || req.Stdin)
	ex.shell, ex.user = sh, user
	if req.DetachMs > 0 {
		ex.announced = make(chan struct{})
	}
	lc := log.With().Str("execution", ex.id).Str("program", filepath.Base(req.Command))
	if req.User != "" {
		lc = lc.Str("user", req.User)
	}
	ex.log = lc.Logger()
	if req.Stream {
		ex.stream = newStreamer(ex)
	}
	if sh == nil {
		s.track(ex)
	} else {
		sh.ex = ex
	}
	s.runners.run(func() {
		res := s.run(ex)
		ex.announceDone() // the subject never ran: no started
		if ex.stream != nil {
			ex.stream.close() // every output message goes before the reply
		}
		if sh != nil {
			s.dropShell(sh)
			sh.closeChannel()
			sh.final = res
		}
		s.deliver(ex, res)
	})
	return ex
}

// newExecution is an execution (or a session's command) accepted now,
// with a stdin feed holding its input when in says it has one.
func (s *Server) newExecution(cn *conn, req *protocol.Execute, reqID json.RawMessage, in bool) *execution {
	ex := &execution{id: s.newExecutionID(), reqID: reqID, req: req, stopCh: make(chan string, 1),
		done: make(chan protocol.Executed, 1), finished: make(chan struct{}), owner: cn, ownerID: reqID, began: time.Now()}
	if in {
		ex.in = newStdinFeed(s.cfg.MaxStdinBuffer)
		if req.HasInput {
			ex.in.push(req.Input, !req.Stdin)
		}
	}
	return ex
}

// deliver hands an execution's (or a session's command's) reply to its
// connection, once every output message went before it.
func (s *Server) deliver(ex *execution, res protocol.Executed) {
	ex.done <- res // buffered: the reply is never lost to a slow loop, or kept while detached
	s.untrack(ex)
	close(ex.finished)
	s.ended()
}

// announce sends the started message (section 4.5) once the subject runs,
// and starts the live output after it. With stdin or a pty it is sent too:
// the controller needs the execution's name for its stdin and resize
// messages.
func (ex *execution) announce() {
	defer ex.announceDone()
	if !ex.req.Stream && ex.req.DetachMs == 0 && !ex.req.Stdin && ex.req.Pty == nil {
		return
	}
	if cn, id := ex.destination(); cn != nil {
		cn.write(protocol.Started{Token: cn.token(), Kind: "started", ID: id, Execution: ex.id, Ignored: ex.req.Ignored})
	}
	if ex.stream != nil {
		ex.stream.start()
	}
}

func (ex *execution) announceDone() {
	if ex.announced != nil {
		ex.announceOnce.Do(func() { close(ex.announced) })
	}
}

// announceLimit bounds how long a connection that is going away waits for
// its execution's started message to be written before it detaches it.
const announceLimit = 5 * time.Second

// output is the stdout capture of one execution, in one of the three modes
// of protocol section 5. It is sealed once the capture is final, so that a
// late write from the drain can never race with reading the result.
type output struct {
	mu      sync.Mutex
	sealed  bool
	carrier *protocol.Carrier
	raw     *protocol.RawCapture
	stderr  *protocol.RawCapture // with captureStderr (section 4.5)
}

func newOutput(req *protocol.Execute, maxStdout, maxStderr int) *output {
	o := &output{}
	// The request's maxOutputBytes lowers the daemon's limits, never
	// raises them; outputKeep picks the end kept (docs/protocol.md 4.6).
	capture := protocol.NewRawCapture
	if req.OutputKeep == protocol.OutputKeepTail {
		capture = protocol.NewRawCaptureTail
	}
	if m := req.MaxOutputBytes; m > 0 {
		maxStdout, maxStderr = int(min(m, int64(maxStdout))), int(min(m, int64(maxStderr)))
	}
	switch {
	case !req.CaptureStdout:
	case req.ResultToken != "":
		o.carrier = protocol.NewCarrier()
	default:
		o.raw = capture(maxStdout)
	}
	if req.CaptureStderr {
		o.stderr = capture(maxStderr)
	}
	return o
}

// writers returns what the subject's stdout and stderr drains feed: the
// captures, and the live output when streamed; nil for a stderr nobody
// wants (it then goes to /dev/null or only to its artifact).
func (o *output) writers(st *streamer) (stdout, stderr io.Writer) {
	stdout = o
	if o.stderr != nil {
		stderr = o.stderr
	}
	if st == nil {
		return stdout, stderr
	}
	stdout = tee{o, st.writer(0)}
	if stderr == nil {
		return stdout, st.writer(1)
	}
	return stdout, tee{o.stderr, st.writer(1)}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sealed {
		return len(p), nil
	}
	switch {
	case o.carrier != nil:
		o.carrier.Write(p)
	case o.raw != nil:
		o.raw.Write(p)
	}
	return len(p), nil
}

// fill seals the capture and puts its result into the reply. With empty set
// (the output cannot be trusted, or nothing ran) it reports nothing written.
func (o *output) fill(r *protocol.Executed, resultToken string, empty bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sealed = true
	r.Diagnostic = protocol.NoneDiagnostic()
	switch {
	case o.carrier != nil && empty:
		r.Diagnostic = protocol.EmptyDiagnostic(protocol.DiagMissing)
	case o.carrier != nil:
		r.Stdout, r.Diagnostic = o.carrier.Result(resultToken)
	case o.raw != nil:
		truncated := false
		if !empty {
			r.Stdout, truncated = o.raw.Result()
		}
		r.StdoutTruncated = &truncated
	}
	if o.stderr != nil {
		text, truncated := "", false
		if !empty {
			text, truncated = o.stderr.Result()
		}
		r.Stderr, r.StderrTruncated = &text, &truncated
	}
}

// run carries one execution to its reply: start it, wait for its end,
// then apply the one lifecycle rule that end calls for.
func (s *Server) run(ex *execution) (res protocol.Executed) {
	began := time.Now()
	res = s.executed(ex, "")
	out := newOutput(ex.req, s.cfg.MaxStdoutBytes, s.cfg.MaxStderrBytes)
	if out.carrier != nil && s.cfg.ArtifactsLayout == LayoutMaka {
		out.carrier.CountText() // as Maka's relay counts the text Harbor's exec gives it
	}
	var ended time.Time // when the subject's status was collected
	defer func() {
		if ended.IsZero() {
			ended = time.Now()
		}
		res.DurationMs = ended.Sub(began).Milliseconds()
		ev := ex.log.Info()
		if res.Settlement == protocol.SettleFailed || res.Settlement == protocol.SettleDestroyed {
			ev = ex.log.Warn()
		}
		ev.Str("termination", res.Termination).Int("exitCode", res.ExitCode).
			Str("settlement", res.Settlement).Int("survivors", len(res.Survivors)+res.SurvivorsOmitted).
			Int64("durationMs", res.DurationMs).Msg("execution ended")
	}()

	defer ex.in.stop()
	res.Limits = ex.req.Limits
	res.Usage = &protocol.Usage{} // nothing ran, until the subject starts
	subj, scope, w, ok := s.start(ex, out, &res)
	if !ok {
		return res
	}
	// What the scope used is filled in last: what was reaped by the time
	// the reply is ready (section 4.8).
	defer s.used(ex, subj, scope, w, &res)
	ex.announce()
	st, exited, reason := s.awaitEnd(ex, subj)
	ex.in.stop() // input left when the subject exits is dropped (section 4.6)
	switch {
	case subj.Broken() != nil:
		// Nothing the shim said counts, its exit neither (rule 6.13).
		ended = s.settle(ex, subj, scope, "the shim broke the wire's rules", out, &res)
	case exited && !s.killedByDestroy(subj, st) && settleOnExit(ex.req.OnExit, st) && !ex.keepsRest():
		ended = st.At
		s.settleExited(ex, subj, scope, st, out, &res)
	case exited && !s.killedByDestroy(subj, st):
		ended = st.At
		s.leaveAlone(ex, subj, scope, st, out, &res)
	case exited:
		ended = st.At
		s.destroyedElsewhere(subj, scope, out, &res)
	default:
		ended = s.settle(ex, subj, scope, reason, out, &res)
	}
	if err := subj.Broken(); err != nil && res.Settlement != protocol.SettleFailed {
		// It broke them while the reply was being made.
		s.brokenShim(ex, err, out, &res)
	}
	return res
}

// executed is the reply every execution and every session's command
// (session names it) starts from: it exited, nothing was settled, no
// survivors. Whatever ends it changes only what that end says.
func (s *Server) executed(ex *execution, session string) protocol.Executed {
	return protocol.Executed{Kind: "executed", ID: ex.reqID, Execution: ex.id, Session: session,
		Settlement: protocol.SettleNone, Survivors: []protocol.Survivor{},
		Scope: protocol.ScopeInfo{Mechanism: s.cfg.Mechanism}, Termination: protocol.Exited}
}

// brokenShim makes the reply of an execution whose shim broke the wire's
// rules (exec.Subject.Broken): the shim is killed and nothing it said
// counts, so the reply is the framework's end, failed, with no output and
// no survivors (rule 6.13).
func (s *Server) brokenShim(ex *execution, err error, out *output, res *protocol.Executed) {
	ex.log.Error().Err(err).Msg("the execution's shim broke the wire's rules; it was killed")
	s.unconfirmed.Store(true)
	res.Termination = protocol.FrameworkTimeout
	res.ExitCode = protocol.ExitFramework
	res.Signal = ""
	res.Settlement = protocol.SettleFailed
	res.Survivors, res.SurvivorsOmitted = nil, 0
	res.Stdout, res.Stderr = "", nil
	out.fill(res, ex.req.ResultToken, true)
}

// start starts the subject in a new scope. When it cannot (protocol 4.2:
// 127, 126, or 111 when the scope cannot be set up), nothing ran and
// nothing is signalled (rule 6.6): res says why and ok is false.
func (s *Server) start(ex *execution, out *output, res *protocol.Executed) (*exec.Subject, exec.Scope, oomWatch, bool) {
	req := ex.req
	failed := func(code int, detail string) (*exec.Subject, exec.Scope, oomWatch, bool) {
		res.ExitCode = code
		res.Detail = detail
		out.fill(res, req.ResultToken, true)
		if code == protocol.ExitScopeUnavailable {
			res.Diagnostic = protocol.EmptyDiagnostic(protocol.DiagScopeUnavailable)
		}
		return nil, nil, oomWatch{}, false
	}
	if detail, ok := s.beforeStart(ex); !ok { // artifacts.go: the maka layout's files, --require-netns
		return failed(protocol.ExitScopeUnavailable, detail)
	}
	subjectEnv := env.Subject(s.cfg.BaseEnv, withTerm(req, withUserVars(req, ex.user)), req.Credentials, req.ResultToken)
	// The cwd is checked only when something failed: a stat on every
	// execution is measurable, and a cwd that is missing makes the lookup or
	// the start fail anyway.
	dir := env.Cwd(s.cfg.Workspace, req.Cwd)
	path, code, detail := lookUp(ex, subjectEnv, dir)
	if code != 0 {
		return failed(code, detail)
	}
	scope, err := s.cfg.NewScope(ex.id)
	if err != nil {
		ex.log.Error().Err(err).Msg("scope setup failed")
		return failed(protocol.ExitScopeUnavailable, "the execution scope could not be set up: "+err.Error())
	}
	if err := exec.SetCgroupLimits(scope, req.Limits["memoryBytes"], req.Limits["pids"]); err != nil {
		scope.Close()
		return failed(protocol.ExitScopeUnavailable, "the execution's limits could not be set: "+err.Error())
	}
	spec := s.spec(ex, out, exec.Spec{Path: path, Argv: append([]string{req.Command}, req.Args...), Env: subjectEnv, Dir: dir,
		Stdin: ex.in != nil || ex.shell != nil, Rlimits: rlimits(req.Limits)})
	w := s.watchOOM(scope)
	subj, err := exec.Start(s.cfg.Shims, scope, spec)
	if err != nil {
		closeAll(spec.StdoutCopy, spec.StderrCopy)
		scope.Close()
		if env.CheckDir(dir) != nil {
			return failed(badDir(dir))
		}
		return failed(spawnFailure(err, req.Command))
	}
	if ex.in != nil {
		ex.in.start(subj.Stdin)
	}
	if req.Pty != nil {
		ex.setTerminal(subj)
	}
	if ex.shell != nil {
		ex.shell.started(subj)
	}
	ex.log.Debug().Int("pid", subj.PID).Msg("execution started")
	return subj, scope, w, true
}

// lookUp finds ex's program in the subject's environment and cwd (dir),
// as the subject's user; code is not 0 when it cannot (protocol 4.2).
func lookUp(ex *execution, subjectEnv []string, dir string) (path string, code int, detail string) {
	var cred *syscall.Credential
	if ex.user != nil {
		cred = ex.user.Cred
	}
	path, err := env.LookPath(ex.req.Command, subjectEnv, dir, cred)
	switch {
	case err == nil:
		return path, 0, ""
	case env.CheckDir(dir) != nil:
		code, detail = badDir(dir)
	case errors.Is(err, env.ErrNotFound):
		code, detail = protocol.ExitNotFound, fmt.Sprintf("program %q not found", ex.req.Command)
	default:
		code, detail = protocol.ExitNotExecutable, fmt.Sprintf("program %q is not executable", ex.req.Command)
	}
	return "", code, detail
}

// badDir is the exit code and detail of a cwd that is not a directory.
func badDir(dir string) (int, string) {
	return protocol.ExitNotExecutable, fmt.Sprintf("cwd %s is not a directory that exists", dir)
}

// spec completes the start of ex's subject: whom it runs as, where its
// output goes (the capture, the artifacts, a session's routers), its
// status channel and its terminal.
func (s *Server) spec(ex *execution, out *output, spec exec.Spec) exec.Spec {
	req := ex.req
	if ex.user != nil {
		spec.Credential = ex.user.Cred
	}
	spec.Stdout, spec.Stderr = out.writers(ex.stream)
	spec.StdoutCopy, spec.StderrCopy = s.openArtifacts(ex)
	s.asHarborGives(ex, &spec) // the maka layout: stderr merged into stdout
	if ex.shell != nil {
		// Commands read from stdin, status on descriptor 3, output routed
		// to the command that runs (shell.go).
		spec.Stdout, spec.Status = &ex.shell.stdout, ex.shell.peer
		if req.Pty == nil {
			spec.Stderr = &ex.shell.stderr
		}
	}
	if p := req.Pty; p != nil {
		// One stream: the terminal's, in stdout and its artifact; the
		// stderr artifact stays empty.
		spec.Pty = &exec.Pty{Rows: uint16(p.Rows), Cols: uint16(p.Cols)}
		closeAll(spec.StderrCopy)
		spec.Stderr, spec.StderrCopy = nil, nil
	}
	return spec
}

// withTerm is vars with TERM set to the terminal's type for a subject on
// a pty, unless the request's environment or credentials set it (4.7).
func withTerm(req *protocol.Execute, vars map[string]string) map[string]string {
	if req.Pty == nil {
		return vars
	}
	_, inEnv := vars["TERM"]
	_, inCreds := req.Credentials["TERM"]
	if inEnv || inCreds {
		return vars
	}
	withTerm := make(map[string]string, len(vars)+1)
	for k, v := range vars {
		withTerm[k] = v
	}
	withTerm["TERM"] = req.Pty.Term
	return withTerm
}

// withUserVars is the request's environment with HOME, USER and LOGNAME of
// the user the subject runs as, where neither environment nor credentials
// sets them (section 4.6).
func withUserVars(req *protocol.Execute, u *env.User) map[string]string {
	if u == nil {
		return req.Environment
	}
	vars := u.Vars()
	for k := range vars {
		_, inEnv := req.Environment[k]
		_, inCreds := req.Credentials[k]
		if inEnv || inCreds {
			delete(vars, k)
		}
	}
	if len(vars) == 0 {
		return req.Environment
	}
	for k, v := range req.Environment {
		vars[k] = v
	}
	return vars
}

// awaitEnd waits for the subject to exit or for the framework's end
// (timeoutMs, or a stop: verify, transport loss, shutdown), and applies
// rule 6.3: if the subject had already exited when the framework's end was
// seen, it wins, and exited is true.
func (s *Server) awaitEnd(ex *execution, subj *exec.Subject) (st exec.Status, exited bool, reason string) {
	if ex.shell != nil {
		return s.serveShell(ex, subj)
	}
	deadline, stop := armDeadline(ex.req.TimeoutMs, &ex.deadline)
	defer stop()
	select {
	case st = <-subj.Exited():
		return st, true, ""
	case <-deadline:
		reason = "timeoutMs"
	case reason = <-ex.stopCh:
	case <-subj.Lost():
		reason = "shim lost"
	}
	// Collect a status that is waiting before deciding.
	subj.Sync()
	select {
	case st = <-subj.Exited():
		return st, true, ""
	default:
		return st, false, reason
	}
}

// armDeadline starts the timer of a timeoutMs (none when 0) and records
// when it fires in at, for status, unless at is nil; stop releases it.
func armDeadline(timeoutMs int64, at *atomic.Int64) (deadline <-chan time.Time, stop func()) {
	if timeoutMs <= 0 {
		return nil, func() {}
	}
	d := time.Duration(timeoutMs) * time.Millisecond
	if at != nil {
		at.Store(time.Now().Add(d).UnixNano())
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// keepsRest reports whether a trial boundary kept processes of this
// session's scope (shell.go): when its shell exits, the rest is left
// alone, as an exited subject's.
func (ex *execution) keepsRest() bool { return ex.shell != nil && ex.shell.keepRest.Load() }

// leaveAlone is rule 6.1: the subject exited by itself, with any status;
// nothing is signalled, and what remains of its scope is reported as
// survivors and kept for verify.
func (s *Server) leaveAlone(ex *execution, subj *exec.Subject, scope exec.Scope, st exec.Status, out *output, res *protocol.Executed) {
	res.ExitCode = st.ExitCode()
	if !st.Exited {
		res.Signal = unix.SignalName(st.Signal)
	}
	subj.CutStdout(cutLimit)
	out.fill(res, ex.req.ResultToken, false)
	members, err := lookAfterExit(scope)
	if err != nil || len(members) > 0 {
		listSurvivors(ex, members, subj.PID, res)
		scope.LeaveAlone()
		ex.kept = scope
		s.keepLeft(scope, ex.id)
		s.keepUsage(ex.id, subj)
	} else {
		scope.Close()
	}
	if err != nil {
		ex.log.Warn().Err(err).Msg("could not look for survivors")
	}
}

// listSurvivors is the one place a reply lists what its execution (or
// session's command) left running: members but the subject (or shell),
// each named as ex's.
func listSurvivors(ex *execution, members []exec.Member, subject int, res *protocol.Executed) {
	res.Survivors, res.SurvivorsOmitted = describe(members, subject)
	for i := range res.Survivors {
		res.Survivors[i].Execution = ex.id
	}
}

// settleOnExit reports whether onExit asks for the scope of a subject that
// exited by itself with st to be settled (section 4.5).
func settleOnExit(onExit string, st exec.Status) bool {
	switch onExit {
	case protocol.OnExitSettle:
		return true
	case protocol.OnExitSettleOnFailure:
		return !st.Exited || st.ExitCode() != 0
	}
	return false
}

// settleExited is onExit "settle" (or "settle-on-failure" after a
// failure): the subject exited by itself and the reply says so, with its
// real status and its output up to its exit; then what it left in its
// scope is settled as at the framework's end, and settlement says how that
// went. No survivor is reported: nothing is left alone.
func (s *Server) settleExited(ex *execution, subj *exec.Subject, scope exec.Scope, st exec.Status, out *output, res *protocol.Executed) {
	res.ExitCode = st.ExitCode()
	if !st.Exited {
		res.Signal = unix.SignalName(st.Signal)
	}
	subj.CutStdout(cutLimit)
	out.fill(res, ex.req.ResultToken, false)
	ex.log.Info().Str("onExit", ex.req.OnExit).Msg("subject exited; settling its scope")
	r := s.stopScope(ex.log, scope, 0)
	res.Settlement = s.settlementOf(ex.log, r)
	scope.Close()
}

// stopScope is teardown.Stop with relayd's budget: settle, else destroy.
// first, when not 0, opens the settlement instead of SIGTERM (SIGINT for
// a session's command, as Ctrl-C would: protocol 4.7).
func (s *Server) stopScope(log zerolog.Logger, scope teardown.Scope, first syscall.Signal) teardown.Result {
	return teardown.Stop(s.destroyCtx, scope, teardown.Budget{Grace: s.cfg.TermGrace, Timeout: s.cfg.TeardownTimeout,
		Destroy: s.cfg.Destroy, First: first, Destroying: func(o teardown.Outcome) {
			ev := log.Error().Int("remaining", len(o.Remaining)).Dur("elapsed", o.Elapsed)
			if o.Err != nil {
				ev = ev.AnErr("lastError", o.Err)
			}
			ev.Bool("killNamespace", s.cfg.Destroy.KillNamespace).Msg("settlement not confirmed; destroying")
		}})
}

// settlementOf is the settlement word of a stop's result; one without
// evidence makes relayd's exit status say so.
func (s *Server) settlementOf(log zerolog.Logger, r teardown.Result) string {
	if r.Confirmed {
		return protocol.SettleSettled
	}
	s.unconfirmed.Store(true)
	if r.DestroyErr != nil {
		log.Error().Err(r.DestroyErr).Msg("destroy reported a failure")
	}
	if r.Destroyed {
		return protocol.SettleDestroyed
	}
	return protocol.SettleFailed
}

// destroyedElsewhere reports a subject that another execution's destroy of
// the whole namespace killed: the framework ended it, and nothing of it can
// be trusted.
func (s *Server) destroyedElsewhere(subj *exec.Subject, scope exec.Scope, out *output, res *protocol.Executed) {
	res.Termination = protocol.FrameworkTimeout
	res.ExitCode = protocol.ExitFramework
	res.Settlement = protocol.SettleDestroyed
	s.unconfirmed.Store(true)
	subj.CutStdout(0)
	out.fill(res, "", true)
	scope.Close()
}

// settle is rule 6.2: the framework ended the subject; the whole scope is
// stopped (teardown.Stop: settle, else destroy), within --teardown-timeout.
// It returns when the subject's status was collected.
func (s *Server) settle(ex *execution, subj *exec.Subject, scope exec.Scope, reason string, out *output, res *protocol.Executed) (ended time.Time) {
	ex.log.Info().Str("reason", reason).Msg("settling scope")
	res.Termination = protocol.FrameworkTimeout
	res.ExitCode = protocol.ExitFramework
	r := s.stopScope(ex.log, scope, 0)
	select {
	case st := <-subj.Exited():
		ended = st.At
	default:
	}
	res.Settlement = s.settlementOf(ex.log, r)
	if err := subj.Broken(); err != nil {
		subj.CutStdout(0)
		s.brokenShim(ex, err, out, res)
	} else if r.Confirmed {
		subj.CutStdout(cutLimit)
		out.fill(res, ex.req.ResultToken, false)
	} else {
		subj.CutStdout(0)
		out.fill(res, ex.req.ResultToken, true)
	}
	scope.Close()
	return ended
}

// killedByDestroy reports whether a subject that died of SIGKILL was
// running when a destroy killed every process of the namespace: then it is
// the framework's end, not the subject's own.
func (s *Server) killedByDestroy(subj *exec.Subject, st exec.Status) bool {
	at := s.nsKilledAt.Load()
	if at == 0 || st.Exited || st.Signal != syscall.SIGKILL {
		return false
	}
	kill := time.Unix(0, at)
	return subj.Started.Before(kill) && !st.At.Before(kill)
}

// lookAfterExit looks for survivors once the subject has exited; a look
// that fails (a cgroup still populated by the exiting subject) is retried
// for a moment before it counts.
func lookAfterExit(scope exec.Scope) ([]exec.Member, error) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for {
		members, err := scope.Members()
		if err == nil || time.Now().After(deadline) {
			return members, err
		}
		time.Sleep(time.Millisecond)
	}
}

// spawnFailure maps a failed start to the exit code and detail of protocol
// 4.2: the errors execve itself gives are 127 (not found) or 126 (cannot be
// executed); any other failure (pipes, the scope, fork or clone into the
// cgroup) is 111: nothing ran.
func spawnFailure(err error, command string) (int, string) {
	var se *exec.SpawnError
	var errno syscall.Errno
	switch {
	case errors.Is(err, exec.ErrScopeUnavailable):
		return protocol.ExitScopeUnavailable, "the execution scope could not be set up: " + err.Error()
	case !errors.As(err, &se) || se.Stage != "exec" || !errors.As(err, &errno):
		return protocol.ExitScopeUnavailable, "the subject could not be started: " + err.Error()
	case errno == syscall.ENOENT:
		return protocol.ExitNotFound, fmt.Sprintf("program %q not found, or its interpreter is missing (%v)", command, errno)
	case execErrno[errno]:
		return protocol.ExitNotExecutable, fmt.Sprintf("program %q could not be executed (%v)", command, errno)
	default:
		return protocol.ExitScopeUnavailable, fmt.Sprintf("the subject could not be started in its scope (%v)", errno)
	}
}

// execErrno are the failures of execve(2) and chdir(2) that mean "cannot
// execute this", as opposed to a failure to create the process.
var execErrno = map[syscall.Errno]bool{
	syscall.EACCES: true, syscall.EPERM: true, syscall.ENOEXEC: true, syscall.EISDIR: true,
	syscall.ENOTDIR: true, syscall.ETXTBSY: true, syscall.ELOOP: true, syscall.ENAMETOOLONG: true,
	syscall.E2BIG: true, syscall.ELIBBAD: true, syscall.EIO: true,
}

func (s *Server) openArtifact(ex *execution, stream string) io.WriteCloser {
	f, err := createIn(s.cfg.ArtifactsDir, filepath.Base(s.artifactPath(ex.id, stream)))
	if err != nil {
		ex.log.Warn().Err(err).Str("stream", stream).Msg("cannot write artifact; output is drained without a copy")
		return nil
	}
	return &artifact{f: f, left: s.cfg.ArtifactLimit, log: ex.log.With().Str("stream", stream).Logger()}
}

// artifact is one stream's artifact file. It stops growing at
// --max-artifact-bytes (rule 6.11): a survivor may write for as long as it
// lives, and its output goes on being drained (so that it never blocks on a
// full pipe) but no longer kept. Write takes all of p even past the limit,
// so that the drain never counts the copy as failed.
type artifact struct {
	f    *os.File
	left int64 // bytes the file may still grow by
	log  zerolog.Logger
}

func (a *artifact) Write(p []byte) (int, error) {
	if a.left <= 0 {
		return len(p), nil
	}
	keep := p
	if int64(len(keep)) > a.left {
		keep = keep[:a.left]
	}
	n, err := a.f.Write(keep)
	a.left -= int64(n)
	if err != nil {
		return n, err
	}
	if a.left == 0 {
		a.log.Info().Msg("artifact reached --max-artifact-bytes; the rest of the stream is drained and dropped")
	}
	return len(p), nil
}

func (a *artifact) Close() error { return a.f.Close() }

func closeAll(cs ...io.WriteCloser) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}
