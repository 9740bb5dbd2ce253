package session

import (
	"encoding/json"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// A session's command runs through the steps of an execution's run
// (execution.go): its reply is made by Server.executed, its timeoutMs
// armed by armDeadline, its part of the session's scope settled by
// stopScope, its survivors listed by listSurvivors, its usage filled at
// the end (commandUsage). What is its own is the start, a mark inside the
// session's scope (the members before it), typing its line, and reading
// its status from the status channel instead of the subject's exit.

// cmdRun is one command of a session from its line to its reply; only the
// shell's loop (serveShell) touches it.
type cmdRun struct {
	s    *Server
	sh   *shell
	subj *exec.Subject
	ex   *execution
	res  protocol.Executed

	out    *output
	stdout io.Writer // the command's stdout capture (and stream)
	fifo   *stdinFifo
	before []exec.Member // the scope's members when the command began
	shellM exec.Member

	nonce, end string
	dirty      int64 // the shell's dirty count when the line was typed
	opened     bool  // the shell said it opened the FIFO
	clean      bool  // bash's guard said "c" (sh has none: see line)
}

// startCommand runs a session's command: its goroutine hands it to the
// shell's loop and sends the reply on ex.done, as an execution's does.
func (s *Server) startCommand(cn *conn, sh *shell, req *protocol.Execute, reqID json.RawMessage, log zerolog.Logger) *execution {
	ex := s.newExecution(cn, req, reqID, req.Stdin || req.HasInput && sh.screen == nil)
	ex.log = log.With().Str("execution", ex.id).Str("session", sh.name).Logger()
	if req.Stream {
		ex.stream = newStreamer(ex)
		if sh.screen != nil {
			ex.stream.names[0], ex.stream.eager = "pty", true // as a pty execution's (stream.go)
		}
	}
	s.track(ex)
	go func() {
		c := &command{ex: ex, reply: make(chan protocol.Executed, 1)}
		var res protocol.Executed
		select {
		case sh.cmds <- c:
			res = <-c.reply
		case <-sh.ex.finished:
			res = s.executed(ex, sh.name)
			res.Termination, res.ExitCode, res.Diagnostic = protocol.FrameworkTimeout, protocol.ExitFramework, protocol.NoneDiagnostic()
			res.SessionEnded, res.Detail = true, "the session ended before the command ran"
		}
		ex.in.stop()
		if ex.stream != nil {
			ex.stream.close() // every output message goes before the reply
		}
		sh.busy.Store(false)
		s.deliver(ex, res)
	}()
	return ex
}

// runCommand runs one command in the shell and makes its reply. exited
// says the shell exited (st), why that the session must end.
func (s *Server) runCommand(sh *shell, subj *exec.Subject, c *command) (res protocol.Executed, st exec.Status, exited bool, why string) {
	began := time.Now()
	r := &cmdRun{s: s, sh: sh, subj: subj, ex: c.ex, res: s.executed(c.ex, sh.name),
		shellM: exec.Member{PID: subj.PID, Start: subj.Start}, clean: sh.kind != protocol.ShellBash}
	use := lookShellUse(subj.PID, subj)
	defer func() {
		r.res.DurationMs = time.Since(began).Milliseconds()
		r.res.Usage = commandUsage(use, lookShellUse(subj.PID, subj), exited)
		r.ex.log.Info().Str("termination", r.res.Termination).Int("exitCode", r.res.ExitCode).Str("settlement", r.res.Settlement).
			Bool("sessionEnded", r.res.SessionEnded).Int64("durationMs", r.res.DurationMs).Msg("command ended")
		res = r.res
	}()
	r.mark()
	if !r.openInput() {
		return r.res, st, false, ""
	}
	if r.fifo != nil {
		defer r.fifo.remove()
	}
	defer r.ex.in.stop() // what is not written when the command ends is dropped
	r.ex.announce()
	r.route()
	defer func() {
		sh.stdout.to(nil)
		sh.stderr.to(nil)
	}()
	if why = r.typeLine(); why != "" {
		return r.res, st, false, why
	}
	deadline, stop := armDeadline(r.ex.req.TimeoutMs, nil)
	defer stop()
	reason, st, exited, why, done := r.await(deadline)
	if done {
		return r.res, st, exited, why
	}
	r.interrupt(reason)
	st, exited, why = r.comeBack(why)
	return r.res, st, exited, why
}

// mark is the command's start inside the session's scope: what is in it
// when the command begins is the last command's closing look, when it had
// one (nothing runs in between but what was there, whose children are not
// the command's), else a look now.
func (r *cmdRun) mark() {
	sh := r.sh
	before, fresh := sh.last, sh.lastOK
	sh.last, sh.lastOK = nil, false
	if !fresh {
		var err error
		if before, err = lookAfterExit(r.subj.Scope); err != nil {
			before = nil // every process but the shell then counts as the command's
		}
	}
	r.before = before
	r.nonce, r.end = newNonce(), newNonce()
	r.out = newOutput(r.ex.req, r.s.cfg.MaxStdoutBytes, r.s.cfg.MaxStderrBytes)
}

// openInput makes the FIFO of a command's input or stdin (without a pty);
// when it cannot, the reply says so and nothing is run.
func (r *cmdRun) openInput() bool {
	if r.ex.in == nil || r.sh.screen != nil {
		return true
	}
	r.s.swept.Do(sweepFifos)
	var err error
	if r.fifo, err = newStdinFifo(r.sh.ex.user); err != nil {
		r.ex.in.stop()
		r.res.Termination, r.res.ExitCode = protocol.FrameworkTimeout, protocol.ExitFramework
		r.res.Detail = "the command's stdin could not be made: " + err.Error()
		r.out.fill(&r.res, "", true)
		return false
	}
	return true
}

// route sends the shell's output to the command's capture.
func (r *cmdRun) route() {
	var stderr io.Writer
	r.stdout, stderr = r.out.writers(r.ex.stream)
	if r.sh.screen == nil {
		r.sh.stdout.to(r.stdout)
	} // else from the shell's "b" on: before it, the terminal echoes the typed line
	r.sh.stderr.to(stderr)
}

// typeLine writes the command's line to the shell; a shell that does not
// take it ends the session (why).
func (r *cmdRun) typeLine() (why string) {
	sh, subj := r.sh, r.subj
	if sh.screen != nil && sh.kind == protocol.ShellBash {
		// dash has no line editor: it reads its terminal in canonical
		// mode, so there is nothing to wait for.
		typeable(subj.Stdin, cutLimit)
	}
	in := ""
	if r.fifo != nil {
		in = r.fifo.path()
	}
	expect := [4]string{r.nonce, r.end}
	if prev := sh.expect.Load(); prev != nil {
		expect[2], expect[3] = prev[0], prev[1]
	}
	sh.expect.Store(&expect)
	r.dirty = sh.dirty.Load() // what came before the line is not its guard's listing
	_ = subj.Stdin.SetWriteDeadline(time.Now().Add(r.s.cfg.TeardownTimeout))
	if _, err := io.WriteString(subj.Stdin, sh.line(r.ex.req, r.nonce, r.end, in)); err != nil {
		// The shell does not read: the session cannot go on.
		r.res.Termination, r.res.ExitCode, r.res.SessionEnded = protocol.FrameworkTimeout, protocol.ExitFramework, true
		r.res.Detail = "the shell did not take the command: " + err.Error()
		r.finish()
		return "the shell did not take a command"
	}
	return ""
}

// finish takes the command's output and the shell's cwd into the reply.
func (r *cmdRun) finish() {
	r.subj.Flush(cutLimit)
	r.sh.stdout.to(nil)
	r.sh.stderr.to(nil)
	r.out.fill(&r.res, "", false)
	if dir, err := os.Readlink("/proc/" + strconv.Itoa(r.subj.PID) + "/cwd"); err == nil {
		r.res.Cwd = dir
	}
}

// shellExited is the reply of a command during which the shell exited
// (st): the session ended with it.
func (r *cmdRun) shellExited(st exec.Status) {
	r.res.ExitCode = st.ExitCode()
	if !st.Exited {
		r.res.Signal = unix.SignalName(st.Signal)
	}
	r.res.SessionEnded = true
	r.finish()
	r.res.Cwd = ""
}

// begin is a pty command's "b": what the terminal shows from now on is
// the command's, and its stdin is typed.
func (r *cmdRun) begin() {
	r.subj.Flush(cutLimit)
	r.sh.stdout.to(r.stdout)
	if r.ex.in != nil {
		// stdin is keystrokes, typed from now on: readline gave the
		// terminal up when it returned the line (typed before, they
		// would be its, for the next prompt).
		r.ex.in.start(&keys{tty: r.subj.Stdin, timeout: r.s.cfg.WriteTimeout})
	}
}

// dropKeys answers a pty command's "k" (shell.dropKeys).
func (r *cmdRun) dropKeys() {
	r.subj.Flush(cutLimit)
	r.sh.stdout.to(nil)
	r.sh.dropKeys(r.ex, r.subj)
}

// await waits for the command's status, the shell's exit or the
// framework's end (reason, when done is false).
func (r *cmdRun) await(deadline <-chan time.Time) (reason string, st exec.Status, exited bool, why string, done bool) {
	for reason == "" {
		select {
		case m := <-r.sh.msgs:
			if r.onMessage(m) {
				return "", st, false, "", true
			}
		case st = <-r.subj.Exited():
			r.shellExited(st)
			return "", st, true, "", true
		case <-r.subj.Lost():
			reason, why = "shim lost", "shim lost"
		case <-deadline:
			reason = "timeoutMs"
		case reason = <-r.ex.stopCh:
		case why = <-r.sh.ex.stopCh:
			reason = why
		case <-r.s.stopping:
			reason, why = "shutdown", "shutdown"
		}
	}
	return reason, st, false, why, false
}

// onMessage takes one status message while the command runs; done says
// the reply is made.
func (r *cmdRun) onMessage(m statusMsg) (done bool) {
	switch {
	case m.nonce == r.end && m.ended:
		// The line ended and no status came.
		subshellGone(m.from, time.Now().Add(cutLimit))
		r.res.Untrusted = noStatus
		if !r.clean {
			r.res.Untrusted = untrusted
		}
		r.finish()
		r.survivors()
		return true
	case m.nonce != r.nonce || m.ended:
	case m.opened:
		// The shell holds the FIFO open for the script: what is
		// written, and the end of file, reach it.
		if r.fifo != nil && !r.opened {
			r.ex.in.start(r.fifo.f)
		}
		r.opened = true
	case m.begins:
		r.begin()
		_, _ = r.sh.status.Write([]byte("\n")) // the shell waits for it to run the script
	case m.keys:
		r.dropKeys()
	case m.clean:
		r.guard()
	default:
		r.res.ExitCode = m.code
		if !r.clean {
			r.res.Untrusted = untrusted
		}
		// The line's end: the subshells that said the status are gone
		// (no survivors of the command), and on a pty the shell is back
		// at its prompt, the terminal its own again.
		r.sh.awaitEnd(r.end)
		r.finish()
		r.survivors()
		return true
	}
	return false
}

// guard answers bash's guard ("c"): its listing came before its "c" (in
// order, from one sender), and the script runs only on relayd's "0".
func (r *cmdRun) guard() {
	r.clean = r.sh.dirty.Load() == r.dirty
	word := "1" // one byte: read -n 1 takes the message whole
	if r.clean {
		word = "0"
		if r.sh.screen != nil {
			r.begin() // bash on a pty: the guard is where the script begins (line)
		}
	}
	_, _ = r.sh.status.Write([]byte(word))
}

// survivors lists the processes the command started that still run, and
// keeps the look for the next command's mark.
func (r *cmdRun) survivors() {
	sh, scope := r.sh, r.subj.Scope
	sh.last, sh.lastOK = nil, false
	part := newCommandPart(scope, r.before, r.shellM)
	defer part.Close()
	all, err := scope.Members()
	if err != nil {
		r.ex.log.Warn().Err(err).Msg("could not look for the command's survivors")
		return
	}
	listSurvivors(r.ex, part.Sort(all), r.shellM.PID, &r.res)
	sh.last, sh.lastOK = all, true
}

// interrupt is the framework's end of the command: Ctrl-C to its
// processes, then they are settled; the shell and what earlier commands
// left live on. Its stdin ends first: a builtin that reads it (read)
// returns. A FIFO the shell did not open yet is unlinked, so that it
// opens nothing (or what it resolved already, while relayd still holds it
// open), and closed once the shell says it opened it.
func (r *cmdRun) interrupt(reason string) {
	r.ex.log.Info().Str("reason", reason).Msg("interrupting the command")
	r.ex.in.stop()
	if r.fifo != nil && r.opened {
		r.fifo.close()
	} else if r.fifo != nil {
		r.fifo.unlink()
	}
	part := newCommandPart(r.subj.Scope, r.before, r.shellM)
	res := r.s.stopScope(r.ex.log, part, syscall.SIGINT)
	part.Close()
	r.res.Termination, r.res.ExitCode = protocol.FrameworkTimeout, protocol.ExitFramework
	r.res.Settlement = r.s.settlementOf(r.ex.log, res)
}

// comeBack waits for the shell to come back to its prompt after an
// interrupted command: the status of what was interrupted is waited for
// (and dropped), so that the next command starts clean. A shell that does
// not come back (a loop of builtins) ends the session (why); one that
// does returns why as the interruption said it.
func (r *cmdRun) comeBack(why string) (st exec.Status, exited bool, _ string) {
	wait := time.NewTimer(cutLimit)
	defer wait.Stop()
	probe := ""
	for {
		select {
		case m := <-r.sh.msgs:
			if r.onLateMessage(m, probe) {
				r.finish()
				return st, false, why
			}
		case st = <-r.subj.Exited():
			r.res.SessionEnded = true
			r.finish()
			r.res.Cwd = ""
			return st, true, ""
		case <-wait.C:
			if probe == "" && r.sh.screen == nil {
				// The settlement may have ended the subshells that say
				// the line's status and end (they started after the
				// command began): ask the shell whether it reads again.
				probe = newNonce()
				_ = r.subj.Stdin.SetWriteDeadline(time.Now().Add(r.s.cfg.TeardownTimeout))
				if _, err := io.WriteString(r.subj.Stdin, r.sh.endLine(probe)); err == nil {
					wait.Reset(cutLimit)
					continue
				}
			}
			r.res.SessionEnded = true
			r.res.Detail = "the shell itself did not come back from the interrupted command; the session is closed"
			r.finish()
			return st, false, "the shell did not come back from an interrupted command"
		}
	}
}

// onLateMessage takes one status message of an interrupted command; back
// says the shell is back: its line ended, or its status came.
func (r *cmdRun) onLateMessage(m statusMsg, probe string) (back bool) {
	switch {
	case (m.nonce == r.end || m.nonce == probe) && m.ended:
		return true
	case m.nonce == r.nonce && m.clean:
		_, _ = r.sh.status.Write([]byte("1")) // the guard waits: the script is not run
	case m.nonce != r.nonce || m.ended:
	case m.opened:
		if r.fifo != nil {
			r.fifo.close()
		}
	case m.begins:
		_, _ = r.sh.status.Write([]byte("\n"))
	case m.keys:
		r.dropKeys()
	default:
		return true
	}
	return false
}
