package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/session"
)

// options are relayd's flags, after parsing and validation.
type options struct {
	listen          string
	connect         string
	connectTimeout  time.Duration
	tokenFile       string
	workspace       string
	instructionFile string
	termGrace       time.Duration
	teardownTimeout time.Duration
	writeTimeout    time.Duration
	authTimeout     time.Duration
	peerTimeout     time.Duration // 0: kernel defaults
	maxConnections  int
	maxLineBytes    byteSize
	maxStdoutBytes  byteSize
	maxStderrBytes  byteSize
	maxStdinBuffer  byteSize      // --max-stdin-buffer: unread input held per execution
	maxSessions     int           // --max-sessions: shell sessions open at once (4.7)
	sessionIdle     time.Duration // --session-idle-timeout: a session unused this long is closed
	sessionBuffer   byteSize      // --session-buffer: a pty session's screen kept for read
	artifactsDir    string
	stateDir        string
	stateDirGiven   bool     // --state-dir or its twin was set: a directory that cannot be used is an error, not a warning
	socket          string   // --socket: the Unix socket relayd bridge reaches (listen mode); "" for none
	socketGiven     bool     // --socket or its twin was set: a socket that cannot be made is an error, not a warning
	artifactLimit   byteSize // --max-artifact-bytes
	maxFileBytes    byteSize // --max-file-bytes: largest file a put or get moves (4.6)
	markBytes       byteSize // --mark-bytes: the kept content of every mark together (4.9)
	artifactsLayout string   // --artifacts-layout: relayd or maka
	dropCaps        capList  // --drop-capabilities: capability numbers, sorted
	requireNetns    string   // --require-netns: an nsfs path or net:[INODE]; "" for none
	scope           string
	cgroupRoot      string
	destroyCommand  string
	subjectUser     string
	allowAnyGroup   bool        // --allow-any-group: a user's :group need not be one of its groups (4.6)
	subjectUmask    umaskValue  // --subject-umask: the subjects' umask
	defaultLimits   limitsValue // --default-limits: limits (4.8) of every execute that names none
	logFormat       string
	logLevel        string
	version         bool
}

// Defaults of protocol section 9.
func defaultOptions() options {
	return options{
		listen:          ":7700",
		connectTimeout:  30 * time.Second,
		termGrace:       2 * time.Second,
		teardownTimeout: 10 * time.Second,
		writeTimeout:    10 * time.Second,
		authTimeout:     10 * time.Second,
		peerTimeout:     30 * time.Second,
		maxConnections:  1024,
		maxLineBytes:    1 << 20,
		maxStdoutBytes:  1 << 20,
		maxStderrBytes:  1 << 20,
		maxStdinBuffer:  4 << 20,
		maxSessions:     64,
		sessionIdle:     24 * time.Hour,
		sessionBuffer:   4 << 20,
		stateDir:        "/run/relayd",
		socket:          "/run/relayd/relayd.sock",
		artifactLimit:   64 << 20,
		maxFileBytes:    1 << 30,
		markBytes:       2 << 30,
		artifactsLayout: "relayd",
		scope:           "auto",
		subjectUmask:    0o022,
		logFormat:       "json",
		logLevel:        "info",
	}
}

// maxPeerTimeout bounds --peer-timeout: a third of it is the keepalive
// interval, which Linux takes up to 32767 s.
const maxPeerTimeout = 24 * time.Hour

// envPrefix names the environment twin of every flag: --term-grace is RELAYD_TERM_GRACE.
const envPrefix = "RELAYD_"

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parseFlags parses args, then fills every flag not given from its
// environment twin, then validates. A flag wins over its twin.
func parseFlags(args []string, getenv func(string) string) (options, *pflag.FlagSet, error) {
	o := defaultOptions()
	fs := pflag.NewFlagSet("relayd", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&o.listen, "listen", o.listen, "address to listen on for controllers (listen mode)")
	fs.StringVar(&o.connect, "connect", o.connect, "controller address to dial instead of listening (dial-out mode), HOST:PORT")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", o.connectTimeout, "how long dial-out keeps retrying")
	fs.StringVar(&o.tokenFile, "token-file", o.tokenFile, "file holding the token (else the environment variable RELAYD_TOKEN)")
	fs.StringVar(&o.workspace, "workspace", o.workspace, "default working directory of executions (default: relayd's working directory)")
	fs.StringVar(&o.instructionFile, "instruction-file", o.instructionFile, "file whose text is sent as ready.instruction")
	fs.DurationVar(&o.termGrace, "term-grace", o.termGrace, "time from SIGTERM to SIGKILL when settling a scope")
	fs.DurationVar(&o.teardownTimeout, "teardown-timeout", o.teardownTimeout, "bound on a whole settlement, destroy included")
	fs.DurationVar(&o.writeTimeout, "write-timeout", o.writeTimeout, "bound on one write to a peer; a peer that does not read counts as gone")
	fs.DurationVar(&o.authTimeout, "auth-timeout", o.authTimeout, "a connection that has not sent an authenticated message by then is closed")
	fs.DurationVar(&o.peerTimeout, "peer-timeout", o.peerTimeout, "a controller that stops acknowledging for this long (host gone, network cut) counts as gone, and what it runs is settled; 0 leaves the kernel's defaults (minutes)")
	fs.IntVar(&o.maxConnections, "max-connections", o.maxConnections, "most controller connections open at once; one more is answered with a busy error and closed")
	fs.Var(&o.maxLineBytes, "max-line-bytes", "longest accepted message line (e.g. 1MiB, 65536)")
	fs.Var(&o.maxStdoutBytes, "max-stdout-bytes", "raw-mode stdout returned per execution")
	fs.Var(&o.maxStderrBytes, "max-stderr-bytes", "stderr returned per execution that asks for it (captureStderr)")
	fs.IntVar(&o.maxSessions, "max-sessions", o.maxSessions, "shell sessions open at once (open, 4.7); one more open is a busy error")
	fs.DurationVar(&o.sessionIdle, "session-idle-timeout", o.sessionIdle, "a shell session unused this long is closed (settled)")
	fs.Var(&o.sessionBuffer, "session-buffer", "terminal output kept per pty session for read (4.7)")
	fs.Var(&o.maxStdinBuffer, "max-stdin-buffer", "unread input (input, stdin messages) held per execution; past it relayd stops reading that connection until the subject reads")
	fs.StringVar(&o.artifactsDir, "artifacts-dir", o.artifactsDir, "directory for each execution's complete stdout and stderr")
	fs.StringVar(&o.stateDir, "state-dir", o.stateDir, "directory where relayd records its running process-group scopes, so that a relayd started after this one is killed settles what it left running, and keeps its marks (protocol 4.9)")
	fs.StringVar(&o.socket, "socket", o.socket, "Unix socket (mode 0600) relayd also serves in listen mode, for relayd bridge: a controller reaches relayd through any exec channel (docker exec -i C relayd bridge); empty turns it off")
	fs.Var(&o.artifactLimit, "max-artifact-bytes", "most bytes of one stream kept in --artifacts-dir per execution; past it the artifact stops growing and the rest is drained and dropped")
	fs.Var(&o.maxFileBytes, "max-file-bytes", "largest file a put or get moves (e.g. 1GiB)")
	fs.Var(&o.markBytes, "mark-bytes", "most bytes of kept content every mark together holds in --state-dir; a mark that would pass it is refused (e.g. 2GiB)")
	fs.StringVar(&o.artifactsLayout, "artifacts-layout", o.artifactsLayout, "artifact file names: relayd (x-N.stdout.txt per execution) or maka (maka-subject.stdout.txt and maka-subject.stderr.txt, overwritten per execution, as Maka's relay writes them; --artifacts-dir defaults to "+makaArtifactsDir+")")
	fs.Var(&o.dropCaps, "drop-capabilities", "capabilities removed from every subject's sets, comma-separated (e.g. NET_RAW,NET_ADMIN); MAKA_EVAL_EGRESS_REQUIRED=1 makes relayd refuse to start while it holds NET_RAW or NET_ADMIN that this does not drop")
	fs.StringVar(&o.requireNetns, "require-netns", o.requireNetns, "network namespace subjects must run in, an nsfs path (/proc/PID/ns/net, /run/netns/NAME) or net:[INODE]: relayd refuses to start (exit 2) when they would not, and answers 111 for an execution when that changes")
	fs.StringVar(&o.scope, "scope", o.scope, "scope mechanism: auto (cgroup when proven to work, else process-group), cgroup or process-group")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", o.cgroupRoot, "cgroup v2 directory to create execution leaves under (default: relayd's own cgroup)")
	fs.StringVar(&o.destroyCommand, "destroy-command", o.destroyCommand, "command run with /bin/sh -c when a settlement cannot be confirmed (destroy), bounded by --teardown-timeout")
	fs.StringVar(&o.subjectUser, "subject-user", o.subjectUser, "run subjects as this user (name or uid, optionally :group), with its groups; needs relayd to run as root")
	fs.BoolVar(&o.allowAnyGroup, "allow-any-group", o.allowAnyGroup, "let a user's :group (execute, put, get, --subject-user) be a group the user is not a member of; without it, nobody:root is refused")
	fs.Var(&o.subjectUmask, "subject-umask", "the subjects' umask, in octal (Maka's relay runs them with 077)")
	fs.Var(&o.defaultLimits, "default-limits", "limits applied to every execution that names none, e.g. nofile=1024,processes=4096 (nofile, processes, cpuSeconds, fileBytes, stackBytes, addressSpaceBytes; memoryBytes and pids need cgroup controllers)")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "log format: json or console")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "log level: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.SetOutput(io.Discard) // run prints usage for --help; errors are one line
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return o, fs, err
	}
	if fs.NArg() > 0 {
		return o, fs, fmt.Errorf("unexpected argument %q: relayd takes only flags", fs.Arg(0))
	}
	var twinErr error
	fromEnv := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		// --version is an action, not configuration: it has no twin.
		if f.Changed || twinErr != nil || f.Name == "version" {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				twinErr = fmt.Errorf("environment variable %s: %v", name, err)
			}
			fromEnv[f.Name] = true
		}
	})
	if twinErr != nil {
		return o, fs, twinErr
	}
	o.stateDirGiven = fs.Changed("state-dir")
	o.socketGiven = fs.Changed("socket")
	if o.artifactsLayout == "maka" && o.artifactsDir == "" {
		o.artifactsDir = makaArtifactsDir
	}
	err := o.validate()
	var fe *flagError
	if errors.As(err, &fe) && fromEnv[fe.flag] {
		err = fmt.Errorf("environment variable %s: %v", envName(fe.flag), err)
	}
	return o, fs, err
}

func (o options) validate() error {
	switch {
	case o.connectTimeout <= 0:
		return bad("connect-timeout", "--connect-timeout must be positive, got %s", o.connectTimeout)
	case o.termGrace < 0:
		return bad("term-grace", "--term-grace must not be negative, got %s", o.termGrace)
	case o.teardownTimeout <= 0:
		return bad("teardown-timeout", "--teardown-timeout must be positive, got %s", o.teardownTimeout)
	case o.termGrace >= o.teardownTimeout:
		return bad("term-grace", "--term-grace (%s) must be shorter than --teardown-timeout (%s): SIGKILL must come before the deadline", o.termGrace, o.teardownTimeout)
	case o.writeTimeout <= 0:
		return bad("write-timeout", "--write-timeout must be positive, got %s", o.writeTimeout)
	case o.authTimeout <= 0:
		return bad("auth-timeout", "--auth-timeout must be positive, got %s", o.authTimeout)
	case o.peerTimeout < 0:
		return bad("peer-timeout", "--peer-timeout must not be negative, got %s (0 leaves the kernel's defaults)", o.peerTimeout)
	case o.peerTimeout > 0 && o.peerTimeout < time.Second:
		// Keepalive counts whole seconds; a shorter bound would not hold.
		return bad("peer-timeout", "--peer-timeout must be 0 (the kernel's defaults) or at least 1s, got %s: keepalive probes are counted in whole seconds", o.peerTimeout)
	case o.peerTimeout > maxPeerTimeout:
		return bad("peer-timeout", "--peer-timeout must be at most %s, got %s", maxPeerTimeout, o.peerTimeout)
	case o.maxSessions < 1:
		return bad("max-sessions", "--max-sessions must be at least 1, got %d", o.maxSessions)
	case o.sessionIdle <= 0:
		return bad("session-idle-timeout", "--session-idle-timeout must be positive, got %s", o.sessionIdle)
	case o.sessionBuffer < 1 || o.sessionBuffer > 1<<30:
		return bad("session-buffer", "--session-buffer must be from 1 to 1GiB, got %d", o.sessionBuffer)
	case o.maxConnections < 1:
		return bad("max-connections", "--max-connections must be at least 1, got %d", o.maxConnections)
	case o.maxLineBytes > 1<<30:
		return bad("max-line-bytes", "--max-line-bytes must be at most 1GiB, got %d", o.maxLineBytes)
	case o.maxLineBytes < 1024:
		return bad("max-line-bytes", "--max-line-bytes must be at least 1KiB, got %d", o.maxLineBytes)
	case o.maxStdoutBytes < 1:
		return bad("max-stdout-bytes", "--max-stdout-bytes must be at least 1, got %d", o.maxStdoutBytes)
	case o.maxStderrBytes < 1:
		return bad("max-stderr-bytes", "--max-stderr-bytes must be at least 1, got %d", o.maxStderrBytes)
	case o.maxStdinBuffer < 1:
		return bad("max-stdin-buffer", "--max-stdin-buffer must be at least 1, got %d", o.maxStdinBuffer)
	case o.maxStdinBuffer > 1<<30:
		return bad("max-stdin-buffer", "--max-stdin-buffer must be at most 1GiB, got %d", o.maxStdinBuffer)
	case o.stateDir == "":
		return bad("state-dir", "--state-dir must name a directory")
	case o.artifactLimit < 1:
		return bad("max-artifact-bytes", "--max-artifact-bytes must be at least 1, got %d", o.artifactLimit)
	case o.maxFileBytes < 1:
		return bad("max-file-bytes", "--max-file-bytes must be at least 1, got %d", o.maxFileBytes)
	case o.markBytes < 1:
		return bad("mark-bytes", "--mark-bytes must be at least 1, got %d", o.markBytes)
	}
	switch o.artifactsLayout {
	case "relayd", "maka":
	default:
		return bad("artifacts-layout", "--artifacts-layout %q: want relayd or maka", o.artifactsLayout)
	}
	if o.requireNetns != "" {
		if _, err := env.ParseNetns(o.requireNetns); err != nil {
			return bad("require-netns", "--require-netns %v", err)
		}
	}
	switch o.scope {
	case "auto", "process-group", "cgroup":
	default:
		return bad("scope", "--scope %q: want auto, cgroup or process-group", o.scope)
	}
	switch o.logFormat {
	case "json", "console":
	default:
		return bad("log-format", "--log-format %q: want json or console", o.logFormat)
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log-level", "--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return nil
}

// flagError is a validation failure of one flag.
type flagError struct {
	flag string
	msg  string
}

func (e *flagError) Error() string { return e.msg }

func bad(flag, format string, args ...any) error {
	return &flagError{flag: flag, msg: fmt.Sprintf(format, args...)}
}

// makaArtifactsDir is where Maka's relay writes its subject's artifacts, and
// so --artifacts-dir's default with --artifacts-layout maka.
const makaArtifactsDir = "/logs/artifacts"

// capList is --drop-capabilities: capability numbers, from names with or
// without CAP_, in any case (env.ParseCapabilities).
type capList []int

func (c *capList) Type() string { return "capabilities" }

func (c *capList) String() string {
	names := make([]string, len(*c))
	for i, n := range *c {
		names[i] = env.CapabilityName(n)
	}
	return strings.Join(names, ",")
}

func (c *capList) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		*c = nil // none, as an empty twin is
		return nil
	}
	caps, err := env.ParseCapabilities(s)
	if err != nil {
		return err
	}
	*c = caps
	return nil
}

// umaskValue is --subject-umask: a file mode creation mask in octal, 000
// to 777.
type umaskValue uint32

func (u *umaskValue) Type() string { return "octal" }

func (u *umaskValue) String() string { return fmt.Sprintf("%03o", uint32(*u)) }

func (u *umaskValue) Set(s string) error {
	t := strings.TrimSpace(s)
	n, err := strconv.ParseUint(t, 8, 32)
	if t == "" || t[0] == '+' || err != nil || n > 0o777 {
		return fmt.Errorf("%q is not a umask: want octal digits from 000 to 777, e.g. 022 or 077", s)
	}
	*u = umaskValue(n)
	return nil
}

// limitsValue is --default-limits: name=value pairs of protocol 4.8.
type limitsValue struct {
	text   string
	limits map[string]uint64
}

func (l *limitsValue) Type() string   { return "limits" }
func (l *limitsValue) String() string { return l.text }

func (l *limitsValue) Set(s string) error {
	lim, err := session.ParseLimits(s)
	if err != nil {
		return fmt.Errorf("%q is not a list of limits: %v", s, err)
	}
	l.text, l.limits = s, lim
	return nil
}

// byteSize is a flag value in bytes: a number with an optional unit. kB,
// MB and GB are powers of 1000 and KiB, MiB and GiB powers of 1024, as
// everywhere else; a bare K, M or G could mean either and is refused. Units
// are case-insensitive: kb is kB, MIB is MiB.
type byteSize int64

// String writes the size as a person would, in the largest unit that
// holds it exactly (1MiB, 100kB; else bytes), so that --help shows
// "(default 1MiB)" rather than 1048576. Set reads it back.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// sizeUnits lists the units parseByteSize takes, for its errors.
const sizeUnits = "want B, kB, MB or GB for powers of 1000, or KiB, MiB or GiB for powers of 1024, in any case"

func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a size: want a number of bytes, e.g. 65536 or 1MiB", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %v", s, err)
	}
	var mult int64
	unit := strings.TrimSpace(t[i:])
	switch strings.ToLower(unit) {
	case "", "b":
		mult = 1
	case "kb":
		mult = 1000
	case "mb":
		mult = 1000 * 1000
	case "gb":
		mult = 1000 * 1000 * 1000
	case "kib":
		mult = 1 << 10
	case "mib":
		mult = 1 << 20
	case "gib":
		mult = 1 << 30
	case "k", "m", "g":
		u := strings.ToUpper(unit)
		return 0, fmt.Errorf("%q: unit %q could mean %sB or %siB: write one of them (%s)", s, unit, u, u, sizeUnits)
	default:
		return 0, fmt.Errorf("%q: unknown unit %q (%s)", s, unit, sizeUnits)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
