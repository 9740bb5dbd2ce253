package client

import (
	"encoding/json"
	"io"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// Termination says how an execution ended (protocol section 4.2).
type Termination string

const (
	// Exited: the subject ended by itself, or never started.
	Exited Termination = protocol.Exited
	// FrameworkTimeout: the framework ended it (its Timeout, Verify,
	// transport loss, relayd's shutdown); ExitCode is then 124.
	FrameworkTimeout Termination = protocol.FrameworkTimeout
)

// Settlement says what relayd did to an execution's scope.
type Settlement string

const (
	// SettlementNone: the scope was left alone.
	SettlementNone Settlement = protocol.SettleNone
	// Settled: the scope was stopped, with evidence that nothing of it remains.
	Settled Settlement = protocol.SettleSettled
	// Destroyed: settling could not be confirmed and destroy ran.
	Destroyed Settlement = protocol.SettleDestroyed
	// Failed: nothing could be confirmed.
	Failed Settlement = protocol.SettleFailed
)

// Trustworthy reports whether the environment can still be used after this
// settlement: true for SettlementNone and Settled. After Destroyed or Failed
// a controller should discard the environment (protocol section 8).
func (s Settlement) Trustworthy() bool {
	return s == SettlementNone || s == Settled
}

// Exit codes relayd reports besides a subject's own status (and 128+S for a
// signal S relayd did not send).
const (
	ExitFramework        = protocol.ExitFramework        // 124: FrameworkTimeout
	ExitScopeUnavailable = protocol.ExitScopeUnavailable // 111: nothing ran
	ExitNotFound         = protocol.ExitNotFound         // 127: program not found
	ExitNotExecutable    = protocol.ExitNotExecutable    // 126: not executable, or bad cwd
)

// Diagnostic categories of an executed reply (protocol sections 4.2 and 5).
const (
	DiagNone             = protocol.DiagNone
	DiagOversize         = protocol.DiagOversize
	DiagMissing          = protocol.DiagMissing
	DiagAmbiguous        = protocol.DiagAmbiguous
	DiagInvalid          = protocol.DiagInvalid
	DiagUnstructured     = protocol.DiagUnstructured
	DiagScopeUnavailable = protocol.DiagScopeUnavailable
)

// Diagnostic is what relayd says about a subject's stdout: Category is one
// of the Diag constants; Bytes and SHA256 describe the carrier when relayd
// counted it (Counted).
type Diagnostic struct {
	Category string `json:"category"`
	Bytes    *int64 `json:"bytes,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
}

// Counted reports whether the diagnostic carries bytes and sha256.
func (d Diagnostic) Counted() bool { return d.Bytes != nil }

// Survivor is a process of a scope still alive after its subject exited,
// with what a harness needs to judge it (protocol 4.6).
type Survivor struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
	// Execution names the execution whose scope the process is of.
	Execution string `json:"execution,omitempty"`
	// ArgvUnavailable: relayd could not read the command line (a zombie, a
	// process in the middle of exec); Argv holds the process's name from
	// the kernel instead, or nothing.
	ArgvUnavailable bool  `json:"argvUnavailable,omitempty"`
	UID             int   `json:"uid"`     // real uid; -1 when relayd did not say (an older relayd, or the process ended)
	Listens         []int `json:"listens"` // local TCP ports it listens on, ascending
	Start           int64 `json:"start"`   // start time, milliseconds since the Unix epoch; 0 when unknown
	Session         int   `json:"session"` // its POSIX session's id (setsid); 0 when unknown
}

// UnmarshalJSON reads a survivor; a UID relayd did not send is -1, not
// root's 0.
func (s *Survivor) UnmarshalJSON(b []byte) error {
	type plain Survivor
	p := plain{UID: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Survivor(p)
	return nil
}

// Kept is the survivor as VerifyOptions.Keep names it: its pid and start
// time as relayd reported them.
func (s Survivor) Kept() Kept { return Kept{PID: s.PID, Start: s.Start} }

// Kept names a process that a trial boundary with SettleSurvivors leaves
// alone (protocol 4.6): its pid and start time (Survivor.Start) exactly as
// a survivors list of the same relayd reported them; Survivor.Kept gives
// it. relayd keeps the process only if both match, so that the pid of a
// service that has ended, taken by another process, keeps nothing.
type Kept struct {
	PID   int   `json:"pid"`
	Start int64 `json:"start"`
}

// StartTime is Start as a time; the zero time when unknown.
func (s Survivor) StartTime() time.Time {
	if s.Start <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.Start)
}

// OnExit says what happens to a scope when its subject exits by itself
// (extension, protocol section 4.5). The empty value is relayd's default,
// OnExitLeave.
type OnExit string

const (
	OnExitLeave           OnExit = "leave"
	OnExitSettle          OnExit = "settle"
	OnExitSettleOnFailure OnExit = "settle-on-failure"
)

// Output is one chunk of live output (extension, protocol section 4.5).
type Output struct {
	Execution string `json:"execution"`
	Stream    string `json:"stream"` // "stdout", "stderr", or "pty" for a terminal's (Request.Pty)
	Data      string `json:"data"`
	Dropped   int64  `json:"dropped,omitempty"` // bytes left out since the last chunk
}

// Request is one execute. Only Command is required.
//
// Fields marked as extensions of protocol section 4.5 are sent as written;
// a relayd that does not know them ignores them, and the reply then lacks
// what they ask for.
type Request struct {
	Command     string            // a path, or a name looked up in the subject's PATH; no shell
	Args        []string          // arguments
	Environment map[string]string // variables added to the subject's environment
	Credentials map[string]string // secret variables: never logged or echoed by relayd
	ResultToken string            // 32 lower-case hex digits: turns on the result carrier
	// DiscardStdout drains and drops the subject's stdout (captureStdout
	// false); the zero value returns it.
	DiscardStdout bool
	Cwd           string        // working directory; relative to relayd's workspace
	Timeout       time.Duration // the framework's deadline (timeoutMs, rounded up to a millisecond); 0: none

	// Extensions (protocol section 4.5).
	CaptureStderr bool          // return stderr in Executed.Stderr
	OnExit        OnExit        // "" leaves the choice to relayd (leave)
	Detach        time.Duration // detachMs: the execution may outlive its connection this long
	// Output, when set, asks for live output (stream) and is called, from
	// the connection's reader, for each chunk in the order relayd sent
	// them. It must not block for long: replies wait behind it.
	Output func(Output)
	// Started, when set, is called with relayd's execution id once relayd
	// reports that the subject runs (with Output, Detach, Stdin or Pty only).
	Started func(execution string)

	// Extensions (protocol section 4.6).
	//
	// Input is written to the subject's stdin, which then closes (unless
	// Stdin is set); it goes in the execute line, so --max-line-bytes
	// bounds it. Without Input and Stdin, stdin is /dev/null.
	Input []byte
	// Stdin, when set, is copied to the subject's stdin after Input, as
	// stdin messages, until it returns EOF (or an error), then stdin
	// closes. The subject's reading paces it (relayd holds at most
	// --max-stdin-buffer of it). Once the reply came nothing more is
	// read from it; a Read that is under way then is left to return.
	Stdin io.Reader
	// User runs the subject as this user: a name or uid, optionally
	// ":GROUP" (relayd must be root); "" is relayd's --subject-user.
	User string
	// MaxOutputBytes, when positive, returns at most this much of stdout
	// (raw mode) and of stderr each (within relayd's own limits); a cut
	// sets StdoutTruncated or StderrTruncated. KeepTail keeps the last
	// bytes instead of the first.
	MaxOutputBytes int64
	KeepTail       bool

	// Extensions (protocol section 4.7).
	//
	// Pty, when set, runs the subject on a terminal of its own: its
	// stdin, stdout and stderr, and its controlling terminal. Output
	// chunks then have Stream "pty", Stdout is what the terminal showed,
	// Stdin (and Input) are keystrokes, read and sent as they come
	// rather than in chunks, and Conn.Resize resizes it. CaptureStderr
	// cannot go with it.
	Pty *Pty

	// Extensions (protocol section 4.8).
	//
	// Limits are set on the subject before it starts, by name: nofile,
	// processes, cpuSeconds, fileBytes, stackBytes, addressSpaceBytes
	// (resource limits), memoryBytes and pids (the scope's cgroup, where
	// relayd has those controllers; else a bad-request that says why).
	// nil: relayd's --default-limits.
	Limits map[string]uint64
}

// Pty is the terminal of Request.Pty: its size (1 to 1000 each) and its
// type ("" is relayd's default, xterm-256color), TERM in the subject's
// environment unless Environment sets it.
type Pty struct {
	Rows, Cols int
	Term       string
}

// Usage is what the processes of an execution's scope that have ended
// used, as the kernel accounts it to their reaper (protocol 4.8).
type Usage struct {
	CPUUserMs   int64 `json:"cpuUserMs"`
	CPUSystemMs int64 `json:"cpuSystemMs"`
	MaxRSSBytes int64 `json:"maxRssBytes"` // the largest of one process
	Processes   int64 `json:"processes"`   // the subject and every orphan its shim reaped
	ReadBytes   int64 `json:"readBytes"`   // storage I/O, in 512-byte blocks × 512
	WriteBytes  int64 `json:"writeBytes"`
}

// CPU is the user and system CPU time.
func (u Usage) CPU() time.Duration {
	return time.Duration(u.CPUUserMs+u.CPUSystemMs) * time.Millisecond
}

// Causes of an execution's end (protocol 4.8), given only with the
// kernel's evidence.
const (
	CauseOOM   = protocol.CauseOOM   // the OOM killer killed a process of the scope
	CauseLimit = protocol.CauseLimit // a process exceeded the limit Executed.Limit names
)

// ExecutionUsage is the whole usage of an execution kept for its
// survivors (Status.SurvivorsUsage, Verified.SurvivorsUsage): its reply's
// and its survivors' that ended since; Complete once all have ended.
type ExecutionUsage struct {
	Execution string `json:"execution"`
	Usage     Usage  `json:"usage"`
	Complete  bool   `json:"complete"`
}

// Executed is relayd's reply to an execute. It never holds the token.
type Executed struct {
	Termination      Termination `json:"termination"`
	ExitCode         int         `json:"exitCode"`
	Stdout           string      `json:"stdout"`
	StdoutTruncated  bool        `json:"stdoutTruncated,omitempty"` // raw mode: stdout was cut
	Stderr           string      `json:"stderr,omitempty"`          // with CaptureStderr (extension)
	StderrTruncated  bool        `json:"stderrTruncated,omitempty"` // with CaptureStderr (extension)
	Diagnostic       Diagnostic  `json:"diagnostic"`
	Execution        string      `json:"execution"`
	Settlement       Settlement  `json:"settlement"`
	Survivors        []Survivor  `json:"survivors"`
	SurvivorsOmitted int         `json:"survivorsOmitted,omitempty"`
	Scope            struct {
		Mechanism string `json:"mechanism"`
	} `json:"scope"`
	Signal     string `json:"signal,omitempty"` // a signal relayd did not send killed the subject
	Detail     string `json:"detail,omitempty"` // a sentence for people when something went wrong
	DurationMs int64  `json:"durationMs"`
	// Ignored names the fields of the request that relayd did not know
	// (protocol 4.6); the client has logged them (Dialer.Log).
	Ignored []string `json:"ignored,omitempty"`
	// Usage is what the scope's ended processes used (protocol 4.8); nil
	// from an older relayd.
	Usage *Usage `json:"usage,omitempty"`
	// Cause is CauseOOM or CauseLimit (with Limit naming the limit), or ""
	// when relayd has no evidence of either.
	Cause string `json:"cause,omitempty"`
	Limit string `json:"limit,omitempty"`
	// Limits are the limits relayd applied.
	Limits map[string]uint64 `json:"limits,omitempty"`
	// A shell session's command (protocol 4.7): the session, the shell's
	// directory afterwards, and whether the shell is gone.
	Session      string `json:"session,omitempty"`
	Cwd          string `json:"cwd,omitempty"`
	SessionEnded bool   `json:"sessionEnded,omitempty"`
}

// Duration is the subject's wall time.
func (e *Executed) Duration() time.Duration {
	return time.Duration(e.DurationMs) * time.Millisecond
}

// Ready is relayd's ready message: its answer to a probe, and the first line
// of a relayd that dials out.
type Ready struct {
	Instruction string   `json:"instruction"` // the task instruction; "" when none
	Cwd         string   `json:"cwd"`         // default working directory of executions
	Protocol    int      `json:"protocol"`
	Version     string   `json:"version"`
	Scope       string   `json:"scope"`              // the scope mechanism, e.g. "cgroup"
	Detached    []string `json:"detached,omitempty"` // dial-out: detached executions (extension)
	// Extensions lists what relayd serves beyond the base protocol, e.g.
	// "stream", "detach", "ignored", "trial", "files" (protocol 4.6); nil from an older relayd.
	Extensions []string `json:"extensions,omitempty"`
	Ignored    []string `json:"ignored,omitempty"` // fields of the request relayd did not know (protocol 4.6)
}

// Verified is relayd's reply to verify.
type Verified struct {
	// Quiescent: nothing of this connection runs and every settlement was
	// confirmed. Survivors do not count against it.
	Quiescent        bool       `json:"quiescent"`
	Survivors        []Survivor `json:"survivors"`
	SurvivorsOmitted int        `json:"survivorsOmitted,omitempty"`
	// Boundary numbers a trial boundary (VerifyOptions.All), from 1; 0 for
	// an ordinary verify.
	Boundary int `json:"boundary,omitempty"`
	// Settled lists the pids a boundary with SettleSurvivors settled.
	Settled []int    `json:"settled,omitempty"`
	Ignored []string `json:"ignored,omitempty"` // fields of the request relayd did not know (protocol 4.6)
	// SurvivorsUsage: at a trial boundary, the usage of each execution
	// kept for its survivors (protocol 4.8).
	SurvivorsUsage []ExecutionUsage `json:"survivorsUsage,omitempty"`
	// Files: at a trial boundary with VerifyOptions.Files, the changes
	// under its protected paths and, with Restore, what was put back.
	Files *FilesAtBoundary `json:"files,omitempty"`
}

// Status is relayd's answer to Conn.Status (protocol 4.6, "Looking without
// touching"): what runs, the shell sessions, the survivors a trial boundary
// would list, and how many boundaries were drawn. Asking changed nothing.
type Status struct {
	Executions        []ExecutionStatus `json:"executions"`
	ExecutionsOmitted int               `json:"executionsOmitted,omitempty"`
	// Sessions are the open shell sessions (protocol 4.7), kept raw until
	// this client knows them; empty before relayd has them.
	Sessions         []json.RawMessage `json:"sessions"`
	Survivors        []Survivor        `json:"survivors"`
	SurvivorsOmitted int               `json:"survivorsOmitted,omitempty"`
	// Boundary counts the trial boundaries drawn so far; 0 before the first.
	Boundary int      `json:"boundary"`
	Ignored  []string `json:"ignored,omitempty"` // fields of the request relayd did not know (protocol 4.6)
	// SurvivorsUsage is the usage of each execution kept for its
	// survivors (protocol 4.8).
	SurvivorsUsage []ExecutionUsage `json:"survivorsUsage,omitempty"`
}

// ExecutionStatus is one execution in a Status: one that runs, or one
// detached that waits for an Attach.
type ExecutionStatus struct {
	Execution   string   `json:"execution"`
	Program     string   `json:"program"`
	Args        []string `json:"args"`
	ArgsOmitted int      `json:"argsOmitted,omitempty"` // args left out (relayd bounds them to 4 KiB with Program)
	// User is whom the subject runs as; "" for relayd's own user.
	User string `json:"user,omitempty"`
	// StartedMs is how long ago relayd accepted the execute, in ms.
	StartedMs int64 `json:"startedMs"`
	// TimeoutMs is what is left of its timeoutMs, in ms; nil without one.
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
	Detached  bool   `json:"detached"`
	Ended     bool   `json:"ended,omitempty"` // detached, ended, its reply waiting for an Attach
}

// Started is how long ago the execution was accepted.
func (e ExecutionStatus) Started() time.Duration {
	return time.Duration(e.StartedMs) * time.Millisecond
}

// VerifyOptions make a verify the trial boundary of protocol 4.6.
type VerifyOptions struct {
	// All: end every execution of relayd, on any connection or detached,
	// and list the survivors of every execution (relayd lists "trial" in
	// Ready.Extensions).
	All bool
	// SettleSurvivors settles those survivors too ("survivors":"settle"),
	// except Keep and their descendants. It needs All.
	SettleSurvivors bool
	// Keep are the processes left alone by SettleSurvivors, with their
	// descendants (a service the verifier must find), each as a survivors
	// list reported it (Survivor.Kept). It needs All.
	Keep []Kept
	// Files asks for the filesystem half of the boundary (protocol 4.9;
	// "marks" in Ready.Extensions): the changes under Files.Protect since
	// the mark, in Verified.Files. It needs All.
	Files *BoundaryFiles
}
