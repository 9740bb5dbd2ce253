package session

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// Shell sessions (protocol 4.7). A session is an execution whose subject
// is a shell and whose scope outlives its commands: open starts it as
// any execution (Server.run, exec.Start, a shim, a scope of either
// mechanism), and its awaitEnd serves commands (serveShell) until the
// shell exits, close or the idle timeout stops it, or relayd shuts down;
// then Server.run's switch settles the whole scope as for any execution.
//
// Each command is one line written to the shell's stdin (a pipe): the
// script, quoted, is eval'ed with stdin /dev/null (or its input) and
// descriptor 3 closed, and subshells of the shell, built so that nothing
// an earlier command left in it can run in them (line), write
// "<nonce> <status>" to descriptor 3, a SOCK_SEQPACKET socket whose other
// end relayd holds with SO_PASSCRED: a message counts only when the kernel
// says the shell or a process descended from it sent it and it carries
// the command's nonce (docs/scopes.md, "Shell sessions"). Nothing the
// command prints is read for its status.

// shell is one open session.
type shell struct {
	name  string // "s-N"
	kind  string // protocol.ShellBash or protocol.ShellSh
	ex    *execution
	began time.Time

	peer   *os.File // the shell's end of the status channel, until it runs
	status *net.UnixConn
	msgs   chan statusMsg // status messages the shell itself sent

	cmds    chan *command
	busy    atomic.Bool
	used    atomic.Int64  // when the session was last used (unix ns): touch
	touched chan struct{} // a use since the idle timer was last set; buffered

	up   chan struct{} // closed once the shell runs
	subj *exec.Subject // set before up is closed

	stdout, stderr router
	screen         *screen // with a pty: what the terminal printed, for read; else nil

	final protocol.Executed // the shell's execution's end, once ex.finished is closed

	// last is the closing look of the last command that ended by itself,
	// the next one's view of what was there before it (lastOK); only the
	// shell's loop touches them.
	last   []exec.Member
	lastOK bool

	// keepRest: a trial boundary kept processes of the session, so what
	// remains when the shell exits is left alone, not settled.
	keepRest atomic.Bool

	// expect is the running command's nonce and end nonce, and the line
	// before's (readStatus, expected); dirty counts the messages of the
	// shell that were neither such a line's own nor an ignored signal's
	// trap line: a bash guard's listing of a trap, or anything else. The
	// guard is clean when none came between the line's start and its "c"
	// (cmdRun.guard).
	expect atomic.Pointer[[4]string]
	dirty  atomic.Int64
}

// command is one execute of a session, handed to its shell's loop.
type command struct {
	ex    *execution
	reply chan protocol.Executed // buffered
}

type statusMsg struct {
	nonce  string
	code   int
	opened bool // "<nonce> o": the shell opened the command's stdin FIFO
	begins bool // "<nonce> b": on a pty, the script begins (the typed line's echo is before)
	keys   bool // "<nonce> k": on a pty, the command ended; the shell waits until relayd drops its unread keystrokes
	clean  bool // "<nonce> c": bash's guard found nothing an earlier command left that could fake the status
	ended  bool // "<end> e": the line ended (with its own nonce)
	from   int  // the sender's pid, as the kernel gave it
}

// router sends a shell's output to the capture of the command that runs,
// and drops what comes between commands (a background job's output
// belongs to the command that runs when it comes, or to nobody).
type router struct {
	mu   sync.Mutex
	w    io.Writer
	also io.Writer // a pty session's screen, which keeps everything (screen.go)
}

func (r *router) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_, _ = r.w.Write(p)
	}
	if r.also != nil {
		_, _ = r.also.Write(p)
	}
	return len(p), nil
}

func (r *router) to(w io.Writer) {
	r.mu.Lock()
	r.w = w
	r.mu.Unlock()
}

// sessionErr is why an open or a session's command is refused.
type sessionErr struct{ category, message string }

// openShell starts a session's shell; its opened reply is the caller's.
func (s *Server) openShell(req *protocol.Execute, shellKind string, user *env.User, log zerolog.Logger) (*shell, *sessionErr) {
	// The session counts from now on, starting or not, so that no two
	// opens pass --max-sessions; it is named once it runs (shellNamed).
	sh := &shell{kind: shellKind, began: time.Now(), msgs: make(chan statusMsg, 8), cmds: make(chan *command), up: make(chan struct{}),
		touched: make(chan struct{}, 1)}
	s.mu.Lock()
	if len(s.shells) >= s.cfg.MaxSessions {
		n := len(s.shells)
		s.mu.Unlock()
		return nil, &sessionErr{protocol.CatBusy, fmt.Sprintf("open: %d sessions are open, the most --max-sessions allows; close one first", n)}
	}
	s.shellSeq++
	sh.name = "s-" + strconv.FormatUint(s.shellSeq, 10)
	name := sh.name
	if s.shells == nil {
		s.shells = map[string]*shell{}
	}
	s.shells[name] = sh
	s.mu.Unlock()
	if !s.admit() {
		s.dropShell(sh)
		return nil, &sessionErr{protocol.CatShuttingDown, "relayd is shutting down and opens no session"}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.SetsockoptInt(pair[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		if err != nil {
			unix.Close(pair[0])
			unix.Close(pair[1])
		}
	}
	var sc *net.UnixConn
	if err == nil {
		f := os.NewFile(uintptr(pair[0]), "session-status")
		c, cerr := net.FileConn(f)
		f.Close()
		sc, _ = c.(*net.UnixConn)
		if cerr != nil || sc == nil {
			err = fmt.Errorf("status channel: %v", cerr)
			if c != nil {
				c.Close()
			}
			unix.Close(pair[1])
		}
	}
	if err != nil {
		s.ended()
		s.dropShell(sh)
		return nil, &sessionErr{protocol.CatBusy, "open: the session's status channel could not be made: " + err.Error()}
	}
	sh.peer, sh.status = os.NewFile(uintptr(pair[1]), "session-status-shell"), sc
	sh.used.Store(time.Now().UnixNano())
	req.Command = shellKind
	req.Args = nil
	if shellKind == protocol.ShellBash {
		req.Args = []string{"--noprofile", "--norc"}
	}
	req.CaptureStderr, req.OnExit, req.TimeoutMs = req.Pty == nil, protocol.OnExitSettle, 0
	if req.Pty != nil {
		// An interactive shell on the terminal, as a person has it.
		req.Args = append(req.Args, "-i")
		if shellKind == protocol.ShellBash {
			req.Environment["PROMPT_COMMAND"] = shellSetup(true) // run before the first prompt, before anything is typed
		}
		sh.screen = newScreen(s.cfg.SessionBuffer)
		sh.stdout.also = sh.screen
	}
	ex := s.startWith(nil, req, nil, user, log.With().Str("session", name).Logger(), sh)
	select {
	case <-sh.up:
		if shellKind == protocol.ShellBash && req.Pty == nil {
			// Before any command: the shell reads its stdin in order.
			_ = sh.subj.Stdin.SetWriteDeadline(time.Now().Add(s.cfg.TeardownTimeout))
			_, _ = io.WriteString(sh.subj.Stdin, shellSetup(false))
		}
	case <-ex.finished:
		res := <-ex.done
		sh.status.Close()
		detail := res.Detail
		if detail == "" {
			detail = "the shell ended at once"
		}
		return nil, &sessionErr{protocol.CatBadRequest, fmt.Sprintf("open: the shell could not be started (%d): %s", res.ExitCode, detail)}
	}
	return sh, nil
}

// touch records a use of the session (protocol 4.7: a stdin, read,
// resize or execute naming it): its idle time counts from now.
func (sh *shell) touch() {
	sh.used.Store(time.Now().UnixNano())
	select {
	case sh.touched <- struct{}{}:
	default: // one pending is enough: the loop reads the time anew
	}
}

// running reports whether the session's shell has started (subj is set).
func (sh *shell) running() bool {
	select {
	case <-sh.up:
		return true
	default:
		return false
	}
}

// started is called by Server.start once the shell runs.
func (sh *shell) started(subj *exec.Subject) {
	sh.peer.Close()
	sh.subj = subj
	close(sh.up)
}

// closeChannel ends the status channel, once the shell's execution ended.
func (sh *shell) closeChannel() {
	sh.peer.Close()
	sh.status.Close()
	if sh.screen != nil {
		sh.screen.end()
	}
}

// atPrompt reports whether the shell itself is the foreground job of its
// terminal (no program it started reads the keystrokes).
func (sh *shell) atPrompt() bool {
	fg, err := exec.TerminalOf(sh.subj.Stdin).Foreground()
	return err == nil && fg == sh.subj.PID
}

// backAtPrompt is atPrompt, allowing the shell the moment it takes to
// take its terminal back from a job that just ended (as lookAfterExit
// allows a scope): a few microseconds on an idle machine, but bash does
// it only once it is scheduled after reaping the job, which on a loaded
// machine took over 50 ms. Only a program that really holds the
// terminal waits the whole second before its busy reply.
func (sh *shell) backAtPrompt() bool {
	return waitFor(time.Second, sh.atPrompt)
}

// typeable waits, at most limit, until the shell reads its terminal in
// non-canonical mode (readline's), so that a long command line is not
// cut at the line discipline's 4 KiB of canonical input.
func typeable(tty *os.File, limit time.Duration) {
	waitFor(limit, func() bool {
		canonical, err := exec.TerminalOf(tty).Canonical()
		return err == nil && !canonical
	})
}

// waitFor reports whether cond holds within limit. It looks again after
// 20 µs, then twice as long each time up to a millisecond: what it waits
// for (a shell taking its terminal back, readline's mode) is a matter of
// microseconds when the machine is idle, and no event tells it.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := 20 * time.Microsecond; !cond(); pause = min(2*pause, time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// shellNamed returns the open session name, or nil.
func (s *Server) shellNamed(name string) *shell {
	s.mu.Lock()
	sh := s.shells[name]
	s.mu.Unlock()
	if sh == nil || !sh.running() {
		return nil
	}
	return sh
}

// dropShell forgets a session whose shell's execution is ending. A pty
// session's screen stays readable a while (keepScreen).
func (s *Server) dropShell(sh *shell) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.shells, sh.name)
	if sh.screen != nil && sh.running() {
		s.keepScreen(sh.name, sh.screen)
	}
}

// A pty session's screen is read on for screenLinger after its shell
// ended, and the last maxEndedScreens of them are kept: a reader whose
// next read comes after the end (relayctl shell asks again once a read
// answered) still gets the last bytes the shell printed, and learns the
// end from an "ended" terminal rather than a not-found. On a loaded
// machine the shell's exit and the scope's settling took less than that
// reader's round trip, and "exit" after a command lost its output.
const (
	screenLinger    = time.Minute
	maxEndedScreens = 16
)

type endedScreen struct {
	name   string
	screen *screen
	until  time.Time
}

// keepScreen keeps an ended session's screen; s.mu is held. The ring
// is kept whole: the terminal's last bytes may still reach it (screen.go).
func (s *Server) keepScreen(name string, r *screen) {
	r.end()
	s.pruneScreens(time.Now())
	if len(s.endedScreens) >= maxEndedScreens {
		s.endedScreens = s.endedScreens[1:]
	}
	s.endedScreens = append(s.endedScreens, endedScreen{name, r, time.Now().Add(screenLinger)})
}

// pruneScreens forgets the ended screens kept past their time; s.mu is held.
func (s *Server) pruneScreens(now time.Time) {
	i := 0
	for i < len(s.endedScreens) && !now.Before(s.endedScreens[i].until) {
		i++
	}
	s.endedScreens = s.endedScreens[i:]
}

// endedScreenNamed is the kept screen of an ended pty session, or nil.
func (s *Server) endedScreenNamed(name string) *screen {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneScreens(time.Now())
	for _, e := range s.endedScreens {
		if e.name == name {
			return e.screen
		}
	}
	return nil
}

// readStatus reads the status channel until it closes: a message counts
// only when the kernel says the shell (pid) or one of its subshells sent
// it; it is queued for the command's nonce to be checked. Anything else
// is dropped.
func (sh *shell) readStatus(pid int, log zerolog.Logger) {
	buf := make([]byte, 16<<10)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, _, _, err := sh.status.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		from := senderPID(oob[:oobn])
		if !fromShell(from, pid) {
			log.Warn().Int("sender", from).Msg("a status message not from the session's shell was dropped")
			continue
		}
		nonce, code, ok := parseStatus(buf[:n])
		m := statusMsg{nonce: nonce, opened: code == "o", begins: code == "b", keys: code == "k", clean: code == "c", ended: code == "e", from: from}
		c, err := strconv.Atoi(code)
		if !ok || !m.opened && !m.begins && !m.keys && !m.clean && !m.ended && (err != nil || c < 0 || c > 255 || strconv.Itoa(c) != code) {
			ok = false
		}
		if !ok || !sh.expected(nonce, code, buf[:n]) {
			// Not a line's own: a trap a bash guard listed, unless it is
			// an ignored signal's (ignoredTrap).
			if !ignoredTrap(buf[:n]) {
				sh.dirty.Add(1)
			}
			if !ok {
				continue
			}
		}
		m.code = c
		select {
		case sh.msgs <- m:
		default: // nobody waits for so many: dropped
		}
	}
}

// expected reports whether a status message (nonce, word) is one that the
// running command's line or the one before it says: in the form the
// subshells print in POSIX mode ("USR2"), which a bash guard's listing,
// made out of it, never has ("SIGUSR2"), or, for the running line's end
// only, the form of its fallback without POSIX mode. A late word of an
// interrupted line is not taken for a trap of the next one's shell.
func (sh *shell) expected(nonce, word string, b []byte) bool {
	n := sh.expect.Load()
	switch {
	case n == nil:
		return false
	case bytes.HasSuffix(b, []byte("' USR2\n")):
		return nonce == n[0] || nonce == n[1] || nonce == n[2] || nonce == n[3]
	default:
		return word == "e" && nonce == n[1]
	}
}

// fromShell reports whether the kernel's sender of a status message is the
// shell (pid) or one of its subshells (line), as far as /proc shows: a
// subshell that said its word and ended may be gone already.
func fromShell(from, pid int) bool {
	if from == pid {
		return true
	}
	if from <= 0 {
		return false
	}
	for range 8 { // a subshell's subshell (bash forks one for a job on a terminal)
		info, err := exec.ReadStat(from)
		switch {
		case err != nil:
			return true // gone already
		case info.PPID == 0 && (info.State == 'Z' || info.State == 'X'):
			// Being reaped: the kernel shows a task whose pid is
			// already released with parent 0. It is gone, as above.
			return true
		case info.PPID == pid:
			return true
		case info.PPID <= 1:
			return false
		}
		from = info.PPID
	}
	return false
}

// senderPID is the pid of SCM_CREDENTIALS in oob, or -1.
func senderPID(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil {
			return int(cred.Pid)
		}
	}
	return -1
}

// serveShell is awaitEnd for a session's shell: it runs commands until
// the shell exits, or the session is stopped (close, the idle timeout,
// shutdown, a lost shim). Its results mean what awaitEnd's do.
func (s *Server) serveShell(ex *execution, subj *exec.Subject) (exec.Status, bool, string) {
	sh := ex.shell
	go sh.readStatus(subj.PID, ex.log)
	if sh.screen != nil {
		// Readers learn the end as soon as the shell is gone or going,
		// not once the rest of its scope is settled.
		defer func() {
			subj.Flush(cutLimit)
			sh.screen.end()
		}()
	}
	idle := time.NewTimer(s.cfg.SessionIdle)
	defer idle.Stop()
	var reason string
	for reason == "" {
		select {
		case st := <-subj.Exited():
			return st, true, ""
		case <-subj.Lost():
			reason = "shim lost"
		case reason = <-ex.stopCh:
		case <-s.stopping:
			reason = "shutdown"
		case <-sh.touched:
			idle.Reset(time.Until(time.Unix(0, sh.used.Load()).Add(s.cfg.SessionIdle)))
		case <-idle.C:
			if rest := time.Until(time.Unix(0, sh.used.Load()).Add(s.cfg.SessionIdle)); rest > 0 {
				idle.Reset(rest) // used meanwhile
				continue
			}
			reason = "--session-idle-timeout"
		case c := <-sh.cmds:
			res, st, exited, why := s.runCommand(sh, subj, c)
			sh.touch()
			c.reply <- res
			if exited {
				return st, true, ""
			}
			reason = why
			idle.Reset(s.cfg.SessionIdle)
		}
	}
	ex.log.Info().Str("reason", reason).Msg("closing session")
	subj.Sync()
	select {
	case st := <-subj.Exited():
		return st, true, ""
	default:
		return exec.Status{}, false, reason
	}
}

// untrusted is the error of a bash session's command whose guard did not
// pass (line): the status that came is not taken.
const untrusted = "execute: this session's shell holds something an earlier command left that could fake a command's status " +
	"(a trap, a function named eval, functrace, errtrace or xtrace, a readonly POSIXLY_CORRECT), so the command was not run and has no status; " +
	"undo it in the session, or close it and run checks that must be trusted in a fresh execution"

// awaitEnd waits, at most cutLimit, for the end ("e") of a command's line
// whose status came.
func (sh *shell) awaitEnd(end string) {
	deadline := time.Now().Add(cutLimit)
	t := time.NewTimer(cutLimit)
	defer t.Stop()
	for {
		select {
		case m := <-sh.msgs:
			if m.nonce == end && m.ended {
				subshellGone(m.from, deadline)
				if sh.screen != nil {
					// The subshell was the terminal's foreground job: the
					// reply waits for the shell to take it back, so that
					// the next command finds it at its prompt.
					waitFor(time.Until(deadline), sh.atPrompt)
				}
				return
			}
		case <-t.C:
			return
		}
	}
}

// subshellGone waits, until deadline, for the subshell pid that said a
// line's end to have ended (gone, or a zombie its shell reaps at once).
func subshellGone(pid int, deadline time.Time) {
	exec.WaitGone(pid, deadline)
}

// noStatus is the error of a command whose line ended without a status:
// the command itself left a trap or option that refused the subshell
// that says it (line).
const noStatus = "execute: the command's line ended without its status: the command left the shell in a state (functrace, errtrace, xtrace, " +
	"a readonly POSIXLY_CORRECT) in which its status cannot be said; undo it in the session"

// newCommandPart is the part of a session's scope that is one command's:
// every member but the shell and what was there when the command began
// (before), and but the descendants of those (the shell's excepted), by
// pid and start time; an exec.Part, so that it is settled, with pidfds,
// as a trial boundary settles what it does not keep (keptout_linux.go).
func newCommandPart(scope exec.Scope, before []exec.Member, shellM exec.Member) *exec.Part {
	kept := make([]exec.Member, 0, len(before))
	for _, m := range before {
		if m.PID != shellM.PID {
			kept = append(kept, m)
		}
	}
	return exec.NewPart(scope, kept, []exec.Member{shellM})
}

// line is the one command the shell reads for req: its script eval'ed
// (as a single-quoted word: what bash reads from a pipe it reads a byte
// per read(2), so the line is kept short) with stdin /dev/null (or its
// input) and descriptor 3 closed; what it says on descriptor 3 comes from
// subshells built so that nothing an earlier command left in the shell
// (a function, an alias, a trap, an option, a readonly variable) runs in
// them or can fake them (docs/protocol.md, 4.7 "Whose status"):
//
//   - bash first checks the shell (guard), in one subshell: in POSIX
//     mode, where the special builtins are found before any function
//     (bash's enable, which could disable them, is itself disabled when
//     the session opens: shellSetup), it removes any function named trap
//     or read, leaves POSIX mode to list the shell's traps (trap -p then
//     lists only those set) for relayd, and, back in POSIX mode and with
//     no function named eval, says "<nonce> c" and waits for relayd's
//     one-byte verdict: "0" when nothing but the running command's own
//     messages and ignored signals' lines came before (readStatus), and
//     it exits with it. The script runs only on "0"; a status without
//     "c" is no status (cmdRun.onMessage).
//   - the status, "<nonce> <status>", and then the line's end, "<end> e",
//     come from one subshell forked right after the script, which has its
//     $? and runs no name an earlier command can define: in POSIX mode it
//     sets each message as a trap's text and prints it with trap -p. Only
//     when it could not (functrace, errtrace, a readonly POSIXLY_CORRECT
//     the script left) does endLine's subshell say the end alone.
//   - with fifo (its input and stdin, fifo_linux.go), "<nonce> o" once the
//     shell opened it, so that relayd ends it only once it has.
//   - on a pty, "<nonce> b" when the script begins (what the terminal
//     showed before is the typed line's echo; with bash the guard's "c"
//     is it, a subshell less) and "<nonce> k" when it
//     ended; each time the subshell waits for relayd's word on
//     descriptor 3: relayd takes the command's output up to there, stops
//     typing, and drops what the command left unread in the terminal,
//     which the shell would otherwise read as its next command line.
//
// Every word the shell looks up is quoted (no alias applies to it), and
// no reserved word is used ("{" and "if" can be aliases).
func (sh *shell) line(req *protocol.Execute, nonce, end, fifo string) string {
	bash := sh.kind == protocol.ShellBash
	v := "__relayd_" + nonce // a name no earlier command can know, so none made it readonly
	// say is the commands that send msg on descriptor 3, each refused by
	// a redirection whose word is not "0" unless POSIX mode is on.
	posix, pre := `${SHELLOPTS/*posix*/}`, "POSIXLY_CORRECT=y;"
	list := `\trap -p USR2`
	if !bash {
		posix, pre, list = "", "", `\trap` // dash: POSIX always, and no -p
	}
	say := func(msg string) string {
		return fmt.Sprintf(`\trap -- %s USR2 0<&"0%s";%s >&3 0<&"0%s";`, msg, posix, list, posix)
	}
	// sub is a subshell in which nothing an earlier command left runs:
	// with bash, refused before it runs anything when functrace or
	// errtrace would let a DEBUG or ERR trap run in it, or xtrace would
	// expand PS4 (whose command substitutions see the subshell's
	// variables and BASH_COMMAND, and inherit descriptor 3) before each
	// of its commands. dash ends the shell on such a redirection: there
	// the subshell turns xtrace off first (set, a special builtin, is
	// found before functions), keeping $? in $1; keep is how its body
	// takes the status the script left.
	keep := v + "=$?;"
	sub := func(body string) string {
		if !bash {
			return `(\set +x "$?";` + body + ")"
		}
		return "(" + body + `)2>&- 0<&"0${SHELLOPTS#"${SHELLOPTS%%functrace*}"}${SHELLOPTS#"${SHELLOPTS%%errtrace*}"}${-#"${-%%x*}"}"`
	}
	if !bash {
		keep = v + "=$1;"
	}
	// wait reads relayd's word, after read's function (if any) is gone.
	wait := pre + `\unset -f read;\read -r ` + v + "k <&3;"
	eval := `\eval`
	var b strings.Builder
	in := "</dev/null"
	if sh.screen != nil {
		in = "" // on a terminal, the command reads it, as typed
	}
	if req.HasInput && fifo == "" {
		// First, so that the guard's && is the script's: the variable
		// has a nonce of its own (the shell keeps it, PS4 could show it).
		iv := "__relayd_" + newNonce()
		b.WriteString(iv + "=" + shQuote(string(req.Input)) + ";")
		in = `< <(` + pre + `\unset -f printf;printf %s "$` + iv + `")`
	}
	if bash {
		// The guard. g stays "x" (every later step refused) unless each
		// step up to the listing was taken and eval is no function;
		// until POSIX mode is left, unset is the special builtin, and
		// after it trap and read are builtins whatever the mode.
		g, k := v+"g", v+"v"
		gate := `0<&"0` + posix + "$" + g + `"`
		b.WriteString(sub(g + "=x;" + pre + `\unset -f trap read 0<&"0` + posix + `"&&\unset POSIXLY_CORRECT&&\trap -p >&3&&` +
			`POSIXLY_CORRECT=y&&` + g + `=;\readonly -f eval 2>&-&&` + g + "=x;" +
			strings.ReplaceAll(say("'"+nonce+" c'"), `0<&"0`+posix+`"`, gate) +
			`\read -r -n 1 ` + k + " <&3 " + gate + `;\exit "${` + k + `:-1}" ` + gate))
		b.WriteString("&&")
	} else {
		// dash looks special builtins up before functions: unset is one;
		// command, which keeps a syntax error in eval from ending the
		// shell, is not.
		b.WriteString(`\unset -f command;`)
		eval = `\command eval`
	}
	// The status and then the line's end, said with a nonce of its own:
	// a status that did not come (the script itself left a trap or option
	// that refused the subshell) is then an error, not a wait; endLine
	// says it when this subshell could not.
	status := sub(keep+pre+say(`"`+nonce+` $`+v+`"`)+say("'"+end+" e'")) + "||" + sh.endLine(end)
	switch {
	case fifo != "":
		inner := sub(pre+say("'"+nonce+" o'")) + ";" + eval + " " + shQuote(req.Script) + " 3>&-"
		fmt.Fprintf(&b, "%s %s <%s;%s", eval, shQuote(inner), shQuote(fifo), status)
	case sh.screen != nil:
		if !bash { // bash's guard is the script's beginning: relayd takes its "c" as "b"
			b.WriteString(sub(pre+say("'"+nonce+" b'")+wait) + "&&")
		}
		fmt.Fprintf(&b, "%s %s%s 3>&-;", eval, shQuote(req.Script), in)
		b.WriteString(sub(keep+pre+say("'"+nonce+" k'")+wait+say(`"`+nonce+` $`+v+`"`)+say("'"+end+" e'")) + "||" + sh.endLine(end))
	default:
		fmt.Fprintf(&b, "%s %s%s 3>&-;%s", eval, shQuote(req.Script), in, status)
	}
	return b.String()
}

// endLine is a line's end (line): "<end> e", said in POSIX mode, or
// without it (a readonly POSIXLY_CORRECT) with bash. Alone, it asks a
// shell whether it reads its stdin again.
func (sh *shell) endLine(end string) string {
	msg := `\trap -- '` + end + ` e' USR2;`
	if sh.kind != protocol.ShellBash {
		return `(\set +x;` + msg + `\trap >&3)` + "\n"
	}
	return `(POSIXLY_CORRECT=y;` + msg + `\trap -p USR2 >&3 0<&"0${SHELLOPTS/*posix*/}")2>&-||(` + msg + `\trap -p USR2 >&3)2>&-` + "\n"
}

// shellSetup is what a session's shell runs once, when it opens, before
// any command: bash's enable is disabled for good, so that no command can
// disable (enable -n) or replace (enable -f) the special builtins a
// command's status is made with; on a terminal, bind (a key bound with -x
// runs code while relayd types, and sees the typed line) and PS0 (expanded
// before a typed line runs) are taken away as well.
func shellSetup(pty bool) string {
	if pty {
		return "enable -n enable bind;readonly PS0=;unset PROMPT_COMMAND"
	}
	return "enable -n enable\n"
}

// parseStatus reads one status message: a trap -p (or dash's trap)
// listing whose line for USR2 holds "<nonce> <word>".
func parseStatus(b []byte) (nonce, word string, ok bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, found := strings.CutPrefix(line, "trap -- '")
		if !found {
			continue
		}
		text, sig, found := strings.Cut(rest, "' ")
		if !found || (sig != "USR2" && sig != "SIGUSR2") {
			continue
		}
		if nonce, word, ok = strings.Cut(text, " "); ok {
			return nonce, word, true
		}
	}
	return "", "", false
}

// ignoredTrap reports whether a message is one line of trap -p for an
// ignored signal (an empty action, as bash lists SIGPIPE ignored), which
// runs nothing: the only trap a bash guard's listing may show (line).
func ignoredTrap(b []byte) bool {
	name, ok := strings.CutPrefix(string(b), "trap -- '' ")
	name, nl := strings.CutSuffix(name, "\n")
	return ok && nl && name != "" && strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-") == ""
}

// keys writes a pty session's command's stdin into its terminal, as
// keystrokes, each write bounded by --write-timeout. Its end of file
// ends the keystrokes, not the terminal: Close only cuts a write short
// (type Ctrl-D, "\u0004", for a program's end of file).
type keys struct {
	tty     *os.File
	timeout time.Duration
	closed  atomic.Bool
	mu      sync.Mutex // held by a write under way
}

func (k *keys) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_ = k.tty.SetWriteDeadline(time.Now().Add(k.timeout))
	if k.closed.Load() { // after the deadline is set: a Close since cuts the write short
		return 0, os.ErrClosed
	}
	return k.tty.Write(p)
}

// Close cuts a write under way short and returns once it returned:
// nothing is typed after it.
func (k *keys) Close() error {
	k.closed.Store(true)
	err := k.tty.SetWriteDeadline(time.Now())
	k.mu.Lock()
	k.mu.Unlock() //nolint:staticcheck // an empty critical section: the write under way has returned
	return err
}

// dropKeys answers a pty session's "<nonce> k": the command's stdin ends
// (no keystroke is typed from now on), what it left unread in the
// terminal is flushed (TCIFLUSH on a replica opened from the master),
// and the waiting shell is told to go on.
func (sh *shell) dropKeys(ex *execution, subj *exec.Subject) {
	ex.in.stop()
	_ = exec.TerminalOf(subj.Stdin).FlushInput()
	_, _ = sh.status.Write([]byte("\n"))
}

// shQuote quotes s for a POSIX shell: in single quotes, each ' as '\”.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// newNonce is 16 random bytes in hex: a command's status must carry it.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionStatus lists the open sessions for status, in name order.
func (s *Server) sessionStatus(now time.Time) []protocol.SessionStatus {
	s.mu.Lock()
	all := make([]*shell, 0, len(s.shells))
	for _, sh := range s.shells {
		if sh.running() {
			all = append(all, sh)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *shell) int { return compareIDs(a.name, b.name) })
	list := make([]protocol.SessionStatus, 0, len(all))
	for _, sh := range all {
		list = append(list, protocol.SessionStatus{Session: sh.name, Shell: sh.kind, PID: sh.subj.PID, User: runsAs(sh.ex),
			Busy: sh.busy.Load(), IdleMs: now.Sub(time.Unix(0, sh.used.Load())).Milliseconds(), StartedMs: now.Sub(sh.began).Milliseconds()})
	}
	return list
}

// open answers an open request (protocol 4.7): the shell starts, and the
// reply names the session.
func (cn *conn) open(msg *protocol.Message, ignored []string) {
	req, perr := msg.OpenSession()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	shellKind := req.Command
	user, detail := cn.srv.account(req)
	if detail == "" {
		detail = cn.srv.limits(req)
	}
	if detail != "" {
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, strings.Replace(detail, "execute: ", "open: ", 1))
		return
	}
	sh, serr := cn.srv.openShell(req, shellKind, user, cn.log)
	if serr != nil {
		cn.refuse(msg.ID, ignored, serr.category, serr.message)
		return
	}
	cn.log.Info().Str("session", sh.name).Int("pid", sh.subj.PID).Msg("session opened")
	cn.write(protocol.Opened{Token: cn.token(), Kind: "opened", ID: msg.ID, Session: sh.name, Shell: sh.kind,
		Cwd: env.Cwd(cn.srv.cfg.Workspace, req.Cwd), Ignored: ignored})
}

// closeSession answers a close request: the whole session is settled,
// and closed comes once it is (written from a goroutine of its own, so
// that this connection serves on meanwhile).
func (cn *conn) closeSession(msg *protocol.Message, ignored []string) {
	name, perr := msg.CloseSession()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	sh := cn.srv.shellNamed(name)
	if sh == nil {
		cn.refuse(msg.ID, ignored, protocol.CatNotFound, `close: no open session has that name ("session", from an opened reply)`)
		return
	}
	sh.ex.stop("close")
	id := msg.ID
	go func() {
		<-sh.ex.finished
		res := sh.final
		cn.write(protocol.Closed{Token: cn.token(), Kind: "closed", ID: id, Session: sh.name, Settlement: res.Settlement,
			Scope: res.Scope, Detail: res.Detail, Ignored: ignored, Usage: res.Usage})
	}()
}

// sessionCommand starts an execute of a session (protocol 4.7) as the
// connection's running execution.
func (cn *conn) sessionCommand(msg *protocol.Message, req *protocol.Execute, ignored []string) {
	sh := cn.srv.shellNamed(req.Session)
	switch {
	case sh == nil:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound, `execute: no open session has that name ("session", from an opened reply)`)
		return
	case req.HasInput && sh.screen != nil && sh.kind != protocol.ShellBash:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, `execute: "input" of a pty session's command needs a bash session`)
		return
	case req.HasInput && sh.screen != nil && strings.IndexByte(string(req.Input), 0) >= 0:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, `execute: "input" of a pty session's command cannot hold a NUL byte: the shell passes it as a string`)
		return
	case req.HasInput && req.Stdin && sh.screen != nil:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest,
			`execute: "input" and "stdin" together need a session without a pty: with a pty, "stdin" is keystrokes into the terminal, "input" a string the command reads instead`)
		return
	case sh.screen != nil && !sh.backAtPrompt():
		cn.refuse(msg.ID, ignored, protocol.CatBusy,
			fmt.Sprintf("execute: a program runs in the foreground of session %s's terminal; its command line would be typed into it (read the screen, type to end it)", sh.name))
		return
	case !sh.busy.CompareAndSwap(false, true):
		cn.refuse(msg.ID, ignored, protocol.CatBusy,
			fmt.Sprintf("execute: session %s runs a command; its commands run one at a time", sh.name))
		return
	}
	if !cn.srv.admit() {
		sh.busy.Store(false)
		cn.refuse(msg.ID, ignored, protocol.CatShuttingDown, "relayd is shutting down and starts no new execution")
		return
	}
	sh.touch()
	req.CaptureStderr = sh.screen == nil // with a pty, one stream
	cn.cur, cn.curID, cn.curIgnored = cn.srv.startCommand(cn, sh, req, msg.ID, cn.log), msg.ID, req.Ignored
	cn.paused = cn.cur.in.full()
}

// maxReads bounds the reads that wait at once on one connection, each a
// goroutine for up to a minute (rule 6.11).
const maxReads = 4

// readScreen answers a read of a pty session's terminal; it waits in a
// goroutine of its own, so that the connection serves on meanwhile.
func (cn *conn) readScreen(msg *protocol.Message, ignored []string) {
	rq, perr := msg.ReadSession()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	sh := cn.srv.shellNamed(rq.Session)
	var r *screen
	switch {
	case sh == nil:
		// A session whose shell just ended: its last bytes and the end.
		if r = cn.srv.endedScreenNamed(rq.Session); r == nil {
			cn.refuse(msg.ID, ignored, protocol.CatNotFound, `read: no open session has that name ("session", from an opened reply)`)
			return
		}
	case sh.screen == nil:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, `read: session `+sh.name+` has no terminal: open it with "pty" to read its screen`)
		return
	default:
		r = sh.screen
	}
	if cn.reads.Add(1) > maxReads {
		cn.reads.Add(-1)
		cn.refuse(msg.ID, ignored, protocol.CatBusy, fmt.Sprintf("read: %d reads already wait on this connection; wait for their terminal replies", maxReads))
		return
	}
	id := msg.ID
	if sh != nil {
		sh.touch()
	}
	go func() {
		defer cn.reads.Add(-1)
		data, next, lost, ended := r.read(rq)
		if sh != nil {
			sh.touch() // a read that waited was use all along
		}
		cn.write(protocol.Terminal{Token: cn.token(), Kind: "terminal", ID: id, Session: rq.Session, Data: terminalText(data),
			Next: next, Lost: lost, Ended: ended, Ignored: ignored})
	}()
}

// typeInto types keystrokes into a pty session's terminal (a stdin with
// session), bounded by --write-timeout.
func (cn *conn) typeInto(msg *protocol.Message, ignored []string, c *protocol.StdinChunk) {
	sh := cn.srv.shellNamed(c.Session)
	switch {
	case sh == nil:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound, `stdin: no open session has that name ("session", from an opened reply)`)
		return
	case sh.screen == nil:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, `stdin: session `+sh.name+` has no terminal: give a command's "input" instead`)
		return
	}
	sh.touch()
	if len(c.Data) == 0 {
		return
	}
	_ = sh.subj.Stdin.SetWriteDeadline(time.Now().Add(cn.srv.cfg.WriteTimeout))
	if _, err := sh.subj.Stdin.Write(c.Data); err != nil {
		cn.refuse(msg.ID, ignored, protocol.CatBusy, "stdin: the session's terminal did not take the keystrokes: "+err.Error())
	}
}

// resizeSession resizes a pty session's terminal.
func (cn *conn) resizeSession(msg *protocol.Message, ignored []string, r *protocol.Resize) {
	sh := cn.srv.shellNamed(r.Session)
	switch {
	case sh == nil:
		cn.refuse(msg.ID, ignored, protocol.CatNotFound, `resize: no open session has that name ("session", from an opened reply)`)
	case sh.screen == nil:
		cn.refuse(msg.ID, ignored, protocol.CatBadRequest, `resize: session `+sh.name+` has no terminal`)
	default:
		sh.touch()
		sh.ex.resize(r.Rows, r.Cols)
	}
}

// sessionScopes are the scopes of the open sessions, which a trial
// boundary treats as left scopes (protocol 4.7): their processes are
// survivors, and settling them closes the session.
func (s *Server) sessionScopes() []leftScope {
	s.mu.Lock()
	out := make([]leftScope, 0, len(s.shells))
	for _, sh := range s.shells {
		if sh.running() {
			out = append(out, leftScope{id: sh.ex.id, scope: sh.subj.Scope, shell: sh})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b leftScope) int { return compareIDs(a.id, b.id) })
	return out
}

// closeForBoundary closes the session for a trial boundary that settles
// it whole, and returns the pids of members (what it settled).
func (sh *shell) closeForBoundary(members []exec.Member) []int {
	sh.ex.stop("trial boundary")
	<-sh.ex.finished
	pids := make([]int, 0, len(members))
	for _, m := range members {
		pids = append(pids, m.PID)
	}
	return pids
}
