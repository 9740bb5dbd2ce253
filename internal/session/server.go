// Package session serves controllers: it authenticates them, answers their
// messages, runs one execution at a time per connection, and applies the
// lifecycle rules of protocol section 6 (when to leave a scope alone, when to
// settle it, exactly one reply per execution).
//
// It does not parse the wire format (internal/protocol), start processes
// (internal/exec) or stop them (internal/teardown).
package session

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/marks"
	"github.com/relayd/relayd/internal/protocol"
	"github.com/relayd/relayd/internal/teardown"
)

// Config is everything a Server needs. Token is a secret: it is compared,
// echoed to authenticated peers, and never logged.
type Config struct {
	Token           []byte
	Workspace       string // absolute
	Instruction     string
	Version         string
	TermGrace       time.Duration
	TeardownTimeout time.Duration
	WriteTimeout    time.Duration
	AuthTimeout     time.Duration // listen mode: time to the first authenticated message
	PeerTimeout     time.Duration // bound on noticing a controller that vanished without closing; 0: kernel defaults (peer_linux.go)
	MaxConnections  int           // listen mode: connections served at once
	MaxLineBytes    int
	MaxStdoutBytes  int
	MaxStderrBytes  int                                   // stderr returned with captureStderr (section 4.5)
	ArtifactsDir    string                                // "" for none
	ArtifactLimit   int64                                 // bytes per stream and execution (--max-artifact-bytes); 0: DefaultArtifactLimit
	SubjectUser     *env.User                             // subjects run as this user unless a request names one; nil: as relayd
	AllowAnyGroup   bool                                  // a user's :group need not be one of the user's groups (--allow-any-group)
	MaxStdinBuffer  int                                   // unread input held per execution (--max-stdin-buffer); 0: DefaultMaxStdinBuffer
	MaxFileBytes    int64                                 // largest file a put or get moves (--max-file-bytes, 4.6); 0: DefaultMaxFileBytes
	BaseEnv         []string                              // relayd's environment less RELAYD_*
	Shims           *exec.Shims                           // start every subject (exec.Start)
	NewScope        func(name string) (exec.Scope, error) // name: the execution id
	Mechanism       string
	// DefaultLimits apply to every execute that names no limits
	// (--default-limits, protocol 4.8); nil: none.
	DefaultLimits protocol.Limits
	// CanLimit says why the mechanism cannot set a cgroup limit of 4.8
	// (memoryBytes, pids), or nil when it can; nil CanLimit: it has no
	// cgroup.
	CanLimit func(name string) error
	Destroy  teardown.DestroyOptions // the fallback when a settlement lacks evidence
	Log      zerolog.Logger

	// What a Maka deployment sets (artifacts.go; docs/protocol.md section 9).
	ArtifactsLayout string    // LayoutRelayd (also "") or LayoutMaka
	RequireNetns    env.Netns // the network namespace subjects must run in (--require-netns); zero: none
	Bridge          bool      // the Unix socket of relayd bridge is served: ready lists "bridge" (protocol 4.6)

	// Shell sessions (protocol 4.7, shell.go): at most MaxSessions open
	// (--max-sessions; 0: DefaultMaxSessions), each closed once unused
	// for SessionIdle (--session-idle-timeout; 0: DefaultSessionIdle);
	// SessionBuffer is a pty session's screen kept for read.
	MaxSessions   int
	SessionIdle   time.Duration
	SessionBuffer int

	// Marks is the store of marks (protocol 4.9, marks.go); nil when
	// there is none, and MarksUnavailable says why.
	Marks            *marks.Store
	MarksUnavailable string
}

// Defaults of the session flags (protocol section 9).
const (
	DefaultMaxSessions   = 64
	DefaultSessionIdle   = 24 * time.Hour
	DefaultSessionBuffer = 4 << 20
)

// DefaultMaxStdinBuffer is the default of --max-stdin-buffer (protocol section 9).
const DefaultMaxStdinBuffer = 4 << 20

// DefaultArtifactLimit is the default of --max-artifact-bytes (protocol section 9).
const DefaultArtifactLimit = 64 << 20

// Server serves connections, in listen mode or dial-out mode.
type Server struct {
	cfg         Config
	tokenDigest [sha256.Size]byte // of cfg.Token: what tokenOK compares
	log         zerolog.Logger
	nextID      atomic.Uint64
	idPrefix    string
	starts      atomic.Uint64 // executions whose subject was about to start (usage.go)

	mu         sync.Mutex
	running    int           // executions admitted and not yet ended
	stopping   chan struct{} // closed by Shutdown: stop accepting, settle what runs
	stopped    bool
	drained    chan struct{}   // closed once stopping and nothing runs: connections end
	destroyCtx context.Context // cancelled by Destroy: settle no longer, kill
	destroy    context.CancelFunc
	detached   map[string]*execution // executions waiting for an attach (section 4.5), by name
	live       map[*execution]bool   // executions started and not yet ended, whichever connection (trial.go)
	left       map[exec.Scope]string // scopes of exited subjects with survivors → their execution (trial.go)
	keptUse    []keptUse             // executions with survivors, for their usage (usage.go)
	leftPruned int                   // len(left) after its last pruning

	trialMu    sync.Mutex   // one trial boundary at a time
	boundaries atomic.Int64 // trial boundaries so far, added to under trialMu; status reads it without waiting

	serving     sync.WaitGroup // connections served and detached executions' keepers (detach.go)
	conns       atomic.Int64   // open listen-mode connections
	unconfirmed atomic.Bool    // some settlement was not confirmed
	nsKilledAt  atomic.Int64   // when a destroy last SIGKILLed every process of relayd's PID namespace (unix ns)
	maka        makaFiles      // the maka layout's artifact files (artifacts.go)

	shells   map[string]*shell // open shell sessions by name (shell.go), under mu
	shellSeq uint64            // the last session's number, under mu
	// The screens of pty sessions whose shell ended, oldest first, read
	// on for screenLinger (shell.go, keepScreen), under mu.
	endedScreens []endedScreen
	swept        sync.Once // FIFOs of killed relayds removed (fifo_linux.go)
	runners      *runners  // the executions' goroutines (runners.go)
}

// New returns a Server. It picks the first execution number so that
// artifacts of an earlier relayd in the same directory are never overwritten.
func New(cfg Config) *Server {
	if cfg.ArtifactLimit <= 0 {
		cfg.ArtifactLimit = DefaultArtifactLimit
	}
	if cfg.MaxStdinBuffer <= 0 {
		cfg.MaxStdinBuffer = DefaultMaxStdinBuffer
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionBuffer <= 0 {
		cfg.SessionBuffer = DefaultSessionBuffer
	}
	s := &Server{cfg: cfg, tokenDigest: sha256.Sum256(cfg.Token), log: cfg.Log,
		stopping: make(chan struct{}), drained: make(chan struct{})}
	s.runners = newRunners(s.stopping)
	s.destroyCtx, s.destroy = context.WithCancel(context.Background())
	s.nextID.Store(lastArtifact(cfg.ArtifactsDir))
	// A subject that a destroy of the whole namespace kills was ended by the
	// framework, not by itself (killedByDestroy).
	s.cfg.Destroy.KillingNamespace = func(at time.Time) { s.nsKilledAt.Store(at.UnixNano()) }
	return s
}

// lastArtifact is the highest execution number with an artifact in dir.
func lastArtifact(dir string) uint64 {
	if dir == "" {
		return 0
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var max uint64
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "x-")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(name, ".")
		if n, err := strconv.ParseUint(num, 10, 64); err == nil && n > max {
			max = n
		}
	}
	return max
}

func (s *Server) newExecutionID() string {
	return "x-" + strconv.FormatUint(s.nextID.Add(1), 10)
}

func (s *Server) artifactPath(id, stream string) string {
	return filepath.Join(s.cfg.ArtifactsDir, id+"."+stream+".txt")
}

// Serve accepts controllers on every listener (TCP, and the Unix socket of
// relayd bridge) until Shutdown, then waits for every connection to finish
// (each running execution settled and answered). It returns the first
// listener's failure.
func (s *Server) Serve(lns ...net.Listener) error {
	errs := make([]error, len(lns))
	var loops sync.WaitGroup
	for i, ln := range lns {
		loops.Add(1)
		go func() {
			defer loops.Done()
			if errs[i] = s.accept(ln); errs[i] != nil {
				s.Shutdown() // the others stop too; what runs is settled
			}
		}()
	}
	loops.Wait()
	s.serving.Wait()
	return errors.Join(errs...)
}

// accept serves ln until Shutdown or its failure.
func (s *Server) accept(ln net.Listener) error {
	go func() {
		<-s.stopping
		ln.Close()
	}()
	var err error
	for {
		conn, aerr := ln.Accept()
		if aerr != nil {
			select {
			case <-s.stopping:
			default:
				var ne net.Error
				if errors.As(aerr, &ne) && ne.Timeout() {
					continue
				}
				if isTemporaryAccept(aerr) {
					s.log.Warn().Err(aerr).Msg("accept failed; retrying")
					time.Sleep(50 * time.Millisecond)
					continue
				}
				err = aerr
			}
			break
		}
		if s.cfg.MaxConnections > 0 && s.conns.Load() >= int64(s.cfg.MaxConnections) {
			s.refuse(conn)
			continue
		}
		s.conns.Add(1)
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			defer s.conns.Add(-1)
			s.serveConn(conn, false)
		}()
	}
	return err
}

// refuse answers a connection over --max-connections with a busy error
// and closes it, without blocking the accept loop.
func (s *Server) refuse(c net.Conn) {
	s.log.Warn().Str("peer", c.RemoteAddr().String()).Int("max", s.cfg.MaxConnections).Msg("connection refused: too many connections")
	go func() {
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		msg := fmt.Sprintf(`{"kind":"error","error":{"category":%q,"message":"too many connections: relayd serves at most %d at once (--max-connections); try again later"}}`+"\n",
			protocol.CatBusy, s.cfg.MaxConnections)
		_, _ = io.WriteString(c, msg)
	}()
}

// isTemporaryAccept is true for failures that pass: out of descriptors.
func isTemporaryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// ServeOne serves a single connection, conn, as dial-out mode does. It
// reports whether the connection ended after verify, and whether the
// controller sent anything at all (one that closed before a word may be a
// Listener without room: dial-out calls again).
func (s *Server) ServeOne(conn net.Conn) (verified, heard bool) {
	s.serving.Add(1)
	defer s.serving.Done()
	return s.serveConn(conn, true)
}

// Shutdown stops accepting, settles every running execution and answers its
// controller; Serve returns when all connections are done.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	close(s.stopping)
	if s.running == 0 {
		close(s.drained)
	}
}

// admit counts a new execution in, unless relayd is shutting down.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.running++
	return true
}

// alone reports whether one execution runs, and no scope of an earlier
// one is kept for its survivors: then relayd's own OOM counter can only
// have counted that execution's processes (usage.go).
func (s *Server) alone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running == 1 && len(s.left) == 0
}

// ended counts an execution out once its reply is ready.
func (s *Server) ended() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.stopped && s.running == 0 {
		close(s.drained)
	}
}

// Destroy ends every settlement at once with SIGKILL (a second signal).
func (s *Server) Destroy() {
	s.Shutdown()
	s.destroy()
}

// Wait returns once every connection has ended.
func (s *Server) Wait() { s.serving.Wait() }

// Confirmed reports whether every settlement so far had evidence.
func (s *Server) Confirmed() bool { return !s.unconfirmed.Load() }

// tokenOK compares the SHA-256 digests of t and relayd's token in constant
// time. Comparing the tokens themselves would leak the token's length:
// subtle.ConstantTimeCompare returns at once when the lengths differ, so a
// peer could time guesses of every length and find the one that takes
// longer. A digest has one length whatever the token's, and hashing t takes
// a time that depends only on t, which the peer already knows.
func (s *Server) tokenOK(t string) bool {
	d := sha256.Sum256([]byte(t))
	return subtle.ConstantTimeCompare(d[:], s.tokenDigest[:]) == 1
}
