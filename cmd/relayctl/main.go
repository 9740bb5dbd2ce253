// Command relayctl talks to relayd for people: the netcat replacement. It
// runs one command through relayd and exits with the command's status
// (relayctl exec), takes over one that outlived its connection (attach),
// probes it (ready), looks at what runs and what was left without touching
// it (status, survivors), draws the trial boundary (verify), marks the
// files and says what changed since or puts them back (mark, changes,
// restore, unmark: marks.go), or plays the controller for a relayd that
// dials out (accept).
//
// It is a thin shell over package client; main calls run and nothing else
// exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/relayd/relayd/client"
)

// exitFailed is relayctl's own failure (usage, token, connection, a
// protocol error): 125, like timeout(1) and docker run, so that it cannot
// be taken for a subject's status, 124 (framework timeout) or 126/127.
const exitFailed = 125

// version is stamped by the build (make build: -X main.version, as relayd's).
var version = "0.1.0-dev"

const usage = `relayctl talks to relayd (docs/protocol.md).

  relayctl exec [flags] -- COMMAND ARGS...   run COMMAND; print its stdout; exit with its status
                                             (--stream: live; --stderr; --on-exit; --detach)
                                             (--input TEXT, -i: relayctl's stdin to it; --user USER[:GROUP])
                                             (-t: on a terminal of its own, attached to this one)
  relayctl attach [flags] EXECUTION          take over an execution run with --detach whose
                                             relayctl went away; print and exit as exec does
  relayctl ready [flags]                     probe relayd: version, scope mechanism, workspace
  relayctl verify [flags]                    the trial boundary (protocol 4.6): end every execution,
                                             list what they left (--settle-survivors settles it, but
                                             --keep PID and --keep-port PORT; --session: only this
                                             connection, 4.3)
  relayctl status [flags]                    what runs, the shell sessions, what every execution
                                             left (with its ports), the boundaries drawn; touches nothing
  relayctl survivors [flags]                 status's survivors only: what every execution left,
                                             with its ports; touches nothing (no trial boundary)
  relayctl accept --listen ADDR [flags] [-- COMMAND ARGS...]
                                             wait for a relayd that dials out (relayd --connect),
                                             run COMMAND if given, then verify
  relayctl put [flags] LOCAL REMOTE          store LOCAL (- for stdin) at REMOTE, atomically
                                             (--mode 0755, --user, --parents; -r: a directory)
  relayctl get [flags] REMOTE LOCAL          copy REMOTE to LOCAL (- for stdout); --user; -r
  relayctl mark [flags] NAME PATH...         record every entry under PATH... (protocol 4.9): --keep PATH
                                             keeps a subtree's content for restore, --exclude PATH leaves out
  relayctl changes [flags] MARK [PATH...]    what changed since MARK, as git status --short: A, M (with
                                             what differs), D; --json for relayd's reply; touches nothing
  relayctl restore [flags] MARK [PATH...]    put MARK's kept subtrees (or PATH...) back as marked
  relayctl unmark [flags] NAME               free the mark NAME
  relayctl shell [flags]                     a shell session on a terminal (protocol 4.7), attached to
                                             this one; ctrl-] detaches (--detach-key), --session s-N
                                             attaches again
  relayctl --version                         print relayctl's version

relayd is reached at --addr HOST:PORT, or with --over 'docker exec -i C
relayd bridge' (any command that carries the protocol) with no port.
The token comes from --token-file FILE or the environment variable
RELAYD_TOKEN, never from a flag's value. Exit status: the command's own
(124 when relayd ended it at --timeout); 125 when relayctl itself failed.
`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// options are relayctl's flags; each has a comment in its flag's help.
type options struct {
	addr            string
	over            string // --over: a command that carries the protocol (relayd bridge through an exec channel)
	listen          string
	tokenFile       string
	timeout         time.Duration
	teardownTimeout time.Duration
	acceptTimeout   time.Duration
	env             []string
	cwd             string
	json            bool
	stream          bool          // exec, accept, attach: print output as it arrives
	stderr          bool          // exec, accept: captureStderr, printed on relayctl's stderr
	onExit          string        // exec, accept: onExit
	detach          time.Duration // exec, accept: detachMs
	settle          bool          // verify: "survivors":"settle"
	keep            []int         // verify: "keep", by pid (keep.go)
	keepPorts       []int         // verify: "keep", what listens on these TCP ports (keep.go)
	allowNone       bool          // verify: a --keep-port that nothing listens on is no error
	session         bool          // verify: without "all" (protocol 4.3)
	sessionName     string        // shell --session: attach to this session
	detachKey       string        // shell --detach-key
	input           string        // exec, accept: the command's stdin (execute's "input")
	stdin           bool          // exec, accept: relayctl's stdin streamed to the command's, after input
	mode            string        // put: permission bits, octal
	user            string        // exec, accept: run as this user; put, get: with this user's rights
	limits          []string      // exec, accept: NAME=VALUE limits (protocol 4.8)
	usage           bool          // exec, accept, attach: print what the command used
	parents         bool          // put: make missing directories
	recursive       bool          // put, get: a directory, as a tar archive
	links           string        // put, get -r: "keep", every symbolic link as it is
	tty             bool          // exec: on a pty attached to relayctl's terminal (tty.go)
	term            string        // exec -t: the terminal's type, relayctl's own $TERM
	markKeep        []string      // mark --keep: subtrees whose content is kept
	markExclude     []string      // mark --exclude
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage) // a usage error: on stderr, and a failure
		return exitFailed
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage) // asked for: the answer, on stdout
		return 0
	}
	if args[0] == "--version" || args[0] == "version" {
		fmt.Fprintf(stdout, "relayctl %s (protocol 1)\n", version)
		return 0
	}
	verb := args[0]
	switch verb {
	case "exec", "ready", "verify", "accept", "attach", "status", "survivors", "put", "get", "shell",
		"mark", "changes", "restore", "unmark":
	default:
		fmt.Fprintf(stderr, "relayctl: unknown command %q\n\n%s", verb, usage)
		return exitFailed
	}
	o := options{addr: "127.0.0.1:7700"}
	if a := getenv("RELAYCTL_ADDR"); a != "" {
		o.addr = a
	}
	fs := pflag.NewFlagSet("relayctl "+verb, pflag.ContinueOnError)
	// The flags' list goes to stdout when --help asks for it, to stderr
	// with a usage error.
	var flagsOut strings.Builder
	fs.SetOutput(&flagsOut)
	fs.SetInterspersed(false) // COMMAND's own flags are not relayctl's
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the token (else the environment variable RELAYD_TOKEN)")
	fs.DurationVar(&o.teardownTimeout, "teardown-timeout", client.DefaultTeardownTimeout, "relayd's --teardown-timeout: how long past --timeout to wait for the reply")
	fs.BoolVar(&o.json, "json", false, "print relayd's whole reply as JSON on stdout instead of the command's stdout and a summary")
	if verb == "accept" {
		fs.StringVar(&o.listen, "listen", "", "address to wait on for a relayd started with --connect, e.g. 127.0.0.1:7701")
		fs.DurationVar(&o.acceptTimeout, "accept-timeout", 60*time.Second, "how long to wait for the relayd")
	} else {
		fs.StringVar(&o.addr, "addr", o.addr, "relayd's address, HOST:PORT (else RELAYCTL_ADDR, else 127.0.0.1:7700)")
		fs.StringVar(&o.over, "over", "", "reach relayd through this command's stdin and stdout instead of --addr, e.g. 'docker exec -i C relayd bridge' (split at spaces, no shell)")
	}
	if verb == "exec" || verb == "accept" {
		fs.DurationVar(&o.timeout, "timeout", 0, "the framework's deadline for the command (timeoutMs): relayd settles it then; 0 for none")
		fs.StringArrayVar(&o.env, "env", nil, "K=V added to the command's environment (repeatable)")
		fs.StringVar(&o.cwd, "cwd", "", "the command's working directory (relative: from relayd's workspace)")
		fs.BoolVar(&o.stderr, "stderr", false, "capture the command's stderr and print it on relayctl's stderr (captureStderr)")
		fs.StringVar(&o.onExit, "on-exit", "", "when the command exits by itself: leave (relayd's default), settle, or settle-on-failure its scope")
		fs.DurationVar(&o.detach, "detach", 0, "let the command outlive relayctl's connection this long (detachMs); relayctl attach takes it over")
		fs.StringVar(&o.input, "input", "", "TEXT written to the command's stdin, which then closes (unless --stdin)")
		fs.BoolVarP(&o.stdin, "stdin", "i", false, "stream relayctl's own stdin to the command's (after --input) until its end, which closes it")
		fs.StringVar(&o.user, "user", "", "run the command as this user: a name or uid, optionally :GROUP (relayd must be root)")
		fs.StringArrayVar(&o.limits, "limit", nil, "NAME=VALUE set on the command (repeatable): nofile, processes, cpuSeconds, fileBytes, stackBytes, addressSpaceBytes; memoryBytes and pids where relayd has those cgroup controllers")
	}
	if verb == "exec" {
		fs.BoolVarP(&o.tty, "tty", "t", false, "run the command on a terminal of its own (pty), attached to this one: raw mode, its size, typed keys (stdin when it is a terminal, or with -i)")
	}
	if verb == "exec" || verb == "accept" || verb == "attach" {
		fs.BoolVar(&o.stream, "stream", false, "print the command's stdout and stderr as they arrive (stream), not at its end")
		fs.BoolVar(&o.usage, "usage", false, "print what the command used (CPU, max RSS, processes, I/O: protocol 4.8) on a line after its summary")
	}
	if verb == "verify" {
		fs.BoolVar(&o.settle, "settle-survivors", false, "settle what the executions left too, except --keep and --keep-port (the trial boundary's \"survivors\":\"settle\")")
		fs.IntSliceVar(&o.keep, "keep", nil, "with --settle-survivors: leave this survivor's pid and its descendants alone, e.g. a service the verifier needs (repeatable)")
		fs.IntSliceVar(&o.keepPorts, "keep-port", nil, "with --settle-survivors: leave alone every survivor listening on this TCP port, and its descendants (repeatable)")
		fs.BoolVar(&o.allowNone, "allow-none", false, "with --keep-port: draw the boundary even when nothing listens on a port")
		fs.BoolVar(&o.session, "session", false, "verify this connection's session only (protocol 4.3); a dial-out relayd's session ends")
	}
	if verb == "shell" {
		fs.StringVar(&o.sessionName, "session", "", "attach to this open session (s-N) instead of opening one")
		fs.StringVar(&o.detachKey, "detach-key", "ctrl-]", "the key that detaches, leaving the session running")
		fs.StringVar(&o.cwd, "cwd", "", "the new session's first directory (relative: from relayd's workspace)")
		fs.StringVar(&o.user, "user", "", "run the new session's shell as this user (relayd must be root)")
	}
	if verb == "put" || verb == "get" {
		fs.StringVar(&o.user, "user", "", "read or write the file with this user's rights (name or uid[:group]; default relayd's --subject-user); a new file is its")
		fs.BoolVarP(&o.recursive, "recursive", "r", false, "copy a directory and what it holds (a tar archive over put and get, packed and unpacked by relayd itself when it serves \"tree\", else by tar on relayd's side)")
		fs.StringVar(&o.links, "links", "", "with -r: keep (every symbolic link kept as it is, whatever its target, as docker cp does); by default a link that leads outside the directory is refused. Nothing is ever written through a link")
	}
	if verb == "put" {
		fs.StringVar(&o.mode, "mode", "", "the file's permission bits, octal (default 0644)")
		fs.BoolVar(&o.parents, "parents", false, "make the missing parent directories of REMOTE")
	}
	if verb == "mark" {
		fs.StringArrayVar(&o.markKeep, "keep", nil, "keep this subtree's content too, so that restore can put it back (repeatable; inside a PATH)")
		fs.StringArrayVar(&o.markExclude, "exclude", nil, "leave this path and what is under it out of the mark (repeatable)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			io.WriteString(stdout, flagsOut.String())
			return 0
		}
		io.WriteString(stderr, flagsOut.String())
		fmt.Fprintf(stderr, "relayctl %s: %v (relayctl %s --help lists the flags)\n", verb, err, verb)
		return exitFailed
	}
	command := fs.Args()
	o.term = getenv("TERM")
	if err := check(verb, o, command); err != nil {
		fmt.Fprintf(stderr, "relayctl %s: %v\n", verb, err)
		return exitFailed
	}
	token, err := loadToken(o.tokenFile, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "relayctl %s: %v\n", verb, err)
		return exitFailed
	}
	// SIGINT or SIGTERM cancels: the connection closes, and relayd settles
	// what it was running for us (transport loss).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	out := printer{stdout: stdout, stderr: stderr, json: o.json, usage: o.usage}
	code, err := dispatch(ctx, verb, o, token, command, out)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted; relayd settles what it ran for this connection (%w)", err)
		}
		fmt.Fprintf(stderr, "relayctl %s: %v\n", verb, err)
		return exitFailed
	}
	return code
}

// check validates the flags against the verb.
func check(verb string, o options, command []string) error {
	if verb == "put" || verb == "get" {
		return checkFiles(verb, o, command)
	}
	if err := checkMarks(verb, command); err != nil {
		return err
	}
	switch {
	case verb == "exec" && len(command) == 0:
		return errors.New("no command: relayctl exec [flags] -- COMMAND ARGS...")
	case (verb == "ready" || verb == "verify" || verb == "status" || verb == "survivors" || verb == "shell") && len(command) > 0:
		return fmt.Errorf("takes no command, got %q", command[0])
	case verb == "attach" && len(command) != 1:
		return errors.New("wants one execution id: relayctl attach [flags] EXECUTION (relayctl exec --detach prints it)")
	case o.onExit != "" && o.onExit != string(client.OnExitLeave) && o.onExit != string(client.OnExitSettle) &&
		o.onExit != string(client.OnExitSettleOnFailure):
		return fmt.Errorf("--on-exit %q: want leave, settle or settle-on-failure", o.onExit)
	case (len(o.keep) > 0 || len(o.keepPorts) > 0) && !o.settle:
		return errors.New("--keep and --keep-port need --settle-survivors: without it nothing is settled")
	case o.allowNone && len(o.keepPorts) == 0:
		return errors.New("--allow-none is for --keep-port")
	case slices.ContainsFunc(o.keep, func(pid int) bool { return pid < 1 }):
		return errors.New("--keep takes pids, 1 or more")
	case slices.ContainsFunc(o.keepPorts, func(p int) bool { return p < 1 || p > 65535 }):
		return errors.New("--keep-port takes TCP ports, 1 to 65535")
	case o.session && o.settle:
		return errors.New("--session and --settle-survivors exclude each other: settling survivors is the trial boundary's")
	case o.tty && (o.stderr || o.json):
		return errors.New("-t shows the terminal as it goes: --stderr (one stream on a terminal) and --json do not go with it")
	case o.detach < 0:
		return fmt.Errorf("--detach must not be negative, got %s", o.detach)
	case verb == "accept" && o.listen == "":
		return errors.New("--listen ADDR is required: the address relayd --connect dials")
	case o.timeout < 0:
		return fmt.Errorf("--timeout must not be negative, got %s", o.timeout)
	case o.teardownTimeout <= 0:
		return fmt.Errorf("--teardown-timeout must be positive, got %s", o.teardownTimeout)
	}
	for _, kv := range o.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
	}
	return nil
}

// loadToken reads the token as relayd does: --token-file (at most 64 KiB,
// white space around it trimmed), else RELAYD_TOKEN.
func loadToken(file string, getenv func(string) string) (string, error) {
	if file == "" {
		if t := strings.TrimSpace(getenv("RELAYD_TOKEN")); t != "" {
			return t, nil
		}
		return "", errors.New("no token: give --token-file FILE or set RELAYD_TOKEN")
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("--token-file: %w", err)
	case len(b) > 64<<10:
		return "", fmt.Errorf("--token-file %s is larger than 64 KiB: not a token file", file)
	case strings.TrimSpace(string(b)) == "":
		return "", fmt.Errorf("--token-file %s is empty", file)
	}
	return strings.TrimSpace(string(b)), nil
}

func dispatch(ctx context.Context, verb string, o options, token string, command []string, out printer) (int, error) {
	// A reply that says relayd ignored fields of relayctl's request (a
	// relayd older than this relayctl) is one line on stderr.
	d := &client.Dialer{TeardownTimeout: o.teardownTimeout, Log: log.New(out.stderr, "relayctl: ", 0)}
	var c *client.Conn
	var err error
	if verb == "accept" {
		c, err = accept(ctx, d, o, token, out)
	} else if o.over != "" {
		c, err = d.DialCommand(ctx, strings.Fields(o.over), token)
	} else {
		c, err = d.Dial(ctx, o.addr, token)
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	switch verb {
	case "ready":
		r, err := c.Ready(ctx)
		if err != nil {
			return 0, err
		}
		out.ready(r)
		return 0, nil
	case "verify":
		if o.session {
			return verify(ctx, c, out)
		}
		vo := client.VerifyOptions{All: true, SettleSurvivors: o.settle}
		if len(o.keep) > 0 || len(o.keepPorts) > 0 {
			if vo.Keep, err = keepList(ctx, c, o, out); err != nil {
				return 0, err
			}
		}
		return boundary(ctx, c, vo, out)
	case "status", "survivors":
		return status(ctx, c, verb, out)
	case "shell":
		return shell(ctx, c, o, out)
	case "mark", "changes", "restore", "unmark":
		return marks(ctx, c, verb, o, command, out) // marks.go
	case "exec":
		if o.tty {
			return executeTTY(ctx, c, o, command, out)
		}
		return execute(ctx, c, o, command, out)
	case "attach":
		return attach(ctx, c, o, command[0], out)
	case "put":
		if o.recursive {
			return putDir(ctx, c, o, command[0], command[1], out)
		}
		return putFile(ctx, c, o, command[0], command[1], out)
	case "get":
		if o.recursive {
			return getDir(ctx, c, o, command[0], command[1], out)
		}
		return getFile(ctx, c, o, command[0], command[1], out)
	}
	// accept: the command if one was given, then verify, which ends a
	// dial-out relayd's session (it exits 0 when every settlement held).
	if len(command) == 0 {
		return verify(ctx, c, out)
	}
	code, err := execute(ctx, c, o, command, out)
	if err != nil {
		return 0, err
	}
	// The command's status was printed: it is relayctl's status even when
	// verify fails (a relayd stopped mid-run ends the session with its
	// reply), with a line saying verify could not be asked.
	if _, err := verify(ctx, c, out); err != nil {
		fmt.Fprintf(out.stderr, "relayctl accept: verify: %v (exiting with the command's status, %d)\n", err, code)
	}
	return code, nil
}

// accept waits for one relayd that dials out with token.
func accept(ctx context.Context, d *client.Dialer, o options, token string, out printer) (*client.Conn, error) {
	ln, err := d.Listen(o.listen)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	fmt.Fprintf(out.stderr, "relayctl: waiting on %s for relayd --connect (up to %s)\n", ln.Addr(), o.acceptTimeout)
	ctx, cancel := context.WithTimeout(ctx, o.acceptTimeout)
	defer cancel()
	c, err := ln.Accept(ctx, token)
	if err != nil {
		return nil, fmt.Errorf("no relayd with this token called %s: %w", ln.Addr(), err)
	}
	if !o.json {
		out.ready(c.Handshake())
	}
	return c, nil
}

func execute(ctx context.Context, c *client.Conn, o options, command []string, out printer) (int, error) {
	req, err := request(o, command, out)
	if err != nil {
		return 0, err
	}
	live := &liveOutput{p: out}
	if o.stream {
		req.Output = live.write
	}
	e, err := c.Execute(ctx, req)
	if err != nil {
		return 0, err
	}
	out.executed(e, live.seen)
	return e.ExitCode, nil
}

// request is the execute that exec's flags ask for.
func request(o options, command []string, out printer) (client.Request, error) {
	req := client.Request{Command: command[0], Args: command[1:], Cwd: o.cwd, Timeout: o.timeout}
	if len(o.env) > 0 {
		req.Environment = map[string]string{}
		for _, kv := range o.env {
			k, v, _ := strings.Cut(kv, "=")
			req.Environment[k] = v
		}
	}
	req.CaptureStderr, req.OnExit, req.Detach = o.stderr, client.OnExit(o.onExit), o.detach
	req.User = o.user
	if len(o.limits) > 0 {
		lim, err := parseLimits(o.limits)
		if err != nil {
			return client.Request{}, err
		}
		req.Limits = lim
	}
	if o.input != "" {
		req.Input = []byte(o.input)
	}
	if o.stdin {
		req.Stdin = os.Stdin
	}
	if o.detach > 0 {
		req.Started = func(x string) {
			if out.json {
				out.asJSON("started", map[string]string{"execution": x})
				return
			}
			fmt.Fprintf(out.stderr, "relayctl: %s runs; should this connection be lost, relayctl attach %s takes it over (within %s)\n", x, x, o.detach)
		}
	}
	return req, nil
}

// attachRetry is how long attach retries not-found: relayd sees that a
// connection was lost a moment after its controller went away (docs/protocol.md
// 4.5, "Detach and attach"), so a quick attach can come before the detach.
const attachRetry = time.Second

func attach(ctx context.Context, c *client.Conn, o options, execution string, out printer) (int, error) {
	live := &liveOutput{p: out}
	var output func(client.Output)
	if o.stream {
		output = live.write
	}
	deadline := time.Now().Add(attachRetry)
	for {
		e, err := c.Attach(ctx, execution, output)
		if errors.Is(err, client.ErrNotFound) && time.Now().Before(deadline) {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ctx.Done():
			}
		}
		if err != nil {
			return 0, err
		}
		out.executed(e, live.seen)
		return e.ExitCode, nil
	}
}

// liveOutput prints streamed output as it arrives: stdout's on stdout,
// stderr's on stderr, a note on stderr for bytes relayd left out because
// relayctl fell behind; with --json, each chunk as an output line.
type liveOutput struct {
	p    printer
	seen bool // an output message came: the reply's stdout and stderr were printed already
}

func (l *liveOutput) write(o client.Output) {
	l.seen = true
	if l.p.json {
		l.p.asJSON("output", o)
		return
	}
	if o.Dropped > 0 {
		fmt.Fprintf(l.p.stderr, "relayctl: %d bytes of %s left out here (relayctl fell behind relayd's stream)\n", o.Dropped, o.Stream)
	}
	w := l.p.stdout
	if o.Stream == "stderr" {
		w = l.p.stderr
	}
	io.WriteString(w, o.Data)
}

func verify(ctx context.Context, c *client.Conn, out printer) (int, error) {
	v, err := c.Verify(ctx)
	if err != nil {
		return 0, err
	}
	out.verified(v)
	if !v.Quiescent {
		return 1, nil
	}
	return 0, nil
}

// boundary is the trial boundary (protocol 4.6); it exits 1 when relayd
// does not find the environment quiescent.
func boundary(ctx context.Context, c *client.Conn, vo client.VerifyOptions, out printer) (int, error) {
	v, err := c.VerifyWith(ctx, vo)
	if err != nil {
		return 0, err
	}
	out.verified(v)
	if !slices.Contains(c.Handshake().Extensions, "trial") {
		fmt.Fprintln(out.stderr, "relayctl: this relayd has no trial boundary (its ready lists no \"trial\"): the reply concerns this connection only")
	}
	if !v.Quiescent {
		return 1, nil
	}
	return 0, nil
}

// status is relayctl status, and relayctl survivors, its view of the
// survivors alone: one status message (protocol 4.6, "Looking without
// touching"), which ends nothing and signals nothing. Drawing a trial
// boundary is relayctl verify's.
func status(ctx context.Context, c *client.Conn, verb string, out printer) (int, error) {
	if !slices.Contains(c.Handshake().Extensions, "status") {
		return 0, errors.New("this relayd has no status message (its ready lists no \"status\"); relayctl verify lists survivors, but draws the trial boundary: it ends every execution")
	}
	st, err := c.Status(ctx)
	if err != nil {
		return 0, err
	}
	if out.json {
		out.asJSON("status", st)
		return 0, nil
	}
	if verb == "status" {
		out.status(st)
		return 0, nil
	}
	out.survivors(st.Survivors, st.SurvivorsOmitted)
	return 0, nil
}

// printer writes replies for people (a summary on stderr) or, with --json,
// as JSON lines on stdout.
type printer struct {
	stdout, stderr io.Writer
	json           bool
	usage          bool // --usage: a line of what the command used
}

func (p printer) asJSON(kind string, v any) {
	b, _ := json.Marshal(v)
	// The kind first, as relayd writes it; the token is never printed.
	fmt.Fprintf(p.stdout, "{\"kind\":%q,%s\n", kind, b[1:])
}

func (p printer) ready(r client.Ready) {
	if p.json {
		p.asJSON("ready", r)
		return
	}
	fmt.Fprintf(p.stderr, "relayd %s, protocol %d, scope %s, workspace %s\n", r.Version, r.Protocol, r.Scope, r.Cwd)
	if r.Instruction != "" {
		fmt.Fprintf(p.stderr, "instruction: %s\n", r.Instruction)
	}
}

// executed prints a reply; streamed says its stdout and stderr were
// printed as they came.
func (p printer) executed(e client.Executed, streamed bool) {
	if p.json {
		p.asJSON("executed", e)
		return
	}
	if !streamed {
		io.WriteString(p.stdout, e.Stdout)
		io.WriteString(p.stderr, e.Stderr)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "relayctl: %s, exit %d", e.Termination, e.ExitCode)
	if e.Signal != "" {
		fmt.Fprintf(&b, " (%s)", e.Signal)
	}
	fmt.Fprintf(&b, ", %s", settlementWords(e.Settlement))
	fmt.Fprintf(&b, ", %s, %s (%s, %s)\n", survivorWords(e.Survivors, e.SurvivorsOmitted), e.Duration(), e.Execution, e.Scope.Mechanism)
	if e.Diagnostic.Category != client.DiagNone {
		fmt.Fprintf(&b, "relayctl: stdout diagnostic %s\n", e.Diagnostic.Category)
	}
	if e.StdoutTruncated {
		b.WriteString("relayctl: stdout was cut at relayd's --max-stdout-bytes\n")
	}
	if e.StderrTruncated {
		b.WriteString("relayctl: stderr was cut at relayd's --max-stderr-bytes\n")
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, "relayctl: %s\n", e.Detail)
	}
	writeUsage(&b, e, p.usage)
	writeSurvivors(&b, e.Survivors)
	io.WriteString(p.stderr, b.String())
}

// writeUsage adds what the execution used (with --usage), and why it
// ended when relayd knows (protocol 4.8), one line each.
func writeUsage(b *strings.Builder, e client.Executed, usage bool) {
	if u := e.Usage; u != nil && usage {
		procs := "processes"
		if u.Processes == 1 {
			procs = "process"
		}
		fmt.Fprintf(b, "relayctl: used %s CPU (%s user, %s system), max RSS %s, %d %s, read %s, wrote %s\n",
			u.CPU(), time.Duration(u.CPUUserMs)*time.Millisecond, time.Duration(u.CPUSystemMs)*time.Millisecond,
			bytesWords(u.MaxRSSBytes), u.Processes, procs, bytesWords(u.ReadBytes), bytesWords(u.WriteBytes))
	}
	switch e.Cause {
	case client.CauseOOM:
		b.WriteString("relayctl: ended by the kernel's OOM killer\n")
	case client.CauseLimit:
		fmt.Fprintf(b, "relayctl: ended by its limit %s\n", e.Limit)
	}
}

// bytesWords writes n bytes as a person reads them.
func bytesWords(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// parseLimits reads --limit NAME=VALUE flags; relayd checks the names.
func parseLimits(list []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, kv := range list {
		for part := range strings.SplitSeq(kv, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			n, err := strconv.ParseUint(val, 10, 64)
			if !ok || name == "" || err != nil {
				return nil, fmt.Errorf("--limit %q: want NAME=VALUE with a whole number, e.g. nofile=64", kv)
			}
			out[name] = n
		}
	}
	return out, nil
}

func (p printer) verified(v client.Verified) {
	if p.json {
		p.asJSON("verified", v)
		return
	}
	var b strings.Builder
	b.WriteString("relayctl: verified")
	if v.Boundary > 0 {
		fmt.Fprintf(&b, " (trial boundary %d)", v.Boundary)
	}
	if v.Quiescent {
		b.WriteString(": quiescent")
	} else {
		b.WriteString(": NOT quiescent (an execution runs, or a settlement was not confirmed)")
	}
	if v.Settled != nil {
		fmt.Fprintf(&b, ", %d settled", len(v.Settled))
	}
	fmt.Fprintf(&b, ", %s\n", survivorWords(v.Survivors, v.SurvivorsOmitted))
	writeSurvivors(&b, v.Survivors)
	io.WriteString(p.stderr, b.String())
}

// status prints a status reply as tables on stdout: what runs, the shell
// sessions, the survivors, and the boundaries drawn.
func (p printer) status(st client.Status) {
	tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTION\tSTATE\tSTARTED\tTIMEOUT LEFT\tUSER\tCOMMAND")
	for _, e := range st.Executions {
		state := "running"
		switch {
		case e.Ended:
			state = "ended, detached"
		case e.Detached:
			state = "detached"
		}
		left := "-"
		if e.TimeoutMs != nil {
			left = (time.Duration(*e.TimeoutMs) * time.Millisecond).Round(time.Millisecond).String()
		}
		user := e.User
		if user == "" {
			user = "-"
		}
		command := strings.Join(append([]string{e.Program}, e.Args...), " ")
		if e.ArgsOmitted > 0 {
			command += fmt.Sprintf(" ... (%d more args)", e.ArgsOmitted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\t%s\n", e.Execution, state, e.Started().Round(time.Millisecond), left, user, command)
	}
	tw.Flush()
	if st.ExecutionsOmitted > 0 {
		fmt.Fprintf(p.stdout, "... and %d more executions\n", st.ExecutionsOmitted)
	}
	if len(st.Executions) == 0 {
		fmt.Fprintln(p.stdout, "(nothing runs)")
	}
	fmt.Fprintf(p.stdout, "\nshell sessions: %d\n\n", len(st.Sessions))
	p.survivors(st.Survivors, st.SurvivorsOmitted)
	fmt.Fprintf(p.stdout, "\ntrial boundaries drawn: %d\n", st.Boundary)
}

// survivors prints survivors as a table on stdout: pid, execution, uid,
// listening ports, command line.
func (p printer) survivors(survivors []client.Survivor, omitted int) {
	tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tEXECUTION\tUID\tLISTENS\tCOMMAND")
	for _, sv := range survivors {
		ports := "-"
		if len(sv.Listens) > 0 {
			ps := make([]string, len(sv.Listens))
			for i, port := range sv.Listens {
				ps[i] = strconv.Itoa(port)
			}
			ports = strings.Join(ps, ",")
		}
		uid := "?"
		if sv.UID >= 0 {
			uid = strconv.Itoa(sv.UID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", sv.PID, sv.Execution, uid, ports, strings.Join(sv.Argv, " "))
	}
	tw.Flush()
	if omitted > 0 {
		fmt.Fprintf(p.stderr, "relayctl: %d more survivors not listed\n", omitted)
	}
}

func settlementWords(s client.Settlement) string {
	switch s {
	case client.SettlementNone:
		return "scope left alone (settlement none)"
	case client.Settled:
		return "scope settled: nothing of it remains"
	case client.Destroyed:
		return "scope DESTROYED: settling was not confirmed; discard the environment"
	case client.Failed:
		return "settlement FAILED: nothing confirmed; discard the environment"
	}
	return "settlement " + string(s)
}

func survivorWords(s []client.Survivor, omitted int) string {
	n := len(s) + omitted
	if n == 1 {
		return "1 survivor"
	}
	return fmt.Sprintf("%d survivors", n)
}

// survivorNotes says what a person judging a survivor wants besides its
// command line: the ports it listens on, its uid, whether argv is only
// its name.
func survivorNotes(sv client.Survivor) string {
	var notes []string
	if sv.Execution != "" {
		notes = append(notes, sv.Execution)
	}
	if sv.ArgvUnavailable {
		notes = append(notes, "command line unreadable, name shown")
	}
	if len(sv.Listens) > 0 {
		ports := make([]string, len(sv.Listens))
		for i, p := range sv.Listens {
			ports[i] = strconv.Itoa(p)
		}
		notes = append(notes, "listens on "+strings.Join(ports, ", "))
	}
	if sv.UID >= 0 {
		notes = append(notes, "uid "+strconv.Itoa(sv.UID))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// writeSurvivors lists the first ten survivors, one a line.
func writeSurvivors(b *strings.Builder, s []client.Survivor) {
	for i, sv := range s {
		if i == 10 {
			fmt.Fprintf(b, "relayctl:   ... and %d more\n", len(s)-10)
			break
		}
		fmt.Fprintf(b, "relayctl:   survivor %d %s%s\n", sv.PID, strings.Join(sv.Argv, " "), survivorNotes(sv))
	}
}
