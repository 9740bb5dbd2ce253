package protocol

import "encoding/json"

// Replies, relayd to controller (section 4). Fields are in the order of
// protocol.md; a field marked omitempty is optional. Token is set only on a
// connection that has authenticated, or in dial-out mode; an ErrorReply never
// carries one.

// Termination words of an executed reply.
const (
	Exited           = "exited"
	FrameworkTimeout = "framework_timeout"
)

// Settlement words of an executed reply.
const (
	SettleNone      = "none"
	SettleSettled   = "settled"
	SettleDestroyed = "destroyed"
	SettleFailed    = "failed"
)

// Exit codes of section 4.2's table (besides the subject's own status, and
// 128+S for a signal S that relayd did not send).
const (
	ExitFramework        = 124 // framework_timeout
	ExitScopeUnavailable = 111 // the scope could not be set up; nothing ran
	ExitNotFound         = 127 // program not found
	ExitNotExecutable    = 126 // program not executable, or bad cwd
)

// Ready is the reply to ready, and relayd's first line in dial-out mode.
type Ready struct {
	Token       string          `json:"token,omitempty"`
	Kind        string          `json:"kind"` // "ready"
	ID          json.RawMessage `json:"id,omitempty"`
	Instruction string          `json:"instruction"`
	Cwd         string          `json:"cwd"`
	Protocol    int             `json:"protocol"` // Version
	Version     string          `json:"version"`
	Scope       string          `json:"scope"`
	// Detached names the executions waiting for an attach (section 4.5),
	// in dial-out mode only; absent when there are none.
	Detached []string `json:"detached,omitempty"`
	// Extensions lists what this relayd serves (section 4.6, Extensions).
	Extensions []string `json:"extensions,omitempty"`
	// Ignored names the request's top-level fields relayd does not know
	// (section 4.6, Message.Ignored); absent when there are none.
	Ignored []string `json:"ignored,omitempty"`
	// Debug is filled only by test builds (the relayd_faults tag), for
	// tests that check relayd's own resources; production never sets it.
	Debug map[string]int `json:"debug,omitempty"`
}

// MaxSurvivors is the most survivors one reply lists (sections 4.2 and
// 4.3); survivorsOmitted counts the rest, so that a subject that leaves
// thousands of processes cannot make a reply grow with them.
const MaxSurvivors = 1000

// Survivor is a process of a scope still alive after its subject exited,
// with what a harness needs to judge it (section 4.6): whose it is, what
// it serves, since when.
type Survivor struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"` // [] in JSON when nil (unknown)
	// Execution names the execution whose scope the process is of.
	Execution string `json:"execution,omitempty"`
	// ArgvUnavailable: the command line could not be read (a zombie, an
	// exiting process, one read in the middle of an exec, twice); Argv
	// then holds the kernel's name of the process (comm), or nothing.
	ArgvUnavailable bool  `json:"argvUnavailable,omitempty"`
	UID             int   `json:"uid"`     // the real uid; -1 when unknown (the process ended while the reply was built)
	Listens         []int `json:"listens"` // local TCP ports it listens on, ascending; [] in JSON when nil
	Start           int64 `json:"start"`   // start time, milliseconds since the Unix epoch; 0 when unknown
	Session         int   `json:"session"` // session id; 0 when unknown
}

// MarshalJSON writes a nil Argv or Listens as [].
func (s Survivor) MarshalJSON() ([]byte, error) {
	type plain Survivor
	if s.Argv == nil {
		s.Argv = []string{}
	}
	if s.Listens == nil {
		s.Listens = []int{}
	}
	return json.Marshal(plain(s))
}

// ScopeInfo says how a scope was tracked.
type ScopeInfo struct {
	Mechanism string `json:"mechanism"`
}

// Executed is the reply to execute, sent once per execute when it ends.
type Executed struct {
	// Untrusted, when set, is why a session's command has no status that
	// can be trusted: the reply is an error (CatFailed) that says so,
	// never this executed (section 4.7).
	Untrusted        string          `json:"-"`
	Token            string          `json:"token,omitempty"`
	Kind             string          `json:"kind"` // "executed"
	ID               json.RawMessage `json:"id,omitempty"`
	Termination      string          `json:"termination"` // Exited or FrameworkTimeout
	ExitCode         int             `json:"exitCode"`
	Stdout           string          `json:"stdout"`
	Diagnostic       Diagnostic      `json:"diagnostic"`
	Execution        string          `json:"execution"`
	Settlement       string          `json:"settlement"`                 // a Settle word
	Survivors        []Survivor      `json:"survivors"`                  // [] in JSON when nil; at most MaxSurvivors
	SurvivorsOmitted int             `json:"survivorsOmitted,omitempty"` // survivors left out of Survivors
	Scope            ScopeInfo       `json:"scope"`
	Signal           string          `json:"signal,omitempty"`
	StdoutTruncated  *bool           `json:"stdoutTruncated,omitempty"` // raw mode only
	Stderr           *string         `json:"stderr,omitempty"`          // with captureStderr only (section 4.5)
	StderrTruncated  *bool           `json:"stderrTruncated,omitempty"` // with captureStderr only
	Detail           string          `json:"detail,omitempty"`
	DurationMs       int64           `json:"durationMs"`
	Ignored          []string        `json:"ignored,omitempty"` // the request's unknown fields (section 4.6)
	Usage            *Usage          `json:"usage,omitempty"`   // section 4.8; nil when nothing ran
	Cause            string          `json:"cause,omitempty"`   // CauseOOM, CauseLimit (section 4.8)
	Limit            string          `json:"limit,omitempty"`   // with CauseLimit: the limit's name
	Limits           Limits          `json:"limits,omitempty"`  // the limits applied (section 4.8)
	Session          string          `json:"session,omitempty"` // a session's command (4.7): the session
	Cwd              string          `json:"cwd,omitempty"`     // and its shell's directory afterwards
	SessionEnded     bool            `json:"sessionEnded,omitempty"`
}

// Usage is what the processes of an execution's scope that have ended
// used (section 4.8).
type Usage struct {
	CPUUserMs   int64 `json:"cpuUserMs"`
	CPUSystemMs int64 `json:"cpuSystemMs"`
	MaxRSSBytes int64 `json:"maxRssBytes"`
	Processes   int64 `json:"processes"`
	ReadBytes   int64 `json:"readBytes"`
	WriteBytes  int64 `json:"writeBytes"`
}

// The values of cause (section 4.8): why a process of the scope ended,
// with the kernel's evidence.
const (
	CauseOOM   = "oom"
	CauseLimit = "limit"
)

// MarshalJSON writes a nil Survivors as [].
func (e Executed) MarshalJSON() ([]byte, error) {
	type plain Executed
	if e.Survivors == nil {
		e.Survivors = []Survivor{}
	}
	return json.Marshal(plain(e))
}

// Started tells a controller that asked for stream or detachMs the name of
// its execution as soon as the subject runs (section 4.5).
type Started struct {
	Token     string          `json:"token,omitempty"`
	Kind      string          `json:"kind"` // "started"
	ID        json.RawMessage `json:"id,omitempty"`
	Execution string          `json:"execution"`
	Ignored   []string        `json:"ignored,omitempty"` // the execute's unknown fields, as in its executed reply
}

// Output is one coalesced piece of a streamed execution's output (section
// 4.5). Data is text: encoding/json replaces invalid UTF-8 with U+FFFD.
// Dropped counts the bytes of this stream left out since the previous
// Output of the stream (a slow reader, or nobody attached).
type Output struct {
	Token     string          `json:"token,omitempty"`
	Kind      string          `json:"kind"` // "output"
	ID        json.RawMessage `json:"id,omitempty"`
	Execution string          `json:"execution"`
	Stream    string          `json:"stream"` // "stdout" or "stderr"
	Data      string          `json:"data"`
	Dropped   int64           `json:"dropped,omitempty"`
}

// Verified is the reply to verify.
type Verified struct {
	Token            string          `json:"token,omitempty"`
	Kind             string          `json:"kind"` // "verified"
	ID               json.RawMessage `json:"id,omitempty"`
	Quiescent        bool            `json:"quiescent"`
	Survivors        []Survivor      `json:"survivors"`                  // [] in JSON when nil; at most MaxSurvivors
	SurvivorsOmitted int             `json:"survivorsOmitted,omitempty"` // survivors left out of Survivors
	// The trial boundary's (section 4.6): its number, counting from 1, and
	// with "survivors":"settle" the pids it settled ([] when none).
	Boundary int      `json:"boundary,omitempty"`
	Settled  *[]int   `json:"settled,omitempty"` // nil: not asked to settle
	Ignored  []string `json:"ignored,omitempty"` // the request's unknown fields (section 4.6)
	// SurvivorsUsage is, for each execution whose subject exited with
	// survivors left alone, its whole usage: its reply's and its
	// survivors' that have ended since (section 4.8; docs/protocol.md).
	SurvivorsUsage []ExecutionUsage `json:"survivorsUsage,omitempty"`
	// Files is the filesystem half of the boundary (section 4.9), when
	// verify asked for it.
	Files *BoundaryFiles `json:"files,omitempty"`
}

// ExecutionUsage is the usage of one execution kept for its survivors:
// Complete once every process of its scope has ended and is counted.
type ExecutionUsage struct {
	Execution string `json:"execution"`
	Usage     Usage  `json:"usage"`
	Complete  bool   `json:"complete"`
}

// MaxSurvivorsUsage bounds SurvivorsUsage.
const MaxSurvivorsUsage = 1000

// MarshalJSON writes a nil Survivors as [].
func (v Verified) MarshalJSON() ([]byte, error) {
	type plain Verified
	if v.Survivors == nil {
		v.Survivors = []Survivor{}
	}
	return json.Marshal(plain(v))
}

// Status is the reply to status (section 4.6, "Looking without touching"):
// what runs, the shell sessions, the survivors a trial boundary would list
// and how many boundaries were drawn, answered at once, changing nothing.
type Status struct {
	Token             string            `json:"token,omitempty"`
	Kind              string            `json:"kind"` // "status"
	ID                json.RawMessage   `json:"id,omitempty"`
	Executions        []ExecutionStatus `json:"executions"`                  // [] in JSON when nil; at most MaxStatusExecutions
	ExecutionsOmitted int               `json:"executionsOmitted,omitempty"` // executions left out of Executions
	Sessions          []SessionStatus   `json:"sessions"`                    // the open shell sessions (4.7)
	Survivors         []Survivor        `json:"survivors"`                   // [] in JSON when nil; at most MaxSurvivors
	SurvivorsOmitted  int               `json:"survivorsOmitted,omitempty"`  // survivors left out of Survivors
	Boundary          int               `json:"boundary"`                    // trial boundaries drawn so far; 0 before the first
	Ignored           []string          `json:"ignored,omitempty"`           // the request's unknown fields (section 4.6)
	SurvivorsUsage    []ExecutionUsage  `json:"survivorsUsage,omitempty"`    // as Verified's (section 4.8)
}

// MaxStatusExecutions is the most executions one status reply lists;
// executionsOmitted counts the rest.
const MaxStatusExecutions = 1000

// MaxStatusArgsBytes bounds the program and the args of one execution in
// a status reply, as a survivor's argv is bounded: the program is cut at
// a character boundary, and args that would pass the bound are counted
// in argsOmitted instead.
const MaxStatusArgsBytes = 4096

// ExecutionStatus is one execution in a status reply: one that runs, or
// one detached that waits for an attach (section 4.5).
type ExecutionStatus struct {
	Execution   string   `json:"execution"`
	Program     string   `json:"program"` // the execute's command, as given
	Args        []string `json:"args"`    // [] in JSON when nil
	ArgsOmitted int      `json:"argsOmitted,omitempty"`
	// User is whom the subject runs as: the execute's user, else
	// --subject-user; absent when it runs as relayd's own user.
	User      string `json:"user,omitempty"`
	StartedMs int64  `json:"startedMs"`           // how long ago relayd accepted the execute, ms
	TimeoutMs *int64 `json:"timeoutMs,omitempty"` // what is left of its timeoutMs, ms (0: passed); absent without one
	Detached  bool   `json:"detached"`            // its connection was lost; it waits for an attach
	// Ended: a detached execution that has ended; its reply waits for an
	// attach until detachMs passes.
	Ended bool `json:"ended,omitempty"`
}

// MarshalJSON writes a nil Args as [].
func (e ExecutionStatus) MarshalJSON() ([]byte, error) {
	type plain ExecutionStatus
	if e.Args == nil {
		e.Args = []string{}
	}
	return json.Marshal(plain(e))
}

// MarshalJSON writes nil lists as [].
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status
	if s.Executions == nil {
		s.Executions = []ExecutionStatus{}
	}
	if s.Sessions == nil {
		s.Sessions = []SessionStatus{}
	}
	if s.Survivors == nil {
		s.Survivors = []Survivor{}
	}
	return json.Marshal(plain(s))
}

// ErrorReply is an error reply (section 4.4). It never carries the token.
type ErrorReply struct {
	Kind  string          `json:"kind"` // "error"
	ID    json.RawMessage `json:"id,omitempty"`
	Error *Error          `json:"error"`
	// Ignored names the request's unknown fields (section 4.6), on an
	// error to a request that authenticated; absent otherwise.
	Ignored []string `json:"ignored,omitempty"`
}
