// Command relayd runs AI-agent subjects for a host-side controller inside
// an evaluation container: it speaks the newline-delimited JSON protocol of
// docs/protocol.md over TCP, runs each command in a tracked scope, and
// settles that scope when the framework's time is up.
//
// main calls run and nothing else exits. Where to look:
//
//	main.go          run: startup in order, the token (loadToken, warnShortToken,
//	                 checkTokenFile), the logger, SIGTERM/SIGINT shutdown,
//	                 dial-out (dialOut, dial) and the exit statuses
//	flags.go         every flag, its RELAYD_* twin, defaults, validation
//	signals.go       rule 6.8: every other catchable signal is logged and
//	                 shrugged off (sigcount_*.go: those Go cannot deliver)
//	scope.go         choosing the scope mechanism; the destroy command
//	isolation.go     refusing to start outside --require-netns, or holding
//	                 NET_RAW under Maka's egress rule; --artifacts-dir checks
//	leftovers.go     settling what a dead relayd left (rule 6.10), with
//	state.go         the --state-dir records of running scopes
//	marks.go         the store of marks in --state-dir (protocol 4.9)
//	profile_*.go     a CPU profile, in a relayd_profile build only
//	term_linux.go    whether the log goes to a terminal (colours)
//	socket_linux.go  the Unix socket relayd bridge reaches (--socket)
//	bridge.go        relayd bridge: stdin and stdout to that socket
//	pipe_linux.go    widening the bridge's stdin and stdout pipes
//	install.go       relayd install: the binary copied out of its image
//	                 (Kubernetes' init container)
//
// Which flags exist and what they default to is `relayd --help` and
// docs/deploy.md, not this comment.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/session"
)

// version is stamped by the build (make build).
var version = "0.1.0-dev"

// Exit statuses, protocol section 2: what the supervisor may do with the
// environment.
const (
	exitOK          = 0 // every settlement confirmed; listen: shut down by a signal; dial-out: ended after verify
	exitUnconfirmed = 1 // some settlement lacked evidence (destroyed or failed): discard the environment
	exitUsage       = 2 // refused to start, or dial-out never reached the controller: nothing ran
	exitUnverified  = 3 // dial-out: the connection ended without verify, every settlement confirmed
)

// exitError carries an exit status to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	// relayd re-executed as an execution's shim (internal/exec/shimproc_linux.go):
	// it serves relayd over its socket and never returns.
	exec.ShimMain(func() { catchUncaught() })
	// Before anything could fork: what relayd's parent left open (a pipe
	// of an entrypoint script, a harness's socket) reaches no shim and no
	// subject (rule 6.13).
	if err := exec.CloseOnExec(); err != nil {
		fmt.Fprintln(os.Stderr, "relayd: cannot mark inherited descriptors close-on-exec: "+err.Error())
		os.Exit(exitUsage)
	}
	if len(os.Args) > 1 && os.Args[1] == "bridge" {
		os.Exit(bridgeMain(os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "install" {
		os.Exit(installMain(os.Args[2:], selfExe, os.Stdout, os.Stderr))
	}
	setProcs(os.Getenv)
	err := run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	code := exitUsage
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			os.Exit(code)
		}
	}
	fmt.Fprintln(os.Stderr, "relayd: "+err.Error())
	os.Exit(code)
}

// setProcs gives relayd's Go runtime half the CPUs it may use (at least
// one), unless GOMAXPROCS says otherwise. relayd's work is short bursts
// between system calls, and the computing is its subjects'; with a P per
// CPU the runtime woke an idle thread for nearly every goroutine it made
// runnable, and those threads, spinning and sleeping, took the CPU an
// execute's own processes wanted: on 2 CPUs, one P cut relayd's CPU per
// execute of /bin/true from 0.39 ms to 0.29 ms and the round trip by 5%
// (docs/performance.md). Only the real binary calls it, not tests of run.
func setProcs(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procsFor(runtime.GOMAXPROCS(0)))
	}
}

// procsFor is relayd's P count where Go's default (the CPUs, or the
// cgroup's CPU limit) is n.
func procsFor(n int) int { return max(1, n/2) }

// maxInstructionBytes bounds --instruction-file.
const maxInstructionBytes = 8 << 20

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, fs, err := parseFlags(args, getenv)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: relayd [flags]\n\nEvery flag has an environment twin: --term-grace is %s.\n\n%s",
			envName("term-grace"), fs.FlagUsages())
		return nil
	}
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("%v (relayd --help lists the flags)", err)}
	}
	if o.version {
		fmt.Fprintf(stdout, "relayd %s (protocol 1)\n", version)
		return nil
	}
	log := newLogger(o, stderr)
	sigCtx, stopShrugging := context.WithCancel(context.Background())
	defer stopShrugging()
	shrugOff(sigCtx, log) // from here on no signal but SIGTERM and SIGINT ends or stops relayd (rule 6.8)
	var subjectUser *env.User
	var subjectCred *syscall.Credential
	if o.subjectUser != "" {
		if subjectUser, err = env.SubjectAccount(o.subjectUser, o.allowAnyGroup); err != nil {
			return &exitError{exitUsage, fmt.Errorf("--subject-user: %v", err)}
		}
		subjectCred = subjectUser.Cred
	}
	token, err := loadToken(o.tokenFile, getenv)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if err := checkTokenFile(o.tokenFile, o.subjectUser, subjectCred, log); err != nil {
		return &exitError{exitUsage, err}
	}
	os.Unsetenv("RELAYD_TOKEN")
	workspace, err := env.Workspace(o.workspace)
	if err != nil {
		return &exitError{exitUsage, dirFlagError("workspace", err)}
	}
	instruction := ""
	if o.instructionFile != "" {
		b, err := readBounded(o.instructionFile, maxInstructionBytes)
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("--instruction-file: %v", err)}
		}
		instruction = string(b)
	}
	netns, err := checkIsolation(o, getenv, log) // isolation.go
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if err := prepareArtifactsDir(o); err != nil {
		return &exitError{exitUsage, err}
	}
	state, stateErr := exec.OpenState(o.stateDir)
	if stateErr != nil && o.stateDirGiven {
		return &exitError{exitUsage, stateDirError(stateErr)}
	}
	markStore, marksWhy := openMarks(o, stateErr, log)
	var ln net.Listener
	if o.connect == "" {
		if ln, err = net.Listen("tcp", o.listen); err != nil {
			return &exitError{exitUsage, fmt.Errorf("--listen %s: %v", o.listen, err)}
		}
		defer ln.Close()
	}
	sock, err := bridgeSocket(o, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if sock != nil {
		defer sock.Close()
	}
	defer startProfile()()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host := env.Probe()
	reaper := exec.NewReaper(ctx)
	if !host.ProcOK {
		return &exitError{exitUsage, errors.New("/proc is not mounted: relayd cannot see the processes of a scope")}
	}
	settleLeftovers(o, state, log)
	shims := exec.NewShims(ctx, reaper, "", o.termGrace, o.teardownTimeout)
	shims.DropCapabilities(o.dropCaps)      // --drop-capabilities, applied by each shim before it forks a subject
	shims.SubjectUmask(int(o.subjectUmask)) // --subject-umask, set by each shim before it forks a subject
	mech, err := chooseScope(ctx, o, shims, host, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer mech.Release()
	canLimit := limiter(mech)
	if err := checkDefaultLimits(o.defaultLimits.limits, mech.Name(), canLimit); err != nil {
		return &exitError{exitUsage, err}
	}
	shims.Warm()
	recordScopes(ctx, o, state, stateErr, mech, host, log)
	if !host.Subreaper {
		log.Warn().Msg("relayd could not become a child subreaper: orphans of subjects may escape a process-group scope")
	}
	// Once every refusal is past, so that a refusal stays one line.
	warnShortToken(token, log)

	srv := session.New(session.Config{
		Token:           token,
		Workspace:       workspace,
		Instruction:     instruction,
		Version:         version,
		TermGrace:       o.termGrace,
		TeardownTimeout: o.teardownTimeout,
		WriteTimeout:    o.writeTimeout,
		AuthTimeout:     o.authTimeout,
		PeerTimeout:     o.peerTimeout,
		MaxConnections:  o.maxConnections,
		MaxLineBytes:    int(o.maxLineBytes),
		MaxStdoutBytes:  int(o.maxStdoutBytes),
		MaxStderrBytes:  int(o.maxStderrBytes),
		ArtifactsDir:    o.artifactsDir,
		ArtifactLimit:   int64(o.artifactLimit),
		MaxFileBytes:    int64(o.maxFileBytes),
		SubjectUser:     subjectUser,
		AllowAnyGroup:   o.allowAnyGroup,
		MaxStdinBuffer:  int(o.maxStdinBuffer),
		MaxSessions:     o.maxSessions,
		SessionIdle:     o.sessionIdle,
		SessionBuffer:   int(o.sessionBuffer),
		BaseEnv:         env.Base(os.Environ()),
		Shims:           shims,
		NewScope:        mech.NewScope,
		Mechanism:       mech.Name(),
		DefaultLimits:   o.defaultLimits.limits,
		CanLimit:        canLimit,
		Destroy:         destroyer(o, reaper, host, log),
		Log:             log,

		ArtifactsLayout: o.artifactsLayout,
		RequireNetns:    netns,
		Bridge:          sock != nil,

		Marks:            markStore,
		MarksUnavailable: marksWhy,
	})

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// Before Release (idle shims live in the cgroup mechanism's daemon
	// leaf), and while SIGTERM is still caught.
	defer shims.Close()
	stopped := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			log.Info().Str("signal", sig.String()).Msg("shutting down: settling running executions")
			srv.Shutdown()
			close(stopped)
		case <-ctx.Done():
			return
		}
		select {
		case sig := <-sigs:
			log.Warn().Str("signal", sig.String()).Msg("second signal: destroying at once")
			srv.Destroy()
		case <-ctx.Done():
		}
	}()

	if o.connect != "" {
		return dialOut(ctx, o, srv, log, stopped)
	}
	log.Info().Str("addr", ln.Addr().String()).Str("version", version).Str("workspace", workspace).
		Str("subjectUser", o.subjectUser).Int("procs", runtime.GOMAXPROCS(0)).Msg("listening")
	lns := []net.Listener{ln}
	if sock != nil {
		lns = append(lns, sock)
		log.Info().Str("socket", o.socket).Msg("serving relayd bridge on the Unix socket")
	}
	if err := srv.Serve(lns...); err != nil {
		log.Error().Err(err).Msg("accept failed")
		return &exitError{exitUnconfirmed, err}
	}
	if !srv.Confirmed() {
		log.Error().Msg("exiting: some settlement could not be confirmed")
		return &exitError{code: exitUnconfirmed}
	}
	log.Info().Msg("exiting: every settlement confirmed")
	return nil
}

// dialOut calls the controller, retrying with backoff, serves that one
// connection, and reports how it ended. While an execution of a lost connection
// waits for an attach (detachMs, protocol section 4.5), it calls the
// controller again, for as long as one is detached.
func dialOut(ctx context.Context, o options, srv *session.Server, log zerolog.Logger, stopped <-chan struct{}) error {
	deadline := time.Now().Add(o.connectTimeout)
	conn, err := dial(ctx, o, log, stopped, deadline, nil)
	if err != nil {
		// A log line like every other (main prints nothing more for an
		// exitError without err): a log collector sees why relayd exits 2,
		// which limit ran out and how long relayd tried.
		ev := log.Error().Err(err)
		var g *dialGiveUp
		if errors.As(err, &g) {
			ev = ev.Str("addr", g.addr).Str("timeout", "--connect-timeout").Dur("connectTimeout", o.connectTimeout).
				Dur("tried", g.tried).Int("attempts", g.attempts)
		}
		ev.Msg("exiting: no session with the controller, nothing ran")
		return &exitError{code: exitUsage}
	}
	log.Info().Str("addr", o.connect).Str("version", version).Msg("connected to controller")
	verified, heard := srv.ServeOne(conn)
	// A controller that closed before a word (a Listener without room for
	// one more handshake, a proxy that accepted before its backend was up)
	// is called again within --connect-timeout: nothing ran.
	for backoff := 50 * time.Millisecond; !verified && !heard && !srv.HasDetached() && time.Now().Before(deadline); backoff = min(2*backoff, 2*time.Second) {
		log.Warn().Str("addr", o.connect).Dur("retryIn", backoff).Msg("the controller closed the connection before a word; calling it again")
		select {
		case <-time.After(backoff):
		case <-stopped:
			return &exitError{code: exitUnverified}
		}
		if conn, err = dial(ctx, o, log, stopped, deadline, nil); err != nil {
			log.Warn().Err(err).Msg("the controller did not answer again")
			break
		}
		log.Info().Str("addr", o.connect).Msg("connected to controller again")
		verified, heard = srv.ServeOne(conn)
	}
	for !verified && srv.HasDetached() {
		log.Info().Str("addr", o.connect).Msg("session lost with an execution detached; calling the controller again")
		conn, err := dial(ctx, o, log, stopped, time.Time{}, srv.HasDetached)
		if err != nil {
			log.Warn().Err(err).Msg("no controller came back for the detached executions")
			break
		}
		log.Info().Str("addr", o.connect).Msg("connected to controller again")
		verified, _ = srv.ServeOne(conn)
	}
	srv.Wait() // detached executions nobody took are settled first
	switch {
	case !srv.Confirmed():
		log.Error().Msg("exiting: some settlement could not be confirmed")
		return &exitError{code: exitUnconfirmed}
	case !verified:
		log.Warn().Msg("exiting: the session ended before verify; every settlement confirmed")
		return &exitError{code: exitUnverified}
	}
	log.Info().Msg("exiting: session verified")
	return nil
}

// dialGiveUp is why dial stopped calling the controller: which limit ran
// out, how long and how many times it tried, and the last failure.
type dialGiveUp struct {
	addr     string
	limit    string // what ran out, for people
	tried    time.Duration
	attempts int
	last     error
}

func (e *dialGiveUp) Error() string {
	return fmt.Sprintf("--connect %s: no controller answered within %s (tried %d times over %s; last: %v)",
		e.addr, e.limit, e.attempts, e.tried.Round(time.Millisecond), e.last)
}

func (e *dialGiveUp) Unwrap() error { return e.last }

// dial calls the controller with backoff until deadline (when not zero)
// or, when while is set, for as long as it reports true.
func dial(ctx context.Context, o options, log zerolog.Logger, stopped <-chan struct{}, deadline time.Time, while func() bool) (net.Conn, error) {
	backoff := 50 * time.Millisecond
	began, attempts := time.Now(), 0
	for {
		d := net.Dialer{Timeout: 2 * time.Second}
		if !deadline.IsZero() {
			d.Timeout = time.Until(deadline)
		}
		c, err := d.DialContext(ctx, "tcp", o.connect)
		attempts++
		if err == nil {
			return c, nil
		}
		if !deadline.IsZero() && time.Now().Add(backoff).After(deadline) {
			// A controller that launches relayd and only then listens
			// must do so within --connect-timeout (docs/deploy.md).
			return nil, &dialGiveUp{addr: o.connect, attempts: attempts, tried: time.Since(began), last: err,
				limit: fmt.Sprintf("--connect-timeout %s: a controller must accept while relayd starts, or --connect-timeout must exceed the time it takes to launch relayd", o.connectTimeout)}
		}
		log.Debug().Err(err).Dur("retryIn", backoff).Msg("controller not reachable yet")
		select {
		case <-time.After(backoff):
		case <-stopped:
			return nil, errors.New("shut down before reaching the controller: nothing ran")
		}
		if while != nil && !while() {
			return nil, &dialGiveUp{addr: o.connect, attempts: attempts, tried: time.Since(began), last: err,
				limit: "the time an execution was detached (its detachMs)"}
		}
		limit := 2 * time.Second
		if while != nil {
			limit = 250 * time.Millisecond // a detached execution's time runs
		}
		backoff = min(backoff*2, limit)
	}
}

// bridgeSocket listens on --socket in listen mode (dial-out has its one
// controller). A default socket that cannot be made (relayd not root, a
// read-only /run, another relayd on it) is a warning: the TCP listener is
// what most deployments use. A --socket that was asked for is an error.
func bridgeSocket(o options, log zerolog.Logger) (net.Listener, error) {
	if o.connect != "" || o.socket == "" {
		return nil, nil
	}
	sock, err := listenSocket(o.socket)
	switch {
	case err == nil:
		return sock, nil
	case o.socketGiven:
		return nil, fmt.Errorf("--socket %s: %v", o.socket, err)
	}
	log.Warn().Err(err).Str("socket", o.socket).Msg("not serving relayd bridge: the Unix socket cannot be made (--socket PATH picks another, --socket= turns it off)")
	return nil, nil
}

// loadToken reads the token from file, else from RELAYD_TOKEN. Surrounding
// white space (a trailing newline) is not part of it.
func loadToken(file string, getenv func(string) string) ([]byte, error) {
	if file != "" {
		b, err := readBounded(file, 64<<10)
		if errors.Is(err, fs.ErrPermission) {
			// Most often a container's non-root user and a file mounted
			// with the host's owner and mode.
			return nil, fmt.Errorf("--token-file: %v: relayd runs as uid %d: make the file that user's, mode 0400 (a bind mount or compose file secret keeps the host file's owner and mode)", err, os.Geteuid())
		}
		if err != nil {
			return nil, fmt.Errorf("--token-file: %v", err)
		}
		t := bytes.TrimSpace(b)
		if len(t) == 0 {
			return nil, fmt.Errorf("--token-file %s is empty: relayd refuses to run without a token", file)
		}
		return t, nil
	}
	t := bytes.TrimSpace([]byte(getenv("RELAYD_TOKEN")))
	if len(t) == 0 {
		return nil, errors.New("no token: give --token-file FILE or set RELAYD_TOKEN; relayd refuses to run without one")
	}
	return t, nil
}

// minTokenBytes is the length below which a token earns a warning at
// startup: 16 bytes, the 128 bits of `openssl rand -hex 16`'s randomness
// when every byte is random.
const minTokenBytes = 16

// warnShortToken warns, without refusing, about a token shorter than
// minTokenBytes: a token as weak as "abc" is a guess away from running
// anything in the environment. The warning names neither the token nor
// its length.
func warnShortToken(token []byte, log zerolog.Logger) {
	if len(token) < minTokenBytes {
		log.Warn().Int("minBytes", minTokenBytes).
			Msg("the token is shorter than 16 bytes: anyone who can reach relayd could guess it; use a random one, e.g. openssl rand -hex 16")
	}
}

// checkTokenFile applies protocol section 9's token-file rule. With
// --subject-user (name, resolved to subject), relayd refuses a file that
// user could read or write (env.FileAccess says what is checked: the
// file's mode bits for the user's class, its group and the user's
// supplementary groups included, and whether the user can search every
// directory down to it). Without it, subjects run as relayd's user and can
// read whatever relayd reads, so a file that other users can read only
// earns a warning: a Kubernetes or Docker secret is 0644 or 0444 by
// default. A file that every user can write is refused either way: any
// local user could have chosen the token before relayd read it.
func checkTokenFile(file, name string, subject *syscall.Credential, log zerolog.Logger) error {
	if file == "" {
		return nil
	}
	info, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("--token-file: %v", err)
	}
	perm := info.Mode().Perm()
	if perm&0o002 != 0 {
		return fmt.Errorf("--token-file %s can be written by every user (mode %04o): make it writable by relayd's user only, e.g. chmod 600 %s", file, perm, file)
	}
	if subject != nil {
		a, err := env.FileAccess(file, subject)
		if err != nil {
			return fmt.Errorf("--token-file: %v", err)
		}
		if a.Read || a.Write {
			what := "read"
			if !a.Read {
				what = "write"
			}
			return fmt.Errorf("--token-file %s: --subject-user %s could %s it (%s): make it readable by relayd's user only (e.g. chmod 600 %s, owned by relayd's user), or keep it in a directory that user cannot enter", file, name, what, a.Why, file)
		}
		return nil
	}
	if perm&0o044 != 0 {
		log.Warn().Str("tokenFile", file).Str("mode", fmt.Sprintf("%04o", perm)).
			Msg("the token file is readable by other users; subjects run as relayd's user and can read it in any case: chmod 600 it, or run subjects as another user with --subject-user")
	}
	return nil
}

// dirFlagError is the one line for a directory flag that names no usable
// directory: "--workspace /nope: no such directory (create it, ...)". err
// is env.CheckDir's, which names the path and what is wrong.
func dirFlagError(flag string, err error) error {
	hint := "point --" + flag + " at a directory relayd can reach"
	switch {
	case errors.Is(err, fs.ErrNotExist):
		hint = "create it, or point --" + flag + " at an existing directory"
	case errors.Is(err, syscall.ENOTDIR):
		hint = "point --" + flag + " at a directory"
	}
	if !errors.Is(err, env.ErrBadDir) {
		return fmt.Errorf("--%s: %v", flag, err) // not CheckDir's: the working directory is gone
	}
	return fmt.Errorf("--%s %v (%s)", flag, err, hint)
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// newLogger builds relayd's one logger. Console logs are coloured only on a
// terminal: in a file, a pipe or a log collector the codes are noise.
func newLogger(o options, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(o.logLevel)
	if o.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
